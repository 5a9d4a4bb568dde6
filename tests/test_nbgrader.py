"""nbgrader on the course's exercises: the course directory made from solutions/, and the real nbgrader commands.

* ``generate_assignment`` (run by ``python -m attnedu.grading.nbgrader_course``) on every exercise notebook gives
  student notebooks with exercises/' cells: the same types, sources and ids;
* ``autograde`` on a class of one lesson (LESSON: its solution runs in about 2 s, and it has plain functions and a
  graded prediction with partial credit): correct, untouched, one wrong answer per exercise (a mutant of each from
  the checks' galleries; half a prediction), a notebook that raises, a deleted check cell, and forged scores (the
  course grader's forger, plus a check cell edited to show full marks, its points raised and a stored output), and a
  learner's ``work/`` copy of exercises/' notebook (not the released one) filled in, gives per exercise the points
  that ``python -m attnedu.grade`` gives the same notebooks;
* ``generate_feedback`` gives each learner the course's diagnosis of each exercise, its score, and the hint call for
  each exercise not yet right, without the check cells' hidden line.
"""

from __future__ import annotations

import csv
import html
import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from galleries import MUTANTS, PREDICTIONS
from test_grading import FORGER, insert_after

from attnedu.checks import LESSONS
from attnedu.grading import sandbox
from attnedu.grading.nbgrader_course import CHECK_PREFIX, GUARD
from attnedu.grading.reports import HINT_CALL

ROOT = Path(__file__).resolve().parent.parent
LESSON = "07_positional_encoding"
TIMEOUT, TIME_LIMIT = 60, 2  # the same for both graders
BIN = Path(sys.executable).parent
ENV = {
    **os.environ,
    "ATTNEDU_PROGRESS": "0",
    "PYTHONPATH": str(ROOT),  # this tree's attnedu, in nbgrader's process and the grader's
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # nbgrader, and the alembic it runs
}
STUDENTS = ("correct", "untouched", "wrong", "raises", "deleted_check", "forged", "work_copy")


def run(*command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("course")
    run(sys.executable, "-m", "attnedu.grading.nbgrader_course", str(course), cwd=ROOT, timeout=300)
    return course


def cells(nb) -> list[tuple[str, str, str]]:
    return [(cell.cell_type, cell.source, cell.get("id")) for cell in nb.cells]


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("*.ipynb")), ids=lambda p: p.stem)
def test_generate_assignment_gives_the_exercise_notebooks(course, path):
    released = nbformat.read(course / "release" / path.stem / path.name, as_version=4)
    assert cells(released) == cells(nbformat.read(path, as_version=4))
    source = nbformat.read(course / "source" / path.stem / path.name, as_version=4)
    checks = [c for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert [c.metadata.nbgrader.grade_id for c in checks] == [CHECK_PREFIX + n for n in LESSONS[path.stem]]
    assert all(c.metadata.nbgrader.points == 1 and c.source.endswith(GUARD) for c in checks)


def test_a_work_copy_gets_the_gradebooks_check_cells(course):
    """nbgrader's steps before grading (the course's: AsReleased before OverwriteCells) on a learner's copy of
    exercises/ whose check cells were edited (one forged to show full marks, one unmarked as a solution): every check
    cell leaves them as the gradebook has it, source, flags and points, and no step raises."""
    from nbgrader.api import Gradebook
    from nbgrader.utils import compute_checksum

    from attnedu.grading.nbgrader_scores import sanitize_preprocessors

    nb = nbformat.read(ROOT / "exercises" / f"{LESSON}.ipynb", as_version=4)
    checks = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith(CHECK_PREFIX)]
    checks[0].source = "1.0"
    checks[0].metadata.nbgrader.update(grade=True, points=100.0)
    checks[-1].metadata.nbgrader.update(solution=True, locked=False)
    db_url = f"sqlite:///{course / 'gradebook.db'}"
    resources = {"nbgrader": {"notebook": LESSON, "assignment": LESSON, "db_url": db_url}}
    for step in sanitize_preprocessors():
        nb, resources = step().preprocess(nb, resources)
    with Gradebook(db_url, "attnedu") as gradebook:
        source = {c.name: c for c in gradebook.find_notebook(LESSON, LESSON).source_cells}
        expected = {c.name: (c.source, c.checksum) for c in source.values() if c.name.startswith(CHECK_PREFIX)}
    got = {c.metadata.nbgrader.grade_id: (c.source, compute_checksum(c)) for c in checks}
    assert got == expected
    assert all(c.metadata.nbgrader.points == 1 and c.source.endswith(GUARD) for c in checks)


# --------------------------------------------------------------------------------------------
# A class of one lesson, graded by both
# --------------------------------------------------------------------------------------------


def wrong_answer(exercise: str) -> str:
    """A likely mistake for ``exercise``, as a learner writes it: the first of its gallery's mutants (with the
    gallery's helpers it calls); for a graded prediction, one worth half."""
    for name, function, status, *_ in PREDICTIONS:
        if name == exercise and status == "partial":
            return _renamed(function, exercise)
    for name, function, _ in MUTANTS:
        if name == exercise:
            return "\n\n".join([*_helpers(function), _renamed(function, exercise)])
    raise AssertionError(f"no mutant of {exercise} in the galleries")


def _helpers(function) -> list[str]:
    """The source of every function of the gallery that ``function`` calls or takes as a default, each after the
    ones it needs."""
    found = []
    used = [*inspect.getclosurevars(function).globals.values(), *(function.__defaults__ or ())]
    for value in used:
        if inspect.isfunction(value) and value.__module__ == function.__module__:
            found += [*_helpers(value), inspect.getsource(value)]
    return list(dict.fromkeys(found))


def _renamed(function, name: str) -> str:
    source = inspect.getsource(function)
    return source.replace(f"def {function.__name__}(", f"def {name}(", 1)


def class_of(course: Path) -> dict[str, nbformat.NotebookNode]:
    """The learners' notebooks: each made from the released one as a learner fills it in, but ``work_copy``, made
    from exercises/' (what ``make lab`` and ``make hub`` copy to a learner's work/)."""
    released = nbformat.read(course / "release" / LESSON / f"{LESSON}.ipynb", as_version=4)
    answers = {c.id: c.source for c in nbformat.read(ROOT / "solutions" / f"{LESSON}.ipynb", as_version=4).cells}

    def filled(change=lambda cell: None, start=released):
        nb = nbformat.from_dict(start)
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("solution") or "prediction" in cell.metadata.get("tags", []):
                cell.source = answers[cell.id]
                change(cell)
        return nb

    def check_cell(nb, exercise: str):
        return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == CHECK_PREFIX + exercise)

    def mistaken(cell):
        exercise = cell.metadata.nbgrader.grade_id
        if exercise in LESSONS[LESSON]:  # the answer cell as solved, then the mistaken function in its place
            cell.source = f"{cell.source}\n\n\n{wrong_answer(exercise)}"

    notebooks = {"correct": filled(), "untouched": nbformat.from_dict(released), "wrong": filled(mistaken)}
    raises = filled()
    first = check_cell(raises, LESSONS[LESSON][0])
    raises.cells.insert(raises.cells.index(first) + 1, nbformat.v4.new_code_cell("raise RuntimeError('oops')"))
    notebooks["raises"] = raises
    deleted = filled()
    deleted.cells.remove(check_cell(deleted, LESSONS[LESSON][-1]))
    notebooks["deleted_check"] = deleted
    forged = insert_after(nbformat.from_dict(released), "from attnedu.checks import", FORGER)
    edited = check_cell(forged, LESSONS[LESSON][0])
    edited.source = "1.0"
    edited.metadata.nbgrader.points = 100
    edited.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "100"}, execution_count=1)]
    notebooks["forged"] = forged
    notebooks["work_copy"] = filled(start=nbformat.read(ROOT / "exercises" / f"{LESSON}.ipynb", as_version=4))
    return notebooks


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory):
    flat = tmp_path_factory.mktemp("submissions")
    for student, nb in class_of(course).items():
        folder = course / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{LESSON}.ipynb")
        nbformat.write(nb, flat / f"{student}.ipynb")
    results = tmp_path_factory.mktemp("results")
    seconds = {}
    start = time.monotonic()
    options = ["--timeout", str(TIMEOUT), "--time-limit", str(TIME_LIMIT)]
    out = results / "scores.csv"
    run(sys.executable, "-m", "attnedu.grade", str(flat), "--out", str(out), "--jobs", "2", *options, cwd=ROOT)
    seconds["attnedu.grade"] = time.monotonic() - start
    start = time.monotonic()
    settings = [f"--CourseGrader.timeout={TIMEOUT}", f"--CourseGrader.time_limit={TIME_LIMIT}"]
    autograde = run("nbgrader", "autograde", LESSON, *settings, cwd=course)
    seconds["nbgrader autograde"] = time.monotonic() - start
    start = time.monotonic()
    run("nbgrader", "generate_feedback", LESSON, cwd=course)
    seconds["nbgrader generate_feedback"] = time.monotonic() - start
    print("seconds:", seconds)
    with open(out, newline="", encoding="utf-8") as f:
        table = {row["submission"][: -len(".ipynb")]: row for row in csv.DictReader(f)}
    from nbgrader.api import Gradebook

    points = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "attnedu") as gradebook:
        for student in STUDENTS:
            notebook = gradebook.find_submission_notebook(LESSON, LESSON, student)
            points[student] = {g.name[len(CHECK_PREFIX) :]: (g.auto_score, g.max_score) for g in notebook.grades}
    return {"table": table, "points": points, "course": course, "log": autograde.stderr}


def scores(row: dict) -> dict[str, float]:
    return {name: float(row[name]) for name in LESSONS[LESSON]}


@pytest.mark.parametrize("student", STUDENTS)
def test_autograde_gives_the_course_graders_points(graded, student):
    expected = scores(graded["table"][student])
    assert graded["points"][student] == {name: (score, 1.0) for name, score in expected.items()}


def test_the_class_covers_what_it_should(graded):
    """What the course grader gave: the cases are the ones the names say (else the comparison proves little)."""
    table, names = graded["table"], LESSONS[LESSON]
    full, none = dict.fromkeys(names, 1.0), dict.fromkeys(names, 0.0)
    assert scores(table["correct"]) == scores(table["raises"]) == scores(table["deleted_check"]) == full
    assert scores(table["work_copy"]) == full
    assert scores(table["untouched"]) == scores(table["forged"]) == none
    assert table["raises"]["notebook"] == "cell errors"
    assert table["correct"]["notebook"] == "ok"
    # a wrong answer may make a later cell of its exercise fail an assertion, as a learner's would; not a lost helper
    assert "NameError" not in table["wrong"]["notes"], table["wrong"]["notes"]
    assert "tampers with the grading code" in table["forged"]["notes"], table["forged"]["notes"]
    wrong = {name: table["wrong"][f"{name}_status"] for name in names}
    assert wrong == {name: "partial" if "prediction" in name else "failed" for name in names}, wrong
    assert scores(table["wrong"])["wrong_layout_prediction"] == 0.5


def test_autograde_put_back_the_deleted_check_cell_and_the_edited_one(graded):
    autograded = graded["course"] / "autograded"
    deleted = nbformat.read(autograded / "deleted_check" / LESSON / f"{LESSON}.ipynb", as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in deleted.cells]
    assert CHECK_PREFIX + LESSONS[LESSON][-1] in ids
    forged = nbformat.read(autograded / "forged" / LESSON / f"{LESSON}.ipynb", as_version=4)
    check = next(
        c for c in forged.cells if c.metadata.get("nbgrader", {}).get("grade_id") == CHECK_PREFIX + LESSONS[LESSON][0]
    )
    assert check.source.endswith(GUARD) and check.metadata.nbgrader.points == 1
    assert ("NOT ISOLATED" in graded["log"]) == (sandbox.find_bwrap() is None)  # sandboxed where the course grader is


def words(text: str) -> str:
    return " ".join(text.split())


def test_generate_feedback_gives_the_course_diagnosis(graded):
    """Each exercise's diagnosis in the table, in the learner's feedback page (its text: tags and line breaks aside),
    with the score, the hint call under each exercise not yet right (as the course grader's feedback), and not the
    hidden line of the check cells."""
    hidden = words(re.search(r'RuntimeError\("([^"]+)"\)', GUARD).group(1))  # what the hidden line raises
    for student in STUDENTS:
        page = (graded["course"] / "feedback" / student / LESSON / f"{LESSON}.html").read_text(encoding="utf-8")
        text = words(html.unescape(re.sub(r"<[^>]+>", " ", page)))
        row = graded["table"][student]
        for name in LESSONS[LESSON]:
            assert words(row[f"{name}_message"]) in text, (student, name, row[f"{name}_message"])
            call = words(HINT_CALL.format(name=name))
            assert (call in text) == (row[f"{name}_status"] != "passed"), (student, name, row[f"{name}_status"])
        assert f"Score: {round(float(row['total']), 2)} / {round(float(row['max_total']), 2)}" in text, student
        assert "HIDDEN TESTS" not in text and hidden not in text, student
    wrong = graded["table"]["wrong"]
    assert all(wrong[f"{name}_message"] for name in LESSONS[LESSON])  # every exercise has a diagnosis to show
