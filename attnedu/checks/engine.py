"""The check engine: run a learner's function safely, compare it with a reference, and
name the likely bug. Exercises are data (:class:`Exercise`); each lesson's live in
``lessonNN.py`` beside this file.
"""

from __future__ import annotations

import contextlib
import copy
import io
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..masks import padding_mask

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not_attempted"
ICONS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳"}
TIME_LIMIT = 5.0  # seconds per call of the learner's function
MAX_PRINTED = 500  # characters of the learner's printing kept in a result

# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hint:
    """A hint for one exercise; renders as Markdown in JupyterLab."""

    exercise: str
    text: str

    def _repr_markdown_(self) -> str:
        return f"💡 **Hint for `{self.exercise}`:** {self.text}"

    def __repr__(self) -> str:
        return f"💡 Hint for {self.exercise}: {self.text}"


@dataclass(frozen=True)
class CheckResult:
    """What a check found. ``status`` is "passed", "failed" or "not_attempted".

    Renders as ✅ / ❌ / ⏳ in JupyterLab (``_repr_markdown_``) and as plain text elsewhere.
    """

    exercise: str
    status: str
    message: str
    where: str = ""  # the test case that failed, e.g. "test case 2 of 3 (a fully masked row)"
    printed: str = ""  # what the learner's function printed during the check (truncated)
    hint_text: str = field(default="", repr=False)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def score(self) -> int:
        return int(self.passed)

    def hint(self) -> Hint:
        return Hint(self.exercise, self.hint_text or "no hint is available for this exercise.")

    def to_dict(self) -> dict:
        message = f"on {self.where}: {self.message}" if self.where else self.message
        return {"exercise": self.exercise, "status": self.status, "score": self.score, "message": message}

    def _headline(self) -> str:
        return _LABELS[self.status] + (f" on {self.where}" if self.where else "")

    def _footer(self) -> str:
        if self.status == FAILED:
            return f'Stuck? `hint("{self.exercise}")` or `.hint()` on this result.'
        return ""

    def _repr_markdown_(self) -> str:
        text = f"{ICONS[self.status]} **`{self.exercise}`** {self._headline()}: {self.message}"
        if self.printed:
            text += f"\n\nYour function printed:\n\n```\n{self.printed}\n```"
        if self._footer():
            text += f"\n\n{self._footer()}"
        return text

    def __repr__(self) -> str:
        text = f"{ICONS[self.status]} {self.exercise} {self._headline()}: {self.message}"
        if self.printed:
            text += "\nYour function printed:\n" + "\n".join("    " + line for line in self.printed.splitlines())
        if self._footer():
            text += "\n" + self._footer().replace("`", "")
        return text


_LABELS = {PASSED: "passed", FAILED: "failed", NOT_ATTEMPTED: "not attempted yet"}

# --------------------------------------------------------------------------------------------
# Running the learner's code: copies of the inputs, captured printing, a time limit
# --------------------------------------------------------------------------------------------


class _Timeout(BaseException):
    """Raised by the alarm inside the learner's code (a BaseException, so `except Exception` misses it)."""


class _BoundedText(io.TextIOBase):
    """A stdout/stderr stand-in that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.kept, self.dropped = limit, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        room = max(self.limit - self.kept, 0)
        if room:
            self.parts.append(text[:room])
            self.kept += min(len(text), room)
        self.dropped += max(len(text) - room, 0)
        return len(text)

    def getvalue(self) -> str:
        text = "".join(self.parts).rstrip("\n")
        if self.dropped:
            text += f"\n... ({self.dropped} more characters not shown)"
        return text


@dataclass
class _Call:
    value: object = None
    error: BaseException | None = None
    timed_out: bool = False
    printed: str = ""


def _call_learner(fn: Callable, args: tuple, time_limit: float) -> _Call:
    """Call ``fn(*args)`` without letting it crash, flood the output or hang the caller."""
    call = _Call()
    sink = _BoundedText(MAX_PRINTED)

    def run() -> None:
        try:
            with torch.no_grad():
                call.value = fn(*args)
        except (_Timeout, KeyboardInterrupt):
            raise
        except BaseException as err:  # SystemExit too: a check must not end the kernel
            call.error = err

    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
            call.timed_out = _run_with_alarm(run, time_limit)
        else:
            worker = threading.Thread(target=run, daemon=True, name="attnedu-check")
            worker.start()
            worker.join(time_limit)
            call.timed_out = worker.is_alive()  # it keeps running: threads cannot be stopped
    call.printed = sink.getvalue()
    return call


def _run_with_alarm(run: Callable[[], None], seconds: float) -> bool:
    """Run ``run()`` under a SIGALRM time limit; True if it was cut off. Restores any previous timer."""
    state = {"active": True, "fired": False}

    def on_alarm(signum, frame):
        if state["active"]:
            state["fired"] = True
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # fire again if the learner's code swallows this one
            raise _Timeout

    started = time.monotonic()
    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        try:
            run()
        finally:
            state["active"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        state["active"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            remaining = max(previous_delay - (time.monotonic() - started), 0.001)
            signal.setitimer(signal.ITIMER_REAL, remaining, previous_interval)
    return state["fired"]


def _unchanged(original, copied) -> bool:
    """True if the copy handed to the learner still equals the original (values, shape, dtype)."""
    if isinstance(original, torch.Tensor):
        return (
            isinstance(copied, torch.Tensor)
            and copied.shape == original.shape
            and copied.dtype == original.dtype
            and torch.equal(copied.nan_to_num(), original.nan_to_num())
        )
    if isinstance(original, nn.Module):
        before, after = original.state_dict(), copied.state_dict()
        return before.keys() == after.keys() and all(_unchanged(before[k], after[k]) for k in before)
    return original == copied


def _learner_line(err: BaseException, fn: Callable) -> str:
    """The line of the learner's own code where ``err`` was raised, if it was raised there."""
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == filename and f.line]
    return f" (in the line `{frames[-1].line.strip()}`)" if frames else ""


# --------------------------------------------------------------------------------------------
# Comparing outputs
# --------------------------------------------------------------------------------------------

ATOL, RTOL = 1e-5, 1e-4


def _same(expected, got) -> bool:
    """Same structure, dtype, shape and values (floats within tolerance, NaN equal to NaN)."""
    if isinstance(expected, tuple):
        return (
            isinstance(got, (tuple, list))
            and len(got) == len(expected)
            and all(_same(e, g) for e, g in zip(expected, got, strict=True))
        )
    if not isinstance(got, torch.Tensor) or got.dtype != expected.dtype or got.shape != expected.shape:
        return False
    if expected.is_floating_point():
        return torch.allclose(got, expected, atol=ATOL, rtol=RTOL, equal_nan=True)
    return torch.equal(got, expected)


def _describe(x) -> str:
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
            f"has its dimensions in the wrong order (transposed?): expected {wanted}, got {have}. "
            "Check which axis each index refers to."
        )
    if len(have) == len(want) + 1 and 1 in have:
        return (
            f"has an extra dimension of size 1: expected {wanted}, got {have}. "
            "Remove it with `.squeeze(dim)` (or index with an integer instead of a slice)."
        )
    return f"has the wrong shape: expected {wanted}, got {have}."


def _first_difference(expected: torch.Tensor, got: torch.Tensor) -> str:
    if expected.is_floating_point():
        close = torch.isclose(got, expected, atol=ATOL, rtol=RTOL, equal_nan=True)
    else:
        close = got == expected
    wrong = (~close).nonzero()
    index = tuple(wrong[0].tolist())

    def show(x: torch.Tensor) -> str:
        value = x[index].item()
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return (
        f"{len(wrong)} of {expected.numel()} entries differ from the reference; the first at index "
        f"{list(index)}: expected {show(expected)}, got {show(got)}."
    )


def _output_problem(expected: torch.Tensor, got, names: tuple[str, ...], what: str) -> str:
    """Why ``got`` is not ``expected``: type, dtype, shape, NaN or values (in that order)."""
    if not isinstance(got, torch.Tensor):
        return f"{what} should be a torch.Tensor of shape {_shape_text(names, expected.shape)}, got {_describe(got)}."
    if got.dtype != expected.dtype:
        return f"{what} has dtype {got.dtype}, expected {expected.dtype}. {_DTYPE_ADVICE.get(expected.dtype, '')}"
    if got.shape != expected.shape:
        return f"{what} {_shape_problem(expected, got, names)}"
    if got.is_floating_point() and bool(torch.isnan(got).any()) and not bool(torch.isnan(expected).any()):
        first = torch.isnan(got).nonzero()[0].tolist()
        return (
            f"{what} contains NaN (first at index {first}) where the reference has numbers. NaN comes from "
            "0/0, inf - inf, or a softmax over a row that is entirely -inf."
        )
    return f"{what}: {_first_difference(expected, got)}"


_DTYPE_ADVICE = {
    torch.bool: "A mask is a bool tensor: a comparison such as `<` gives one directly; do not convert it.",
    torch.long: "Token ids are integers (torch.long): build the output with `torch.zeros_like(src)` or `src.clone()`.",
    torch.float32: "Keep the inputs' float32 dtype: do not create tensors with dtype=torch.float64.",
}

# --------------------------------------------------------------------------------------------
# The check engine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One input to an exercise: ``args`` are passed positionally; ``description`` names it in messages."""

    description: str
    args: tuple


@dataclass(frozen=True)
class Variant:
    """A known-wrong version of the reference; an output equal to its output gets ``diagnosis``."""

    diagnosis: str
    fn: Callable


@dataclass(frozen=True)
class Exercise:
    """Everything a check needs. ``returns`` names the output's dimensions, one tuple per output."""

    name: str
    lesson: str
    params: tuple[str, ...]
    returns: tuple[tuple[str, ...], ...]
    reference: Callable
    make_cases: Callable[[], list[Case]]
    variants: tuple[Variant, ...]
    hint: str
    output_names: tuple[str, ...] = ("the output",)
    properties: Callable[[tuple, object], str | None] | None = None  # extra learner-facing checks


_UNFINISHED = object()  # what _diagnose returns for a stub


def run_check(exercise: Exercise, fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """Run ``fn`` on every case of ``exercise``; never raises (a failure is a result)."""

    def result(status: str, message: str, where: str = "", printed: str = "") -> CheckResult:
        return CheckResult(exercise.name, status, message, where, printed, exercise.hint)

    if not callable(fn):
        return result(
            FAILED,
            f"check_{exercise.name} needs your function itself, `check_{exercise.name}({exercise.name})`, "
            f"not the result of calling it; got {_describe(fn)}.",
        )
    printed = ""  # the first thing the learner's function printed, if anything
    try:
        cases = exercise.make_cases()
        for number, case in enumerate(cases, start=1):
            where = f"test case {number} of {len(cases)} ({case.description})"
            learner_args = copy.deepcopy(case.args)
            call = _call_learner(fn, learner_args, time_limit)
            printed = printed or call.printed
            problem = _diagnose(exercise, fn, case, learner_args, call, time_limit)
            if problem is _UNFINISHED:
                return result(
                    NOT_ATTEMPTED,
                    f"`{exercise.name}` still raises NotImplementedError. Replace `# YOUR CODE HERE` and "
                    "`raise NotImplementedError()` with your code, run that cell, then run this check again.",
                )
            if problem:
                return result(FAILED, problem, where, printed)
        return result(PASSED, f"all {len(cases)} test cases match the reference.", printed=printed)
    except Exception as err:  # a bug in the check itself must not stop the notebook either
        return result(FAILED, f"the check itself failed ({type(err).__name__}: {err}); please report this.")


def _diagnose(exercise: Exercise, fn: Callable, case: Case, learner_args: tuple, call: _Call, time_limit: float):
    """None if the learner's output is right, _UNFINISHED for NotImplementedError, else a message naming the bug."""
    if call.timed_out:
        return (
            f"your function did not finish within {time_limit:g} s. Is there a loop that never ends, "
            "for example a `while` whose condition never changes?"
        )
    if isinstance(call.error, NotImplementedError):
        return _UNFINISHED
    if call.error is not None:
        return f"your function raised {type(call.error).__name__}{_learner_line(call.error, fn)}: {call.error}"
    for name, original, copied in zip(exercise.params, case.args, learner_args, strict=True):
        if not _unchanged(original, copied):
            return (
                f"your function modified its input `{name}` in place (with `-=`, `+=`, `x[...] = ...` "
                "or a method ending in `_` such as `masked_fill_`). The caller still needs its inputs: work on "
                "a copy (`.clone()`) or use the out-of-place version (`masked_fill`)."
            )
    with torch.no_grad():
        expected = exercise.reference(*copy.deepcopy(case.args))
    got = call.value
    if _same(expected, got):
        return None
    for variant in exercise.variants:
        try:
            with torch.no_grad():
                wrong = variant.fn(*copy.deepcopy(case.args))
        except Exception:
            continue  # this mistake cannot even run on this case
        if _same(wrong, got):
            return variant.diagnosis
    single = not isinstance(expected, tuple)
    expected_parts = (expected,) if single else expected
    if single:
        got_parts = (got,)
    elif not isinstance(got, (tuple, list)) or len(got) != len(expected):
        names = ", ".join(exercise.output_names)
        return f"your function should return {len(expected)} values ({names}), got {_describe(got)}."
    else:
        got_parts = tuple(got)
    problems = []
    for output_name, names, e, g in zip(
        exercise.output_names, exercise.returns, expected_parts, got_parts, strict=True
    ):
        if not _same(e, g):
            what = "your output" if single else f"`{output_name}`"
            problems.append(_output_problem(e, g, names, what))
    if exercise.properties is not None:
        broken = exercise.properties(case.args, got)
        if broken:
            problems.insert(0, broken)
    return " ".join(problems)


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def _mask(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def _tokens(g: torch.Generator, lengths: list[int], src_len: int) -> torch.Tensor:
    """(batch, src_len) token ids in 3..29 with padding id 0 after each length."""
    ids = torch.randint(3, 30, (len(lengths), src_len), generator=g)
    return ids.masked_fill(~padding_mask(torch.tensor(lengths), src_len), 0)
