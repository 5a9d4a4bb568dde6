"""The grading worker: runs one submission inside the sandbox, as the sandbox's user.

    python -I worker.py WORKDIR [--probe]

Started by the grader (``attnedu.grading.grader``) with ``WORKDIR`` holding ``job.json``, the
submission as ``submission.ipynb`` and each exercise's test inputs as ``cases/NAME.pt``. It

1. caps its own memory, processes, file size and CPU time (``setrlimit``, inherited by the kernel);
2. runs the notebook's code cells top to bottom in a fresh ``python3`` kernel (nbclient,
   ``allow_errors``, as "Run All"), within ``timeout`` seconds in all; past it the running cell
   is interrupted and the rest skipped. A cell that ignores the interrupt, or kills the kernel,
   ends the run there: the kernel is restarted and the cells before it are run again (within
   ``timeout`` again, and within the submission's ``budget``);
3. for each exercise, executes one line in the kernel that loads the inputs, calls the learner's
   function on each (``attnedu.grading.kernel``) and saves what happened, one file per case in
   ``out/NAME/``. On Linux the kernel makes the calls in a forked child and kills it past the time
   limit. The deadline of each call is also kept from here, outside the kernel: a kernel that does
   not answer within ``time_limit`` (plus a grace) after its last result, or that dies, costs its
   exercise; the kernel is restarted, the cells run again, and the next exercise goes on;
4. writes ``report.json`` (what happened to the notebook and to each exercise) after each step.

Nothing here decides a score. The kernel runs as the same user and could rewrite any file in
WORKDIR, so the grader reads this folder as untrusted data only (JSON, and tensors with
``torch.load(weights_only=True)``) and compares outputs with the references in its own process.

Standalone on purpose (the standard library, nbformat and nbclient): importing ``attnedu`` would
import torch, which this process does not need.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

INTERRUPT_GRACE = 2.0  # how long an interrupted cell may take to stop before its kernel is given up
KERNEL_START = 30  # seconds for a kernel to start and answer
SETUP_SECONDS = 10.0  # for the call line to load its inputs (and torch, if the notebook never imported it)
CALL_GRACE = 2.0  # on top of time_limit per call: the kernel's alarm, then the kernel itself, act first
CALL_SETUP = 4.0  # once the call line has started, for it to load the inputs
POLL = 0.05

# Run in the kernel for each exercise. A name that is not a function is reported without importing
# attnedu.grading.kernel, which imports torch: seconds, in a notebook that never did.
SNIPPET = """\
def _attnedu_call(g):
    if not callable(g.get({name!r})):
        import json
        with open({meta!r}, "w") as f:
            json.dump({{"defined": {name!r} in g, "callable": False, "type": type(g.get({name!r})).__name__}}, f)
        return
    kernel = __import__("attnedu.grading.kernel", fromlist=["call_exercise"])
    kernel.call_exercise(g, {name!r}, {cases!r}, {out!r}, {time_limit!r})
_attnedu_call(globals())
del _attnedu_call
"""


def set_limits(limits: dict) -> None:
    """Cap this process and its children (the kernel and whatever it starts)."""
    caps = {
        "RLIMIT_AS": limits.get("memory_bytes"),
        "RLIMIT_NPROC": limits.get("processes"),
        "RLIMIT_FSIZE": limits.get("file_bytes"),
        "RLIMIT_CPU": limits.get("cpu_seconds"),
        "RLIMIT_CORE": 0,
    }
    for name, value in caps.items():
        if value is None or not hasattr(resource, name):
            continue
        hard = value + 5 if name == "RLIMIT_CPU" else value  # SIGXCPU first, SIGKILL 5 s later
        try:
            resource.setrlimit(getattr(resource, name), (value, hard))
        except (ValueError, OSError):  # e.g. RLIMIT_AS on macOS
            pass


class Report:
    """report.json, rewritten (atomically) after every step so that a killed worker leaves what it knew."""

    def __init__(self, path: Path, exercises: list[dict]):
        self.path = path
        self.data = {
            "notebook": "ok",
            "notes": [],
            "restarts": 0,
            "finished": False,
            "exercises": {e["name"]: {"outcome": "not_run", "note": ""} for e in exercises},
        }
        self.save()

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data), encoding="utf-8")
        os.replace(tmp, self.path)


class Worker:
    def __init__(self, work: Path, job: dict):
        import nbformat

        self.work, self.job = work, job
        self.timeout, self.time_limit = float(job["timeout"]), float(job["time_limit"])
        self.deadline = time.monotonic() + float(job["budget"])
        self.nb = nbformat.read(work / job["notebook"], as_version=4)
        self.code = [i for i, cell in enumerate(self.nb.cells) if cell.cell_type == "code"]
        self.slot = len(self.nb.cells)  # where the call line goes
        self.nb.cells.append(nbformat.v4.new_code_cell(""))
        self.report = Report(work / "report.json", job["exercises"])

    def client(self):
        from nbclient import NotebookClient

        return NotebookClient(
            self.nb,
            kernel_name="python3",
            allow_errors=True,
            interrupt_on_timeout=True,  # a cell past its time gets KeyboardInterrupt, and the kernel lives on
            startup_timeout=KERNEL_START,
            shutdown_kernel="immediate",
            record_timing=False,
            resources={"metadata": {"path": str(self.work)}},
        )

    async def run(self) -> None:
        from jupyter_core.utils import ensure_async

        pending = list(self.job["exercises"])
        replay: list[int] | None = None  # the cells to run again after a restart; None before the first run
        while replay is None or pending:
            if time.monotonic() > self.deadline:
                self.give_up(pending, "the submission's time budget ran out before this exercise")
                break
            client = self.client()
            try:
                async with client.async_setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
                    await asyncio.wait_for(
                        client.async_wait_for_reply(await ensure_async(client.kc.kernel_info())), KERNEL_START
                    )
                    if replay is None:
                        replay, stopped = await self.first_run(client)
                        if stopped:
                            self.restart()
                            continue  # leaving the block kills this kernel
                    elif replay:  # each re-run gets the first run's budget, within the submission's
                        seconds = min(self.timeout, self.deadline - time.monotonic())
                        _, stop = await self.run_cells(client, replay, seconds)
                        if stop is not None:
                            kind, index = stop
                            self.give_up(pending, f"re-running the notebook after a restart stopped at cell {index}")
                            self.report.note(f"re-running the cells after a restart: cell {index} {kind}")
                            break
                    while pending:
                        outcome = await self.call(client, pending.pop(0))
                        if outcome in ("timeout", "crashed"):
                            self.restart()
                            break
            except Exception as err:  # the kernel would not start, or nbclient failed in a way not foreseen
                self.report.note(f"the grader's kernel failed: {type(err).__name__}: {str(err)[:200]}")
                self.give_up(pending, "the grader could not run the notebook's kernel")
                if replay is None:
                    self.report.data["notebook"] = "grader failed"
                break
        self.report.data["finished"] = True
        self.report.save()

    def restart(self) -> None:
        self.report.data["restarts"] += 1
        self.report.save()

    def give_up(self, pending: list[dict], why: str) -> None:
        for exercise in pending:
            self.report.data["exercises"][exercise["name"]] = {"outcome": "not_run", "note": why}
        pending.clear()
        self.report.save()

    async def first_run(self, client) -> tuple[list[int], bool]:
        """Run every code cell within the budget; True if the kernel must be restarted (hung or died)."""
        done, stop = await self.run_cells(client, self.code, self.timeout, first=True)
        if stop is None:
            return done, False
        kind, index = stop
        data = self.report.data
        if kind == "died":
            data["notebook"] = "kernel died"
            self.report.note(f"the kernel died in cell {index}; later cells were not run")
        elif kind == "was not reached":
            data["notebook"] = "timeout"
            self.report.note(f"the notebook used its {self.timeout:g} s budget before cell {index}; it was not run")
        elif kind == "hung":
            data["notebook"] = "timeout"
            self.report.note(
                f"cell {index} ran past the notebook's {self.timeout:g} s budget and ignored the interrupt; "
                "its kernel was stopped and later cells were not run"
            )
        else:
            data["notebook"] = "timeout"
            self.report.note(
                f"cell {index} interrupted: the notebook ran past its {self.timeout:g} s budget; "
                "later cells were not run"
            )
        return done, kind in ("died", "hung")

    async def run_cells(self, client, indices: list[int], budget: float, first: bool = False):
        """Run ``indices`` within ``budget`` seconds in all: (the cells that ran to the end, None or (how, index)).
        Cell errors are noted on the ``first`` run only."""
        from nbclient.exceptions import DeadKernelError

        deadline = time.monotonic() + budget
        done: list[int] = []
        for index in indices:
            cell = self.nb.cells[index]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return done, ("was not reached", index)
            client.timeout = max(1, math.ceil(remaining))
            started = time.monotonic()
            task = asyncio.ensure_future(
                client.async_execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
            )
            # nbclient interrupts the cell after client.timeout s; the extra wait covers a kernel that ignores it
            await asyncio.wait({task}, timeout=client.timeout + INTERRUPT_GRACE)
            if not task.done():
                task.cancel()  # nbclient turns this into DeadKernelError: not what happened, so not waited for
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
                return done, ("hung", index)
            try:
                task.result()
            except DeadKernelError:
                return done, ("died", index)
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            cell.outputs = []  # keep memory flat whatever the notebook prints
            if time.monotonic() - started >= client.timeout:
                return done, ("interrupted", index)
            done.append(index)
            if errors and first:
                self.report.data["notebook"] = "cell errors"
                error = errors[0]
                self.report.note(f"cell {index}: {error.get('ename')}: {str(error.get('evalue', ''))[:200]}")
        return done, None

    async def call(self, client, exercise: dict) -> str:
        """Call one exercise's function on its cases in the kernel, keeping each call's deadline from here."""
        from jupyter_core.utils import ensure_async

        name = exercise["name"]
        out = self.work / "out" / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        cases = str(self.work / "cases" / f"{name}.pt")
        meta = str(out / "meta.json")
        code = SNIPPET.format(name=name, cases=cases, out=str(out), meta=meta, time_limit=self.time_limit)
        # silent: no history, and the notebook's pre/post_run_cell hooks do not run around it
        msg_id = await ensure_async(client.kc.execute(code, silent=True, store_history=False))
        deadline = time.monotonic() + SETUP_SECONDS
        progress = -1
        while True:
            try:
                reply = await ensure_async(client.kc.shell_channel.get_msg(timeout=POLL))
            except Empty:
                reply = None
            if reply is not None and reply.get("parent_header", {}).get("msg_id") == msg_id:
                content = reply.get("content", {})
                if content.get("status") == "ok":
                    return self.outcome(name, "done")
                return self.outcome(name, "error", f"{content.get('ename')}: {str(content.get('evalue'))[:200]}")
            if not await ensure_async(client.km.is_alive()):
                return self.outcome(name, "crashed")
            now = time.monotonic()
            seen = _progress(out)
            if seen != progress:
                setup = CALL_SETUP if progress == -1 else 0.0
                progress, deadline = seen, now + setup + self.time_limit + CALL_GRACE
            if now > deadline or now > self.deadline:
                return self.outcome(name, "timeout")

    def outcome(self, name: str, outcome: str, note: str = "") -> str:
        self.report.data["exercises"][name] = {"outcome": outcome, "note": note}
        self.report.save()
        return outcome


def _progress(out: Path) -> int:
    """-1 before the call line has started, else the number of cases it has finished."""
    try:
        names = os.listdir(out)
    except OSError:
        return -1
    if "meta.json" not in names:
        return -1
    return sum(1 for n in names if n.endswith(".pt") and n[:-3].isdigit())


def become(uid: int) -> None:
    """Drop root for good (the sandbox was built as root): no groups, no capabilities, user ``uid``."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SystemExit("the worker could not drop root")


def probe() -> dict:
    """What the grader checks before trusting this sandbox with a class: it starts, and finds its packages."""
    import importlib.machinery
    import importlib.util

    # this process runs with -I, the kernel without: it also searches PYTHONPATH, where the sandbox points to an
    # attnedu that is not installed (a clone used in place, a second work tree)
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    attnedu = importlib.util.find_spec("attnedu") or importlib.machinery.PathFinder.find_spec("attnedu", pythonpath)
    return {"uid": os.getuid(), "nbclient": importlib.util.find_spec("nbclient") is not None, "attnedu": bool(attnedu)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--probe", action="store_true", help="check that the sandbox works, then exit")
    parser.add_argument("--user", type=int, help="when started as root: the user to become")
    args = parser.parse_args(argv)
    # nbformat imports jsonschema, which builds a URI grammar at import (rfc3987_syntax) for a format check
    # nothing here uses: 2.5 s per submission. Without the module, jsonschema skips that check.
    sys.modules.setdefault("rfc3987_syntax", None)
    job = {} if args.probe else json.loads((args.workdir / "job.json").read_text(encoding="utf-8"))
    set_limits(job.get("limits", {}))
    if args.user is not None and os.getuid() == 0:
        become(args.user)
    if args.probe:
        print(json.dumps(probe()))
        return 0
    for folder in ("home", "tmp", "out"):
        (args.workdir / folder).mkdir(exist_ok=True)
    worker = Worker(args.workdir, job)
    asyncio.run(worker.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
