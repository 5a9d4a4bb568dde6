"""What every lesson's calibration module shares: the driver's description of a run (``RunInfo``), the CPU kernels a
process computes with, a range over seeds as the reports print it, and the record that ``--json`` writes."""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RunInfo:
    """One run of ``benchmarks/calibrate.py``, as the reports name it: the command (without the environment that
    chose the kernels: ``kernels()`` says which), its seeds, how many processes ran at once, the date."""

    command: str
    seeds: tuple[int, ...]
    jobs: int
    date: str


def kernels() -> str:
    """The CPU kernels this process computes with, as the lessons' records name them."""
    import torch

    mkl = os.environ.get("MKL_CBWR")
    return torch.backends.cpu.get_cpu_capability() + (f" (MKL_CBWR={mkl})" if mkl else "")


def measured(info: RunInfo) -> str:
    """The provenance line of a report: when, by which command, on which machine, kernels and versions."""
    import platform

    import torch

    return (f"Measured {info.date} by `{info.command}` ({info.jobs} processes at once, 1 torch thread each). "
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch's CPU kernels: {kernels()}; torch "
            f"{torch.__version__}; Python {platform.python_version()}.\n")  # fmt: skip


def span(values) -> str:
    """The range of ``values`` over the seeds, as the reports print it."""
    values = list(values)
    return f"{min(values):.3f} to {max(values):.3f}"


def printed(function, *args) -> str:
    """What ``function(*args)`` prints, as a string (the reports print their tables line by line)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        function(*args)
    return out.getvalue()


def write_record(module, results: list[dict], info: RunInfo, path: str) -> str:
    """Put this run's ``results`` into the record at ``path`` (``module.RECORD``: one entry per set of CPU kernels),
    replacing an earlier run with the same kernels and keeping the others, then recompute the margins from every run
    it holds (``module.margins``, by ``module.MARGIN_RULES``, where the module has them). A module's ``stale(runs,
    results)`` names the kernel sets whose runs measured other things than this one: they are dropped. Returns what
    to print: the margins, or what the record now holds."""
    this = kernels()
    record = {"runs": []}
    if os.path.exists(path):
        with open(path) as f:
            record = json.load(f)
    runs = [run for run in record.get("runs", []) if run["kernels"] != this]
    note = ""
    stale = module.stale(runs, results) if hasattr(module, "stale") else []
    if stale:  # the margins need every run's measurements: write this run alone, then re-run the other kernel sets
        note = (f"\nThe record's runs on {', '.join(sorted(set(stale)))} measured other things than this one: they are "
                "dropped; run this command on those kernels again.\n")  # fmt: skip
        runs = [run for run in runs if run["kernels"] not in stale]
    runs.append({"kernels": this, "date": info.date, "command": info.command, "results": results})
    record = {"recipe": module.RECIPE} if hasattr(module, "RECIPE") else {}
    record["runs"] = runs
    if hasattr(module, "margins"):
        record["margins"] = module.margins(runs)
        record["margin_rules"] = module.MARGIN_RULES
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    sets = f"{len(runs)} kernel set(s) ({', '.join(run['kernels'] for run in runs)})"
    if "margins" not in record:
        return note + f"\nThe runs of {sets} written to {path}\n"
    return (
        note
        + f"\nMargins over {sets}, written to {path}:\n"
        + "".join(f"- {name}: {value}\n" for name, value in record["margins"].items())
    )
