"""What a learner waits for, measured in a fresh clone: the set-up (`make .venv/.ready`, what the first `make lab` does
before JupyterLab starts), the disk it takes, and `make check` on an untouched work/, per lesson and all at once.
Merges what it measured into benchmarks/learner_setup.json, the record the README's figures come from
(tests/test_readme.py checks that the README says what the record holds).

    python3 benchmarks/learner_setup.py setup /tmp/clone               # git clone . /tmp/clone; time the set-up; du
    python3 benchmarks/learner_setup.py check /tmp/clone 01 02 03      # make check LESSON=NN there, one after another
    python3 benchmarks/learner_setup.py check /tmp/clone all           # make check over every notebook of work/
    python3 benchmarks/learner_setup.py check /tmp/clone finished      # the same with every exercise done

Run each under the machine's CPU lock with nothing else running, a few lessons per call. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "learner_setup.json"
NOTEBOOK_LINE = re.compile(r"^  work/(\S+)\.ipynb: .* \((\d+) s\)$")


def clean_env() -> dict[str, str]:
    """The environment a learner has: no PYTHONPATH pointing at another tree's attnedu."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNEDU_PROGRESS")}


def machine() -> dict:
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if "model name" in line]
    cpu = names[0] if names else platform.processor()
    return {"cpu": cpu, "cores": os.cpu_count(), "system": f"{platform.system()} {platform.machine()}"}


def du_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def setup(clone: Path) -> dict:
    if clone.exists():
        raise SystemExit(f"{clone} exists: the set-up is measured in a fresh clone")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    start = time.monotonic()
    subprocess.run(["make", ".venv/.ready"], cwd=clone, env=clean_env(), check=True, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    site = next((clone / ".venv" / "lib").glob("python3*/site-packages"))
    versions = "import sys, torch; print(sys.version.split()[0], torch.__version__)"
    python = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", versions], capture_output=True, text=True, check=True,
        env=clean_env(),
    ).stdout.split()  # fmt: skip
    return {
        "seconds": round(seconds, 1),
        "venv_bytes": du_bytes(clone / ".venv"),
        "torch_bytes": du_bytes(site / "torch"),
        "triton_bytes": du_bytes(site / "triton") if (site / "triton").exists() else 0,
        "python": python[0],
        "torch": python[1],
    }


def check(clone: Path, lessons: list[str]) -> dict:
    """Wall seconds of `tools/check.py` (what `make check` runs) per lesson, or over all of work/ for "all", on an
    untouched work/; "finished" runs all of them with every exercise done (the solutions as work/, which is put back
    afterwards)."""
    if not (clone / ".venv" / ".ready").exists():
        raise SystemExit(f"{clone} has no learner install: run the setup step first")
    found = {}
    for lesson in lessons:
        finished = lesson == "finished"
        command = [str(clone / ".venv" / "bin" / "python"), "tools/check.py"]
        command += [] if lesson in ("all", "finished") else [lesson]
        if finished:
            (clone / "work").rename(clone / "work-untouched")
            shutil.copytree(clone / "solutions", clone / "work")
        try:
            start = time.monotonic()
            done = subprocess.run(command, cwd=clone, env=clean_env(), capture_output=True, text=True)
            seconds = time.monotonic() - start
        finally:
            if finished:
                shutil.rmtree(clone / "work")
                (clone / "work-untouched").rename(clone / "work")
        expected = " 0 failed, 0 not attempted, 0 not checked" if finished else "0 passed, 0 failed"
        if done.returncode != 0 or expected not in done.stdout:
            raise SystemExit(f"make check {lesson} did not end as expected:\n{done.stdout}{done.stderr}")
        notebooks = {m[1]: int(m[2]) for m in map(NOTEBOOK_LINE.match, done.stdout.splitlines()) if m}
        found[lesson] = {"seconds": round(seconds, 1), "notebooks": notebooks}
        print(f"make check {lesson}: {seconds:.1f} s {notebooks}", flush=True)
    return found


def commit(clone: Path) -> str:
    """The commit measured: the clone's."""
    done = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("setup", "check"))
    parser.add_argument("clone", type=Path)
    parser.add_argument("lessons", nargs="*", help="for check: lessons (01, 08a, ...), all or finished")
    args = parser.parse_args(argv)
    record = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
    if args.step == "setup":
        record["setup"] = setup(args.clone.resolve())
        record["setup"].update(date=datetime.date.today().isoformat(), commit=commit(args.clone), machine=machine())
        print(json.dumps(record["setup"], indent=1))
    else:
        if not args.lessons:
            parser.error("check needs lessons, or all")
        checks = record.setdefault("check", {})
        for lesson, figures in check(args.clone.resolve(), args.lessons).items():
            checks[lesson] = {**figures, "date": datetime.date.today().isoformat(), "commit": commit(args.clone)}
        record["check"] = dict(sorted(checks.items()))
    RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
