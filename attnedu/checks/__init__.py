"""Checks for the graded exercises in ``exercises/``: one per exercise, called in the cell
under the learner's function.

    check_additive_score(additive_score)     # shows ✅ passed, ❌ failed (and what is wrong) or ⏳ not attempted
    hint("additive_score")                   # or: result = check_additive_score(...); result.hint()
    hint("apply_rope_interleaved", 2)        # a hint in steps: 1 a nudge, 2 the formula, 3 the code

How a check works (the rule itself is in :func:`diagnosis.run_check`):

* It calls the learner's function on every one of a few small inputs built here from fixed seeds:
  a batch of one, sentences with and without padding, inputs large enough that a hand-written exp
  or tanh overflows, sizes that differ from each other so that a transpose shows. Each output is
  compared with a private reference from the package (``attnedu.attention``, ``attnedu.masks``,
  ``attnedu.models``) or, for an exercise the package has no function for, from the lesson's checks
  module. Weights are passed in explicitly, so nothing depends on the learner's seed or on the order
  in which they created tensors.
* An exception, a time-out, a crash or an input changed in place is reported on the first case where
  it happens, unless an earlier case already gave wrong values.
* Wrong values are compared with known-wrong variants (softmax over the wrong axis, mask inverted,
  off by one in either direction, ...): a variant is named only if the learner's output equals it on
  every case where the variant runs, and differs from the reference on one of them. Otherwise the
  message says what was observed, never a guessed cause: type, dtype, shape, NaN or inf (with a
  note on overflow when the case has large inputs), where the values differ (only at padding, only
  in one sentence, only in a fully masked row, only at the first or last position, only in one half
  of the features), a constant factor, on which kinds of test case it fails.
* It **returns** a :class:`CheckResult` and never raises, so "Run all" never stops at an
  unfinished exercise. ``NotImplementedError`` means "not attempted".
* A graded prediction (:mod:`.prediction`) is a function of no argument that returns the learner's prediction; its
  check shows the measurement only beside a valid prediction, scores the session's first one with partial credit
  (full within the exercise's margin, half within twice it), and says so when it changed afterwards.
* The learner's code runs on copies of the inputs (a change to them is reported), with its
  printing captured and truncated, and under a time limit (``SIGALRM`` in the main thread on
  Unix; elsewhere a helper thread, which cannot be stopped and is left running); no case is called
  after a time-out.

Limits: the checks are not secret and run in the learner's own Python process, so they
measure understanding, not honesty. The batch grader (``attnedu.grade``) does not trust them: in
the kernels it starts (``ATTNEDU_GRADING=1``) a check cell returns at once without calling
anything, and the grader calls each function itself from outside the kernel, then compares and
diagnoses in its own process with the same :func:`run_check`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping

from . import (
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
    lesson13,
)
from .calling import MAX_PRINTED, TIME_LIMIT, grading_mode
from .diagnosis import run_check
from .exercise import Exercise
from .lesson11 import check_removal_effect
from .prediction import expected_form, locked_hint, recorded_prediction, session_prediction
from .results import FAILED, ICONS, NOT_ATTEMPTED, PARTIAL, PASSED, CheckResult, Hint, make_hint

# The registry: every lesson's checks module lists its exercises in EXERCISES, in the order of its notebook.
LESSON_MODULES = (
    lesson01, lesson02, lesson03, lesson04, lesson05, lesson06, lesson07, lesson08, lesson09, lesson10, lesson11,
    lesson12, lesson13,
)  # fmt: skip
EXERCISES: dict[str, Exercise] = {e.name: e for module in LESSON_MODULES for e in module.EXERCISES}
LESSONS: dict[str, list[str]] = {}
for _name, _registered in EXERCISES.items():
    LESSONS.setdefault(_registered.lesson, []).append(_name)
# Lessons the course has split or renamed since: a notebook made under the old name (its metadata, or its file name,
# says so) is still graded, on the exercises it was handed out with, each checked as in its new lesson.
FORMER_LESSONS: dict[str, list[str]] = {lesson08.FORMER_LESSON: list(lesson08.FORMER_EXERCISES)}
GRADED_LESSONS: dict[str, list[str]] = {**LESSONS, **FORMER_LESSONS}


def _exercise(name: str) -> Exercise:
    if name not in EXERCISES:
        raise ValueError(f"no exercise named {name!r}; the exercises are {', '.join(EXERCISES)}")
    return EXERCISES[name]


# `make check` (tools/check.py) sets this to a file: every check then appends its result to it, one JSON line
RECORD_ENV = "ATTNEDU_CHECK_RECORD"


def check(name: str, fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """Run the check of exercise ``name`` on ``fn``."""
    exercise = _exercise(name)
    if grading_mode():
        return CheckResult(name, NOT_ATTEMPTED, "not run here: the batch grader checks this function itself.")
    if exercise.prediction is not None:  # the first valid prediction of the session is the one scored
        caller, note = session_prediction(exercise, fn, time_limit)
        result = run_check(exercise, fn, time_limit, caller=caller)
        if note:
            result = dataclasses.replace(result, message=f"{result.message}\n{note}")
    else:
        result = run_check(exercise, fn, time_limit)
    _record(result, exercise.lesson)
    return result


def _record(result: CheckResult, lesson: str) -> None:
    """Append ``result`` to the file named by ``$ATTNEDU_CHECK_RECORD``, if set (for `make check`'s summary)."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    entry = {**result.to_dict(), "lesson": lesson, "reason": result.reason}
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:
        pass


def _signature(exercise: Exercise) -> str:
    if exercise.prediction is not None:
        return f"prediction {exercise.name}() -> {expected_form(exercise.prediction)}"
    returns = ", ".join(f"({', '.join(dims)}{',' if len(dims) == 1 else ''})" for dims in exercise.returns)
    outputs = returns if len(exercise.returns) == 1 else f"({returns})"
    named = "" if exercise.output_names == ("the output",) else f", i.e. {', '.join(exercise.output_names)}"
    return f"{exercise.name}({', '.join(exercise.params)}) -> {outputs}{named}"


def _check_function(exercise: Exercise) -> Callable[..., CheckResult]:
    """``check_<name>(fn)``: the function a learner calls in the cell under their answer."""

    def check_exercise(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
        return check(exercise.name, fn, time_limit)

    check_exercise.__name__ = check_exercise.__qualname__ = f"check_{exercise.name}"
    check_exercise.__doc__ = f"Check your {_signature(exercise)} (lesson {exercise.lesson})."
    return check_exercise


for _name, _registered in EXERCISES.items():
    globals()[f"check_{_name}"] = _check_function(_registered)


def hint(name: str, step: int | None = None) -> Hint:
    """The hint for exercise ``name``, e.g. ``hint("masked_softmax")``. Some exercises give theirs in steps, a
    nudge first, then the formula, then the code: ``hint("document_mask", 2)`` shows step 2 (each step names
    the next). ``step`` is from 1; without it, the first step (or the one hint). A graded prediction's hints lead to
    its answer: until the session's first prediction of it is recorded, every step says to predict first."""
    exercise = _exercise(name)
    shown = make_hint(name, exercise.hint, step)  # a step out of range is refused as for any exercise
    locked = locked_hint(exercise)
    return shown if locked is None else make_hint(name, locked)


def grade_namespace(namespace: Mapping, lesson: str | None = None, time_limit: float = TIME_LIMIT) -> dict:
    """Check every exercise of ``lesson`` (all lessons if None) on the functions named like them in
    ``namespace`` (a kernel's ``globals()``). A missing function counts as not attempted.

    Returns ``{"lesson": ..., "results": [CheckResult.to_dict(), ...]}``, in exercise order.
    """
    if lesson is not None and lesson not in GRADED_LESSONS:
        raise ValueError(f"no lesson named {lesson!r}; the lessons with exercises are {', '.join(LESSONS)}")
    names = GRADED_LESSONS[lesson] if lesson is not None else list(EXERCISES)
    results = []
    for name in names:
        fn = namespace.get(name)
        if fn is None:
            result = CheckResult(name, NOT_ATTEMPTED, f"no function named `{name}` was defined.")
        else:
            result = check(name, fn, time_limit)
        results.append(result.to_dict())
    return {"lesson": lesson, "results": results}


__all__ = [
    "CheckResult", "Exercise", "Hint", "run_check", "check", "hint", "grade_namespace", "EXERCISES", "LESSONS",
    "FORMER_LESSONS", "GRADED_LESSONS",
    "LESSON_MODULES", "PASSED", "FAILED", "NOT_ATTEMPTED", "PARTIAL", "ICONS", "MAX_PRINTED", "TIME_LIMIT",
    "recorded_prediction",
    *(f"check_{name}" for name in EXERCISES), "check_removal_effect",
]  # fmt: skip
