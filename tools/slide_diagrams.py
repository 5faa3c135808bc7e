#!/usr/bin/env python3
"""slide_diagrams.py OUT_DIR: the decks' diagrams, drawn as SVG by code.

Writes OUT_DIR/fig/diagrams/NAME.svg for every diagram below; the decks
show them as ![...](fig/diagrams/NAME.svg). Each is computed from the
kit's rules (shard sizes, ring schedule, bucket walk), not drawn by hand.
"""
import os
import sys

BLUE, ORANGE, GREEN, GREY, INK = "#4a7fb5", "#f08a3c", "#5aa55a", "#d9d9d9", "#1d1d1d"
FONT = 'font-family="DejaVu Sans, sans-serif"'


class Svg:
    def __init__(self, w, h):
        self.w, self.h, self.items = w, h, []

    def rect(self, x, y, w, h, fill, stroke="#ffffff", sw=1):
        self.items.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                          f'fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/>')

    def text(self, x, y, s, size=16, anchor="middle", fill=INK, weight="normal"):
        s = s.replace("&", "&amp;").replace("<", "&lt;")
        self.items.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" {FONT} '
                          f'text-anchor="{anchor}" fill="{fill}" font-weight="{weight}">{s}</text>')

    def line(self, x1, y1, x2, y2, color=INK, sw=2, arrow=False):
        end = ' marker-end="url(#arrow)"' if arrow else ""
        self.items.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                          f'stroke="{color}" stroke-width="{sw}"{end}/>')

    def save(self, path):
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'viewBox="0 0 {self.w} {self.h}"><defs><marker id="arrow" markerWidth="10" '
                'markerHeight="8" refX="9" refY="4" orient="auto"><path d="M0,0 L10,4 L0,8 z" '
                f'fill="{INK}"/></marker></defs><rect width="100%" height="100%" fill="white"/>')
        with open(path, "w") as f:
            f.write(head + "\n".join(self.items) + "</svg>\n")


def zero_stages(path, n=4):
    """Per rank, the bytes of model states each layout keeps: params 4 Phi,
    grads 4 Phi, AdamW moments 8 Phi, each whole or 1/N (ZeRO's stages)."""
    layouts = [("DDP", 1, 1, 1), ("ZeRO-1", 1, 1, n), ("ZeRO-2", 1, n, n), ("ZeRO-3", n, n, n)]
    s = Svg(1100, 440)
    u = 200 / 16.0   # pixels per Phi: a rank's 16 Phi of states is 200 px wide
    for row, (name, dp, dg, dm) in enumerate(layouts):
        y = 40 + row * 95
        s.text(20, y + 40, name, 20, "start", weight="bold")
        for r in range(n):
            x = 150 + r * 230
            if row == 0:
                s.text(x + 100, 24, f"rank {r}", 17)
            for offset, size, share, color in ((0, 4, dp, BLUE), (4, 4, dg, ORANGE),
                                               (8, 8, dm, GREEN)):
                # the whole state in grey; what rank r keeps in colour (slice r of N)
                w = size * u
                s.rect(x + offset * u, y + 10, w, 44, GREY)
                s.rect(x + offset * u + (w * r / share if share > 1 else 0), y + 10, w / share, 44,
                       color)
        total = 4 / dp + 4 / dg + 8 / dm
        s.text(1085, y + 40, f"{total:g} Φ", 18, "end")
    for k, (label, color) in enumerate((("params 4Φ", BLUE), ("grads 4Φ", ORANGE),
                                        ("AdamW m, v 8Φ", GREEN), ("held by another rank", GREY))):
        s.rect(150 + k * 230, 415, 18, 18, color)
        s.text(175 + k * 230, 430, label, 16, "start")
    s.save(path)


def ring_allreduce(path, p=4):
    """Ring all-reduce on p ranks, buffer in p chunks, as lab 01 schedules
    it: after reduce-scatter step t, rank r holds the sum of t + 1 ranks in
    chunk (r - t - 1) mod p, so after p - 1 steps chunk r (its own shard) is
    complete on rank r; the all-gather passes the complete chunks around in
    p - 1 more steps."""
    panels = [("start", 0)] + [(f"reduce-scatter {t}", t) for t in range(1, p)] + \
             [("after all-gather", 2 * (p - 1))]
    s = Svg(1160, 330)
    cell = 36
    for i, (title, t) in enumerate(panels):
        x0 = 30 + i * 228
        s.text(x0 + cell * p / 2 + 20, 30, title, 16, weight="bold")
        for r in range(p):
            y = 50 + r * (cell + 6)
            if i == 0:
                s.text(x0 - 4, y + 24, f"r{r}", 14, "end")
            for c in range(p):
                if t >= 2 * (p - 1):
                    count = p
                else:
                    # contributions in chunk c on rank r after t steps
                    count = 1
                    for step in range(1, min(t, p - 1) + 1):
                        if c == (r - step - 1) % p:
                            count = step + 1
                shade = ["#ffffff", "#dce8f5", "#a9c6e6", "#6f9fd2", "#2f6aa8"][min(count, 4)]
                s.rect(x0 + 20 + c * cell, y, cell - 2, cell, shade, "#888888")
                s.text(x0 + 20 + c * cell + cell / 2 - 1, y + 24, str(count), 15,
                       fill="#ffffff" if count >= 3 else INK)
    s.text(30, 250, "Each cell: how many ranks' values chunk c (columns) on rank r (rows) sums.",
           16, "start")
    s.text(30, 276, f"Each step every rank sends one chunk (S/{p}) to rank r + 1: 2(p - 1) steps, "
           "2(p - 1)/p S sent per rank.", 16, "start")
    s.text(30, 302, "Reduce-scatter leaves one complete chunk per rank; all-gather copies it to all.",
           16, "start")
    s.save(path)


def ddp_overlap(path):
    """DDP on 2 ranks: the backward pass runs units from the last layer to
    the first; a bucket can be all-reduced once every tensor in it has its
    gradient. Bucketed waits for the end; overlapped starts each bucket as
    soon as it is ready, one at a time on the link."""
    units = ["lm head", "block 3", "block 2", "block 1", "block 0", "emb"]
    durations = [1.2, 2.0, 2.0, 2.0, 2.0, 0.8]
    buckets = [("b0", 2), ("b1", 3), ("b2", 4), ("b3", 6)]   # ready after that many units
    comm = 1.5
    s = Svg(1100, 390)
    scale = 55.0
    for row, mode in enumerate(("bucketed", "overlapped")):
        y = 40 + row * 160
        s.text(20, y + 30, mode, 19, "start", weight="bold")
        x = 160.0
        ends = []
        for name, d in zip(units, durations):
            s.rect(x, y, d * scale, 44, BLUE)
            s.text(x + d * scale / 2, y + 28, name, 14, fill="#ffffff")
            x += d * scale
            ends.append(x)
        t_link = ends[-1] if mode == "bucketed" else 160.0
        for name, after in buckets:
            start = max(t_link, ends[after - 1] if mode == "overlapped" else ends[-1])
            s.rect(start, y + 60, comm * scale, 36, "#d9534f")
            s.text(start + comm * scale / 2, y + 84, name, 15, fill="#ffffff")
            t_link = start + comm * scale
        s.line(ends[-1], y - 8, ends[-1], y + 108, "#555555", 2)
        s.text(ends[-1] + 6, y + 120, f"backward ends; wait after it: {(t_link - ends[-1]) / scale:.1f}",
               14, "start")
    s.text(20, 350, "Blue: backward of a unit (last layer first). Red: the all-reduce of bucket bN, "
           "one at a time on the link.", 15, "start")
    s.text(20, 374, "Schematic, not measured: a block 2.0, an all-reduce 1.5 (same units). "
           "Measured timelines: make bench-ddp.", 15, "start")
    s.save(path)


def tp_block(path, tp=2):
    """One transformer block split over tp = 2 ranks (layout.h's shard map):
    per rank, the tensors it holds, whole (grey) or its 1/tp (colour), in
    the order the forward pass reads them, and the four places the group
    talks: f before each column-parallel layer (all-reduce backward), g
    after each row-parallel one (all-reduce forward)."""
    C = 64
    steps = [  # (label, global width in units of C, split?, color)
        ("x", 1, False, GREY), ("ln1", 1, False, GREY), ("f", 0, None, None),
        ("qkv", 3, True, BLUE), ("heads", 1, True, BLUE), ("proj", 1, True, BLUE),
        ("g", 0, None, None), ("+ x", 1, False, GREY), ("ln2", 1, False, GREY),
        ("f", 0, None, None), ("fc", 4, True, GREEN), ("gelu", 4, True, GREEN),
        ("fcproj", 1, True, GREEN), ("g", 0, None, None), ("+", 1, False, GREY)]
    s = Svg(1180, 420)
    unit = 30.0   # pixels per C of width
    for r in range(tp):
        y = 60 + r * 150
        s.text(20, y + 55, f"rank {r}", 20, "start", weight="bold")
        x = 110.0
        for label, width, split, color in steps:
            if split is None:   # an f or g: a red marker across the rank's row
                s.rect(x, y + 5, 30, 90, "#d9534f")
                s.text(x + 15, y + 58, label, 20, fill="#ffffff", weight="bold")
                x += 42
                continue
            w = max(width * unit, 46)
            h = 90 if not split else 90 / tp
            # split: the rank's slice (1/tp of the rows) in colour, offset by its index
            yy = y + 5 + (r * h if split else 0)
            if split:
                s.rect(x, y + 5, w, 90, "#f2f2f2", "#cccccc")
            s.rect(x, yy, w, h, color if split else GREY)
            s.text(x + w / 2, y - 6 if r == 0 else y + 118, label, 15)
            x += w + 12
    s.text(20, 372, "Grey: whole on every rank (residual stream, layernorms). Blue, green: "
           f"the rank's 1/{tp} (heads; MLP columns 4C/{tp}).", 15, "start")
    s.text(20, 398, "f: identity forward, all-reduce of N·C backward.  g: all-reduce of N·C "
           "forward, identity backward.  2 + 2 per block.", 15, "start")
    s.save(path)


DIAGRAMS = {"zero-stages": zero_stages, "ring-allreduce": ring_allreduce, "ddp-overlap": ddp_overlap,
            "tp-block": tp_block}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: slide_diagrams.py OUT_DIR")
    out = os.path.join(sys.argv[1], "fig", "diagrams")
    os.makedirs(out, exist_ok=True)
    for name, draw in DIAGRAMS.items():
        draw(os.path.join(out, name + ".svg"))
    print(f"slides: {len(DIAGRAMS)} diagrams in {out}")


if __name__ == "__main__":
    main()
