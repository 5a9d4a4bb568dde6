"""Run your own exercise notebooks in work/ as tests, and see where you stand. What `make check` runs.

    python tools/check.py              # every notebook in work/
    python tools/check.py 04           # work/04_*.ipynb only (make check LESSON=04)
    python tools/check.py 02 04 --jobs 1

Each notebook runs top to bottom in a fresh kernel under nbval, lax (``pytest --nbval-lax``): a cell that
raises an error fails, outputs are not compared. Every exercise check the notebook calls records its
result (``$ATTNEDU_CHECK_RECORD``, see ``attnedu.checks``), and the end is a summary per exercise:
passed, failed with the diagnosis, not attempted, or not checked (its check cell never ran); a graded prediction
(``attnedu.checks.prediction``) may also be partly right, with half credit. Nothing is written into the notebooks.

A missing work/ is made first (as `make lab` does: a copy of each exercise, never overwriting one), so
this also runs on a fresh clone, where everything is "not attempted".

Exit status: 0 when every notebook ran without a cell error and no exercise failed or was only partly right (not
attempted is fine: a CI can run this from the first day); 1 otherwise; 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import EXERCISES, ROOT, WORK, edited_exercises, prepare_work  # noqa: E402

RECORD_ENV = "ATTNEDU_CHECK_RECORD"  # attnedu.checks.RECORD_ENV (not imported here: that would import torch)
# attnedu.checks.results.score_text, read from its file (the module needs nothing but the standard library) in the
# attnedu the notebooks import: find_spec finds the package without importing it
_package = importlib.util.find_spec("attnedu")
_folder = Path(_package.submodule_search_locations[0]) if _package else ROOT / "attnedu"
_spec = importlib.util.spec_from_file_location("_attnedu_results", _folder / "checks" / "results.py")
_results = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_results)
score_text = _results.score_text
CELL_TIMEOUT = 300  # seconds per cell: a loop that never ends fails its cell instead of hanging the run
ICONS = {"passed": "✅", "partial": "🟡", "failed": "❌", "not_attempted": "⏳", "not_checked": "➖"}
LABELS = {
    "passed": "passed",
    "partial": "partly right",
    "failed": "failed",
    "not_attempted": "not attempted",
    "not_checked": "not checked: its check cell did not run",
}


@dataclass
class Run:
    """One notebook's nbval run."""

    notebook: Path
    cells: int = 0
    failed_cells: list[str] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    returncode: int = 0
    records: list[dict] = field(default_factory=list)


def select(work: Path, lessons: list[str]) -> list[Path]:
    """The notebooks of ``work`` to run: all, or those of ``lessons``: "04" (04_*), "08" (08_*, 08a_*, 08b_*: a lesson
    split in two), "08a" (08a_*) or a name's start ("04_qu...")."""
    notebooks = sorted(p for p in work.glob("*.ipynb") if p.is_file())
    if not lessons:
        return notebooks
    chosen = []
    for lesson in lessons:
        prefix = Path(lesson).name.removesuffix(".ipynb")
        if "_" in prefix:
            matches = [p for p in notebooks if p.name.startswith(prefix)]
        else:  # a number, with or without its letter: the number alone also takes the lessons split from it
            pattern = re.escape(prefix) + ("" if prefix[-1:].isalpha() else "[a-z]?") + "_"
            matches = [p for p in notebooks if re.match(pattern, p.name)]
        if not matches:
            names = ", ".join(p.name for p in notebooks) or "none"
            raise SystemExit(f"error: no notebook in {work}/ for lesson {lesson!r} (there: {names})")
        chosen += [p for p in matches if p not in chosen]
    return chosen


def run_notebook(notebook: Path, cell_timeout: int) -> Run:
    """nbval (lax) over one notebook, its checks recording their results to a file of their own."""
    run = Run(notebook)
    with tempfile.TemporaryDirectory(prefix="attnedu-check-") as tmp:
        record, junit = Path(tmp) / "record.jsonl", Path(tmp) / "junit.xml"
        command = [
            sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
            f"--nbval-cell-timeout={cell_timeout}", "--noconftest", "-p", "no:cacheprovider",
            "-p", "attnedu.nbval_plugin",  # a kernel that dies of a taken port while starting is started again
            "-q", "--tb=short", "--color=no", "-p", "no:warnings", f"--junitxml={junit}", "-o", "junit_family=xunit1",
            "--rootdir", str(ROOT), str(notebook),
        ]  # fmt: skip
        env = {**os.environ, RECORD_ENV: str(record), "ATTNEDU_PROGRESS": "0"}
        start = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        run.seconds = time.monotonic() - start
        run.returncode, run.output = done.returncode, done.stdout + done.stderr
        try:
            for case in ET.parse(junit).getroot().iter("testcase"):
                run.cells += 1
                if case.find("failure") is not None or case.find("error") is not None:
                    run.failed_cells.append(case.get("name", "?"))
        except (OSError, ET.ParseError):
            pass
        if record.exists():
            for line in record.read_text(encoding="utf-8").splitlines():
                try:
                    run.records.append(json.loads(line))
                except ValueError:
                    pass
    return run


def lesson_of(notebook: Path, lessons: dict[str, list[str]]) -> str | None:
    """The lesson a notebook belongs to: its metadata, else its name's "NN_" prefix."""
    try:
        meta = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {}).get("attnedu", {})
        if meta.get("lesson") in lessons:
            return meta["lesson"]
    except (OSError, ValueError, AttributeError):
        pass
    matches = [name for name in lessons if notebook.name.startswith(name.split("_")[0] + "_")]
    return matches[0] if len(matches) == 1 else None


def standing(run: Run, lessons: dict[str, list[str]]) -> list[tuple[str, str, str, float]]:
    """(exercise, status, message, score) for each exercise of the notebook's lesson, then any other it checked."""
    latest = latest_records(run)
    lesson = lesson_of(run.notebook, lessons)
    names = list(lessons.get(lesson, [])) + [n for n in latest if n not in lessons.get(lesson, [])]
    rows = []
    for name in names:
        record = latest.get(name)
        if record is None:
            rows.append((name, "not_checked", "", 0.0))
            continue
        status = record.get("status") if record.get("status") in ICONS else "failed"
        message = str(record.get("message", "")) if status in ("failed", "partial") else ""
        score = record.get("score")
        score = float(score) if isinstance(score, (int, float)) and 0 <= score <= 1 else float(status == "passed")
        rows.append((name, status, message, score))
    return rows


def latest_records(run: Run) -> dict[str, dict]:
    """Each exercise's record from the run, by name: a check called twice counts by its last result."""
    latest = {}
    for record in run.records:
        if isinstance(record, dict) and isinstance(record.get("exercise"), str):
            latest[record["exercise"]] = record
    return latest


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def verdict(run: Run) -> str:
    """One notebook's line while the runs go on: "ok" only when no cell raised and no exercise it checked failed or
    was only partly right; else what went wrong, then what its checks found (the summary at the end names them)."""
    if not run.cells:
        return "nbval could not run it"
    statuses = [
        record.get("status") if record.get("status") in ICONS else "failed" for record in latest_records(run).values()
    ]
    counts = {status: statuses.count(status) for status in ICONS}
    wrong = []
    if run.failed_cells:
        wrong.append(f"{_count(len(run.failed_cells), 'cell')} raised an error")
    if counts["failed"]:
        wrong.append(f"{_count(counts['failed'], 'exercise')} failed")
    if counts["partial"]:
        wrong.append(f"{_count(counts['partial'], 'prediction')} partly right")
    found = [f"{counts[s]} {LABELS[s]}" for s in ("passed", "not_attempted") if counts[s]]
    if not found:
        return ", ".join(wrong) or "ok"
    return f"{', '.join(wrong)}; {', '.join(found)}" if wrong else f"ok: {', '.join(found)}"


def report(runs: list[Run], lessons: dict[str, list[str]], width: int = 100) -> tuple[str, bool]:
    """The summary text, and whether everything is fine (no cell error, no failed exercise)."""
    lines, counts, ok = ["", "=" * 30 + " where you stand " + "=" * 30], dict.fromkeys(ICONS, 0), True
    scores: list[float] = []
    stuck: list[str] = []  # the exercises failed or partly right, for the hint line at the end
    for run in runs:
        errors = len(run.failed_cells)
        if errors or run.cells == 0:
            ok = False
        cells = f"{run.cells} cells ran, {errors} raised an error" if run.cells else "nbval could not run it"
        lines.append(f"{WORK}/{run.notebook.name} ({cells}; {run.seconds:.0f} s)")
        if errors:
            lines.append(f"    cells with an error: {', '.join(run.failed_cells)} (details above)")
        for name, status, message, score in standing(run, lessons):
            counts[status] += 1
            scores.append(score)
            ok = ok and status not in ("failed", "partial")
            if status in ("failed", "partial") and name not in stuck:
                stuck.append(name)
            credit = f" (score {score_text(score)})" if status == "partial" else ""
            lines.append(f"  {ICONS[status]} {name}: {LABELS[status]}{credit}")
            for line in message.splitlines():
                lines += textwrap.wrap(line, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    total = sum(counts.values())
    partly = f"{counts['partial']} partly right, " if counts["partial"] else ""
    lines.append(
        f"{counts['passed']} passed, {partly}{counts['failed']} failed, {counts['not_attempted']} not attempted, "
        f"{counts['not_checked']} not checked, of {total} exercises (score {score_text(sum(scores))} of {total})"
    )
    if stuck:
        calls = ", ".join(f'`hint("{name}")`' for name in stuck)
        where, verb = (
            ("its notebook", "gives a hint") if len(stuck) == 1 else ("each exercise's notebook", "give hints")
        )
        lines.append(f"Stuck? In {where}, {calls} {verb}.")
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lessons to check, e.g. 04 (default: every notebook in work/)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="notebooks run at once")
    parser.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT, help="seconds per cell (default 300)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.cell_timeout < 1:
        print("error: --jobs and --cell-timeout must be positive", file=sys.stderr)
        return 2
    for line in prepare_work(ROOT):
        print(line)
    work = ROOT / WORK
    try:
        notebooks = select(work, args.lessons)
    except SystemExit as err:
        print(err, file=sys.stderr)
        return 2
    if not notebooks:
        print(f"no notebooks in {work}/ (and none in {ROOT / EXERCISES}/ to copy there)", file=sys.stderr)
        return 2
    for name in sorted(edited_exercises(ROOT) & {p.name for p in notebooks}):
        print(
            f"note: {EXERCISES}/{name} has changes of yours, but this checks {WORK}/{name}. To check that work, "
            f"copy it over the copy in {WORK}/ (cp {EXERCISES}/{name} {WORK}/{name}) if that one has nothing of yours."
        )
    at_once = min(args.jobs, len(notebooks))
    what = "1 notebook" if len(notebooks) == 1 else f"{len(notebooks)} notebooks, {at_once} at a time"
    print(f"running {what} from {WORK}/ under nbval (lax) ...", flush=True)
    runs = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for run in pool.map(lambda nb: run_notebook(nb, args.cell_timeout), notebooks):
            runs.append(run)
            print(f"  {WORK}/{run.notebook.name}: {verdict(run)} ({run.seconds:.0f} s)", flush=True)
            if run.failed_cells or not run.cells:
                print(textwrap.indent(run.output.strip()[-6000:], "    | "))
    from attnedu.checks import GRADED_LESSONS  # after the runs: torch loads while nothing else waits

    text, ok = report(runs, GRADED_LESSONS)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
