"""Checks for the graded exercises in ``exercises/``: one per exercise, called in the cell
under the learner's function.

    check_additive_score(additive_score)     # shows ✅ passed, ❌ failed (with the likely bug) or ⏳ not attempted
    hint("additive_score")                   # or: result = check_additive_score(...); result.hint()

How a check works:

* It calls the learner's function on a few small inputs built here from fixed seeds (shapes
  that differ from each other, padding, a fully masked row, a batch of one) and compares each
  output with a private reference from the package (``attnedu.attention``, ``attnedu.masks``,
  ``attnedu.models``). Weights are passed in explicitly, so nothing depends on the learner's
  seed or on the order in which they created tensors.
* When an output is wrong it is compared with known-wrong variants (softmax over the wrong
  axis, mask inverted, output transposed, ...): a match names the likely bug. Otherwise the
  message says what differs: type, dtype, shape, NaN, a broken property, or the first value.
* It **returns** a :class:`CheckResult` and never raises, so "Run all" never stops at an
  unfinished exercise. ``NotImplementedError`` means "not attempted".
* The learner's code runs on copies of the inputs (a change to them is reported), with its
  printing captured and truncated, and under a time limit (``SIGALRM`` in the main thread on
  Unix; elsewhere a helper thread, which cannot be stopped and is left running).

Limits: the checks are not secret and run in the learner's own Python process, so they
measure understanding, not honesty; see ``attnedu.grade`` for batch grading.
"""

from __future__ import annotations

from collections.abc import Mapping

from .engine import (
    FAILED,
    ICONS,
    MAX_PRINTED,
    NOT_ATTEMPTED,
    PASSED,
    TIME_LIMIT,
    CheckResult,
    Exercise,
    Hint,
    run_check,
)
from .lesson01 import LAST_REAL_STATE, PADDING_MASK, REVERSE_PADDED
from .lesson02 import ADDITIVE_SCORE, CONTEXT_VECTOR, DECODER_STEP, MASKED_SOFTMAX

__all__ = [
    "CheckResult", "Exercise", "Hint", "run_check", "check", "hint", "grade_namespace", "EXERCISES", "LESSONS",
    "PASSED", "FAILED", "NOT_ATTEMPTED", "ICONS", "MAX_PRINTED", "TIME_LIMIT",
    "check_padding_mask", "check_last_real_state", "check_reverse_padded",
    "check_additive_score", "check_masked_softmax", "check_context_vector", "check_decoder_step",
]  # fmt: skip

_ALL = (PADDING_MASK, LAST_REAL_STATE, REVERSE_PADDED, ADDITIVE_SCORE, MASKED_SOFTMAX, CONTEXT_VECTOR, DECODER_STEP)
EXERCISES: dict[str, Exercise] = {e.name: e for e in _ALL}
LESSONS: dict[str, list[str]] = {}
for _exercise in EXERCISES.values():
    LESSONS.setdefault(_exercise.lesson, []).append(_exercise.name)


def check(name: str, fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """Run the check of exercise ``name`` on ``fn``."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise named {name!r}; the exercises are {', '.join(EXERCISES)}")
    return run_check(EXERCISES[name], fn, time_limit)


def check_padding_mask(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """padding_mask(lengths (batch,), max_len) -> (batch, max_len) bool, True at real tokens."""
    return check("padding_mask", fn, time_limit)


def check_last_real_state(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """last_real_state(states (batch, src_len, hidden), lengths (batch,)) -> (batch, hidden)."""
    return check("last_real_state", fn, time_limit)


def check_reverse_padded(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """reverse_padded(src (batch, src_len), lengths (batch,)) -> (batch, src_len)."""
    return check("reverse_padded", fn, time_limit)


def check_additive_score(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """additive_score(query, keys, W_a, U_a, v_a) -> (batch, src_len)."""
    return check("additive_score", fn, time_limit)


def check_masked_softmax(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """masked_softmax(scores (batch, src_len), mask (batch, src_len) bool) -> (batch, src_len)."""
    return check("masked_softmax", fn, time_limit)


def check_context_vector(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """context_vector(weights (batch, src_len), values (batch, src_len, enc_dim)) -> (batch, enc_dim)."""
    return check("context_vector", fn, time_limit)


def check_decoder_step(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """decoder_step(embedded, state, annotations, mask, attention, cell, out) -> (logits, new_state, weights)."""
    return check("decoder_step", fn, time_limit)


def hint(name: str) -> Hint:
    """The hint for exercise ``name``, e.g. ``hint("masked_softmax")``."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise named {name!r}; the exercises are {', '.join(EXERCISES)}")
    return Hint(name, EXERCISES[name].hint)


def grade_namespace(namespace: Mapping, lesson: str | None = None, time_limit: float = TIME_LIMIT) -> dict:
    """Check every exercise of ``lesson`` (all lessons if None) on the functions named like them in
    ``namespace`` (a kernel's ``globals()``). A missing function counts as not attempted.

    Returns ``{"lesson": ..., "results": [CheckResult.to_dict(), ...]}``, in exercise order.
    """
    if lesson is not None and lesson not in LESSONS:
        raise ValueError(f"no lesson named {lesson!r}; the lessons with exercises are {', '.join(LESSONS)}")
    names = LESSONS[lesson] if lesson is not None else list(EXERCISES)
    results = []
    for name in names:
        fn = namespace.get(name)
        if fn is None:
            result = CheckResult(name, NOT_ATTEMPTED, f"no function named `{name}` was defined.")
        else:
            result = check(name, fn, time_limit)
        results.append(result.to_dict())
    return {"lesson": lesson, "results": results}
