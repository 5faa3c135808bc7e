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


def zero_stages(path, n=4, split=(4, 4, 8), optimizer="AdamW m, v"):
    """Per rank, the bytes of model states each layout keeps: params 4 Phi,
    grads 4 Phi, AdamW moments 8 Phi (mixed precision: 2, 2, and 12 with
    the fp32 master), each whole or 1/N (ZeRO's stages)."""
    sp, sg, so = split
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
            for offset, size, share, color in ((0, sp, dp, BLUE), (sp, sg, dg, ORANGE),
                                               (sp + sg, so, dm, GREEN)):
                # the whole state in grey; what rank r keeps in colour (slice r of N)
                w = size * u
                s.rect(x + offset * u, y + 10, w, 44, GREY)
                s.rect(x + offset * u + (w * r / share if share > 1 else 0), y + 10, w / share, 44,
                       color)
        total = sp / dp + sg / dg + so / dm
        s.text(1085, y + 40, f"{total:g} Φ", 18, "end")
    for k, (label, color) in enumerate(((f"params {sp}Φ", BLUE), (f"grads {sg}Φ", ORANGE),
                                        (f"{optimizer} {so}Φ", GREEN),
                                        ("held by another rank", GREY))):
        s.rect(150 + k * 230, 415, 18, 18, color)
        s.text(175 + k * 230, 430, label, 16, "start")
    s.save(path)


def zero_stages_mixed(path):
    """zero_stages in mixed precision: 2 + 2 + 12 (fp32 master and moments)"""
    zero_stages(path, split=(2, 2, 12), optimizer="master, m, v")


def float_formats(path):
    """The bits of fp32, bf16 and fp16: sign, exponent, mantissa, one cell
    a bit, with each format's range and unit roundoff."""
    formats = [("fp32", 8, 23, "3.4e38", "2^-24"), ("bf16", 8, 7, "3.4e38", "2^-8"),
               ("fp16", 5, 10, "65504", "2^-11")]
    cell = 28
    s = Svg(1100, 330)
    for row, (name, e, m, top, u) in enumerate(formats):
        y = 30 + row * 95
        s.text(20, y + 26, name, 20, "start", weight="bold")
        x = 110
        for k, (count, color) in enumerate(((1, ORANGE), (e, BLUE), (m, GREEN))):
            for _ in range(count):
                s.rect(x, y + 5, cell - 2, 30, color)
                x += cell
        s.text(110, y + 58, f"1 sign, {e} exponent, {m} mantissa bits: largest {top}, "
               f"unit roundoff {u}", 15, "start")
    for k, (label, color) in enumerate((("sign", ORANGE), ("exponent: the range", BLUE),
                                        ("mantissa: the precision", GREEN))):
        s.rect(110 + k * 260, 305, 18, 18, color)
        s.text(135 + k * 260, 320, label, 16, "start")
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


def sp_block(path, tp=2):
    """One transformer block under sequence parallelism on tp = 2 ranks
    (model.c's block_forward with SequenceParallelOps): per rank, each
    tensor as an N x width box (rows: the N = B T tokens, down; columns: the
    features, across), with what the rank holds in colour: its N/tp rows
    (the residual stream, the layernorms), its columns (TP's split layers),
    or all of it (the gathered layernorm outputs, grey, which this kit keeps
    for the backward pass). Between them, the group's collectives: an
    all-gather (AG) before each column-parallel layer, a reduce-scatter (RS)
    after each row-parallel one; below, their conjugates in the backward."""
    SEQ, AG, RS, WHOLE = ORANGE, "#7b5ea7", "#d9534f", "#a6a6a6"
    steps = [  # (label, width in C, how the rank holds it: rows | cols | whole | AG | RS)
        ("x", 1, "rows", SEQ), ("ln1", 1, "rows", SEQ), ("AG", 0, "AG", AG),
        ("ln1", 1, "whole", WHOLE), ("qkv", 3, "cols", BLUE), ("heads", 1, "cols", BLUE),
        ("RS", 0, "RS", RS), ("res1", 1, "rows", SEQ), ("ln2", 1, "rows", SEQ),
        ("AG", 0, "AG", AG), ("ln2", 1, "whole", WHOLE), ("fc", 4, "cols", GREEN),
        ("gelu", 4, "cols", GREEN), ("RS", 0, "RS", RS), ("res2", 1, "rows", SEQ)]
    s = Svg(1180, 430)
    unit, box_h, top, gap_rank = 30.0, 96, 44, 130
    xs = []   # x of each step (the markers' places, for the backward row)
    x = 100.0
    for label, width, how, color in steps:
        if how in ("AG", "RS"):
            # one collective of the whole group: a bar across both ranks' rows
            y0, y1 = top - 4, top + (tp - 1) * gap_rank + box_h + 4
            s.rect(x, y0, 36, y1 - y0, color)
            s.text(x + 18, (y0 + y1) / 2 + 7, label, 18, fill="#ffffff", weight="bold")
            xs.append((x + 18, label))
            x += 48
            continue
        w = max(width * unit, 50)
        for r in range(tp):
            y = top + r * gap_rank
            if how == "whole":
                s.rect(x, y, w, box_h, color)
            else:
                s.rect(x, y, w, box_h, "#f2f2f2", "#cccccc")
                if how == "rows":   # the rank's N/tp rows: a horizontal band
                    s.rect(x, y + r * box_h / tp, w, box_h / tp, color)
                else:               # its 1/tp of the columns (of q, k and v each: 3 bands)
                    pieces = 3 if label == "qkv" else 1
                    pw = w / pieces
                    for k in range(pieces):
                        s.rect(x + k * pw + r * pw / tp, y, pw / tp, box_h, color)
        s.text(x + w / 2, top - 12, label, 15)
        x += w + 10
    for r in range(tp):
        s.text(16, top + r * gap_rank + box_h / 2 + 7, f"rank {r}", 19, "start", weight="bold")
    # the backward pass: each collective's conjugate, under it, right to left
    yb = top + (tp - 1) * gap_rank + box_h + 46
    s.text(16, yb + 5, "backward", 17, "start", weight="bold")
    s.line(xs[-1][0] + 60, yb - 22, xs[0][0] - 40, yb - 22, "#555555", 2, arrow=True)
    for cx, label in xs:
        conj, color = ("RS", RS) if label == "AG" else ("AG", AG)
        s.rect(cx - 18, yb - 12, 36, 28, color)
        s.text(cx, yb + 8, conj, 15, fill="#ffffff", weight="bold")
        s.text(cx, yb + 38, "dX" if label == "AG" else "dZ", 14)
    s.text(16, yb + 80, "Rows: the N = B·T tokens (down); columns: features (across). Orange: the "
           f"rank's N/{tp} rows. Blue, green: its 1/{tp} of the columns", 16, "start")
    s.text(16, yb + 102, "(heads; MLP). Grey: all N rows, gathered, kept for the backward pass (this "
           "kit). AG: all-gather, RS: reduce-scatter, of N·C floats.", 16, "start")
    s.save(path)


def recompute_kept(path, C=64, NH=4, T=64, L=4):
    """What each block keeps for the backward pass under lab 05's three
    Recompute modes (model.c's gpt_activation_parts), floats per token at
    tp = 1 for tiny (C 64, NH 4, T 64, L 4): residual stream res1, res2 and
    the layernorm statistics 2C + 4; layernorm outputs 2C; the split
    layers' qkv, atty, fch, fch_gelu 12C; attention probabilities NH T.
    What a mode does not keep per block sits in one buffer the blocks share
    (rebuilt before each block's backward pass), drawn dashed."""
    parts = [("res2", C, "#8c6d31"), ("res1 + stats", C + 4, ORANGE), ("ln1, ln2", 2 * C, GREY),
             ("qkv, atty, fch, gelu", 12 * C, BLUE), ("attention probs", NH * T, "#d9534f")]
    names = {name for name, _, _ in parts}
    # what each block keeps: all; all but the probabilities; its output alone
    modes = [("none", names), ("selective", names - {"attention probs"}), ("full", {"res2"})]
    s = Svg(1180, 500)
    px, base = 0.24, 360   # pixels per float of a token; the bars' baseline
    for row, (mode, kept) in enumerate(modes):
        x0 = 130 + row * 350
        s.text(x0 + 150, 30, mode, 22, weight="bold")
        total = 0
        for b in range(L + 1):   # L blocks, then the shared buffer
            shared = b == L
            x = x0 + b * 58
            y = base
            for name, n, color in parts:
                if (name in kept) == shared:
                    continue
                if not shared:
                    total += n
                h = n * px
                y -= h
                s.rect(x, y, 46, h, color, "#ffffff")
            if shared and y < base:
                total += sum(n for name, n, _ in parts if name not in kept)
                s.items.append(f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="52" '
                               f'height="{base - y + 6:.1f}" fill="none" stroke="{INK}" '
                               'stroke-width="2" stroke-dasharray="6,4"/>')
            if not shared or y < base:
                s.text(x + 23, base + 22, "shared" if shared else f"b{b}", 14)
        s.text(x0 + 150, base + 52, f"{total:,} floats per token", 17)
    for k, (name, n, color) in enumerate(parts):
        s.rect(20 + k * 232, 436, 18, 18, color)
        s.text(44 + k * 232, 451, f"{name} {n}", 15, "start")
    s.text(20, 484, f"Floats per token, tiny (C {C}, NH {NH}, L {L}) at T {T}, tp 1. b0..b{L - 1}: "
           "kept by each block; dashed: one buffer for all blocks, rebuilt in the backward.",
           15, "start")
    s.save(path)


def pp_stages(path, p=4, L=8):
    """Pipeline stages over p ranks, as layout.h cuts them: L blocks in S =
    p v stages of L / S blocks, stage s on rank s mod p (local chunk s / p).
    Top, v = 1: rank r holds stage r; the first stage also the embeddings
    (wte, wpe), the last lnf and the LM head, a copy of wte: the embedding
    group (first and last stage) sums the two copies' gradients. Bottom,
    v = 2 (interleaved): rank r holds stages r and r + p."""
    s = Svg(1160, 500)
    colors = [BLUE, ORANGE, GREEN, "#9467bd"]
    w, gap, x0 = 250, 22, 40
    for row, v in enumerate((1, 2)):
        y = 90 + row * 220
        n = L // (p * v)
        s.text(20, y - 52 if row == 0 else y - 22, f"v = {v}: {p * v} stages of {n} block" +
               ("s" if n > 1 else "") + (" (interleaved)" if v > 1 else ""), 18, "start",
               weight="bold")
        for r in range(p):
            x = x0 + r * (w + gap)
            s.rect(x, y, w, 120, "#f4f4f4", "#888888", 1)
            s.text(x + w / 2, y + 140, f"rank {r}", 16)
            cw = (w - 20) / v
            for c in range(v):
                st = r + c * p
                cx = x + 10 + c * cw
                n = L // (p * v)
                bw = (cw - 8) / n
                for b in range(n):
                    s.rect(cx + b * bw, y + 48, bw - 4, 40, colors[r])
                    s.text(cx + b * bw + (bw - 4) / 2, y + 74, f"b{st * n + b}", 14, fill="white")
                s.text(cx + (cw - 8) / 2, y + 110, f"stage {st}", 14)
            if r == 0:
                s.rect(x + 10, y + 8, 110, 30, "#666666")
                s.text(x + 65, y + 29, "wte, wpe", 15, fill="white")
            if r == p - 1:
                s.rect(x + w - 130, y + 8, 120, 30, "#666666")
                s.text(x + w - 70, y + 29, "lnf, wte copy", 15, fill="white")
        for st in range(p * v - 1):   # activations forward between consecutive stages
            a, b = st % p, (st + 1) % p
            if b == a + 1:
                xa = x0 + a * (w + gap) + w
                s.line(xa - 2, y + 68, xa + gap + 2, y + 68, INK, 2, arrow=True)
        if v > 1:   # the wrap from stage p - 1 (rank p - 1) to stage p (rank 0, chunk 1)
            xl = x0 + (p - 1) * (w + gap) + w
            xt = x0 + 10 + (w - 20) / v + (w - 20) / v / 2
            s.line(xl, y + 100, xl + 14, y + 100, INK, 2)
            s.line(xl + 14, y + 100, xl + 14, y + 165, INK, 2)
            s.line(xl + 14, y + 165, xt, y + 165, INK, 2)
            s.line(xt, y + 165, xt, y + 122, INK, 2, arrow=True)
    # the embedding group over the top row
    xa, xb = x0 + 65, x0 + (p - 1) * (w + gap) + w - 70
    s.line(xa, 96, xa, 62, "#c0392b", 3)
    s.line(xa, 62, xb, 62, "#c0392b", 3)
    s.line(xb, 62, xb, 96, "#c0392b", 3)
    s.text((xa + xb) / 2, 54, "embedding group: all-reduce of dwte (first + last stage)", 16,
           fill="#c0392b")
    s.save(path)


RANK_COLORS = [BLUE, ORANGE, GREEN, "#9467bd"]


def cp_position_owner(t, Tg, cp, placement):
    """Which rank holds global position t (math_shared.h's placements)."""
    if placement == "striped":
        return t % cp
    if placement == "zigzag":
        c = Tg // (2 * cp)
        k = t // c
        return k if k < cp else 2 * cp - 1 - k
    return t // (Tg // cp)


def cp_balance(path, Tg=16, cp=4):
    """The causal attention matrix of one head and sequence (query rows,
    key columns), each visible pair coloured by the rank that computes it
    (the query's owner), under the contiguous, zigzag and striped
    placements; the pairs per rank counted from the same rule."""
    s = Svg(1180, 470)
    cell = 15
    for k, placement in enumerate(("contiguous", "zigzag", "striped")):
        x0, y0 = 60 + k * 385, 70
        s.text(x0 + Tg * cell / 2, 36, placement, 20, weight="bold")
        pairs = [0] * cp
        for q in range(Tg):
            owner = cp_position_owner(q, Tg, cp, placement)
            s.rect(x0 - 14, y0 + q * cell, 10, cell - 1, RANK_COLORS[owner], "none")
            for kk in range(Tg):
                if kk <= q:
                    pairs[owner] += 1
                s.rect(x0 + kk * cell, y0 + q * cell, cell - 1, cell - 1,
                       RANK_COLORS[owner] if kk <= q else "#f2f2f2", "none")
        for r in range(cp):
            s.rect(x0 + r * 82, y0 + Tg * cell + 18, 16, 16, RANK_COLORS[r], "none")
            s.text(x0 + r * 82 + 20, y0 + Tg * cell + 32, f"{pairs[r]}", 16, "start")
    s.text(20, 400, f"Tg = {Tg} positions on cp = {cp} ranks: rows are queries, columns keys; "
           "a visible pair (key <= query) in the colour of the rank", 16, "start")
    s.text(20, 424, "holding the query. The strip left of each matrix: who holds each position. "
           "Numbers: pairs per rank.", 16, "start")
    s.text(20, 448, "Contiguous: r c^2 + c(c+1)/2; zigzag: Tg(Tg+1)/(2cp) on every rank; "
           "striped: cp T(T-1)/2 + (r+1) T.", 16, "start")
    s.save(path)


def cp_ring(path, cp=4):
    """Ring attention's steps on cp ranks: at step s rank r holds the keys
    and values of rank (r - s) mod cp and computes its queries' blocks
    against them; the mask of each block from the global chunks (skip,
    causal, full), contiguous and zigzag."""
    s = Svg(1180, 520)
    colors = {"skip": "#f2f2f2", "causal": "#f5c48f", "full": BLUE}
    for k, placement in enumerate(("contiguous", "zigzag")):
        x0 = 120 + k * 540
        s.text(x0 + 200, 30, placement, 20, weight="bold")
        chunks = (lambda r: [r]) if placement == "contiguous" else (lambda r: [r, 2 * cp - 1 - r])
        for step in range(cp):
            s.text(x0 + step * 105 + 48, 60, f"step {step}", 16)
        for r in range(cp):
            y = 76 + r * 92
            if k == 0:
                s.text(20, y + 46, f"rank {r}", 17, "start", weight="bold")
            for step in range(cp):
                src = (r - step) % cp
                x = x0 + step * 105
                qs, ks = chunks(r), chunks(src)
                n = len(qs)
                bw = 80 / n
                for i, qc in enumerate(qs):
                    for j, kc in enumerate(ks):
                        kind = "skip" if kc > qc else "causal" if kc == qc else "full"
                        s.rect(x + j * bw, y + 8 + i * 60 / n, bw - 2, 60 / n - 2, colors[kind],
                               "#bbbbbb")
                s.text(x + 40, y + 84, f"kv of {src}", 14)
                if step < cp - 1:
                    s.line(x + 82, y + 38, x + 102, y + 38, "#888888", 1, arrow=True)
    for k, (name, color) in enumerate((("skipped (keys after queries)", colors["skip"]),
                                       ("causal (the diagonal)", colors["causal"]),
                                       ("full (keys before queries)", colors["full"]))):
        s.rect(120 + k * 330, 458, 18, 18, color, "#bbbbbb")
        s.text(145 + k * 330, 473, name, 16, "start")
    s.text(20, 504, "Each square: the rank's query chunks (rows) against the chunks it holds "
           "(columns). Every step waits for its slowest rank.", 16, "start")
    s.save(path)


def cp_ulysses(path, cp=4, NH=4, Tg=16):
    """Ulysses' all-to-all on cp ranks: before, rank r holds its Tg/cp
    positions of all NH heads; after, all Tg positions of NH/cp heads.
    Cells coloured by the rank that holds them."""
    s = Svg(1180, 400)
    cell_w, cell_h = 40, 16
    T = Tg // cp
    for k, title in enumerate(("before: my positions, all heads", "after: all positions, my heads")):
        x0, y0 = 140 + k * 700, 70
        s.text(x0 + NH * cell_w / 2, 36, title, 19, weight="bold")
        for h in range(NH):
            s.text(x0 + h * cell_w + cell_w / 2, y0 - 8, f"h{h}", 14)
        for t in range(Tg):
            for h in range(NH):
                owner = t // T if k == 0 else h // (NH // cp)
                s.rect(x0 + h * cell_w, y0 + t * cell_h, cell_w - 2, cell_h - 2,
                       RANK_COLORS[owner], "none")
            if t % T == 0:
                s.text(x0 - 8, y0 + t * cell_h + 12, f"t {t}", 13, "end")
        if k == 0:
            mid = (x0 + NH * cell_w + 700 + x0) / 2   # between the two grids
            s.line(x0 + NH * cell_w + 30, y0 + Tg * cell_h / 2, x0 + 670, y0 + Tg * cell_h / 2,
                   INK, 3, arrow=True)
            s.text(mid, y0 + Tg * cell_h / 2 - 14,
                   "all-to-all: block j (heads of rank j) to rank j", 16)
            s.text(mid, y0 + Tg * cell_h / 2 + 30,
                   "attention on the rank's heads, whole and causal", 16)
            s.text(mid, y0 + Tg * cell_h / 2 + 54,
                   "then the same all-to-all backwards", 16)
    s.text(20, 366, f"Tg = {Tg} positions (rows), NH = {NH} heads (columns) on cp = {cp} ranks, "
           "coloured by the rank holding them. Each rank sends", 16, "start")
    s.text(20, 390, "(cp - 1)/cp of its slice and keeps 1/cp; cp must divide the heads.", 16,
           "start")
    s.save(path)


EXPERT_COLORS = [BLUE, "#9dbfe0", ORANGE, "#f7c29a"]


def ep_dispatch(path, ep=2, E=4, counts=((3, 2, 1, 2), (2, 1, 3, 2))):
    """Expert parallelism's dispatch on ep = 2 ranks of E = 4 experts (rank
    r owns experts [r E/ep, (r+1) E/ep)): each rank's xd holds its kept rows
    expert by expert (counts[r][e] rows of expert e, a toy routing), so the
    rows for rank j's experts are one contiguous block; the all-to-all-v
    sends block j to rank j, which receives them source by source (xr)."""
    El = E // ep
    s = Svg(1290, 540)
    row_h, w = 22, 150
    s.text(190, 34, "xd: my kept rows, by expert", 19, weight="bold")
    s.text(930, 34, "xr: rows for my experts, by source", 19, weight="bold")
    for r in range(ep):
        y0 = 60 + r * 200
        s.text(40, y0 + 20, f"rank {r}", 17, "start", weight="bold")
        # xd of rank r
        y = y0
        for e in range(E):
            for _ in range(counts[r][e]):
                s.rect(120, y, w, row_h - 2, EXPERT_COLORS[e], "none")
                y += row_h
            if counts[r][e]:
                s.text(120 + w + 8, y - 6, f"e{e}", 14, "start")
        # xr on owner r: from each source s its rows of experts r El ..
        y = y0
        for src in range(ep):
            top = y
            for e in range(r * El, (r + 1) * El):
                for _ in range(counts[src][e]):
                    s.rect(860, y, w, row_h - 2, EXPERT_COLORS[e], "none")
                    y += row_h
            s.text(860 + w + 8, (top + y) / 2 + 5, f"from rank {src}", 14, "start")
            s.line(856, top, 856, y - 2, RANK_COLORS[src], 4)
            y += 6
        s.text(1140, y0 + 20, f"on rank {r}", 17, "start", weight="bold")
        s.text(1140, y0 + 42, f"(e{r * El}..e{(r + 1) * El - 1})", 14, "start")
    # arrows: block of rank r's xd for owner j -> owner j's xr
    for r in range(ep):
        for j in range(ep):
            before = sum(counts[r][:j * El])
            rows = sum(counts[r][j * El:(j + 1) * El])
            ya = 60 + r * 200 + (before + rows / 2) * row_h
            prior = sum(sum(counts[q][j * El:(j + 1) * El]) for q in range(r))
            yb = 60 + j * 200 + (prior + rows / 2) * row_h + 6 * r
            s.line(120 + w + 40, ya, 850, yb, RANK_COLORS[r], 2, arrow=True)
    s.text(645, 480, "a row's colour: its expert; an arrow's and a bar's: the rank that "
           "sends. Counts first (an all-to-all of E/ep ints", 16)
    s.text(645, 504, "per peer), then the rows (all-to-all-v); the owner runs each source's "
           "block through its experts, and the outputs", 16)
    s.text(645, 528, "go back the same way reversed", 16)
    s.save(path)


MESH_DIMS = ("tp", "cp", "dp", "pp")
GROUP_COLORS = [BLUE, ORANGE, GREEN, "#9467bd", "#8c564b", "#e377c2", "#17a2b8", "#7f7f7f"]


def mesh_coords(deg, order, rank):
    """mesh.h's mesh_coords: the rank's digits, innermost dimension first."""
    x = {}
    for d in order:
        x[d] = rank % deg[d]
        rank //= deg[d]
    return x


def mesh_draw(s, x0, y0, deg, order, per_node, rows, cell=60, note=True):
    """One mesh (mesh.h): a cell per world rank, the nodes of per_node
    consecutive ranks as grey boxes, then a row per group kind; a cell in
    the colour of its group (same colour, same group), showing the rank's
    coordinate in it; a group spanning more than one node outlined in red.
    rows: names of MESH_DIMS, or "dcp" (dp x cp). Returns the bottom y."""
    world = deg["tp"] * deg["cp"] * deg["dp"] * deg["pp"]
    coords = [mesh_coords(deg, order, r) for r in range(world)]
    gap = 14
    xs = [x0 + r * (cell + 2) + (r // per_node) * gap for r in range(world)]
    row_h, top = 42, y0 + 26
    bottom = top + 48 + len(rows) * row_h
    for n in range(world // per_node):
        a, b = xs[n * per_node], xs[(n + 1) * per_node - 1] + cell
        s.rect(a - 6, y0, b - a + 12, bottom - y0 + 4, "#eeeeee", "#aaaaaa", 1)
        s.text((a + b) / 2, y0 + 18, f"node {n}", 15, weight="bold")
    s.text(x0 - 12, top + 20, "rank", 16, "end", weight="bold")
    s.text(x0 - 12, top + 38, "tp cp dp pp", 12, "end")
    for r in range(world):
        s.rect(xs[r], top, cell, 44, "#ffffff", "#999999", 1)
        s.text(xs[r] + cell / 2, top + 20, str(r), 17, weight="bold")
        s.text(xs[r] + cell / 2, top + 38, " ".join(str(coords[r][d]) for d in MESH_DIMS), 12)
    spans = {}
    for i, kind in enumerate(rows):
        y = top + 48 + i * row_h
        dims = ("dp", "cp") if kind == "dcp" else (kind,)
        # a group: the ranks that agree on every other coordinate
        key = lambda r: tuple(coords[r][d] for d in MESH_DIMS if d not in dims)
        groups = {}
        for r in range(world):
            groups.setdefault(key(r), []).append(r)
        colour = {k: GROUP_COLORS[j % len(GROUP_COLORS)] for j, k in enumerate(groups)}
        crossing = {k for k, g in groups.items() if len({r // per_node for r in g}) > 1}
        spans[kind] = (max(len({r // per_node for r in g}) for g in groups.values()),
                       len(crossing), len(groups))
        label = "dp x cp" if kind == "dcp" else kind
        s.text(x0 - 12, y + 25, label, 17, "end", weight="bold")
        for r in range(world):
            k = key(r)
            pos = coords[r]["cp"] + deg["cp"] * coords[r]["dp"] if kind == "dcp" else coords[r][kind]
            s.rect(xs[r], y, cell, row_h - 6, colour[k], "#c0392b" if k in crossing else "#ffffff",
                   3 if k in crossing else 1)
            s.text(xs[r] + cell / 2, y + 24, str(pos), 15, fill="white", weight="bold")
    return bottom, spans, xs[-1] + cell


def mesh_groups(path):
    """16 ranks, tp 2 x cp 2 x dp 2 x pp 2, in Megatron-LM's order
    (tp-cp-dp-pp: rank = t + 2 (c + 2 (d + 2 p))) on nodes of 8: every
    group kind's groups, coloured, the ones crossing a node outlined."""
    deg = {"tp": 2, "cp": 2, "dp": 2, "pp": 2}
    s = Svg(1180, 372)
    bottom, spans, right = mesh_draw(s, 150, 10, deg, ("tp", "cp", "dp", "pp"), 8,
                                     ("tp", "cp", "dp", "pp", "dcp"))
    s.text(20, bottom + 34, "rank = tp + 2 (cp + 2 (dp + 2 pp)), tp innermost. A row per kind of "
           "group: one colour, one group; the number is the rank's place in it.", 16, "start")
    s.text(20, bottom + 60, "Outlined in red: a group spanning two nodes (the slow link). "
           "Here only the pipeline's: one activation per micro-batch and boundary.", 16, "start")
    s.save(path)


def mesh_summit(path):
    """lab 10's extension: tp 2 x cp 2 x dp 3 on nodes of 6 (Summit's six
    GPUs a node). Megatron-LM's order (top) sends some CP groups and every
    DP group across the nodes; tp-dp-cp-pp (bottom) keeps DP inside and
    sends every CP group across: the same worst CP group, no DP crossing."""
    deg = {"tp": 2, "cp": 2, "dp": 3, "pp": 1}
    s = Svg(1180, 560)
    y = 40
    for order in (("tp", "cp", "dp", "pp"), ("tp", "dp", "cp", "pp")):
        s.text(20, y - 12, "-".join(order) + (": Megatron-LM's order" if order[1] == "cp" else
                                               ": what composed_best_mesh_order picks"),
               19, "start", weight="bold")
        bottom, spans, right = mesh_draw(s, 150, y, deg, order, 6, ("tp", "cp", "dp"))
        for i, kind in enumerate(("tp", "cp", "dp")):
            most, crossing, n = spans[kind]
            s.text(right + 24, y + 26 + 48 + i * 42 + 25,
                   f"spans {most} node{'s' if most > 1 else ''}" +
                   (f" ({crossing} of {n} groups)" if crossing else ""),
                   16, "start", fill="#c0392b" if crossing else INK)
        y = bottom + 70
    s.text(20, y - 26, "Compared busiest dimension first (tp, then cp, dp, pp), by the most nodes "
           "one group spans: (1, 2, 2, 1) against (1, 2, 1, 1).", 16, "start")
    s.save(path)


DIAGRAMS = {"zero-stages": zero_stages, "zero-stages-mixed": zero_stages_mixed,
            "float-formats": float_formats, "ring-allreduce": ring_allreduce, "ddp-overlap": ddp_overlap,
            "tp-block": tp_block, "sp-block": sp_block, "recompute-kept": recompute_kept,
            "pp-stages": pp_stages, "cp-balance": cp_balance, "cp-ring": cp_ring,
            "cp-ulysses": cp_ulysses, "ep-dispatch": ep_dispatch,
            "mesh-groups": mesh_groups, "mesh-summit": mesh_summit}


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
