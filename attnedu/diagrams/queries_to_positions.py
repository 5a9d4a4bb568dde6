"""Lessons 04-07's diagrams: attention as a lookup (04), multi-head attention (05), the mask gallery (06), RoPE's
rotation and where each position encoding enters the model (07)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch

from ._draw import BOX_H, BOX_W, COLOURS, _frame, arrow, box


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


def mask_gallery(fig, length: int = 8, real_tokens: int = 6, window: int = 1, cached_queries: int = 3) -> list[Axes]:
    """Lesson 06's masks side by side, built by ``attnedu.masks`` for one sequence of ``length`` positions (0-based):
    causal; padding (the keys after ``real_tokens``); both; causal for ``cached_queries`` new queries against a
    cache (bottom-right); a sliding window of ``window`` on each side; the same, causal; the window plus a global
    token at position 0 (Longformer). Rows are queries, columns keys; dark = may attend, light = blocked (one
    legend for the figure). Each title counts the allowed pairs."""
    import torch

    from ..masks import causal_mask, global_window_mask, padding_mask, sliding_window_mask
    from ..plots import plot_mask

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

    from ..plots import CMAP

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
