"""The graders are tested by their mutants: each check accepts a correct function and rejects the
wrong versions a learner is likely to write, with the right diagnosis. Pure Python, no notebooks.

Also: a learner's function that raises, returns the wrong type, returns NaN, changes its inputs,
prints a flood or never returns gives a clean failed result, never an exception.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

from attnedu import checks
from attnedu.attention import additive_score, context_vector, masked_softmax
from attnedu.checks import FAILED, NOT_ATTEMPTED, PASSED, CheckResult
from attnedu.masks import padding_mask

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def learner_last_real_state(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1]


def learner_reverse_padded(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, :n] = src[b, :n].flip(0)
    return out


def learner_additive_score(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a


def learner_masked_softmax(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)


def learner_context_vector(weights, values):
    return (weights[:, :, None] * values).sum(dim=1)


def learner_decoder_step(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    logits = out(torch.cat([new_state, context, embedded], dim=-1))
    return logits, new_state, weights


CORRECT = {
    "padding_mask": [learner_padding_mask, padding_mask],
    "last_real_state": [learner_last_real_state],
    "reverse_padded": [learner_reverse_padded],
    "additive_score": [learner_additive_score, additive_score],
    "masked_softmax": [learner_masked_softmax, masked_softmax],
    "context_vector": [
        learner_context_vector,
        context_vector,
        lambda w, v: torch.einsum("bs,bse->be", w, v),
        lambda w, v: torch.bmm(w[:, None, :], v).squeeze(1),
    ],
    "decoder_step": [learner_decoder_step],
}


@pytest.mark.parametrize(
    "name, fn", [(name, fn) for name, fns in CORRECT.items() for fn in fns], ids=lambda x: getattr(x, "__name__", x)
)
def test_correct_versions_pass(name, fn):
    result = checks.check(name, fn)
    assert result.status == PASSED, repr(result)
    assert result.score == 1


def test_every_exercise_has_a_correct_version_and_mutants():
    assert set(CORRECT) == set(checks.EXERCISES)
    counts = {name: sum(1 for m in MUTANTS if m[0] == name) for name in checks.EXERCISES}
    assert min(counts.values()) >= 5, counts


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------

NEG_INF = float("-inf")


# padding_mask
def mask_inverted(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def mask_off_by_one(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


def mask_transposed(lengths, max_len):
    return torch.arange(max_len)[:, None] < lengths[None, :]


def mask_ignores_max_len(lengths, max_len):
    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]


def mask_as_float(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).float()


def mask_loop_of_ones(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return mask


def mask_unsqueeze_in_place(lengths, max_len):
    lengths.unsqueeze_(1)
    return torch.arange(max_len)[None, :] < lengths


# last_real_state
def last_takes_padding(states, lengths):
    return states[:, -1]


def last_off_by_one(states, lengths):
    return states[torch.arange(states.shape[0]), lengths]


def last_time_major(states, lengths):
    return states[lengths - 1, torch.arange(states.shape[0])]


def last_all_pairs(states, lengths):
    return states[:, lengths - 1]


def last_keeps_dim(states, lengths):
    index = (lengths - 1)[:, None, None].expand(-1, 1, states.shape[2])
    return states.gather(1, index)


def last_decrements_lengths(states, lengths):
    lengths -= 1
    return states[torch.arange(states.shape[0]), lengths]


# reverse_padded
def reverse_whole_rows(src, lengths):
    return src.flip(1)


def reverse_batch(src, lengths):
    return src.flip(0)


def reverse_all_but_last(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, : n - 1] = src[b, : n - 1].flip(0)
    return out


def reverse_index_n_minus_j(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        for j in range(n):
            out[b, j] = src[b, n - j]
    return out


def reverse_in_place(src, lengths):
    for b in range(src.shape[0]):
        n = int(lengths[b])
        src[b, :n] = src[b, :n].flip(0)
    return src


def reverse_into_floats(src, lengths):
    out = torch.zeros(src.shape)
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, :n] = src[b, :n].flip(0)
    return out


# additive_score
def score_no_tanh(query, keys, W_a, U_a, v_a):
    return ((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a


def score_with_softmax(query, keys, W_a, U_a, v_a):
    return torch.softmax(torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a, dim=-1)


def score_sum_not_v(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T).sum(dim=-1)


def score_w_u_swapped(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ U_a.T)[:, None, :] + keys @ W_a.T) @ v_a


def score_transposed(query, keys, W_a, U_a, v_a):
    return (torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a).T


def score_no_weight_transpose(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a)[:, None, :] + keys @ U_a) @ v_a


def score_tanh_last(query, keys, W_a, U_a, v_a):
    return torch.tanh(((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a)


def score_forgets_source_axis(query, keys, W_a, U_a, v_a):
    return torch.tanh(query @ W_a.T + keys @ U_a.T) @ v_a  # (batch, attn) + (batch, src, attn): a broadcast error


# masked_softmax
def softmax_wrong_axis(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=0).nan_to_num(0.0)


def softmax_mask_inverted(scores, mask):
    return torch.softmax(scores.masked_fill(mask, NEG_INF), dim=-1)


def softmax_mask_ignored(scores, mask):
    return torch.softmax(scores, dim=-1)


def softmax_zero_fill(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, 0.0), dim=-1)


def softmax_zeroed_after(scores, mask):
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def softmax_nan_row(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)


def softmax_renormalised_by_hand(scores, mask):
    weights = torch.softmax(scores, dim=-1) * mask
    return weights / weights.sum(dim=-1, keepdim=True)


def softmax_in_place(scores, mask):
    scores.masked_fill_(~mask, NEG_INF)
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def softmax_large_negative(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


# context_vector
def context_mean(weights, values):
    return values.mean(dim=1)


def context_sum(weights, values):
    return values.sum(dim=1)


def context_wrong_axis(weights, values):
    return (weights[:, :, None] * values).sum(dim=2)


def context_transposed(weights, values):
    return torch.einsum("bs,bse->eb", weights, values)


def context_broadcast_matmul(weights, values):
    return weights @ values


def context_keeps_dim(weights, values):
    return weights[:, None, :] @ values


def context_argmax(weights, values):
    return values[torch.arange(values.shape[0]), weights.argmax(dim=1)]


# decoder_step
def step_luong(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    context, weights = attention(new_state, annotations, mask)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_gru_input_order(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([context, embedded], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_readout_order(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([embedded, new_state, context], dim=-1)), new_state, weights


def step_readout_old_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([state, context, embedded], dim=-1)), new_state, weights


def step_returns_old_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), state, weights


def step_no_mask(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_state_for_context(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, state], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def step_two_outputs(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state


def step_overwrites_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    state.copy_(cell(torch.cat([embedded, context], dim=-1), state))
    return out(torch.cat([state, context, embedded], dim=-1)), state, weights


MUTANTS = [
    ("padding_mask", mask_inverted, "inverted"),
    ("padding_mask", mask_off_by_one, "off by one"),
    ("padding_mask", mask_transposed, "transposed"),
    ("padding_mask", mask_ignores_max_len, "max_len is ignored"),
    ("padding_mask", mask_as_float, "dtype torch.float32, expected torch.bool"),
    ("padding_mask", mask_loop_of_ones, "dtype torch.int64, expected torch.bool"),
    ("padding_mask", mask_unsqueeze_in_place, "modified its input `lengths` in place"),
    ("last_real_state", last_takes_padding, "`states[:, -1]`"),
    ("last_real_state", last_off_by_one, "off by one"),
    ("last_real_state", last_time_major, "axes in the wrong order"),
    ("last_real_state", last_all_pairs, "every sentence's state at every sentence's last position"),
    ("last_real_state", last_keeps_dim, "extra dimension of size 1"),
    ("last_real_state", last_decrements_lengths, "modified its input `lengths` in place"),
    ("reverse_padded", reverse_whole_rows, "padding moved to the front"),
    ("reverse_padded", reverse_batch, "order of the sentences"),
    ("reverse_padded", reverse_all_but_last, "the last real word stayed"),
    ("reverse_padded", reverse_index_n_minus_j, "`n - j`"),
    ("reverse_padded", reverse_in_place, "modified its input `src` in place"),
    ("reverse_padded", reverse_into_floats, "expected torch.int64"),
    ("additive_score", score_no_tanh, "tanh is missing"),
    ("additive_score", score_with_softmax, "you applied a softmax"),
    ("additive_score", score_sum_not_v, "instead of taking the dot product with v_a"),
    ("additive_score", score_w_u_swapped, "W_a and U_a are swapped"),
    ("additive_score", score_transposed, "transposed"),
    ("additive_score", score_no_weight_transpose, "W_a^T"),
    ("additive_score", score_tanh_last, "tanh is applied after v_a"),
    ("additive_score", score_forgets_source_axis, "raised RuntimeError"),
    ("masked_softmax", softmax_wrong_axis, "wrong axis"),
    ("masked_softmax", softmax_mask_inverted, "mask is inverted"),
    ("masked_softmax", softmax_mask_ignored, "mask is ignored"),
    ("masked_softmax", softmax_zero_fill, "filled with 0 instead of -inf"),
    ("masked_softmax", softmax_zeroed_after, "without renormalising"),
    ("masked_softmax", softmax_nan_row, "fully masked row gives NaN"),
    ("masked_softmax", softmax_renormalised_by_hand, "fully masked row gives NaN"),
    ("masked_softmax", softmax_in_place, "modified its input `scores` in place"),
    ("masked_softmax", softmax_large_negative, "uniform weights"),
    ("context_vector", context_mean, "plain mean"),
    ("context_vector", context_sum, "plain sum"),
    ("context_vector", context_wrong_axis, "wrong axis"),
    ("context_vector", context_transposed, "transposed"),
    ("context_vector", context_broadcast_matmul, "broadcasts over the batch"),
    ("context_vector", context_keeps_dim, "extra dimension of size 1"),
    ("context_vector", context_argmax, "largest weight"),
    ("decoder_step", step_luong, "Luong"),
    ("decoder_step", step_gru_input_order, "GRU input is concatenated in the wrong order"),
    ("decoder_step", step_readout_order, "readout input is concatenated in the wrong order"),
    ("decoder_step", step_readout_old_state, "output layer reads the previous state"),
    ("decoder_step", step_returns_old_state, "you returned the previous state"),
    ("decoder_step", step_no_mask, "weight to padding"),
    ("decoder_step", step_state_for_context, "previous state where the context"),
    ("decoder_step", step_two_outputs, "should return 3 values"),
    ("decoder_step", step_overwrites_state, "modified its input `state` in place"),
]


@pytest.mark.parametrize("name, mutant, diagnosis", MUTANTS, ids=[m[1].__name__ for m in MUTANTS])
def test_mutant_is_rejected_with_its_diagnosis(name, mutant, diagnosis):
    result = checks.check(name, mutant)
    assert result.status == FAILED, repr(result)
    assert result.score == 0
    assert diagnosis in result.message, repr(result)


def test_every_known_wrong_variant_gets_its_own_diagnosis():
    """Each variant inside a check, submitted as is, is recognised (none is shadowed by an earlier one)."""
    for name, exercise in checks.EXERCISES.items():
        for variant in exercise.variants:
            result = checks.check(name, variant.fn)
            assert result.status == FAILED and variant.diagnosis in result.message, (name, variant.diagnosis, result)


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
    assert repr(failed).startswith("❌ padding_mask failed on test case 1 of 3 (lengths [3, 5, 1], max_len 5): ")
    assert failed.to_dict() == {
        "exercise": "padding_mask",
        "status": "failed",
        "score": 0,
        "message": f"on {failed.where}: {failed.message}",
    }


def test_hints():
    failed = checks.check_padding_mask(mask_inverted)
    assert failed.hint() == checks.hint("padding_mask")
    assert "torch.arange(max_len)" in repr(checks.hint("padding_mask"))
    assert checks.hint("padding_mask")._repr_markdown_().startswith("💡")
    with pytest.raises(ValueError, match="no exercise named 'padding'"):
        checks.hint("padding")


def test_grade_namespace():
    namespace = {"padding_mask": learner_padding_mask, "last_real_state": last_takes_padding}
    report = checks.grade_namespace(namespace, lesson="01_rnn_bottleneck")
    assert report["lesson"] == "01_rnn_bottleneck"
    statuses = {r["exercise"]: r["status"] for r in report["results"]}
    assert statuses == {"padding_mask": PASSED, "last_real_state": FAILED, "reverse_padded": NOT_ATTEMPTED}
    with pytest.raises(ValueError, match="no lesson named"):
        checks.grade_namespace(namespace, lesson="99_nothing")
