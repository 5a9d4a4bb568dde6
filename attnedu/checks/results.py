"""What a check found, as the learner sees it: a :class:`CheckResult` (passed, failed with a diagnosis, or not
attempted) that renders as ✅ / ❌ / ⏳ in JupyterLab, and a :class:`Hint`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not_attempted"
ICONS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳"}
TIMEOUT, CRASHED = "timeout", "crashed"  # CheckResult.reason for a function that hung or killed its process


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
    reason: str = field(default="", repr=False)  # TIMEOUT or CRASHED when that is why it failed, else ""
    # the kinds of finding its message states: "variant" (a known-wrong version named), "where" (where the values
    # differ), "cases" (on which kinds of test case), "nonfinite", "type", "dtype", "shape", "property", "error",
    # "inplace", "timeout", "crashed", "also" (a problem on a later case); "count" alone: only how many differ
    findings: tuple[str, ...] = field(default=(), repr=False)

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
