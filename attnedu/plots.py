"""Plots shared by every lesson. Attention maps always use the colour scale 0..1, so maps
from different lessons, models and sentences can be compared by eye."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

CMAP = "Blues"
GOLD_COLOUR = "tab:orange"


def plot_attention(
    weights: torch.Tensor,
    source: Sequence[str],
    target: Sequence[str],
    gold: Sequence[int] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    highlight_row: int | None = None,
):
    """Heat map of attention weights: one row per target word, one column per source word.

    weights: (target_len, source_len), values in [0, 1]
    gold:    optional gold alignment, gold[i] = source position of target word i, drawn as
             orange squares so a learner sees where the model agrees with it.
    Returns the image, for a shared colour bar: ``fig.colorbar(image, ax=axes)``.
    """
    weights = torch.as_tensor(weights).detach().float()
    if weights.dim() != 2:
        raise ValueError(f"weights must be (target_len, source_len), got shape {tuple(weights.shape)}")
    if weights.shape != (len(target), len(source)):
        raise ValueError(
            f"weights have shape {tuple(weights.shape)} but there are {len(target)} target and "
            f"{len(source)} source labels; pass one label per row and per column"
        )
    ax = ax or plt.gca()
    image = ax.imshow(weights.numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(source)), labels=source, rotation=90)
    ax.set_yticks(range(len(target)), labels=target)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if gold is not None:
        if len(gold) != len(target):
            raise ValueError(f"gold alignment has {len(gold)} entries, expected one per target word ({len(target)})")
        for i, j in enumerate(gold):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=GOLD_COLOUR, linewidth=1.5))
    if highlight_row is not None:
        ax.add_patch(
            Rectangle((-0.5, highlight_row - 0.5), len(source), 1, fill=False, edgecolor="crimson", linewidth=2)
        )
    if title:
        ax.set_title(title)
    return image


def plot_attention_step(weights: torch.Tensor, source: Sequence[str], target: Sequence[str], step: int, ax: Axes):
    """Bar chart of the weights alpha_t over source words for one decoder step t."""
    row = torch.as_tensor(weights).detach().float()[step]
    ax.bar(range(len(source)), row.numpy(), color="tab:blue")
    ax.set_xticks(range(len(source)), labels=source, rotation=90)
    ax.set_ylim(0, 1)
    ax.set_ylabel("weight")
    ax.set_title(f"step {step}: writing {target[step]!r}")


def plot_accuracy_by_length(
    curves: Mapping[str, Mapping[tuple[int, int], float]],
    ax: Axes | None = None,
    title: str = "Exact-match accuracy by source length",
):
    """One line per model: accuracy in each source-length bucket."""
    ax = ax or plt.gca()
    for label, by_bucket in curves.items():
        buckets = list(by_bucket)
        ax.plot(range(len(buckets)), list(by_bucket.values()), marker="o", label=label)
        ax.set_xticks(range(len(buckets)), labels=[f"{lo}-{hi}" for lo, hi in buckets])
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    return ax
