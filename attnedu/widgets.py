"""Interactive controls for JupyterLab. Each has a static counterpart in plots.py, because
the book and nbval run no widget callbacks."""

from __future__ import annotations

import io
from collections.abc import Sequence

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from .plots import plot_attention, plot_attention_step


class AttentionStepper(widgets.VBox):
    """A slider over decoder steps: the map with the current row outlined, and the weights
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
        self.weights = torch.as_tensor(weights).detach().float()
        if self.weights.shape != (len(target), len(source)):
            raise ValueError(
                f"weights have shape {tuple(self.weights.shape)}, expected (target_len, source_len) = "
                f"({len(target)}, {len(source)})"
            )
        self.source, self.target, self.gold = list(source), list(target), gold
        self.slider = widgets.IntSlider(value=0, min=0, max=len(target) - 1, description="step t")
        self.image = widgets.Image(format="png")
        self._cache: dict[int, bytes] = {}
        self.slider.observe(lambda change: self._show(change["new"]), names="value")
        self._show(0)
        super().__init__([self.slider, self.image])

    def _show(self, step: int) -> None:
        if step not in self._cache:
            fig = Figure(figsize=(9, 3.6), dpi=80, layout="constrained")
            left, right = fig.subplots(1, 2)
            plot_attention(self.weights, self.source, self.target, self.gold, ax=left, highlight_row=step)
            plot_attention_step(self.weights, self.source, self.target, step, ax=right)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            self._cache[step] = buffer.getvalue()
        self.image.value = self._cache[step]

    def __repr__(self) -> str:  # what nbval compares; short and deterministic
        return f"AttentionStepper(steps={len(self.target)}, step={self.slider.value})"
