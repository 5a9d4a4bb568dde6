"""Generate ``exercises/NN_*.ipynb`` from ``solutions/NN_*.ipynb``, the single source.

Each region between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader's markers) becomes
a stub at the marker's indentation: ``# YOUR CODE HERE`` + ``raise NotImplementedError()`` in
code, ``YOUR ANSWER HERE`` in Markdown. Outputs, execution counts and ``metadata.widgets`` are
cleared. A cell with markers must carry the ``solution`` tag (nbgrader's ``solution: true``).

    python -m attnedu.build_exercises            # rewrite exercises/
    python -m attnedu.build_exercises --check    # exit 1 if exercises/ is out of date
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUBS = {"code": ("# YOUR CODE HERE", "raise NotImplementedError()"), "markdown": ("YOUR ANSWER HERE",)}


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
        if has_markers != ("solution" in cell.metadata.get("tags", [])):
            raise ValueError(
                f"{where}: a cell with {BEGIN}/{END} markers must be tagged 'solution', and a cell tagged "
                "'solution' must contain the markers"
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


def build(solutions: Path, exercises: Path) -> list[Path]:
    exercises.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in expected_files(solutions).items():
        (exercises / name).write_text(text, encoding="utf-8")
        written.append(exercises / name)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if exercises/ is out of date")
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
            print("exercises/ is out of date: run `python -m attnedu.build_exercises`", file=sys.stderr)
            return 1
        print(f"{args.exercises}/ is up to date")
        return 0
    for path in build(args.solutions, args.exercises):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
