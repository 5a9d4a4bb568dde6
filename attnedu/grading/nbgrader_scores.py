"""nbgrader's autograde step, done by the course's grader: each submission in its sandbox, every mark decided here.

nbgrader scores an autograder test cell from the outputs the learner's kernel gave it (an error: 0; a number
shown as the cell's result: that many points, its partial credit; anything else: full marks), and runs the
learner's notebook in the instructor's own account to get them. The course's nbgrader configuration
(:mod:`.nbgrader_course`) puts :class:`CourseGrader` in the place of nbgrader's ``Execute`` instead: it grades the
notebook as ``python -m attnedu.grade`` grades it (in a bubblewrap sandbox, calling each exercise's function from
outside the notebook's kernel and comparing in this process, :mod:`.grader`), then writes each check cell's outputs
from that result:

* the course's feedback for the exercise (a stream): its status, its diagnosis, and with ``feedback = "full"`` the
  steps of its hint; ``generate_feedback`` shows it to the learner, as ``scores_report/feedback/`` does;
* its points, as nbgrader reads partial credit: the cell's result is the number ``points × score`` (score 1, 0, or
  a graded prediction's part, :mod:`attnedu.checks.prediction`).

So nbgrader records, per exercise, the points in ``attnedu.grade``'s table, whatever the notebook printed or showed
itself: its own outputs were cleared before this step, and nothing the learner's kernel does reaches these.
Every check cell gets a number, also when the grader could not grade the exercise (0: nbgrader would give a cell
without one full marks). The other cells are left without outputs: the notebook ran in the sandbox, not here.

Before that, :class:`AsReleased` lets autograde take a learner's copy of ``exercises/`` (the ``work/`` notebooks of
``make lab`` and ``make hub``) as it takes a released notebook: their check cells carry the release's grade ids
without its grade flags and points, which nbgrader's ``OverwriteCells`` would reject ("Inconsistent checksums").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nbformat.v4 import new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells
from nbgrader.utils import is_grade
from traitlets import Bool, Enum, Float

from .cli import FEEDBACK_LEVELS, WARNING_NO_SANDBOX, leftovers, probe
from .nbgrader_course import CHECK_PREFIX


class CourseGrader(NbGraderPreprocessor):
    """Grades the notebook with the course's grader and writes each check cell's feedback and points."""

    timeout = Float(300, help="seconds for the notebook's own cells (python -m attnedu.grade --timeout)").tag(
        config=True
    )
    time_limit = Float(5, help="seconds per call of a learner's function (--time-limit)").tag(config=True)
    memory_gb = Float(4, help="memory cap of each process of a submission, in GB (--memory-gb)").tag(config=True)
    feedback = Enum(FEEDBACK_LEVELS, "diagnosis", help="what each check cell's output says (--feedback)").tag(
        config=True
    )
    no_sandbox = Bool(False, help="grade without bubblewrap: unsafe (docs/instructors.md)").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        name = f"{info.get('student', 'student')}_{info.get('notebook', 'notebook')}.ipynb"
        if self.memory_gb < 2:
            raise ValueError(f"CourseGrader.memory_gb = {self.memory_gb:g} is too small: torch maps 1.4 GB")
        graded, warnings = grade_one(
            name, as_the_learner_saw_it(nb), self.settings(), self.no_sandbox, _course_folders(info.get("db_url", ""))
        )
        for warning in warnings:
            self.log.warning(warning)
        self.log.info(
            "%s: %s, %s",
            name,
            graded.notebook,
            ", ".join(f"{r.exercise} {r.status} {r.score:g}" for r in graded.results),
        )
        write_outputs(nb, graded, self.feedback)
        return nb, resources

    def settings(self):
        from .grader import Settings
        from .sandbox import Limits

        for trait in ("timeout", "time_limit"):
            if getattr(self, trait) <= 0:
                raise ValueError(f"CourseGrader.{trait} must be positive, got {getattr(self, trait):g}")
        return Settings(self.timeout, self.time_limit, 1, Limits(memory_bytes=int(self.memory_gb * (1 << 30))))


class AsReleased(NbGraderPreprocessor):
    """Each cell whose grade id the gradebook knows gets the gradebook's grade and solution flags (and a grade cell its
    points), before ``OverwriteCells`` compares the cell with the gradebook's.

    The check cells of ``exercises/``, which learners' ``work/`` copies keep, are locked and carry the release's grade
    ids, but not its ``grade: true`` and points (those belong to nbgrader's release only). ``OverwriteCells`` puts
    back a changed locked cell's source and keeps its flags, so such a cell's checksum never matched the gradebook's,
    and autograde stopped ("Inconsistent checksums for cell check_..."). With the flags restored here,
    ``OverwriteCells`` restores the source and points from the gradebook as for a released notebook: whatever the
    submitted cell holds (its source, flags or points), the gradebook's cell is what is graded.
    """

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            source = gradebook.find_notebook(info["notebook"], info["assignment"])
            points = {cell.name: float(cell.max_score) for cell in source.grade_cells}
            solutions = {cell.name for cell in source.solution_cells}
            known = {cell.name for cell in source.source_cells}
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            grade_id = meta.get("grade_id")
            if grade_id not in known:
                continue  # OverwriteCells warns of it and drops its grade id
            meta["grade"], meta["solution"] = grade_id in points, grade_id in solutions
            if grade_id in points:
                meta["points"] = points[grade_id]
            else:
                meta.pop("points", None)
        return nb, resources


def sanitize_preprocessors() -> list:
    """nbgrader's autograde steps before grading, with :class:`AsReleased` just before its ``OverwriteCells``."""
    from nbgrader.converters import Autograde

    steps = list(Autograde.class_traits()["sanitize_preprocessors"].default())
    if OverwriteCells not in steps:
        raise RuntimeError(f"nbgrader's sanitize steps have no OverwriteCells step: {steps}")
    at = steps.index(OverwriteCells)
    return [*steps[:at], AsReleased, *steps[at:]]


def autograde_preprocessors() -> list:
    """nbgrader's autograde steps, with :class:`CourseGrader` in the place of its ``Execute``."""
    from nbgrader.converters import Autograde

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    if Execute not in steps:
        raise RuntimeError(f"nbgrader's autograde steps have no Execute step to replace: {steps}")
    return [CourseGrader if step is Execute else step for step in steps]


def grade_one(name: str, data: bytes, settings, no_sandbox: bool, hidden: list[Path]):
    """Grade one notebook (its bytes ``data``) as ``python -m attnedu.grade`` does: (Graded, warnings)."""
    sys.modules.setdefault("rfc3987_syntax", None)  # as attnedu.grade: a slow import nothing here needs
    from . import users
    from .grader import Grader, scratch_folder
    from .sandbox import SandboxError, choose

    warnings = []
    with scratch_folder() as scratch:
        sandbox = choose(no_sandbox, [*hidden, Path(scratch)])
        claim = users.claim() if sandbox.isolated and os.geteuid() == 0 else None
        try:
            uids = claim.uids if claim else users.POOL[: users.BLOCK]
            if sandbox.isolated:
                try:
                    probe(sandbox, uids[0])
                except SandboxError as err:
                    raise RuntimeError(
                        f"bwrap ({sandbox.bwrap}) is installed but cannot start a sandbox here: {err}. "
                        "See docs/instructors.md, 'The sandbox'."
                    ) from err
            else:
                why = "CourseGrader.no_sandbox is True" if no_sandbox else "bubblewrap (bwrap) is not available here"
                warnings.append(WARNING_NO_SANDBOX.format(why=why))
            grader = Grader(settings, sandbox, Path(scratch), uids)
            graded = grader.finish(grader.run_submission(Path(name), 0, data))
            survivors = leftovers(claim) if claim else []
        finally:
            if claim:
                claim.release()
    if survivors:
        warnings.append(f"{len(survivors)} process(es) outlived the sandbox and were killed: " + "; ".join(survivors))
    return graded, warnings


def write_outputs(nb, graded, level: str = "diagnosis") -> None:
    """Each check cell's outputs: the exercise's feedback, then its points as the cell's result (see the module)."""
    from .grader import NOT_GRADED, ExerciseResult

    results = {r.exercise: r for r in graded.results}
    first = True
    for cell in nb.cells:
        if not is_grade(cell):
            continue
        grade_id = cell.metadata.nbgrader.get("grade_id", "")
        if not grade_id.startswith(CHECK_PREFIX) or cell.cell_type != "code":
            raise ValueError(f"grade cell {grade_id!r} is not an exercise's check cell (check_NAME, code)")
        exercise = grade_id[len(CHECK_PREFIX) :]
        result = results.get(exercise) or ExerciseResult(exercise, NOT_GRADED, "the grader could not grade it.")
        points = float(cell.metadata.nbgrader["points"]) * result.score
        text = feedback_text(result, level)
        if first:  # what happened to the notebook, once, above the first exercise
            text = notebook_text(graded, level) + "\n" + text
            first = False
        cell.outputs = [
            new_output("stream", name="stdout", text=text),
            new_output("execute_result", data={"text/plain": f"{points:g}"}, execution_count=None),
        ]


def feedback_text(result, level: str) -> str:
    """One exercise's feedback, as plain text, at ``level`` (what ``scores_report/feedback/`` says of it)."""
    from ..checks.results import FAILED, PARTIAL, TIMEOUT, hint_steps
    from .grader import CRASHED, FLAGGED
    from .reports import HINT_CALL, HINT_STATUSES, STATUS_ICONS, STATUS_TEXT

    lines = [f"{STATUS_ICONS.get(result.status, '')} {result.exercise}: {STATUS_TEXT.get(result.status)}"]
    if level == "score" and result.status != FLAGGED:
        return "\n".join(lines) + "\n"
    if result.message:
        lines.append(result.message)
    if level == "full" and result.status in (FAILED, PARTIAL, TIMEOUT, CRASHED):
        steps = [step for step in hint_steps(result.hint) if step]
        lines += [f"Hint {number}: {step}" for number, step in enumerate(steps, start=1)]
    if level == "diagnosis" and result.hint and result.status in HINT_STATUSES:
        lines.append(HINT_CALL.format(name=result.exercise))  # as scores_report/feedback/ says it
    if result.printed:
        lines += ["Your function printed:", result.printed]
    return "\n".join(lines) + "\n"


def notebook_text(graded, level: str) -> str:
    from .reports import NOTEBOOK_TEXT

    lines = [f"Your notebook {NOTEBOOK_TEXT.get(graded.notebook, graded.notebook)}"]
    if level != "score":
        lines += [f"- {note}" for note in graded.notes]
    return "\n".join(lines) + "\n"


def as_the_learner_saw_it(nb) -> bytes:
    """The notebook's bytes without the hidden part of its check cells (nbgrader_course.GUARD), which autograde put
    back: what ``python -m attnedu.grade`` would grade."""
    import copy

    import nbformat
    from nbgrader.preprocessors import ClearHiddenTests

    shown, _ = ClearHiddenTests().preprocess(copy.deepcopy(nb), {})
    return nbformat.writes(shown).encode("utf-8")


def _course_folders(db_url: str) -> list[Path]:
    """What the sandbox must not show: the folder nbgrader runs in and the gradebook's (the course root)."""
    folders = [Path.cwd()]
    if db_url.startswith("sqlite:///"):
        folders.append(Path(db_url[len("sqlite:///") :]).parent)
    return folders
