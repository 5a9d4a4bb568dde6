"""Graded predictions: the learner commits to a number (or a yes or no) before the course measures it, and the
prediction is scored like any exercise, with partial credit.

The learner writes a function of no argument, named after the exercise, that returns the prediction: one value, or
a tuple of them, one per part. Its check cell, ``check_<name>(<name>)``, shows nothing of the measurement until the
function returns a valid prediction; the first valid prediction of the session is recorded then, and only then is
the measurement made and shown beside it. A prediction changed afterwards is said, and the recorded one is still
the one scored in that session (a fresh kernel, as `make check` and the batch grader run, sees only what the
notebook holds: the checks measure understanding, not honesty). ``python -m attnedu.grade`` and `make check` score
it as any exercise: its column in the grader's CSV holds the score.

The rule (:func:`part_points`), per part: a number within its margin of the measurement scores 1, within twice the
margin 1/2, else 0; a part without a margin (a yes or no, a count, a set of positions) scores 1 when it equals the
measurement, else 0. An exercise may also give 1/2 to a guess outside the margins that a reasoned route leads to
(``credit``), with a line on where that route runs out. The exercise's score is the mean of its parts' (two
yes-or-no parts: 0, 1/2 or 1). Its status: passed at 1, partial between 0 and 1, failed at 0.

A lesson adds one with :func:`prediction_exercise` in its checks module, listed in ``EXERCISES`` like any other::

    LONGER_SENTENCE_WEIGHT = prediction_exercise(
        name="longer_sentence_weight",
        lesson=LESSON,
        question="the weight on the previous position at twice the length",
        parts=(Part("the weight on the previous position", margin=0.01),),
        measure=_longer_sentence_weight,  # the course's measurement: a tuple, one value per part (cached here)
        hint=("a nudge", "the reasoning", "how to compute it"),
        diagnose=_why,  # optional: (part index, guess, measured) -> what a wrong guess typically assumed, or ""
        details=_table,  # optional: (measured) -> more of the measurement, shown once the learner has predicted
    )
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from .calling import TIME_LIMIT, call_learner
from .exercise import Case, Exercise, Part, Prediction
from .results import FAILED, NOT_ATTEMPTED, PARTIAL, PASSED, CheckResult, score_text

CASE = "your prediction"  # the description of a prediction's one test case (called with no argument)

# The first valid prediction of this session (this kernel), per exercise: what the check scores from then on
_RECORDED: dict[str, tuple] = {}


def prediction_exercise(
    name: str,
    lesson: str,
    question: str,
    parts: tuple[Part, ...],
    measure: Callable[[], tuple],
    hint: str | tuple[str, ...],
    diagnose: Callable[[int, object, tuple], str] | None = None,
    details: Callable[[tuple], str] | None = None,
    forbidden: tuple[str, ...] = (),
    credit: Callable[[int, object, tuple], float] | None = None,
    observed: str = "measured",
    credit_label: str = "a reasoned route's value",
) -> Exercise:
    """An exercise whose answer is a prediction (see the module's docstring): the learner's ``name()`` returns one
    value per part of ``parts``; ``measure()`` is called once per process (its result is kept) and only after a
    valid prediction. ``forbidden``: modules of the course the learner's function may not run (it would measure, not
    predict). ``credit``: optional, (part index, guess, measured) -> 0.5 for a guess outside the margins that a
    reasoned route gives (say in ``diagnose`` where it runs out), else 0. ``observed``: the word the verdict uses for
    the course's value ("measured"; "counted" where it is counted). ``credit_label``: what the verdict calls a guess
    that ``credit`` rewards ("in the right order" where it rewards an order)."""
    if not parts or not all(isinstance(p, Part) for p in parts):
        raise TypeError(f"parts should be one or more Part, got {parts!r}")
    for part in parts:
        if part.kind not in (float, bool, int, frozenset):
            raise ValueError(f"part {part.name!r}: kind should be float, bool, int or frozenset, got {part.kind!r}")
        if (part.margin is not None) != (part.kind is float):
            raise ValueError(f"part {part.name!r}: a float part needs a margin, and only a float part has one")
        if part.margin is not None and not part.margin > 0:
            raise ValueError(f"part {part.name!r}: the margin should be positive, got {part.margin!r}")
    measured = Once(measure)
    prediction = Prediction(tuple(parts), measured, question, diagnose, details, credit, observed, credit_label)
    returns = tuple(() for _ in parts)
    return Exercise(
        name=name,
        lesson=lesson,
        params=(),
        returns=returns,
        reference=lambda: measured(),
        make_cases=lambda: [Case(CASE, ())],
        variants=(),
        hint=hint,
        output_names=tuple(p.name for p in parts),
        forbidden=forbidden,
        prediction=prediction,
    )


class Once:
    """``measure()`` made once per process, whichever thread asks first; a thread that asks while it is being made
    waits for it (the batch grader makes the measurements beside its sandboxes, then compares in its main thread).
    If it raises, nothing is kept and the next call tries again. ``cache_clear()`` forgets it (for tests)."""

    def __init__(self, measure: Callable[[], tuple]):
        self.measure, self._lock, self._value, self._done = measure, threading.Lock(), None, False

    def __call__(self):
        with self._lock:
            if not self._done:
                self._value, self._done = self.measure(), True
            return self._value

    def cache_clear(self) -> None:
        with self._lock:
            self._value, self._done = None, False


# --------------------------------------------------------------------------------------------
# Reading and scoring a prediction
# --------------------------------------------------------------------------------------------


def expected_form(prediction: Prediction) -> str:
    """What the learner's function must return, in words."""
    kinds = {
        float: "a number",
        bool: "True or False",
        int: "a whole number",
        frozenset: "a list of whole numbers",
    }
    words = [f"{kinds[p.kind]} ({p.name})" for p in prediction.parts]
    if len(words) == 1:
        return words[0]
    return f"a tuple of {len(words)} values: " + ", ".join(words)


def _scalar(value):
    """A Python bool, int or float from a number, a NumPy scalar or a one-element tensor; else None. (The grader's
    kernel sends NumPy scalars as Python numbers too, so both read them alike.)"""
    if isinstance(value, (bool, int, float)):
        return value
    item = getattr(value, "item", None)
    size = getattr(value, "numel", None) or getattr(value, "size", None)
    try:
        if callable(item) and (size() if callable(size) else size) == 1:
            scalar = item()
            return scalar if isinstance(scalar, (bool, int, float)) else None
    except Exception:
        return None
    return None


def _one(part: Part, value):
    """``value`` read as ``part``'s kind, or None when it is not one."""
    if part.kind is frozenset:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            return None
        try:
            items = [_scalar(v) for v in value]
        except Exception:
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return None
        return frozenset(items)
    scalar = _scalar(value)
    if part.kind is bool:
        return scalar if isinstance(scalar, bool) else None
    if isinstance(scalar, bool) or scalar is None:
        return None
    if part.kind is int:
        return scalar if isinstance(scalar, int) else None
    return float(scalar) if math.isfinite(scalar) else None


def parse(prediction: Prediction, value) -> tuple | None:
    """The learner's prediction as one value per part (float, bool, int or frozenset), or None when it is not of
    the expected form (see :func:`expected_form`). One part: the value itself, or a tuple or list of one."""
    parts = prediction.parts
    if len(parts) == 1 and not (isinstance(value, (tuple, list)) and parts[0].kind is not frozenset):
        values = (value,)
    elif len(parts) == 1 and isinstance(value, (tuple, list)) and len(value) == 1 and parts[0].kind is not frozenset:
        values = tuple(value)
    elif isinstance(value, (tuple, list)) and len(value) == len(parts):
        values = tuple(value)
    else:
        return None
    read = tuple(_one(part, v) for part, v in zip(parts, values, strict=True))
    return None if any(v is None for v in read) else read


def part_points(part: Part, guess, measured) -> float:
    """1, 1/2 or 0: within the margin, within twice it, or further (see the module's docstring)."""
    if part.margin is None:
        return float(guess == measured)
    margin = part.margin * abs(measured) if part.relative else part.margin
    distance = abs(guess - measured)
    tolerance = 1e-9 * max(1.0, abs(measured))  # a guess exactly on the margin is within it
    return 1.0 if distance <= margin + tolerance else 0.5 if distance <= 2 * margin + tolerance else 0.0


def _show(part: Part, value) -> str:
    if part.kind is bool:
        return "yes" if value else "no"
    if part.kind is frozenset:
        return "[" + ", ".join(str(v) for v in sorted(value)) + "]"
    if part.kind is int:
        return str(value)
    unit = f" {part.unit}" if part.unit else ""
    return f"{value:.4g}{unit}"


def _margin(part: Part, observed: str = "measured") -> str:
    if part.relative:
        return f"{part.margin:.0%} of the {'count' if observed == 'counted' else 'measurement'}"
    unit = f" {part.unit}" if part.unit else ""
    return f"{part.margin:g}{unit}"


def verdict(exercise: Exercise, guess: tuple, measured: tuple) -> tuple[float, list[str]]:
    """(the score, one line per part: what was predicted, what was measured, the credit, and why a guess is off)."""
    prediction = exercise.prediction
    lines, points = [], []
    for index, (part, g, m) in enumerate(zip(prediction.parts, guess, measured, strict=True)):
        margin = _margin(part, prediction.observed) if part.margin is not None else ""
        got = part_points(part, g, m)
        reasoned = prediction.credit is not None and got == 0 and prediction.credit(index, g, measured) == 0.5
        got = 0.5 if reasoned else got
        points.append(got)
        line = f"{part.name}: you predicted {_show(part, g)}, {prediction.observed} {_show(part, m)}"
        if reasoned:
            line += f": 🟡 further than twice {margin}, but {prediction.credit_label} (half credit)"
        elif part.margin is None:
            line += ": ✅ right" if got == 1 else f": ❌ not what was {prediction.observed}"
        elif got == 1:
            line += f": ✅ within {margin} (full credit)"
        elif got == 0.5:
            line += f": 🟡 within twice {margin} (half credit)"
        else:
            line += f": ❌ further than twice {margin} (no credit)"
        why = prediction.diagnose(index, g, measured) if prediction.diagnose is not None and got < 1 else ""
        why = why.strip().rstrip(".")
        lines.append(line + (f". {why[0].upper()}{why[1:]}." if why else ""))
    return sum(points) / len(points), lines


def judge(exercise: Exercise, value, hint) -> CheckResult:
    """The result for what the learner's prediction function returned (``value``), against the course's
    measurement: made here, only for a valid prediction."""
    prediction = exercise.prediction
    guess = parse(prediction, value)
    if guess is None:
        return CheckResult(
            exercise.name,
            FAILED,
            f"`{exercise.name}` should return {expected_form(prediction)}, got {_describe(value)}. The measurement "
            "is shown once your prediction is one.",
            hint_text=locked_hint(exercise) or hint,  # no prediction yet: its hints would give the answer
            findings=("type",),
            points=0.0,
        )
    measured = tuple(prediction.measure())
    score, lines = verdict(exercise, guess, measured)
    status = PASSED if score == 1 else FAILED if score == 0 else PARTIAL
    if len(lines) > 1:  # a mean of halves over up to four parts is exact in three decimals: 0.875, not 7/8
        exact = abs(score * 1000 - round(score * 1000)) < 1e-9
        lines.append(f"Score: {f'{score:g}' if exact else score_text(score)} of 1.")
    details = prediction.details(measured) if prediction.details is not None else ""
    return CheckResult(
        exercise.name, status, "\n".join(lines), hint_text=hint, findings=("prediction",), points=score,
        details=details,
    )  # fmt: skip


def _describe(value) -> str:
    if value is None:
        return "None (is a `return` missing?)"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} values, {value!r}"[:200]
    return f"{value!r} (a {type(value).__name__})"[:200]


def not_attempted(exercise: Exercise) -> CheckResult:
    return CheckResult(
        exercise.name,
        NOT_ATTEMPTED,
        f"`{exercise.name}` still raises NotImplementedError. Write your prediction ({exercise.prediction.question}) "
        "in it, before you measure anything, run that cell, then this check: it shows the measurement once you "
        "have predicted.",
        points=0.0,
    )


# --------------------------------------------------------------------------------------------
# In the learner's kernel: the first valid prediction is recorded
# --------------------------------------------------------------------------------------------


def session_prediction(exercise: Exercise, fn, time_limit: float = TIME_LIMIT):
    """What the check cell of a prediction scores: ``(caller, note)``. ``caller`` is for :func:`diagnosis.run_check`
    (which the package's ``check`` then runs): the learner's one call, its value replaced by the first valid
    prediction this session recorded (recorded now, if this is the first); None when ``fn`` is not callable (run_check
    says so). ``note`` is a sentence to append to the message when the prediction changed after the measurement was
    shown, else "". (This module never imports ``diagnosis``, which judges a prediction with :func:`judge`.)"""
    recorded = _RECORDED.get(exercise.name)
    note = ""
    call = call_learner(fn, (), time_limit, forbidden=exercise.forbidden) if callable(fn) else None
    if call is not None and not (call.error_name or call.timed_out or call.crashed or call.used_reference):
        guess = parse(exercise.prediction, call.value)
        if guess is not None and recorded is None:
            _RECORDED[exercise.name] = recorded = guess
        elif guess is not None and guess != recorded:
            shown = ", ".join(_show(p, v) for p, v in zip(exercise.prediction.parts, guess, strict=True))
            value = "count" if exercise.prediction.observed == "counted" else "measurement"
            note = f"Your prediction is now {shown}, changed after the {value} was shown"
        elif guess is None and recorded is not None:
            note = f"Your function now returns {_describe(call.value)}, not a prediction"
        if recorded is not None:
            call.value = recorded  # what is scored: the prediction made before the measurement was shown
    caller = (lambda number, case, limit: (call, ())) if call is not None else None
    if note:
        note = f"({note}: the first prediction of this session, made before, is the one scored here.)"
    return caller, note


def locked_hint(exercise: Exercise) -> str | None:
    """What ``hint(name)`` says for a graded prediction before the first prediction of the session is recorded (its
    hints would give the answer away), or None when its hints are open: not a prediction, or one already recorded."""
    if exercise.prediction is None or exercise.name in _RECORDED:
        return None
    return (
        f"Predict first. `{exercise.name}` is a graded prediction ({exercise.prediction.question}), and its hints "
        f"lead to the answer, so they open once your first prediction is recorded: write your number(s) in "
        f"`{exercise.name}`, run its cell, then its check, and ask again."
    )


def recorded_prediction(name: str) -> tuple | None:
    """The prediction recorded for exercise ``name`` in this session (the first valid one its check saw), or None
    before it: a notebook cell that shows more of the measurement can wait for it."""
    return _RECORDED.get(name)


def forget_predictions() -> None:
    """Forget every recorded prediction (for tests)."""
    _RECORDED.clear()
