"""Run notebooks top to bottom in a fresh kernel and store their outputs, as nbval will
reproduce them: python3 kernel, progress bars off, widget state and timing metadata dropped.

    python tools/run_notebooks.py notebooks/01_rnn_bottleneck.ipynb [...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def run(path: Path, timeout: int = 600) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    elapsed = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    # drop per-cell metadata noise, keep outputs and counts (nbval needs both)
    subprocess.run(
        [sys.executable, "-m", "nbstripout", "--keep-output", "--keep-count", "--keep-id", str(path)], check=True
    )
    return elapsed


if __name__ == "__main__":
    os.environ["ATTNEDU_PROGRESS"] = "0"
    os.environ["ATTNEDU_STRICT_ROUNDING"] = "1"  # stored numbers must sit well away from rounding boundaries
    for arg in sys.argv[1:]:
        seconds = run(Path(arg))
        print(f"{arg}: {seconds:.1f} s")
