"""Proof that the graded exercises are well formed: ``exercises/`` is exactly what
``python -m attnedu.build_exercises`` generates from ``solutions/``, and each solution notebook
has one solution cell and one check cell per exercise.

That every solution scores full marks and every exercise notebook zero, through the batch
grader, is in test_grading.py (one grader run, with hostile submissions); the mutant gallery,
which tests the checks themselves, is in test_checks.py.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from attnedu import build_exercises
from attnedu.checks import LESSONS

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, EXERCISE_DIR = ROOT / "solutions", ROOT / "exercises"


def test_exercises_in_sync():
    """exercises/ is what the generator makes. The message on failure never tells a learner who worked in
    exercises/ to run a command that would discard that work (it refuses; --force says it discards)."""
    problems = build_exercises.out_of_date(SOLUTIONS, EXERCISE_DIR)
    assert not problems, (
        "\n".join(problems) + "\n" + build_exercises.out_of_date_message(SOLUTIONS, EXERCISE_DIR, problems)
    )


def test_every_lesson_with_exercises_has_a_solution_notebook():
    assert sorted(p.stem for p in SOLUTIONS.glob("*.ipynb")) == sorted(LESSONS)


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_solution_notebook_layout(lesson):
    """Each exercise: one cell tagged 'solution' defining it, one tagged 'check' calling its check; unique ids."""
    nb = nbformat.read(SOLUTIONS / f"{lesson}.ipynb", as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["attnedu"]["lesson"] == lesson
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "attnedu.setup_notebook(seed=0)" in first_code.source
    solution_cells = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    check_cells = [c.source.strip() for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert [c.metadata["nbgrader"]["grade_id"] for c in solution_cells] == LESSONS[lesson]
    for cell, name in zip(solution_cells, LESSONS[lesson], strict=True):
        assert f"def {name}(" in cell.source
    assert check_cells == [f"check_{name}({name})" for name in LESSONS[lesson]]
    grade_ids = [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata]
    assert len(grade_ids) == len(set(grade_ids))


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_exercise_notebook_is_stripped(lesson):
    nb = nbformat.read(EXERCISE_DIR / f"{lesson}.ipynb", as_version=4)
    assert "widgets" not in nb.metadata
    for cell in nb.cells:
        assert build_exercises.BEGIN not in cell.source and build_exercises.END not in cell.source
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        if {"solution", "prediction"} & set(cell.metadata.get("tags", [])):
            assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in cell.source


def test_strip_solutions_keeps_indentation_and_the_rest():
    source = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n# after"
    assert build_exercises.strip_solutions(source, "code") == (
        "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError()\n# after"
    )
    markdown = "Why?\n\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"
    assert build_exercises.strip_solutions(markdown, "markdown") == "Why?\n\nYOUR ANSWER HERE"


@pytest.mark.parametrize(
    "source, error",
    [
        ("### BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n### END SOLUTION", "without a ### BEGIN SOLUTION"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "inside another solution region"),
    ],
)
def test_strip_solutions_rejects_broken_markers(source, error):
    with pytest.raises(ValueError, match=error):
        build_exercises.strip_solutions(source, "code")


def test_check_mode_reports_a_stale_exercise(tmp_path):
    exercises = tmp_path / "exercises"
    build_exercises.build(SOLUTIONS, exercises)
    assert build_exercises.main(["--check", "--solutions", str(SOLUTIONS), "--exercises", str(exercises)]) == 0
    stale = exercises / "01_rnn_bottleneck.ipynb"
    stale.write_text(stale.read_text(encoding="utf-8").replace("YOUR CODE HERE", "my code"), encoding="utf-8")
    (exercises / "99_orphan.ipynb").write_text("{}", encoding="utf-8")
    problems = build_exercises.out_of_date(SOLUTIONS, exercises)
    assert len(problems) == 2 and "differs" in problems[0] and "no solution notebook" in problems[1]
    assert build_exercises.main(["--check", "--solutions", str(SOLUTIONS), "--exercises", str(exercises)]) == 1
