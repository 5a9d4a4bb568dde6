"""Batch grading: ``python -m attnedu.grade SUBMISSIONS --out scores.csv [--jobs N] [--timeout S]``.

Each submitted notebook runs in its own sandbox (bubblewrap) on a copy; the grader calls each
exercise's function from outside the learner's kernel and compares the outputs with the
references in its own process. See ``attnedu.grading`` for the parts, and the README's
instructor section for what the sandbox promises.
"""

from __future__ import annotations

import sys

from .grading.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
