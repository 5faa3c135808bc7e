#!/usr/bin/env bash
# make_slides.sh [OUT_DIR]: every deck slides/NN_name.md into one
# self-contained HTML file OUT_DIR/NN_name.html (default build/slides), and
# OUT_DIR/index.html listing them with their labs. pandoc with the kit's
# template (slides/template.html); formulas as MathML, images inlined from
# OUT_DIR/fig/ (tools/slide_figures.sh makes the charts, tools/slide_diagrams.py
# draws the diagrams, as SVG, every time): each file opens offline.
#
# A deck's measured numbers are the build's: {{key}} in a deck is replaced
# by the value slide_figures.sh wrote for key into OUT_DIR/fig/values.txt
# (key=value lines, from the same runs the charts are drawn from), as a
# span of class "measured". A number from elsewhere sits on a slide that
# says where, [...]{.source} (tools/check_slide_numbers.py checks both).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-build/slides}
die() { echo "slides: error: $*" >&2; exit 2; }
command -v pandoc > /dev/null || die "pandoc is not installed (apt-get install pandoc)"
mkdir -p "$out"
/usr/bin/python3 tools/slide_diagrams.py "$out" || die "tools/slide_diagrams.py failed"
decks=(slides/[0-9][0-9]_*.md)
[ -e "${decks[0]}" ] || die "no slides/NN_name.md"
# fill MD: the deck with its {{key}} placeholders replaced from values.txt,
# on stdout; a key without a value is one error line naming it
values="$out/fig/values.txt"
fill() {
    awk -v vals="$values" -v md="$1" '
        BEGIN { while ((getline line < vals) > 0) { i = index(line, "=")
                    if (i) v[substr(line, 1, i - 1)] = substr(line, i + 1) } }
        { rest = $0; done = ""
          while (match(rest, /[{][{][A-Za-z0-9_.]+[}][}]/)) {
              key = substr(rest, RSTART + 2, RLENGTH - 4)
              if (!(key in v)) { print key; exit 1 }
              done = done substr(rest, 1, RSTART - 1) "[" v[key] "]{.measured}"
              rest = substr(rest, RSTART + RLENGTH) }
          print done rest }' "$1"
}
rows=""
for md in "${decks[@]}"; do
    name=$(basename "$md" .md)
    # every figure a deck names must exist: a missing one is an error here,
    # not a broken image in the browser
    while read -r fig; do
        [ -s "$out/$fig" ] || die "$md shows $fig, which is not in $out/ (run tools/slide_figures.sh $out, or make slides)"
    done < <(grep -o '](fig/[^)]*)' "$md" | sed 's/^](//; s/)$//')
    filled=$(fill "$md") || die "$md uses {{$(tail -n 1 <<< "$filled")}}, which $values does not have (run tools/slide_figures.sh $out, or make slide-figures)"
    pandoc -f markdown-smart -t html5 --template slides/template.html --section-divs \
        --mathml --self-contained --resource-path="$out" -o "$out/$name.html" <<< "$filled" \
        || die "pandoc failed on $md"
    title=$(sed -n 's/^title: *"\(.*\)"$/\1/p' "$md" | head -n 1)
    slides=$(grep -c '^## ' "$md")
    rows+="<tr><td><a href=\"$name.html\">${title:-$name}</a></td><td>$((slides + 1))</td>"
    rows+="<td><a href=\"../../labs/$name/README.md\">labs/$name</a></td></tr>"$'\n'
    echo "slides: wrote $out/$name.html ($((slides + 1)) slides)"
done
cat > "$out/index.html" <<HTML
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Slides: distributed training, lab by lab</title>
<style>
body { font: 18px/1.5 "DejaVu Sans", sans-serif; max-width: 900px; margin: 40px auto; color: #1d1d1d; }
h1 { color: #1f3a68; } table { border-collapse: collapse; width: 100%; }
td, th { text-align: left; padding: 8px 12px; border-bottom: 1px solid #ccc; }
th { border-bottom: 2px solid #1f3a68; }
</style></head><body>
<h1>Slides: distributed training, lab by lab</h1>
<p>One deck per lab, for the lecture before it. Each file opens offline; arrows, space or a
click move through it, <code>#N</code> in the address opens slide N, and the key N shows the
speaker notes. Printed (to PDF), a deck is one slide a page.</p>
<table><tr><th>deck</th><th>slides</th><th>lab</th></tr>
$rows</table>
</body></html>
HTML
echo "slides: wrote $out/index.html"
