"""Lessons 08-11's diagrams: FlashAttention's tiles and the memory hierarchy (08), the Transformer blocks (09), how
heads share keys and values (10), the induction circuit (11)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch

from ._draw import COLOURS, arrow, box


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

    from ..flash import _tiles

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
