"""Batch grading: run every submitted notebook in a fresh kernel and score its exercises.

    python -m attnedu.grade SUBMISSIONS_DIR --out scores.csv [--timeout S] [--jobs N] [--time-limit S]

For each ``SUBMISSIONS_DIR/*.ipynb``:

1. The notebook is read into memory (the file is never modified) and a grader cell is appended.
2. It runs top to bottom in a fresh ``python3`` kernel (nbclient, ``allow_errors=True``: a cell that
   raises does not stop the rest, as "Run All" in JupyterLab), with a temporary folder as its
   working directory. The learner's cells share a budget of ``--timeout`` seconds; past it the
   running cell is interrupted, later cells are skipped, and the grader cell still runs.
3. The grader cell calls ``attnedu.checks.grade_namespace(globals(), lesson)``: every check of the
   notebook's lesson (``metadata.attnedu.lesson``, else the file name's ``NN_`` prefix) runs on the
   function of the same name in the kernel, and one JSON line is printed.
4. ``--out`` gets one row per submission: per exercise a score (0/1) and a status (passed, failed,
   not_attempted; not_graded when the notebook could not be graded), the total, and the
   notebook's own status (ok, cell errors, timeout, kernel died, grader failed, unreadable).

A progress bar (off with ``ATTNEDU_PROGRESS=0``) and a summary table go to the terminal.

Limit: the grader cell runs in the learner's kernel, after the learner's code, so a submission can
redefine or monkeypatch what it uses (``attnedu.checks``, ``print``, ``json``). The scores are
as trustworthy as the submissions: grade untrusted notebooks in a sandbox (a container or a
throwaway user, without network).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import multiprocessing
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from .checks import LESSONS
from .runtime import progress

MARKER = "ATTNEDU-GRADE "
NOT_GRADED = "not_graded"
KERNEL_START_SECONDS = 60  # kernel start-up, separate from the learner's budget
GRADER_SECONDS = 60  # the grader cell, on top of the checks' own time limits
INTERRUPT_GRACE_SECONDS = 10  # how long an interrupted cell may take to stop before the kernel is given up

GRADER_SOURCE = """\
import json as _attnedu_json
from attnedu.checks import grade_namespace as _attnedu_grade_namespace
print({marker!r} + _attnedu_json.dumps(_attnedu_grade_namespace(globals(), {lesson!r}, {time_limit!r})))"""


@dataclass
class Graded:
    """The outcome for one submission. ``results`` are CheckResult.to_dict()s, empty if not graded."""

    submission: str
    lesson: str | None
    notebook: str = "ok"  # ok, cell errors, timeout, kernel died, grader failed, unreadable
    notes: list[str] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def lesson_of(nb: nbformat.NotebookNode, filename: str, lessons=LESSONS) -> str | None:
    """The lesson a notebook belongs to: its metadata, else a file name starting with a lesson's 'NN_'."""
    lesson = nb.metadata.get("attnedu", {}).get("lesson")
    if lesson in lessons:
        return lesson
    matches = [name for name in lessons if filename.startswith(name.split("_")[0] + "_")]
    return matches[0] if len(matches) == 1 else None


def grade_notebook(path: Path, timeout: float, time_limit: float) -> Graded:
    """Run one submission with a grader cell appended and collect its results (never raises)."""
    start = time.monotonic()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # not JSON, not a notebook
        return Graded(path.name, None, "unreadable", [f"{type(err).__name__}: {err}"])
    graded = Graded(path.name, lesson_of(nb, path.name))
    grader = nbformat.v4.new_code_cell(GRADER_SOURCE.format(marker=MARKER, lesson=graded.lesson, time_limit=time_limit))
    nb.cells.append(grader)
    try:
        with tempfile.TemporaryDirectory(prefix="attnedu-grade-") as workdir:
            n_checks = len(LESSONS[graded.lesson]) if graded.lesson else sum(map(len, LESSONS.values()))
            grader_timeout = GRADER_SECONDS + n_checks * time_limit  # a check stops at its first timeout
            asyncio.run(_execute(nb, Path(workdir), timeout, grader_timeout, graded))
    except Exception as err:  # the kernel would not start, or nbclient failed in a way we did not foresee
        graded.notebook, graded.results = "grader failed", []
        graded.notes.append(f"{type(err).__name__}: {err}")
    graded.seconds = time.monotonic() - start
    if graded.notebook in ("ok", "cell errors", "timeout") and not graded.results:
        graded.notebook = "grader failed"
        graded.notes.append(_grader_error(grader))
    return graded


async def _execute(
    nb: nbformat.NotebookNode, workdir: Path, timeout: float, grader_timeout: float, graded: Graded
) -> None:
    """Run the learner's cells within ``timeout`` seconds in all, then the grader cell (the last)."""
    client = NotebookClient(
        nb,
        kernel_name="python3",
        allow_errors=True,
        interrupt_on_timeout=True,  # a cell past its time gets KeyboardInterrupt, and the kernel lives on
        startup_timeout=KERNEL_START_SECONDS,
        shutdown_kernel="immediate",
        record_timing=False,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.reset_execution_trackers()
    # The kernel's own log (e.g. "running over TCP without encryption") would clutter the terminal.
    async with client.async_setup_kernel(stderr=subprocess.DEVNULL):
        await client.async_wait_for_reply(await ensure_async(client.kc.kernel_info()))
        deadline = time.monotonic() + timeout
        last = len(nb.cells) - 1
        for index, cell in enumerate(nb.cells):
            is_grader = index == last
            if cell.cell_type != "code" or (graded.notebook == "timeout" and not is_grader):
                continue  # after a timeout, skip to the grader cell
            budget = grader_timeout if is_grader else max(1, math.ceil(deadline - time.monotonic()))
            client.timeout = budget
            started = time.monotonic()
            try:
                # nbclient interrupts the cell after `budget` s; the extra wait covers a kernel that ignores it
                await asyncio.wait_for(
                    client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1),
                    budget + INTERRUPT_GRACE_SECONDS,
                )
            except asyncio.TimeoutError:
                graded.notebook = "timeout"
                graded.notes.append(f"cell {index} ran past its time and ignored the interrupt; not graded")
                return
            except DeadKernelError:
                graded.notebook = "kernel died"
                graded.notes.append(f"the kernel died in cell {index}")
                return
            if is_grader:
                break
            if time.monotonic() - started >= budget:
                graded.notebook = "timeout"
                graded.notes.append(f"cell {index} interrupted: the notebook ran past its {timeout:g} s budget")
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error" and graded.notebook != "timeout":
                    graded.notebook = "cell errors"
                    graded.notes.append(f"cell {index}: {output.get('ename')}: {output.get('evalue', '')[:200]}")
        graded.results = _grader_results(nb.cells[last])


def _grader_results(cell) -> list[dict]:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stdout":
            for line in output.get("text", "").splitlines():
                if line.startswith(MARKER):
                    return json.loads(line[len(MARKER) :])["results"]
    return []


def _grader_error(cell) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"grader cell: {output.get('ename')}: {output.get('evalue', '')[:200]}"
    return "the grader cell printed no result"


# --------------------------------------------------------------------------------------------
# The score table
# --------------------------------------------------------------------------------------------


def rows(graded: list[Graded], lessons: dict[str, list[str]] = LESSONS) -> tuple[list[str], list[dict]]:
    """CSV header and rows: one row per submission, a score and a status column per exercise."""
    used = {g.lesson for g in graded}
    exercises = [name for lesson, names in lessons.items() if lesson in used or None in used for name in names]
    header = ["submission", "lesson"]
    for name in exercises:
        header += [name, f"{name}_status"]
    header += ["total", "max_total", "notebook", "notes"]
    table = []
    for g in graded:
        expected = lessons.get(g.lesson, exercises) if g.lesson else exercises
        by_name = {r["exercise"]: r for r in g.results}
        row = {
            "submission": g.submission,
            "lesson": g.lesson or "",
            "notebook": g.notebook,
            "notes": "; ".join(g.notes),
        }
        for name in expected:
            result = by_name.get(name, {"score": 0, "status": NOT_GRADED})
            row[name], row[f"{name}_status"] = result["score"], result["status"]
        row["total"] = sum(int(row[name]) for name in expected)
        row["max_total"] = len(expected)
        table.append(row)
    return header, table


def write_csv(path: Path, header: list[str], table: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows(table)


def summary(graded: list[Graded], table: list[dict]) -> str:
    width = max([len("submission")] + [len(g.submission) for g in graded]) + 2
    lines = [f"{'submission':<{width}}{'lesson':<24}{'score':>7}{'seconds':>9}  notebook"]
    for g, row in zip(graded, table, strict=True):
        score = f"{row['total']}/{row['max_total']}"
        lines.append(f"{g.submission:<{width}}{g.lesson or '?':<24}{score:>7}{g.seconds:9.1f}  {g.notebook}")
    return "\n".join(lines)


def grade_all(paths: list[Path], timeout: float, time_limit: float, jobs: int = 1) -> list[Graded]:
    """Grade ``paths`` with up to ``jobs`` notebooks at a time; results in the order of ``paths``."""
    done: dict[Path, Graded] = {}
    bar = progress(len(paths), "grading")
    try:
        if jobs <= 1:
            for path in paths:
                done[path] = grade_notebook(path, timeout, time_limit)
                bar.update()
        else:
            context = multiprocessing.get_context("spawn")  # no fork of a process that may hold threads
            with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                futures = {pool.submit(grade_notebook, p, timeout, time_limit): p for p in paths}
                for future in as_completed(futures):
                    done[futures[future]] = future.result()
                    bar.update()
    finally:
        bar.close()
    return [done[p] for p in paths]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run each submitted notebook in a fresh kernel and write a score table."
    )
    parser.add_argument("submissions", type=Path, help="a folder of .ipynb files (or one notebook)")
    parser.add_argument("--out", type=Path, default=Path("scores.csv"), help="CSV file to write (default scores.csv)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for a notebook's own cells (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at the same time (default 1)")
    parser.add_argument(
        "--time-limit", type=float, default=5.0, help="seconds per call of a learner's function in a check (default 5)"
    )
    args = parser.parse_args(argv)
    if args.submissions.is_file():
        paths = [args.submissions]
    else:
        paths = sorted(args.submissions.glob("*.ipynb"))
    if not paths:
        print(f"no .ipynb files in {args.submissions}", file=sys.stderr)
        return 2
    graded = grade_all(paths, args.timeout, args.time_limit, args.jobs)
    header, table = rows(graded, LESSONS)
    write_csv(args.out, header, table)
    print(summary(graded, table))
    print(f"wrote {args.out}: {len(table)} submissions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
