"""Benchmark table for the notebooks: wall time and the kernel's peak memory, printed at the
end of every test run. A benchmark, not a test: numbers never decide pass or fail."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

BUDGET_SECONDS, BUDGET_MIB = 90, 2048
_seconds: dict[str, float] = defaultdict(float)
_peak_mib: dict[str, float] = {}


def _kernel_peak_mib(item) -> float | None:
    """VmHWM (peak resident memory) of the nbval kernel running ``item``'s notebook (Linux only)."""
    kernel = getattr(item.parent, "kernel", None)
    try:
        pid = kernel.km.provisioner.process.pid
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (AttributeError, OSError, ValueError):
        return None
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if item.path.suffix == ".ipynb" and call.when == "call":
        peak = _kernel_peak_mib(item)
        if peak is not None:
            outcome.get_result().user_properties.append(("kernel_peak_mib", peak))


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration  # setup (kernel start) + every cell
        for key, value in report.user_properties:
            if key == "kernel_peak_mib":
                _peak_mib[path] = max(_peak_mib.get(path, 0.0), value)


def pytest_terminal_summary(terminalreporter):
    if not _seconds or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    tr = terminalreporter
    tr.section(f"notebook benchmark (budget {BUDGET_SECONDS} s, {BUDGET_MIB} MiB each)")
    tr.write_line(f"{'notebook':<45}{'seconds':>9}{'peak MiB':>10}  within budget")
    for path in sorted(_seconds):
        seconds, peak = _seconds[path], _peak_mib.get(path)
        peak_text = f"{peak:10.0f}" if peak is not None else f"{'n/a':>10}"
        ok = seconds <= BUDGET_SECONDS and (peak is None or peak <= BUDGET_MIB)
        tr.write_line(f"{path:<45}{seconds:9.1f}{peak_text}  {'yes' if ok else 'NO'}")
