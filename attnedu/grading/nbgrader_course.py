"""An nbgrader course directory, made from ``solutions/``, the single source of the exercise notebooks.

    python -m attnedu.grading.nbgrader_course DIR [--solutions solutions] [--no-release]
    make nbgrader-course                   # the same, into nbgrader_course/ (git-ignored)

One assignment per exercise notebook, named as the notebook (``07_positional_encoding``), holding that one
notebook. In ``DIR`` it writes:

* ``source/<assignment>/<assignment>.ipynb``: the solution notebook, with each exercise's check cell (grade id
  ``check_<exercise>``, locked) made an autograder test cell worth :data:`POINTS` (one point, as the course
  grader's table gives each exercise). The solution cells keep nbgrader's ``### BEGIN SOLUTION`` markers, from
  which ``nbgrader generate_assignment`` makes the same stubs as ``python -m attnedu.build_exercises``;
* ``nbgrader_config.py``: the course id, the course root (this folder, wherever nbgrader is run from), deleted
  check cells put back when grading (``OverwriteCells.add_missing_cells``), a learner's copy of ``exercises/``
  graded as a released notebook (:class:`.nbgrader_scores.AsReleased`), autograding done by the course's own
  grader, each submission in its sandbox (:mod:`.nbgrader_scores`), in place of nbgrader's execution of the
  learner's notebook in the instructor's account, and feedback without :data:`GUARD`;
* unless ``--no-release``: ``nbgrader generate_assignment`` run on every assignment (in this process), which
  records the assignments in the gradebook (``gradebook.db``) and writes the student notebooks to ``release/``.

No roster is needed: ``nbgrader autograde`` adds each student it grades (``nbgrader db student import`` takes a
roster all the same). A folder that holds something other than a course this command wrote is refused.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import re
import shutil
import sys
from pathlib import Path

import nbformat

POINTS = 1.0  # per exercise: the course grader's maximum (a graded prediction may score part of it)
COURSE_ID = "attnedu"
CHECK_PREFIX = "check_"
CONFIG = "nbgrader_config.py"
MARK = "# written by python -m attnedu.grading.nbgrader_course"
CONFIG_TEXT = f'''{MARK}; rewritten each time it runs.
"""nbgrader's configuration for the attnedu course (docs/instructors.md, "Grading with nbgrader")."""

import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

from attnedu.grading.nbgrader_scores import autograde_preprocessors, sanitize_preprocessors

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = "{COURSE_ID}"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))  # this folder, wherever nbgrader runs from

# A check cell the learner deleted is put back (and graded), as the course grader grades every exercise anyway.
c.OverwriteCells.add_missing_cells = True
# A learner's copy of exercises/ (work/ in make lab and make hub) is graded as a released notebook: its check cells
# get the gradebook's grade flags and points before OverwriteCells restores them from the gradebook.
c.Autograde.sanitize_preprocessors = sanitize_preprocessors()

# Autograding: the course's grader runs each submission in its own sandbox (bubblewrap) and writes each check
# cell's outputs: the diagnosis, and the points as nbgrader's partial credit. nbgrader's own Execute step, which
# would run the learner's code in your account, is not used.
c.Autograde.autograde_preprocessors = autograde_preprocessors()
c.CourseGrader.timeout = 300  # seconds for a notebook's own cells (python -m attnedu.grade --timeout)
c.CourseGrader.time_limit = 5  # seconds per call of a learner's function (--time-limit)
c.CourseGrader.memory_gb = 4  # memory cap of each process of a submission (--memory-gb)
c.CourseGrader.feedback = "diagnosis"  # what a check cell's output says: full, diagnosis or score (--feedback)
c.CourseGrader.no_sandbox = False  # True grades without bubblewrap: unsafe (docs/instructors.md)

# The learner's feedback, without the hidden line that autograde put back in each check cell (nbgrader_course.GUARD).
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
'''


# Hidden from the learner (generate_assignment removes it, and generate_feedback again), put back by autograde: a
# check cell run by nbgrader's own
# Execute step (the course's config failed to load, or is not used) raises, and scores 0. Without it, each check cell
# would score full marks there: nbgrader gives them to a cell that shows anything but a number, and a check shows
# its result. The course's grader (nbgrader_scores) runs the cells as the learner saw them, without this.
GUARD = f"""### BEGIN HIDDEN TESTS
raise RuntimeError("nbgrader's own Execute step cannot score this course's checks: use the course's {CONFIG}")
### END HIDDEN TESTS"""
PREDICTION_CELL = {"grade": False, "locked": False, "schema_version": 3, "solution": True, "task": False}


def _defined(source: str) -> str | None:
    """The name of the first function ``source`` defines."""
    found = re.search(r"^def (\w+)\(", source, re.MULTILINE)
    return found.group(1) if found else None


def exercise_of(cell) -> str | None:
    """The exercise a check cell checks (its grade id without ``check_``), or None for any other cell."""
    meta = cell.get("metadata", {}).get("nbgrader")
    tags = cell.get("metadata", {}).get("tags", [])
    if not meta or "check" not in tags or meta.get("solution"):
        return None
    grade_id = str(meta.get("grade_id", ""))
    return grade_id[len(CHECK_PREFIX) :] if grade_id.startswith(CHECK_PREFIX) else None


def source_notebook(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """nbgrader's source notebook for one solution notebook (the input is not modified): every check cell an
    autograder test cell worth :data:`POINTS`; ValueError if an exercise of the lesson has no check cell, or two."""
    from ..checks import LESSONS

    nb = copy.deepcopy(solution)
    lesson = nb.metadata.get("attnedu", {}).get("lesson")
    if lesson not in LESSONS:
        raise ValueError(f"{name}: metadata attnedu.lesson is {lesson!r}; expected one of {', '.join(LESSONS)}")
    found = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        if "prediction" in cell.metadata.get("tags", []) and "nbgrader" not in cell.metadata:
            # a prediction compared after a run, not graded (attnedu.build_exercises): an ungraded solution cell
            cell.metadata["nbgrader"] = dict(PREDICTION_CELL, grade_id=f"prediction_{_defined(cell.source) or cell.id}")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            # after a final newline nbgrader keeps an empty line, which attnedu.build_exercises drops (splitlines)
            cell.source = cell.source.removesuffix("\n")
        exercise = exercise_of(cell)
        if exercise is None:
            continue
        if exercise not in LESSONS[lesson]:
            raise ValueError(f"{name}: check cell {CHECK_PREFIX}{exercise} checks no exercise of lesson {lesson}")
        cell.metadata.nbgrader.update(grade=True, points=POINTS, locked=True)
        cell.source = f"{cell.source}\n{GUARD}"
        found.append(exercise)
    if sorted(found) != sorted(LESSONS[lesson]):
        raise ValueError(
            f"{name}: expected one check cell per exercise of lesson {lesson} ({', '.join(LESSONS[lesson])}), "
            f"found {', '.join(found) or 'none'}"
        )
    return nb


def _ours(course: Path) -> bool:
    """Whether ``course`` is empty, or a course directory this command wrote."""
    if not course.exists():
        return True
    if not course.is_dir():
        return False
    config = course / CONFIG
    return not any(course.iterdir()) or (config.is_file() and config.read_text(encoding="utf-8").startswith(MARK))


def write_course(solutions: Path, course: Path, release: bool = True) -> list[str]:
    """Write the course directory (see the module's docstring); returns the assignments."""
    paths = sorted(solutions.glob("*.ipynb"))
    if not paths:
        raise ValueError(f"no solution notebooks in {solutions}/ (run from the repository root, or give --solutions)")
    if not _ours(course):
        raise ValueError(
            f"{course} exists and is not a course directory written by this command (no {CONFIG} of its own): "
            "give an empty or new folder"
        )
    notebooks = {path.stem: source_notebook(nbformat.read(path, as_version=4), str(path)) for path in paths}
    for assignment, nb in notebooks.items():
        folder = course / "source" / assignment
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    (course / CONFIG).write_text(CONFIG_TEXT, encoding="utf-8")
    if release:
        generate_assignments(course, list(notebooks))
    return list(notebooks)


def generate_assignments(course: Path, assignments: list[str]) -> None:
    """``nbgrader generate_assignment --force`` on each assignment, in this process, with the course's config."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    _alembic_on_path()
    config = Config()
    config.CourseDirectory.root = str(course.resolve())
    config.CourseDirectory.course_id = COURSE_ID
    coursedir = CourseDirectory(config=config)
    for assignment in assignments:
        coursedir.assignment_id = assignment
        app = GenerateAssignment(coursedir=coursedir, config=config)
        app.force = app.create_assignment = True
        try:
            app.start()
        except Exception as err:  # nbgrader's NbGraderException; its log says what failed
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed: {err}") from err


def _alembic_on_path() -> None:
    """nbgrader creates a gradebook by running the command ``alembic``, found on PATH: the virtual environment's,
    which PATH lacks when nbgrader is started as .venv/bin/python without activating the environment."""
    here = str(Path(sys.executable).parent)
    if shutil.which("alembic") is None and (Path(here) / "alembic").exists():
        os.environ["PATH"] = here + os.pathsep + os.environ.get("PATH", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("course", type=Path, help="the course directory to write (new, empty, or written by this)")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"))
    parser.add_argument(
        "--no-release", action="store_true", help="write source/ and the config only; no generate_assignment"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")  # nbgrader's errors, if any
    try:
        assignments = write_course(args.solutions, args.course, release=not args.no_release)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.course}: {len(assignments)} assignments ({', '.join(assignments)})")
    if not args.no_release:
        print(f"student notebooks in {args.course / 'release'}; gradebook {args.course / 'gradebook.db'}")
    print(f"then, from {args.course}: nbgrader autograde ASSIGNMENT; nbgrader generate_feedback ASSIGNMENT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
