"""Grade submissions: each in its own sandbox, compared and scored here, in the trusted process.

For one submission (:func:`run_submission`, in a thread; :func:`finish`, in the main thread):

1. the notebook is read from the original file's bytes (never modified) and scanned for forgeries
   (:mod:`.scan`);
2. a fresh work folder gets the notebook, ``job.json`` and each exercise's test inputs
   (``cases/NAME.pt``, written here with ``torch.save``);
3. the worker (:mod:`.worker`) runs it in the sandbox (:mod:`.sandbox`), killed from here if it runs
   past the submission's budget (:func:`budget`); the sandbox's process namespace dies with it;
4. what came back is read as untrusted data and compared with the references here, by the same
   ``run_check`` that learners use (:mod:`.results`); a flagged exercise scores 0;
5. the work folder is deleted.
"""

from __future__ import annotations

import io
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import torch

from ..checks import EXERCISES, GRADED_LESSONS
from ..checks.exercise import Case
from ..checks.results import CRASHED, FAILED, NOT_ATTEMPTED, PARTIAL, PASSED, TIMEOUT
from ..runtime import progress
from . import worker as worker_module
from .results import OUTCOMES, check_remote, load_json
from .sandbox import Limits, Sandbox
from .scan import scan
from .users import BLOCK, POOL

NOT_GRADED, FLAGGED = "not_graded", "flagged"
STATUSES = (PASSED, PARTIAL, FAILED, NOT_ATTEMPTED, TIMEOUT, CRASHED, FLAGGED, NOT_GRADED)
NOTEBOOK_STATUSES = ("ok", "cell errors", "timeout", "kernel died", "grader failed", "unreadable")
START_SECONDS = 20  # the sandbox, the worker and the first kernel
RESTART_SECONDS = 10  # each further kernel start
LOG_TAIL = 4000  # characters of the worker's own output kept for a row that needs it
PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
HOW = {  # (status, how the call ended) -> the note
    (TIMEOUT, "done"): "hung (stopped by its time limit)",
    (TIMEOUT, "child timeout"): "hung (ignored its time limit; stopped from outside)",
    (TIMEOUT, "timeout"): "hung (ignored its time limit; its kernel was stopped from outside and restarted)",
    (CRASHED, "done"): "crashed (the process running it died)",
    (CRASHED, "child crashed"): "crashed (the process running it died)",
    (CRASHED, "crashed"): "crashed (its kernel died, and was restarted)",
}


@dataclass
class ExerciseResult:
    exercise: str
    status: str  # one of STATUSES
    message: str = ""  # the diagnosis ("on test case 2 of 3 (...): the tanh is missing ...")
    hint: str | tuple[str, ...] = ""  # the exercise's hint: one text, or its steps
    printed: str = ""
    points: float | None = None  # a graded prediction's score (0, 1/2, 1, ...), unless flagged

    @property
    def score(self) -> float:
        """1 for passed, else 0; a graded prediction's points (partial credit)."""
        if self.points is not None and self.status in (PASSED, PARTIAL, FAILED):
            return self.points
        return int(self.status == PASSED)


@dataclass
class Graded:
    """The outcome for one submission."""

    submission: str
    lesson: str | None
    notebook: str = "ok"  # one of NOTEBOOK_STATUSES
    notes: list[str] = field(default_factory=list)
    results: list[ExerciseResult] = field(default_factory=list)
    seconds: float = 0.0
    budget: float = 0.0
    isolated: bool = True


@dataclass
class Timing:
    """Where a grading run's time goes (``time.monotonic()`` seconds), for the line the command prints."""

    sandboxes: list[tuple[float, float]] = field(default_factory=list)  # each sandbox's start and end
    comparing: float = 0.0  # the comparisons, in the main thread, one submission after another
    measuring: dict[str, float] = field(default_factory=dict)  # prediction exercise -> its measurement's seconds

    def text(self, started: float, ended: float, jobs: int) -> str:
        """One line: the run from ``started`` to ``ended``, before the first sandbox, while sandboxes ran, after."""
        if not self.sandboxes:
            return f"time: {ended - started:.0f} s, no sandbox run"
        first, last = min(a for a, _ in self.sandboxes), max(b for _, b in self.sandboxes)
        own = sum(b - a for a, b in self.sandboxes)
        text = (
            f"time: {ended - started:.0f} s: {first - started:.0f} s before the first sandbox, {last - first:.0f} s "
            f"of sandboxes ({own:.0f} s added up, up to {jobs} at a time), {ended - last:.0f} s after the last; "
            f"comparing {self.comparing:.0f} s"
        )
        if self.measuring:
            made = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in sorted(self.measuring.items()))
            text += f"; the course's measurements for the predictions, made beside the sandboxes: {made}"
        return text


@dataclass
class Settings:
    timeout: float = 300.0  # the notebook's own cells
    time_limit: float = 5.0  # each call of a learner's function
    jobs: int = 1
    limits: Limits = field(default_factory=Limits)


def lesson_of(nb, filename: str, lessons=GRADED_LESSONS) -> str | None:
    """The lesson a notebook belongs to: its metadata, else a file name starting with a lesson's 'NN_'."""
    meta = nb.metadata.get("attnedu", {})
    lesson = meta.get("lesson") if isinstance(meta, dict) else None
    if lesson in lessons:
        return lesson
    matches = [name for name in lessons if filename.startswith(name.split("_")[0] + "_")]
    return matches[0] if len(matches) == 1 else None


def exercises_of(lesson: str | None) -> list[str]:
    return list(GRADED_LESSONS[lesson]) if lesson else list(EXERCISES)


def budget(settings: Settings, cases: dict[str, list[Case]], exercises: list[str]) -> float:
    """Seconds one submission may take in all, past which its sandbox is killed: its cells once and, after
    restarts, once more; every call's time limit and grace; the kernel starts."""
    calls = sum(len(cases[name]) * (settings.time_limit + worker_module.CALL_GRACE) + 2 for name in exercises)
    return 2 * settings.timeout + calls + START_SECONDS + RESTART_SECONDS * len(exercises)


@dataclass
class Run:
    """A submission between its sandbox (a thread) and its comparison (the main thread)."""

    graded: Graded
    exercises: list[str] = field(default_factory=list)
    work: Path | None = None
    log: str = ""
    killed: bool = False
    scan_flags: dict[str, str] = field(default_factory=dict)


class Grader:
    def __init__(self, settings: Settings, sandbox: Sandbox, scratch: Path, uids: range = POOL[:BLOCK]):
        """``uids``: this run's own sandbox users (a block claimed with ``users.claim``), used when run as root."""
        self.settings, self.sandbox, self.scratch = settings, sandbox, scratch
        self.cases = {name: exercise.make_cases() for name, exercise in EXERCISES.items()}
        self.case_bytes = {}
        for name, cases in self.cases.items():
            buffer = io.BytesIO()
            torch.save([case.args for case in cases], buffer)
            self.case_bytes[name] = buffer.getvalue()
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.timing = Timing()
        self._measuring: set[str] = set()  # prediction exercises whose measurement has been started
        self._users = queue.Queue()  # one user per sandbox running at the same time (for a root grader)
        for uid in uids[: max(1, settings.jobs)]:
            self._users.put(uid)

    # -- in a thread ------------------------------------------------------------------------------
    def run_submission(self, path: Path, number: int, data: bytes) -> Run:
        """Everything up to the comparison, for the submission whose original bytes are ``data``."""
        start = time.monotonic()
        try:
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        except Exception as err:  # not UTF-8, not JSON, not a notebook
            graded = Graded(path.name, None, "unreadable", [f"{type(err).__name__}: {str(err)[:200]}"])
            return Run(graded)
        lesson = lesson_of(nb, path.name)
        exercises = exercises_of(lesson)
        graded = Graded(path.name, lesson, isolated=self.sandbox.isolated)
        graded.budget = budget(self.settings, self.cases, exercises)
        self.measure_beside(exercises)
        found = scan(nb, exercises)
        graded.notes += found.notes
        run = Run(graded, exercises, scan_flags=found.flagged)
        work = self.scratch / f"{number:05d}"
        run.work = work
        uid = self._users.get()
        try:
            self._prepare(work, nb, exercises, graded.budget, uid)
            began = time.monotonic()
            try:
                run.log, run.killed = self._sandboxed(work, graded.budget, uid)
            finally:
                with self._lock:
                    self.timing.sandboxes.append((began, time.monotonic()))
        except Exception as err:
            graded.notebook = "grader failed"
            graded.notes.append(f"{type(err).__name__}: {str(err)[:300]}")
        finally:
            self._users.put(uid)
        graded.seconds = time.monotonic() - start
        return run

    def measure_beside(self, exercises: list[str]) -> None:
        """Start the course's measurement of each prediction exercise among ``exercises`` (once per run) in a thread
        of its own, so that it is made while sandboxes run: made in the main thread when the first prediction is
        compared, it held up every comparison after it (lesson 11's trains two models). The comparison waits for it
        if it is not ready; if it raised here, the comparison makes it again and reports what it raises."""
        with self._lock:
            todo = [n for n in exercises if EXERCISES[n].prediction is not None and n not in self._measuring]
            self._measuring.update(todo)
        for name in todo:
            threading.Thread(target=self._measure, args=(name,), daemon=True, name=f"measure {name}").start()

    def _measure(self, name: str) -> None:
        start = time.monotonic()
        try:
            EXERCISES[name].prediction.measure()
        except Exception:
            return
        with self._lock:
            self.timing.measuring[name] = time.monotonic() - start

    def _prepare(self, work: Path, nb, exercises: list[str], seconds: float, uid: int) -> None:
        work.mkdir()
        for cell in nb.cells:
            if cell.get("cell_type") == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, work / "submission.ipynb")
        (work / "cases").mkdir()
        for name in exercises:
            (work / "cases" / f"{name}.pt").write_bytes(self.case_bytes[name])
        (work / "home").mkdir()
        _copy_font_cache(work / "home" / ".matplotlib")
        limits = self.settings.limits
        job = {
            "notebook": "submission.ipynb",
            "timeout": self.settings.timeout,
            "time_limit": self.settings.time_limit,
            "budget": max(seconds - 5, 1),  # the worker winds down before the sandbox is killed
            "exercises": [{"name": name, "cases": len(self.cases[name])} for name in exercises],
            "limits": {**limits.to_json(), "cpu_seconds": int(seconds) + 10},
        }
        (work / "job.json").write_text(json.dumps(job), encoding="utf-8")
        self.sandbox.prepare(work, uid)

    def _sandboxed(self, work: Path, seconds: float, uid: int) -> tuple[str, bool]:
        """Run the worker; kill its whole sandbox past ``seconds``. Returns (the tail of its output, killed)."""
        launch = self.sandbox.launch(work, uid=uid)
        process = launch.popen(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with self._lock:
            self._running.add(process)
        tail: deque[str] = deque(maxlen=64)
        reader = threading.Thread(target=_drain, args=(process.stdout, tail), daemon=True)
        reader.start()
        killed = False
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            killed = True
            _kill(process)
        finally:
            process.wait()
            reader.join(5)
            with self._lock:
                self._running.discard(process)
        if not self.sandbox.isolated:
            _kill(process)  # whatever is left of its process group
        return "".join(tail)[-LOG_TAIL:], killed

    def stop_all(self) -> None:
        with self._lock:
            for process in list(self._running):
                _kill(process)

    # -- in the main thread -------------------------------------------------------------------------
    def finish(self, run: Run) -> Graded:
        """Compare what came back with the references, and clean up."""
        graded = run.graded
        start = time.monotonic()
        try:
            if run.work is not None and graded.notebook != "grader failed":
                self._compare(run)
        except Exception as err:  # a bug here must cost one row, not the class
            graded.notebook = "grader failed"
            graded.notes.append(f"comparing failed: {type(err).__name__}: {str(err)[:200]}")
        finally:
            if run.work is not None:
                shutil.rmtree(run.work, ignore_errors=True)
            self.timing.comparing += time.monotonic() - start
        if graded.notebook != "unreadable":
            have = {r.exercise for r in graded.results}
            for name in run.exercises:
                if name not in have:
                    graded.results.append(ExerciseResult(name, NOT_GRADED, "the grader could not grade this exercise."))
        if not graded.isolated:
            graded.notes.append("NOT ISOLATED: graded without a sandbox")
        return graded

    def _compare(self, run: Run) -> None:
        graded, work = run.graded, run.work
        report = _valid_report(load_json(work, "report.json"))
        if report is None:
            graded.notebook = "grader failed"
            graded.notes.append("the sandbox left no report" + (f": {_last_line(run.log)}" if run.log else ""))
            return
        graded.notebook = report["notebook"]
        graded.notes += report["notes"]
        if run.killed:
            graded.notes.append(f"the sandbox ran past the budget of {graded.budget:.0f} s and was stopped")
        for name in run.exercises:
            entry = report["exercises"].get(name, {"outcome": "not_run", "note": ""})
            outcome, note = entry["outcome"], entry["note"]
            exercise = EXERCISES[name]
            result, meta, outcome = check_remote(
                exercise, self.cases[name], work, outcome, note, self.settings.time_limit
            )
            if result is None:
                note = note or ("the submission ran out of time" if run.killed else "no reason given")
                graded.results.append(ExerciseResult(name, NOT_GRADED, f"not graded: {note}."))
                graded.notes.append(f"{name}: not graded ({note})")
                continue
            status = result.reason if result.status == FAILED and result.reason else result.status
            message = f"on {result.where}: {result.message}" if result.where else result.message
            why = run.scan_flags.get(name) or _reference_function(meta)
            if why:
                graded.notes.append(f"{name}: flagged, {why}")
                message = (
                    f"scored 0: {why}, not your own code (without that it would have been {status}). "
                    "If this is a mistake, write the function yourself and resubmit."
                )
                status = FLAGGED
            elif status in (TIMEOUT, CRASHED):
                graded.notes.append(f"{name}: {HOW.get((status, outcome), HOW[status, 'done'])}")
            graded.results.append(
                ExerciseResult(
                    name, status, message if status != PASSED else "", exercise.hint, result.printed, result.points
                )
            )


def _reference_function(meta: dict) -> str:
    """Why the function the kernel called is the course's own, or ""."""
    module, path = str(meta.get("module", "")), str(meta.get("file", ""))
    if module == "attnedu" or module.startswith("attnedu."):
        qualname = str(meta.get("qualname", ""))[:80]
        return f"the function is the course's own `{module}.{qualname}`"
    if path and os.path.realpath(path).startswith(PACKAGE_DIR + os.sep):
        return "the function's code is the course's own"
    return ""


def _valid_report(report: dict | None) -> dict | None:
    """The worker's report, checked field by field (it lives where the submission could rewrite it)."""
    if not isinstance(report, dict):
        return None
    notebook = report.get("notebook")
    notes = report.get("notes")
    exercises = report.get("exercises")
    if notebook not in NOTEBOOK_STATUSES or not isinstance(notes, list) or not isinstance(exercises, dict):
        return None
    clean = {}
    for name, entry in exercises.items():
        if isinstance(entry, dict) and entry.get("outcome") in OUTCOMES:
            note = entry.get("note")
            clean[str(name)] = {"outcome": entry["outcome"], "note": note[:300] if isinstance(note, str) else ""}
    texts = [n[:300] for n in notes[:20] if isinstance(n, str)]
    return {"notebook": notebook, "notes": texts, "exercises": clean}


def _drain(stream, tail: deque) -> None:
    for line in iter(lambda: stream.readline(4096), b""):
        tail.append(line.decode("utf-8", "replace"))


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _copy_font_cache(target: Path) -> None:
    """Give the kernel matplotlib's font list, so that a notebook that plots does not rebuild it (seconds)."""
    try:
        import matplotlib

        cache = Path(matplotlib.get_cachedir())
        target.mkdir(parents=True, exist_ok=True)
        for font_list in cache.glob("fontlist-*.json"):
            shutil.copyfile(font_list, target / font_list.name)
    except Exception:
        pass


def grade_all(paths: list[Path], originals: dict[Path, bytes], grader: Grader) -> list[Graded]:
    """Grade ``paths`` with up to ``jobs`` sandboxes at a time; results in the order of ``paths``."""
    done: dict[Path, Graded] = {}
    bar = progress(len(paths), "grading")
    try:
        with ThreadPoolExecutor(max_workers=max(1, grader.settings.jobs)) as pool:
            futures = {
                pool.submit(grader.run_submission, path, number, originals[path]): path
                for number, path in enumerate(paths)
            }
            try:
                for future in as_completed(futures):
                    done[futures[future]] = grader.finish(future.result())
                    bar.update()
            except BaseException:
                for future in futures:
                    future.cancel()
                grader.stop_all()
                raise
    finally:
        bar.close()
    return [done[p] for p in paths]


def scratch_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="attnedu-grade-")
