#!/usr/bin/env python3
"""check_slides.py DECK_DIR SHOT_DIR: look at every slide as a person would.

For each DECK_DIR/NN_name.html (tools/make_slides.sh), headless Chromium
opens the deck with ?check: the template's script lays every slide out at
1280x720 and reports what it found (a slide that overflows, an image that
did not load or is not inlined, an empty slide). Then Chromium screenshots
the deck with ?sheet (every slide at its real size, SHEET_COLUMNS to a row:
one browser for the whole deck, not one per slide), cut into
SHOT_DIR/NN_name-SS.png, and a slide whose screenshot has next to no ink
on it (blank: the page did not render) fails too.

Exit status 0 when every slide of every deck is fine, 1 when one is not
(each problem on a line), 2 when it cannot check (no Chromium, no PIL, no
deck). Chromium is Debian's `chromium`; CHROMIUM=path picks another.
"""
import glob
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

INK_FRACTION = 0.002   # a slide with a title alone has about 1% dark pixels
SLIDE_W, SLIDE_H = 1280, 720
SHEET_COLUMNS = 4      # the template's ?sheet grid


def chromium():
    exe = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        sys.exit("check_slides: no chromium (apt-get install chromium)")
    return exe


def browse(exe, profile, args, url, size=(SLIDE_W, SLIDE_H), timeout=60):
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
           *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def screenshot_slides(exe, profile, path, n, shot_dir, name):
    """Slides 1..n of the deck at path into shot_dir/name-SS.png: one
    screenshot of the ?sheet grid, cut; returns the paths (None: missing)."""
    from PIL import Image
    rows = (n + SHEET_COLUMNS - 1) // SHEET_COLUMNS
    sheet = os.path.join(shot_dir, f"{name}-sheet.png")
    browse(exe, profile, ["--virtual-time-budget=5000", f"--screenshot={sheet}"],
           "file://" + os.path.abspath(path) + "?sheet",
           size=(SHEET_COLUMNS * SLIDE_W, rows * SLIDE_H), timeout=120)
    if not os.path.exists(sheet):
        return [None] * n
    shots = []
    with Image.open(sheet) as img:
        for i in range(n):
            x, y = i % SHEET_COLUMNS * SLIDE_W, i // SHEET_COLUMNS * SLIDE_H
            shot = os.path.join(shot_dir, f"{name}-{i + 1:02d}.png")
            img.crop((x, y, x + SLIDE_W, y + SLIDE_H)).save(shot)
            shots.append(shot)
    os.remove(sheet)
    return shots


def check_report(exe, profile, path):
    """The template's own verdict per slide: [{slide, title, problems}]."""
    res = browse(exe, profile, ["--virtual-time-budget=10000", "--dump-dom"],
                 "file://" + os.path.abspath(path) + "?check")
    m = re.search(r'<pre id="slide-check">(.*?)</pre>', res.stdout, re.S)
    if not m:
        return None
    return json.loads(html.unescape(m.group(1)))


def ink(png):
    """Fraction of the slide area's pixels that are darker than the page."""
    from PIL import Image
    img = Image.open(png).convert("L")
    w, h = img.size
    dark = sum(img.histogram()[:160])   # pixels of grey level 0..159
    # the window around a 16:9 slide at 1280x720 is the slide itself
    return dark / float(w * h)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_slides.py DECK_DIR SHOT_DIR")
    deck_dir, shot_dir = sys.argv[1:]
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("check_slides: no PIL (apt-get install python3-pil)", file=sys.stderr)
        return 2
    decks = sorted(glob.glob(os.path.join(deck_dir, "[0-9][0-9]_*.html")))
    if not decks:
        print(f"check_slides: no NN_name.html in {deck_dir} (make slides)", file=sys.stderr)
        return 2
    exe = chromium()
    os.makedirs(shot_dir, exist_ok=True)
    problems, total = [], 0
    with tempfile.TemporaryDirectory() as profile:
        for path in decks:
            name = os.path.basename(path)[:-len(".html")]
            report = check_report(exe, profile, path)
            if report is None:
                problems.append(f"{name}: the deck's check did not run (no slide-check block)")
                continue
            shots = screenshot_slides(exe, profile, path, len(report), shot_dir, name)
            for s, shot in zip(report, shots):
                total += 1
                label = f"{name} slide {s['slide']} ({s['title'].strip()[:50]!r})"
                problems += [f"{label}: {p}" for p in s["problems"]]
                if not shot:
                    problems.append(f"{label}: no screenshot")
                elif ink(shot) < INK_FRACTION:
                    problems.append(f"{label}: blank on screen ({ink(shot):.4f} of it inked)")
    for p in problems:
        print(p)
    print(f"check_slides: {len(decks)} decks, {total} slides, {len(problems)} problems; "
          f"screenshots in {shot_dir}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
