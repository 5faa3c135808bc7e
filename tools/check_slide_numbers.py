#!/usr/bin/env python3
"""check_slide_numbers.py DECK_DIR: no slide states a measurement from
another machine as if it were this one's.

A time or a rate in a built deck's slide text (a number with ms, µs, s,
GB/s, MB/s, GFLOP/s, TFLOP/s or tok/s) must either be this build's own,
filled in by tools/make_slides.sh from the runs the charts are drawn from
(a span of class "measured"), or sit on a slide that says where its numbers
come from (a span of class "source": "the kit's reference VM, 2 cores,
November 2026", a paper, a spec sheet). Code, formulas and speaker notes
are not slide text. Exit status 0 when every deck passes, 1 with one line
per number otherwise, 2 when there is no deck.
"""
import glob
import html.parser
import os
import re
import sys

UNIT = r"(?:GB/s|MB/s|GFLOP/s|TFLOP/s|k?\s?tok/s|ms|µs|us|s)(?![\w/])"
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?" + UNIT)
SKIPPED = {"pre", "code", "math", "script", "style"}   # not slide text


class Slides(html.parser.HTMLParser):
    """Each slide's title, its text outside SKIPPED and measured spans, and
    whether it has a source span."""

    def __init__(self):
        super().__init__()
        self.slides = []   # [title, text, has_source]
        self.stack = []    # (tag, skips_text)
        self.in_title = False

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "section" and ("level2" in classes or "title" in classes):
            self.slides.append(["", "", False])
        if tag in ("h1", "h2") and self.slides and not self.slides[-1][0]:
            self.in_title = True
        if "source" in classes and self.slides:
            self.slides[-1][2] = True
        skips = tag in SKIPPED or "measured" in classes or "notes" in classes
        if tag not in ("br", "img", "hr", "meta", "link", "input"):
            self.stack.append((tag, skips or (bool(self.stack) and self.stack[-1][1])))

    def handle_endtag(self, tag):
        if tag in ("h1", "h2"):
            self.in_title = False
        if any(t == tag for t, _ in self.stack):
            while self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data):
        if not self.slides:
            return
        if self.in_title:
            self.slides[-1][0] += data
        if not (self.stack and self.stack[-1][1]):
            self.slides[-1][1] += data


def problems(path):
    parser = Slides()
    parser.feed(open(path, encoding="utf-8").read())
    name = os.path.basename(path)[:-len(".html")]
    for i, (title, text, has_source) in enumerate(parser.slides):
        figures = FIGURE.findall(" ".join(text.split()))
        if figures and not has_source:
            yield (f"{name} slide {i + 1} ({' '.join(title.split())!r}): {', '.join(figures)}: "
                   "neither this build's measurement ({{key}}) nor labelled with its source "
                   "([...]{.source})")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_slide_numbers.py DECK_DIR")
    decks = sorted(glob.glob(os.path.join(sys.argv[1], "[0-9][0-9]_*.html")))
    if not decks:
        print(f"check_slide_numbers: no NN_name.html in {sys.argv[1]}", file=sys.stderr)
        return 2
    found = [p for d in decks for p in problems(d)]
    for p in found:
        print(p)
    print(f"check_slide_numbers: {len(decks)} decks, {len(found)} slides with unsourced figures")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
