"""The galleries of learner functions that tests/test_checks.py runs the checks against: one module per lesson,
``lessonNN.py``, merged here in lesson order. Pure Python, no notebooks.

Each lesson module exports the same tables, for the exercises of its lesson (``attnedu/checks/lessonNN.py``):

* ``CORRECT``: exercise -> correct versions, written as a learner would (loops, einsum, the package's own
  function); every one must pass.
* ``MUTANTS``: (exercise, mutant, a substring of the expected diagnosis): the mistakes a learner is likely to
  make; each must fail with its diagnosis.
* ``OFF_BY_ONE``: exercise -> (one too high, one too low), two of its mutants: an index or length one too high
  and one too low, or the axis of a reduction one too high and one too low, or a state one step late and one
  step early.
* ``KIND_MUTANTS``: (exercise, mutant, kind of test case, a substring of its message): for every exercise a
  mistake that shows only on each kind of test case (a batch of one, no padding, padding, large inputs), which
  the check must still catch. The batch-of-one ones are the first correct version squeezed
  (``common.batch_of_one``).
* ``KINDS_NOT_APPLICABLE``: (exercise, kind of test case) -> why no mistake shows there only (often empty).
* ``BUGS``: the lesson's part of the independent gallery, below.
* ``REFERENCE_USE`` (optional): (exercise, function) pairs, functions that are or call the package's own code where
  the exercise forbids it (``Exercise.forbidden``); each must fail, naming the package function, whatever it
  returns.
* ``PREDICTIONS`` (for a lesson with a graded prediction, ``attnedu.checks.prediction``): (exercise, the learner's
  prediction function, the status it must get, its score, a substring of its message): right predictions (in the
  forms a learner writes them), wrong ones with what each typically assumed, ones with partial credit, malformed
  ones, one computed with the course's code, and one not written yet. A prediction exercise has no CORRECT,
  MUTANTS, OFF_BY_ONE, KIND_MUTANTS or BUGS entries: it has no test cases to vary.

The independent gallery (``BUGS``): buggy solutions, written as a learner would: loops, einsum, gather,
hand-written softmax and tanh, different names and orders; none copied from the checks' known-wrong variants.

Each entry is (exercise, function, what its message must contain): a substring of the diagnosis it must get,
or GENERIC where no specific diagnosis is expected (then no known-wrong variant may be named).
tests/test_checks.py asserts that none gets a wrong diagnosis, and that few get only a count of differing
entries (a message that neither names a variant nor says anything localised).

Within a lesson module: its correct versions, its mutants, its mistakes of one kind of test case, then its
independent gallery, each section followed by its table. What two lessons share (``NEG_INF``, ``GENERIC``,
the batch-of-one mutants) is in ``common.py``.

Adding a lesson: add galleries/lessonNN.py with these tables and one line here, in LESSON_MODULES.

test_checks.py imports this package as ``galleries``: pytest puts ``tests/`` on ``sys.path`` (its default
"prepend" import mode, ``tests/`` having no ``__init__.py``). The modules here are not collected as tests:
none of their names starts with ``test_``.
"""

from __future__ import annotations

from importlib import import_module

from .common import GENERIC

LESSON_MODULES = (
    "lesson01",
    "lesson02",
    "lesson03",
    "lesson04",
    "lesson05",
    "lesson06",
    "lesson07",
    "lesson08",
    "lesson09",
    "lesson10",
    "lesson11",
    "lesson12",
    "lesson13",
)
LESSONS = [import_module(f".{name}", __name__) for name in LESSON_MODULES]

CORRECT = {name: fns for lesson in LESSONS for name, fns in lesson.CORRECT.items()}
MUTANTS = [mutant for lesson in LESSONS for mutant in lesson.MUTANTS]
OFF_BY_ONE = {name: pair for lesson in LESSONS for name, pair in lesson.OFF_BY_ONE.items()}
KIND_MUTANTS = [mutant for lesson in LESSONS for mutant in lesson.KIND_MUTANTS]
KINDS_NOT_APPLICABLE = {key: why for lesson in LESSONS for key, why in lesson.KINDS_NOT_APPLICABLE.items()}
BUGS = [bug for lesson in LESSONS for bug in lesson.BUGS]
REFERENCE_USE = [entry for lesson in LESSONS for entry in getattr(lesson, "REFERENCE_USE", [])]
PREDICTIONS = [entry for lesson in LESSONS for entry in getattr(lesson, "PREDICTIONS", [])]

__all__ = [
    "BUGS", "CORRECT", "GENERIC", "KIND_MUTANTS", "KINDS_NOT_APPLICABLE", "LESSONS", "MUTANTS", "OFF_BY_ONE",
    "REFERENCE_USE", "PREDICTIONS",
]  # fmt: skip
