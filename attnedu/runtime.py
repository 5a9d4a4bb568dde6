"""The one setup call every notebook makes first, and the progress-bar switch."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

# Measured on the course's reference machine (2-core CPU, torch 2.13 CPU): one thread is as
# fast as two for these small models alone, and 3-4x faster when two kernels share the cores
# (pytest -n 2, a grader with --jobs 2). See benchmarks/threads.md for the numbers.
DEFAULT_THREADS = 1
FIGSIZE = (6.4, 4.0)
PROGRESS_ENV = "ATTNEDU_PROGRESS"


def setup_notebook(seed: int = 0, threads: int = DEFAULT_THREADS) -> None:
    """Seed Python, NumPy and torch; set torch threads; fix print precision and figure size."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_printoptions(precision=3, sci_mode=False)
    np.set_printoptions(precision=3, suppress=True)
    import matplotlib

    matplotlib.rcParams.update({"figure.figsize": FIGSIZE, "figure.dpi": 100, "savefig.dpi": 100})


def progress_enabled() -> bool:
    """Progress bars are on unless ``ATTNEDU_PROGRESS=0`` (the test command sets it, since a
    bar's text changes from run to run and nbval compares outputs exactly)."""
    return os.environ.get(PROGRESS_ENV, "1") != "0"


def progress(total: int, desc: str):
    """A tqdm bar (a widget in JupyterLab, text in a terminal), or a silent stand-in."""
    if not progress_enabled():
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=True)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass
