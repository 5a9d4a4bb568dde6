"""The repository stands alone: no tracked file refers to a path outside it.

A contributor who clones the course has the repository and nothing else, so a pointer to the authors' workspace
(``/work/...``, a sibling folder such as ``../notes``), to someone's home folder (``/home/<name>``, ``/Users/<name>``,
``/root/``, ``~/notes``), any relative path that climbs out of the repository, or the course authors' working notes
by name (``STYLE.md``, ``SYLLABUS.md``, ``experiments.md``, ``performance.md``, ``tooling.md``: the notes the course
grew from, which do not ship, unless the repository has a file of that name) is a pointer to nothing: what it
pointed to belongs in ``docs/`` (the style, the experiment rules and the timing protocol: ``docs/style.md``). A
home-relative path into a dot-folder (``~/.triton/cache``) names a tool's own cache or settings on whatever machine
runs it, and is allowed. Every other exception is listed in ``ALLOWED`` with its reason, and an exception that no
longer matches anything fails the test too.

Every file ``git ls-files`` lists is read as text (binary files are skipped); a notebook's cell sources and text
outputs are read, not its images. This file is left out: its patterns and exceptions are what it looks for.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

_START = r"(?<![\w.~/-])"  # not in the middle of a word or of a longer path (course/work/ is the repository's own)
OUTSIDE = {
    "the authors' workspace": re.compile(_START + r"/work/"),
    "a home folder": re.compile(_START + r"/(?:home|Users)/[A-Za-z_][\w.-]*|" + _START + r"/root/"),
    "a path in someone's home folder": re.compile(r"(?<![\w/])~/(?!\.)"),
}
NOTES = re.compile(r"(?<![\w.-])(?:STYLE|SYLLABUS|experiments|performance|tooling)\.md\b")
CLIMB = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.-]*)")  # ../x, ../../x: resolved from the file's own folder

# (file, what matched) -> why it is not a pointer outside the repository
ALLOWED = {
    (".gitignore", "/work/"): "the ignore pattern of the learner's work/ folder at the repository's root",
    ("tests/test_workspace.py", "/work/"): "checks that ignore pattern in .gitignore",
    ("docs/instructors.md", "/home/jovyan"): "the home folder of the user of Jupyter's Docker images, inside the "
    "container an instructor deploys (where the course and the learner's work/ go), not a path on anyone's machine",
    ("hub/z2jh-values.yaml", "/home/jovyan"): "that home folder, in the image Zero to JupyterHub runs for a learner",
    ("hub/z2jh-chart-4.4.0/values.yaml", "/home/jovyan"): "that home folder, in the chart's own defaults (vendored)",
    ("tests/test_hub.py", "/home/jovyan"): "checks the Zero to JupyterHub values' paths in that image",
    ("hub/singleuser.py", "~/"): "the folder the class hub makes in each learner's own home (~/attnedu) on the hub's "
    "machine, where their work/ lives",
    ("jupyterhub_config.py", "~/"): "the same folder in each learner's home, described",
    ("docs/instructors.md", "~/"): "the same folder in each learner's home, described for instructors",
}


def outside_paths(path: str, text: str, names: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(what kind, what matched) for every reference in ``text`` (the content of ``path``, relative to the
    repository's root) to a path outside the repository; ``names``: the names of the repository's files."""
    found = [(kind, m.group(0)) for kind, pattern in OUTSIDE.items() for m in pattern.finditer(text)]
    found += [("notes that are not in the repository", m.group(0)) for m in NOTES.finditer(text)
              if m.group(0) not in names]  # fmt: skip
    folder = (ROOT / path).parent
    for m in CLIMB.finditer(text):
        target = (folder / m.group(1) / m.group(2)).resolve()
        if target != ROOT and ROOT not in target.parents:
            found.append(("a relative path that leaves the repository", m.group(0)))
    return found


def _text(path: Path) -> str | None:
    """The file's text (a notebook's sources and text outputs), or None for a binary file."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\0" in text:
        return None
    if path.suffix == ".ipynb":
        parts = []
        for cell in json.loads(text).get("cells", []):
            parts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("text", "")))
                for mime, value in output.get("data", {}).items():
                    if mime.startswith("text/"):
                        parts.append("".join(value) if isinstance(value, list) else str(value))
        return "\n".join(parts)
    return text


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    done = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return [name for name in done.stdout.decode().split("\0") if name]


def test_the_scan_sees_paths_outside_and_lets_the_repositorys_own_through():
    flagged = {
        "CONTRIBUTING.md": "The style is in `../notes/STYLE.md`.",
        "docs/style.md": "see [the notes](../../notes.md)",
        "benchmarks/calibrate.py": "rules in /work/notes/reference/experiments.md",
        "tests/test_x.py": 'Path("/home/alice/attnedu")',
        "README.md": "copied from /Users/bob/course and /root/notes",
        "docs/contributors.md": "as in ~/notes/style.md",
        "tests/test_flash.py": "x == 512 * 2**20  # performance.md: 512 MiB at 4k",
    }
    for path, text in flagged.items():
        assert outside_paths(path, text), (path, text)
    fine = {
        "docs/contributors.md": "[README](../README.md), [benchmarks](../benchmarks/notebooks.md)",
        "solutions/01_rnn_bottleneck.ipynb": "the lesson, ../notebooks/01_rnn_bottleneck.ipynb",
        "tests/test_workspace.py": "cp course/exercises/x.ipynb course/work/x.ipynb; ./work/ and work/",
        "benchmarks/gpu_bench.md": "Triton caches compiled kernels in ~/.triton/cache",
        "attnedu/bench.py": "python -m attnedu.bench --out /tmp/b",
    }
    for path, text in fine.items():
        assert not outside_paths(path, text), (path, outside_paths(path, text))
    assert not outside_paths("tests/test_x.py", "see performance.md", frozenset({"performance.md"}))  # now shipped


def test_no_tracked_file_refers_to_a_path_outside_the_repository():
    found, allowed_seen = [], set()
    files = tracked_files()
    names = frozenset(Path(name).name for name in files)
    for name in files:
        path = ROOT / name
        if name == SELF or path.is_symlink() or not path.is_file():
            continue
        text = _text(path)
        if text is None:
            continue
        for kind, matched in outside_paths(name, text, names):
            if (name, matched) in ALLOWED:
                allowed_seen.add((name, matched))
            else:
                found.append(f"{name}: {matched!r} ({kind})")
    assert not found, "references to paths outside the repository (what they point to belongs in docs/):\n" + (
        "\n".join(found)
    )
    assert allowed_seen == set(ALLOWED), f"exceptions that no longer match anything: {set(ALLOWED) - allowed_seen}"
