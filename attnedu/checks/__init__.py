"""Checks for the graded exercises in ``exercises/``: one per exercise, called in the cell
under the learner's function.

    check_additive_score(additive_score)     # shows ✅ passed, ❌ failed (and what is wrong) or ⏳ not attempted
    hint("additive_score")                   # or: result = check_additive_score(...); result.hint()

How a check works (the rule itself is in :func:`engine.run_check`):

* It calls the learner's function on every one of a few small inputs built here from fixed seeds:
  a batch of one, sentences with and without padding, inputs large enough that a hand-written exp
  or tanh overflows, sizes that differ from each other so that a transpose shows. Each output is
  compared with a private reference from the package (``attnedu.attention``, ``attnedu.masks``,
  ``attnedu.models``) or, for an exercise the package has no function for, from the lesson's checks
  module. Weights are passed in explicitly, so nothing depends on the learner's seed or on the order
  in which they created tensors.
* An exception, a time-out, a crash or an input changed in place is reported on the first case where
  it happens, unless an earlier case already gave wrong values.
* Wrong values are compared with known-wrong variants (softmax over the wrong axis, mask inverted,
  off by one in either direction, ...): a variant is named only if the learner's output equals it on
  every case where the variant runs, and differs from the reference on one of them. Otherwise the
  message says what was observed, never a guessed cause: type, dtype, shape, NaN or inf (with a
  note on overflow when the case has large inputs), where the values differ (only at padding, only
  in one sentence, only in a fully masked row, only at the first or last position, only in one half
  of the features), a constant factor, on which kinds of test case it fails.
* It **returns** a :class:`CheckResult` and never raises, so "Run all" never stops at an
  unfinished exercise. ``NotImplementedError`` means "not attempted".
* The learner's code runs on copies of the inputs (a change to them is reported), with its
  printing captured and truncated, and under a time limit (``SIGALRM`` in the main thread on
  Unix; elsewhere a helper thread, which cannot be stopped and is left running); no case is called
  after a time-out.

Limits: the checks are not secret and run in the learner's own Python process, so they
measure understanding, not honesty. The batch grader (``attnedu.grade``) does not trust them: in
the kernels it starts (``ATTNEDU_GRADING=1``) a check cell returns at once without calling
anything, and the grader calls each function itself from outside the kernel, then compares and
diagnoses in its own process with the same :func:`run_check`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .engine import (
    FAILED,
    ICONS,
    MAX_PRINTED,
    NOT_ATTEMPTED,
    PASSED,
    TIME_LIMIT,
    CheckResult,
    Exercise,
    Hint,
    grading_mode,
    run_check,
)
from .lesson01 import BIDIRECTIONAL_SUMMARY, LAST_REAL_STATE, PADDING_MASK, REVERSE_PADDED
from .lesson02 import ADDITIVE_SCORE, CONTEXT_VECTOR, COVERAGE, DECODER_STEP, MASKED_SOFTMAX
from .lesson03 import ATTEND_ALL_STEPS, ATTENTIONAL_HIDDEN, GENERAL_DECODER_STEP, GENERAL_SCORE
from .lesson04 import CROSS_ATTENTION, SCALED_DOT_PRODUCT_ATTENTION
from .lesson05 import GROUPED_QUERY_ATTENTION, MERGE_HEADS, MULTI_HEAD_ATTENTION, SPLIT_HEADS
from .lesson06 import CAUSAL_PADDING_MASK, PREFIX_LM_MASK, TO_ADDITIVE
from .lesson07 import ADD_SINUSOIDAL, APPLY_ROPE, ROPE_SCORES
from .lesson08 import BLOCK_UPDATE, CAUSAL_TILES, ONLINE_SOFTMAX

__all__ = [
    "CheckResult", "Exercise", "Hint", "run_check", "check", "hint", "grade_namespace", "EXERCISES", "LESSONS",
    "PASSED", "FAILED", "NOT_ATTEMPTED", "ICONS", "MAX_PRINTED", "TIME_LIMIT",
    "check_padding_mask", "check_last_real_state", "check_reverse_padded", "check_bidirectional_summary",
    "check_additive_score", "check_masked_softmax", "check_context_vector", "check_decoder_step", "check_coverage",
    "check_online_softmax", "check_block_update", "check_causal_tiles",
]  # fmt: skip
__all__ += [
    "check_general_score", "check_attentional_hidden", "check_attend_all_steps", "check_general_decoder_step",
    "check_scaled_dot_product_attention", "check_cross_attention",
    "check_split_heads", "check_merge_heads", "check_multi_head_attention", "check_grouped_query_attention",
    "check_causal_padding_mask", "check_to_additive", "check_prefix_lm_mask",
    "check_add_sinusoidal", "check_apply_rope", "check_rope_scores",
]  # fmt: skip

_ALL = (
    *(PADDING_MASK, LAST_REAL_STATE, REVERSE_PADDED, BIDIRECTIONAL_SUMMARY),
    *(ADDITIVE_SCORE, MASKED_SOFTMAX, CONTEXT_VECTOR, DECODER_STEP, COVERAGE),
    *(GENERAL_SCORE, ATTENTIONAL_HIDDEN, ATTEND_ALL_STEPS, GENERAL_DECODER_STEP),
    *(SCALED_DOT_PRODUCT_ATTENTION, CROSS_ATTENTION),
    *(SPLIT_HEADS, MERGE_HEADS, MULTI_HEAD_ATTENTION, GROUPED_QUERY_ATTENTION),
    *(CAUSAL_PADDING_MASK, TO_ADDITIVE, PREFIX_LM_MASK),
    *(ADD_SINUSOIDAL, APPLY_ROPE, ROPE_SCORES),
    *(ONLINE_SOFTMAX, BLOCK_UPDATE, CAUSAL_TILES),
)
EXERCISES: dict[str, Exercise] = {e.name: e for e in _ALL}
LESSONS: dict[str, list[str]] = {}
for _exercise in EXERCISES.values():
    LESSONS.setdefault(_exercise.lesson, []).append(_exercise.name)


def check(name: str, fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """Run the check of exercise ``name`` on ``fn``."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise named {name!r}; the exercises are {', '.join(EXERCISES)}")
    if grading_mode():
        return CheckResult(name, NOT_ATTEMPTED, "not run here: the batch grader checks this function itself.")
    return run_check(EXERCISES[name], fn, time_limit)


def check_padding_mask(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """padding_mask(lengths (batch,), max_len) -> (batch, max_len) bool, True at real tokens."""
    return check("padding_mask", fn, time_limit)


def check_last_real_state(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """last_real_state(states (batch, src_len, hidden), lengths (batch,)) -> (batch, hidden)."""
    return check("last_real_state", fn, time_limit)


def check_reverse_padded(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """reverse_padded(src (batch, src_len), lengths (batch,)) -> (batch, src_len)."""
    return check("reverse_padded", fn, time_limit)


def check_bidirectional_summary(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """bidirectional_summary(states (batch, src_len, 2 * hidden), lengths (batch,)) -> (batch, 2 * hidden)."""
    return check("bidirectional_summary", fn, time_limit)


def check_additive_score(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """additive_score(query, keys, W_a, U_a, v_a) -> (batch, src_len)."""
    return check("additive_score", fn, time_limit)


def check_masked_softmax(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """masked_softmax(scores (batch, src_len), mask (batch, src_len) bool) -> (batch, src_len)."""
    return check("masked_softmax", fn, time_limit)


def check_context_vector(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """context_vector(weights (batch, src_len), values (batch, src_len, enc_dim)) -> (batch, enc_dim)."""
    return check("context_vector", fn, time_limit)


def check_decoder_step(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """decoder_step(embedded, state, annotations, mask, attention, cell, out) -> (logits, new_state, weights)."""
    return check("decoder_step", fn, time_limit)


def check_coverage(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """coverage(weights (batch, tgt_len, src_len), src_lengths (batch,), tgt_lengths (batch,)) -> (batch, src_len)."""
    return check("coverage", fn, time_limit)


# --- lessons 03-05 ------------------------------------------------------------------------


def check_general_score(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """general_score(query (batch, dec_dim), keys (batch, src_len, enc_dim), W_a) -> (batch, src_len)."""
    return check("general_score", fn, time_limit)


def check_attentional_hidden(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """attentional_hidden(context (..., enc_dim), state (..., hidden_dim), W_c) -> (..., hidden_dim)."""
    return check("attentional_hidden", fn, time_limit)


def check_attend_all_steps(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """attend_all_steps(states, annotations, src_lengths, W_a) -> (context, weights), every decoder step at once."""
    return check("attend_all_steps", fn, time_limit)


def check_general_decoder_step(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """general_decoder_step(embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    -> (logits, new_state, new_attentional, weights)."""
    return check("general_decoder_step", fn, time_limit)


def check_scaled_dot_product_attention(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """scaled_dot_product_attention(query, key, value, mask (batch, query_len, key_len) bool) -> (output, weights)."""
    return check("scaled_dot_product_attention", fn, time_limit)


def check_cross_attention(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """cross_attention(target, source, source_lengths, W_Q, W_K, W_V) -> (output, weights)."""
    return check("cross_attention", fn, time_limit)


def check_split_heads(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """split_heads(x (batch, seq_len, d_model), num_heads) -> (batch, num_heads, seq_len, head_dim)."""
    return check("split_heads", fn, time_limit)


def check_merge_heads(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """merge_heads(x (batch, num_heads, seq_len, head_dim)) -> (batch, seq_len, num_heads * head_dim)."""
    return check("merge_heads", fn, time_limit)


def check_multi_head_attention(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """multi_head_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads) -> (output, weights)."""
    return check("multi_head_attention", fn, time_limit)


def check_grouped_query_attention(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)
    -> (output, weights)."""
    return check("grouped_query_attention", fn, time_limit)


# --- end of lessons 03-05 -----------------------------------------------------------------
# lessons 06-07


def check_causal_padding_mask(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """causal_padding_mask(lengths (batch,), max_len) -> (batch, max_len, max_len) bool, True = may attend."""
    return check("causal_padding_mask", fn, time_limit)


def check_to_additive(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """to_additive(mask bool, dtype) -> a float mask of the same shape: 0 where allowed, -inf where blocked."""
    return check("to_additive", fn, time_limit)


def check_prefix_lm_mask(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """prefix_lm_mask(prefix_lengths (batch,), lengths (batch,), max_len) -> (batch, max_len, max_len) bool."""
    return check("prefix_lm_mask", fn, time_limit)


def check_add_sinusoidal(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """add_sinusoidal(embeddings (batch, seq_len, d_model)) -> (batch, seq_len, d_model), PE added."""
    return check("add_sinusoidal", fn, time_limit)


def check_apply_rope(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """apply_rope(x (..., seq_len, head_dim), positions (seq_len,)) -> x rotated, halves layout."""
    return check("apply_rope", fn, time_limit)


def check_rope_scores(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """rope_scores(q, k, q_positions, k_positions) -> (batch, heads, query_len, key_len) scaled scores."""
    return check("rope_scores", fn, time_limit)
def check_online_softmax(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """online_softmax(scores (rows, n), block_size) -> (rows, n), softmax along each row, read block by block."""
    return check("online_softmax", fn, time_limit)


def check_block_update(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """block_update(m, l, acc, q_block, k_block, v_block, valid) -> (m_new, l_new, acc_new): one tile of the forward."""
    return check("block_update", fn, time_limit)


def check_causal_tiles(fn, time_limit: float = TIME_LIMIT) -> CheckResult:
    """causal_tiles(n, block_q, block_k) -> (compute, masked), each (query_blocks, key_blocks) bool."""
    return check("causal_tiles", fn, time_limit)


def hint(name: str) -> Hint:
    """The hint for exercise ``name``, e.g. ``hint("masked_softmax")``."""
    if name not in EXERCISES:
        raise ValueError(f"no exercise named {name!r}; the exercises are {', '.join(EXERCISES)}")
    return Hint(name, EXERCISES[name].hint)


def grade_namespace(namespace: Mapping, lesson: str | None = None, time_limit: float = TIME_LIMIT) -> dict:
    """Check every exercise of ``lesson`` (all lessons if None) on the functions named like them in
    ``namespace`` (a kernel's ``globals()``). A missing function counts as not attempted.

    Returns ``{"lesson": ..., "results": [CheckResult.to_dict(), ...]}``, in exercise order.
    """
    if lesson is not None and lesson not in LESSONS:
        raise ValueError(f"no lesson named {lesson!r}; the lessons with exercises are {', '.join(LESSONS)}")
    names = LESSONS[lesson] if lesson is not None else list(EXERCISES)
    results = []
    for name in names:
        fn = namespace.get(name)
        if fn is None:
            result = CheckResult(name, NOT_ATTEMPTED, f"no function named `{name}` was defined.")
        else:
            result = check(name, fn, time_limit)
        results.append(result.to_dict())
    return {"lesson": lesson, "results": results}
