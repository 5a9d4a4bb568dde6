"""Deciding: compare the learner's outputs with the reference on every test case, and name a known mistake only
when the outputs establish it; otherwise say what was observed (type, dtype, shape, NaN or inf, where the values
differ, on which kinds of test case), never a guessed cause. :func:`run_check` is the one place where that happens,
for the check cells and for the batch grader alike.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .calling import (
    REPORTED_AS_IS,
    TIME_LIMIT,
    Call,
    Caller,
    gradient_leaves,
    in_double,
    in_process,
    input_gradients,
    inputs_unchanged,
)
from .exercise import LARGE, NAN_INPUT, SENTENCES, TAG_ORDER, Case, Exercise, Layout, Variant
from .results import CRASHED, FAILED, NOT_ATTEMPTED, PASSED, TIMEOUT, CheckResult

# --------------------------------------------------------------------------------------------
# Comparing outputs
# --------------------------------------------------------------------------------------------

ATOL, RTOL = 1e-5, 1e-4  # ATOL scales with the largest value of the reference (inputs around ±1000 round more)


def _atol(expected: torch.Tensor, tolerance: float = 0.0) -> float:
    finite = expected.detach()[torch.isfinite(expected)]
    atol = max(ATOL, tolerance)
    return atol * max(1.0, float(finite.abs().max())) if finite.numel() else atol


def _close(expected: torch.Tensor, got: torch.Tensor, tolerance: float = 0.0) -> torch.Tensor:
    """Entry by entry: equal (floats within tolerance, NaN equal to NaN). Same shape and dtype assumed.
    ``tolerance``: a test case's own (``Case.tolerance``), where larger than ATOL and RTOL."""
    if expected.is_floating_point():
        rtol = max(RTOL, tolerance)
        return torch.isclose(got, expected, atol=_atol(expected, tolerance), rtol=rtol, equal_nan=True)
    return got == expected


def same(expected, got, tolerance: float = 0.0) -> bool:
    """Same structure, dtype, shape and values (floats within tolerance, NaN equal to NaN)."""
    if isinstance(expected, tuple):
        return (
            isinstance(got, (tuple, list))
            and len(got) == len(expected)
            and all(same(e, g, tolerance) for e, g in zip(expected, got, strict=True))
        )
    if not isinstance(got, torch.Tensor) or got.dtype != expected.dtype or got.shape != expected.shape:
        return False
    return bool(_close(expected, got, tolerance).all())


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    if x is None:
        return "None (is a `return` missing?)"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)} values"
    return f"a {type(x).__name__}"


def _shape_text(names: tuple[str, ...], shape: tuple[int, ...]) -> str:
    return f"({', '.join(names)}) = {tuple(shape)}"


def _shape_problem(expected: torch.Tensor, got: torch.Tensor, names: tuple[str, ...]) -> str:
    want, have = tuple(expected.shape), tuple(got.shape)
    wanted = _shape_text(names, want)
    if len(have) == len(want) and sorted(have) == sorted(want):
        return (
            f"has the wrong shape: expected {wanted}, got {have}, the same sizes in another order. Check which "
            "axis each index, sum or concatenation refers to."
        )
    if len(have) == len(want) + 1 and 1 in have:
        return (
            f"has an extra dimension of size 1: expected {wanted}, got {have}. An axis was kept where the output "
            "has none: a slice where an integer index was meant, a reduction that kept its dimension, or an axis "
            "added for broadcasting that was never taken away."
        )
    return f"has the wrong shape: expected {wanted}, got {have}."


def _show(x: torch.Tensor, index: tuple[int, ...]) -> str:
    value = x[index].item()
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _pair(expected: torch.Tensor, got: torch.Tensor, index: tuple[int, ...]) -> tuple[str, str]:
    """The two entries at ``index``, with as many significant digits as it takes to show that they differ (4 at
    least, 9 at most)."""
    e, g = expected[index].item(), got[index].item()
    if not (isinstance(e, float) and isinstance(g, float)):
        return _show(expected, index), _show(got, index)
    for digits in range(4, 10):
        shown = f"{e:.{digits}g}", f"{g:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


def _first_difference(expected: torch.Tensor, got: torch.Tensor, wrong: torch.Tensor) -> str:
    index = tuple(wrong.nonzero()[0].tolist())
    shown_expected, shown_got = _pair(expected, got, index)
    return (
        f"{int(wrong.sum())} of {expected.numel()} entries differ from the reference; the first at index "
        f"{list(index)}: expected {shown_expected}, got {shown_got}."
    )


# The 16-bit formats a learner may compute in, and their significant bits (float32 has 24): a value computed in one
# of them, or rounded to it, is one of its numbers even after it is cast back
_HALF_FORMATS = ((torch.bfloat16, "bfloat16", 8), (torch.float16, "float16", 11))
_ROUNDED_START = "Every entry of yours is a "
# differences this small, relative to the largest entry, are said to be small: bfloat16 rounds at 4e-3 and float16 at
# 5e-4; a difference of a few percent is not rounding and is not called small (inverted gates differed by 2e-2)
SMALL = 0.01


def _rounded_to(expected: torch.Tensor, got: torch.Tensor) -> tuple[str, int] | None:
    """(format, significant bits) when every finite entry of ``got`` (float32 or float64) is a number of a 16-bit
    format and the reference's are not all: the values were computed in that format, or rounded to it."""
    if got.dtype not in (torch.float32, torch.float64):
        return None
    finite = torch.isfinite(got) & torch.isfinite(expected)
    if not bool(finite.any()):
        return None
    mine, theirs = got[finite], expected[finite]
    for dtype, name, bits in _HALF_FORMATS:  # bfloat16 first: its numbers are float16's too, in float16's range
        if bool((mine.to(dtype).to(got.dtype) == mine).all()) and not bool(
            (theirs.to(dtype).to(got.dtype) == theirs).all()
        ):
            return name, bits
    return None


def _size(expected: torch.Tensor, got: torch.Tensor, wrong: torch.Tensor) -> tuple[float, float, list[int]] | None:
    """(the largest difference, that relative to the reference's largest entry, where) when every difference is
    small (at most SMALL of the largest entry; all finite), else None."""
    if not (bool(torch.isfinite(got).all()) and bool(torch.isfinite(expected).all())) or not bool(wrong.any()):
        return None
    largest = float(expected.abs().max())
    gaps = (got - expected).abs()
    gap = float(gaps.max())
    if largest == 0 or gap > SMALL * largest:
        return None
    index = [int(i) for i in torch.unravel_index(gaps.argmax(), gaps.shape)]
    return gap, gap / largest, index


def _precision(expected: torch.Tensor, got: torch.Tensor, wrong: torch.Tensor) -> str:
    """What is observed about the size of the differences: values rounded to a 16-bit format, or only small
    differences (the largest, and how it compares with the check's tolerance); "" when neither."""
    rounded, size = _rounded_to(expected, got), _size(expected, got, wrong)
    text = ""
    if rounded is not None:
        name, bits = rounded
        text = (
            f"{_ROUNDED_START}{name} number ({bits} significant bits, where {str(got.dtype)[6:]} has "
            f"{24 if got.dtype == torch.float32 else 53}): your function computed in {name}, or rounded its result "
            f"to it, so your values carry about {round(bits * 0.30103)} significant digits, and the check compares "
            f"them with the {str(got.dtype)[6:]} reference to about {RTOL:g} of their size."
        )
    if size is not None:
        gap, relative, index = size
        text += (" " if text else "") + (
            f"All the differences are small: the largest is {gap:.2g} (at index {index}), {relative:.1e} of the "
            f"reference's largest entry{', the size of that rounding' if rounded is not None else ''}."
        )
    return text


_DTYPE_ADVICE = {
    torch.bool: "A mask is a bool tensor: a comparison already gives one; keep it as booleans, not numbers.",
    torch.long: "Token ids are integers (torch.long): an output built from float tensors, or converted to them, "
    "is not a token id.",
    torch.float32: "Keep the inputs' float32 dtype: do not create tensors with dtype=torch.float64.",
}

LARGE_INPUTS_NOTE = (
    "This test case has large inputs: in float32, exp(x) is inf for x above about 88, and exp(-x) is 0 for x "
    "above about 104, so an exp, or a tanh written with exp, overflows there and inf / inf or 0 / 0 gives NaN. "
    "If your function computes one by hand, subtract each row's maximum before the exp (softmax is unchanged by "
    "it), or use torch.softmax / torch.tanh, which handle large inputs."
)
NAN_NOTE = (
    "NaN comes from 0/0, inf - inf or 0 * inf; inf from an overflow, a division by zero, or a fill value such as "
    "float('-inf')."
)


def _indices(flags: torch.Tensor) -> list[int]:
    return flags.nonzero().flatten().tolist()


def _listed(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers)


def _where(
    wrong: torch.Tensor, layout: Layout | None, unit: tuple[str, str, str] = SENTENCES, zero_padding: bool = False
) -> list[str]:
    """Facts about where the True entries of ``wrong`` lie: which sentences (``unit``: what an index of the first
    axis is), which positions, which half. ``zero_padding``: both outputs are exactly 0 at every padding position, so
    that they match there says nothing (any mistake that scales the output vanishes there), and is not said."""
    if wrong.dim() == 0 or not bool(wrong.any()):
        return []
    notes = []
    one, many, index_word = unit
    batch = wrong.shape[0]
    rows = wrong.reshape(batch, -1).any(dim=1)
    bad = _indices(rows)
    if batch > 1 and len(bad) < batch:
        good = _indices(~rows)
        if len(bad) == 1:
            notes.append(f"all in one {one}, {index_word} {bad[0]}; the other {many} match")
        else:
            indices = index_word.replace("index", "indices")
            notes.append(f"in the {many} at {indices} {_listed(bad)}; those at {_listed(good)} match")
    if layout is None:
        return notes
    if layout.positions is not None and wrong.dim() > layout.positions:
        by_position = wrong.movedim(layout.positions, 1).reshape(batch, wrong.shape[layout.positions], -1)
        positions = _where_positions(by_position.any(dim=-1), layout, one, zero_padding)
        if positions and "fully masked row" in positions[0]:
            notes = []  # says which row already
        notes += positions
    if layout.halves is not None and wrong.dim() >= 2 and wrong.shape[-1] % 2 == 0 and wrong.shape[-1] >= 2:
        half = wrong.shape[-1] // 2
        features = wrong.reshape(-1, wrong.shape[-1]).any(dim=0)
        first, second = bool(features[:half].any()), bool(features[half:].any())
        if first != second:
            inside, outside = layout.halves if first else layout.halves[::-1]
            which = "first" if first else "second"
            other = "second" if first else "first"
            notes.append(f"only in the {which} half of the features ({inside}); the {other} half ({outside}) matches")
    return notes


def _where_positions(
    wrong: torch.Tensor, layout: Layout, one: str = "sentence", zero_padding: bool = False
) -> list[str]:
    """``wrong``: (batch, positions) bool. Facts about which positions differ (``zero_padding``: see :func:`_where`)."""
    notes = []
    batch, length = wrong.shape
    real = layout.real
    real_name, other_name = layout.words
    if real is not None and real.shape == wrong.shape:
        empty = ~real.any(dim=1)
        rows = wrong.any(dim=1)
        prefix = bool((real == (torch.arange(length)[None, :] < real.sum(dim=1, keepdim=True))).all())
        if bool(empty.any()) and bool((rows <= empty).all()):
            listed = _listed(_indices(rows))
            return [f"only in row {listed}, which has no {real_name} at all (a fully masked row); the other rows match"]
        if bool(real.any()) and bool((~real).any()):
            if not bool((wrong & real).any()):
                notes.append(f"only at {other_name}; every one of the {real_name} matches")
            elif not bool((wrong & ~real).any()) and not zero_padding:
                notes.append(f"only at {real_name}; the {other_name} match")
        if prefix:
            lengths = real.sum(dim=1)
            columns = torch.arange(length)[None, :]
            last_real = columns == (lengths - 1)[:, None]
            first_pad = columns == lengths[:, None]
            if bool((wrong <= last_real).all()) and bool((lengths > 1).any()):
                notes.append(f"only at each {one}'s last real position (index length - 1)")
            elif bool((wrong <= first_pad).all()):
                notes.append(f"only at the first padding position after a {one} (index length)")
    columns = wrong.any(dim=0)
    if length > 1 and not notes:
        if _indices(columns) == [0]:
            notes.append("only at the first position (index 0)")
        elif _indices(columns) == [length - 1]:
            notes.append(f"only at the last position (index {length - 1})")
    return notes


def _output_problem(
    expected: torch.Tensor,
    got,
    names: tuple[str, ...],
    what: str,
    layout: Layout | None,
    large: bool,
    exercise: Exercise | None = None,
    output: int = 0,
    tolerance: float = 0.0,
) -> tuple[str, list[str]]:
    """What is wrong with one output, and the kinds of finding it states ("type", "dtype", "shape", "nonfinite",
    "where", "count")."""
    unit = exercise.unit(output) if exercise is not None else SENTENCES
    if not isinstance(got, torch.Tensor):
        shape = _shape_text(names, expected.shape)
        return f"{what} should be a torch.Tensor of shape {shape}, got {describe(got)}.", ["type"]
    if got.dtype != expected.dtype:
        advice = _DTYPE_ADVICE.get(expected.dtype, "")
        return f"{what} has dtype {got.dtype}, expected {expected.dtype}. {advice}".rstrip(), ["dtype"]
    if got.shape != expected.shape:
        return f"{what} {_shape_problem(expected, got, names)}", ["shape"]
    if got.is_floating_point():
        broken = ~torch.isfinite(got) & torch.isfinite(expected)
        if bool(broken.any()):
            index = broken.nonzero()[0].tolist()
            signs = (("NaN", torch.isnan(got)), ("inf", torch.isposinf(got)), ("-inf", torch.isneginf(got)))
            kinds = [k for k, f in signs if bool((f & broken).any())]
            count = int(broken.sum())
            text = f"{what} contains {' and '.join(kinds)} where the reference is finite ({count} entries, the first "
            text += f"at index {index})."
            where = _where(broken, layout, unit)
            if where:
                text += " They are " + "; ".join(where) + "."
            text += " " + _note(exercise, large)
            return text, ["nonfinite"] + (["where"] if where else [])
    wrong = ~_close(expected, got, tolerance)
    text = f"{what}: {_first_difference(expected, got, wrong)}"
    where = _where(wrong, layout, unit, _zero_at_padding(expected, got, layout))
    if where:
        text += " The differences are " + "; ".join(where) + ". Compare what your function does there with the rest."
    precision = _precision(expected, got, wrong) if got.is_floating_point() else ""
    scale = _scale(expected, got, unit[0]) if got.is_floating_point() and not precision else ""
    if precision or scale:
        text += " " + (precision or scale)
    rounded = "precision" if precision.startswith(_ROUNDED_START) else "size" if precision else ""
    return text, (["where"] if where else []) + (["scale"] if scale else []) + ([rounded] if rounded else []) or [
        "count"
    ]


def _zero_at_padding(expected: torch.Tensor, got: torch.Tensor, layout: Layout | None) -> bool:
    """Both outputs are exactly 0 at every padding position of ``layout`` (and it has some)."""
    if layout is None or layout.real is None or layout.positions is None or expected.dim() <= layout.positions:
        return False
    e, g = expected.movedim(layout.positions, 1), got.movedim(layout.positions, 1)
    if tuple(e.shape[:2]) != tuple(layout.real.shape) or bool(layout.real.all()):
        return False
    padding = ~layout.real
    return bool((e[padding] == 0).all()) and bool((g[padding] == 0).all())


def _note(exercise: Exercise | None, large: bool) -> str:
    """What NaN or inf usually mean, in the exercise's words when it has its own."""
    if large:
        return (exercise.large_note if exercise is not None else None) or LARGE_INPUTS_NOTE
    return (exercise.nan_note if exercise is not None else None) or NAN_NOTE


def _scale(expected: torch.Tensor, got: torch.Tensor, one: str = "sentence") -> str:
    """'Every entry is the reference's times c' (or one factor per sentence), when that is what was observed."""
    if expected.dim() == 0 or not bool(torch.isfinite(got).all()) or not bool(torch.isfinite(expected).all()):
        return ""
    tol = _atol(expected)
    zero = expected.abs() <= 100 * tol
    if bool(zero.all()) or not bool((got[zero].abs() <= 100 * tol).all()):
        return ""
    ratios = got[~zero] / expected[~zero]
    if _one_factor(ratios):
        return f"Every entry of yours is the reference's times {ratios[0].item():.4g}, the same factor everywhere."
    factors, apart = [], False
    for e, g, z in zip(expected, got, zero, strict=True):
        if bool(z.all()):
            return ""
        r = g[~z] / e[~z]
        if not bool(torch.allclose(r, r[0].expand_as(r), rtol=1e-3, atol=1e-6)):
            return ""
        apart = apart or _one_factor(r)
        factors.append(f"{r[0].item():.4g}")
    if not apart:  # no factor stands out from 1 more than the ratios spread: rounding, not a scale
        return ""
    if expected[0].numel() == 1:  # one entry per sentence (or layer): the factor is that entry's own
        return f"Yours divided by the reference's, {one} by {one}: {', '.join(factors)}."
    return f"Within each {one}, every entry of yours is the reference's times one factor: {', '.join(factors)}."


def _one_factor(ratios: torch.Tensor) -> bool:
    """The ratios are one factor (within 1e-3), and it stands out from 1 by ten times their spread and more: a
    factor of 1.0002 whose ratios spread by 1e-4 is what rounding gives, not a scale."""
    factor = ratios[0]
    if not bool(torch.allclose(ratios, factor.expand_as(ratios), rtol=1e-3, atol=1e-6)):
        return False
    spread = float((ratios - factor).abs().max() / factor.abs())
    return abs(float(factor) - 1) > 10 * max(spread, RTOL)


_UNFINISHED = object()  # what _hard_problem returns for a stub


@dataclass
class _Outcome:
    """One test case: what the learner's function did, and whether it matched."""

    number: int
    case: Case
    call: Call
    args: tuple  # as the learner's function left them
    hard: object = None  # None, _UNFINISHED, or the message of a problem that is not about values
    kinds: tuple[str, ...] = ()  # what kind of hard problem
    expected: object = None
    ok: bool = False


def run_check(
    exercise: Exercise,
    fn,
    time_limit: float = TIME_LIMIT,
    *,
    caller: Caller | None = None,
    cases: list[Case] | None = None,
) -> CheckResult:
    """Run ``fn`` on every case of ``exercise``, then decide; never raises (a failure is a result).

    The single place where outputs are compared and bugs diagnosed. By default ``fn`` is called here, in
    this process; the batch grader passes a ``caller`` that returns what a sandboxed kernel computed (then
    ``fn`` is only a label), and the ``cases`` it sent there.

    The decision, once every case has been called (calls stop after a time-out or a crash):

    * every case matches: passed;
    * the first case that does not match raised NotImplementedError, or could not run because triton is not
      installed here: not attempted;
    * it had a problem that is not about values (an exception, a time-out, a crash, an input changed in
      place, or gradients unlike the reference's where no case has wrong values): that problem, on that case;
    * else (wrong values): a known-wrong variant is named only if the function's output equals the
      variant's on every case where the variant runs, and differs from the reference on one of them
      (and the variant runs on every case where the values are wrong);
      otherwise the message says what was observed: type, dtype, shape, NaN or inf, where the values
      differ, on which kinds of test case. Problems of other kinds on later cases are added.
    """

    def result(status: str, message: str, where: str = "", reason: str = "", findings=()) -> CheckResult:
        return CheckResult(exercise.name, status, message, where, printed, exercise.hint, reason, tuple(findings))

    printed = ""  # the first thing the learner's function printed, if anything
    if caller is None:
        if not callable(fn):
            return result(
                FAILED,
                f"check_{exercise.name} needs your function itself, `check_{exercise.name}({exercise.name})`, "
                f"not the result of calling it; got {describe(fn)}.",
                findings=["type"],
            )
        caller = in_process(fn, exercise.gradients, exercise.launch, exercise.forbidden)
    try:
        cases = exercise.make_cases() if cases is None else cases
        if exercise.prediction is not None:
            return _prediction_result(exercise, caller, cases[0], time_limit)
        outcomes: list[_Outcome] = []
        for number, case in enumerate(cases, start=1):
            call, learner_args = caller(number, case, time_limit)
            printed = printed or call.printed
            outcome = _Outcome(number, case, call, learner_args)
            outcome.hard, outcome.kinds = _hard_problem(exercise, case, learner_args, call, time_limit)
            if outcome.hard is None:
                with torch.no_grad():
                    outcome.expected = exercise.reference(*copy.deepcopy(case.args))
                outcome.ok = same(outcome.expected, call.value, case.tolerance)
                # a NaN put in the inputs on purpose tests that it shows in the values; the gradients are NaN
                # wherever it reaches, in a pattern that says nothing about training
                if outcome.ok and exercise.gradients and NAN_INPUT not in case.tags:
                    problem = _gradient_problem(exercise, case, call)
                    if problem is not None:
                        outcome.ok, outcome.hard, outcome.kinds = False, problem, ("gradient",)
            outcomes.append(outcome)
            if call.timed_out or call.crashed:
                break  # each further call could cost the whole time limit again, or find no process
        failed = [o for o in outcomes if not o.ok]
        borrowed = next((o for o in outcomes if o.call.used_reference), None)
        if not failed and borrowed is not None:
            where = _case_name(borrowed, len(cases))
            return result(FAILED, _borrowed(exercise, borrowed), where, findings=["reference"])
        if not failed:
            return result(PASSED, f"all {len(cases)} test cases match the reference.")
        first = failed[0]
        where = _case_name(first, len(cases))
        if first.hard is _UNFINISHED:
            return result(
                NOT_ATTEMPTED,
                f"`{exercise.name}` still raises NotImplementedError. Replace `# YOUR CODE HERE` and "
                "`raise NotImplementedError()` with your code, run that cell, then run this check again.",
            )
        if first.call.error_name == "TritonMissingError":  # nothing the learner wrote could have run here
            return result(NOT_ATTEMPTED, first.call.error_text)
        wrong_values = any(o.hard is None for o in failed)
        if first.hard is not None and not (_gradient_only(first) and wrong_values):
            reason = CRASHED if first.call.crashed else TIMEOUT if first.call.timed_out else ""
            return result(FAILED, first.hard, where, reason, first.kinds)
        message, findings, at = _wrong_values(exercise, outcomes, len(cases))
        if borrowed is not None:
            message += " Also: " + _borrowed(exercise, borrowed)
            findings = [*findings, "reference"]
        return result(FAILED, message, _case_name(at, len(cases)), findings=findings)
    except Exception as err:  # a bug in the check itself must not stop the notebook either
        return result(FAILED, f"the check itself failed ({type(err).__name__}: {err}); please report this.")


def _prediction_result(exercise: Exercise, caller: Caller, case: Case, time_limit: float) -> CheckResult:
    """A graded prediction (``Exercise.prediction``): its one call, then :func:`prediction.judge` (the measurement
    is made only for a valid prediction)."""
    from .prediction import judge, locked_hint, not_attempted

    hints = locked_hint(exercise) or exercise.hint  # before a first prediction: "predict first", not the answer
    call, args = caller(1, case, time_limit)
    hard, kinds = _hard_problem(exercise, case, args, call, time_limit)
    if hard is _UNFINISHED:
        return not_attempted(exercise)
    if hard is not None:
        reason = CRASHED if call.crashed else TIMEOUT if call.timed_out else ""
        return CheckResult(exercise.name, FAILED, hard, "", call.printed, hints, reason, kinds, points=0.0)
    if call.used_reference:
        message = (
            f"your function runs the course's own `{call.used_reference}`: that measures, it does not predict. A "
            f"prediction is worked out before measuring; one that runs anything from "
            f"{' or '.join(f'`{m}`' for m in exercise.forbidden)} earns no marks, whatever it returns."
        )
        return CheckResult(exercise.name, FAILED, message, "", call.printed, hints, "", ("reference",), 0.0)
    return dataclasses.replace(judge(exercise, call.value, exercise.hint), printed=call.printed)


_MATCH = "your outputs match the reference's within the check's tolerance"

# What autograd says when a tensor it saved for the backward pass was changed in place, and what that means
_INPLACE_AUTOGRAD = "modified by an inplace operation"
_INPLACE_CAUSE = (
    "That is an in-place operation (an augmented assignment such as += or *=, or a method whose name ends in an "
    "underscore, such as mul_) that changed a tensor the backward pass still needs: autograd saved it to compute a "
    "gradient, and it was overwritten afterwards, even if it is a copy of an input. Nothing was cut off from the "
    "computation: compute each step into a new tensor instead of overwriting one that an earlier step read."
)

# A gradient with NaN or inf where the values are finite: its two usual causes, unless the exercise says which applies
GRADIENT_NAN_NOTE = (
    "Its two usual causes: a NaN repaired after it was made (0 / 0 at a fully masked row, or at a group of zeros "
    "divided by its size, replaced by 0 afterwards), which is still NaN on the way back; or an exp written out by "
    "hand that overflows (in float32, exp(x) is inf for x above about 88) where the value still comes out finite, "
    "which gives inf / inf or 0 * inf on the way back. Avoid making the NaN or the inf: torch's own softmax, sigmoid "
    "and silu are written to avoid both."
)


# What cuts a computation off from autograd, named (not written out as code: a message names the mistake, the
# hint's last step gives the code)
_CUTS = (
    "`detach`, the `data` attribute, a `torch.no_grad` block, `item` or `tolist`, a round trip through NumPy, or "
    "`torch.tensor` called on a tensor"
)


# Gradients are compared in float64 where the learner's function runs in float64 (calling.double_gradients): two
# mathematically equal functions then agree to about 1e-13, whatever float32 rounding did to each. In float32 a
# difference is rounding when it is within GRADIENT_SPREAD of the largest entry of the whole gradient (every input's):
# rounding puts the galleries' correct versions below a tenth of it, the worst being issue 30's two cases (a tanh
# written with a sigmoid at 8e-5 of the largest entry, a saturated softmax computed twice at 2e-5); tests/test_checks.py
# measures them. A function that runs in float64 must also stay within it in float32, where training runs.
GRADIENT_SPREAD = 1e-3


def _gradient_problem(exercise: Exercise, case: Case, call: Call) -> str | None:
    """None if the gradients that flowed back to the inputs in the learner's second call (with gradients on) equal
    the reference's; else what is wrong, said as observed: which inputs get none, or a different one, where.

    Equal means: equal within the values' tolerance in float32; or, where the learner's function runs in float64
    and computes the reference's values there, equal in float64 (and within :data:`GRADIENT_SPREAD` of the largest
    gradient entry in float32, where training runs); or, where it does not run in float64, within that spread in
    float32. A cause is named only where the numbers establish it: "no gradient" where the learner's is exactly zero
    and the reference's is not, "twice" where it is the reference's times 2 entry by entry."""
    intro = f"{_MATCH}, but training could not learn through your function: "
    if call.gradient_error:
        raised = (
            f"{_MATCH}, but called again with gradients on, as in training, your function raised {call.gradient_error}."
        )
        if _INPLACE_AUTOGRAD in call.gradient_error:  # autograd's own hint after it is about its debugging tools
            error = call.gradient_error.split(" Hint:")[0].rstrip(".")
            return (
                f"{_MATCH}, but called again with gradients on, as in training, your function raised {error}. "
                + _INPLACE_CAUSE
            )
        return (
            f"{raised} Something in it needs a tensor cut off from the computation ({_CUTS}): keep every step a torch "
            "operation on the tensors you were given."
        )
    expected = input_gradients(exercise.reference, copy.deepcopy(case.args))
    got = call.gradients
    if not _gradient_tuple(got, expected):
        return f"{_MATCH}, but the gradients that flow back through your function could not be measured."
    labels = []
    for index, parameter in gradient_leaves(case.args):
        name = exercise.params[index] if index < len(exercise.params) else f"argument {index}"
        labels.append(f"`{name}.{parameter}`" if parameter else f"`{name}`")
    nonfinite = [
        label
        for label, e, g in zip(labels, expected, got, strict=True)
        if bool((~torch.isfinite(g) & torch.isfinite(e)).any())
    ]
    if nonfinite:
        note = exercise.gradient_nan_note
        note = note(case, got) if callable(note) else note
        return (
            intro + f"the gradient that flows back to {_and(nonfinite)} contains NaN or inf where the reference's is "
            "finite, and one NaN in a gradient turns every weight it reaches into NaN. " + (note or GRADIENT_NAN_NOTE)
        )
    if all(same(e, g) for e, g in zip(expected, got, strict=True)):
        return None
    spread = _spread(expected)
    doubled = _in_double(exercise, case, call)
    if doubled is None:  # float32 alone: rounding is what stays within the spread
        close = [_within(e, g, spread) for e, g in zip(expected, got, strict=True)]
        if all(bool(c.all()) for c in close):
            return None
        return _gradient_difference(labels, expected, got, close, spread)
    expected64, got64 = doubled
    close = [_close(e, g) for e, g in zip(expected64, got64, strict=True)]
    if not all(bool(c.all()) for c in close):
        return _gradient_difference(labels, expected64, got64, close)
    pairs = zip(labels, expected, got, strict=True)
    loose = [(label, e, g) for label, e, g in pairs if not bool(_within(e, g, spread).all())]
    if not loose:
        return None  # float32 rounding: in float64 the gradients agree
    label, e, g = loose[0]
    index = tuple(int(i) for i in torch.unravel_index((g - e).abs().argmax(), e.shape))
    return (
        f"{_MATCH}, and in float64 so do the gradients that flow back through your function; but in "
        f"float32, where training runs, the gradient that flows back to {_and([x[0] for x in loose])} differs from "
        f"the reference's by more than rounding (more than {GRADIENT_SPREAD:g} of the largest gradient entry): at "
        f"index {list(index)} of {label}, expected {_show(e, index)}, got {_show(g, index)}. A step of your function "
        "loses precision on the way back with these inputs: look for a quantity it computes as the difference of two "
        "large, nearly equal numbers, or an exp or a division that the formula's own operations avoid."
    )


def _gradient_tuple(got, expected: tuple) -> bool:
    """``got`` is one tensor per leaf, each of the reference's shape and dtype."""
    return (
        isinstance(got, (tuple, list))
        and len(got) == len(expected)
        and all(
            isinstance(g, torch.Tensor) and g.shape == e.shape and g.dtype == e.dtype
            for e, g in zip(expected, got, strict=True)
        )
    )


def _spread(expected: tuple) -> float:
    """The float32 tolerance of a gradient: GRADIENT_SPREAD times the largest finite entry of the whole gradient
    (every input's), at least ATOL."""
    largest = max((float(e[torch.isfinite(e)].abs().max()) for e in expected if bool(torch.isfinite(e).any())),
                  default=0.0)  # fmt: skip
    return max(GRADIENT_SPREAD * largest, ATOL)


def _within(expected: torch.Tensor, got: torch.Tensor, spread: float) -> torch.Tensor:
    return torch.isclose(got, expected, atol=spread, rtol=RTOL, equal_nan=True)


def _in_double(exercise: Exercise, case: Case, call: Call) -> tuple[tuple, tuple] | None:
    """(the reference's gradients, the learner's) in float64, where both functions run in float64 and the learner's
    computes the reference's values there; else None (the comparison stays in float32)."""
    if call.gradients64 is None:
        return None
    try:
        with torch.no_grad():
            value = exercise.reference(*in_double(copy.deepcopy(case.args)))
        expected = input_gradients(exercise.reference, in_double(copy.deepcopy(case.args)))
    except Exception:  # a reference that does not run in float64
        return None
    if not same(value, call.value64) or not _gradient_tuple(call.gradients64, expected):
        return None
    if not all(bool(torch.isfinite(g).all()) or not bool(torch.isfinite(e).all()) for e, g in zip(
            expected, call.gradients64, strict=True)):  # fmt: skip
        return None
    return expected, tuple(call.gradients64)


def _gradient_difference(labels: list[str], expected, got, close: list[torch.Tensor], spread: float | None = None):
    """The message for gradients that differ: what differs, input by input, with a cause only where the numbers
    establish it: exactly zero where the reference's is not (cut off), the reference's times one factor (2: counted
    twice); else how many entries differ and the largest difference."""
    cut, partly_cut, factors, slight, other = [], [], [], [], []
    for label, e, g, ok in zip(labels, expected, got, close, strict=True):
        wrong = ~ok
        if not bool(wrong.any()):
            continue
        if bool((g == 0).all()):
            cut.append(label)
        elif bool((g[wrong] == 0).all()):
            partly_cut.append((label, e, wrong))
        else:
            factor = _gradient_factor(e, g, spread if spread is not None else _atol(e))
            if factor is not None and f"{factor:.4g}" == "1":  # a factor that prints as 1 says nothing
                slight.append((label, e, g, wrong, factor))
            elif factor is not None:
                factors.append((label, factor))
            else:
                other.append((label, e, g, wrong))
    parts = []
    if cut:
        parts.append(
            f"no gradient flows back from your outputs to {_and(cut)} (zero where the reference's is not). "
            f"Somewhere your function cuts the computation off from {'that input' if len(cut) == 1 else 'them'}: "
            f"{_CUTS}. The check calls your function once more with gradients on, as training does."
        )
    for label, e, wrong in partly_cut:
        parts.append(
            f"no gradient reaches {int(wrong.sum())} of the {e.numel()} entries of {label} (zero where the "
            f"reference's is not; the first at index {wrong.nonzero()[0].tolist()}), while the others get the "
            f"reference's: the computation is cut off from those entries, by a step that is flat there where the "
            f"reference's is not (a clamp, a where or a max that passes them a constant) or by one of {_CUTS}."
        )
    by_factor: dict[str, list[str]] = {}
    for label, factor in factors:
        by_factor.setdefault("twice" if abs(factor - 2.0) < 1e-3 else f"{factor:.4g}", []).append(label)
    for factor, same_factor in by_factor.items():
        text = f"the gradient that flows back to {_and(same_factor)} is "
        if factor == "twice":
            one = len(same_factor) == 1
            parts.append(
                text + "exactly twice the reference's, entry by entry, although every output matches: your function "
                f"counts {'that input' if one else 'each of them'} twice on the way back."
            )
        else:
            parts.append(text + f"the reference's times {factor}, entry by entry, although every output matches.")
    if slight:
        label, e, g, wrong, factor = slight[0]
        apart = abs(factor - 1)
        parts.append(
            f"the gradient that flows back to {_and([x[0] for x in slight])} differs from the reference's by a small "
            f"amount, about the same fraction ({apart:.1g}) of every entry ({int(wrong.sum())} of {e.numel()} entries "
            f"of {label} fall outside the tolerance). A difference that small and that even usually comes from a "
            "small change in what your function computes, which shows in the values too, only within their "
            "tolerance: a constant other than the one asked for (eps, for example), rather than a step that autograd "
            "cannot follow."
        )
    if other:
        label, e, g, wrong = other[0]
        index = tuple(int(i) for i in torch.unravel_index(torch.where(wrong, (g - e).abs(), 0).argmax(), e.shape))
        where = "" if len(other) == 1 else f" (at {label}: "
        detail = (
            f"{int(wrong.sum())} of {e.numel()} entries differ, the largest difference at index {list(index)}: "
            f"expected {_show(e, index)}, got {_show(g, index)}"
        )
        detail = f"{where}{detail})" if where else f": {detail}"
        parts.append(
            f"the gradient that flows back to {_and([o[0] for o in other])} differs from the reference's, although "
            f"every output matches{detail}. With the values within the tolerance, the difference is in what autograd "
            "sees: a step "
            "it cannot follow, or follows differently from the value computed (one of two uses of a tensor taken "
            "out of the computation, for example), changes the gradient and not the value."
        )
    intro = (
        f"{_MATCH}, but training could not learn through your function: "
        if cut or partly_cut
        else f"{_MATCH}, but the gradients that training follows back through your function are not the reference's: "
    )
    return intro + " ".join(parts[:1] + [p[0].upper() + p[1:] for p in parts[1:]])


def _gradient_factor(expected: torch.Tensor, got: torch.Tensor, tol: float) -> float | None:
    """c if ``got`` is ``expected`` times one factor c, entry by entry (where the reference's is not about zero, and
    about zero where it is), else None."""
    significant = expected.abs() > 100 * tol
    if not bool(significant.any()):
        return None
    ratios = got[significant] / expected[significant]
    factor = float(ratios.median())
    if not bool(torch.allclose(ratios, torch.full_like(ratios, factor), rtol=1e-3, atol=1e-6)):
        return None
    if not bool(torch.isclose(got, factor * expected, atol=max(abs(factor), 1.0) * 100 * tol, rtol=1e-3).all()):
        return None
    return factor


def _and(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _borrowed(exercise: Exercise, outcome: _Outcome) -> str:
    """The message for a function that ran one of the course's own functions the exercise forbids."""
    return (
        f"your function runs the course's own `{outcome.call.used_reference}`. This exercise asks you to write that "
        f"code yourself, in plain PyTorch: a function that is, or calls, anything from "
        f"{' or '.join(f'`{m}`' for m in exercise.forbidden)} earns no marks, whatever it returns."
    )


def _case_name(outcome: _Outcome, total: int) -> str:
    return f"test case {outcome.number} of {total} ({outcome.case.description})"


def _hard_problem(exercise: Exercise, case: Case, learner_args: tuple, call: Call, time_limit: float):
    """(None, ()) if the call returned normally with its inputs intact; (_UNFINISHED, ()) for NotImplementedError;
    else (a message, its kinds of finding)."""
    if call.crashed:
        return (
            "the process running your function died (for example `os._exit`, a crash inside a library, or "
            "running out of memory); the grader went on with the next exercise.",
            ("crashed",),
        )
    if call.stopped_outside:
        return (
            f"your function did not finish within {time_limit:g} s and would not stop when asked (does it "
            "ignore the alarm signal, or catch every exception in a loop?), so the grader stopped it. Is there "
            "a loop that never ends?",
            ("timeout",),
        )
    if call.timed_out:
        return (
            f"your function did not finish within {time_limit:g} s. Is there a loop that never ends, "
            "for example a `while` whose condition never changes?",
            ("timeout",),
        )
    if call.not_implemented:
        return _UNFINISHED, ()
    if call.error_name in REPORTED_AS_IS:  # a launcher's own diagnosis of the kernel, or of the notebook's state
        line = call.error_line.strip().removeprefix("(in the line ").removesuffix(")")
        return (f"in the line {line}: " if line else "") + call.error_text, ("error",)
    if call.error_name:
        return f"your function raised {call.error_name}{call.error_line}: {call.error_text}", ("error",)
    for name, original, copied in zip(exercise.params, case.args, learner_args, strict=True):
        if not inputs_unchanged(original, copied):
            return (
                f"your function modified its input `{name}` in place (an augmented assignment such as -= or +=, "
                "an assignment into part of it, or a method whose name ends in an underscore, such as masked_fill_). "
                "The caller still needs its inputs as they were: compute on a copy, or with the operations that "
                "return a new tensor (their names have no trailing underscore).",
                ("inplace",),
            )
    return None, ()


def _established_variant(exercise: Exercise, outcomes: list[_Outcome]) -> tuple[Variant, _Outcome] | None:
    """The variant one of whose versions gives the learner's output on every case where it runs, and differs from
    the reference on one of them (of several, the version that runs on the most cases; then the first listed).
    A case where the learner's values are wrong and the version cannot run rules it out: it would not explain
    that case."""
    best: tuple[int, Variant, _Outcome] | None = None
    for variant in exercise.variants:
        for fn in variant.fns:
            ran, at = _explains(fn, outcomes)
            if at is not None and (best is None or ran > best[0]):
                best = (ran, variant, at)
    return None if best is None else (best[1], best[2])


def _explains(fn: Callable, outcomes: list[_Outcome]) -> tuple[int, _Outcome | None]:
    """(on how many cases ``fn`` ran, the first case it explains that the reference does not), or (0, None) when
    its output differs from the learner's on a case where it runs, or it cannot run where the learner is wrong."""
    ran, at = 0, None
    for outcome in outcomes:
        try:
            with torch.no_grad():
                wrong = fn(*copy.deepcopy(outcome.case.args))
        except Exception:
            if outcome.hard is None and not outcome.ok:
                return 0, None  # wrong values that this mistake cannot explain: it cannot even run here
            continue  # the case says nothing about this mistake
        gradient_only = _gradient_only(outcome)  # right values: a known-wrong version may still give them
        if (outcome.hard is not None and not gradient_only) or not same(
            wrong, outcome.call.value, outcome.case.tolerance
        ):
            return 0, None
        ran += 1
        if not outcome.ok and not gradient_only and at is None:
            at = outcome
    return ran, at


def _gradient_only(outcome: _Outcome) -> bool:
    """The values were right, only the gradients that flow back through the function were not."""
    return outcome.kinds == ("gradient",)


def _wrong_values(exercise: Exercise, outcomes: list[_Outcome], total: int) -> tuple[str, list[str], _Outcome]:
    """(message, kinds of finding, the case it is about) when the first failing case returned wrong values."""
    found = _established_variant(exercise, outcomes)
    # a named mistake explains the gradients too; otherwise a later case's problem of any kind is worth saying
    later = [o for o in outcomes if o.hard is not None and o.hard is not _UNFINISHED]
    later = [o for o in later if not (found is not None and _gradient_only(o))]
    also = ""
    if later:
        o = later[0]
        also = f" Also, on {_case_name(o, total)}: {o.hard}"
    if found is not None:
        variant, at = found
        return variant.diagnosis + also, ["variant"] + (["also"] if also else []), at
    at = next(o for o in outcomes if not o.ok and o.hard is None)  # the first case with wrong values
    message, findings = _observed(exercise, at)
    across = _across_cases(outcomes, total)
    if across:
        message += " " + across
        findings.append("cases")
    if not {"type", "dtype", "shape"} & set(findings):  # a later case may show more than a count
        for later_outcome in outcomes[outcomes.index(at) + 1 :]:
            if later_outcome.hard is None and not later_outcome.ok:
                text, kinds = _observed(exercise, later_outcome)
                if {"type", "dtype", "shape"} & set(kinds):
                    message += f" On {_case_name(later_outcome, total)}: {text}"
                    findings += kinds
                    break
    findings += ["also"] if also else []
    return message + also, list(dict.fromkeys(findings)), at


def _observed(exercise: Exercise, outcome: _Outcome) -> tuple[str, list[str]]:
    """What differs on one case, as observed: per output, type, dtype, shape, NaN or inf, where."""
    expected, got, args = outcome.expected, outcome.call.value, outcome.case.args
    single = not isinstance(expected, tuple)
    expected_parts = (expected,) if single else expected
    if single:
        got_parts = (got,)
    elif not isinstance(got, (tuple, list)) or len(got) != len(expected):
        names = ", ".join(exercise.output_names)
        return f"your function should return {len(expected)} values ({names}), got {describe(got)}.", ["type"]
    else:
        got_parts = tuple(got)
    layouts = exercise.layout(args) if exercise.layout is not None else (None,) * len(expected_parts)
    large = LARGE in outcome.case.tags
    problems, findings, right = [], [], []
    shaped: dict[str, list[str]] = {}  # a wrong shape's text (after the output's name) -> the outputs that have it
    for output, (output_name, names, e, g, layout) in enumerate(
        zip(exercise.output_names, exercise.returns, expected_parts, got_parts, layouts, strict=True)
    ):
        if same(e, g, outcome.case.tolerance):
            right.append(f"`{output_name}`")
            continue
        what = "your output" if single else f"`{output_name}`"
        text, kinds = _output_problem(e, g, names, what, layout, large, exercise, output, outcome.case.tolerance)
        if kinds == ["shape"] and shaped.get(text.removeprefix(what)):  # the same wrong shape: said once
            shaped[text.removeprefix(what)].append(what)
            continue
        if kinds == ["shape"]:
            shaped[text.removeprefix(what)] = [what]
        problems.append(text)
        findings += kinds
    for suffix, whats in shaped.items():
        if len(whats) > 1:
            index = problems.index(whats[0] + suffix)
            together = ", ".join(whats[:-1]) + f" and {whats[-1]}"
            problems[index] = f"{together} each{suffix}"
    for rounded in {_ROUNDED_START + name for _, name, _ in _HALF_FORMATS}:  # the rounding explained once
        said = [i for i, p in enumerate(problems) if rounded in p]
        for i in said[1:]:
            start = problems[i].index(rounded)
            end = problems[i].index(". ", start) + 2 if ". " in problems[i][start:] else len(problems[i])
            name = rounded.removeprefix(_ROUNDED_START)
            problems[i] = problems[i][:start] + f"Its entries too are {name} numbers. " + problems[i][end:]
    if right:
        problems.append(f"({' and '.join(right)} {'matches' if len(right) == 1 else 'match'} the reference.)")
        findings.append("where")
    if exercise.properties is not None:
        broken = exercise.properties(args, got)
        if broken:
            problems.insert(0, broken)
            findings.insert(0, "property")
    text = " ".join(problems[:1] + [p[0].upper() + p[1:] for p in problems[1:]])
    return text, list(dict.fromkeys(findings))


def _across_cases(outcomes: list[_Outcome], total: int) -> str:
    """'It matches ... on every test case except those with <tag>', when the failing cases are exactly those."""
    if len(outcomes) < total:
        return ""
    failing = {o.number for o in outcomes if not o.ok and not _gradient_only(o)}
    for tag in TAG_ORDER:
        tagged = {o.number for o in outcomes if tag in o.case.tags}
        if tagged == failing and len(tagged) < total:
            numbers = sorted(tagged)
            listed = f"test case {numbers[0]}" if len(numbers) == 1 else f"test cases {_listed(numbers)}"
            return f"It matches the reference on every test case except the ones with {tag} ({listed})."
    return ""
