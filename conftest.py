"""Benchmark table for the notebooks, printed at the end of every test run that ran notebooks:
wall time, the time scaled to the slow reference machine, the kernel's peak memory, and how many of
the outputs nbval does not compare came out different from the stored ones. A benchmark, not a
test: times never decide pass or fail. A notebook over budget shows "NO" in the table and the run
still passes, because a time depends on the machine, on what else runs on it (CI shares its cores)
and on an estimate of the slow machine; the budget is enforced by the people who read the table
(an author records the new row in benchmarks/notebooks.md, CONTRIBUTING.md step 8), and the table
says so under itself.

Scaling: the reference training step of ``benchmarks/reference_step.py`` is timed in the same run;
a notebook's time times (slow machine's ms / this machine's ms) estimates its time on the slow
reference machine, where the budget applies. A machine's speed drifts (a shared host, turbo, heat):
in a run of one notebook at a time the step is timed just before every notebook and once more at the
end, and each notebook is scaled by the mean of the measurements just before and just after it. Under
``pytest -n 2`` only the end is measured.

The budget is a notebook's own time, as a learner meets it: one notebook on the machine. Only a run of
one notebook at a time judges it (the test command's third step). Under ``pytest -n 2`` two notebooks
share the cores, and the lessons that train several models at once (``attnedu.runtime.in_parallel``)
then get half of what they would have alone, so such a table shows the times but judges nothing.

The perturbed run (``ATTNEDU_SEED_OFFSET`` set, see ``attnedu.runtime``) must change what it
stands for: a notebook with uncompared outputs none of which changed fails the session, since
then the perturbation did not reach its trained models.
"""

from __future__ import annotations

import importlib.util
import os
from collections import defaultdict
from pathlib import Path

import pytest

pytest_plugins = ["attnedu.nbval_plugin"]  # a kernel that dies of a taken port while starting is started again

BUDGET_SECONDS, BUDGET_MIB = 60, 2048  # per notebook, on the slow reference machine
BUDGET_NOTE = (
    "within budget is informational: a notebook over budget (NO) does not fail this run, because its time depends "
    "on this machine, its load and an estimate of the slow machine; an author who sees NO makes the lesson smaller "
    "before merging it (CONTRIBUTING.md, step 8)"
)
ROOT = Path(__file__).resolve().parent

_seconds: dict[str, float] = defaultdict(float)
_peak_mib: dict[str, float] = {}
_uncompared: dict[str, list[bool]] = defaultdict(list)  # notebook -> one "changed?" per uncompared cell


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


def _text(outputs) -> str:
    """The text nbval would see in a cell's outputs (streams, plain/markdown reprs, errors)."""
    parts = []
    for out in outputs or []:
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(str(out.get("text", "")))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            parts.append(str(data.get("text/markdown", "")) + str(data.get("text/plain", "")))
        elif kind == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if item.path.suffix == ".ipynb" and call.when == "call":
        report = outcome.get_result()
        peak = _kernel_peak_mib(item)
        if peak is not None:
            report.user_properties.append(("kernel_peak_mib", peak))
        cell, fresh = getattr(item, "cell", None), getattr(item, "test_outputs", None)
        if cell is not None and fresh is not None and "nbval-ignore-output" in cell.metadata.get("tags", []):
            report.user_properties.append(("uncompared_changed", _text(fresh) != _text(cell.outputs)))


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration  # setup (kernel start) + every cell
        for key, value in report.user_properties:
            if key == "kernel_peak_mib":
                _peak_mib[path] = max(_peak_mib.get(path, 0.0), value)
            elif key == "uncompared_changed":
                _uncompared[path].append(value)


def _perturbed() -> bool:
    return os.environ.get("ATTNEDU_SEED_OFFSET", "0").strip() not in ("", "0")


def _unreached() -> list[str]:
    """Notebooks with uncompared outputs, none of which the perturbed run changed."""
    return [path for path, changed in sorted(_uncompared.items()) if changed and not any(changed)]


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PYTEST_XDIST_WORKER") or not _perturbed():
        return
    if _unreached() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_reference_module = []  # benchmarks/reference_step.py, loaded once
_reference_before: dict[str, float] = {}  # notebook -> reference step (ms) just before it ran (serial runs only)


def _reference():
    """benchmarks/reference_step.py as a module, or None if it cannot be loaded."""
    if not _reference_module:
        spec = importlib.util.spec_from_file_location("reference_step", ROOT / "benchmarks" / "reference_step.py")
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _reference_module.append(module)
    return _reference_module[0]


def _serial(config) -> bool:
    workers = config.getoption("numprocesses", None) or 0
    return isinstance(workers, int) and workers <= 1


def pytest_runtest_logstart(nodeid, location):
    """Before a notebook's first cell (outside any timed phase): time the reference step, in serial runs."""
    path = nodeid.split("::")[0]
    if path.endswith(".ipynb") and path not in _reference_before and _CONFIG and _serial(_CONFIG[0]):
        module = _reference()
        if module is not None:
            if not _reference_before:
                module.step_ms()  # the first timing in a process can run slow (seen here: up to 1.5x): warm up
            _reference_before[path] = module.step_ms()


_CONFIG = []


def pytest_configure(config):
    _CONFIG.append(config)


def _reference_ms() -> tuple[float, float] | None:
    """(this machine's reference step in ms now, the slow machine's), or None if it cannot be measured."""
    module = _reference()
    if module is None:
        return None
    return sorted(module.step_ms() for _ in range(3))[1], module.SLOW_MACHINE_MS  # median of 3: the step is noisy


def _adjacent_ms(path: str, final_ms: float) -> float:
    """The mean of the reference steps timed just before ``path`` and just after it (the next notebook's, or
    the final one); the final one alone where none was timed before."""
    order = list(_reference_before)  # notebooks in the order they ran
    if path not in _reference_before:
        return final_ms
    i = order.index(path)
    after = _reference_before[order[i + 1]] if i + 1 < len(order) else final_ms
    return (_reference_before[path] + after) / 2


def pytest_terminal_summary(terminalreporter):
    if not _seconds or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    tr = terminalreporter
    workers = tr.config.getoption("numprocesses", None) or 0
    shared = not _serial(tr.config)  # "-n auto" or "-n 2": notebooks shared the cores
    reference = _reference_ms()
    scale = reference[1] / reference[0] if reference else None
    seed_note = f", ATTNEDU_SEED_OFFSET={os.environ['ATTNEDU_SEED_OFFSET']}" if _perturbed() else ""
    for kernels in ("MKL_CBWR", "ATEN_CPU_CAPABILITY"):  # the perturbed run's other CPU kernels (the Makefile)
        if os.environ.get(kernels):
            seed_note += f", {kernels}={os.environ[kernels]}"
    tr.section(f"notebook benchmark (budget {BUDGET_SECONDS} s on the slow machine, {BUDGET_MIB} MiB{seed_note})")
    if reference:
        tr.write_line(
            f"machine speed: reference step {reference[0]:.1f} ms here at the end (median of 3), {reference[1]:.0f} ms "
            f"on the slow machine (benchmarks/reference_step.py): times x {scale:.2f} estimate the slow machine"
        )
        if _reference_before:
            before = _reference_before.values()
            tr.write_line(
                f"timed before each notebook too: {min(before):.1f} to {max(before):.1f} ms; each notebook is scaled "
                "by the mean of the steps timed just before and after it (column 'ref ms')"
            )
    tr.write_line(
        f"{'notebook':<45}{'seconds':>9}{'ref ms':>8}{'slow s':>8}{'peak MiB':>10}{'changed':>9}  within budget"
    )
    for path in sorted(_seconds):
        seconds, peak = _seconds[path], _peak_mib.get(path)
        ref = _adjacent_ms(path, reference[0]) if reference else None
        slow = seconds * reference[1] / ref if reference else None
        ref_text = f"{ref:8.1f}" if ref is not None else f"{'n/a':>8}"
        peak_text = f"{peak:10.0f}" if peak is not None else f"{'n/a':>10}"
        slow_text = f"{slow:8.1f}" if slow is not None else f"{'n/a':>8}"
        changed = _uncompared.get(path, [])
        changed_text = f"{sum(changed)}/{len(changed)}" if changed else "-"
        ok = (slow is None or slow <= BUDGET_SECONDS) and (peak is None or peak <= BUDGET_MIB)
        verdict = "- (shared)" if shared else ("yes" if ok else "NO")
        tr.write_line(f"{path:<45}{seconds:9.1f}{ref_text}{slow_text}{peak_text}{changed_text:>9}  {verdict}")
    tr.write_line(
        "changed: of the outputs nbval does not compare (cells tagged nbval-ignore-output), how many differ "
        "from the stored ones"
    )
    tr.write_line(BUDGET_NOTE)
    if shared:
        tr.write_line(
            f"- (shared): {workers} pytest workers ran notebooks side by side, so these times include sharing "
            "the cores; the budget is judged where notebooks run one at a time (make test, step 3)"
        )
    if _perturbed() and _unreached():
        tr.write_line(
            "FAILED: the perturbed run changed none of the uncompared outputs of "
            + ", ".join(_unreached())
            + ": its trained models do not take their seeds from attnedu.runtime (seeded / training_seed)",
            red=True,
        )
