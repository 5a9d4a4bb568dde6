"""What a check found, as the learner sees it: a :class:`CheckResult` (passed, failed with a diagnosis, not
attempted, or, for a graded prediction, partly right) that renders as ✅ / ❌ / ⏳ / 🟡 in JupyterLab, and a
:class:`Hint`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not_attempted"
PARTIAL = "partial"  # a graded prediction with some credit, less than full (checks.prediction)
ICONS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳", PARTIAL: "🟡"}
TIMEOUT, CRASHED = "timeout", "crashed"  # CheckResult.reason for a function that hung or killed its process


def score_text(score: float) -> str:
    """A score as a learner reads it: "1", "0", "0.5", "1.5"; a third or a sixth as "1/3", "2/3", "5/6" below 1 (a
    prediction's mean over its parts), and rounded to two decimals above it ("1.33", a sum of such scores)."""
    if score == int(score):
        return str(int(score))
    if abs(round(score, 2) - score) < 1e-9:  # a half, a quarter: its decimals are short and exact
        return f"{round(score, 2):g}"
    fraction = Fraction(score).limit_denominator(12)
    if 0 < score < 1 and abs(float(fraction) - score) < 1e-9:
        return f"{fraction.numerator}/{fraction.denominator}"
    return f"{score:.2f}"


@dataclass(frozen=True)
class Hint:
    """A hint for one exercise; renders as Markdown in JupyterLab.

    An exercise's hint is one text, or steps shown one at a time (a nudge, then the formula, then the code):
    ``step`` is then which one this is, of ``steps`` (both 0 for a single hint, which renders as it always has)."""

    exercise: str
    text: str
    step: int = 0
    steps: int = 0

    def _label(self) -> str:
        return f"Hint {self.step} of {self.steps} for" if self.step else "Hint for"

    def _next(self) -> str:
        if self.step and self.step < self.steps:
            return f'Next step: `hint("{self.exercise}", {self.step + 1})`.'
        return ""

    def _repr_markdown_(self) -> str:
        text = f"💡 **{self._label()} `{self.exercise}`:** {self.text}"
        return text + (f" {self._next()}" if self._next() else "")

    def __repr__(self) -> str:
        text = f"💡 {self._label()} {self.exercise}: {self.text}"
        return text + (f" {self._next().replace('`', '')}" if self._next() else "")


def hint_steps(hint: str | tuple[str, ...]) -> tuple[str, ...]:
    """An exercise's hint as a tuple of steps (a single text is one step)."""
    return (hint,) if isinstance(hint, str) else tuple(hint)


def make_hint(exercise: str, hint: str | tuple[str, ...], step: int | None = None) -> Hint:
    """Step ``step`` (from 1; the first if None) of an exercise's hint."""
    steps = hint_steps(hint)
    if step is None:
        step = 1
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= len(steps):
        raise ValueError(
            f"step should be a whole number from 1 to {len(steps)} (the hint for {exercise!r} has {len(steps)} "
            f"step{'s' if len(steps) > 1 else ''}), got {step!r}"
        )
    if len(steps) == 1:
        return Hint(exercise, steps[0])
    return Hint(exercise, steps[step - 1], step, len(steps))


@dataclass(frozen=True)
class CheckResult:
    """What a check found. ``status`` is "passed", "failed", "not_attempted" or, for a graded prediction,
    "partial"; ``score`` is 1 or 0, or a prediction's ``points`` (from 0 to 1).

    Renders as ✅ / ❌ / ⏳ / 🟡 in JupyterLab (``_repr_markdown_``) and as plain text elsewhere; ``message`` may hold
    several lines (a prediction's parts), and ``details`` more lines shown under it (a prediction's measurement).
    """

    exercise: str
    status: str
    message: str
    where: str = ""  # the test case that failed, e.g. "test case 2 of 3 (a fully masked row)"
    printed: str = ""  # what the learner's function printed during the check (truncated)
    hint_text: str | tuple[str, ...] = field(default="", repr=False)  # one text, or steps (see Hint)
    reason: str = field(default="", repr=False)  # TIMEOUT or CRASHED when that is why it failed, else ""
    # the kinds of finding its message states: "variant" (a known-wrong version named), "where" (where the values
    # differ), "cases" (on which kinds of test case), "scale" (one factor), "precision" (values rounded to a 16-bit
    # format), "size" (every difference small), "nonfinite", "type", "dtype", "shape", "property", "error",
    # "inplace", "timeout", "crashed", "also" (a problem on a later case); "count" alone: only how many differ
    findings: tuple[str, ...] = field(default=(), repr=False)
    points: float | None = field(default=None, repr=False)  # a graded prediction's score, from 0 to 1
    details: str = field(default="", repr=False)  # lines shown under the message (a prediction's measurement)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def score(self) -> float:
        """1 for passed, 0 otherwise; a graded prediction's points (1, 1/2, ...) where it has them."""
        return self.points if self.points is not None else int(self.passed)

    def hint(self, step: int | None = None) -> Hint:
        """The hint for this exercise: its first step, or step ``step`` (from 1) when it comes in steps."""
        return make_hint(self.exercise, self.hint_text or "no hint is available for this exercise.", step)

    def to_dict(self) -> dict:
        message = f"on {self.where}: {self.message}" if self.where else self.message
        return {"exercise": self.exercise, "status": self.status, "score": self.score, "message": message}

    def _headline(self) -> str:
        return _LABELS[self.status] + (f" on {self.where}" if self.where else "")

    def _footer(self) -> str:
        if self.status not in (FAILED, PARTIAL):
            return ""
        steps = len(hint_steps(self.hint_text)) if self.hint_text else 1
        if steps > 1:
            return (
                f'Stuck? `hint("{self.exercise}")` for a nudge, then `hint("{self.exercise}", 2)` and on to '
                f"{steps} for more (or `.hint()`, `.hint(2)`, ... on this result)."
            )
        return f'Stuck? `hint("{self.exercise}")` or `.hint()` on this result.'

    def _repr_markdown_(self) -> str:
        message = self.message.replace("\n", "  \n")  # a line of its own per line (a prediction's parts)
        text = f"{ICONS[self.status]} **`{self.exercise}`** {self._headline()}: {message}"
        if self.details:
            text += f"\n\n```text\n{self.details}\n```"
        if self.printed:
            text += f"\n\nYour function printed:\n\n```\n{self.printed}\n```"
        if self._footer():
            text += f"\n\n{self._footer()}"
        return text

    def __repr__(self) -> str:
        text = f"{ICONS[self.status]} {self.exercise} {self._headline()}: {self.message}"
        if self.details:
            text += "\n" + self.details
        if self.printed:
            text += "\nYour function printed:\n" + "\n".join("    " + line for line in self.printed.splitlines())
        if self._footer():
            text += "\n" + self._footer().replace("`", "")
        return text


_LABELS = {PASSED: "passed", FAILED: "failed", NOT_ATTEMPTED: "not attempted yet", PARTIAL: "partly right"}
