"""Lessons 01-03's diagrams: the encoder-decoder with a fixed context (``seq2seq_diagram``, with attention
weights as line widths) and Luong's decoder (``luong_diagram``)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes

from ._draw import BOX_H, COLOURS, _frame, arrow, box


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
