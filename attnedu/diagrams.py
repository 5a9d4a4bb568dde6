"""Diagrams of the course's models, drawn with Matplotlib so they render offline in JupyterLab and
in the book, from code kept with the course. One visual vocabulary for every lesson:

    encoder state  h_j   blue box, source word below
    decoder state  s_t   orange box, target word above
    context        c     purple box
    attentional    h~_t  green box (Luong's decoder)
    recurrence           grey arrow from one state to the next
    attention weight     purple line from h_j to the context, as thick as alpha_tj

Positions, decoder steps and heads count from 0, as in code and in the lessons' text (h_0 is the first
source word's state; before step 0 the decoder holds its initial state s_{-1}). tiling_diagram counts blocks
from 1, as lesson 08 does.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

COLOURS = {
    "encoder": "#4C72B0",
    "decoder": "#DD8452",
    "context": "#8172B3",
    "attentional": "#55A868",
    "edge": "#7f7f7f",
}
BOX_W, BOX_H = 0.8, 0.55


def box(ax: Axes, x: float, y: float, text: str, kind: str, width: float = BOX_W) -> None:
    """A rounded box centred at (x, y), coloured by ``kind`` (a key of ``COLOURS``), with white ``text``."""
    if kind not in COLOURS:
        raise ValueError(f"kind must be one of {sorted(COLOURS)}, got {kind!r}")
    patch = FancyBboxPatch(
        (x - width / 2, y - BOX_H / 2), width, BOX_H, boxstyle="round,pad=0.02,rounding_size=0.12",
        facecolor=COLOURS[kind], edgecolor="none",
    )  # fmt: skip
    ax.add_patch(patch)
    ax.text(x, y, text, ha="center", va="center", color="white", fontsize=10)


def arrow(ax: Axes, start, end, colour: str = COLOURS["edge"], width: float = 1.2, style: str = "-") -> None:
    """An arrow from ``start`` to ``end`` (x, y) that stops short of the boxes at both ends; ``style="--"``
    draws it dashed."""
    patch = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=colour, linewidth=width)
    patch.set_linestyle(style)
    patch.shrinkA = patch.shrinkB = 14
    ax.add_patch(patch)


def _frame(ax: Axes | None, width: float, height: float) -> Axes:
    if ax is None:
        _, ax = plt.subplots(figsize=(min(1.1 * width + 1, 12), 0.9 * height + 0.6))
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-0.9, height - 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


def _context_box(ax: Axes, weights: Sequence[float], step: int, x_c: float, y_enc: float, y_ctx: float) -> None:
    """The context c_step, and a line from every encoder state to it, as thick as that state's weight."""
    box(ax, x_c, y_ctx, f"$c_{{{step}}}$", "context", width=0.6)
    for j, w in enumerate(weights):
        ax.plot([j, x_c], [y_enc + BOX_H / 2, y_ctx - BOX_H / 2], color=COLOURS["context"],
                linewidth=0.3 + 6 * w, alpha=0.35 + 0.65 * w, solid_capstyle="round")  # fmt: skip


def _encoder_row(ax: Axes, source: Sequence[str], y: float) -> None:
    """The encoder states h_0..h_{n-1} at height y, each over its source word, linked left to right."""
    for j, word in enumerate(source):
        box(ax, j, y, f"$h_{{{j}}}$", "encoder")
        ax.text(j, y - 0.55, word, ha="center", va="top", fontsize=9)
        if j:
            arrow(ax, (j - 1, y), (j, y))


def seq2seq_diagram(
    source: Sequence[str],
    target: Sequence[str],
    weights: Sequence[float] | None = None,
    step: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """The encoder-decoder of lessons 01-02.

    Without ``weights``: the fixed-context model. The encoder's last state is the context c, and c
    feeds every decoder step (Cho et al. 2014).
    With ``weights`` (one per source word) and ``step`` (decoder step t, from 0): the attention model
    at that step. The previous state s_{t-1} asks (at step 0, the initial state, not drawn); every h_j
    reaches the context c_t through a line as thick as alpha_tj, and c_t feeds s_t (Bahdanau et al. 2015).
    """
    source, target = list(source), list(target)
    if not source or not target:
        raise ValueError("source and target need at least one word each")
    attention = weights is not None
    if attention:
        weights = [float(w) for w in weights]
        if len(weights) != len(source):
            raise ValueError(f"weights need one value per source word ({len(source)}), got {len(weights)}")
        if step is None or not 0 <= step < len(target):
            raise ValueError(
                f"with weights, step must be a decoder step t in 0..{len(target) - 1} (counted from 0), got {step}"
            )
    elif step is not None:
        raise ValueError("step only applies to the attention diagram: pass weights too")
    n_src, n_tgt = len(source), len(target)
    gap = 1.2 if not attention else 1.0  # room for the context box between encoder and decoder
    x_dec = n_src + gap  # the decoder sits to the right of the encoder
    ax = _frame(ax, x_dec + n_tgt, 4.2)
    y_enc, y_ctx, y_dec = 0.6, 2.0, 3.2
    _encoder_row(ax, source, y_enc)
    for t, word in enumerate(target):
        x = x_dec + t
        box(ax, x, y_dec, f"$s_{{{t}}}$", "decoder")
        ax.text(x, y_dec + 0.45, word, ha="center", va="bottom", fontsize=9)
        if t:
            arrow(ax, (x - 1, y_dec), (x, y_dec))
    if not attention:
        x_c = n_src - 1 + gap / 2 + 0.35
        box(ax, x_c, y_ctx, "$c$", "context", width=0.6)
        arrow(ax, (n_src - 1, y_enc), (x_c, y_ctx), COLOURS["context"], 1.6)
        for t in range(n_tgt):
            arrow(ax, (x_c, y_ctx), (x_dec + t, y_dec), COLOURS["context"], 1.0)
    else:
        x_step = x_dec + step
        x_c = x_step - 0.5
        _context_box(ax, weights, step, x_c, y_enc, y_ctx)
        arrow(ax, (x_c, y_ctx), (x_step, y_dec), COLOURS["context"], 1.6)
        if step > 0:  # s_{t-1} asks the question: its arrow to c_t
            arrow(ax, (x_step - 1, y_dec), (x_c, y_ctx), COLOURS["decoder"], 1.0)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def luong_diagram(
    source: Sequence[str],
    target: Sequence[str],
    weights: Sequence[float],
    step: int,
    input_feeding: bool = False,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Luong et al.'s decoder at decoder step ``step`` (from 0): the new state s_t asks (it is computed
    first, from the previous word y_{t-1}, drawn under it), every encoder state h_j reaches c_t through a
    line as thick as its weight, and c_t and s_t make the attentional state s~_t, which writes the word.
    With ``input_feeding``, a dashed arrow carries s~_{t-1} into the next update.
    """
    source, target = list(source), list(target)
    weights = [float(w) for w in weights]
    if len(weights) != len(source):
        raise ValueError(f"weights need one value per source word ({len(source)}), got {len(weights)}")
    if not 0 <= step < len(target):
        raise ValueError(f"step must be a decoder step t in 0..{len(target) - 1} (counted from 0), got {step}")
    x_dec = len(source) + 1.0
    ax = _frame(ax, x_dec + len(target), 5.2)
    y_enc, y_ctx, y_dec, y_att = 0.6, 1.9, 3.0, 4.1
    _encoder_row(ax, source, y_enc)
    for t, word in enumerate(target):
        x = x_dec + t
        box(ax, x, y_dec, f"$s_{{{t}}}$", "decoder")
        box(ax, x, y_att, rf"$\tilde{{s}}_{{{t}}}$", "attentional")
        previous = "<s>" if t == 0 else target[t - 1]  # y_{t-1}: the word s_t reads in its update
        ax.text(x + 0.2, y_dec - 0.31, previous, ha="center", va="top", fontsize=7, color=COLOURS["decoder"],
                fontweight="bold" if t == step else "normal")  # fmt: skip
        ax.text(x, y_att + 0.45, word, ha="center", va="bottom", fontsize=9)
        arrow(ax, (x, y_dec), (x, y_att), COLOURS["decoder"], 0.8)
        if t:
            arrow(ax, (x - 1, y_dec), (x, y_dec))
            if input_feeding:
                arrow(ax, (x - 1, y_att), (x, y_dec), COLOURS["attentional"], 1.0, style="--")
    ax.text(x_dec - 0.45, y_dec - 0.31, "reads:", ha="right", va="top", fontsize=7, color=COLOURS["decoder"])
    x_step = x_dec + step
    x_c = x_step - 0.5
    _context_box(ax, weights, step, x_c, y_enc, y_ctx)
    arrow(ax, (x_step, y_dec), (x_c, y_ctx), COLOURS["decoder"], 1.0)  # s_t asks

    arrow(ax, (x_c, y_ctx), (x_step, y_att), COLOURS["context"], 1.6)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def lookup_diagram(
    keys: Sequence[str],
    weights: Sequence[float],
    query: str = "q",
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Attention as a soft dictionary lookup (lesson 04): the query (orange) is compared with every key
    (blue); each value (purple, under its key) flows into the output (green) through a line as thick as
    its weight. A dictionary would take one value; attention takes all of them, weighted."""
    keys = list(keys)
    weights = [float(w) for w in weights]
    if len(weights) != len(keys):
        raise ValueError(f"weights need one value per key ({len(keys)}), got {len(weights)}")
    ax = _frame(ax, len(keys) + 2.6, 4.6)
    x0, y_key, y_val, y_q = 1.8, 2.9, 1.9, 3.9
    box(ax, 0.4, y_q - 1.5, f"${query}$", "decoder")
    box(ax, x0 + len(keys) - 0.2, 0.5, "output", "attentional", width=1.1)
    for j, (name, w) in enumerate(zip(keys, weights)):
        x = x0 + j
        box(ax, x, y_key, f"$k_{{{j}}}$", "encoder")
        box(ax, x, y_val, f"$v_{{{j}}}$", "context")
        ax.text(x, y_key + 0.42, name, ha="center", va="bottom", fontsize=9)
        ax.text(x, y_val - 0.42, f"{w:.2f}", ha="center", va="top", fontsize=8, color=COLOURS["context"])
        ax.plot([0.4 + BOX_W / 2, x - BOX_W / 2], [y_q - 1.5, y_key], color=COLOURS["decoder"],
                linewidth=0.3 + 4 * w, alpha=0.35 + 0.65 * w)  # fmt: skip
        ax.plot([x, x0 + len(keys) - 0.2], [y_val - BOX_H / 2 - 0.45, 0.5 + BOX_H / 2], color=COLOURS["context"],
                linewidth=0.3 + 6 * w, alpha=0.35 + 0.65 * w)  # fmt: skip
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def multihead_diagram(num_heads: int = 4, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Multi-head attention (lesson 05): the queries' input Q, the keys' K and the values' V (all three the same X in
    self-attention) go to h heads side by side (head 0 to head h - 1), each with its own W_i^Q, W_i^K, W_i^V of
    size d_k = d_model / h (said once, beside the heads, clear of the arrows); their outputs are concatenated and
    mixed by W^O."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or not 1 <= num_heads <= 8:
        raise ValueError(f"num_heads must be an int in 1..8 to draw, got {num_heads!r}")
    width = max(num_heads * 1.3, 4.0)
    ax = _frame(ax, width + 2.4, 5.0)
    centre = (width - 1.0) / 2
    xs = [centre + (i - (num_heads - 1) / 2) * 1.3 for i in range(num_heads)]
    bus = 1.05  # every head gets all three inputs
    for dx, name in ((-1.0, "$Q$"), (0.0, "$K$"), (1.0, "$V$")):
        box(ax, centre + dx, 0.3, name, "encoder", width=0.7)
        ax.plot([centre + dx, centre + dx], [0.3 + 0.3, bus], color=COLOURS["edge"], linewidth=1.2)
    ax.text(centre, -0.45, "self-attention: $Q = K = V = X$", ha="center", va="center", fontsize=8)
    ax.plot([min(xs[0], centre - 1.0), max(xs[-1], centre + 1.0)], [bus, bus], color=COLOURS["edge"], linewidth=1.2)
    for i, x in enumerate(xs):
        box(ax, x, 1.9, f"head {i}", "context", width=1.1)
        arrow(ax, (x, bus - 0.2), (x, 1.9))
        arrow(ax, (x, 1.9), (centre, 3.1), COLOURS["context"], 1.0)
    ax.text(xs[-1] + 0.7, 1.9, f"each head $i$: its own\n$W^Q_i, W^K_i, W^V_i$,\n$d_k = d_{{model}}/{num_heads}$",
            ha="left", va="center", fontsize=8)  # fmt: skip
    box(ax, centre, 3.1, "concat", "attentional", width=1.4)
    box(ax, centre, 4.2, "$W^O$", "decoder", width=1.0)
    arrow(ax, (centre, 3.1), (centre, 4.2))
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def tiling_diagram(
    query_len: int, block_q: int, block_k: int, current: tuple[int, int] | None = None, causal: bool = False,
    ax: Axes | None = None, title: str | None = None, key_len: int | None = None,
) -> Axes:  # fmt: skip
    """The score matrix S cut into tiles (lesson 08): rows are blocks of ``block_q`` queries, columns blocks of
    ``block_k`` keys, counted from 0 as in the code. FlashAttention visits one query block's row of tiles, left to
    right, keeping only a running max, sum and output per query row. Tiles done before ``current`` are green, the
    current one orange, the rest grey. With ``causal``, which tiles are computed and which need the mask is
    ``attnedu.flash.causal_tiles``: tiles wholly above the diagonal are skipped (white, never computed), and tiles
    the diagonal crosses are hatched (masked inside); the diagonal itself is drawn. A legend names every colour."""
    from matplotlib.patches import Patch

    from .flash import _tiles

    key_len = query_len if key_len is None else key_len
    compute, masked = _tiles(query_len, key_len, block_q, block_k, causal)
    rows, columns = compute.shape
    if current is not None and not (0 <= current[0] < rows and 0 <= current[1] < columns):
        raise ValueError(f"current tile must be within 0..{rows - 1} x 0..{columns - 1}, got {current}")
    ax = ax or plt.gca()
    height, width = query_len / block_q, key_len / block_k  # in tiles; a partial last block is drawn narrower
    for i in range(rows):
        for j in range(columns):
            done = current is not None and (i < current[0] or (i == current[0] and j < current[1]))
            here = current is not None and (i, j) == tuple(current)
            colour = ("white" if not compute[i, j] else COLOURS["decoder"] if here else
                      COLOURS["attentional"] if done else "#d9d9d9")  # fmt: skip
            w = min(1.0, width - j) - 0.1
            h = min(1.0, height - i) - 0.1
            ax.add_patch(FancyBboxPatch((j + 0.05, height - i - h - 0.05), w, h,
                                        boxstyle="round,pad=0.0,rounding_size=0.06", facecolor=colour,
                                        edgecolor="#999999" if not compute[i, j] else "none",
                                        hatch="///" if masked[i, j] else None))  # fmt: skip
            if here:
                ax.text(j + w / 2 + 0.05, height - i - h / 2 - 0.05, f"$S_{{{i}{j}}}$", ha="center", va="center",
                        color="white", fontsize=10)  # fmt: skip
    if causal:  # key j = query i: keys right of this line are in the future of their query
        end = min(query_len, key_len)
        ax.plot([0, end / block_k], [height, height - end / block_q], color="crimson", linewidth=1.2)
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.2, height + 0.2)
    ax.set_aspect("equal")
    ax.set_xticks([j + 0.5 for j in range(columns)], labels=[f"$K_{{{j}}}$" for j in range(columns)])
    ax.set_yticks([height - i - 0.5 for i in range(rows)], labels=[f"$Q_{{{i}}}$" for i in range(rows)])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    legend = [Patch(facecolor="#d9d9d9", label="to compute")]
    if current is not None:
        legend = [Patch(facecolor=COLOURS["attentional"], label="done"),
                  Patch(facecolor=COLOURS["decoder"], label="current tile")] + legend  # fmt: skip
    if causal:
        legend += [Patch(facecolor="white", edgecolor="#999999", label="skipped (all in the future)"),
                   Patch(facecolor="#d9d9d9", hatch="///", label="masked inside (the diagonal crosses it)"),
                   Line2D([0], [0], color="crimson", label="key = query")]  # fmt: skip
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8, ncol=2, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def memory_hierarchy_diagram(ax: Axes | None = None, title: str | None = None) -> Axes:
    """Where a GPU keeps data (lesson 08): a small, fast memory on the chip next to the arithmetic units, a large,
    slow one beside it. The sizes and bandwidths are an NVIDIA A100's as Dao et al. (2022, Figure 1) give them; the
    bar lengths are logarithmic. Naive attention writes S and P to the slow memory and reads them back; the tiled
    kernel keeps each tile in the fast one. The SRAM figure is the total over the A100's 108 streaming
    multiprocessors, about 192 KB of shared memory and L1 each; registers are not counted in it."""
    levels = [  # name, size, bandwidth, size in bytes, bandwidth in bytes/s (Dao et al. 2022, Fig. 1: A100 40 GB)
        ("on-chip SRAM (108 SMs x 192 KB)", "20 MB in all", "19 TB/s", 20e6, 19e12),
        ("GPU main memory (HBM)", "40 GB", "1.5 TB/s", 40e9, 1.5e12),
        ("CPU main memory (DRAM)", "> 1 TB", "12.8 GB/s", 1e12, 12.8e9),
    ]
    import math

    ax = ax or plt.gca()
    colours = [COLOURS["attentional"], COLOURS["decoder"], COLOURS["encoder"]]
    for row, ((name, size, bandwidth, nbytes, speed), colour) in enumerate(zip(levels, colours)):
        y = len(levels) - 1 - row
        size_len, speed_len = math.log10(nbytes / 1e6) + 1, math.log10(speed / 1e9) + 1
        ax.barh(y + 0.17, size_len, height=0.3, color=colour, alpha=0.45)
        ax.barh(y - 0.17, speed_len, height=0.3, color=colour)
        ax.text(size_len + 0.1, y + 0.17, f"size {size}", va="center", fontsize=9)
        ax.text(speed_len + 0.1, y - 0.17, f"bandwidth {bandwidth}", va="center", fontsize=9)
        ax.text(-0.1, y, name, ha="right", va="center", fontsize=10)
    ax.set_xlim(0, 9.5)
    ax.set_ylim(-0.6, len(levels) - 0.4)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.text(0, -0.55, "bar lengths on log scales (light: size, dark: bandwidth); A100 figures from Dao et al. "
            "(2022), Fig. 1", fontsize=8, color="#555555")  # fmt: skip
    if title:
        ax.set_title(title, fontsize=11)
    return ax


# --------------------------------------------------------------------------------------------
# Lessons 06 and 07: masks and positions. Positions count from 0 here, as in the code of these lessons.
# --------------------------------------------------------------------------------------------


def mask_gallery(fig, length: int = 8, real_tokens: int = 6, window: int = 1, cached_queries: int = 3) -> list[Axes]:
    """Lesson 06's masks side by side, built by ``attnedu.masks`` for one sequence of ``length`` positions (0-based):
    causal; padding (the keys after ``real_tokens``); both; causal for ``cached_queries`` new queries against a
    cache (bottom-right); a sliding window of ``window`` on each side; the same, causal; the window plus a global
    token at position 0 (Longformer). Rows are queries, columns keys; dark = may attend, light = blocked (one
    legend for the figure). Each title counts the allowed pairs."""
    import torch

    from .masks import causal_mask, global_window_mask, padding_mask, sliding_window_mask
    from .plots import plot_mask

    for name, value, low in (("length", length, 2), ("real_tokens", real_tokens, 1), ("cached_queries",
                             cached_queries, 1)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if real_tokens > length or cached_queries > length:
        raise ValueError(f"real_tokens and cached_queries must be at most length={length}, got {real_tokens} and "
                         f"{cached_queries}")  # fmt: skip
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    keys = padding_mask(torch.tensor([real_tokens]), length)[0]
    panels = [
        ("causal", causal_mask(length)),
        (f"padding: {real_tokens} real", keys[None, :].expand(length, length)),
        ("causal + padding", causal_mask(length) & keys[None, :]),
        (f"causal, {cached_queries} new queries\nand a cache (bottom-right)",
         causal_mask(cached_queries, length, align="bottom-right")),
        (f"sliding window {window}", sliding_window_mask(length, window)),
        (f"causal sliding window {window}", sliding_window_mask(length, window, causal=True)),
        (f"window {window} + global token 0", global_window_mask(length, window, [0])),
    ]  # fmt: skip
    axes = fig.subplots(1, len(panels))
    for ax, (title, mask) in zip(axes, panels):
        plot_mask(mask, ax, title=f"{title}\n{int(mask.sum())} of {mask.numel()} pairs")
        if ax is not axes[0]:
            ax.set_ylabel("")
    from matplotlib.patches import Patch

    from .plots import CMAP

    colours = plt.get_cmap(CMAP)
    fig.legend(
        handles=[Patch(facecolor=colours(1.0), label="may attend (True)"),
                 Patch(facecolor=colours(0.13), edgecolor="#bbbbbb", label="blocked (False)")],
        loc="outside lower center", ncol=2, fontsize=9, frameon=False,
    )  # fmt: skip
    return list(axes)


def rope_rotation_diagram(fig, q=(1.0, 0.35), k=(0.75, -0.55), frequency: float = 0.45, pairs=((2, 1), (6, 5))):
    """RoPE in one pair of features (lesson 07): the query's pair (orange) is turned by m * frequency, the key's
    (blue) by n * frequency, each from where it started (faint, dashed). One panel per (m, n) in ``pairs``; with
    the same offset m - n the angle between the turned vectors is the same, so is their dot product, printed in
    each title: the score depends on m - n only."""
    import math as _math

    pairs = [tuple(p) for p in pairs]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"pairs must be (m, n) position pairs such as ((2, 1), (6, 5)), got {pairs!r}")
    axes = fig.subplots(1, len(pairs))
    axes = [axes] if len(pairs) == 1 else list(axes)

    def turned(v, angle):
        c, s = _math.cos(angle), _math.sin(angle)
        return (v[0] * c - v[1] * s, v[0] * s + v[1] * c)

    for ax, (m, n) in zip(axes, pairs):
        circle = plt.Circle((0, 0), 1.0, fill=False, color="#cccccc", linestyle=":")
        ax.add_patch(circle)
        rq, rk = turned(q, m * frequency), turned(k, n * frequency)
        for vector, colour, style, width in (
            (q, COLOURS["decoder"], "--", 0.8),
            (k, COLOURS["encoder"], "--", 0.8),
            (rq, COLOURS["decoder"], "-", 2.0),
            (rk, COLOURS["encoder"], "-", 2.0),
        ):
            patch = FancyArrowPatch((0, 0), vector, arrowstyle="-|>", mutation_scale=12, color=colour,
                                    linewidth=width, alpha=1.0 if style == "-" else 0.45)  # fmt: skip
            patch.set_linestyle(style)
            ax.add_patch(patch)
        start, end = sorted((_math.atan2(rk[1], rk[0]), _math.atan2(rq[1], rq[0])))
        arc = [start + (end - start) * t / 30 for t in range(31)]
        ax.plot([0.35 * _math.cos(a) for a in arc], [0.35 * _math.sin(a) for a in arc], color=COLOURS["context"])
        middle = (start + end) / 2
        ax.text(0.5 * _math.cos(middle), 0.5 * _math.sin(middle), "angle\nbetween", fontsize=7, ha="center",
                va="center", color=COLOURS["context"])  # fmt: skip
        score = rq[0] * rk[0] + rq[1] * rk[1]
        ax.set_title(f"query at m = {m}, key at n = {n} (m - n = {m - n})\nturned q . turned k = {score:.3f}",
                     fontsize=9)  # fmt: skip
        ax.set_xlim(-1.25, 1.25)
        ax.set_ylim(-1.25, 1.25)
        ax.set_aspect("equal")
        ax.axhline(0, color="#eeeeee", linewidth=0.8, zorder=0)
        ax.axvline(0, color="#eeeeee", linewidth=0.8, zorder=0)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("feature a of the pair")
    axes[0].set_ylabel("feature b of the pair")
    from matplotlib.lines import Line2D

    fig.legend(
        handles=[Line2D([], [], color=COLOURS["decoder"], linewidth=2, label="query, turned by m x frequency"),
                 Line2D([], [], color=COLOURS["encoder"], linewidth=2, label="key, turned by n x frequency"),
                 Line2D([], [], color="#999999", linestyle="--", label="before turning (position 0)")],
        loc="outside lower center", ncol=3, fontsize=8, frameon=False,
    )  # fmt: skip
    return axes


def positions_diagram(ax: Axes | None = None) -> Axes:
    """Where each kind of position enters one attention layer (lesson 07): sinusoidal and learned positions are
    added to the embeddings, before W_Q and W_K; RoPE turns the queries and keys after the projections; ALiBi adds
    a bias to the scores. The layer's own steps are blue boxes, the positions green boxes with a green arrow to
    the step they change."""
    ax = _frame(ax, 10.6, 3.0)
    steps = [(0.3, "tokens"), (2.05, "embeddings"), (3.8, "$W_Q$, $W_K$"), (5.55, "$q$, $k$"),
             (7.3, r"$q \cdot k / \sqrt{d}$"), (9.05, "softmax")]  # fmt: skip
    y = 0.5
    for x, text in steps:
        box(ax, x, y, text, "encoder", width=1.45)
    for (x0, _), (x1, _) in zip(steps, steps[1:]):
        arrow(ax, (x0, y), (x1, y))
    y_pos = 1.95
    for x_from, x_to, text in ((1.2, 2.05, "sinusoidal, learned:\nadded"), (4.7, 5.55, "RoPE: q and k\nturned"),
                               (8.2, 7.3, "ALiBi: $-m_h (i - j)$\nadded")):  # fmt: skip
        box(ax, x_from, y_pos, "", "attentional", width=1.9)
        ax.text(x_from, y_pos, text, ha="center", va="center", color="white", fontsize=8)
        arrow(ax, (x_from, y_pos), (x_to, y), COLOURS["attentional"], 1.6)
    ax.text(4.7, -0.2, "blue: the steps of one attention layer; green: where each kind of position enters", ha="center",
            va="top", fontsize=8, color="#555555")  # fmt: skip
    return ax


def transformer_blocks_diagram(ax: Axes | None = None, title: str | None = None) -> Axes:
    """Two Transformer blocks side by side (lesson 09), data flowing upwards. Left, the 2017 encoder block
    (post-norm): each sublayer's output is added to its input, then normalised ("Add & Norm"), so the residual stream
    itself passes through every LayerNorm. Right, today's decoder block (pre-norm, as in Llama): each sublayer reads
    a normalised copy of the stream and adds its output back (+), so the stream is never normalised on the way up.
    Grey lines are the residual connections; a legend names every colour."""
    from matplotlib.patches import Patch

    ax = ax or plt.gca()
    kinds = {"attention": "context", "feed-forward": "attentional", "normalisation": "decoder", "add": "encoder"}
    width, top = 3.1, 7.6

    def column(x: float, steps: list[tuple[str, str]], residuals: list[tuple[int, int]], heading: str) -> None:
        ys = [0.9 + 1.0 * i for i in range(len(steps))]
        ax.text(x, 0.0, "$x$", ha="center", va="center", fontsize=12)
        previous = 0.15
        for (text, kind), y in zip(steps, ys):
            box(ax, x, y, text, kinds[kind], width=0.55 if kind == "add" else width)
            arrow(ax, (x, previous), (x, y))
            previous = y
        ax.text(x, ys[-1] + 0.95, "output", ha="center", va="center", fontsize=10)
        arrow(ax, (x, ys[-1]), (x, ys[-1] + 0.95))
        for start, end in residuals:  # from below step `start` round the right-hand side into step `end`
            y0, y1 = (0.35 if start < 0 else ys[start] + 0.45), ys[end]
            side = x + width / 2 + 0.35
            ax.plot([x, side, side], [y0, y0, y1], color=COLOURS["edge"], linewidth=1.2)
            right = x + (0.55 if steps[end][1] == "add" else width) / 2
            arrow(ax, (side, y1), (right - 0.02, y1))
        ax.text(x, top, heading, ha="center", va="center", fontsize=11)

    column(0.0, [("multi-head attention", "attention"), ("Add & LayerNorm", "normalisation"),
                 ("feed-forward (ReLU)", "feed-forward"), ("Add & LayerNorm", "normalisation")],
           [(-1, 1), (1, 3)], "2017 encoder block (post-norm)")  # fmt: skip
    column(5.0, [("RMSNorm", "normalisation"), ("causal attention + RoPE", "attention"), ("+", "add"),
                 ("RMSNorm", "normalisation"), ("SwiGLU", "feed-forward"), ("+", "add")],
           [(-1, 2), (2, 5)], "today's decoder block (pre-norm)")  # fmt: skip
    ax.set_xlim(-1.9, 7.0)
    ax.set_ylim(-0.4, 8.0)
    ax.set_aspect("equal")
    ax.axis("off")
    legend = [Patch(facecolor=COLOURS[k], label=name) for name, k in kinds.items()]
    legend.append(Line2D([0], [0], color=COLOURS["edge"], label="residual connection"))
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, ncol=3, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def kv_sharing_diagram(num_heads: int = 4, ax: Axes | None = None, title: str | None = None) -> Axes:
    """What a decoder keeps per token and layer (lesson 10), for ``num_heads`` query heads (heads counted from 0):
    multi-head attention caches one key/value head per query head; grouped-query attention one per group of query
    heads (query head h reads K/V head h // group); multi-query attention one for all; multi-head latent attention
    (DeepSeek-V2) one latent vector c from which every head's key and value are computed (dashed: computed, not
    cached). A legend names every colour; the line under each panel counts the cached numbers per token and layer,
    with d_k = head_dim, the lesson's notation."""
    from matplotlib.patches import Patch

    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads not in (2, 4, 8):
        raise ValueError(f"num_heads must be 2, 4 or 8 to draw, got {num_heads!r}")
    ax = ax or plt.gca()
    step, panel = 0.7, num_heads * 0.7 + 0.9
    variants = (("multi-head (MHA)", num_heads), ("grouped-query (GQA)", num_heads // 2), ("multi-query (MQA)", 1),
                ("latent (MLA)", 0))  # fmt: skip
    for i, (name, kv_heads) in enumerate(variants):
        left = i * panel
        xs = [left + step * h for h in range(num_heads)]
        centre = (xs[0] + xs[-1]) / 2
        for h, x in enumerate(xs):
            box(ax, x, 2.6, f"q{h}", "decoder", width=0.55)
        if kv_heads:
            group = num_heads // kv_heads
            kx = [sum(xs[g * group : (g + 1) * group]) / group for g in range(kv_heads)]
            for g, x in enumerate(kx):
                box(ax, x, 0.8, f"kv{g}", "encoder", width=0.6)
            for h, x in enumerate(xs):
                arrow(ax, (kx[h // group], 0.8), (x, 2.6), COLOURS["edge"], 1.0)
            cached = f"2 x {kv_heads} x d_k" if kv_heads > 1 else "2 x d_k"
        else:
            box(ax, centre, 0.35, "c", "context", width=0.8)
            for h, x in enumerate(xs):
                box(ax, x, 1.5, f"kv{h}", "encoder", width=0.55)
                ax.patches[-1].set_linestyle("--")
                ax.patches[-1].set_alpha(0.45)
                arrow(ax, (centre, 0.35), (x, 1.5), COLOURS["context"], 1.0, style="--")
                arrow(ax, (x, 1.5), (x, 2.6), COLOURS["edge"], 1.0)
            cached = "d_c (+ a RoPE key)"
        ax.text(centre, 3.35, name, ha="center", va="center", fontsize=10)
        ax.text(centre, -0.45, f"cached: {cached}", ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.6, 4 * panel - 0.5)
    ax.set_ylim(-0.8, 3.7)
    ax.axis("off")
    legend = [Patch(facecolor=COLOURS["decoder"], label="query head (not cached)"),
              Patch(facecolor=COLOURS["encoder"], label="key/value head (cached)"),
              Patch(facecolor=COLOURS["context"], label="latent c (cached)"),
              Patch(facecolor=COLOURS["encoder"], alpha=0.45,
                    label="key/value given by c (not formed if absorbed)")]  # fmt: skip
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, ncol=4, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def induction_circuit_diagram(ax: Axes | None = None, title: str | None = None) -> Axes:
    """The induction circuit of lesson 11 (Olsson et al. 2022) on a sequence ``A B C D A ?``, positions counted from 0
    along the bottom, data flowing upwards. Layer 0: at each position a previous-token head copies the token before it
    into the residual stream (B now carries "A came before me"). Layer 1: at the second A an induction head looks for
    a position whose previous token was A (its query matches that key: prefix matching), finds B, and copies B into
    the output: the prediction of the next token. Blue: tokens; orange: layer 0's stream; purple: layer 1's; green:
    the prediction."""
    from matplotlib.patches import Patch

    ax = ax or plt.gca()
    tokens = ["A", "B", "C", "D", "A"]
    y_tok, y0, y1, y_out = 0.0, 1.6, 3.2, 4.6
    for i, token in enumerate(tokens):
        box(ax, 1.3 * i, y_tok, token, "encoder", width=0.6)
        ax.text(1.3 * i, y_tok - 0.55, f"position {i}", ha="center", va="center", fontsize=7)
        box(ax, 1.3 * i, y0, "", "decoder", width=0.6)
        box(ax, 1.3 * i, y1, "", "context", width=0.6)
        arrow(ax, (1.3 * i, y_tok), (1.3 * i, y0))
        arrow(ax, (1.3 * i, y0), (1.3 * i, y1))
    # layer 0: each position reads the one before it (drawn for B reading A)
    arrow(ax, (0.0, y_tok + 0.1), (1.3, y0 - 0.05), colour=COLOURS["decoder"], width=2.2)
    ax.text(-0.6, y0, "layer 0, previous-token head:\nB learns 'A came before me'", fontsize=7, ha="right",
            va="center", color=COLOURS["decoder"])  # fmt: skip
    # layer 1: the second A attends to B (whose previous token was A) and copies B
    last = 1.3 * (len(tokens) - 1)
    arrow(ax, (1.3, y0 + 0.05), (last, y1 - 0.05), colour=COLOURS["context"], width=2.2)
    label = "layer 1, induction head: the query 'A'\nmatches the key 'previous token\nwas A' at B; B is copied"
    ax.text(-0.6, y1, label, fontsize=7, ha="right", va="center", color=COLOURS["context"])
    box(ax, last, y_out, "B", "attentional", width=0.6)
    arrow(ax, (last, y1), (last, y_out))
    ax.text(last + 0.5, y_out, "prediction", fontsize=8, ha="left", va="center")
    ax.set_xlim(-4.2, last + 1.8)
    ax.set_ylim(-1.0, 5.2)
    ax.set_aspect("equal")
    ax.axis("off")
    legend = [Patch(facecolor=COLOURS[k], label=name) for name, k in
              (("tokens", "encoder"), ("after layer 0", "decoder"), ("after layer 1", "context"),
               ("next-token prediction", "attentional"))]  # fmt: skip
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8, ncol=4, frameon=False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
