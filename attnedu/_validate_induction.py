"""The input checks of ``attnedu.induction``: one ``check_<function>`` per public function there, which it calls
in its first line before its math, so that a caller's mistake is refused with a message that names the argument (in
the one form of ``attnedu._validate``). The experiment's constants (``INDUCTION``, ``PATHS``) come as arguments: this
module imports nothing of the experiment.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import check_int, check_number, check_positive_int, check_tensor, describe
from .head_scores import _check_head_gates, _pairs

# --------------------------------------------------------------------------------------------


def check_attention_only(model) -> None:
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers) or not hasattr(layers[0], "num_heads"):
        raise TypeError(f"model should be an AttentionOnlyTransformer (attention layers in .layers), got "
                        f"{type(model).__name__}")  # fmt: skip


def check_repeats(tokens: torch.Tensor) -> None:
    check_tensor("tokens", tokens, 2, "(n, 2 * period) of token ids")
    if tokens.shape[1] % 2 or tokens.shape[1] < 4:
        raise ValueError(f"tokens should be (n, 2 * period) with period >= 2, a block repeated once, got "
                         f"{describe(tokens)}")  # fmt: skip
    period = tokens.shape[1] // 2
    differs = (tokens[:, :period] != tokens[:, period:]).any(-1)
    if bool(differs.any()):
        row = int(differs.nonzero()[0])
        raise ValueError(f"tokens should be blocks repeated once, each row's second half equal to its first (the loss "
                         f"on the repeat means nothing otherwise), got row {row}: {tokens[row].tolist()}; "
                         "held_out_repeats() makes such rows")  # fmt: skip


def check_in_context_losses(logits, tokens, period) -> int:
    check_tensor("logits", logits, 3, "(batch, seq_len, vocab)")
    check_tensor("tokens", tokens, 2, "(batch, seq_len)")
    period = check_positive_int("period", period, "the length of the repeated block")
    if tuple(tokens.shape) != (logits.shape[0], 2 * period) or logits.shape[1] != 2 * period:
        raise ValueError(f"logits and tokens should cover two repeats, 2 * period = {2 * period} positions, got "
                         f"{describe(logits)} and {describe(tokens)}")  # fmt: skip
    return period


def check_induction_rule_losses(tokens, period, context) -> tuple[int, int]:
    check_tensor("tokens", tokens, 2, "(n, 2 * period) of token ids")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise TypeError(f"tokens should hold integer token ids, got {describe(tokens)}")
    period = check_positive_int("period", period, "the length of the repeated block")
    context = check_int("context", context, "how many tokens the rule matches", 1, period)
    if tokens.shape[1] != 2 * period or tokens.shape[0] == 0:
        raise ValueError(f"tokens should be (n, 2 * period) = (n, {2 * period}) with n >= 1, a block repeated once, "
                         f"got {describe(tokens)}")  # fmt: skip
    return period, context


def check_train_induction(num_layers, held_out, every, scored, recipe, INDUCTION) -> tuple[dict, int, int]:
    """-> the recipe (``INDUCTION`` with ``recipe``'s keys overridden), num_layers, every."""
    unknown = set(recipe) - set(INDUCTION)
    if unknown:
        raise TypeError(f"train_induction got unknown recipe keys {sorted(unknown)}; known: {sorted(INDUCTION)}")
    r = {**INDUCTION, **recipe}
    num_layers = check_int("num_layers", num_layers, "attention layers", 1, 8)
    every = check_positive_int("every", every, "steps between two measurements")
    check_tensor("held_out", held_out, 2, "(n, 2 * period) of token ids")
    if held_out.shape[1] % 2 or held_out.shape[1] > r["length"]:
        raise ValueError(f"held_out should be (n, 2 * period) with 2 * period <= length = {r['length']}, got "
                         f"{describe(held_out)}")  # fmt: skip
    if scored is not None:
        check_tensor("scored", scored, 2, "(m, seq_len) token ids: held_out_varied()[0], the tokens, not the pair")
    return r, num_layers, every


def check_induction_scores(model, tokens) -> None:
    check_tensor("tokens", tokens, 2, "(n, seq_len) of token ids")
    check_attention_only(model)


def check_crossing_steps(steps, values, fractions) -> tuple[list, list, list]:
    """-> steps (ints), values (floats), fractions (numbers in (0, 1])."""
    steps, values = [check_int("steps", s, "a training step") for s in steps], [float(v) for v in values]
    if len(steps) != len(values) or len(values) < 2:
        raise ValueError(f"steps and values should be two sequences of one equal length >= 2, got {len(steps)} "
                         f"steps and {len(values)} values")  # fmt: skip
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"steps should increase from one measurement to the next, got {steps[:8]}"
                         f"{' ...' if len(steps) > 8 else ''}; sort the steps and their values together")  # fmt: skip
    if not all(math.isfinite(v) for v in values):
        k = next(k for k, v in enumerate(values) if not math.isfinite(v))
        raise ValueError(f"values should be finite, got {values[k]} at step {steps[k]}: a curve with a NaN has no "
                         "first crossing to trust")  # fmt: skip
    change = values[-1] - values[0]
    if not math.isfinite(change) or change == 0:
        raise ValueError(f"values should change from the first measurement to the last, got {values[0]} .. "
                         f"{values[-1]}")  # fmt: skip
    checked = []
    for f in fractions:
        f = check_number("fractions", f, "a fraction of the change, 0 < f <= 1", 0.0, strict=True)
        if f > 1:
            raise ValueError(f"fractions should lie in (0, 1], got {f}")
        checked.append(f)
    return steps, values, checked


def check_rate_while(steps, reference, values, fractions, per) -> tuple:
    """-> reference (floats), low, high, per, and ``_crossing_steps``'s arguments for ``values``."""
    reference = [float(v) for v in reference]
    if len(reference) != len(list(steps)):
        raise ValueError(f"reference should have one value per step, {len(list(steps))}, got {len(reference)}")
    check_crossing_steps(
        steps, reference, (1.0,)
    )  # the same checks for the reference: finite, changing, steps in order
    low, high = (check_number("fractions", f, "a fraction of the change, 0 < f <= 1", 0.0, strict=True)
                 for f in fractions)  # fmt: skip
    if not low < high <= 1:
        raise ValueError(f"fractions should be two fractions 0 < low < high <= 1, got {tuple(fractions)}")
    per = check_positive_int("per", per, "the steps the rate is given per")
    return reference, low, high, per, check_crossing_steps(list(steps), values, (low, high))


def check_repeat_losses(model, tokens, removed) -> list[tuple]:
    check_repeats(tokens)
    check_attention_only(model)
    return _check_head_gates(len(model.layers), model.layers[0].num_heads, removed)[2]


def check_head_means(model, tokens) -> None:
    check_attention_only(model)
    check_tensor("tokens", tokens, 2, "(n, seq_len) of token ids")


def check_ablated_forward(model, tokens, removed, means, paths, PATHS) -> tuple[list[tuple], tuple]:
    """-> removed as checked (layer, head) pairs, paths as a tuple."""
    check_attention_only(model)
    check_tensor("tokens", tokens, 2, "(n, seq_len) of token ids")
    num_layers, num_heads = len(model.layers), model.layers[0].num_heads
    removed = [
        (check_int("layer", layer, "a layer, counted from 0", 0, num_layers - 1),
         check_int("head", head, "a head, counted from 0", 0, num_heads - 1))
        for layer, head in _pairs(removed)
    ]  # fmt: skip
    paths = tuple(paths)
    for path in paths:
        if path not in PATHS:
            raise ValueError(f"paths should name some of {PATHS}, got {path!r}")
    if set(paths) != set(PATHS) and len({layer for layer, _ in removed}) > 1:
        raise ValueError(
            f"removed should hold heads of one layer when paths leave some out, got {removed} with "
            f"paths {paths}: with removals in two layers, which stream a later layer reads is ambiguous"
        )
    if means is not None:
        if len(means) != num_layers or any(tuple(m.shape[:2]) != (num_heads, tokens.shape[1]) for m in means):
            raise ValueError(
                f"means should be head_means(model, tokens) for tokens of {tokens.shape[1]} positions: "
                f"one (heads, seq_len, head_dim) = ({num_heads}, {tokens.shape[1]}, head_dim) per layer"
            )
    return removed, paths


def check_induction_ablation(model, held_out, scored, mean) -> None:
    """The checks ``induction_ablation`` makes before it measures the means: its data, and with ``mean``
    ``head_means``'s."""
    check_repeats(held_out)
    check_tensor("scored", scored, 2, "(m, seq_len) token ids: held_out_varied()[0], the tokens, not the pair")
    if mean:
        check_head_means(model, scored)


def check_ablation_of(model, held_out, scored, removed, means, paths, PATHS) -> tuple[list[tuple], tuple]:
    """The checks ``induction_ablation`` makes once the means are measured (a ``scored`` the model cannot read has
    failed there first): one length for mean ablation, then ``ablated_forward``'s. -> removed as checked (layer, head)
    pairs, paths as a tuple."""
    if means is not None and held_out.shape[1] != scored.shape[1]:
        raise ValueError(f"held_out and scored should have one length for mean ablation (the means are per "
                         f"position), got {describe(held_out)} and {describe(scored)}")  # fmt: skip
    return check_ablated_forward(model, held_out, removed, means, paths, PATHS)
