"""Exercises as data: an :class:`Exercise` names the learner's function, its reference in the package, the test
cases (:class:`Case`) and the known mistakes (:class:`Variant`) with their diagnoses. Each lesson's exercises live in
``lessonNN.py`` beside this file; helpers here build their inputs from fixed seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..masks import padding_mask

# What kind of input a test case is, in its ``tags``: every exercise has a case of each of the first four
# (tests/test_checks.py), and a message may say "it fails exactly on the test cases with <tag>".
ONE, PADDED, UNPADDED, LARGE, EMPTY_ROW, NAN_INPUT = (
    "a batch of one",
    "padding",
    "no padding",
    "large inputs",
    "a fully masked row",
    "a NaN in the inputs",
)
REQUIRED_TAGS = (ONE, PADDED, UNPADDED, LARGE)
SENTENCES = ("sentence", "sentences", "batch index")  # what an index of the first axis is, by default
TAG_ORDER = (EMPTY_ROW, NAN_INPUT, LARGE, ONE, PADDED, UNPADDED)


@dataclass(frozen=True)
class Layout:
    """What an output's axes mean for one test case, so that a message can say where the differences are.

    The batch is always axis 0. ``positions`` is the axis that runs over source (or target) positions, if
    any; ``real`` (batch, positions) is True at real tokens (or where a mask allows), and ``words`` names
    its True and False entries; ``halves`` names the first and second half of the last axis (e.g. the two
    directions of a bidirectional encoder).
    """

    positions: int | None = None
    real: torch.Tensor | None = None
    words: tuple[str, str] = ("real positions", "padding positions")
    halves: tuple[str, str] | None = None


@dataclass(frozen=True)
class Case:
    """One input to an exercise: ``args`` are passed positionally; ``description`` names it in messages;
    ``tags`` say what kind of input it is (ONE, PADDED, UNPADDED, LARGE, EMPTY_ROW, NAN_INPUT)."""

    description: str
    args: tuple
    tags: frozenset[str] = frozenset()
    # The difference allowed in each output entry, relative to the output's largest entry (at least 1) and to the entry
    # itself, where it is larger than the check's default (diagnosis.ATOL, RTOL): for inputs whose size makes every
    # correct order of operations round by more, e.g. attention scores of -400, whose rounding moves exp(s) by about
    # |s| * 2^-24 of itself whatever the order. Values only (not gradients).
    tolerance: float = 0.0


@dataclass(frozen=True, init=False)
class Variant:
    """A known mistake: one diagnosis, and one or more known-wrong versions of the reference that make it (written
    differently, or differing only in a detail the diagnosis does not name). An output equal to one version's output
    on every test case where that version runs (and unlike the reference's on one of them) gets ``diagnosis``."""

    diagnosis: str
    fns: tuple[Callable, ...]

    def __init__(self, diagnosis: str, *fns: Callable):
        if not fns or not all(callable(fn) for fn in fns):
            raise TypeError(f"a Variant needs one or more functions after its diagnosis, got {fns!r}")
        object.__setattr__(self, "diagnosis", diagnosis)
        object.__setattr__(self, "fns", fns)

    @classmethod
    def with_changes(cls, wrong: Callable, diagnosis: str, *changes: dict, **change) -> Variant:
        """The variant whose versions are ``wrong(*args, **c)`` for each keyword dict ``c`` of ``changes`` (one
        version with ``change`` alone when no dict is given): ``wrong`` is the reference with switches, each switch
        one known mistake, as a lesson's ``_..._with`` functions are written."""

        def version(c: dict) -> Callable:
            def fn(*args):
                return wrong(*args, **c)

            return fn

        return cls(diagnosis, *(version(c) for c in (changes or (change,))))


@dataclass(frozen=True)
class Exercise:
    """Everything a check needs. ``returns`` names the output's dimensions, one tuple per output.

    ``hint`` is one text, or a tuple of steps shown one at a time (``hint(name, step)``): a nudge first, then the
    formula or reasoning, then the code. ``forbidden`` names modules of the course whose functions the learner's
    function must not run, when the exercise asks them to write that code themselves (e.g.
    ``("attnedu.positional",)``): a function that is, or calls, one of them fails, whatever it returns."""

    name: str
    lesson: str
    params: tuple[str, ...]
    returns: tuple[tuple[str, ...], ...]
    reference: Callable
    make_cases: Callable[[], list[Case]]
    variants: tuple[Variant, ...]
    hint: str | tuple[str, ...]
    output_names: tuple[str, ...] = ("the output",)
    properties: Callable[[tuple, object], str | None] | None = None  # extra learner-facing checks
    layout: Callable[[tuple], tuple[Layout | None, ...]] | None = None  # one Layout per output, from a case's args
    # The function takes part in training: the check also compares the gradients that flow back from its outputs to
    # its float inputs and to its modules' parameters (calling.input_gradients) with the reference's.
    gradients: bool = False
    # What one index of each output's first axis is, in the exercise's own words (singular, plural, "batch index"
    # or "index"), one per output; by default a sentence of a batch.
    units: tuple[tuple[str, str, str], ...] | None = None
    large_note: str | None = None  # said when NaN or inf appear on large inputs, in the exercise's words
    nan_note: str | None = None  # said when they appear on other inputs
    # said when the values are finite but the gradients that flow back through them are not (default: its usual
    # causes); or a function (the case, the learner's gradients in the order of calling.gradient_leaves) -> that note,
    # or "" for the default, where the cause depends on the test case and the gradients can show which it is
    gradient_nan_note: str | Callable[[Case, tuple], str] | None = None
    # For an exercise whose answer is not a function but, say, a Triton kernel: ``launch(answer, *case.args)`` runs
    # it on a case (the answer is then never called directly).
    launch: Callable | None = None

    def unit(self, output: int = 0) -> tuple[str, str, str]:
        return SENTENCES if self.units is None else self.units[output]

    forbidden: tuple[str, ...] = ()
    # A graded prediction (made with checks.prediction.prediction_exercise): the learner's function takes no argument
    # and returns the prediction, scored against the course's measurement with partial credit.
    prediction: Prediction | None = None


@dataclass(frozen=True)
class Part:
    """One value of a graded prediction. ``kind``: float (a number), bool (yes or no), int (a count, a position) or
    frozenset (a set of positions, given as any list of whole numbers). A float part has a ``margin``: full credit
    within it of the measurement, half within twice it (``relative``: the margin is a fraction of the measurement);
    any other part must equal the measurement. ``unit`` is said after its numbers ("GiB", "nats")."""

    name: str
    kind: type = float
    margin: float | None = None
    relative: bool = False
    unit: str = ""


@dataclass(frozen=True)
class Prediction:
    """What makes an exercise a graded prediction (``Exercise.prediction``): its parts; ``measure()``, the course's
    measurement, one value per part (shown only once the learner has predicted); ``question``, what is predicted, in
    a few words; ``diagnose(index, guess, measured)``, a line on what a wrong guess at part ``index`` typically
    assumed ("" if nothing to say); ``details(measured)``, more of the measurement, shown under the verdict;
    ``credit(index, guess, measured)``, half credit (0.5, else 0) for a guess outside the margins that a reasoned
    route gives (its ``diagnose`` line says where that route runs out); ``observed``, the word for how the course got
    its value ("measured", or "counted" where it counts instead of timing); ``credit_label``, what the verdict calls a
    guess that ``credit`` rewards ("a reasoned route's value"; "in the right order" where it rewards an order)."""

    parts: tuple[Part, ...]
    measure: Callable[[], tuple]
    question: str
    diagnose: Callable[[int, object, tuple], str] | None = None
    details: Callable[[tuple], str] | None = None
    credit: Callable[[int, object, tuple], float] | None = None
    observed: str = "measured"
    credit_label: str = "a reasoned route's value"


# --------------------------------------------------------------------------------------------
# Inputs, from fixed seeds: nothing depends on the learner's seed or on the order they made tensors in
# --------------------------------------------------------------------------------------------


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def explicit_weights(g: torch.Generator, *modules: torch.nn.Module, scale: float = 1.0) -> None:
    """Overwrite every parameter of ``modules``, in order, with ``scale`` times a draw from ``g``: a case's weights
    come from its own seed, not from the global RNG that the modules' constructors drew from."""
    with torch.no_grad():
        for module in modules:
            for p in module.parameters():
                p.copy_(scale * randn(g, *p.shape))


def bool_mask(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def tokens(g: torch.Generator, lengths: list[int], src_len: int, vocab: int = 30) -> torch.Tensor:
    """(batch, src_len) token ids from 3..vocab-1, all different within a row (so that moving a token shows), with
    padding id 0 after each length: a real id never equals the padding id."""
    rows = [torch.randperm(vocab - 3, generator=g)[:src_len] + 3 for _ in lengths]
    return torch.stack(rows).masked_fill(~padding_mask(torch.tensor(lengths), src_len), 0)


def kinds(*tags: str) -> frozenset[str]:
    """A case's tags: ``Case("...", args, kinds(ONE, PADDED))``."""
    return frozenset(tags)
