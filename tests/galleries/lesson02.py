"""Lesson 02, 02_bahdanau_attention: the galleries of ``additive_score``, ``masked_softmax``, ``context_vector``,
``decoder_step`` and ``coverage`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnedu.attention import additive_score, context_vector, masked_softmax
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.masks import padding_mask

from .common import GENERIC, NEG_INF, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_additive_score(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a


def learner_masked_softmax(scores, mask):
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def learner_masked_softmax_by_hand(scores, mask):
    filled = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(filled - filled.max(dim=-1, keepdim=True).values)  # a fully masked row: -inf - (-inf) = NaN
    weights = e / e.sum(dim=-1, keepdim=True)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros_like(weights))


def learner_context_vector(weights, values):
    return (weights[:, :, None] * values).sum(dim=1)


def learner_decoder_step(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    logits = out(torch.cat([new_state, context, embedded], dim=-1))
    return logits, new_state, weights


def learner_coverage(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None]
    words = torch.arange(weights.shape[2])[None, :] < src_lengths[:, None]
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def learner_coverage_loop(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        t, s = int(tgt_lengths[b]), int(src_lengths[b])
        out[b, :s] = weights[b, :t, :s].sum(dim=0)
    return out


CORRECT = {
    "additive_score": [learner_additive_score, additive_score],
    "masked_softmax": [learner_masked_softmax, learner_masked_softmax_by_hand, masked_softmax],
    "context_vector": [
        learner_context_vector,
        context_vector,
        lambda w, v: torch.einsum("bs,bse->be", w, v),
        lambda w, v: torch.bmm(w[:, None, :], v).squeeze(1),
    ],
    "decoder_step": [learner_decoder_step],
    "coverage": [learner_coverage, learner_coverage_loop],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


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
    return torch.tanh(query @ W_a.T + keys @ U_a.T) @ v_a  # broadcasts only when batch == src_len


def score_batch_axis_one_late(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[None, :, :] + keys @ U_a.T) @ v_a


def score_features_one_early(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ W_a.T)[:, :, None] + keys @ U_a.T) @ v_a


def score_hand_written_tanh(query, keys, W_a, U_a, v_a):
    x = (query @ W_a.T)[:, None, :] + keys @ U_a.T
    return ((torch.exp(x) - torch.exp(-x)) / (torch.exp(x) + torch.exp(-x))) @ v_a


# masked_softmax
def softmax_wrong_axis(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=0).nan_to_num(0.0)


def softmax_wrong_axis_everywhere(scores, mask):
    """The right answer with its softmax's axis changed, and so its test for empty rows too."""
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=0)
    return weights.masked_fill(~mask.any(dim=0, keepdim=True), 0.0)


def softmax_wrong_axis_rows_zeroed(scores, mask):
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=0)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


def softmax_sum_without_keepdim(scores, mask):
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    return (e / e.sum(dim=-1)).nan_to_num(0.0)


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


def softmax_every_nan_replaced(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1).nan_to_num(0.0)


def softmax_zero_where_sum_not_positive(scores, mask):
    """By hand, the fully masked rows found from the values: a row whose sum is not positive, NaN included."""
    shifted = scores - scores.masked_fill(~mask, float("-inf")).max(dim=-1, keepdim=True).values
    e = torch.exp(shifted.masked_fill(~mask, float("-inf")))
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))


def softmax_large_negative(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)


def softmax_naive_exp(scores, mask):
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    return (e / e.sum(dim=-1, keepdim=True)).masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)


# context_vector
def context_mean(weights, values):
    return values.mean(dim=1)


def context_sum(weights, values):
    return values.sum(dim=1)


def context_wrong_axis(weights, values):
    return (weights[:, :, None] * values).sum(dim=2)


def context_batch_axis(weights, values):
    return (weights[:, :, None] * values).sum(dim=0)


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


# coverage
def coverage_all_rows(weights, src_lengths, tgt_lengths):
    return weights.sum(dim=1)


def coverage_source_axis(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None]
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=2)


def coverage_one_row_too_many(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] <= tgt_lengths[:, None]
    words = padding_mask(src_lengths, weights.shape[2])
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def coverage_one_row_short(weights, src_lengths, tgt_lengths):
    steps = padding_mask(tgt_lengths, weights.shape[1])
    steps = steps & (torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None] - 1)
    words = padding_mask(src_lengths, weights.shape[2])
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def coverage_mean(weights, src_lengths, tgt_lengths):
    return learner_coverage(weights, src_lengths, tgt_lengths) / tgt_lengths[:, None]


def coverage_mean_all_rows(weights, src_lengths, tgt_lengths):
    return weights.mean(dim=1)


def coverage_keeps_source_padding(weights, src_lengths, tgt_lengths):
    steps = padding_mask(tgt_lengths, weights.shape[1])
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1)


def coverage_lengths_swapped(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < src_lengths[:, None]
    words = torch.arange(weights.shape[2])[None, :] < tgt_lengths[:, None]
    return weights.masked_fill(~steps[:, :, None], 0.0).sum(dim=1).masked_fill(~words, 0.0)


def coverage_zeroes_in_place(weights, src_lengths, tgt_lengths):
    for b, n in enumerate(tgt_lengths.tolist()):
        weights[b, n:] = 0.0
    return learner_coverage(weights, src_lengths, tgt_lengths)


def as_data(query, keys, W_a, U_a, v_a):
    return learner_additive_score(query, keys.data, W_a, U_a.data, v_a)


def ms_detached(scores, mask):
    return learner_masked_softmax(scores.detach(), mask)


def cv_detached_values(weights, values):
    return learner_context_vector(weights, values.detach())


def ds_detached_state(embedded, state, annotations, mask, attention, cell, out):
    """The decoder step that detaches the state it is given: right numbers, and training could never learn through
    time (truncated backpropagation of length one)."""
    return learner_decoder_step(embedded, state.detach(), annotations, mask, attention, cell, out)


MUTANTS = [
    ("additive_score", score_no_tanh, "tanh is missing"),
    ("additive_score", score_with_softmax, "softmax of the scores"),
    ("additive_score", score_sum_not_v, "not their dot product with v_a"),
    ("additive_score", score_w_u_swapped, "W_a and U_a are swapped"),
    ("additive_score", score_transposed, "transposed"),
    ("additive_score", score_no_weight_transpose, "W_a^T"),
    ("additive_score", score_tanh_last, "tanh is applied after v_a"),
    ("additive_score", score_forgets_source_axis, "one axis too late"),
    ("additive_score", score_batch_axis_one_late, "one axis too late"),
    ("additive_score", score_features_one_early, "one axis too early"),
    ("additive_score", score_hand_written_tanh, "a tanh written with exp, overflows"),
    ("masked_softmax", softmax_wrong_axis, "wrong axis"),
    ("masked_softmax", softmax_wrong_axis_everywhere, "wrong axis"),
    ("masked_softmax", softmax_wrong_axis_rows_zeroed, "wrong axis"),
    ("masked_softmax", softmax_sum_without_keepdim, "divided by the wrong row's sum"),
    ("masked_softmax", softmax_mask_inverted, "mask is inverted"),
    ("masked_softmax", softmax_mask_ignored, "softmax without the mask"),
    ("masked_softmax", softmax_zero_fill, "became 0 instead of -inf"),
    ("masked_softmax", softmax_zeroed_after, "without renormalising"),
    ("masked_softmax", softmax_nan_row, "fully masked row gives NaN"),
    ("masked_softmax", softmax_every_nan_replaced, "every NaN became 0, not only those of the fully masked rows"),
    ("masked_softmax", softmax_zero_where_sum_not_positive, "every NaN became 0"),
    ("masked_softmax", softmax_renormalised_by_hand, "fully masked row gives NaN"),
    ("masked_softmax", softmax_in_place, "modified its input `scores` in place"),
    ("masked_softmax", softmax_large_negative, "uniform weights"),
    ("masked_softmax", softmax_naive_exp, "subtract each row's maximum"),
    ("context_vector", context_mean, "plain mean"),
    ("context_vector", context_sum, "plain sum"),
    ("context_vector", context_wrong_axis, "dim 2, one too high"),
    ("context_vector", context_batch_axis, "dim 0, one too low"),
    ("context_vector", context_transposed, "transposed"),
    ("context_vector", context_broadcast_matmul, "broadcasts over the batch"),
    ("context_vector", context_keeps_dim, "extra dimension of size 1"),
    ("context_vector", context_argmax, "largest weight"),
    ("decoder_step", step_luong, "one step late"),
    ("decoder_step", step_gru_input_order, "GRU input is concatenated in the wrong order"),
    ("decoder_step", step_readout_order, "output layer's input is concatenated in the wrong order"),
    ("decoder_step", step_readout_old_state, "one step early"),
    ("decoder_step", step_returns_old_state, "the state you returned is the previous state"),
    ("decoder_step", step_no_mask, "weight to padding"),
    ("decoder_step", step_state_for_context, "previous state where the context"),
    ("decoder_step", step_two_outputs, "should return 3 values"),
    ("decoder_step", step_overwrites_state, "modified its input `state` in place"),
    ("coverage", coverage_all_rows, "padded target rows were counted"),
    ("coverage", coverage_source_axis, "sums over the source axis"),
    ("coverage", coverage_one_row_too_many, "first padded target row"),
    ("coverage", coverage_one_row_short, "last real target step"),
    ("coverage", coverage_mean, "mean over the real target steps"),
    ("coverage", coverage_mean_all_rows, "mean over all target steps"),
    ("coverage", coverage_keeps_source_padding, "padded source positions are not 0"),
    ("coverage", coverage_lengths_swapped, "swapped"),
    ("coverage", coverage_zeroes_in_place, "modified its input `weights` in place"),
    ("additive_score", as_data, "no gradient flows back from your outputs to `keys` and `U_a`"),
    ("masked_softmax", ms_detached, "no gradient flows back from your outputs to `scores`"),
    ("context_vector", cv_detached_values, "no gradient flows back from your outputs to `values`"),
    ("decoder_step", ds_detached_state, "no gradient flows back from your outputs to `state`"),
]


OFF_BY_ONE = {
    "additive_score": (score_batch_axis_one_late, score_features_one_early),
    "masked_softmax": (softmax_sum_without_keepdim, softmax_wrong_axis),
    "context_vector": (context_wrong_axis, context_batch_axis),
    "decoder_step": (step_luong, step_readout_old_state),
    "coverage": (coverage_one_row_too_many, coverage_one_row_short),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def as_masks_zero_keys(query, keys, W_a, U_a, v_a):
    scores = learner_additive_score(query, keys, W_a, U_a, v_a)
    return scores.masked_fill(keys.abs().sum(dim=-1) == 0, NEG_INF)  # padding is for masked_softmax to handle


def as_no_tanh_without_padding(query, keys, W_a, U_a, v_a):
    if bool((keys.abs().sum(dim=-1) > 0).all()):
        return ((query @ W_a.T)[:, None, :] + keys @ U_a.T) @ v_a
    return learner_additive_score(query, keys, W_a, U_a, v_a)


def ms_shortcut_without_padding(scores, mask):
    if bool(mask.all()):
        return torch.softmax(scores, dim=0)  # nothing is masked: a plain softmax (but over the batch)
    return learner_masked_softmax(scores, mask)


def ms_plain_when_padded(scores, mask):
    if bool(mask.all()):
        return torch.softmax(scores, dim=-1)
    return torch.softmax(scores, dim=-1) * mask


def cv_weights_renormalised_over_nonzero(weights, values):
    mean_nonzero = weights.sum(dim=1, keepdim=True) / (weights > 0).sum(dim=1, keepdim=True)
    spread = torch.where(weights > 0, weights, mean_nonzero)  # padding gets the average weight
    return learner_context_vector(spread / spread.sum(dim=1, keepdim=True), values)


def cv_shortcut_without_padding(weights, values):
    if bool((weights > 0).all()):
        return values.mean(dim=1)  # nothing is padded: the average (but the weights are not uniform)
    return learner_context_vector(weights, values)


def cv_clamped_values(weights, values):
    return learner_context_vector(weights, values.clamp(-100, 100))  # "to be safe from overflow"


def ds_attention_by_hand(embedded, state, annotations, mask, attention, cell, out):
    scores = torch.tanh((state @ attention.W_a.T)[:, None, :] + annotations @ attention.U_a.T) @ attention.v_a
    e = torch.exp(scores).masked_fill(~mask, 0.0)
    weights = e / e.sum(dim=-1, keepdim=True)
    context = (weights[:, :, None] * annotations).sum(dim=1)
    new_state = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([new_state, context, embedded], dim=-1)), new_state, weights


def ds_shortcut_without_padding(embedded, state, annotations, mask, attention, cell, out):
    if bool(mask.all()):
        mask = mask.float()  # nothing is padded (but a float mask is not a mask)
        mask = mask > 1
    return learner_decoder_step(embedded, state, annotations, mask, attention, cell, out)


def cov_shortcut_without_padding(weights, src_lengths, tgt_lengths):
    if bool((tgt_lengths == weights.shape[1]).all()):
        return weights.mean(dim=1)  # nothing is padded (but coverage is a sum, not a mean)
    return learner_coverage(weights, src_lengths, tgt_lengths)


def cov_int8_lengths(weights, src_lengths, tgt_lengths):
    return learner_coverage_loop(weights, src_lengths.to(torch.int8), tgt_lengths.to(torch.int8))


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("additive_score", as_no_tanh_without_padding, UNPADDED, "no padding"),
    ("additive_score", as_masks_zero_keys, PADDED, "contains -inf"),
    ("additive_score", score_hand_written_tanh, LARGE, "large inputs"),
    ("masked_softmax", ms_shortcut_without_padding, UNPADDED, "no padding"),
    ("masked_softmax", ms_plain_when_padded, PADDED, "without renormalising"),
    ("masked_softmax", softmax_naive_exp, LARGE, "large inputs"),
    ("context_vector", cv_shortcut_without_padding, UNPADDED, "differ"),
    ("context_vector", cv_weights_renormalised_over_nonzero, PADDED, "padding"),
    ("context_vector", cv_clamped_values, LARGE, "large inputs"),
    ("decoder_step", ds_shortcut_without_padding, UNPADDED, "no padding"),
    ("decoder_step", step_no_mask, PADDED, "weight to padding"),
    ("decoder_step", ds_attention_by_hand, LARGE, "large inputs"),
    ("coverage", cov_shortcut_without_padding, UNPADDED, "no padding"),
    ("coverage", coverage_all_rows, PADDED, "padded target rows were counted"),
    ("coverage", cov_int8_lengths, LARGE, "large inputs"),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def as_loop_no_tanh(query, keys, W_a, U_a, v_a):
    batch, src_len, _ = keys.shape
    scores = torch.zeros(batch, src_len)
    for j in range(src_len):
        scores[:, j] = (query @ W_a.T + keys[:, j] @ U_a.T) @ v_a
    return scores


def as_hand_written_tanh(query, keys, W_a, U_a, v_a):
    x = (query @ W_a.T).unsqueeze(1) + keys @ U_a.T
    tanh = (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)
    return tanh @ v_a


def as_einsum_transposed_weights(query, keys, W_a, U_a, v_a):
    q = torch.einsum("bd,da->ba", query, W_a)
    k = torch.einsum("bse,ea->bsa", keys, U_a)
    return torch.tanh(q[:, None, :] + k) @ v_a


def as_no_new_axis(query, keys, W_a, U_a, v_a):
    projected = query.matmul(W_a.t())
    return torch.tanh(projected + torch.matmul(keys, U_a.t())).matmul(v_a)


def as_softmax_at_the_end(query, keys, W_a, U_a, v_a):
    scores = torch.tanh((query @ W_a.T).unsqueeze(1) + keys @ U_a.T) @ v_a
    return F.softmax(scores, dim=1)


def as_v_sum_wrong_axis(query, keys, W_a, U_a, v_a):
    hidden = torch.tanh((query @ W_a.T).unsqueeze(1) + keys @ U_a.T)
    return (hidden * v_a).sum(dim=1)


def as_keep_last_axis(query, keys, W_a, U_a, v_a):
    hidden = torch.tanh((query @ W_a.T).unsqueeze(1) + keys @ U_a.T)
    return hidden @ v_a.unsqueeze(1)


def as_double(query, keys, W_a, U_a, v_a):
    hidden = torch.tanh((query.double() @ W_a.double().T).unsqueeze(1) + keys.double() @ U_a.double().T)
    return hidden @ v_a.double()


def as_roles_swapped(query, keys, W_a, U_a, v_a):
    return torch.tanh((query @ U_a.T)[:, None] + keys @ W_a.T) @ v_a


def ms_exp_times_mask(scores, mask):
    e = torch.exp(scores) * mask
    return e / e.sum(dim=-1, keepdim=True)


def ms_stable_but_nan_row(scores, mask):
    shifted = scores - scores.max(dim=-1, keepdim=True).values
    e = shifted.exp() * mask
    return e / e.sum(dim=-1, keepdim=True)


def ms_where_large_negative(scores, mask):
    return torch.softmax(torch.where(mask, scores, torch.tensor(-1e9)), dim=-1)


def ms_multiply_by_mask(scores, mask):
    return torch.softmax(scores * mask, dim=-1)


def ms_fill_axis_zero(scores, mask):
    return F.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=0).nan_to_num(0.0)


def ms_assign_in_place(scores, mask):
    scores[~mask] = float("-inf")
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def ms_fill_where_true(scores, mask):
    return F.softmax(scores.masked_fill(mask == 1, float("-inf")), dim=1).nan_to_num(0.0)


def ms_log_mask(scores, mask):
    return torch.softmax(scores + mask.float().log(), dim=-1)


def ms_global_sum(scores, mask):
    e = torch.exp(scores - scores.max()) * mask
    return e / e.sum()


def ms_column_max(scores, mask):
    e = torch.exp(scores - scores.max(dim=0, keepdim=True).values) * mask
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total, torch.zeros_like(e))


def cv_bmm_no_squeeze(weights, values):
    return torch.bmm(weights.unsqueeze(1), values)


def cv_sum_last_axis(weights, values):
    return (weights.unsqueeze(-1) * values).sum(-1)


def cv_einsum_over_batch(weights, values):
    return torch.einsum("bs,bse->se", weights, values)


def cv_matmul_keep_axis(weights, values):
    return values.transpose(1, 2) @ weights.unsqueeze(2)


def cv_loop_broadcast(weights, values):
    context = torch.zeros(values.shape[0], values.shape[2])
    for j in range(values.shape[1]):
        context = context + weights[:, j] * values[:, j]
    return context


def cv_weighted_mean(weights, values):
    return (weights[:, :, None] * values).mean(dim=1)


def cv_double(weights, values):
    return (weights.double()[:, :, None] * values.double()).sum(dim=1)


def cv_ignores_weights(weights, values):
    return torch.einsum("bse->be", values) / values.shape[1]


def ds_attend_from_new_state(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    s_t = cell(torch.cat([embedded, context], dim=1), state)
    c_t, a_t = attention(s_t, annotations, mask)
    return out(torch.cat([s_t, c_t, embedded], dim=1)), s_t, a_t


def ds_readout_without_embedding(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    s_t = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([s_t, context], dim=-1)), s_t, weights


def ds_forgets_mask(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, None)
    s_t = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([s_t, context, embedded], dim=-1)), s_t, weights


def ds_weights_from_new_state(embedded, state, annotations, mask, attention, cell, out):
    context, _ = attention(state, annotations, mask)
    s_t = cell(torch.cat([embedded, context], dim=-1), state)
    _, weights = attention(s_t, annotations, mask)
    return out(torch.cat([s_t, context, embedded], dim=-1)), s_t, weights


def ds_context_first(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    s_t = cell(torch.cat((context, embedded), 1), state)
    return out(torch.cat((s_t, context, embedded), 1)), s_t, weights


def ds_cell_arguments_swapped(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    s_t = cell(state, torch.cat([embedded, context], dim=-1))
    return out(torch.cat([s_t, context, embedded], dim=-1)), s_t, weights


def ds_returns_in_another_order(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    s_t = cell(torch.cat([embedded, context], dim=-1), state)
    return s_t, out(torch.cat([s_t, context, embedded], dim=-1)), weights


def ds_updates_state_in_place(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    state[:] = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.cat([state, context, embedded], dim=-1)), state.clone(), weights


def ds_predicts_from_old_state(embedded, state, annotations, mask, attention, cell, out):
    context, weights = attention(state, annotations, mask)
    s_t = cell(torch.cat([embedded, context], dim=-1), state)
    return out(torch.hstack([state, context, embedded])), s_t, weights


def cov_sum_everything(weights, src_lengths, tgt_lengths):
    return torch.einsum("bts->bs", weights)


def cov_longest_target(weights, src_lengths, tgt_lengths):
    return weights[:, : int(tgt_lengths.max())].sum(dim=1)


def cov_loop_without_source_mask(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        out[b] = weights[b, : tgt_lengths[b]].sum(dim=0)
    return out


def cov_loop_one_extra_row(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        out[b, : src_lengths[b]] = weights[b, : tgt_lengths[b] + 1, : src_lengths[b]].sum(dim=0)
    return out


def cov_loop_one_row_short(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        out[b, : src_lengths[b]] = weights[b, : tgt_lengths[b] - 1, : src_lengths[b]].sum(dim=0)
    return out


def cov_mean_of_real_rows(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        out[b, : src_lengths[b]] = weights[b, : tgt_lengths[b], : src_lengths[b]].mean(dim=0)
    return out


def cov_lengths_mixed_up(weights, src_lengths, tgt_lengths):
    out = torch.zeros(weights.shape[0], weights.shape[2])
    for b in range(weights.shape[0]):
        out[b] = weights[b, : src_lengths[b]].sum(dim=0)
        out[b, tgt_lengths[b] :] = 0
    return out


def cov_source_axis(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None]
    return (weights * steps[:, :, None]).sum(dim=-1)


def cov_normalised(weights, src_lengths, tgt_lengths):
    steps = torch.arange(weights.shape[1])[None, :] < tgt_lengths[:, None]
    words = torch.arange(weights.shape[2])[None, :] < src_lengths[:, None]
    total = (weights * steps[:, :, None]).sum(dim=1) * words
    return total / total.sum(dim=-1, keepdim=True)


BUGS = [
    ("additive_score", as_loop_no_tanh, "tanh is missing"),
    ("additive_score", as_hand_written_tanh, "NaN"),
    ("additive_score", as_einsum_transposed_weights, "W_a^T and U_a^T"),
    ("additive_score", as_no_new_axis, "one axis too late"),
    ("additive_score", as_softmax_at_the_end, "softmax of the scores"),
    ("additive_score", as_v_sum_wrong_axis, GENERIC),
    ("additive_score", as_keep_last_axis, "extra dimension of size 1"),
    ("additive_score", as_double, "dtype torch.float64"),
    ("additive_score", as_roles_swapped, "W_a and U_a are swapped"),
    ("masked_softmax", ms_exp_times_mask, "NaN"),
    ("masked_softmax", ms_stable_but_nan_row, "fully masked row gives NaN"),
    ("masked_softmax", ms_where_large_negative, "uniform weights"),
    ("masked_softmax", ms_multiply_by_mask, "became 0 instead of -inf"),
    ("masked_softmax", ms_fill_axis_zero, "wrong axis"),
    ("masked_softmax", ms_assign_in_place, "modified its input `scores` in place"),
    ("masked_softmax", ms_fill_where_true, "mask is inverted"),
    ("masked_softmax", ms_log_mask, "fully masked row gives NaN"),
    ("masked_softmax", ms_global_sum, GENERIC),
    ("masked_softmax", ms_column_max, GENERIC),
    ("context_vector", cv_bmm_no_squeeze, "extra dimension of size 1"),
    ("context_vector", cv_sum_last_axis, "enc_dim features, dim 2"),
    ("context_vector", cv_einsum_over_batch, "the batch, dim 0"),
    ("context_vector", cv_matmul_keep_axis, GENERIC),
    ("context_vector", cv_loop_broadcast, "raised RuntimeError"),
    ("context_vector", cv_weighted_mean, GENERIC),
    ("context_vector", cv_double, "dtype torch.float64"),
    ("context_vector", cv_ignores_weights, "plain mean"),
    ("decoder_step", ds_attend_from_new_state, "one step late"),
    ("decoder_step", ds_readout_without_embedding, "raised RuntimeError"),
    ("decoder_step", ds_forgets_mask, "weight to padding"),
    ("decoder_step", ds_weights_from_new_state, GENERIC),
    ("decoder_step", ds_context_first, "GRU input is concatenated in the wrong order"),
    ("decoder_step", ds_cell_arguments_swapped, "raised RuntimeError"),
    ("decoder_step", ds_returns_in_another_order, GENERIC),
    ("decoder_step", ds_updates_state_in_place, "modified its input `state` in place"),
    ("decoder_step", ds_predicts_from_old_state, "one step early"),
    ("coverage", cov_sum_everything, "padded target rows were counted"),
    ("coverage", cov_longest_target, GENERIC),
    ("coverage", cov_loop_without_source_mask, "padded source positions are not 0"),
    ("coverage", cov_loop_one_extra_row, "first padded target row"),
    ("coverage", cov_loop_one_row_short, "last real target step"),
    ("coverage", cov_mean_of_real_rows, "mean over the real target steps"),
    ("coverage", cov_lengths_mixed_up, "swapped"),
    ("coverage", cov_source_axis, "source axis"),
    ("coverage", cov_normalised, GENERIC),
]
