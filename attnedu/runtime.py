"""Running a notebook the same way everywhere: the one setup call every notebook makes first,
seeds for the models it trains, printing that reads the same on every machine, progress bars, and
training several models at once on the machine's cores (``in_parallel``).

Two kinds of randomness, kept apart:

* ``setup_notebook(seed)`` seeds the *global* generators, which the hand-worked examples of a
  lesson draw from (``torch.randn`` in a cell).
* Every model a lesson trains is built and shuffled from its own seed, through ``seeded(seed)``
  and ``training_seed(seed)``. The test command's perturbed run sets ``ATTNEDU_SEED_OFFSET`` to
  move all of these seeds at once while the data and the hand-worked examples stay the same:
  it stands in for another machine, whose floating-point results differ in the last bits and
  drift apart during training.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

import numpy as np
import torch

from ._validate import check_instance, check_int

# Measured on the course's reference machine (2-core CPU, torch 2.13 CPU): one thread is as
# fast as two for these small models alone, and 3-4x faster when two kernels share the cores
# (pytest -n 2, a grader with --jobs 2). See benchmarks/threads.md for the numbers.
DEFAULT_THREADS = 1
FIGSIZE = (6.4, 4.0)
PROGRESS_ENV = "ATTNEDU_PROGRESS"
SEED_OFFSET_ENV = "ATTNEDU_SEED_OFFSET"


def setup_notebook(seed: int = 0, threads: int = DEFAULT_THREADS) -> None:
    """Seed Python, NumPy and torch; set torch threads; fix print precision and figure size."""
    check_int("seed", seed, "the random seed", minimum=0, maximum=2**32 - 1)
    check_int("threads", threads, "torch threads", minimum=1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_printoptions(precision=3, sci_mode=False)
    np.set_printoptions(precision=3, suppress=True)
    import matplotlib

    matplotlib.rcParams.update({"figure.figsize": FIGSIZE, "figure.dpi": 100, "savefig.dpi": 100})


def seed_offset() -> int:
    """``ATTNEDU_SEED_OFFSET`` as an integer (0 when unset)."""
    text = os.environ.get(SEED_OFFSET_ENV, "0").strip() or "0"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_ENV} must be an integer such as 1000, got {text!r}") from None


def training_seed(seed: int) -> int:
    """The seed a model's initialisation and batch order really use: ``seed`` plus ``ATTNEDU_SEED_OFFSET``."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed should be an int, got {type(seed).__name__}; seed must be an int such as 0")
    return seed + seed_offset()


@contextlib.contextmanager
def seeded(seed: int):
    """Draw from torch's generator seeded with ``training_seed(seed)``, then put the global state back.

    >>> with seeded(0):
    ...     model = torch.nn.Linear(4, 2)   # the same weights on every run, whatever ran before
    """
    with _GLOBAL_GENERATOR_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(training_seed(seed))
        yield


# seeded() borrows the global generator: jobs of in_parallel that build models take turns at it.
_GLOBAL_GENERATOR_LOCK = threading.RLock()


STRICT_ROUNDING_ENV = "ATTNEDU_STRICT_ROUNDING"  # set by tools/run_notebooks.py, where outputs are stored
STRICT_MARGIN, LOOSE_MARGIN = 2e-6, 1e-7  # last-bit differences between CPUs stay well below 2e-6


def rounded(x, decimals: int = 3):
    """``x`` rounded to ``decimals`` places, for printing numbers that must read the same on every machine.

    Two CPUs can compute the same formula with results that differ in the last bits. Rounding
    hides that, except for a value that lies right on a rounding boundary (0.0005 at 3 places),
    and except for the sign of a zero (``-0.000``). So this turns -0.0 into 0.0 and refuses a value
    too near a boundary: when a course author stores outputs (``ATTNEDU_STRICT_ROUNDING=1``, set by
    tools/run_notebooks.py) anything within 2e-6 of one (relative to the value's size, at least 1), so that
    the stored text survives other machines' last bits; elsewhere only a value within 1e-7, where the
    rounding could really go either way. Print long tables of statistics to 2 decimals: fewer values
    then sit near a boundary.
    Accepts a tensor, a float or an int; returns the same kind.
    """
    check_int("decimals", decimals, "decimal places")
    if isinstance(x, bool) or isinstance(x, int):
        return x
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            return x
        values = x.detach().double().flatten().tolist()
    elif isinstance(x, float):
        values = [x]
    else:
        raise TypeError(
            f"x should be a tensor, a float or an int, got {type(x).__name__}: rounded() takes a tensor, a float "
            "or an int; convert a NumPy value with float(x) or torch.as_tensor(x)"
        )
    scale = 10.0**decimals
    margin = STRICT_MARGIN if os.environ.get(STRICT_ROUNDING_ENV) == "1" else LOOSE_MARGIN
    for value in values:
        if not math.isfinite(value):
            continue
        distance = abs(abs(value * scale) % 1.0 - 0.5) / scale  # how far from the nearest xxx.5 boundary
        if distance < margin * max(1.0, abs(value)):
            raise ValueError(
                f"{value!r} lies within {margin:g} of a rounding boundary at {decimals} decimals, so another "
                "machine could print it differently; change the example's seed or print another number of decimals"
            )
    if isinstance(x, torch.Tensor):
        return torch.round(x.detach(), decimals=decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return round(x, decimals) + 0.0


def progress_enabled() -> bool:
    """Progress bars are on unless ``ATTNEDU_PROGRESS=0`` (the test command sets it, since a
    bar's text changes from run to run and nbval compares outputs exactly)."""
    return os.environ.get(PROGRESS_ENV, "1") != "0"


def progress(total: int, desc: str):
    """A tqdm bar (a widget in JupyterLab, text in a terminal), or a silent stand-in.

    Inside a job of ``in_parallel``, ``update()`` also stops the job (``Cancelled``) once another job
    failed or the learner interrupted the kernel: a training loop that shows a bar can be stopped."""
    check_int("total", total, "the number of steps", minimum=0)
    stop = getattr(_job, "stop", None)
    if not progress_enabled():
        return _NoBar(stop)
    from tqdm.auto import tqdm

    class _Bar(tqdm):
        def update(self, n=1):
            _check_stop(stop)
            return super().update(n)

    return _Bar(total=total, desc=desc, leave=True)


class Cancelled(Exception):
    """Raised inside an ``in_parallel`` job at its next progress step after another job failed or the
    kernel was interrupted."""


def _check_stop(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise Cancelled("stopped: another job of in_parallel failed, or the kernel was interrupted")


_job = threading.local()  # .stop: the Event of the in_parallel call this thread works for


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity on Linux; all of them elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def in_parallel(function: Callable, items: Iterable, workers: int | None = None) -> list:
    """``[function(item) for item in items]``, computed in up to ``workers`` threads at once
    (default: one per core this process may use), in the order of ``items``.

    Why threads help: the course's small models spend most of a training step inside PyTorch's C++
    operations, which release Python's interpreter lock, so two threads keep two cores busy and train
    two models in well under the time of one after the other (``benchmarks/parallel.md``). Each model
    comes out exactly as if trained alone: with one torch thread (``setup_notebook``) every operation
    of a job runs on that job's thread, and every job draws its batches from its own generator and
    builds its model under ``seeded``. So ``function`` must not draw from the global generators
    (``torch.randn`` without a generator, dropout) while training.

    If a job raises, or the kernel is interrupted, the others stop at their next progress step and the
    error is raised here.
    """
    if not callable(function):
        raise TypeError(
            f"function should be callable (a function of one item), got {type(function).__name__}; "
            "pass the function itself, e.g. in_parallel(train_one, names), not train_one(names)"
        )
    check_instance("items", items, Iterable, "an iterable of the jobs' arguments (a list, a tuple, a dict's keys)")
    items = list(items)
    workers = available_cores() if workers is None else check_int("workers", workers, "threads at once", minimum=1)
    if len(items) <= 1 or workers == 1:
        return [function(item) for item in items]
    stop = threading.Event()

    def job(item):
        outer, _job.stop = getattr(_job, "stop", None), stop
        try:
            _check_stop(stop)
            return function(item)
        finally:
            _job.stop = outer

    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="attnedu-job") as pool:
        futures = [pool.submit(job, item) for item in items]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and not f.cancelled() and f.exception() is not None]
            if failed:
                raise failed[0].exception()
            return [future.result() for future in futures]
        except BaseException:  # a job failed, or the kernel was interrupted while waiting
            stop.set()  # the running jobs stop at their next progress step; the waiting ones never start
            for future in futures:
                future.cancel()
            raise


class _NoBar:
    def __init__(self, stop: threading.Event | None = None):
        self.stop = stop

    def update(self, n: int = 1) -> None:
        _check_stop(self.stop)

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass
