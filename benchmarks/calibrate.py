"""Calibrate the lessons' trained effects over several training seeds, so that the margins the lessons assert rest on
more than one run (docs/style.md, experiment rules: assert about half the smallest observed gap). Seeds go through
``ATTNEDU_SEED_OFFSET`` exactly as in the test command's perturbed run, so seed 1000 here is the perturbed run's model.

    python benchmarks/calibrate.py --lesson 11 [--seeds 0 1 2 1000 1001] [--experiments ...] [--jobs 2] [--json FILE]
    python benchmarks/calibrate.py --lesson 01 02 03 04 05 06 07 > benchmarks/calibration.md
    python benchmarks/calibrate.py --lesson 09 --json benchmarks/calibration09.json
    python benchmarks/calibrate.py --lesson 11 --json benchmarks/calibration11.json > benchmarks/calibration11.md
    ATEN_CPU_CAPABILITY=avx2 python benchmarks/calibrate.py --lesson 11 > benchmarks/calibration11_avx2.md
    MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default python benchmarks/calibrate.py --lesson 11 \\
        > benchmarks/calibration11_compatible.md

Each lesson's calibration is a module of ``benchmarks/calibration/`` (``lesson01_03.py`` for the translation models of
lessons 01-03, then ``lesson04.py`` .. ``lesson11.py``), all with one interface (``calibration/__init__.py`` says
which): its experiments, ``run(experiment, seed) -> dict``, which trains and measures one experiment at one seed with
the lesson's own package function and recipe (``tests/test_experiments.py`` checks that the lesson and its module call
them alike), and ``report(results, info) -> str``, its markdown tables. This driver runs every (experiment, seed) in a
process of its own with one torch thread, ``--jobs`` at a time, and prints the reports, lesson by lesson.
``--experiments`` (or ``--models``, its older name, in the commands the records name) picks experiments by name; the
lessons follow from them. ``--json FILE`` (one lesson's module at a time) writes the lesson's record: every run on this
set of kernels next to the record's runs on other kernels, and the margins derived from all of them where the module
defines them (``calibration/common.py``'s ``write_record``).

Every effect is calibrated on three paths through torch's CPU kernels, each giving other floating-point results in the
last bits, as other machines do: the machine's native kernels (AVX-512 for calibration.md), torch's AVX2 kernels
(``ATEN_CPU_CAPABILITY=avx2`` on a CPU that has AVX-512; they change ATen's own vectorised operations such as the
softmax, not MKL's matrix products), and the third path, ATen's baseline kernels with MKL's compatible code path
(``MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default``, which changes the matrix products too, on any x86-64 CPU with
AVX2 or AVX-512). The test command's perturbed run uses the third path, with the seeds moved by 1000. The kernels are
named by the environment, as in the commands above; the processes this driver starts inherit it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from calibration import MODULES  # noqa: E402
from calibration.common import RunInfo, write_record  # noqa: E402


def modules() -> dict:
    """Every lesson's calibration module, by its name in ``calibration.MODULES``."""
    return {name: importlib.import_module(f"calibration.{name}") for name in MODULES}


def run_one(module: str, experiment: str, seed: int, options: dict) -> dict:
    """One (experiment, seed) of ``calibration.<module>``, in this process: the seed offset and the progress bars set
    in the environment, one torch thread (a process of its own, which the driver starts)."""
    os.environ["ATTNEDU_SEED_OFFSET"] = str(seed)
    os.environ["ATTNEDU_PROGRESS"] = "0"
    import torch

    torch.set_num_threads(1)
    return importlib.import_module(f"calibration.{module}").run(experiment, seed, **options)


def launch(module: str, experiment: str, seed: int, options: dict) -> dict:
    """``run_one`` in a fresh Python process (the environment's kernels, one torch thread); its dict."""
    code = (f"import calibrate, json; print(json.dumps(calibrate.run_one({module!r}, {experiment!r}, {seed}, "
            f"{options!r})))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{module} {experiment} seed {seed} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def plan(args, found: dict) -> list[tuple[str, list[str]]]:
    """The modules to run, in the order of the lessons, each with its experiments."""
    owner = {experiment: name for name, module in found.items() for experiment in module.EXPERIMENTS}
    lessons = {lesson: name for name, module in found.items() for lesson in module.LESSONS}
    chosen = args.experiments or args.models
    if args.lesson:
        unknown = [lesson for lesson in args.lesson if lesson not in lessons]
        if unknown:
            raise SystemExit(f"--lesson: no calibration for lesson(s) {unknown}; lessons: {sorted(lessons)}")
        names = {lessons[lesson] for lesson in args.lesson}
    elif chosen:
        names = {owner[experiment] for experiment in chosen}
    else:
        names = set(found)
    if chosen:
        outside = [e for e in chosen if owner[e] not in names]
        if outside:
            raise SystemExit(f"--experiments {outside} belong to no lesson given with --lesson {args.lesson}")
    return [(name, [e for e in found[name].EXPERIMENTS if not chosen or e in chosen]) for name in MODULES
            if name in names]  # fmt: skip


def command(args, module, experiments: list[str], seeds) -> str:
    """The command that repeats one module's part of this run (without the environment that chose the kernels)."""
    asked = [lesson for lesson in args.lesson or () if lesson in module.LESSONS] or list(module.LESSONS)
    parts = ["benchmarks/calibrate.py", "--lesson", *asked]
    if list(experiments) != list(module.EXPERIMENTS):
        parts += ["--experiments", *experiments]
    parts += ["--seeds", *map(str, seeds)]
    if args.steps is not None:
        parts += ["--steps", str(args.steps)]
    if args.json:
        parts += ["--json", args.json]
    return " ".join(parts)


def main(argv: list[str] | None = None) -> None:
    found = modules()
    every = [e for module in found.values() for e in module.EXPERIMENTS]
    lessons = sorted({lesson for module in found.values() for lesson in module.LESSONS})
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lesson", nargs="+", choices=lessons, help="the lessons to calibrate (default: every lesson)")
    parser.add_argument("--experiments", nargs="+", choices=every, help="only these experiments (default: all of "
                        "each lesson's)")  # fmt: skip
    parser.add_argument("--models", nargs="+", choices=every, help=argparse.SUPPRESS)  # --experiments' older name
    parser.add_argument("--seeds", type=int, nargs="+", help="seed offsets (default: each lesson's SEEDS)")
    parser.add_argument("--jobs", type=int, default=2, help="processes at once, one torch thread each")
    parser.add_argument("--json", help="also write the lesson's record to this file (one lesson's module at a time)")
    parser.add_argument("--results", help="also write every run's dict, as each lesson's run() returned it, to this "
                        "file (JSON: a list)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=None, help="training steps of lessons 01-03's models (default: "
                        "their lessons'; a short run to try the script)")  # fmt: skip
    args = parser.parse_args(argv)
    steps = plan(args, found)
    if args.json and len(steps) != 1:
        raise SystemExit(f"--json writes one lesson's record: choose one module's lessons, not {[n for n, _ in steps]}")
    options = {} if args.steps is None else {"steps": args.steps}
    if options and any(name != "lesson01_03" for name, _ in steps):
        raise SystemExit("--steps shortens lessons 01-03's training only: run it with those lessons alone")
    jobs = [(name, experiment, seed) for name, experiments in steps
            for seed in (args.seeds or found[name].SEEDS) for experiment in experiments]  # fmt: skip
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: launch(*job, options), jobs))
    if args.results:
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    for name, experiments in steps:
        module = found[name]
        seeds = tuple(args.seeds or module.SEEDS)
        info = RunInfo(command(args, module, experiments, seeds), seeds, args.jobs, str(datetime.date.today()))
        mine = [r for (owner, _, _), r in zip(jobs, results) if owner == name]
        print(module.report(mine, info), end="")
        if args.json:
            write = getattr(module, "write_record", None)
            print(write(mine, info, args.json) if write else write_record(module, mine, info, args.json), end="")


if __name__ == "__main__":
    main()
