"""Interactive controls for JupyterLab. Each draws with a function of plots.py, which the lesson
also calls for a static figure, because the book and nbval run no widget callbacks."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from ._validate import check_choice, check_int, check_positive_int, check_positive_ints, describe
from .masks import causal_mask, global_window_mask, padding_mask, sliding_window_mask
from .plots import (
    online_softmax_steps,
    plot_attention,
    plot_attention_step,
    plot_encoding_waves,
    plot_mask,
    plot_online_softmax,
    plot_softmax_scaling,
)


class FigureSlider(widgets.VBox):
    """Controls and a picture that ``draw(fig, *values)`` redraws whenever one of them changes (each
    combination drawn once, then cached). ``slider`` is the control, or a list of controls."""

    def __init__(self, slider, draw: Callable[..., None], figsize: tuple[float, float]):
        if not callable(draw):
            raise TypeError(f"draw should be a function draw(fig, *values), got {describe(draw)}")
        self.controls = list(slider) if isinstance(slider, (list, tuple)) else [slider]
        self.slider, self._draw, self._figsize = self.controls[0], draw, figsize
        self.image = widgets.Image(format="png")
        self._cache: dict[tuple, bytes] = {}
        for control in self.controls:
            control.observe(lambda change: self._show(), names="value")
        self._show()
        super().__init__([*self.controls, self.image])

    def _show(self, value=None) -> None:
        values = tuple(c.value for c in self.controls)
        if values not in self._cache:
            fig = Figure(figsize=self._figsize, dpi=80, layout="constrained")
            self._draw(fig, *values)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            self._cache[values] = buffer.getvalue()
        self.image.value = self._cache[values]


class AttentionStepper(FigureSlider):
    """A slider over decoder steps t (from 0): the map with the current row outlined, and the weights
    alpha_t of that step as bars.

    >>> AttentionStepper(weights, source, target, gold=pair.alignment)
    """

    def __init__(
        self,
        weights: torch.Tensor,
        source: Sequence[str],
        target: Sequence[str],
        gold: Sequence[int] | None = None,
    ):
        from .plots import gold_positions, weights_matrix

        self.weights = weights_matrix(weights)
        if self.weights.shape != (len(target), len(source)):
            raise ValueError(
                f"weights should have shape (len(target), len(source)) = ({len(target)}, {len(source)}), got shape "
                f"{tuple(self.weights.shape)}: expected (target_len, source_len) = ({len(target)}, {len(source)})"
            )
        if gold is not None:
            gold = gold_positions(gold, len(target), len(source))
        self.source, self.target, self.gold = list(source), list(target), gold
        slider = widgets.IntSlider(value=0, min=0, max=len(target) - 1, description="step t")  # from 0, as t
        super().__init__(slider, self._draw_step, (9, 3.6))

    def _draw_step(self, fig: Figure, step: int) -> None:
        left, right = fig.subplots(1, 2)
        plot_attention(self.weights, self.source, self.target, self.gold, ax=left, highlight_row=step)
        plot_attention_step(self.weights, self.source, self.target, step, ax=right, gold=self.gold)

    def __repr__(self) -> str:  # what nbval compares; short and deterministic
        return f"AttentionStepper(steps={len(self.target)}, step={self.slider.value})"


class ScalingExplorer(FigureSlider):
    """A slider over d_k: one query's softmax weights over 64 keys, raw and divided by sqrt(d_k) (lesson 04).

    >>> ScalingExplorer([8, 16, 32, 64, 128, 256, 512, 1024])
    """

    def __init__(self, dims: Sequence[int]):

        self.dims = check_positive_ints("dims", dims, "a head size d_k")
        slider = widgets.SelectionSlider(options=self.dims, value=self.dims[0], description="d_k")
        super().__init__(slider, lambda fig, d: plot_softmax_scaling(fig, [d]), (6, 5))

    def __repr__(self) -> str:
        return f"ScalingExplorer(d_k={self.slider.value})"


MASK_KINDS = ("causal", "padding", "causal + padding", "sliding window", "sliding window + global")


def draw_mask(fig: Figure, kind: str, length: int, real_tokens: int, window: int) -> None:
    """One mask of lesson 06, drawn with plot_mask (used by MaskExplorer and for static figures).

    ``real_tokens`` larger than ``length`` means no padding (the sliders can be set that way)."""
    check_choice("kind", kind, MASK_KINDS)
    length = check_positive_int("length", length, "the sequence length")
    real_tokens = check_positive_int("real_tokens", real_tokens, "tokens that are not padding")
    window = check_int("window", window, "neighbours on each side", minimum=0)
    real_tokens = min(real_tokens, length)
    keys = padding_mask(torch.tensor([real_tokens]), length)[0]
    masks = {
        "causal": lambda: causal_mask(length),
        "padding": lambda: keys[None, :].expand(length, length),
        "causal + padding": lambda: causal_mask(length) & keys[None, :],
        "sliding window": lambda: sliding_window_mask(length, window),
        "sliding window + global": lambda: global_window_mask(length, window, [0]),
    }
    if kind not in masks:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    mask = masks[kind]()
    allowed = int(mask.sum())
    plot_mask(mask, fig.subplots(), title=f"{kind}: {allowed} of {length * length} pairs allowed")


class MaskExplorer(FigureSlider):
    """Pick a mask of lesson 06 and its sizes; the grid redraws (dark = may attend)."""

    def __init__(self, length: int = 12):
        check_int("length", length, "the starting sequence length", minimum=2, maximum=24)
        kind = widgets.Dropdown(options=MASK_KINDS, value="causal", description="mask")
        size = widgets.IntSlider(value=length, min=2, max=24, description="length")
        real = widgets.IntSlider(value=max(1, length - 3), min=1, max=24, description="real tokens")
        window = widgets.IntSlider(value=2, min=0, max=8, description="window")
        super().__init__([kind, size, real, window], draw_mask, (4.6, 4.2))

    def __repr__(self) -> str:
        kind, length, real, window = (c.value for c in self.controls)
        return f"MaskExplorer(mask={kind!r}, length={length}, real_tokens={real}, window={window})"


class EncodingExplorer(FigureSlider):
    """A slider over the sinusoidal encoding's frequency pairs (lesson 07): the sin and cos of the chosen pair
    against position. Low pairs turn fast, high pairs slowly."""

    def __init__(self, d_model: int = 64, num_positions: int = 64):
        from .positional import sinusoidal_encoding

        sinusoidal_encoding(num_positions, d_model)  # checks both
        pair = widgets.IntSlider(value=0, min=0, max=d_model // 2 - 1, description="pair i")
        super().__init__(pair, lambda fig, i: plot_encoding_waves(fig, d_model, [i], num_positions), (5, 3.2))

    def __repr__(self) -> str:
        return f"EncodingExplorer(pair={self.slider.value})"


class OnlineSoftmaxStepper(FigureSlider):
    """A slider over the blocks of one row (lesson 08): the scores read so far, the running maximum and the
    running sum, before and after its rescaling."""

    def __init__(self, row: torch.Tensor, block_size: int):
        from .plots import score_row

        self.row, self.block_size = score_row(row), block_size
        n_blocks = len(online_softmax_steps(self.row, block_size))
        slider = widgets.IntSlider(value=0, min=0, max=n_blocks - 1, description="block")  # from 0, as the code
        super().__init__(slider, lambda fig, b: plot_online_softmax(fig, self.row, block_size, [b]), (5, 3.4))

    def __repr__(self) -> str:
        return f"OnlineSoftmaxStepper(block={self.slider.value})"
