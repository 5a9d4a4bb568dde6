"""Generate ``exercises/NN_*.ipynb`` from ``solutions/NN_*.ipynb``, the single source.

Each region between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader's markers) becomes
a stub at the marker's indentation: ``# YOUR CODE HERE`` + ``raise NotImplementedError()`` in
code, ``YOUR ANSWER HERE`` in Markdown. Outputs, execution counts and ``metadata.widgets`` are
cleared. A cell with markers must carry the ``solution`` tag (nbgrader's ``solution: true``; a graded prediction,
``attnedu.checks.prediction``, is one too), or the ``prediction`` tag: a function that returns the learner's
prediction, which a later cell compares with a measurement, not graded (lesson 11 until its predictions are graded
ones).

    python -m attnedu.build_exercises            # rewrite exercises/ (refuses to overwrite someone's edits)
    python -m attnedu.build_exercises --check    # exit 1 if exercises/ is out of date
    python -m attnedu.build_exercises --force    # rewrite exercises/ even over edits made in it

Learners work in ``work/``, their own copies (``make lab`` makes them); ``exercises/`` is generated.
So that no one's work is lost all the same, the generator overwrites a notebook in ``exercises/``
only if it wrote that file itself: its content is what the solutions generate now, or what is
committed in git (HEAD or the index), or what this generator last wrote there (the sha256 in
``exercises/.generated.json``, git-ignored). In a tree where it has never run, a notebook that still
looks generated (no outputs, no execution counts, every solution cell still a stub) counts as
generated too. Anything else is somebody's work: it refuses, writes nothing, and says how to keep
it. It never writes into ``work/``.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUBS = {"code": ("# YOUR CODE HERE", "raise NotImplementedError()"), "markdown": ("YOUR ANSWER HERE",)}
MANIFEST = ".generated.json"  # in the exercises folder: name -> sha256 of what this generator last wrote
WORK = "work"  # the learners' own copies (tools/lab.py): never written here


def strip_solutions(source: str, cell_type: str, where: str = "a cell") -> str:
    """Replace every solution region of ``source`` by the stub for ``cell_type``, at the marker's indentation."""
    lines, inside, indent = [], False, ""
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ValueError(f"{where}, line {number}: {BEGIN} inside another solution region (no {END} before)")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            lines += [indent + stub for stub in STUBS[cell_type]]
        elif marker == END:
            if not inside:
                raise ValueError(f"{where}, line {number}: {END} without a {BEGIN} before it")
            inside = False
        elif not inside:
            lines.append(line)
    if inside:
        raise ValueError(f"{where}: {BEGIN} is never closed; add a line `{END}` after the solution")
    return "\n".join(lines)


def make_exercise(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The exercise notebook for one solution notebook (the input is not modified)."""
    nb = copy.deepcopy(solution)
    nb.metadata.pop("widgets", None)
    if "language_info" in nb.metadata:  # the version of the Python that ran the solutions is noise here
        nb.metadata["language_info"] = {"name": nb.metadata["language_info"].get("name", "python")}
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        has_markers = BEGIN in cell.source or END in cell.source
        tagged = {"solution", "prediction"} & set(cell.metadata.get("tags", []))
        if has_markers != bool(tagged):
            raise ValueError(
                f"{where}: a cell with {BEGIN}/{END} markers must be tagged 'solution' (a graded exercise) or "
                "'prediction' (the learner's prediction, compared after a run, not graded), and a cell with either "
                "tag must contain the markers"
            )
        if has_markers:
            cell.source = strip_solutions(cell.source, cell.cell_type, where)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    """The file contents nbformat.write would produce (compared byte for byte by --check)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def expected_files(solutions: Path) -> dict[str, str]:
    """Exercise file name -> contents, for every solutions/*.ipynb."""
    files = {}
    for path in sorted(solutions.glob("*.ipynb")):
        files[path.name] = render(make_exercise(nbformat.read(path, as_version=4), str(path)))
    return files


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _manifest(exercises: Path) -> dict[str, str] | None:
    """What the generator last wrote into ``exercises`` (None if it never wrote there with a manifest)."""
    try:
        data = json.loads((exercises / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


def _committed(path: Path) -> set[str]:
    """sha256 of ``path``'s text as committed in git (HEAD) and as staged (the index); empty without git."""
    found = set()
    for spec in (f"HEAD:./{path.name}", f":./{path.name}"):
        try:
            done = subprocess.run(["git", "show", spec], cwd=path.parent, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            found.add(hashlib.sha256(done.stdout).hexdigest())
    return found


def looks_generated(text: str) -> bool:
    """No outputs, no execution counts, and every solution cell still holds its stub: as the generator writes."""
    try:
        nb = json.loads(text)
        for cell in nb["cells"]:
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            if cell.get("cell_type") == "code" and (cell.get("outputs") or cell.get("execution_count") is not None):
                return False
            if "solution" in cell.get("metadata", {}).get("tags", []):
                if not all(stub in source for stub in STUBS.get(cell.get("cell_type"), ())):
                    return False
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    return True


def edited(exercises: Path, expected: dict[str, str]) -> list[str]:
    """Names of the notebooks in ``exercises`` that writing ``expected`` would overwrite, and that this generator
    did not write (someone's work): see the module's docstring."""
    manifest = _manifest(exercises)
    found = []
    for name, text in expected.items():
        path = exercises / name
        if not path.exists():
            continue
        current = path.read_text(encoding="utf-8")
        if current == text:
            continue
        digest = _sha(current)
        if manifest is not None and manifest.get(name) == digest:
            continue
        if digest in _committed(path):
            continue
        if manifest is None and looks_generated(current):
            continue
        found.append(name)
    return found


def is_work_folder(exercises: Path) -> bool:
    """Whether ``exercises`` is a learners' ``work/`` folder (or lies inside one)."""
    path = exercises.resolve()
    return path.name == WORK or any(
        parent.name == WORK and (parent.parent / "solutions").is_dir() for parent in path.parents
    )


def keep_instructions(exercises: Path, names: list[str]) -> str:
    """How to keep the edited notebooks ``names`` before the generator rewrites them."""
    lines = []
    work = exercises.resolve().parent / WORK
    for name in names:
        target = work / name
        if target.exists():
            target = work / f"{Path(name).stem}-from-exercises.ipynb"
        lines.append(f"    mkdir -p {_rel(work)} && cp {_rel(exercises / name)} {_rel(target)}")
    return "\n".join(lines)


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class EditedError(RuntimeError):
    """The generator would overwrite notebooks that someone edited."""


def build(solutions: Path, exercises: Path, force: bool = False) -> list[Path]:
    """Write every exercise notebook into ``exercises``; EditedError (and nothing written) if that would overwrite
    someone's edits, unless ``force``."""
    if is_work_folder(exercises):
        raise EditedError(f"{exercises} is a learners' work folder: the generator never writes there")
    expected = expected_files(solutions)
    exercises.mkdir(parents=True, exist_ok=True)
    if not force:
        names = edited(exercises, expected)
        if names:
            raise EditedError(
                f"not writing anything: {', '.join(str(exercises / n) for n in names)} "
                f"{'has' if len(names) == 1 else 'have'} changes that this generator did not write (your work?).\n"
                f"To keep them, copy them into {WORK}/, the learner's own folder, which nothing overwrites:\n"
                f"{keep_instructions(exercises, names)}\n"
                "then run this again with --force, which overwrites them (or `git checkout exercises/` restores "
                "the course's copies)."
            )
    manifest = _manifest(exercises) or {}
    written = []
    for name, text in expected.items():
        (exercises / name).write_text(text, encoding="utf-8")
        manifest[name] = _sha(text)
        written.append(exercises / name)
    (exercises / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return written


def out_of_date(solutions: Path, exercises: Path) -> list[str]:
    """What differs between ``exercises`` and what ``build`` would write (empty: up to date)."""
    expected = expected_files(solutions)
    problems = []
    for name, text in expected.items():
        path = exercises / name
        if not path.exists():
            problems.append(f"{path} is missing")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{path} differs from what {solutions / name} generates")
    problems += [f"{p} has no solution notebook" for p in sorted(exercises.glob("*.ipynb")) if p.name not in expected]
    return problems


def out_of_date_message(solutions: Path, exercises: Path, problems: list[str]) -> str:
    """What to do about ``problems`` (from :func:`out_of_date`): regenerate, unless that would overwrite edits."""
    names = edited(exercises, expected_files(solutions))
    if names:
        return (
            f"{', '.join(names)} in {exercises}/ {'has' if len(names) == 1 else 'have'} edits that the generator "
            f"did not write. If that is your own work, keep it in {WORK}/, the learner's own folder:\n"
            f"{keep_instructions(exercises, names)}\n"
            "`python -m attnedu.build_exercises` then refuses to overwrite them until you add --force, which "
            "discards the edits (so does `git checkout exercises/`). Learners: work in work/ (`make lab` fills it)."
        )
    return f"{exercises}/ is out of date: run `python -m attnedu.build_exercises`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if exercises/ is out of date")
    parser.add_argument(
        "--force", action="store_true", help="overwrite notebooks in exercises/ even if someone edited them"
    )
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument("--exercises", type=Path, default=Path("exercises"))
    args = parser.parse_args(argv)
    if not any(args.solutions.glob("*.ipynb")):
        print(f"no solution notebooks in {args.solutions}/ (run from the repository root)", file=sys.stderr)
        return 2
    if args.check:
        problems = out_of_date(args.solutions, args.exercises)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(out_of_date_message(args.solutions, args.exercises, problems), file=sys.stderr)
            return 1
        print(f"{args.exercises}/ is up to date")
        return 0
    try:
        written = build(args.solutions, args.exercises, force=args.force)
    except EditedError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
