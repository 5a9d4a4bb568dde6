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
    """Multi-head attention (lesson 05): the input X feeds h heads side by side (head 0 to head h - 1), each
    with its own W_i^Q, W_i^K, W_i^V of size d_k; their outputs are concatenated and mixed by W^O."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or not 1 <= num_heads <= 8:
        raise ValueError(f"num_heads must be an int in 1..8 to draw, got {num_heads!r}")
    width = max(num_heads * 1.3, 4.0)
    ax = _frame(ax, width + 0.6, 5.0)
    centre = (width - 1.0) / 2
    box(ax, centre, 0.3, "$X$", "encoder", width=1.2)
    xs = [centre + (i - (num_heads - 1) / 2) * 1.3 for i in range(num_heads)]
    for i, x in enumerate(xs):
        box(ax, x, 1.9, f"head {i}", "context", width=1.1)
        ax.text(x, 1.9 - 0.45, f"$d_k$ = $d_{{model}}$/{num_heads}", ha="center", va="top", fontsize=7)
        arrow(ax, (centre, 0.3), (x, 1.9))
        arrow(ax, (x, 1.9), (centre, 3.1), COLOURS["context"], 1.0)
    box(ax, centre, 3.1, "concat", "attentional", width=1.4)
    box(ax, centre, 4.2, "$W^O$", "decoder", width=1.0)
    arrow(ax, (centre, 3.1), (centre, 4.2))
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def tiling_diagram(
    n_query_blocks: int, n_key_blocks: int, current: tuple[int, int], causal: bool = False,
    ax: Axes | None = None, title: str | None = None,
) -> Axes:  # fmt: skip
    """The score matrix S cut into tiles (lesson 08): rows are blocks of queries, columns blocks of keys,
    counted from 1. FlashAttention visits one query block's row of tiles, left to right, keeping only a
    running max, sum and output per query row. Done tiles green, the current one orange, the rest grey;
    with ``causal``, tiles wholly above the diagonal are skipped (white, never computed)."""
    row, column = current
    if not (1 <= row <= n_query_blocks and 1 <= column <= n_key_blocks):
        raise ValueError(f"current tile must be within 1..{n_query_blocks} x 1..{n_key_blocks}, got {current}")
    ax = ax or plt.gca()
    for i in range(1, n_query_blocks + 1):
        for j in range(1, n_key_blocks + 1):
            skipped = causal and j > i
            done = (i < row) or (i == row and j < column)
            colour = "white" if skipped else COLOURS["decoder"] if (i, j) == (row, column) else (
                COLOURS["attentional"] if done else "#d9d9d9")  # fmt: skip
            ax.add_patch(FancyBboxPatch((j - 1 + 0.05, n_query_blocks - i + 0.05), 0.9, 0.9,
                                        boxstyle="round,pad=0.0,rounding_size=0.08", facecolor=colour,
                                        edgecolor="#bbbbbb" if skipped else "none"))  # fmt: skip
            if (i, j) == (row, column):
                ax.text(j - 0.5, n_query_blocks - i + 0.5, f"$S_{{{i}{j}}}$", ha="center", va="center",
                        color="white", fontsize=10)  # fmt: skip
    ax.set_xlim(-0.2, n_key_blocks + 0.2)
    ax.set_ylim(-0.2, n_query_blocks + 0.2)
    ax.set_aspect("equal")
    ax.set_xticks(
        [j - 0.5 for j in range(1, n_key_blocks + 1)], labels=[f"$K_{{{j}}}$" for j in range(1, n_key_blocks + 1)]
    )
    ax.set_yticks([n_query_blocks - i + 0.5 for i in range(1, n_query_blocks + 1)],
                  labels=[f"$Q_{{{i}}}$" for i in range(1, n_query_blocks + 1)])  # fmt: skip
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(title, fontsize=11)
    return ax
