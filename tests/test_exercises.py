"""Proof that the graded exercises work:

1. ``exercises/`` is exactly what ``python -m attnedu.build_exercises`` generates from ``solutions/``;
2. every solution notebook scores full marks through the batch grader;
3. every exercise notebook, run as is, scores zero with every exercise "not_attempted";
4. the grader survives a wrong answer, a crashing cell, a dying kernel and a hanging cell, and
   writes the expected table in bounded time without touching the submissions.

2-4 share one grader run over a temporary folder (about 20 s on 2 cores). The mutant gallery,
which tests the checks themselves, is in test_checks.py.
"""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attnedu import build_exercises
from attnedu.checks import EXERCISES, LESSONS

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, EXERCISE_DIR = ROOT / "solutions", ROOT / "exercises"
TIMEOUT = 8  # seconds for a submission's own cells: far more than a solution needs, and the hang's cost


def test_exercises_in_sync():
    problems = build_exercises.out_of_date(SOLUTIONS, EXERCISE_DIR)
    assert not problems, "\n".join(problems) + "\nrun: python -m attnedu.build_exercises"


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
        if "solution" in cell.metadata.get("tags", []):
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


# --------------------------------------------------------------------------------------------
# One batch-grader run over every kind of submission
# --------------------------------------------------------------------------------------------


def _insert_cell(nb, after_source: str, source: str):
    index = next(i for i, c in enumerate(nb.cells) if after_source in c.source)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


def _submissions(folder: Path) -> dict[str, str]:
    """Write the test submissions; returns file name -> what it is."""
    read = lambda path: nbformat.read(path, as_version=4)  # noqa: E731
    kinds = {}
    for lesson in LESSONS:
        nbformat.write(read(SOLUTIONS / f"{lesson}.ipynb"), folder / f"solution_{lesson}.ipynb")
        nbformat.write(read(EXERCISE_DIR / f"{lesson}.ipynb"), folder / f"stub_{lesson}.ipynb")
        kinds[f"solution_{lesson}.ipynb"], kinds[f"stub_{lesson}.ipynb"] = "solution", "stub"

    mutant = read(SOLUTIONS / "02_bahdanau_attention.ipynb")  # softmax over the batch axis
    cell = next(c for c in mutant.cells if "def masked_softmax(" in c.source)
    assert "dim=-1" in cell.source
    cell.source = cell.source.replace("dim=-1", "dim=0")
    nbformat.write(mutant, folder / "02_mutant.ipynb")

    crash = _insert_cell(read(SOLUTIONS / "01_rnn_bottleneck.ipynb"), "setup_notebook", "import nonexistent_module")
    nbformat.write(crash, folder / "01_crash.ipynb")

    dies = read(SOLUTIONS / "02_bahdanau_attention.ipynb")  # the kernel process exits before the first cell
    dies.cells.insert(1, nbformat.v4.new_code_cell("import os\n\nos._exit(1)"))
    nbformat.write(dies, folder / "02_dies.ipynb")

    hang = _insert_cell(
        read(SOLUTIONS / "01_rnn_bottleneck.ipynb"), "check_padding_mask(padding_mask)", "while True:\n    pass"
    )
    nbformat.write(hang, folder / "01_hangs.ipynb")

    (folder / "broken.ipynb").write_text("{not a notebook", encoding="utf-8")
    return kinds


def _fingerprint(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def grader_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    kinds = _submissions(folder)
    before = _fingerprint(folder)
    out = tmp_path_factory.mktemp("out") / "scores.csv"
    command = [sys.executable, "-m", "attnedu.grade", str(folder), "--out", str(out), "--timeout", str(TIMEOUT)]
    start = time.monotonic()
    run = subprocess.run(
        [*command, "--jobs", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "ATTNEDU_PROGRESS": "0"},
        timeout=300,
    )
    seconds = time.monotonic() - start
    assert run.returncode == 0, run.stderr
    with open(out, newline="", encoding="utf-8") as f:
        table = {row["submission"]: row for row in csv.DictReader(f)}
    return {
        "table": table,
        "kinds": kinds,
        "stdout": run.stdout,
        "seconds": seconds,
        "same": before == _fingerprint(folder),
    }


def _statuses(row: dict, lesson: str) -> list[str]:
    return [row[f"{name}_status"] for name in LESSONS[lesson]]


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_solutions_full_marks(grader_run, lesson):
    row = grader_run["table"][f"solution_{lesson}.ipynb"]
    assert row["notebook"] == "ok", row
    assert _statuses(row, lesson) == ["passed"] * len(LESSONS[lesson]), row
    assert int(row["total"]) == int(row["max_total"]) == len(LESSONS[lesson])


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_stubs_score_zero(grader_run, lesson):
    row = grader_run["table"][f"stub_{lesson}.ipynb"]
    assert row["notebook"] == "ok", row  # the checks never raise, so Run All reaches the end
    assert _statuses(row, lesson) == ["not_attempted"] * len(LESSONS[lesson]), row
    assert row["total"] == "0"


def test_grader_table(grader_run):
    table = grader_run["table"]
    assert set(table) == {*grader_run["kinds"], "02_mutant.ipynb", "01_crash.ipynb", "02_dies.ipynb"} | {
        "01_hangs.ipynb",
        "broken.ipynb",
    }
    header = list(next(iter(table.values())))
    for name in EXERCISES:
        assert name in header and f"{name}_status" in header

    mutant = table["02_mutant.ipynb"]
    assert mutant["lesson"] == "02_bahdanau_attention" and mutant["notebook"] == "ok"
    assert _statuses(mutant, "02_bahdanau_attention") == ["passed", "failed", "passed", "passed"]
    assert (mutant["total"], mutant["max_total"]) == ("3", "4")
    assert mutant["padding_mask"] == ""  # lesson 01's columns stay empty for a lesson 02 notebook

    crash = table["01_crash.ipynb"]  # allow_errors: the failing import does not stop the notebook
    assert crash["notebook"] == "cell errors" and "ModuleNotFoundError" in crash["notes"]
    assert crash["total"] == "3"

    dies = table["02_dies.ipynb"]
    assert dies["notebook"] == "kernel died" and "kernel died in cell" in dies["notes"]
    assert _statuses(dies, "02_bahdanau_attention") == ["not_graded"] * 4 and dies["total"] == "0"

    hangs = table["01_hangs.ipynb"]  # interrupted; what was defined before the hang is still graded
    assert hangs["notebook"] == "timeout" and "interrupted" in hangs["notes"]
    assert _statuses(hangs, "01_rnn_bottleneck") == ["passed", "not_attempted", "not_attempted"]

    broken = table["broken.ipynb"]
    assert broken["notebook"] == "unreadable" and broken["total"] == "0"


def test_grader_leaves_submissions_alone_and_finishes_in_bounded_time(grader_run):
    assert grader_run["same"], "the grader modified or added files in the submissions folder"
    assert grader_run["seconds"] < 180
    for name in grader_run["table"]:
        assert name in grader_run["stdout"]  # the summary table
