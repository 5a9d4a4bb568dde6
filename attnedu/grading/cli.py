"""The command line: ``python -m attnedu.grade SUBMISSIONS --out scores.csv [options]``."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import users
from .sandbox import Limits, Sandbox, SandboxError, choose

FEEDBACK_LEVELS = ("full", "diagnosis", "score")  # reports.FEEDBACK_LEVELS (not imported here: it imports torch)

WARNING_NO_SANDBOX = (
    "NOT ISOLATED: {why}, so every submission runs with your user's rights, network and files. A "
    "submission can read, change or delete the others and your files, and leave processes behind. "
    "Grade only in a throwaway container or VM without network (see README, 'Grading safely')."
)


class UsageError(Exception):
    """Bad input on the command line: the message says what was expected and how to fix it."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m attnedu.grade",
        description="Grade submitted exercise notebooks, each in its own sandbox, and write a score table, "
        "a summary, a feedback file per submission and a plot.",
    )
    parser.add_argument("submissions", type=Path, help="a folder of submitted .ipynb files (or one notebook)")
    parser.add_argument("--out", type=Path, default=Path("scores.csv"), help="the CSV to write (default scores.csv)")
    parser.add_argument(
        "--report-dir", type=Path, default=None, help="folder for summary, feedback and plot (default OUT_report/)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at the same time (default 1)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for a notebook's own cells (default 300)")
    parser.add_argument(
        "--time-limit", type=float, default=5.0, help="seconds per call of a learner's function (default 5)"
    )
    parser.add_argument(
        "--memory-gb", type=float, default=4.0, help="memory cap of each process of a submission (default 4)"
    )
    parser.add_argument(
        "--feedback",
        choices=FEEDBACK_LEVELS,
        default="diagnosis",
        help="what each student's feedback file says per exercise: full (status, diagnosis and every hint), "
        "diagnosis (status and diagnosis, no hint; the default) or score (status only)",
    )
    parser.add_argument(
        "--no-sandbox", action="store_true", help="grade without bubblewrap (unsafe: read docs/instructors.md first)"
    )
    return parser.parse_args(argv)


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def validate(args: argparse.Namespace) -> tuple[list[Path], Path]:
    """The notebooks to grade and the report folder; UsageError for anything that cannot work."""
    submissions = args.submissions
    if not submissions.exists():
        raise UsageError(
            f"{submissions} does not exist. Expected a folder of submitted .ipynb files (or one notebook): "
            "python -m attnedu.grade submissions/ --out scores.csv"
        )
    if submissions.is_file():
        if submissions.suffix != ".ipynb":
            raise UsageError(f"{submissions} is not a notebook (.ipynb). Give a notebook or a folder of them.")
        paths = [submissions]
        folder = submissions.parent
    else:
        paths = sorted(p for p in submissions.glob("*.ipynb") if p.is_file())
        folder = submissions
        if not paths:
            others = sorted(p.name for p in submissions.iterdir())[:5]
            more = ", ..." if len(others) == 5 else ""
            found = f" (it holds: {', '.join(others)}{more})" if others else " (it is empty)"
            raise UsageError(
                f"no .ipynb files in {submissions}{found}. Put the submitted notebooks directly in that folder: "
                "subfolders are not searched."
            )
    for name, value in (("--jobs", args.jobs), ("--timeout", args.timeout), ("--time-limit", args.time_limit)):
        if value <= 0:
            raise UsageError(f"{name} must be positive, got {value:g}.")
    if args.jobs > users.BLOCK:
        raise UsageError(f"--jobs {args.jobs} is more than the {users.BLOCK} sandboxes one run may have at once.")
    if args.memory_gb < 2:
        raise UsageError(f"--memory-gb {args.memory_gb:g} is too small: a kernel with torch maps about 1.4 GB.")
    report_dir = args.report_dir or args.out.with_name(args.out.stem + "_report")
    for name, path in (("--out", args.out), ("--report-dir", report_dir)):
        if _inside(path, folder) and submissions.is_dir():
            raise UsageError(
                f"{name} {path} is inside the submissions folder {folder}; write the results elsewhere, "
                "e.g. --out scores.csv next to it."
            )
    if args.out.exists() and args.out.is_dir():
        raise UsageError(f"--out {args.out} is a folder; give a file name such as {args.out / 'scores.csv'}.")
    return paths, report_dir


def fingerprint(folder: Path) -> dict[str, str]:
    """sha256 of every file in the submissions folder (not in subfolders)."""
    prints = {}
    for path in sorted(folder.iterdir()):
        if path.is_file() and not path.is_symlink():
            prints[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            prints[path.name] = "not a file"
    return prints


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    found = [f"{name} was changed" for name in before if name in after and before[name] != after[name]]
    found += [f"{name} was deleted" for name in before if name not in after]
    found += [f"{name} appeared" for name in after if name not in before]
    return found


def probe(sandbox: Sandbox, uid: int) -> None:
    """Start one sandbox (as ``uid``, when root) before grading a class in them: SandboxError, with the fix, if it
    does not work."""
    with tempfile.TemporaryDirectory(prefix="attnedu-probe-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        sandbox.prepare(work, uid)
        launch = sandbox.launch(work, probe=True, uid=uid)
        try:
            process = launch.popen(stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            out, err = process.communicate(timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SandboxError(str(error)) from error
        try:
            info = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            info = None
        if process.returncode != 0 or not isinstance(info, dict):
            raise SandboxError(err.decode(errors="replace").strip()[-500:] or f"exit status {process.returncode}")
        if not info.get("nbclient") or not info.get("attnedu"):
            raise SandboxError(f"inside the sandbox Python cannot find its packages ({info})")
        if info.get("uid") == 0:
            raise SandboxError("the sandbox runs as root")


def leftovers(claim: users.Claim, grace: float = 3.0) -> list[str]:
    """Processes of this run's own sandbox users still alive after grading: waited for a moment (a sandbox's
    processes die with it, not in the same instant), then killed and described."""
    deadline = time.monotonic() + grace
    while users.processes_of(claim.uids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return users.kill_leftovers(claim.uids)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse(argv)
    try:
        paths, report_dir = validate(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # nbformat imports jsonschema, which builds a URI grammar at import (rfc3987_syntax) for a format check
    # nothing here uses: 2.5 s. Without the module, jsonschema skips that check.
    sys.modules.setdefault("rfc3987_syntax", None)
    from . import reports
    from .grader import Grader, Settings, grade_all, scratch_folder

    folder = args.submissions if args.submissions.is_dir() else args.submissions.parent
    args.out.parent.mkdir(parents=True, exist_ok=True)
    claim = None
    try:
        with scratch_folder() as scratch:
            hidden = [folder, args.out, report_dir, Path(scratch)]
            sandbox = choose(args.no_sandbox, hidden)
            warnings = []
            if sandbox.isolated and os.geteuid() == 0:  # sandboxes run as users of this run's own
                try:
                    claim = users.claim()
                except users.UsersTaken as err:
                    print(f"error: {err}", file=sys.stderr)
                    return 2
            uids = claim.uids if claim else users.POOL[: users.BLOCK]
            if sandbox.isolated:
                try:
                    probe(sandbox, uids[0])
                except SandboxError as err:
                    print(
                        f"error: bwrap ({sandbox.bwrap}) is installed but cannot start a sandbox here: {err}\n"
                        "Usual causes: unprivileged user namespaces are disabled (Debian/Ubuntu: sysctl "
                        "kernel.unprivileged_userns_clone=1; Ubuntu 24.04: an AppArmor profile for bwrap), or this "
                        "is a container without the rights to create namespaces. Fix that, or grade inside a "
                        "throwaway container or VM with --no-sandbox (docs/instructors.md, 'Grading safely').",
                        file=sys.stderr,
                    )
                    return 2
            else:
                why = "--no-sandbox was given" if args.no_sandbox else "bubblewrap (bwrap) is not available here"
                warnings.append(WARNING_NO_SANDBOX.format(why=why))
                print(f"WARNING: {warnings[-1]}", file=sys.stderr)
            settings = Settings(
                timeout=args.timeout,
                time_limit=args.time_limit,
                jobs=args.jobs,
                limits=Limits(memory_bytes=int(args.memory_gb * (1 << 30))),
            )
            originals = {path: path.read_bytes() for path in paths}
            before = fingerprint(folder)
            grader = Grader(settings, sandbox, Path(scratch), uids)
            graded = grade_all(paths, originals, grader)
            after = fingerprint(folder)
            survivors = leftovers(claim) if claim else []
    finally:
        if claim:
            claim.release()
    if survivors:
        warnings.append(
            f"{len(survivors)} process(es) of this run's sandbox users outlived their sandboxes and were killed: "
            + "; ".join(survivors[:5])
        )
        print(f"WARNING: {warnings[-1]}", file=sys.stderr)
    changed = changes(before, after)
    if changed:
        warnings.append(
            "the submissions folder changed while it was being graded: " + "; ".join(changed) + ". "
            "Something outside the grader, or a submission that escaped its sandbox, touched it."
        )
        print(f"WARNING: {warnings[-1]}", file=sys.stderr)
        for g in graded:
            if any(c.startswith(g.submission + " ") for c in changed):
                g.notes.append("the original file changed during grading")
    header, table = reports.rows(graded)
    reports.write_csv(args.out, header, table)
    summary = reports.write_reports(report_dir, graded, table, warnings, feedback=args.feedback)
    print(reports.score_table(graded, table))
    print()
    print(reports.summary_text(summary))
    for warning in warnings:
        print(f"\nWARNING: {warning}")
    print(f"\nwrote {args.out}: {len(table)} submissions; summary, feedback and plot in {report_dir}")
    sandbox_text = "each in a bwrap sandbox" if sandbox.isolated else "NOT ISOLATED"
    if claim:
        sandbox_text += f", as sandbox users {claim.text} (this run's own)"
    print(f"graded {sandbox_text}; memory cap {args.memory_gb:g} GB per process; feedback: {args.feedback}")
    print(grader.timing.text(started, time.monotonic(), args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
