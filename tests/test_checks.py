"""The graders are tested by their mutants: each check accepts a correct function and rejects the
wrong versions a learner is likely to write, with the right diagnosis. Pure Python, no notebooks.

The galleries are in tests/galleries/, one module per lesson (the tables are described in its __init__.py):

* the mutant gallery: each known mistake, an off-by-one in both directions for every exercise, and
  for every exercise a mistake that shows only on each kind of test case (a batch of one, no padding, padding,
  large inputs), which the check must still catch;
* the independent gallery: bugs written as a learner would, none copied from the checks' variants; none may get
  a wrong diagnosis, and few may get only a count of differing entries;

and this file tests, besides, the decision rule of the engine: every case is called, a variant is named only when
established, what is observed is said without a guessed cause.

Also: a learner's function that raises, returns the wrong type, returns NaN, changes its inputs,
prints a flood or never returns gives a clean failed result, never an exception.

The Triton kernel exercises (lesson 08, part B) are launched by ``attnedu.triton_basics`` under Triton's CPU
interpreter, which tests/conftest.py switches on where there is no GPU. Where triton is not installed they have no
gallery; where it was imported compiled (a GPU machine) their gallery tests are skipped. Their known-wrong variants
are PyTorch functions, checked without a kernel.
"""

from __future__ import annotations

import copy
import functools
import re
import sys
import threading
import time

import pytest
import torch
from galleries import (
    BUGS,
    CORRECT,
    GENERIC,
    KIND_MUTANTS,
    KINDS_NOT_APPLICABLE,
    MUTANTS,
    OFF_BY_ONE,
    PREDICTIONS,
    REFERENCE_USE,
)
from galleries.lesson01 import (
    last_off_by_one,
    last_one_early,
    last_takes_padding,
    learner_last_real_state,
    learner_padding_mask,
    learner_reverse_padded,
    mask_inverted,
)
from galleries.lesson02 import learner_context_vector, learner_masked_softmax, softmax_naive_exp
from galleries.lesson09 import gr_in_place_on_a_copy

from attnedu import checks
from attnedu.attention import additive_score
from attnedu.checks import FAILED, NOT_ATTEMPTED, PASSED, CheckResult, mistakes
from attnedu.checks import diagnosis as engine
from attnedu.checks.calling import in_process
from attnedu.checks.diagnosis import run_check, same
from attnedu.checks.exercise import NAN_INPUT, PADDED, REQUIRED_TAGS, UNPADDED
from attnedu.checks.results import make_hint
from attnedu.masks import padding_mask

# Exercises with a gallery of functions: all but the graded predictions (which have a gallery of predictions,
# PREDICTIONS), and the kernel exercises only where triton is installed
GALLERY_EXERCISES = {
    name for name, e in checks.EXERCISES.items() if e.prediction is None and (e.launch is None or name in CORRECT)
}
PREDICTION_EXERCISES = {name for name, e in checks.EXERCISES.items() if e.prediction is not None}


def _runnable(name: str) -> bool:
    """Whether the check of ``name`` can run its answers here: a kernel needs triton's interpreter on."""
    if checks.EXERCISES[name].launch is None:
        return True
    from attnedu.triton_basics import triton_state

    return name in CORRECT and triton_state() == "interpreted"


def _skip_unless_runnable(name: str) -> None:
    if not _runnable(name):
        pytest.skip("a kernel exercise: needs triton's CPU interpreter, switched on before triton is imported")


# --------------------------------------------------------------------------------------------
# The mutant gallery: the correct versions pass, each mutant gets its diagnosis
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, fn", [(name, fn) for name, fns in CORRECT.items() for fn in fns], ids=lambda x: getattr(x, "__name__", x)
)
def test_correct_versions_pass(name, fn):
    _skip_unless_runnable(name)
    result = checks.check(name, fn)
    assert result.status == PASSED, repr(result)
    assert result.score == 1


def test_every_exercise_has_a_correct_version_and_mutants():
    assert set(CORRECT) == GALLERY_EXERCISES
    counts = {name: sum(1 for m in MUTANTS if m[0] == name) for name in GALLERY_EXERCISES}
    assert min(counts.values()) >= 5, counts


def test_the_bidirectional_summary_is_what_the_package_encoder_hands_its_decoder():
    """The exercise's reference equals attnedu.models.Encoder's summary (h_n of a bidirectional GRU)."""
    from attnedu.models import Encoder

    reference = checks.EXERCISES["bidirectional_summary"].reference
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = Encoder(vocab_size=20, emb_dim=4, hidden_dim=3, bidirectional=True)
        src = torch.randint(3, 20, (3, 6))
    lengths = torch.tensor([6, 2, 4])
    src = src.masked_fill(~padding_mask(lengths, 6), 0)
    with torch.no_grad():
        memory = encoder(src, lengths)
    assert torch.allclose(reference(memory.annotations, lengths), memory.summary, atol=1e-6)


def test_the_luong_references_are_what_the_package_decoder_computes():
    """attend_all_steps is LuongAttention("general") over every step; general_decoder_step is one step of
    attnedu.models.LuongDecoder with input feeding and the general score (same weights, same numbers)."""
    from attnedu.attention import LuongAttention
    from attnedu.models import EncoderOutput, LuongDecoder

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        decoder = LuongDecoder(vocab_size=9, emb_dim=3, hidden_dim=4, enc_dim=5, score="general", input_feeding=True)
        embedded, state, attentional = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
        annotations, states = torch.randn(2, 6, 5), torch.randn(2, 3, 4)
    lengths = torch.tensor([6, 3])
    mask = padding_mask(lengths, 6)
    cell = torch.nn.GRUCell(7, 4)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(decoder.rnn, f"{name}_l0"))
        memory = EncoderOutput(annotations, summary=annotations[:, 0], mask=mask)
        logits, (new_state, new_attentional), weights = decoder._step(embedded, (state, attentional), memory)
        step = checks.EXERCISES["general_decoder_step"].reference
        args = (embedded, state, attentional, annotations, mask, decoder.attention.W_a, cell, decoder.combine)
        ours = step(*args, decoder.out)
        for a, b in zip(ours, (logits, new_state, new_attentional, weights), strict=True):
            assert torch.allclose(a, b, atol=1e-6)
        attention = LuongAttention("general", 4, 5)
        context, all_weights = attention(states, annotations, mask)
        attend = checks.EXERCISES["attend_all_steps"].reference
        for a, b in zip(attend(states, annotations, lengths, attention.W_a), (context, all_weights), strict=True):
            assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("name, mutant, diagnosis", MUTANTS, ids=[m[1].__name__ for m in MUTANTS])
def test_mutant_is_rejected_with_its_diagnosis(name, mutant, diagnosis):
    _skip_unless_runnable(name)
    result = checks.check(name, mutant)
    assert result.status == FAILED, repr(result)
    assert result.score == 0
    assert diagnosis in result.message, repr(result)


def test_every_exercise_has_an_off_by_one_in_both_directions():
    assert set(OFF_BY_ONE) == GALLERY_EXERCISES
    in_gallery = {m[1] for m in MUTANTS}
    for name, pair in OFF_BY_ONE.items():
        assert set(pair) <= in_gallery, name
        assert {m[0] for m in MUTANTS if m[1] in pair} == {name}


def test_every_known_wrong_variant_gets_its_own_diagnosis():
    """Each variant inside a check, submitted as is, is recognised (none is shadowed by an earlier one). A kernel
    exercise's variants are PyTorch functions: they are called directly, not launched."""
    for name, exercise in checks.EXERCISES.items():
        for variant in exercise.variants:
            for fn in variant.fns:
                result = run_check(exercise, fn, caller=in_process(fn)) if exercise.launch else checks.check(name, fn)
                assert result.status == FAILED and variant.diagnosis in result.message, (
                    name,
                    variant.diagnosis,
                    result,
                )


def _outputs(fn, cases, launch=None):
    """fn's output on each case (``launch(fn, ...)``'s, for a kernel), or None where it raises."""
    outputs = []
    for case in cases:
        try:
            with torch.no_grad():
                args = copy.deepcopy(case.args)
                outputs.append(fn(*args) if launch is None else launch(fn, *args))
        except Exception:
            outputs.append(None)
    return outputs


def test_distinct_mistakes_give_distinct_outputs():
    """No variant would be named for another variant with a different diagnosis: the inputs tell them apart (a
    variant is named when it equals the output on every case where it runs), and each differs from the reference."""
    for name, exercise in checks.EXERCISES.items():
        if exercise.prediction is not None:
            continue  # no variants: a prediction is scored against the measurement
        cases = exercise.make_cases()
        reference = _outputs(exercise.reference, cases)
        versions = [(v, fn) for v in exercise.variants for fn in v.fns]
        outputs = [_outputs(fn, cases) for _, fn in versions]
        tolerances = [case.tolerance for case in cases]
        for (variant, _), mine in zip(versions, outputs, strict=True):
            assert any(
                o is not None and not same(r, o, t) for o, r, t in zip(mine, reference, tolerances, strict=True)
            ), variant
            for (other, _), theirs in zip(versions, outputs, strict=True):
                if other.diagnosis == variant.diagnosis:
                    continue
                shadowed = all(
                    t is None or (m is not None and same(t, m, tol))
                    for m, t, tol in zip(mine, theirs, tolerances, strict=True)
                )
                assert not shadowed, (name, variant.diagnosis, "would also be", other.diagnosis)


def test_kernel_variants_do_not_depend_on_how_exp_underflows(monkeypatch):
    """A kernel's known-wrong variant (a PyTorch function) stands for what the interpreter computes with NumPy, whose
    exp2 may round a result below 2^-126 to a subnormal number or to 0 depending on the machine (it gives 0 for
    2^-149.66 with AVX-512 here): whether a wrong kernel's l comes out 0, and its output NaN, must not hinge on that.
    So each variant gives the same output on every case with its exponentials computed as they are, with subnormal
    results flushed to 0, and in float64 (rounded to float32 after)."""

    def flushed(fn):
        def exp(*args, **kwargs):
            x = fn(*args, **kwargs)
            return torch.where(x.abs() < 2.0**-126, torch.zeros_like(x), x)

        return exp

    def in_double(fn):
        def exp(*args, **kwargs):
            args = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
            return fn(*args, **kwargs).float()

        return exp

    real = {"pow": torch.pow, "exp": torch.exp, "softmax": torch.softmax}
    kernels = [(n, e) for n, e in checks.EXERCISES.items() if e.launch is not None]
    assert kernels
    for name, exercise in kernels:
        cases = exercise.make_cases()
        for variant in exercise.variants:
            for fn in variant.fns:
                outputs = {}
                for mode, wrap in (("as is", lambda f: f), ("flushed", flushed), ("float64", in_double)):
                    with monkeypatch.context() as patched:
                        for op, f in real.items():
                            patched.setattr(torch, op, wrap(f))
                        outputs[mode] = _outputs(fn, cases)
                for mode in ("flushed", "float64"):
                    for number, (a, b) in enumerate(zip(outputs["as is"], outputs[mode], strict=True), start=1):
                        assert (a is None) == (b is None) and (a is None or same(a, b, cases[number - 1].tolerance)), (
                            name, variant.diagnosis[:60], mode, number)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Each kind of test case catches a mistake the others miss
# --------------------------------------------------------------------------------------------


def test_every_exercise_has_every_kind_of_test_case():
    """Every kind of test case, and a mistake that shows there only; where padding does not apply (RoPE rotates
    whatever it is given), the exercise has neither padded nor unpadded cases, and KINDS_NOT_APPLICABLE says so."""
    for name, exercise in checks.EXERCISES.items():
        if exercise.prediction is not None:
            continue  # one call with no argument: no kinds of input
        tags = set().union(*(case.tags for case in exercise.make_cases()))
        without_padding = {(name, PADDED), (name, UNPADDED)} <= set(KINDS_NOT_APPLICABLE)
        required = set(REQUIRED_TAGS) - ({PADDED, UNPADDED} if without_padding else set())
        assert required <= tags, (name, required - tags)
    covered = {(name, tag) for name, _, tag, _ in KIND_MUTANTS}
    assert covered == {(name, tag) for name in GALLERY_EXERCISES for tag in REQUIRED_TAGS} - set(KINDS_NOT_APPLICABLE)


@pytest.mark.parametrize(
    "name, mutant, tag, diagnosis", KIND_MUTANTS, ids=[f"{m[0]}-{m[2].replace(' ', '_')}" for m in KIND_MUTANTS]
)
def test_each_kind_of_case_catches_a_mistake_the_others_miss(name, mutant, tag, diagnosis):
    _skip_unless_runnable(name)
    exercise = checks.EXERCISES[name]
    cases = exercise.make_cases()
    got_outputs = _outputs(mutant, cases, exercise.launch)
    failing = [
        case
        for case, got, expected in zip(cases, got_outputs, _outputs(exercise.reference, cases), strict=True)
        if got is None or not same(expected, got, case.tolerance)
    ]
    assert failing and all(tag in case.tags for case in failing), [c.description for c in failing]
    result = checks.check(name, mutant)
    assert result.status == FAILED and diagnosis in result.message, repr(result)


# --------------------------------------------------------------------------------------------
# The independent gallery: no wrong diagnosis, few messages that say only how many entries differ
# --------------------------------------------------------------------------------------------

_SPECIFIC = {"variant", "where", "cases", "scale", "precision", "nonfinite", "type", "dtype", "shape", "property"}
_SPECIFIC |= {"error", "inplace", "timeout", "crashed", "also"}


def _gallery_results():
    return [(name, fn, expected, checks.check(name, fn)) for name, fn, expected in BUGS if _runnable(name)]


@pytest.fixture(scope="module")
def gallery():
    return _gallery_results()


def test_the_independent_gallery_is_large_enough():
    counts = {name: sum(1 for b in BUGS if b[0] == name) for name in GALLERY_EXERCISES}
    assert min(counts.values()) >= 6, counts

    def code(fn):
        fn = getattr(fn, "fn", fn)  # a Triton kernel: its Python function
        return fn.__code__.co_code, fn.__code__.co_names, fn.__code__.co_consts[1:]  # [0]: the docstring

    ours = {code(m[1]) for m in MUTANTS} | {
        code(fn) for e in checks.EXERCISES.values() for v in e.variants for fn in v.fns
    }
    assert not [fn.__name__ for _, fn, _ in BUGS if code(fn) in ours]  # none copied


def test_no_bug_of_the_independent_gallery_gets_a_wrong_diagnosis(gallery):
    wrong = []
    for name, fn, expected, result in gallery:
        named = [v.diagnosis for v in checks.EXERCISES[name].variants if v.diagnosis in result.message]
        if result.status != FAILED:
            wrong.append((fn.__name__, "not failed", result.status))
        elif expected == GENERIC and named:
            wrong.append((fn.__name__, "named a variant", named[0]))
        elif expected != GENERIC and (expected not in result.message or any(expected not in d for d in named)):
            wrong.append((fn.__name__, expected, result.message))
    assert not wrong, wrong


def test_few_bugs_get_only_a_count_of_differing_entries(gallery):
    only_count = [fn.__name__ for _, fn, _, result in gallery if not set(result.findings) & _SPECIFIC]
    fraction = len(only_count) / len(gallery)
    print(f"\ngeneric-only messages: {len(only_count)} of {len(gallery)} bugs ({fraction:.1%}): {only_count}")
    assert fraction <= 0.15, only_count


# --------------------------------------------------------------------------------------------
# Messages name the mistake and where it shows, never the corrected code (issue 25)
# --------------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][\w.]*")  # a bare (dotted) name: an argument, a function, a module
_CALL = re.compile(r"[\w\])]\s*\(")  # f(...), x.m(...), a[...](...)
_ASSIGNMENT = re.compile(r"(?<![=!<>~+\-*/%&|^])=(?!=)|[+\-*/%&|^]=")  # x = ..., x += ..., keyword=value
_INDEXING = re.compile(r"\w\s*\[")  # x[:, None], pe[:, 0::2]
_LIBRARY_CALL = re.compile(r"\b(?:torch|tl|F|nn|math|statistics|np)\.[\w.]*\w\s*\(|(?<![\w)\]])\.[a-z_]\w*\(")


def _printed_fixes(text: str) -> list[str]:
    """The code fragments of a message that a learner could paste as the fix: every backquoted fragment that is not
    a bare name (a call, an assignment or keyword argument, an indexing, an expression with operators), and any call
    of a library function or method, backquoted or not."""
    found = []
    for fragment in re.findall(r"`([^`]+)`", text):
        fragment = fragment.strip()
        if _NAME.fullmatch(fragment):
            continue
        kinds = [
            k for k, p in (("call", _CALL), ("assignment", _ASSIGNMENT), ("indexing", _INDEXING)) if p.search(fragment)
        ]
        found.append(f"`{fragment}` ({', '.join(kinds) or 'expression'})")
    found += [f"{m.group(0)}... (library call)" for m in _LIBRARY_CALL.finditer(re.sub(r"`[^`]+`", "", text))]
    return found


def _fix_lesson_messages() -> list[tuple[str, str]]:
    """(where, text) for every message written in advance, in every lesson of the registry (``checks.EXERCISES``):
    the known-wrong variants' diagnoses, the notes on NaN and large inputs, and the engine's shared texts they can be
    shown with."""
    texts = []
    for name, exercise in checks.EXERCISES.items():
        texts += [(f"{name}: variant {i}", v.diagnosis) for i, v in enumerate(exercise.variants)]
        for note in ("large_note", "nan_note", "gradient_nan_note"):
            text = getattr(exercise, note)
            if callable(text):  # a note chosen by the test case: its texts are its module's constants
                module = sys.modules[text.__module__]
                texts += [(f"{name}: {note}, {n}", t) for n, t in vars(module).items() if n.isupper() and
                          isinstance(t, str) and n.endswith("_NOTE")]  # fmt: skip
            else:
                texts.append((f"{name}: {note}", text))
    texts += [(f"engine._DTYPE_ADVICE[{d}]", t) for d, t in engine._DTYPE_ADVICE.items()]
    texts += [
        ("engine.LARGE_INPUTS_NOTE", engine.LARGE_INPUTS_NOTE),
        ("engine.NAN_NOTE", engine.NAN_NOTE),
        ("engine.GRADIENT_NAN_NOTE", engine.GRADIENT_NAN_NOTE),
        ("engine._INPLACE_CAUSE", engine._INPLACE_CAUSE),
    ]
    texts += [(f"mistakes.{n}", t) for n, t in vars(mistakes).items() if n.isupper() and isinstance(t, str)]
    return [(where, text) for where, text in texts if text]


def test_the_fix_scan_catches_printed_fixes():
    """The scan below flags the kinds of fix the old messages printed, and lets names and prose through."""
    for fix in ("Use `float('-inf')`.", "compare `positions < lengths`", "`masked_fill(~mask, ...)`",
                "Rows are `is_global[:, :, None]`", "create it with `dtype=dtype`", "`ref = m_new`",
                "Use torch.quantile(x, 0.5) or statistics.median", "over the features: .mean(dim=-1)"):  # fmt: skip
        assert _printed_fixes(fix), fix
    for prose in ("Blocked entries must be -inf: True means may attend.", "rotate the keys by `k_positions`",
                  "`torch.median` returns the lower middle value", "sqrt(mean(x ** 2) + eps), one per position",
                  "exp(m_i - m) is at most 1 (e.g. for the first state)"):  # fmt: skip
        assert not _printed_fixes(prose), prose


def test_lesson_messages_print_no_fix():
    """Every diagnosis of every lesson names the mistake by its cause and where it shows, and may state the rule
    the right answer obeys, but never the corrected line: no backquoted code but bare names, no library call."""
    texts = _fix_lesson_messages()
    scanned = {checks.EXERCISES[where.split(":")[0]].lesson for where, _ in texts if ":" in where
               and where.split(":")[0] in checks.EXERCISES}  # fmt: skip
    assert scanned == set(checks.LESSONS)  # every lesson of the registry (attnedu.checks), a new one as it joins
    assert len(texts) > 250  # every variant of every lesson, and the shared texts
    printed = [(where, _printed_fixes(text)) for where, text in texts if _printed_fixes(text)]
    assert not printed, "\n".join(f"{where}: {', '.join(fixes)}" for where, fixes in printed)


@pytest.mark.parametrize(
    "name, fn, finding",
    [
        ("to_additive", lambda mask, dtype: torch.zeros(mask.shape, dtype=dtype)[None], "shape"),
        ("group_rms_norm", lambda x, w, groups, eps: x.mul_(2.0), "inplace"),
        ("group_rms_norm", gr_in_place_on_a_copy, "gradient"),
        ("document_mask", lambda ids: (ids[:, :, None] == ids[:, None, :]).long(), "dtype"),
        ("last_real_state", lambda s, n: s.detach()[torch.arange(s.shape[0]), n - 1], "gradient"),
        ("additive_score", lambda q, k, W, U, v: torch.tensor(additive_score(q, k, W, U, v).tolist()), "gradient"),
    ],
    ids=["extra-dimension", "in-place", "in-place-in-autograd", "dtype", "gradient-cut", "gradient-through-python"],
)
def test_the_engines_own_messages_print_no_fix(name, fn, finding):
    """The messages the engine writes itself (a shape with an extra axis, an input changed in place, a wrong
    dtype, gradients that do not flow back) explain what went wrong without handing over the line that fixes it."""
    result = checks.check(name, fn)
    assert result.status == FAILED and finding in result.findings, repr(result)
    assert not _printed_fixes(result.message), (result.message, _printed_fixes(result.message))


# --------------------------------------------------------------------------------------------
# The decision rule
# --------------------------------------------------------------------------------------------


def _counting(fn):
    calls = []

    def counted(*args):
        calls.append(1)
        return fn(*args)

    return counted, calls


def test_every_case_is_called_even_after_a_mismatch():
    counted, calls = _counting(mask_inverted)
    result = checks.check_padding_mask(counted)
    assert result.status == FAILED and len(calls) == len(checks.EXERCISES["padding_mask"].make_cases())


def test_a_hard_problem_is_reported_at_its_case_unless_values_failed_before():
    def raises_on_case_3(lengths, max_len):
        if len(lengths) == 1:
            raise ValueError("a batch of one confuses me")
        return torch.arange(max_len)[None, :] < lengths[:, None]

    result = checks.check_padding_mask(raises_on_case_3)
    assert result.where.startswith("test case 3 of 6") and "raised ValueError" in result.message

    def wrong_then_raises(lengths, max_len):
        if len(lengths) == 1:
            raise ValueError("a batch of one confuses me")
        return torch.arange(max_len)[None, :] <= lengths[:, None]

    result = checks.check_padding_mask(wrong_then_raises)
    assert result.where.startswith("test case 1 of 6") and "one True too many" not in result.message
    assert "Also, on test case 3 of 6" in result.message and "raised ValueError" in result.message


def test_a_variant_is_named_only_when_every_case_where_it_runs_agrees():
    def off_by_one_on_the_first_case_only(lengths, max_len):
        mask = torch.arange(max_len)[None, :] < lengths[:, None]
        if lengths.tolist() == [3, 5, 1]:
            mask = torch.arange(max_len)[None, :] <= lengths[:, None]
        return mask

    result = checks.check_padding_mask(off_by_one_on_the_first_case_only)
    assert result.status == FAILED and "variant" not in result.findings
    assert not [v for v in checks.EXERCISES["padding_mask"].variants if v.diagnosis in result.message]
    # what was observed instead: where, and on which cases
    assert "only at the first padding position after a sentence (index length)" in result.message


def test_no_call_after_a_time_out():
    _needs_main_thread()
    counted, calls = _counting(lambda lengths, max_len: time.sleep(5))
    result = checks.check_padding_mask(counted, time_limit=0.1)
    assert result.status == FAILED and len(calls) == 1 and "did not finish" in result.message


def test_overflow_is_named_only_on_large_inputs():
    def naive(scores, mask):
        e = torch.exp(scores).masked_fill(~mask, 0.0)
        return e / e.sum(dim=-1, keepdim=True)

    result = checks.check_masked_softmax(naive)  # NaN first in the fully masked row: 0/0, no overflow claimed
    assert "NaN" in result.message and "only in row 1" in result.message and "large inputs" not in result.message
    result = checks.check_masked_softmax(softmax_naive_exp)  # NaN only with scores around ±500
    assert (
        "This test case has large inputs" in result.message
        and "If your function computes one by hand" in result.message
    )
    assert "except the ones with large inputs" in result.message


@pytest.mark.parametrize(
    "name, fn, observed",
    [
        (
            "reverse_padded",
            lambda src, lengths: torch.where(
                padding_mask(lengths, src.shape[1]), learner_reverse_padded(src, lengths), 1
            ),
            "only at padding positions; every one of the real tokens matches",
        ),
        (
            "last_real_state",
            lambda s, n: torch.cat([learner_last_real_state(s, n)[:-1], s[-1:, 0]]),
            "all in one sentence, batch index 3",
        ),
        (
            "masked_softmax",
            lambda s, m: learner_masked_softmax(s, m).masked_fill(~m.any(-1, keepdim=True), 0.5),
            "only in row 1, which has no positions the mask allows at all",
        ),
        (
            "additive_score",
            lambda q, k, W, U, v: torch.cat([additive_score(q, k, W, U, v)[:, :-1], q[:, :1]], dim=1),
            "only at the last position",
        ),
        (
            "bidirectional_summary",
            lambda s, n: torch.cat([s[:, -1, : s.shape[-1] // 2], s[:, 0, s.shape[-1] // 2 :]], dim=-1) * 1.0001,
            "",
        ),
        (
            "context_vector",
            lambda w, v: 2 * learner_context_vector(w, v),
            "every entry of yours is the reference's times 2",
        ),
    ],
    ids=["padding", "one-sentence", "empty-row", "last-position", "no-false-claim", "scale"],
)
def test_what_is_observed_is_said(name, fn, observed):
    result = checks.check(name, fn)
    assert result.status == FAILED and observed.lower() in result.message.lower(), repr(result)


def _in_16_bits(fn, dtype):
    """``fn`` computed in ``dtype`` (float16 or bfloat16) and its outputs cast back to float32, as a learner used to
    GPUs might write it."""

    def wrapped(*args):
        out = fn(*(a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args))
        return tuple(o.float() for o in out) if isinstance(out, tuple) else out.float()

    return wrapped


@pytest.mark.parametrize("name, dtype", [("kv_cache_chunk", torch.float16), ("rolling_step", torch.bfloat16),
                                         ("paged_decode", torch.float16)])  # fmt: skip
def test_values_rounded_to_16_bits_are_named_as_rounding_not_as_a_factor(name, dtype):
    """Issue 30: 'times 1, the same factor everywhere' and 'expected -1.582, got -1.582' for a float16 answer. Such an
    answer is now named as rounded to its format, the entries shown with the digits that tell them apart, and no
    factor is claimed."""
    from galleries.lesson10 import CORRECT

    result = checks.check(name, _in_16_bits(CORRECT[name][0], dtype))
    format_name = str(dtype).removeprefix("torch.")
    assert result.status == FAILED and f"Every entry of yours is a {format_name} number" in result.message, result
    assert "precision" in result.findings and "the size of that rounding" in result.message, result
    assert "factor" not in result.message, result
    shown = re.search(r"expected (\S+), got (\S+)\.", result.message)
    assert shown and shown.group(1) != shown.group(2), result.message


def test_a_factor_is_named_only_where_it_stands_out_from_rounding():
    """A true factor is named; a 'factor' of 1.0002 whose ratios spread like rounding is not, and the differences are
    then said to be small instead."""
    assert engine._one_factor(torch.full((20,), 0.125))
    assert not engine._one_factor(1 + 2e-4 * torch.linspace(-1, 1, 20))
    assert not engine._one_factor(torch.ones(20))
    result = checks.check("context_vector", lambda w, v: learner_context_vector(w, v) * (1 + 3e-4))
    assert result.status == FAILED and "factor" not in result.message, result
    assert "All the differences are small" in result.message and "size" in result.findings, result


def test_local_and_remote_calls_give_the_same_result():
    """The grader's caller replays what a kernel recorded for every case; the decision is the same."""
    from attnedu.grading.results import remote_call

    exercise = checks.EXERCISES["last_real_state"]
    assert exercise.gradients  # so the kernel's second call, with gradients on, is replayed too
    cases = exercise.make_cases()
    detached = lambda s, n: learner_last_real_state(s.detach(), n)  # noqa: E731 (right values, no gradient)
    for fn in (last_off_by_one, last_one_early, lambda s, n: s.sum(1), learner_last_real_state, detached):
        local = checks.check("last_real_state", fn)
        records = {}
        for index, case in enumerate(cases):
            args = copy.deepcopy(case.args)
            call = checks.calling.call_learner(fn, args, 5.0, copy.deepcopy(case.args))
            records[index] = {"value": call.value, "args": args, "error_name": call.error_name,
                              "error_text": call.error_text, "error_line": call.error_line,
                              "gradients": call.gradients, "gradient_error": call.gradient_error}  # fmt: skip
        remote = checks.diagnosis.run_check(
            exercise, "last_real_state", caller=remote_call(records, "done"), cases=cases
        )
        assert (remote.status, remote.message, remote.where) == (local.status, local.message, local.where)
        if fn is detached:
            assert local.status == FAILED and "no gradient flows back" in local.message, local


# --------------------------------------------------------------------------------------------
# Gradients: every mathematically equal implementation passes; a cause is named only where established (issue 30)
# --------------------------------------------------------------------------------------------


def _hidden(context, state, W_c):
    return torch.cat([context, state], dim=-1) @ W_c.T


class _Float32Noise(torch.autograd.Function):
    """The identity, whose backward in float32 (only) multiplies the gradient by 1.01: a step that loses precision
    on the way back in float32 and is exact in float64."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 1.01 if grad.dtype == torch.float32 else grad


def _ah_twice(context, state, W_c):
    z = _hidden(context, state, W_c)
    return torch.tanh(2 * z - z.detach())  # the value of z, twice its gradient


def _ah_half(context, state, W_c):
    z = _hidden(context, state, W_c)
    return torch.tanh(0.5 * z + 0.5 * z.detach())


def _ah_imprecise(context, state, W_c):
    return torch.tanh(_Float32Noise.apply(_hidden(context, state, W_c)))


def _ah_float32_detached(context, state, W_c):
    return torch.tanh(_hidden(context, state, W_c.to(torch.float32).detach()))


GRADIENT_FINDINGS = [
    (_ah_twice, "is exactly twice the reference's, entry by entry"),
    (_ah_half, "is the reference's times 0.5, entry by entry"),
    (_ah_imprecise, "in float32, where training runs, the gradient that flows back to"),
    (_ah_float32_detached, "no gradient flows back from your outputs to `W_c`"),
]


def test_gradient_rounding_of_the_correct_versions_is_well_within_the_spread():
    """The float32 tolerance of a gradient (GRADIENT_SPREAD of its largest entry), against what rounding does to the
    galleries' correct versions: the worst (a tanh written with a sigmoid, about 8e-5 of the largest entry) is below
    a fifth of it (7.1e-5 with the default kernels, 8.1e-5 with AVX2 or AVX-512)."""
    worst = []
    for name, exercise in checks.EXERCISES.items():
        if not exercise.gradients:
            continue
        for fn in CORRECT[name]:
            for case in exercise.make_cases():
                if NAN_INPUT in case.tags:
                    continue  # its gradients are NaN by design, and not compared
                expected = checks.calling.input_gradients(exercise.reference, copy.deepcopy(case.args))
                got = checks.calling.input_gradients(fn, copy.deepcopy(case.args))
                largest = max(float(e.abs().max()) for e in expected)
                gap = max(float((e - g).abs().max()) for e, g in zip(expected, got, strict=True))
                worst.append((gap / largest, name, fn.__name__))
    assert max(worst)[0] <= engine.GRADIENT_SPREAD / 5, max(worst)


def test_every_reference_that_takes_part_in_training_runs_in_float64():
    """The gradients are compared in float64 where both functions run in float64 (else only within the spread in
    float32): every reference must, on every case, with float64 outputs."""
    for name, exercise in checks.EXERCISES.items():
        if not exercise.gradients:
            continue
        for case in exercise.make_cases():
            value, gradients = checks.calling.double_gradients(exercise.reference, copy.deepcopy(case.args))
            outputs = value if isinstance(value, tuple) else (value,)
            floats = [o for o in outputs if isinstance(o, torch.Tensor) and o.is_floating_point()]
            assert floats and all(o.dtype == torch.float64 for o in floats), (name, case.description)
            assert all(g.dtype == torch.float64 for g in gradients), (name, case.description)


def test_equal_implementations_pass_whatever_float32_rounding_does_to_their_gradients():
    """Issue 30's two cases: tanh as 2 sigmoid(2x) - 1, PyTorch's attention for the heads beside the weights. With
    AVX kernels their float32 gradients differ from the reference's by more than the values' tolerance on the large
    inputs (not with every kernel set: rounding depends on it); in float64 they agree on every machine. A version
    that refuses float64 is judged in float32, within the spread."""
    from galleries.lesson03 import learner_attentional_hidden_float32, learner_attentional_hidden_sigmoid
    from galleries.lesson05 import learner_multi_head_attention_sdpa

    cases = [
        ("attentional_hidden", learner_attentional_hidden_sigmoid),
        ("multi_head_attention", learner_multi_head_attention_sdpa),
        ("attentional_hidden", learner_attentional_hidden_float32),
    ]
    for name, fn in cases:
        assert checks.check(name, fn).status == PASSED, checks.check(name, fn)
    large = checks.EXERCISES["attentional_hidden"].make_cases()[-1]
    call = checks.calling.call_learner(learner_attentional_hidden_float32, large.args, 5.0, copy.deepcopy(large.args))
    assert call.gradients is not None and call.gradients64 is None  # it does not run in float64
    exercise = checks.EXERCISES["attentional_hidden"]
    expected = checks.calling.input_gradients(exercise.reference, copy.deepcopy(large.args))
    got = checks.calling.input_gradients(learner_attentional_hidden_sigmoid, copy.deepcopy(large.args))
    print("per entry, as before issue 30:", "equal" if all(same(e, g) for e, g in zip(expected, got)) else "refused")


@pytest.mark.parametrize("fn, finding", GRADIENT_FINDINGS, ids=[f[0].__name__ for f in GRADIENT_FINDINGS])
def test_a_gradient_cause_is_named_only_where_the_numbers_establish_it(fn, finding):
    result = checks.check("attentional_hidden", fn)
    assert result.status == FAILED and finding in result.message, repr(result)
    assert "gradient" in result.findings and not _printed_fixes(result.message), result.message
    if "twice" not in finding:
        assert "twice" not in result.message
    if "no gradient" not in finding:
        assert "cut off" not in result.message and "no gradient" not in result.message


def test_an_autograd_error_from_an_in_place_step_is_named_as_one():
    """Autograd's "modified by an inplace operation" is an in-place step on a tensor it saved, not a cut: issue 30's
    review had it blamed on detach and NumPy."""
    result = checks.check("group_rms_norm", gr_in_place_on_a_copy)
    assert result.status == FAILED and "modified by an inplace operation" in result.message, repr(result)
    assert "an in-place operation" in result.message and "detach" not in result.message, result.message


def test_a_gradient_factor_that_prints_as_1_is_not_given_as_a_factor():
    """A gradient off by 2e-5 of itself everywhere (an eps slightly off, say) is not "the reference's times 1"."""
    expected = torch.linspace(1.0, 2.0, 12).reshape(3, 4)
    got = expected * (1 + 2e-5)
    close = [torch.zeros(3, 4, dtype=torch.bool)]
    message = engine._gradient_difference(["`x`"], (expected,), (got,), close, spread=1e-6)
    assert "times 1," not in message and "a small amount, about the same fraction (2e-05)" in message, message
    doubled = engine._gradient_difference(["`x`"], (expected,), (1.5 * expected,), close, spread=1e-6)
    assert "the reference's times 1.5, entry by entry" in doubled, doubled


def test_one_factor_per_single_entry_is_given_as_a_ratio():
    """With one entry per layer, "within each layer, every entry is times one factor" would say nothing."""
    result = checks.check("largest_qk_score", lambda gq, gk: (gq * gk).norm(dim=-1))
    assert "Yours divided by the reference's, layer by layer:" in result.message, result.message
    assert "Within each layer" not in result.message


def test_a_gradient_that_differs_otherwise_is_described_not_explained():
    """A difference that is neither zero nor one factor: which inputs, how many entries, the largest difference."""
    from galleries.lesson03 import aas_item_lengths

    result = checks.check("attend_all_steps", aas_item_lengths)
    assert result.status == FAILED and "entries differ, the largest difference at index" in result.message
    assert "cut off" not in result.message and "twice" not in result.message, result.message


@pytest.mark.parametrize("fn", [GRADIENT_FINDINGS[0][0], GRADIENT_FINDINGS[2][0], GRADIENT_FINDINGS[3][0]])
def test_the_grader_compares_gradients_as_the_check_does(fn):
    """The kernel records the float64 call too; the replayed decision is the in-process one."""
    from galleries.lesson03 import learner_attentional_hidden_float32, learner_attentional_hidden_sigmoid

    from attnedu.grading.kernel import encode
    from attnedu.grading.results import decode, remote_call

    exercise = checks.EXERCISES["attentional_hidden"]
    cases = exercise.make_cases()
    for function in (fn, learner_attentional_hidden_sigmoid, learner_attentional_hidden_float32):
        records = {}
        for index, case in enumerate(cases):
            args = copy.deepcopy(case.args)
            call = checks.calling.call_learner(function, args, 5.0, copy.deepcopy(case.args))
            records[index] = {key: decode(encode(getattr(call, key))) for key in ("value", "gradients", "value64",
                              "gradients64")} | {"args": args}  # fmt: skip
        remote = run_check(exercise, "attentional_hidden", caller=remote_call(records, "done"), cases=cases)
        local = checks.check("attentional_hidden", function)
        assert (remote.status, remote.message) == (local.status, local.message)


# --------------------------------------------------------------------------------------------
# Graded predictions (attnedu.checks.prediction)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_predictions():
    """No prediction recorded before or after the test (the record lives for the process, as in a kernel)."""
    from attnedu.checks.prediction import forget_predictions

    forget_predictions()
    yield
    forget_predictions()


def test_every_prediction_exercise_has_its_gallery():
    """Each graded prediction: a right one, a wrong one, a partly right one (where it has a margin or several parts),
    a malformed one, one that uses the course's code where that is forbidden, and one not written yet."""
    for name in PREDICTION_EXERCISES:
        statuses = [status for n, _, status, _, _ in PREDICTIONS if n == name]
        assert {PASSED, FAILED, NOT_ATTEMPTED} <= set(statuses), name
        partial = checks.EXERCISES[name].prediction.parts
        if len(partial) > 1 or any(p.margin is not None for p in partial):
            assert checks.PARTIAL in statuses, name
    assert {n for n, *_ in PREDICTIONS} == PREDICTION_EXERCISES


@pytest.mark.parametrize(
    "name, fn, status, score, said", PREDICTIONS, ids=[f"{e[0]}-{e[1].__name__}" for e in PREDICTIONS]
)
def test_a_prediction_gets_its_score_and_its_message(fresh_predictions, name, fn, status, score, said):
    """The status, the score (1, 1/2 or 0) and the message; the measurement is shown only beside a prediction (never
    for one not written, malformed, or computed with the course's code); no message prints a fix."""
    result = checks.check(name, fn)
    assert result.status == status and result.score == pytest.approx(score), repr(result)
    assert said in result.message, repr(result)
    shown = "measured" in result.message or bool(result.details)
    assert shown == ("prediction" in result.findings), repr(result)
    assert not _printed_fixes(result.message), (result.message, _printed_fixes(result.message))
    assert result.to_dict()["score"] == pytest.approx(score)


def test_the_first_prediction_is_the_one_scored(fresh_predictions):
    """The first valid prediction of a session is recorded when the measurement is shown; a later change is said,
    not scored. Before it, nothing is recorded and nothing measured is shown."""
    from galleries.lesson04 import lsw_rounded, lsw_unchanged, lsw_unwritten

    recorded = functools.partial(checks.recorded_prediction, "longer_sentence_weight")
    first = checks.check_longer_sentence_weight(lsw_unwritten)
    assert first.status == NOT_ATTEMPTED and not first.details and recorded() is None
    wrong = checks.check_longer_sentence_weight(lsw_unchanged)
    assert wrong.status == FAILED and wrong.details and recorded() == (0.95,)
    again = checks.check_longer_sentence_weight(lsw_rounded)
    assert again.status == FAILED and again.score == 0, repr(again)
    assert "changed after the measurement was shown" in again.message and "0.9," in again.message
    malformed = checks.check_longer_sentence_weight(lambda: "0.9")
    assert malformed.status == FAILED and "not a prediction" in malformed.message
    assert recorded() == (0.95,)


@pytest.mark.parametrize("name", sorted(PREDICTION_EXERCISES))
def test_a_predictions_hints_say_predict_first_until_it_is_recorded(fresh_predictions, name):
    """A graded prediction's hints lead to its answer: before the session's first prediction, every step (and a check
    result's .hint() for a malformed or unwritten one) says to predict first and gives nothing of the hint; once a
    prediction is recorded, the steps are the exercise's own."""
    from attnedu.checks.results import hint_steps

    exercise = checks.EXERCISES[name]
    steps = hint_steps(exercise.hint)
    for step in range(1, len(steps) + 1):
        shown = checks.hint(name, step)
        assert shown.text.startswith("Predict first.") and f"`{name}`" in shown.text, shown
        assert not any(own in shown.text for own in steps), shown
    with pytest.raises(ValueError, match="step should be"):
        checks.hint(name, len(steps) + 1)
    malformed = checks.check(name, lambda: "a guess")
    assert malformed.status == FAILED and malformed.hint().text.startswith("Predict first."), repr(malformed)
    valid = next(fn for n, fn, status, *_ in PREDICTIONS if n == name and status == PASSED)
    checks.check(name, valid)
    assert checks.recorded_prediction(name) is not None
    assert [checks.hint(name, k).text for k in range(1, len(steps) + 1)] == list(steps)


# the predictions the grader's replay is tried on: each form of value (a number, a pair of booleans, tensors, a list
# of positions and a boolean, a whole number and a list), partial credit, the course's own code, not written yet
REPLAYED = (
    "lsw_nearly", "wl_nothing_changes", "lsw_with_the_course_code", "wl_as_tensors", "lsw_unwritten",
    "cp_attends_first", "cp_as_tuple_and_tensor", "sc_in_gb", "ps_in_slot_order", "ps_as_tensors", "ps_first_write",
    "lsp_nearly", "lsp_as_tensors",
    "ce_as_tensor", "ce_nearly", "rp_as_tensors", "rp_like_the_first_block",
)  # fmt: skip


@pytest.mark.parametrize("entry", [e for e in PREDICTIONS if e[1].__name__ in REPLAYED], ids=lambda e: e[1].__name__)
def test_the_grader_scores_a_prediction_as_the_check_does(fresh_predictions, entry):
    """The kernel calls the prediction function (no argument) and sends back its value; the grader's decision, made in
    its own process with the same run_check, is the check's: status, score and message."""
    from attnedu.grading.kernel import encode
    from attnedu.grading.results import decode, remote_call

    name, fn, status, score, _ = entry
    exercise = checks.EXERCISES[name]
    cases = exercise.make_cases()
    call = checks.calling.call_learner(fn, (), 5.0, forbidden=exercise.forbidden)
    record = {"value": decode(encode(call.value)), "args": (), "error_name": call.error_name,
              "error_text": call.error_text, "not_implemented": call.not_implemented,
              "used_reference": call.used_reference}  # fmt: skip
    remote = run_check(exercise, name, caller=remote_call({0: record}, "done"), cases=cases)
    local = checks.check(name, fn)
    assert (remote.status, remote.score, remote.message) == (local.status, local.score, local.message)
    assert remote.status == status and remote.score == pytest.approx(score)


def test_the_partial_credit_rule():
    from attnedu.checks.exercise import Part
    from attnedu.checks.prediction import part_points

    number = Part("x", margin=0.1)
    assert [part_points(number, g, 1.0) for g in (1.1, 0.9, 1.15, 0.8, 0.79, 1.3)] == [1, 1, 0.5, 0.5, 0, 0]
    share = Part("x", margin=0.05, relative=True)  # 5% of the measurement
    assert [part_points(share, g, 200.0) for g in (210.0, 189.0, 221.0)] == [1, 0.5, 0]
    assert part_points(Part("b", bool), True, True) == 1 and part_points(Part("b", bool), False, True) == 0
    assert part_points(Part("s", frozenset), frozenset({6, 7}), frozenset({7, 6})) == 1


def test_scores_read_as_fractions(monkeypatch):
    """A prediction's score, the mean of its parts, reads 1/3, not 0.333333; a sum of them two decimals; and the
    summary of `make check` (tools/check.py, which reads results.py from its file) says the same."""
    import importlib.util
    from pathlib import Path

    from attnedu.checks.results import score_text

    said = {0: "0", 1.0: "1", 0.5: "0.5", 1 / 3: "1/3", 2 / 3: "2/3", 0.25: "0.25", 5 / 6: "5/6", 2.5: "2.5"}
    assert {score: score_text(score) for score in said} == said
    assert score_text(1 + 1 / 3) == "1.33" and score_text(1 / 3 + 1 / 2 + 1 / 4) == "1.08"
    spec = importlib.util.spec_from_file_location("check_tool", Path(__file__).parents[1] / "tools" / "check.py")
    tool = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, tool)  # its dataclasses look their module up there
    spec.loader.exec_module(tool)
    assert tool.score_text(2 / 3) == "2/3"


@pytest.mark.parametrize(
    "parts, error",
    [
        ((), "one or more Part"),
        (("weight",), "one or more Part"),
        ((checks.prediction.Part("x"),), "a float part needs a margin"),
        ((checks.prediction.Part("x", bool, margin=0.1),), "only a float part has one"),
        ((checks.prediction.Part("x", str),), "kind should be float, bool, int or frozenset"),
        ((checks.prediction.Part("x", margin=-1.0),), "the margin should be positive"),
    ],
)
def test_a_prediction_exercise_refuses_parts_it_cannot_score(parts, error):
    from attnedu.checks.prediction import prediction_exercise

    with pytest.raises((TypeError, ValueError), match=error):
        prediction_exercise("p", "04_query_key_value", "a guess", parts, lambda: (1.0,), ("a", "b", "c"))


def test_the_fraction_of_generic_messages_is_reported(gallery, capsys):
    only_count = sum(1 for *_, result in gallery if not set(result.findings) & _SPECIFIC)
    with capsys.disabled():
        print(f"\n[independent gallery] {len(gallery)} bugs, {only_count} with a generic-only message")


# --------------------------------------------------------------------------------------------
# Bad submissions give a clean result
# --------------------------------------------------------------------------------------------


def test_not_implemented_is_not_attempted():
    def stub(scores, mask):
        # YOUR CODE HERE
        raise NotImplementedError()

    result = checks.check_masked_softmax(stub)
    assert result.status == NOT_ATTEMPTED and result.score == 0
    assert "⏳" in repr(result) and "⏳" in result._repr_markdown_()


@pytest.mark.parametrize("name", sorted(checks.EXERCISES))
def test_every_exercise_as_handed_out_is_not_attempted(name):
    """Every exercise's function as the exercise notebook hands it out (its body ``raise NotImplementedError()``)
    scores 0 as not attempted, with no measurement shown for a prediction. (The batch grader's own test grades the
    exercise notebooks of three lessons, one of each kind: plain functions, kernels, predictions.)"""
    _skip_unless_runnable(name)
    exercise = checks.EXERCISES[name]

    def stub(*args):
        # YOUR CODE HERE
        raise NotImplementedError()

    result = run_check(exercise, stub, caller=in_process(stub)) if exercise.launch else checks.check(name, stub)
    assert result.status == NOT_ATTEMPTED and result.score == 0, repr(result)


def test_exception_names_the_error_and_the_learners_line():
    def broken(scores, mask):
        weights = torch.softmax(scores, dim=-1)
        raise ValueError("something I did not expect")
        return weights

    result = checks.check_masked_softmax(broken)
    assert result.status == FAILED
    assert "raised ValueError" in result.message and "something I did not expect" in result.message
    assert 'raise ValueError("something I did not expect")' in result.message


def test_sys_exit_does_not_end_the_process():
    result = checks.check_masked_softmax(lambda scores, mask: sys.exit(1))
    assert result.status == FAILED and "raised SystemExit" in result.message


@pytest.mark.parametrize(
    "returned, expected",
    [
        (lambda s, m: None, "None (is a `return` missing?)"),
        (lambda s, m: s.tolist(), "should be a torch.Tensor"),
        (lambda s, m: s.numpy(), "should be a torch.Tensor"),
        (lambda s, m: torch.full_like(s, float("nan")), "NaN"),
        (lambda s, m: torch.softmax(s.double(), dim=-1), "dtype torch.float64"),
        (lambda s, m: torch.zeros(3), "wrong shape"),
    ],
    ids=["none", "list", "numpy", "nan", "float64", "shape"],
)
def test_wrong_type_dtype_shape_or_nan(returned, expected):
    result = checks.check_masked_softmax(returned)
    assert result.status == FAILED and expected in result.message, repr(result)


def test_the_function_itself_must_be_passed():
    result = checks.check_padding_mask(torch.ones(2))
    assert result.status == FAILED and "check_padding_mask(padding_mask)" in result.message


def test_printing_is_captured_and_truncated():
    def chatty(lengths, max_len):
        for i in range(20_000):
            print("debug line", i)
        print("to stderr", file=sys.stderr)
        return torch.arange(max_len)[None, :] < lengths[:, None]

    result = checks.check_padding_mask(chatty)
    assert result.status == PASSED
    assert result.printed.startswith("debug line 0") and "more characters not shown" in result.printed
    assert len(repr(result)) < 3 * checks.MAX_PRINTED


def _needs_main_thread():
    """Busy loops are only stoppable by the alarm; in a helper thread they would spin on after the test."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the time limit by SIGALRM works in the main thread only")


def test_infinite_loop_times_out():
    _needs_main_thread()

    def forever(lengths, max_len):
        while True:
            pass

    start = time.monotonic()
    result = checks.check_padding_mask(forever, time_limit=0.2)
    assert time.monotonic() - start < 3
    assert result.status == FAILED and "did not finish within 0.2 s" in result.message


def test_infinite_printing_loop_times_out_with_bounded_output():
    _needs_main_thread()

    def flood(lengths, max_len):
        while True:
            print("x" * 100)

    result = checks.check_padding_mask(flood, time_limit=0.2)
    assert result.status == FAILED and "did not finish" in result.message
    assert len(result.printed) < 2 * checks.MAX_PRINTED


def test_loop_that_catches_exceptions_is_still_stopped():
    _needs_main_thread()

    def stubborn(lengths, max_len):
        while True:
            try:
                time.sleep(0.01)
            except Exception:
                pass

    result = checks.check_padding_mask(stubborn, time_limit=0.2)
    assert result.status == FAILED and "did not finish" in result.message


def test_time_limit_outside_the_main_thread():
    stop = threading.Event()

    def slow(lengths, max_len):
        while not stop.is_set():  # ends when the test is over, so no thread keeps spinning
            time.sleep(0.01)

    results: list[CheckResult] = []
    thread = threading.Thread(target=lambda: results.append(checks.check_padding_mask(slow, time_limit=0.2)))
    thread.start()
    thread.join(5)
    stop.set()
    assert results and results[0].status == FAILED and "did not finish" in results[0].message


def test_alarm_state_is_restored():
    import signal

    _needs_main_thread()
    before = signal.getsignal(signal.SIGALRM)
    checks.check_padding_mask(learner_padding_mask)
    checks.check_padding_mask(lambda lengths, max_len: time.sleep(5), time_limit=0.1)
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    for name, fns in CORRECT.items():
        if _runnable(name):
            checks.check(name, fns[0])
    assert torch.equal(torch.rand(3), expected)


# --------------------------------------------------------------------------------------------
# Rendering, hints, grading a namespace
# --------------------------------------------------------------------------------------------


def test_results_render_with_icons():
    passed = checks.check_padding_mask(learner_padding_mask)
    failed = checks.check_padding_mask(mask_inverted)
    assert repr(passed).startswith("✅ padding_mask passed")
    assert passed._repr_markdown_().startswith("✅ **`padding_mask`** passed")
    assert repr(failed).startswith("❌ padding_mask failed") and 'hint("padding_mask")' in repr(failed)
    assert failed._repr_markdown_().startswith("❌")
    assert repr(failed).startswith("❌ padding_mask failed on test case 1 of 6 (lengths [3, 5, 1], max_len 5): ")
    assert failed.to_dict() == {
        "exercise": "padding_mask",
        "status": "failed",
        "score": 0,
        "message": f"on {failed.where}: {failed.message}",
    }


def test_hints():
    failed = checks.check_padding_mask(mask_inverted)
    assert failed.hint() == checks.hint("padding_mask")
    assert "torch.arange(max_len)" in repr(checks.hint("padding_mask", 2))
    assert checks.hint("padding_mask")._repr_markdown_().startswith("💡")
    with pytest.raises(ValueError, match="no exercise named 'padding'"):
        checks.hint("padding")


def test_hints_in_steps():
    """An exercise may give its hint in steps (a nudge, the formula, the code); a single hint is unchanged."""
    steps = checks.EXERCISES["document_mask"].hint
    assert isinstance(steps, tuple) and len(steps) == 3
    first = checks.hint("document_mask")
    assert first == checks.hint("document_mask", 1) and first.text == steps[0]
    assert repr(first).startswith("💡 Hint 1 of 3 for document_mask: ") and 'hint("document_mask", 2)' in repr(first)
    assert 'Next step: `hint("document_mask", 2)`' in first._repr_markdown_()
    last = checks.hint("document_mask", 3)
    assert last.text == steps[2] and "tril" in last.text and "Next step" not in repr(last)
    failed = checks.check("document_mask", lambda ids: ~(ids[:, :, None] == ids[:, None, :]))
    assert failed.hint(2) == checks.hint("document_mask", 2) and failed.hint() == first
    assert 'hint("document_mask", 2)' in repr(failed)
    with pytest.raises(ValueError, match="step should be a whole number from 1 to 3"):
        checks.hint("document_mask", 4)
    # every exercise of the course gives its hint in steps (issue 25); the engine still takes a single hint
    assert all(isinstance(e.hint, tuple) and len(e.hint) >= 2 for e in checks.EXERCISES.values())
    single = "Think of the running maximum."
    only = make_hint("merge_softmax_states", single, None)
    assert only == make_hint("merge_softmax_states", single, 1)
    with pytest.raises(ValueError, match="from 1 to 1"):
        make_hint("merge_softmax_states", single, 2)
    assert only.text == single and "Next step" not in repr(only)


# Lessons 01-05's exercises give their hints in steps too: a nudge, the rule or formula, then the code
STEPPED = [name for name, e in checks.EXERCISES.items() if e.lesson[:2] in ("01", "02", "03", "04", "05")]


@pytest.mark.parametrize("name", STEPPED)
def test_lessons_01_to_05_hints_come_in_steps(name):
    steps = checks.EXERCISES[name].hint
    assert isinstance(steps, tuple) and len(steps) == 3 and all(isinstance(s, str) and s for s in steps)
    assert len(set(steps)) == 3, "each step says something new"
    assert "nan_to_num(" not in " ".join(steps), "a hint never hides NaN"
    assert "`" in steps[2], "the last step gives the code"


@pytest.mark.parametrize("name, fn", REFERENCE_USE, ids=[f"{n}-{i}" for i, (n, _) in enumerate(REFERENCE_USE)])
def test_the_packages_own_code_earns_nothing_where_the_exercise_forbids_it(name, fn):
    """A function that is, or calls, the package's reference fails when the exercise asks for the learner's own code,
    even when every value is right; its message names the package function that ran."""
    exercise = checks.EXERCISES[name]
    assert exercise.forbidden
    result = checks.check(name, fn)
    assert result.status == FAILED and "reference" in result.findings, repr(result)
    assert "your function runs the course's own `attnedu." in result.message and "earns no marks" in result.message


def test_a_wrong_function_that_uses_the_package_gets_its_diagnosis_and_the_rule():
    from attnedu.masks import causal_mask

    def inverted(document_ids):
        return ~((document_ids[:, :, None] == document_ids[:, None, :]) & causal_mask(document_ids.shape[1]))

    result = checks.check("document_mask", inverted)
    assert result.status == FAILED and "inverted" in result.message
    assert "Also: your function runs the course's own `attnedu.masks.causal_mask`" in result.message


def test_the_grader_sees_the_packages_own_code_too():
    """The grader's kernel records which forbidden function ran (call_learner with the exercise's ``forbidden``); the
    replayed decision is the in-process one."""
    from attnedu.grading.results import remote_call
    from attnedu.masks import document_mask

    exercise = checks.EXERCISES["document_mask"]
    cases = exercise.make_cases()
    records = {}
    for index, case in enumerate(cases):
        args = copy.deepcopy(case.args)
        call = checks.calling.call_learner(document_mask, args, 5.0, forbidden=exercise.forbidden)
        records[index] = {"value": call.value, "args": args, "used_reference": call.used_reference}
    remote = checks.diagnosis.run_check(exercise, "document_mask", caller=remote_call(records, "done"), cases=cases)
    local = checks.check("document_mask", document_mask)
    assert remote.status == local.status == FAILED and remote.message == local.message
    assert "`attnedu.masks.document_mask`" in remote.message


def test_forbidding_leaves_the_profiler_as_it_was():
    import sys

    def spy(frame, event, arg):
        return None

    sys.setprofile(spy)
    try:
        checks.check("document_mask", CORRECT["document_mask"][0])
        assert sys.getprofile() is spy
    finally:
        sys.setprofile(None)


def test_grade_namespace():
    namespace = {"padding_mask": learner_padding_mask, "last_real_state": last_takes_padding}
    report = checks.grade_namespace(namespace, lesson="01_rnn_bottleneck")
    assert report["lesson"] == "01_rnn_bottleneck"
    statuses = {r["exercise"]: r["status"] for r in report["results"]}
    assert statuses == {
        "padding_mask": PASSED,
        "last_real_state": FAILED,
        "reverse_padded": NOT_ATTEMPTED,
        "bidirectional_summary": NOT_ATTEMPTED,
    }
    with pytest.raises(ValueError, match="no lesson named"):
        checks.grade_namespace(namespace, lesson="99_nothing")


def test_triton_exercises_are_not_attempted_where_triton_is_not_installed(monkeypatch):
    """On macOS there is no triton: the kernel cells define plain functions (attnedu.triton_basics's stand-ins) and
    each Triton check answers "not attempted", saying why, instead of failing or raising."""
    import importlib.util

    from attnedu.triton_basics import triton_stand_ins

    triton, tl = triton_stand_ins()

    @triton.jit
    def softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        tl.store(Y + row * stride_y, tl.load(X + row * stride_x))

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real_find_spec(
        name, *a))  # fmt: skip
    result = checks.check_softmax_kernel(softmax_kernel)
    assert result.status == NOT_ATTEMPTED and "triton is not installed" in result.message, result


def test_removal_prediction_is_measured_on_the_course_model(monkeypatch, fresh_predictions):
    """Exercise 5's graded prediction measures with the course's training (here replaced by a small untrained model:
    the caches of the measurement are cleared before and after, so no other test sees it); the notebook's assert of
    the effect reads the same measurements, whatever the learner wrote."""
    from attnedu import induction
    from attnedu.attention_only import AttentionOnlyTransformer
    from attnedu.checks import lesson11

    def forget():
        lesson11.removal_measurements.cache_clear()
        checks.EXERCISES["predicted_repeat_losses"].prediction.measure.cache_clear()

    model = AttentionOnlyTransformer(32, 16, 2, 2, 32, seed=0).eval()
    small = induction.held_out_repeats(count=8)
    monkeypatch.setattr(induction, "held_out_repeats", lambda: small)
    stand_in = induction.InductionRun(model=model, first=[4.0], second=[2.5])
    monkeypatch.setattr(induction, "train_induction", lambda *a, **k: stand_in)
    forget()
    try:
        measured = lesson11.removal_measurements()
        both = induction.repeat_losses(model, small, [(1, 0), (1, 1)]).mean().item()
        assert measured["both layer-1 heads"] == both and measured["first block, intact"] == 4.0
        assert measured["one layer"] == 2.5  # the one-layer model's loss on the repeat (here the stand-in's)
        assert measured["one layer-1 head (mean)"] == (measured["layer-1 head 0"] + measured["layer-1 head 1"]) / 2
        result = checks.check_predicted_repeat_losses(lambda: (both, measured["one layer-1 head (mean)"]))
        assert result.status == PASSED and f"measured {both:.4g} nats" in result.message, result
        assert "Without layer 1 the model puts" in result.details
        assert checks.check_removal_effect() is checks.check_removal_effect(measured)
    finally:
        forget()


def test_removal_effect_is_judged_on_the_course_measurements():
    """Exercise 5's effect: both layer-1 heads removed >= 2.75 nats; each alone between intact + 0.6 and 2.75."""
    from attnedu.checks import check_removal_effect

    seed0 = {"intact": 0.453, "both layer-1 heads": 3.576, "layer-1 head 0": 1.729, "layer-1 head 1": 1.810}
    assert check_removal_effect(seed0)
    assert not check_removal_effect({**seed0, "both layer-1 heads": 2.7})  # nothing lost without layer 1
    assert not check_removal_effect({**seed0, "layer-1 head 0": 0.9})  # one head removed changed nothing
    assert not check_removal_effect({**seed0, "layer-1 head 1": 3.0})  # one head removed lost everything


def test_the_causal_entropy_prediction_names_the_nearest_slip():
    """Two known slips lie 0.011 apart (query 0 left out: ln 8! / 7; ln of the mean number of keys: ln 4.5): a guess
    gets the cause of the nearer one; a near miss gets no cause."""
    import math

    from attnedu.checks.lesson11 import _causal_entropy_diagnosis

    measured = (math.lgamma(9) / 8,)
    assert "query 0 too" in _causal_entropy_diagnosis(0, math.lgamma(9) / 7, measured)
    assert "ln of the mean number of keys" in _causal_entropy_diagnosis(0, math.log(4.5), measured)
    assert _causal_entropy_diagnosis(0, measured[0] + 0.08, measured) == ""


def test_a_prediction_is_measured_once_whichever_thread_asks_first():
    """The batch grader makes a prediction's measurement in a thread beside its sandboxes while its main thread may
    ask for it: it is made once, the second caller waits for it, and a measurement that raises is not kept."""
    import threading
    import time

    from attnedu.checks.prediction import Once

    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return (len(calls),)

    once = Once(slow)
    got = []
    threads = [threading.Thread(target=lambda: got.append(once())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [(1,)] * 4 and len(calls) == 1
    once.cache_clear()
    assert once() == (2,)

    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first try fails")
        return (0.5,)

    once = Once(flaky)
    with pytest.raises(RuntimeError):
        once()
    assert once() == (0.5,) and once() == (0.5,) and len(attempts) == 2
