"""Lesson 12's diagrams: ring attention's rotation of the K/V blocks over its steps, the causal (query chunk, key
chunk) grid of the contiguous and zigzag layouts coloured by the rank that computes each block, and the all-to-all of
DeepSpeed-Ulysses (tokens x heads re-partitioned). What each rank holds and computes is read from
``attnedu.context_parallel`` (``rank_chunks`` and the rule the ring follows), not redrawn by hand.

Ranks count from 0 and each has one colour in every panel (``RANK_COLOURS``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Patch, Rectangle

from ._draw import COLOURS, arrow

# rank r's colour, the same in every panel of the lesson (the house colours first)
RANK_COLOURS = (COLOURS["encoder"], COLOURS["decoder"], COLOURS["attentional"], COLOURS["context"], "#C44E52",
                "#937860", "#DA8BC3", "#8C8C8C")  # fmt: skip


def _check_world_size(world_size: int, largest: int = len(RANK_COLOURS)) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 2 <= world_size <= largest:
        raise ValueError(f"world_size must be an int in 2..{largest} to draw, got {world_size!r}")
    return world_size


def _rank_box(ax: Axes, x: float, y: float, text: str, rank: int, width: float = 0.9, height: float = 0.55):
    ax.add_patch(Rectangle((x - width / 2, y - height / 2), width, height, facecolor=RANK_COLOURS[rank],
                           edgecolor="none"))  # fmt: skip
    ax.text(x, y, text, ha="center", va="center", color="white", fontsize=9)


def ring_diagram(world_size: int = 4, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Ring attention over its steps (Liu et al. 2023), for ``world_size`` = P ranks. Left: the ring, each rank
    sending the K/V block it holds to rank r + 1 (mod P) while it computes on it. Right: which block each rank holds
    at step t = 0 .. P-1, block (r - t) mod P, coloured by the rank that owns it (its home): every block visits every
    rank once, in P - 1 transfers. Each rank keeps its own queries throughout."""
    world_size = _check_world_size(world_size)
    ax = ax or plt.gca()
    # the ring: ranks on a circle, clockwise from the top, arrows r -> r + 1
    radius, centre = 1.35, (0.0, 0.0)
    points = [(centre[0] + radius * math.sin(2 * math.pi * r / world_size),
               centre[1] + radius * math.cos(2 * math.pi * r / world_size)) for r in range(world_size)]  # fmt: skip
    for r, (x, y) in enumerate(points):
        _rank_box(ax, x, y, f"rank {r}", r, width=0.95)
    for r in range(world_size):
        arrow(ax, points[r], points[(r + 1) % world_size], COLOURS["edge"], 1.4)
    ax.text(centre[0], centre[1], "K/V blocks\ntravel to\nrank r + 1", ha="center", va="center", fontsize=8)
    # the table: step t (rows, top to bottom) x rank r (columns): the block rank r holds
    left, cell_w, cell_h = 3.2, 1.05, 0.7
    top = (world_size - 1) * cell_h / 2
    for r in range(world_size):
        ax.text(left + r * cell_w, top + 0.6, f"rank {r}", ha="center", va="center", fontsize=9)
    for t in range(world_size):
        y = top - t * cell_h
        ax.text(left - 0.75, y, f"step {t}", ha="right", va="center", fontsize=9)
        for r in range(world_size):
            source = (r - t) % world_size
            _rank_box(ax, left + r * cell_w, y, f"$K_{{{source}}}V_{{{source}}}$", source, width=0.9, height=0.55)
    ax.text(left + (world_size - 1) * cell_w / 2, top - world_size * cell_h - 0.05,
            f"at step t, rank r holds block (r - t) mod {world_size}:\n{world_size - 1} transfers, and each block "
            "has visited every rank", ha="center", va="center", fontsize=8)  # fmt: skip
    ax.set_xlim(-2.0, left + world_size * cell_w)
    ax.set_ylim(min(-radius - 0.5, top - world_size * cell_h - 0.45), max(radius + 0.5, top + 0.9))
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def layout_diagram(world_size: int = 4, layout: str = "contiguous", ax: Axes | None = None,
                   title: str | None = None) -> Axes:  # fmt: skip
    """The causal score matrix of one sequence cut into chunks (``layout``: P contiguous chunks, or 2P for zigzag,
    rank r holding chunks r and 2P - 1 - r), query chunks down, key chunks across, counted from 0. Each (query chunk,
    key chunk) block is coloured by the rank that computes it, the rank that holds the query chunk: solid when
    computed in full (all keys before the queries), hatched on the diagonal (computed with the causal mask inside),
    white when skipped (every key after every query). The whole panel is the N x N matrix at the same size for both
    layouts, so a block's area is its work; the title counts each rank's blocks. Drawn from
    ``attnedu.context_parallel.rank_chunks`` and the ring's own rule for a pair."""
    from ..context_parallel import _pair, rank_chunks, score_blocks

    world_size = _check_world_size(world_size)
    ax = ax or plt.gca()
    chunks = world_size if layout == "contiguous" else 2 * world_size
    owner = {c: r for r in range(world_size) for c in rank_chunks(r, world_size, layout)}  # validates layout
    size = 1.0 / chunks
    for a in range(chunks):
        for b in range(chunks):
            kind = _pair(a, b, True)
            x, y = b * size, 1.0 - (a + 1) * size
            colour = "white" if kind == "skip" else RANK_COLOURS[owner[a]]
            ax.add_patch(Rectangle((x, y), size, size, facecolor=colour, edgecolor="white" if kind != "skip" else
                                   "#cccccc", linewidth=0.8, hatch="///" if kind == "diagonal" else None,
                                   alpha=0.55 if kind == "diagonal" else 1.0))  # fmt: skip
    ax.plot([0, 1], [1, 0], color="crimson", linewidth=1.0)
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.01, 1.01)
    ax.set_aspect("equal")
    ticks = [(c + 0.5) * size for c in range(chunks)]
    ax.set_xticks(ticks, labels=[str(c) for c in range(chunks)], fontsize=7)
    ax.set_yticks([1.0 - t for t in ticks], labels=[f"{c} (r{owner[c]})" for c in range(chunks)], fontsize=7)
    ax.set_xlabel("key chunk", fontsize=8)
    ax.set_ylabel("query chunk (rank)", fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    counts = score_blocks(world_size, layout, True)
    work = ", ".join(f"{c['full']}+{c['diagonal']}" for c in counts)
    ax.set_title(title if title is not None else f"{layout}: {chunks} chunks; full + diagonal blocks\nper rank "
                 f"0..{world_size - 1}: {work}", fontsize=9)  # fmt: skip
    return ax


def layouts_diagram(world_size: int = 4, fig=None):
    """``layout_diagram`` for the contiguous and the zigzag layouts side by side, with one legend for both (every rank's
    colour, full / diagonal / skipped). -> the two Axes."""
    fig = fig or plt.figure(figsize=(8.5, 4.4), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, layout in zip(axes, ("contiguous", "zigzag")):
        layout_diagram(world_size, layout, ax)
    handles = [Patch(facecolor=RANK_COLOURS[r], label=f"rank {r}") for r in range(world_size)]
    handles += [Patch(facecolor="#bbbbbb", label="computed in full"),
                Patch(facecolor="#bbbbbb", hatch="///", alpha=0.55, label="diagonal: masked inside (half the work)"),
                Patch(facecolor="white", edgecolor="#cccccc", label="skipped (all in the future)")]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncol=world_size, fontsize=8, frameon=False)
    return list(axes)


def ulysses_diagram(world_size: int = 4, heads: int = 8, ax: Axes | None = None, title: str | None = None) -> Axes:
    """DeepSpeed-Ulysses' all-to-all (Jacobs et al. 2023) for P = ``world_size`` ranks and ``heads`` = H heads. Left:
    before, rank r holds its N/P tokens for all H heads (a row band of the tokens x heads grid). Right: after one
    all-to-all, rank r holds all N tokens of its H/P heads (a column band): every rank sent the block (its tokens, head
    group g) to rank g, keeping (P - 1)/P of its data in flight. Each cell is coloured by the rank that holds it; the
    hatched cells, rank r's tokens of head group r, stay home (the 1/P that is not sent). heads must be divisible by
    world_size, as ``ulysses_attention`` requires."""
    world_size = _check_world_size(world_size)
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or heads % world_size or heads > 16:
        raise ValueError(f"heads must be an int in 1..16 divisible by world_size={world_size} to draw, got "
                         f"{heads!r}")  # fmt: skip
    ax = ax or plt.gca()
    group = heads // world_size
    cell_w, cell_h = 0.32, 0.32
    rows = world_size  # token chunks
    grid_w, grid_h = heads * cell_w, rows * cell_h
    gap = 3.4
    for panel, (x0, heading) in enumerate(((0.0, "before: my tokens, all heads"),
                                           (grid_w + gap, "after: all tokens, my heads"))):  # fmt: skip
        for chunk in range(rows):
            for h in range(heads):
                rank = chunk if panel == 0 else h // group
                home = chunk == h // group  # held by the same rank before and after: not sent
                ax.add_patch(Rectangle((x0 + h * cell_w, grid_h - (chunk + 1) * cell_h), cell_w, cell_h,
                                       facecolor=RANK_COLOURS[rank], edgecolor="white", linewidth=0.8,
                                       hatch="////" if home else None))  # fmt: skip
        ax.text(x0 + grid_w / 2, grid_h + 0.3, heading, ha="center", va="bottom", fontsize=9)
        ax.text(x0 + grid_w / 2, -0.2, f"heads 0..{heads - 1}", ha="center", va="top", fontsize=8)
        for chunk in range(rows):
            ax.text(x0 - 0.08, grid_h - (chunk + 0.5) * cell_h, f"tokens {chunk}", ha="right", va="center",
                    fontsize=7)  # fmt: skip
    middle = grid_w + (gap - 1.0) / 2
    arrow(ax, (grid_w, grid_h / 2), (grid_w + gap - 1.0, grid_h / 2), COLOURS["edge"], 1.6)
    ax.text(middle, grid_h / 2 + 0.3, "all-to-all", ha="center", va="center", fontsize=9)
    ax.text(middle, grid_h / 2 - 0.4, "(and back after\nattention)", ha="center", va="center", fontsize=7)
    handles = [Patch(facecolor=RANK_COLOURS[r], label=f"held by rank {r}") for r in range(world_size)]
    handles.append(Patch(facecolor="white", edgecolor=COLOURS["edge"], hatch="////", label="stays home (not sent)"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=world_size + 1, fontsize=8,
              frameon=False)  # fmt: skip
    ax.set_xlim(-1.0, 2 * grid_w + gap + 0.1)
    ax.set_ylim(-0.5, grid_h + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    return ax
