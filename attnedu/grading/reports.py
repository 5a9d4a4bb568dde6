"""What the grader writes: the score table, a per-exercise summary, a feedback file per student,
and a plot of the scores. Plain files, for a spreadsheet, a text editor or an email.

* ``scores.csv`` (``--out``): one row per submission; per exercise its score (0 or 1; a graded prediction's
  may be 1/2: ``attnedu.checks.prediction``), status and, unless it passed, the diagnosis; the total, the notebook's
  status, the seconds it took and the notes.
  Written once, at the end, to a temporary file that then replaces the old one.
* in the report folder (``--report-dir``, default ``scores_report/`` beside ``--out``):
  ``summary.md`` and ``summary.csv`` (per exercise: pass rate, how many of each status, the most
  common diagnoses), ``scores.png`` (the statuses per exercise, the totals per lesson), and
  ``feedback/<submission>.md``, one per submission, that can be sent to the student. How much it
  says is the instructor's choice (``--feedback``, :data:`FEEDBACK_LEVELS`): ``full`` (each exercise's
  status, diagnosis and every step of its hint), ``diagnosis`` (status and diagnosis, no hint: the
  default) or ``score`` (the score and each exercise's status only).
"""

from __future__ import annotations

import csv
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

from ..checks import GRADED_LESSONS
from ..checks.results import CRASHED, FAILED, ICONS, NOT_ATTEMPTED, PARTIAL, PASSED, TIMEOUT, hint_steps
from .grader import FLAGGED, NOT_GRADED, STATUSES, Graded

STATUS_ICONS = {**ICONS, TIMEOUT: "⌛", CRASHED: "💥", FLAGGED: "🚩", NOT_GRADED: "➖"}
STATUS_TEXT = {
    PASSED: "passed",
    PARTIAL: "partly right",
    FAILED: "failed",
    NOT_ATTEMPTED: "not attempted",
    TIMEOUT: "did not finish in time",
    CRASHED: "crashed its kernel",
    FLAGGED: "flagged",
    NOT_GRADED: "not graded",
}
_WHERE = re.compile(r"^on test case \d+ of \d+ \(.*?\): ")
FEEDBACK_LEVELS = ("full", "diagnosis", "score")
FEEDBACK_TEXT = {
    "full": "status, diagnosis and every hint",
    "diagnosis": "status and diagnosis, no hint",
    "score": "the score and each exercise's status only",
}


def exercise_names(graded: list[Graded], lessons: dict[str, list[str]] = GRADED_LESSONS) -> list[str]:
    used = {g.lesson for g in graded}
    names = [name for lesson, names in lessons.items() if lesson in used or None in used for name in names]
    return list(dict.fromkeys(names))  # once each: a former lesson's exercises are its successors'


def rows(graded: list[Graded], lessons: dict[str, list[str]] = GRADED_LESSONS) -> tuple[list[str], list[dict]]:
    """CSV header and rows: one row per submission; per exercise a score, a status and a message column."""
    exercises = exercise_names(graded, lessons)
    header = ["submission", "lesson"]
    for name in exercises:
        header += [name, f"{name}_status", f"{name}_message"]
    header += ["total", "max_total", "notebook", "seconds", "sandbox", "notes"]
    table = []
    for g in graded:
        expected = lessons.get(g.lesson, exercises) if g.lesson else exercises
        by_name = {r.exercise: r for r in g.results}
        row = {
            "submission": g.submission,
            "lesson": g.lesson or "",
            "notebook": g.notebook,
            "seconds": f"{g.seconds:.1f}",
            "sandbox": "bwrap" if g.isolated else "none",
            "notes": "; ".join(g.notes),
        }
        scores = []
        for name in expected:
            result = by_name.get(name)
            status = result.status if result else NOT_GRADED
            scores.append(result.score if result else 0)
            row[name], row[f"{name}_status"] = score_text(scores[-1]), status
            row[f"{name}_message"] = result.message if result else ""
        row["total"] = score_text(sum(scores))
        row["max_total"] = len(expected)
        table.append(row)
    return header, table


def score_text(score: float) -> str:
    """A score as the table writes it: "1", "0", "0.5", "3.5" (no trailing zeros)."""
    return f"{score:.4g}" if score != int(score) else str(int(score))


def _cell(value) -> str:
    """A CSV field a spreadsheet will not run as a formula (learner text can start with = + - @)."""
    text = str(value).replace("\r", " ").replace("\n", " ")
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t") and not _number(text) else text


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def write_csv(path: Path, header: list[str], table: list[dict]) -> None:
    """Write the table once: to a temporary file beside ``path``, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=header, restval="")
            writer.writeheader()
            writer.writerows([{k: _cell(v) for k, v in row.items()} for row in table])
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def score_table(graded: list[Graded], table: list[dict]) -> str:
    width = max([len("submission")] + [len(g.submission) for g in graded]) + 2
    lines = [f"{'submission':<{width}}{'lesson':<24}{'score':>7}{'seconds':>9}  notebook"]
    for g, row in zip(graded, table, strict=True):
        score = f"{row['total']}/{row['max_total']}"
        lines.append(f"{g.submission:<{width}}{g.lesson or '?':<24}{score:>7}{g.seconds:9.1f}  {g.notebook}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Per exercise
# --------------------------------------------------------------------------------------------


def diagnosis(message: str) -> str:
    """A message without its test case, so that the same bug on different cases counts once."""
    return _WHERE.sub("", message)


def exercise_summary(graded: list[Graded], top: int = 3) -> list[dict]:
    """Per exercise: submissions, pass rate, count of each status, the most common diagnoses."""
    summary = []
    for name in exercise_names(graded):
        results = [r for g in graded for r in g.results if r.exercise == name]
        if not results:
            continue
        counts = Counter(r.status for r in results)
        wrong = Counter(
            diagnosis(r.message) for r in results if r.status in (FAILED, PARTIAL, TIMEOUT, CRASHED, FLAGGED)
        )
        summary.append(
            {
                "exercise": name,
                "submissions": len(results),
                "pass_rate": counts[PASSED] / len(results),
                "mean_score": sum(r.score for r in results) / len(results),
                **{status: counts[status] for status in STATUSES},
                "common_diagnoses": wrong.most_common(top),
            }
        )
    return summary


def summary_text(summary: list[dict]) -> str:
    """The per-exercise summary for the terminal."""
    lines = [f"{'exercise':<18}{'pass rate':>10}{'mean score':>11}  " + " ".join(f"{s:>13}" for s in STATUSES)]
    for entry in summary:
        counts = " ".join(f"{entry[s]:>13}" for s in STATUSES)
        lines.append(f"{entry['exercise']:<18}{entry['pass_rate']:>10.0%}{entry['mean_score']:>11.2f}  {counts}")
        for text, count in entry["common_diagnoses"]:
            lines.append(f"    {count} x {_shorten(text, 110)}")
    return "\n".join(lines)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def write_summary(
    folder: Path, summary: list[dict], graded: list[Graded], warnings: list[str], feedback: str = "diagnosis"
) -> None:
    with open(folder / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["exercise", "submissions", "pass_rate", "mean_score", *STATUSES, "common_diagnoses"])
        for e in summary:
            common = " | ".join(f"{count} x {text}" for text, count in e["common_diagnoses"])
            rates = [f"{e['pass_rate']:.3f}", f"{e['mean_score']:.3f}"]
            row = [e["exercise"], e["submissions"], *rates, *[e[s] for s in STATUSES], common]
            writer.writerow([_cell(v) for v in row])
    lines = ["# Grading summary", ""]
    for warning in warnings:
        lines += [f"> **Warning:** {_md(warning)}", ""]
    lines += [f"{len(graded)} submissions. Per exercise:", ""]
    lines.append("| exercise | pass rate | mean score | " + " | ".join(STATUS_TEXT[s] for s in STATUSES) + " |")
    lines.append("|---|---:|---:|" + "---:|" * len(STATUSES))
    for e in summary:
        counts = " | ".join(str(e[s]) for s in STATUSES)
        lines.append(f"| `{e['exercise']}` | {e['pass_rate']:.0%} | {e['mean_score']:.2f} | {counts} |")
    lines += ["", "## Most common diagnoses", ""]
    for e in summary:
        if e["common_diagnoses"]:
            lines.append(f"**`{e['exercise']}`**")
            lines.append("")
            lines += [f"- {count} × {_md(text)}" for text, count in e["common_diagnoses"]]
            lines.append("")
    notebooks = Counter(g.notebook for g in graded)
    lines += ["## Notebooks", ""] + [f"- {status}: {count}" for status, count in notebooks.most_common()]
    lines += ["", f"Feedback files (`feedback/`) at level `{feedback}` ({FEEDBACK_TEXT[feedback]})."]
    (folder / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Feedback for one student
# --------------------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Learner-controlled text as inert Markdown: no HTML, no line breaks."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _fence(text: str) -> str:
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}\n{text}\n{ticks}"


NOTEBOOK_TEXT = {
    "ok": "ran to the end.",
    "cell errors": "ran to the end, but some cells raised an error (see the notes).",
    "timeout": "ran past its time budget; the cells after that point were not run.",
    "kernel died": "stopped: its kernel died (see the notes); the cells after that point were not run.",
    "grader failed": "could not be graded; your instructor will look at it.",
    "unreadable": "could not be read as a notebook. Was the file saved from JupyterLab?",
}


FEEDBACK_ENDS = {
    "full": "",
    "diagnosis": "",
    "score": "Your instructor sends the score only: run the checks in your notebook to see what is wrong.",
}
# At the diagnosis level, under each exercise not yet right that has a hint: the call that shows it in the learner's
# own kernel (the exercise notebooks import ``hint`` in the cells at their top), and where the file ends, how to run it.
HINT_CALL = '💡 Stuck? `hint("{name}")` shows a hint.'
HINT_STATUSES = (FAILED, PARTIAL, TIMEOUT, CRASHED, NOT_ATTEMPTED)
HINT_HOW = (
    'Each `hint("...")` above runs in a code cell of your exercise notebook, once the cells at its top have run; '
    "a hint that comes in steps says how to see the next one."
)


def feedback(g: Graded, row: dict, level: str = "diagnosis") -> str:
    """The feedback file for one submission, at ``level`` (one of :data:`FEEDBACK_LEVELS`)."""
    if level not in FEEDBACK_LEVELS:
        raise ValueError(f"feedback level {level!r}: expected one of {', '.join(FEEDBACK_LEVELS)}")
    lines = [f"# Feedback: {_md(g.submission)}", ""]
    lines.append(f"**Score: {row['total']} / {row['max_total']}**" + (f" (lesson `{g.lesson}`)" if g.lesson else ""))
    lines += ["", f"Your notebook {NOTEBOOK_TEXT.get(g.notebook, g.notebook)}", ""]
    for r in g.results:
        lines.append(f"## {STATUS_ICONS.get(r.status, '')} `{r.exercise}`: {STATUS_TEXT.get(r.status, r.status)}")
        lines.append("")
        if level == "score" and r.status != FLAGGED:  # why an exercise was flagged says nothing of the solution
            continue
        if r.message:
            lines += [_md(r.message), ""]
        wanted = r.hint and level == "full" and r.status in (FAILED, PARTIAL, TIMEOUT, CRASHED)
        steps = [step for step in hint_steps(r.hint) if step] if wanted else []
        if len(steps) == 1:
            lines += [f"💡 Hint: {_md(steps[0])}", ""]
        elif steps:
            lines += ["💡 Hints, one step at a time (read the next only if the last did not help):", ""]
            lines += [f"{number}. {_md(step)}" for number, step in enumerate(steps, start=1)] + [""]
        if level == "diagnosis" and r.hint and r.status in HINT_STATUSES:
            lines += [HINT_CALL.format(name=r.exercise), ""]
        if r.printed and level != "score":
            lines += ["Your function printed:", "", _fence(r.printed), ""]
    if g.notes and level != "score":
        lines += ["## Notes", ""] + [f"- {_md(n)}" for n in g.notes] + [""]
    if FEEDBACK_ENDS[level] and any(r.status != PASSED for r in g.results):
        lines += [FEEDBACK_ENDS[level], ""]
    if level == "diagnosis" and any(r.hint and r.status in HINT_STATUSES for r in g.results):
        lines += [HINT_HOW, ""]
    return "\n".join(lines)


def feedback_name(submission: str, taken: set[str]) -> str:
    stem = submission[: -len(".ipynb")] if submission.endswith(".ipynb") else submission
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "submission"
    name, n = f"{base}.md", 1
    while name in taken:
        n += 1
        name = f"{base}_{n}.md"
    taken.add(name)
    return name


def write_feedback(folder: Path, graded: list[Graded], table: list[dict], level: str = "diagnosis") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    for g, row in zip(graded, table, strict=True):
        (folder / feedback_name(g.submission, taken)).write_text(feedback(g, row, level), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# The plot
# --------------------------------------------------------------------------------------------

COLOURS = {
    PASSED: "#4c9a2a",
    PARTIAL: "#a7c957",
    FAILED: "#d1495b",
    NOT_ATTEMPTED: "#bbbbbb",
    TIMEOUT: "#edae49",
    CRASHED: "#8e5572",
    FLAGGED: "#00798c",
    NOT_GRADED: "#555555",
}


def plot(path: Path, summary: list[dict], graded: list[Graded], table: list[dict]) -> None:
    """Left: how many submissions got each status, per exercise. Right: the totals, per lesson."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    lessons = sorted({g.lesson for g in graded if g.lesson})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, max(3.0, 0.45 * len(summary) + 1.5)))
    names = [e["exercise"] for e in summary][::-1]
    start = [0] * len(names)
    for status in STATUSES:
        counts = [next(e[status] for e in summary if e["exercise"] == n) for n in names]
        if any(counts):
            left.barh(names, counts, left=start, color=COLOURS[status], label=STATUS_TEXT[status])
            start = [a + b for a, b in zip(start, counts, strict=True)]
    left.set_xlabel("submissions")
    left.set_title("Status per exercise")
    left.legend(fontsize=8, loc="lower right")
    for lesson in lessons:
        totals = [float(row["total"]) for g, row in zip(graded, table, strict=True) if g.lesson == lesson]
        top = len(GRADED_LESSONS[lesson])
        right.hist(totals, bins=[x / 2 - 0.25 for x in range(2 * top + 2)], alpha=0.6, label=lesson)  # halves too
    right.set_xlabel("total score")
    right.set_ylabel("submissions")
    right.set_title("Totals per lesson")
    if lessons:
        right.legend(fontsize=8)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_reports(
    folder: Path, graded: list[Graded], table: list[dict], warnings: list[str], feedback: str = "diagnosis"
) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    summary = exercise_summary(graded)
    write_summary(folder, summary, graded, warnings, feedback)
    write_feedback(folder / "feedback", graded, table, feedback)
    if summary:
        plot(folder / "scores.png", summary, graded, table)
    return summary
