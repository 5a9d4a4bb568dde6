"""Plots shared by every lesson. Attention maps always use the colour scale 0..1, so maps
from different lessons, models and sentences can be compared by eye. Positions, decoder steps, heads, blocks and
tiles count from 0, as in code (x_0 is the first word)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ._validate import check_finite, check_int, check_list, check_positive_int, check_positive_ints, describe
from .flash import online_softmax_blocks

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
    gold:    optional gold alignment, gold[i] = source index (from 0) of target word i, drawn as
             orange squares so a learner sees where the model agrees with it (with a legend).
    highlight_row: optional row index (from 0) outlined in red, e.g. the decoder step being discussed.
    Returns the image, for a shared colour bar: ``fig.colorbar(image, ax=axes)``.
    """
    weights = weights_matrix(weights)
    if weights.shape != (len(target), len(source)):
        raise ValueError(
            f"weights should have shape (len(target), len(source)) = {(len(target), len(source))}, got shape "
            f"{tuple(weights.shape)}: there are {len(target)} target and {len(source)} source labels; pass one "
            "label per row and per column"
        )
    ax = ax or plt.gca()
    image = ax.imshow(weights.numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(source)), labels=source, rotation=90)
    ax.set_yticks(range(len(target)), labels=target)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if gold is not None:
        gold = gold_positions(gold, len(target), len(source))
        for i, j in enumerate(gold):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=GOLD_COLOUR, linewidth=1.5))
        gold_key = Line2D([], [], marker="s", linestyle="none", markerfacecolor="none", markeredgecolor=GOLD_COLOUR)
        ax.legend([gold_key], ["gold alignment"], loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, frameon=False)
    if highlight_row is not None:
        highlight_row = check_int("highlight_row", highlight_row, "a row counted from 0", 0, len(target) - 1)
        ax.add_patch(
            Rectangle((-0.5, highlight_row - 0.5), len(source), 1, fill=False, edgecolor="crimson", linewidth=2)
        )
    if title:
        ax.set_title(title)
    return image


def weights_matrix(weights) -> torch.Tensor:
    """Attention weights as a float (target_len, source_len) tensor: a tensor, a NumPy array or nested lists of
    numbers in [0, 1]. NaN or infinity, or a value outside [0, 1] (scores rather than weights), is refused."""
    if isinstance(weights, (str, bytes)) or weights is None:
        raise TypeError(f"weights should be a (target_len, source_len) tensor of weights, got {describe(weights)}")
    weights = torch.as_tensor(weights).detach()
    if weights.dtype == torch.bool:
        raise TypeError("weights should be numbers in [0, 1], got a bool tensor; a mask is drawn with plot_mask")
    weights = weights.float()
    if weights.dim() != 2:
        raise ValueError(
            f"weights should be (target_len, source_len), got shape {tuple(weights.shape)}; weights must be "
            "(target_len, source_len): pick one sentence (and one head), e.g. weights[0]"
        )
    check_finite("weights", weights, "NaN weights come from NaN scores: find where they start")
    if weights.numel() and (float(weights.min()) < -1e-6 or float(weights.max()) > 1 + 1e-6):
        raise ValueError(
            f"weights should be attention weights in [0, 1], got values from {float(weights.min()):.3g} to "
            f"{float(weights.max()):.3g}; apply the softmax first, or draw scores with plot_matrix"
        )
    return weights


def gold_positions(gold, target_len: int, source_len: int) -> list[int]:
    if isinstance(gold, (str, bytes)) or not isinstance(gold, Sequence):
        raise TypeError(f"gold should be a list of source positions (pair.alignment), got {describe(gold)}")
    if len(gold) != target_len:
        raise ValueError(
            f"gold should have one entry per target word ({target_len}), got {len(gold)}: gold alignment has "
            f"{len(gold)} entries, expected one per target word ({target_len})"
        )
    meaning = "a source position counted from 0"
    return [check_int(f"gold[{i}]", j, meaning, 0, source_len - 1) for i, j in enumerate(gold)]


def plot_attention_step(
    weights: torch.Tensor,
    source: Sequence[str],
    target: Sequence[str],
    step: int,
    ax: Axes,
    gold: Sequence[int] | None = None,
):
    """Bar chart of the weights alpha_t over source words for decoder step ``step`` (counted from 0).

    With ``gold`` (source index of each target word, from 0), the gold source word's bar is orange.
    """
    weights = weights_matrix(weights)
    if weights.shape != (len(target), len(source)):
        raise ValueError(
            f"weights should have shape (len(target), len(source)) = {(len(target), len(source))}, got shape "
            f"{tuple(weights.shape)}; pass one label per row and per column"
        )
    step = check_int("step", step, "a decoder step counted from 0")
    if not 0 <= step < weights.shape[0]:
        raise ValueError(f"step should be in 0..{weights.shape[0] - 1}, got {step}: steps count from 0")
    row = weights[step]
    colours = ["tab:blue"] * len(source)
    if gold is not None:
        colours[gold_positions(gold, len(target), len(source))[step]] = GOLD_COLOUR
        ax.legend(handles=[Patch(color=GOLD_COLOUR, label="gold source word")], fontsize=8, loc="upper right")
    ax.bar(range(len(source)), row.numpy(), color=colours)
    ax.set_xticks(range(len(source)), labels=source, rotation=90)
    ax.set_ylim(0, 1)
    ax.set_ylabel("weight")
    ax.set_title(f"step t = {step}: writing {target[step]!r}")


def plot_accuracy_by_length(
    curves: Mapping[str, Mapping[tuple[int, int], float]],
    ax: Axes | None = None,
    title: str = "Exact-match accuracy by source length",
    ylabel: str = "exact-match accuracy",
):
    """One line per curve (a model, or a measure): accuracy in each source-length bucket (values in [0, 1])."""
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(
            f"curves should be a non-empty dict {{label: {{(lo, hi): accuracy}}}}, got {describe(curves)}; "
            "e.g. {'attention': accuracy_by_length(model, data.test)}"
        )
    for label, by_bucket in curves.items():
        if not isinstance(by_bucket, Mapping) or not by_bucket:
            raise TypeError(
                f"curves[{label!r}] should be a non-empty dict {{(lo, hi): accuracy}}, got {describe(by_bucket)}"
            )
        for bucket, value in by_bucket.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(
                    f"curves[{label!r}][{bucket}] should be an accuracy in [0, 1], got {describe(value)}; "
                    "divide percentages by 100"
                )
    ax = ax or plt.gca()
    for label, by_bucket in curves.items():
        buckets = list(by_bucket)
        ax.plot(range(len(buckets)), list(by_bucket.values()), marker="o", label=label)
        ax.set_xticks(range(len(buckets)), labels=[f"{lo}-{hi}" for lo, hi in buckets])
    ax.set_xlabel("source length (words)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    return ax


def plot_softmax_scaling(fig, dims: Sequence[int], n_keys: int = 64):
    """For each d_k in ``dims`` (a column), one query's softmax weights over ``n_keys`` keys with standard
    normal components: raw scores q.k (top) and divided by sqrt(d_k) (bottom). The draws for a given d_k
    are fixed (seeded by d_k), so raw and scaled show the same query and keys."""
    dims = check_positive_ints("dims", dims, "head sizes d_k")
    n_keys = check_positive_int("n_keys", n_keys, "the number of keys")
    axes = fig.subplots(2, len(dims), squeeze=False, sharey=True)
    for column, d_k in enumerate(dims):
        generator = torch.Generator().manual_seed(d_k)
        q, k = torch.randn(d_k, generator=generator), torch.randn(n_keys, d_k, generator=generator)
        for row, scale in enumerate((1.0, d_k**-0.5)):
            p = torch.softmax(k @ q * scale, dim=0)
            entropy = -(p * p.clamp_min(1e-30).log()).sum().item()
            ax = axes[row, column]
            ax.bar(range(n_keys), p.numpy(), color="tab:orange" if row == 0 else "tab:blue", width=1.0)
            ax.set_ylim(0, 1)
            kind = "raw" if row == 0 else "divided by √d_k"
            ax.set_title(f"d_k = {d_k}, {kind}\nmax {p.max().item():.2f}, entropy {entropy:.2f}", fontsize=9)
            ax.set_xticks([])
        axes[1, column].set_xlabel(f"{n_keys} keys")
    axes[0, 0].set_ylabel("weight")
    axes[1, 0].set_ylabel("weight")
    return axes


def plot_mask(mask: torch.Tensor, ax: Axes | None = None, title: str | None = None):
    """A boolean mask as a grid: rows are queries, columns are keys, dark = may attend (True), light = blocked.
    Positions count from 0 on the axes, as in the masks' code (lesson 06)."""
    mask = torch.as_tensor(mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask should be a (query_len, key_len) bool mask (True = may attend), got dtype {mask.dtype}: plot_mask "
            "draws one bool mask; convert with mask.bool() or attnedu.masks.from_additive(mask)"
        )
    if mask.dim() != 2 or mask.numel() == 0:
        raise ValueError(
            f"mask should be a (query_len, key_len) bool mask, got shape {tuple(mask.shape)}: plot_mask draws one "
            "bool mask; pick one, e.g. mask[0] or mask[0, 0]"
        )
    ax = ax or plt.gca()
    ax.imshow(mask.float().numpy(), cmap=CMAP, vmin=-0.15, vmax=1.0, aspect="equal")
    ticks = range(0, max(mask.shape), max(1, max(mask.shape) // 6))
    ax.set_xticks([t for t in ticks if t < mask.shape[1]])
    ax.set_yticks([t for t in ticks if t < mask.shape[0]])
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_matrix(matrix: torch.Tensor, ax: Axes | None = None, title: str | None = None, xlabel: str = "",
                ylabel: str = "", centred: bool = True):  # fmt: skip
    """Any matrix as a heat map (not attention weights: those use plot_attention's 0..1 scale). With
    ``centred`` the colour scale is symmetric around 0 (red positive, blue negative). Returns the image."""
    matrix = torch.as_tensor(matrix).detach().float()
    if matrix.dim() != 2 or matrix.numel() == 0:
        raise ValueError(
            f"matrix should be 2-D, got shape {tuple(matrix.shape)}: plot_matrix draws a 2-D matrix; pick one, "
            "e.g. matrix[0]"
        )
    check_finite("matrix", matrix, "a NaN or infinity would be drawn as a blank cell: find where it comes from")
    ax = ax or plt.gca()
    limit = matrix.abs().max().item() or 1.0
    options = {"cmap": "RdBu_r", "vmin": -limit, "vmax": limit} if centred else {"cmap": "viridis"}
    image = ax.imshow(matrix.numpy(), aspect="auto", **options)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return image


def plot_encoding_waves(fig, d_model: int, pairs, num_positions: int = 64):
    """The sinusoidal encoding's features for the given frequency pairs i (features 2i and 2i + 1): one panel
    per pair, value against position, with the wavelength in the title (lesson 07)."""
    from .positional import sinusoidal_encoding

    encoding = sinusoidal_encoding(num_positions, d_model)
    pairs = [check_int(f"pairs[{n}]", i, "a frequency pair") for n, i in enumerate(check_list("pairs", pairs))]
    axes = fig.subplots(1, len(pairs), squeeze=False, sharey=True)[0]
    for ax, i in zip(axes, pairs):
        if not 0 <= i < d_model // 2:
            raise ValueError(
                f"pairs should be in 0..{d_model // 2 - 1} for d_model={d_model}, got pair {i}, which is outside "
                f"0..{d_model // 2 - 1} for d_model={d_model}"
            )
        wavelength = 2 * 3.141592653589793 * 10000 ** (2 * i / d_model)
        ax.plot(encoding[:, 2 * i].numpy(), label=f"sin (feature {2 * i})")
        ax.plot(encoding[:, 2 * i + 1].numpy(), label=f"cos (feature {2 * i + 1})")
        ax.set_title(f"pair {i}: wavelength {wavelength:,.0f} positions", fontsize=9)
        ax.set_xlabel("position")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return axes


def online_softmax_steps(row: torch.Tensor, block_size: int) -> list[dict]:
    """The online softmax of one row (``attnedu.flash.online_softmax_blocks``), block by block: for each block,
    how many scores have been read (``end``), the running maximum ``m``, the old running sum rescaled to the new
    maximum (``carried``, l_old * exp(m_old - m)) and the running sum ``l`` after adding the block."""
    row = score_row(row)
    block_size = check_positive_int("block_size", block_size, "scores per block")
    steps, m_old, l_old = [], float("-inf"), 0.0
    for end, m, l in online_softmax_blocks(row, block_size):
        m, l = m.item(), l.item()
        steps.append({"end": end, "m": m, "carried": l_old * math.exp(m_old - m) if l_old else 0.0, "l": l})
        m_old, l_old = m, l
    return steps


def plot_online_softmax(fig, row: torch.Tensor, block_size: int, steps: Sequence[int] | None = None):
    """One panel per block (or per step in ``steps``, blocks counted from 0 as the code counts them): the scores
    read so far (blue) and still to come (grey), over their positions 0..len(row)-1, the running maximum as a
    line, and the running sum in the title (lesson 08)."""
    row = score_row(row)
    history = online_softmax_steps(row, block_size)
    if steps is None:
        chosen = list(range(len(history)))
    else:
        chosen = check_list("steps", steps)
        for i, number in enumerate(chosen):
            check_int(f"steps[{i}]", number, "a block counted from 0", minimum=0)
    axes = fig.subplots(1, len(chosen), squeeze=False, sharey=True)[0]
    for ax, number in zip(axes, chosen):
        if not 0 <= number < len(history):
            raise ValueError(f"steps should be in 0..{len(history) - 1} (one per block), got step {number}")
        step = history[number]
        start = number * block_size
        colours = ["tab:blue" if k < step["end"] else "#d9d9d9" for k in range(len(row))]
        ax.bar(range(len(row)), row.numpy(), color=colours)
        ax.axhline(step["m"], color="tab:orange", linestyle="--", label="running max m")
        ax.set_title(
            f"block {number} (scores {start}..{step['end'] - 1}): l = {step['carried']:.3f} (rescaled) -> "
            f"{step['l']:.3f}",
            fontsize=9,
        )
        ax.set_xlabel("position in the row (from 0)")
    axes[0].set_ylabel("score")
    axes[0].legend(fontsize=8)
    return axes


def score_row(row) -> torch.Tensor:
    if isinstance(row, (str, bytes)) or row is None:
        raise TypeError(f"row should be a 1-D tensor of scores, got {describe(row)}")
    row = torch.as_tensor(row)
    if row.dtype == torch.bool:
        raise TypeError("row should be scores (numbers), got a bool tensor")
    row = row.to(torch.float64)
    if row.dim() != 1 or row.numel() == 0:
        raise ValueError(f"row should be a non-empty 1-D tensor of scores, got shape {tuple(row.shape)}; pick one row")
    return row
