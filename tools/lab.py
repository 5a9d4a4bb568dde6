"""Open the course in JupyterLab: served from the repository root (so the file browser reaches
notebooks/ and exercises/), with lesson 01 open. What `make lab` runs.

    python tools/lab.py [extra jupyter lab options, e.g. --no-browser --port=8890]

As root (common in containers) JupyterLab refuses to start without --allow-root; this adds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_LESSON = "notebooks/01_rnn_bottleneck.ipynb"


def command(extra: list[str] | None = None, root: Path = ROOT) -> list[str]:
    """The `jupyter lab` command line for the course rooted at ``root``."""
    args = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.default_url=/lab/tree/{FIRST_LESSON}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    return args + list(extra or [])


if __name__ == "__main__":
    if not (ROOT / FIRST_LESSON).exists():
        sys.exit(f"{FIRST_LESSON} is missing under {ROOT}; run this from a clone of the course")
    sys.exit(subprocess.call(command(sys.argv[1:])))
