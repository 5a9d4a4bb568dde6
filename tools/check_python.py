"""Refuse, at once, a Python older than the course's pins need. What `make lab` (and every make target that builds
the course's virtual environment) runs first, with the Python it is about to use:

    python3 tools/check_python.py

The oldest Python allowed is read from pyproject.toml's ``requires-python`` (the one place it is written). The
pinned versions in constraints.txt decide it: numpy 2.4.6 and ipython 9.18.1 publish no wheels for Python 3.10, so
pip on 3.10 stops halfway through the install with "No matching distribution found". Standard library only, and no
syntax newer than Python 3.6 (f-strings), so that an old Python can run it and say what is wrong.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def oldest_allowed():
    """(major, minor) from pyproject.toml's ``requires-python = ">=X.Y"``."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as handle:
        found = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)"', handle.read(), re.MULTILINE)
    if found is None:
        raise SystemExit('tools/check_python.py: pyproject.toml has no requires-python = ">=X.Y" line')
    return int(found.group(1)), int(found.group(2))


def main():
    major, minor = oldest_allowed()
    here = sys.version_info
    if (here[0], here[1]) >= (major, minor):
        return 0
    need = f"{major}.{minor}"
    print(
        f"This course needs Python {need} or newer; {sys.executable or 'this Python'} is Python "
        f"{here[0]}.{here[1]}.{here[2]}.\n"
        f"Its pinned packages (numpy 2.4.6, ipython 9.18.1, ...) have no release for Python {here[0]}.{here[1]}, "
        f"so the install\nwould stop halfway. Install Python {need} or newer, then run make with it, for example:\n"
        f"  Ubuntu 22.04: sudo apt install python{need} python{need}-venv\n"
        f"  macOS: python.org's installer, or Homebrew (brew install python@{need})\n"
        f"  then: make lab PYTHON=python{need}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
