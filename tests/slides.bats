#!/usr/bin/env bats
# The lecture decks (slides/, `make slides`): each builds into one HTML file
# that opens offline, the index lists them, and every slide, rendered in
# headless Chromium and screenshotted, is neither blank nor overflowing nor
# missing an image.
load helpers

# The figures come from the labs' benchmarks (short runs here), once for
# the whole file.
setup_file() {
    export SLIDES="$BATS_FILE_TMPDIR/slides"
    # the benchmarks run the solutions (a handout without them: the tests skip)
    if [ -d "$ROOT/solutions/00_single_device" ] && [ -d "$ROOT/solutions/01_collectives" ] \
        && [ -d "$ROOT/solutions/02_ddp" ] && [ -d "$ROOT/solutions/03_zero" ]; then
        SLIDES_QUICK=1 BENCH_COPY=solutions timeout 600 bash "$ROOT/tools/slide_figures.sh" "$SLIDES" \
            > "$BATS_FILE_TMPDIR/figures.log" 2>&1 || true
    fi
}

need_figures() {
    require_solution 00 01 02 03
    [ -s "$SLIDES/fig/03/comm.png" ] || { cat "$BATS_FILE_TMPDIR/figures.log"; return 1; }
}

# need_decks: the figures, and the decks built from them (by the first test
# that needs them: the later ones look at the same files)
need_decks() {
    need_figures
    [ -s "$SLIDES/index.html" ] || t 300 bash "$ROOT/tools/make_slides.sh" "$SLIDES" > /dev/null
}

@test "slides: every lab has a deck; each builds into one self-contained HTML file, listed by the index" {
    need_figures
    run t 300 bash "$ROOT/tools/make_slides.sh" "$SLIDES"
    echo "$output"
    [ "$status" -eq 0 ]
    for lab in "$ROOT"/labs/[0-9][0-9]_*/; do
        name=$(basename "$lab")
        [ -f "$ROOT/slides/$name.md" ]
        f="$SLIDES/$name.html"
        [ -s "$f" ]
        grep -q "href=\"$name.html\"" "$SLIDES/index.html"
        # offline: no image, script or style from a file or a server
        ! grep -Eq '<img[^>]* src="(fig/|https?:)' "$f" || return 1
        ! grep -Eq '<(script|link)[^>]* (src|href)="https?:' "$f" || return 1
        grep -q '<math' "$f"
        # 15-25 slides, as a lecture wants
        n=$(grep -c '^## ' "$ROOT/slides/$name.md")
        [ "$n" -ge 14 ] && [ "$n" -le 26 ]
    done
}

# Every time or rate a slide states is this build's (a {{key}} filled from
# the runs its charts come from) or labelled with its source
@test "slides: no slide states an unsourced measurement; {{key}} is filled from this build's runs" {
    need_decks
    run /usr/bin/python3 "$ROOT/tools/check_slide_numbers.py" "$SLIDES"
    echo "$output"
    [ "$status" -eq 0 ]
    # deck 01's measured slide shows the values of the run its chart was drawn from
    local ring
    ring=$(sed -n 's/^01.np2.student.largest=//p' "$SLIDES/fig/values.txt")
    [ -n "$ring" ]
    grep -q "ring <span class=\"measured\">$ring</span> GB/s" "$SLIDES/01_collectives.html"
    # a bare figure, a key with no value: each named
    mkdir -p "$BATS_TEST_TMPDIR/kit/slides" "$BATS_TEST_TMPDIR/kit/tools" "$BATS_TEST_TMPDIR/out/fig"
    cp "$ROOT/slides/template.html" "$BATS_TEST_TMPDIR/kit/slides/"
    cp "$ROOT/tools/make_slides.sh" "$ROOT/tools/slide_diagrams.py" "$BATS_TEST_TMPDIR/kit/tools/"
    echo "09.busbw=4.2" > "$BATS_TEST_TMPDIR/out/fig/values.txt"
    printf -- '---\ntitle: "x"\n---\n\n## Ours\n\n- {{09.busbw}} GB/s\n\n## Theirs\n\n- 3.34 GB/s in `12 ms`\n\n## Labelled\n\n- 3.34 GB/s [(a VM, 2026)]{.source}\n' \
        > "$BATS_TEST_TMPDIR/kit/slides/09_x.md"
    t 60 bash "$BATS_TEST_TMPDIR/kit/tools/make_slides.sh" "$BATS_TEST_TMPDIR/out" > /dev/null
    run /usr/bin/python3 "$ROOT/tools/check_slide_numbers.py" "$BATS_TEST_TMPDIR/out"
    echo "$output"
    [ "$status" -eq 1 ]
    [ "$(grep -c "^09_x slide" <<< "$output")" -eq 1 ]
    [[ "$output" == *"09_x slide 3 ('Theirs'): 3.34 GB/s: neither this build's measurement"* ]]
    sed -i 's/09.busbw/09.missing/' "$BATS_TEST_TMPDIR/kit/slides/09_x.md"
    run t 60 bash "$BATS_TEST_TMPDIR/kit/tools/make_slides.sh" "$BATS_TEST_TMPDIR/out"
    [ "$status" -eq 2 ]
    [[ "$output" == *"slides/09_x.md uses {{09.missing}}, which $BATS_TEST_TMPDIR/out/fig/values.txt does not have"* ]]
}

@test "slides: a deck showing a figure that was not made is one clear error" {
    mkdir -p "$BATS_TEST_TMPDIR/kit/slides" "$BATS_TEST_TMPDIR/kit/tools"
    cp "$ROOT/slides/template.html" "$BATS_TEST_TMPDIR/kit/slides/"
    cp "$ROOT/tools/make_slides.sh" "$ROOT/tools/slide_diagrams.py" "$BATS_TEST_TMPDIR/kit/tools/"
    printf -- '---\ntitle: "x"\n---\n\n## One\n\n![a chart](fig/09/none.png)\n' > "$BATS_TEST_TMPDIR/kit/slides/09_x.md"
    run t 60 bash "$BATS_TEST_TMPDIR/kit/tools/make_slides.sh" "$BATS_TEST_TMPDIR/out"
    echo "$output"
    [ "$status" -eq 2 ]
    [[ "$output" == *"slides/09_x.md shows fig/09/none.png, which is not in "* ]]
}

@test "slides: in Chromium, no slide is blank, overflows or misses an image (screenshots of every slide)" {
    command -v chromium > /dev/null || skip "chromium is not installed (apt-get install chromium): no browser to look with"
    /usr/bin/python3 -c "import PIL" 2> /dev/null || skip "python3-pil is not installed"
    need_decks
    run t 900 /usr/bin/python3 "$ROOT/tools/check_slides.py" "$SLIDES" "$SLIDES/shots"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"problems; screenshots in"* ]]
    for lab in "$ROOT"/labs/[0-9][0-9]_*/; do
        [ -s "$SLIDES/shots/$(basename "$lab")-01.png" ]
    done
}

@test "slides: the checker fails an overflowing slide and names it" {
    command -v chromium > /dev/null || skip "chromium is not installed (apt-get install chromium): no browser to look with"
    /usr/bin/python3 -c "import PIL" 2> /dev/null || skip "python3-pil is not installed"
    mkdir -p "$BATS_TEST_TMPDIR/kit/slides" "$BATS_TEST_TMPDIR/kit/tools"
    cp "$ROOT/slides/template.html" "$BATS_TEST_TMPDIR/kit/slides/"
    cp "$ROOT/tools/make_slides.sh" "$ROOT/tools/slide_diagrams.py" "$BATS_TEST_TMPDIR/kit/tools/"
    { printf -- '---\ntitle: "x"\n---\n\n## Fits\n\n- one line\n\n## Far too long\n\n'
      for i in $(seq 1 30); do echo "- line $i"; done; } > "$BATS_TEST_TMPDIR/kit/slides/09_x.md"
    t 60 bash "$BATS_TEST_TMPDIR/kit/tools/make_slides.sh" "$BATS_TEST_TMPDIR/out" > /dev/null
    run t 120 /usr/bin/python3 "$ROOT/tools/check_slides.py" "$BATS_TEST_TMPDIR/out" "$BATS_TEST_TMPDIR/shots"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"09_x slide 3 ('Far too long'): overflows"* ]]
    [[ "$output" != *"slide 2"* ]]
}

# pdf_pages PDF: its page count (Chromium writes each page's dictionary plainly)
pdf_pages() { /usr/bin/python3 -c "import re,sys; print(len(re.findall(rb'/Type\s*/Page\b(?!s)', open(sys.argv[1],'rb').read())))" "$1"; }

# chrome ARGS... URL: headless Chromium, as tools/check_slides.py runs it
chrome() {
    timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$BATS_TEST_TMPDIR/profile" "$@" 2> /dev/null
}

@test "slides: a deck prints one slide a page; N (or ?notes) shows the speaker notes; flags keep their double dash" {
    command -v chromium > /dev/null || skip "chromium is not installed (apt-get install chromium): no browser to look with"
    local kit="$BATS_TEST_TMPDIR/kit" out="$BATS_TEST_TMPDIR/out"
    mkdir -p "$kit/slides" "$kit/tools"
    cp "$ROOT/slides/template.html" "$kit/slides/"
    cp "$ROOT/tools/make_slides.sh" "$ROOT/tools/slide_diagrams.py" "$kit/tools/"
    printf -- '---\ntitle: "x"\n---\n\n## One\n\n- run with --out DIR\n\n::: notes\nAsk what --out holds.\n:::\n\n## Two\n\n- two\n\n## Three\n\n- three\n' \
        > "$kit/slides/09_x.md"
    t 60 bash "$kit/tools/make_slides.sh" "$out" > /dev/null
    grep -q 'run with --out DIR' "$out/09_x.html"   # not an en dash
    chrome --no-pdf-header-footer --print-to-pdf="$BATS_TEST_TMPDIR/x.pdf" "file://$out/09_x.html" > /dev/null
    [ "$(pdf_pages "$BATS_TEST_TMPDIR/x.pdf")" -eq 4 ]   # the title and three slides
    run chrome --virtual-time-budget=3000 --dump-dom "file://$out/09_x.html?notes#2"
    [[ "$output" == *'<body class="notes-shown">'* ]]
    [[ "$(sed -n '/<div id="notes-panel">/,/<\/div>/p' <<< "$output")" == *"Ask what --out holds."* ]]
    # and a lab's deck, as built for the lecture
    need_decks
    chrome --no-pdf-header-footer --print-to-pdf="$BATS_TEST_TMPDIR/06.pdf" "file://$SLIDES/06_pipeline.html" > /dev/null
    [ "$(pdf_pages "$BATS_TEST_TMPDIR/06.pdf")" -eq $(($(grep -c '^## ' "$ROOT/slides/06_pipeline.md") + 1)) ]
}
