"""The diagrams' visual vocabulary: colours, boxes, arrows and the frame every diagram is drawn in."""

from __future__ import annotations

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
