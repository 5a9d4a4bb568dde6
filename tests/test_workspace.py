"""A learner's work is never lost, and a learner can run it as tests.

* ``make lab`` (``tools/lab.py``) copies the exercises into ``work/`` once: a notebook there is never
  overwritten, a new exercise appears on the next start;
* the generator (``attnedu.build_exercises``) never writes into ``work/``, and refuses to overwrite a
  notebook in ``exercises/`` that it did not write (a learner who worked there), saying how to keep it;
* the path end to end, in git clones under a temporary folder: a learner edits an exercise in
  ``work/``, the course moves on upstream (a changed exercise, a new one), the learner pulls,
  regenerates and runs the checks: the edit is still there, byte for byte;
* ``make check`` (``tools/check.py``) runs a learner's notebooks under nbval (lax) and ends with a
  summary per exercise, on untouched, finished and broken notebooks.

Everything runs on copies under a temporary folder; the course's own ``work/`` is never touched.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attnedu import build_exercises

ROOT = Path(__file__).resolve().parents[1]
L01, L02, L03 = "01_rnn_bottleneck", "02_bahdanau_attention", "03_luong_attention"
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),  # this tree's attnedu, whatever is installed
    "ATTNEDU_PROGRESS": "0",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
}


def lab_module():
    spec = importlib.util.spec_from_file_location("lab", ROOT / "tools" / "lab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def course(root: Path, lessons: list[str]) -> Path:
    """A small copy of the course at ``root``: the tools, .gitignore, and ``lessons``' solutions and exercises."""
    for folder in ("tools", "solutions", "exercises", "notebooks"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for name in ("lab.py", "check.py"):
        shutil.copy(ROOT / "tools" / name, root / "tools" / name)
    shutil.copy(ROOT / ".gitignore", root / ".gitignore")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")  # pytest's and ruff's settings
    shutil.copy(ROOT / "notebooks" / f"{L01}.ipynb", root / "notebooks")  # lab.py wants lesson 01 there
    for lesson in lessons:
        shutil.copy(ROOT / "solutions" / f"{lesson}.ipynb", root / "solutions")
        shutil.copy(ROOT / "exercises" / f"{lesson}.ipynb", root / "exercises")
    return root


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def solve(path: Path, name: str, body: str) -> None:
    """Write a learner's answer: the stub of ``name``'s solution cell replaced by ``body`` (as JupyterLab saves)."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if f"def {name}(" in c.source)
    cell.source = cell.source.replace("    # YOUR CODE HERE\n    raise NotImplementedError()", body)
    nbformat.write(nb, path)


PADDING_MASK = "    return torch.arange(max_len)[None, :] < lengths[:, None]"


def generate(root: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "attnedu.build_exercises", *extra]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, env=ENV, timeout=120)


def check(root: Path, *lessons: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(root / "tools" / "check.py"), *lessons]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, env=ENV, timeout=300)


# --------------------------------------------------------------------------------------------
# work/: filled once, never overwritten
# --------------------------------------------------------------------------------------------


def test_work_is_filled_once_and_never_overwritten(tmp_path):
    root = course(tmp_path, [L01, L02])
    lab = lab_module()
    done = lab.prepare_work(root)
    assert sorted(p.name for p in (root / "work").iterdir()) == [f"{L01}.ipynb", f"{L02}.ipynb"], done
    mine = root / "work" / f"{L01}.ipynb"
    solve(mine, "padding_mask", PADDING_MASK)
    before = mine.read_bytes()
    shutil.copy(ROOT / "exercises" / f"{L03}.ipynb", root / "exercises")  # a later version adds an exercise
    (root / "exercises" / f"{L01}.ipynb").write_text("{}", encoding="utf-8")  # and changes one
    assert lab.prepare_work(root) == [f"new exercise: work/{L03}.ipynb"]
    assert mine.read_bytes() == before
    assert (root / "work" / f"{L03}.ipynb").read_bytes() == (root / "exercises" / f"{L03}.ipynb").read_bytes()


def test_work_is_invisible_to_git_the_linter_and_pytest():
    assert "/work/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"work"]' in pyproject.split("norecursedirs")[1].splitlines()[0]  # pytest never collects it
    assert '"work"]' in pyproject.split("extend-exclude")[1].splitlines()[0]  # ruff check . never lints it


# --------------------------------------------------------------------------------------------
# The generator: never into work/, never over someone's edits
# --------------------------------------------------------------------------------------------


def test_generator_refuses_to_overwrite_edits_and_says_how_to_keep_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = course(tmp_path / "course", [L01])
    solutions, exercises = root / "solutions", root / "exercises"
    edited = exercises / f"{L01}.ipynb"
    solve(edited, "padding_mask", PADDING_MASK)  # a learner who worked in exercises/, no git, no manifest
    nb = nbformat.read(solutions / f"{L01}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A new paragraph."))  # the course moves on
    nbformat.write(nb, solutions / f"{L01}.ipynb")
    mine = edited.read_bytes()

    args = ["--solutions", str(solutions), "--exercises", str(exercises)]
    assert build_exercises.main(args) == 1
    assert edited.read_bytes() == mine and not (exercises / build_exercises.MANIFEST).exists()  # nothing written
    with pytest.raises(build_exercises.EditedError, match="did not write") as refused:
        build_exercises.build(solutions, exercises)
    message = str(refused.value)
    assert f"cp course/exercises/{L01}.ipynb course/work/{L01}.ipynb" in message and "--force" in message

    # the sync test's message (make test) tells a learner how to keep the work, and that --force discards it
    advice = build_exercises.out_of_date_message(solutions, exercises, ["differs"])
    assert "keep it in work/" in advice and "discards" in advice and f"cp course/exercises/{L01}" in advice

    # with a copy already in work/, the advice names another file, so that it overwrites nothing either
    (root / "work").mkdir()
    (root / "work" / f"{L01}.ipynb").write_text("{}", encoding="utf-8")
    assert f"course/work/{L01}-from-exercises.ipynb" in build_exercises.out_of_date_message(solutions, exercises, [])

    assert build_exercises.main([*args, "--force"]) == 0  # asked for: overwritten
    assert "A new paragraph." in edited.read_text(encoding="utf-8")
    assert build_exercises.out_of_date(solutions, exercises) == []
    assert "run `python -m attnedu.build_exercises`" in build_exercises.out_of_date_message(solutions, exercises, [])


def test_generator_overwrites_what_it_wrote_itself(tmp_path):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    shutil.copy(ROOT / "solutions" / f"{L01}.ipynb", solutions)
    build_exercises.build(solutions, exercises)  # records what it wrote
    manifest = json.loads((exercises / build_exercises.MANIFEST).read_text(encoding="utf-8"))
    assert list(manifest) == [f"{L01}.ipynb"]
    for text in ("First.", "Second."):  # an author who edits the solutions and regenerates, twice
        nb = nbformat.read(solutions / f"{L01}.ipynb", as_version=4)
        nb.cells.append(nbformat.v4.new_markdown_cell(text))
        nbformat.write(nb, solutions / f"{L01}.ipynb")
        build_exercises.build(solutions, exercises)
    assert "Second." in (exercises / f"{L01}.ipynb").read_text(encoding="utf-8")
    # an exercise run in JupyterLab (outputs, execution counts) is someone's work, even with nothing typed in it
    ran = nbformat.read(exercises / f"{L01}.ipynb", as_version=4)
    code = next(c for c in ran.cells if c.cell_type == "code")
    code.execution_count, code.outputs = 1, [nbformat.v4.new_output("stream", text="hi\n")]
    nbformat.write(ran, exercises / f"{L01}.ipynb")
    nb.cells.append(nbformat.v4.new_markdown_cell("Third."))
    nbformat.write(nb, solutions / f"{L01}.ipynb")
    with pytest.raises(build_exercises.EditedError):
        build_exercises.build(solutions, exercises)


def test_generator_never_writes_into_work(tmp_path):
    (tmp_path / "solutions").mkdir()
    shutil.copy(ROOT / "solutions" / f"{L01}.ipynb", tmp_path / "solutions")
    with pytest.raises(build_exercises.EditedError, match="never writes there"):
        build_exercises.build(tmp_path / "solutions", tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_an_edited_exercise_is_carried_into_work(tmp_path):
    """A learner who worked in exercises/ before work/ existed: make lab copies that work, and says so."""
    root = course(tmp_path, [L01])
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "course")
    solve(root / "exercises" / f"{L01}.ipynb", "padding_mask", PADDING_MASK)
    (done,) = lab_module().prepare_work(root)
    assert "with the changes you made in it" in done and "git checkout exercises/" in done
    carried = nbformat.read(root / "work" / f"{L01}.ipynb", as_version=4)
    assert any(PADDING_MASK in cell.source for cell in carried.cells)


# --------------------------------------------------------------------------------------------
# End to end: edit in work/, the course moves on, pull, regenerate, run the checks
# --------------------------------------------------------------------------------------------


def test_a_learners_edit_survives_pull_regenerate_and_tests(tmp_path):
    upstream = course(tmp_path / "upstream", [L01])
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-qm", "course v1")
    learner = tmp_path / "learner"
    git(tmp_path, "clone", "-q", str(upstream), str(learner))

    assert subprocess.run([sys.executable, "tools/lab.py", "--prepare-only"], cwd=learner, env=ENV).returncode == 0
    mine = learner / "work" / f"{L01}.ipynb"
    solve(mine, "padding_mask", "    import os  # unused: a linter would complain\n" + PADDING_MASK)
    before = mine.read_bytes()
    assert git(learner, "status", "--porcelain").stdout == ""  # nothing of the learner's is tracked

    # upstream: lesson 01's exercise changes, lesson 02's appears; exercises regenerated and committed
    nb = nbformat.read(upstream / "solutions" / f"{L01}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("Course v2."))
    nbformat.write(nb, upstream / "solutions" / f"{L01}.ipynb")
    shutil.copy(ROOT / "solutions" / f"{L02}.ipynb", upstream / "solutions")
    assert generate(upstream).returncode == 0
    git(upstream, "add", "-A")
    git(upstream, "commit", "-qm", "course v2")

    git(learner, "pull", "-q", "--no-rebase")  # no conflict: the learner's files are not tracked
    assert "Course v2." in (learner / "exercises" / f"{L01}.ipynb").read_text(encoding="utf-8")
    regenerated = generate(learner)
    assert regenerated.returncode == 0, regenerated.stderr
    assert generate(learner, "--check").returncode == 0  # the sync test passes
    # the test suite's own tools leave work/ alone: pytest does not collect it, ruff does not lint it
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval-lax", "-p", "no:cacheprovider", "."],
        cwd=learner, capture_output=True, text=True, env=ENV, timeout=120,
    )  # fmt: skip
    assert "exercises/" in collected.stdout and "work/" not in collected.stdout, collected.stdout
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.exists():  # the contributor install
        lint = [str(ruff), "check", "--select", "F401", "."]  # the learner's unused import, nothing of the course's
        linted = subprocess.run(lint, cwd=learner, capture_output=True, text=True, timeout=120)
        assert linted.returncode == 0, linted.stdout
    ran = check(learner)  # make check: also copies the new exercise into work/
    assert f"new exercise: work/{L02}.ipynb" in ran.stdout, ran.stdout + ran.stderr
    assert "✅ padding_mask: passed" in ran.stdout and "⏳ additive_score: not attempted" in ran.stdout
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert mine.read_bytes() == before  # the edit survived, byte for byte
    assert "Course v2." not in mine.read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# make check
# --------------------------------------------------------------------------------------------


def test_make_check_on_untouched_finished_and_broken_notebooks(tmp_path):
    root = course(tmp_path, [L01, L02, L03])
    work = root / "work"
    work.mkdir()
    shutil.copy(ROOT / "exercises" / f"{L01}.ipynb", work)  # untouched
    shutil.copy(ROOT / "solutions" / f"{L02}.ipynb", work)  # finished
    broken = nbformat.read(ROOT / "solutions" / f"{L03}.ipynb", as_version=4)  # one exercise wrong, one cell raising
    cells = [c for c in broken.cells if "solution" in c.metadata.get("tags", [])]
    cells[0].source = cells[0].source.replace("    ### BEGIN SOLUTION", "    return keys.sum(dim=-1)  # a mistake")
    broken.cells.insert(2, nbformat.v4.new_code_cell("1 / 0"))
    nbformat.write(broken, work / f"{L03}.ipynb")
    wrong = cells[0].source.split("def ")[1].split("(")[0]

    untouched = check(root, "01")
    assert untouched.returncode == 0, untouched.stdout + untouched.stderr
    assert untouched.stdout.count(": not attempted") == 4 and "0 passed, 0 failed, 4 not attempted" in untouched.stdout

    ran = check(root)
    out = ran.stdout
    assert ran.returncode == 1, out + ran.stderr  # a failed exercise and a cell error
    assert "✅ additive_score: passed" in out and "✅ coverage: passed" in out
    assert f"❌ {wrong}: failed" in out and "on test case" in out.split(f"❌ {wrong}: failed")[1].split("\n")[1]
    assert "ZeroDivisionError" in out and "1 raised an error" in out
    assert f"{L02}.ipynb (" in out and "where you stand" in out
    # each notebook's line as it finishes: "ok" only for a notebook with no cell error and no failed exercise
    progress = {line.split(".ipynb: ")[0].split("/")[-1]: line.split(".ipynb: ")[1] for line in out.splitlines()
                if line.startswith("  work/")}  # fmt: skip
    assert progress[L01].startswith("ok: 4 not attempted (") and progress[L02].startswith("ok: 5 passed (")
    assert progress[L03].startswith("1 cell raised an error, ") and " failed; " in progress[L03], progress[L03]
    assert f'`hint("{wrong}")`' in out.splitlines()[-1]  # the hint's call, for the exercise that failed
    for lesson in (L01, L02, L03):  # nothing written into the notebooks
        if lesson != L03:
            source = ROOT / ("exercises" if lesson == L01 else "solutions") / f"{lesson}.ipynb"
            assert (work / f"{lesson}.ipynb").read_bytes() == source.read_bytes()

    assert check(root, "09").returncode == 2


def check_tool(monkeypatch):
    """tools/check.py as a module."""
    spec = importlib.util.spec_from_file_location("check_tool", ROOT / "tools" / "check.py")
    tool = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    monkeypatch.setitem(sys.modules, "check_tool", tool)  # its dataclasses look their module up there
    spec.loader.exec_module(tool)
    return tool


def test_a_notebook_with_a_failed_exercise_is_not_ok(tmp_path, monkeypatch):
    """The line make check prints as each notebook finishes says "ok" only when no cell raised and no exercise failed
    or was partly right (a failed check raises nothing: the notebook runs to its end); otherwise it says what
    happened, and the summary's last line names the call that gives each failed exercise's hint."""
    from attnedu import checks

    tool = check_tool(monkeypatch)

    def run(*records, failed_cells=()):
        done = tool.Run(tmp_path / f"{L02}.ipynb", cells=12, failed_cells=list(failed_cells))
        done.records = [{"exercise": name, "status": status, "score": 0, "message": "m"} for name, status in records]
        return done

    fine = run(("additive_score", "passed"), ("masked_softmax", "not_attempted"))
    assert tool.verdict(fine) == "ok: 1 passed, 1 not attempted"
    wrong = run(("additive_score", "passed"), ("masked_softmax", "failed"), ("context_vector", "not_attempted"))
    assert tool.verdict(wrong) == "1 exercise failed; 1 passed, 1 not attempted"
    again = run(("masked_softmax", "failed"), ("masked_softmax", "passed"))  # fixed, checked again: the last counts
    assert tool.verdict(again) == "ok: 1 passed"
    both = run(("masked_softmax", "failed"), ("coverage", "failed"), failed_cells=["Cell 3", "Cell 5"])
    assert tool.verdict(both) == "2 cells raised an error, 2 exercises failed"
    assert tool.verdict(tool.Run(tmp_path / "x.ipynb")) == "nbval could not run it"
    text, ok = tool.report([wrong], checks.LESSONS)
    assert not ok and text.splitlines()[-1] == 'Stuck? In its notebook, `hint("masked_softmax")` gives a hint.'
    text, _ = tool.report([both], checks.LESSONS)
    assert '`hint("masked_softmax")`, `hint("coverage")` give hints' in text.splitlines()[-1]


def test_make_check_counts_a_prediction_partly_right(tmp_path, monkeypatch):
    """A graded prediction half right: the check records its status and score, and make check's summary shows it
    partly right, with its score and its lines, counts it in the total score, and exits 1 as for a failure."""
    from attnedu import checks
    from attnedu.checks.prediction import forget_predictions

    tool = check_tool(monkeypatch)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(tool.RECORD_ENV, str(record))
    forget_predictions()
    try:
        checks.check("wrong_layout_prediction", lambda: (True, True))
    finally:
        forget_predictions()
    run = tool.Run(tmp_path / "07_positional_encoding.ipynb", cells=20)
    run.records = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    assert run.records[0]["status"] == "partial" and run.records[0]["score"] == 0.5
    text, ok = tool.report([run], checks.LESSONS)
    assert not ok
    assert "🟡 wrong_layout_prediction: partly right (score 0.5)" in text
    assert "you predicted yes, measured no" in text and "1 partly right" in text and "(score 0.5 of 5)" in text
    assert tool.verdict(run).startswith("1 prediction partly right")


# --------------------------------------------------------------------------------------------
# a lesson split in two: the learner's notebook under the old name is kept, runs and is checked
# --------------------------------------------------------------------------------------------

# tests/former/ holds exercise notebooks as they were handed out before a split (lax nbval runs them with the suite:
# a learner's copy must keep running against today's package)
FORMER = ROOT / "tests" / "former"
MERGE = """\
    m = torch.maximum(m1, m2)
    ref = torch.where(m == float("-inf"), 0.0, m)
    a1, a2 = torch.exp(m1 - ref), torch.exp(m2 - ref)
    return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2"""


def test_a_split_lesson_keeps_the_learners_notebook_and_says_what_changed(tmp_path):
    lab = lab_module()
    (old, (new, what)) = next(iter(lab.RENAMED.items()))
    root = course(tmp_path, [Path(name).stem for name in new])
    work = root / "work"
    work.mkdir()
    mine = work / old
    shutil.copy(FORMER / old, mine)
    solve(mine, "merge_softmax_states", MERGE)
    before = mine.read_bytes()

    done = lab.prepare_work(root)
    assert mine.read_bytes() == before
    assert sorted(p.name for p in work.iterdir()) == sorted([old, *new])
    assert done == [f"new exercise: work/{name}" for name in new] + [f"note: {what}"]
    assert lab.prepare_work(root) == []  # said once, when the new notebooks arrive

    # the note names every exercise of the old notebook, in the new lesson that now holds it
    from attnedu.checks import EXERCISES, FORMER_LESSONS, GRADED_LESSONS

    moved = FORMER_LESSONS[Path(old).stem]
    for name in moved:
        lesson = EXERCISES[name].lesson
        assert f"{name}" in what and lesson in [Path(n).stem for n in new], (name, lesson)
    added = [name for n in new for name in GRADED_LESSONS[Path(n).stem] if name not in moved]
    assert all(name in what for name in added), added

    ran = check(root, Path(old).stem[:2])  # "08": the old notebook and the two new ones
    out = ran.stdout
    assert ran.returncode == 0, out + ran.stderr
    assert all(f"{name} (" in out for name in [old, *new]), out
    assert "✅ merge_softmax_states: passed" in out, out
    assert out.count("merge_softmax_states: not attempted") == 1, out  # in 08a's copy, untouched


def test_the_grader_knows_a_former_lessons_notebook():
    from attnedu.checks import FORMER_LESSONS
    from attnedu.grading.grader import exercises_of, lesson_of

    for path in sorted(FORMER.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        assert lesson_of(nb, path.name) == path.stem
        nb.metadata.pop("attnedu", None)
        assert lesson_of(nb, path.name) == path.stem  # by its file name alone
        assert exercises_of(path.stem) == FORMER_LESSONS[path.stem]
        starts = ("def ", "@triton.jit\ndef ")
        defined = {c.source.split("def ")[1].split("(")[0] for c in nb.cells if c.source.startswith(starts)}
        assert set(FORMER_LESSONS[path.stem]) <= defined, defined
