"""Lesson 03, 03_luong_attention: the galleries of ``general_score``, ``attentional_hidden``, ``attend_all_steps``,
``general_decoder_step`` and ``local_p_weight_sum`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS,
KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu.attention import general_score
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, NEG_INF, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_general_score(query, keys, W_a):
    return ((query @ W_a)[:, None, :] * keys).sum(dim=-1)


def learner_general_score_bmm(query, keys, W_a):
    return torch.bmm((query @ W_a).unsqueeze(1), keys.transpose(1, 2)).squeeze(1)


def learner_attentional_hidden(context, state, W_c):
    return torch.tanh(torch.cat([context, state], dim=-1) @ W_c.T)


def learner_attentional_hidden_split(context, state, W_c):
    enc_dim = context.shape[-1]
    return torch.tanh(context @ W_c[:, :enc_dim].T + state @ W_c[:, enc_dim:].T)


def learner_attentional_hidden_sigmoid(context, state, W_c):
    """tanh(x) written as 2 sigmoid(2x) - 1 (issue 30): equal in value; in float32 its gradient differs from
    torch.tanh's by rounding (about 1e-4 on the large-input case), in float64 it agrees."""
    x = torch.cat([context, state], dim=-1) @ W_c.T
    return 2 * torch.sigmoid(2 * x) - 1


def learner_attentional_hidden_float32(context, state, W_c):
    """The same, with the weights made float32 explicitly: it refuses float64 inputs (a float64 matrix times a
    float32 one raises), so the check compares its gradients in float32 alone."""
    x = torch.cat([context, state], dim=-1) @ W_c.to(torch.float32).T
    return 2 * torch.sigmoid(2 * x) - 1


def learner_attend_all_steps(states, annotations, src_lengths, W_a):
    scores = states @ W_a @ annotations.transpose(1, 2)
    mask = torch.arange(annotations.shape[1])[None, :] < src_lengths[:, None]
    weights = torch.softmax(scores.masked_fill(~mask[:, None, :], NEG_INF), dim=-1)
    return weights @ annotations, weights


def learner_attend_all_steps_einsum(states, annotations, src_lengths, W_a):
    scores = torch.einsum("btd,de,bse->bts", states, W_a, annotations)
    mask = torch.arange(annotations.shape[1]).expand(len(src_lengths), -1) < src_lengths.unsqueeze(1)
    weights = torch.softmax(torch.where(mask.unsqueeze(1), scores, torch.tensor(NEG_INF)), dim=2)
    return torch.einsum("bts,bse->bte", weights, annotations), weights


def learner_general_decoder_step(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    scores = ((new_state @ W_a)[:, None, :] * annotations).sum(-1)
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    context = (weights[:, :, None] * annotations).sum(1)
    new_attentional = torch.tanh(combine(torch.cat([context, new_state], dim=-1)))
    return out(new_attentional), new_state, new_attentional, weights


def learner_local_p_weight_sum(center, half_width, src_lengths):
    j = torch.arange(int(src_lengths.max()), dtype=center.dtype)[None, :]
    p = center[:, None]
    window = ((j - torch.floor(p + 0.5)).abs() <= half_width) & (j < src_lengths[:, None])  # inside the source too
    g = torch.exp(-((j - p) ** 2) / (2 * (half_width / 2) ** 2))  # centred on p_t itself
    return (g * window).sum(dim=-1) / window.sum(dim=-1)  # the softmax gives each of the n positions 1 / n


def learner_local_p_weight_sum_loop(center, half_width, src_lengths):
    sums = []
    for p, S in zip(center.tolist(), src_lengths.tolist()):
        middle = math.floor(p + 0.5)
        window = [j for j in range(middle - half_width, middle + half_width + 1) if 0 <= j < S]
        sigma = half_width / 2
        sums.append(sum(math.exp(-((j - p) ** 2) / (2 * sigma**2)) for j in window) / len(window))
    return torch.tensor(sums)


CORRECT = {
    "local_p_weight_sum": [learner_local_p_weight_sum, learner_local_p_weight_sum_loop],
    "general_score": [learner_general_score, learner_general_score_bmm, general_score],
    "attentional_hidden": [
        learner_attentional_hidden,
        learner_attentional_hidden_split,
        learner_attentional_hidden_sigmoid,
        learner_attentional_hidden_float32,
    ],
    "attend_all_steps": [learner_attend_all_steps, learner_attend_all_steps_einsum],
    "general_decoder_step": [learner_general_decoder_step],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


# general_score
def gs_dot(query, keys, W_a):
    return (keys @ query[:, :, None]).squeeze(-1)


def gs_W_transposed(query, keys, W_a):
    return ((query @ W_a.T)[:, None, :] * keys).sum(dim=-1)


def gs_softmax(query, keys, W_a):
    return torch.softmax(learner_general_score(query, keys, W_a), dim=-1)


def gs_scaled(query, keys, W_a):
    return learner_general_score(query, keys, W_a) / math.sqrt(keys.shape[-1])


def gs_transposed(query, keys, W_a):
    return learner_general_score(query, keys, W_a).T


def gs_broadcast_matmul(query, keys, W_a):
    return query @ W_a @ keys.transpose(1, 2)


def gs_keeps_dim(query, keys, W_a):
    return torch.bmm((query @ W_a).unsqueeze(1), keys.transpose(1, 2))


def gs_batch_axis_one_late(query, keys, W_a):
    return ((query @ W_a).unsqueeze(0) * keys).sum(-1)


def gs_features_one_early(query, keys, W_a):
    return ((query @ W_a).unsqueeze(-1) * keys).sum(-1)


# attentional_hidden
def ah_no_tanh(context, state, W_c):
    return torch.cat([context, state], dim=-1) @ W_c.T


def ah_order(context, state, W_c):
    return torch.tanh(torch.cat([state, context], dim=-1) @ W_c.T)


def ah_tanh_first(context, state, W_c):
    return torch.tanh(torch.cat([context, state], dim=-1)) @ W_c.T


def ah_state_only(context, state, W_c):
    return torch.tanh(state @ W_c[:, -state.shape[-1] :].T)


def ah_sigmoid(context, state, W_c):
    return torch.sigmoid(torch.cat([context, state], dim=-1) @ W_c.T)


def ah_relu(context, state, W_c):
    return torch.relu(torch.cat([context, state], dim=-1) @ W_c.T)


def ah_cat_axis_one_low(context, state, W_c):
    return torch.tanh(torch.cat([context, state], dim=-2) @ W_c.T)


def ah_cat_axis_one_high(context, state, W_c):
    return torch.tanh(torch.cat([context, state], dim=context.dim()) @ W_c.T)


def ah_hand_written_tanh(context, state, W_c):
    x = torch.cat([context, state], dim=-1) @ W_c.T
    return (torch.exp(x) - torch.exp(-x)) / (torch.exp(x) + torch.exp(-x))


# attend_all_steps
def _scores(states, annotations, W_a):
    return states @ W_a @ annotations.transpose(1, 2)


def _src_mask(annotations, src_lengths, offset=0):
    return torch.arange(annotations.shape[1])[None, :] < (src_lengths + offset)[:, None]


def aas_no_mask(states, annotations, src_lengths, W_a):
    weights = torch.softmax(_scores(states, annotations, W_a), dim=-1)
    return weights @ annotations, weights


def aas_mask_inverted(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths)
    weights = torch.softmax(_scores(states, annotations, W_a).masked_fill(mask[:, None, :], NEG_INF), dim=-1)
    weights = weights.nan_to_num(0.0)
    return weights @ annotations, weights


def aas_one_too_many(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths, 1)
    weights = torch.softmax(_scores(states, annotations, W_a).masked_fill(~mask[:, None, :], NEG_INF), dim=-1)
    return weights @ annotations, weights


def aas_one_too_few(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths, -1)
    weights = torch.softmax(_scores(states, annotations, W_a).masked_fill(~mask[:, None, :], NEG_INF), dim=-1)
    weights = weights.nan_to_num(0.0)
    return weights @ annotations, weights


def aas_mask_on_steps(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths)
    weights = torch.softmax(_scores(states, annotations, W_a).masked_fill(~mask[:, :, None], NEG_INF), dim=-1)
    weights = weights.nan_to_num(0.0)
    return weights @ annotations, weights


def aas_softmax_over_steps(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths)
    weights = torch.softmax(_scores(states, annotations, W_a).masked_fill(~mask[:, None, :], NEG_INF), dim=1)
    return weights @ annotations, weights


def aas_zero_fill(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths)
    weights = torch.softmax(_scores(states, annotations, W_a).masked_fill(~mask[:, None, :], 0.0), dim=-1)
    return weights @ annotations, weights


def aas_naive_exp(states, annotations, src_lengths, W_a):
    mask = _src_mask(annotations, src_lengths)
    e = torch.exp(_scores(states, annotations, W_a)) * mask[:, None, :]
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ annotations, weights


def aas_returns_weights_only(states, annotations, src_lengths, W_a):
    return learner_attend_all_steps(states, annotations, src_lengths, W_a)[1]


# general_decoder_step
def _step(
    embedded, state, attentional, annotations, mask, W_a, cell, combine, out, *, gru_input=None, query=None,
    combine_input=None, tanh=True, readout=None, returned_state=None, use_mask=True,
):  # fmt: skip
    new_state = cell(gru_input if gru_input is not None else torch.cat([embedded, attentional], dim=-1), state)
    q = new_state if query is None else query
    scores = ((q @ W_a)[:, None, :] * annotations).sum(-1)
    if use_mask:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, dim=-1)
    context = (weights[:, :, None] * annotations).sum(1)
    combined = combine(torch.cat([context, new_state], dim=-1) if combine_input is None else combine_input(context))
    new_attentional = torch.tanh(combined) if tanh else combined
    logits = out(new_attentional if readout is None else readout)
    return logits, new_state if returned_state is None else returned_state, new_attentional, weights


def gds_attends_from_old_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, query=state)


def gds_gru_input_order(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, gru_input=torch.cat([attentional, embedded], dim=-1))


def gds_feeds_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, gru_input=torch.cat([embedded, state], dim=-1))


def gds_combine_order(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, combine_input=lambda context: torch.cat([new_state, context], dim=-1))


def gds_combine_old_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, combine_input=lambda context: torch.cat([context, state], dim=-1))


def gds_no_tanh(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, tanh=False)


def gds_logits_from_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, readout=new_state)


def gds_returns_old_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, returned_state=state)


def gds_no_mask(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    args = (embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    return _step(*args, use_mask=False)


def gds_batch_axis_one_late(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    weights = torch.softmax((((new_state @ W_a)[None] * annotations).sum(-1)).masked_fill(~mask, NEG_INF), dim=-1)
    context = (weights[:, :, None] * annotations).sum(1)
    new_attentional = torch.tanh(combine(torch.cat([context, new_state], dim=-1)))
    return out(new_attentional), new_state, new_attentional, weights


def gds_features_one_early(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    weights = torch.softmax((((new_state @ W_a)[..., None] * annotations).sum(-1)).masked_fill(~mask, NEG_INF), -1)
    context = (weights[:, :, None] * annotations).sum(1)
    new_attentional = torch.tanh(combine(torch.cat([context, new_state], dim=-1)))
    return out(new_attentional), new_state, new_attentional, weights


def gds_three_outputs(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    logits, new_state, _, weights = learner_general_decoder_step(
        embedded, state, attentional, annotations, mask, W_a, cell, combine, out
    )
    return logits, new_state, weights


def gds_overwrites_attentional(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    result = learner_general_decoder_step(embedded, state, attentional, annotations, mask, W_a, cell, combine, out)
    attentional.copy_(result[2])
    return result


def gs_detached_query(query, keys, W_a):
    return learner_general_score(query.detach(), keys, W_a)


def ah_detached_weight(context, state, W_c):
    return learner_attentional_hidden(context, state, W_c.detach())


def ah_state_weights_detached(context, state, W_c):
    """The split version with the state's half of W_c detached: its columns get no gradient, the context's do."""
    enc_dim = context.shape[-1]
    return torch.tanh(context @ W_c[:, :enc_dim].T + state @ W_c[:, enc_dim:].detach().T)


def aas_item_lengths(states, annotations, src_lengths, W_a):
    context, weights = learner_attend_all_steps(states, annotations, src_lengths, W_a)
    return context, torch.tensor(weights.tolist())  # the weights as numbers: no gradient through them


def gds_detached_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    return learner_general_decoder_step(embedded, state.detach(), attentional, annotations, mask, W_a, cell, combine,
                                        out)  # fmt: skip


def gds_returns_detached_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    logits, new_state, new_attentional, weights = learner_general_decoder_step(
        embedded, state, attentional, annotations, mask, W_a, cell, combine, out
    )
    return logits, new_state.detach(), new_attentional, weights


def _lp(center, half_width, src_lengths, *, mu=None, sigma=None, two=2, lo=None, hi=None, middle=None, clip=True,
        divide="n", lengths=None):  # fmt: skip
    """A learner's local_p_weight_sum with one thing changed, position by position."""
    sums = []
    lengths = src_lengths.tolist() if lengths is None else lengths
    for p, S in zip(center.tolist(), lengths):
        m = math.floor(p + 0.5) if middle is None else middle(p)
        first = m - half_width if lo is None else lo(p, half_width)
        last = m + half_width if hi is None else hi(p, half_width)
        window = [j for j in range(first, last + 1) if not clip or 0 <= j < S]
        s = half_width / 2 if sigma is None else sigma(half_width)
        at = p if mu is None else mu(p)
        total = sum(math.exp(-((j - at) ** 2) / (two * s**2)) for j in window)
        n = {"n": len(window), "full": 2 * half_width + 1, "S": S, "none": 1}[divide]
        sums.append(total / n)
    return torch.tensor(sums)


def lp_centred_on_round(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, mu=lambda p: math.floor(p + 0.5))


def lp_sigma_D(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, sigma=lambda D: D)


def lp_no_two(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, two=1)


def lp_floor_ceil(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, lo=lambda p, D: math.floor(p - D), hi=lambda p, D: math.ceil(p + D))


def lp_half_past_D(center, half_width, src_lengths):
    # "the 2D + 1 nearest positions" read as |j - p_t| <= D + 1/2: right unless p_t is x.5 away from the ends
    sums = []
    for p, S in zip(center.tolist(), src_lengths.tolist()):
        window = [j for j in range(S) if abs(j - p) <= half_width + 0.5]
        sigma = half_width / 2
        sums.append(sum(math.exp(-((j - p) ** 2) / (2 * sigma**2)) for j in window) / len(window))
    return torch.tensor(sums)


def lp_round_even(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, middle=round)  # Python's round: halves to even, as torch.round


def lp_full_count(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, divide="full")


def lp_unclipped(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, clip=False)


def lp_no_softmax(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, divide="none")


def lp_whole_source(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, divide="S")


def lp_one_too_wide(center, half_width, src_lengths):
    return _lp(center, half_width + 1, src_lengths, sigma=lambda D: (D - 1) / 2)


def lp_one_too_narrow(center, half_width, src_lengths):
    return _lp(center, half_width - 1, src_lengths, sigma=lambda D: (D + 1) / 2)


def lp_longest(center, half_width, src_lengths):
    return _lp(center, half_width, src_lengths, lengths=[int(src_lengths.max())] * len(src_lengths))


MUTANTS = [
    ("local_p_weight_sum", lp_centred_on_round, "centred on round(p_t)"),
    ("local_p_weight_sum", lp_sigma_D, "standard deviation is D"),
    ("local_p_weight_sum", lp_no_two, "the 2 in the Gaussian's denominator is missing"),
    ("local_p_weight_sum", lp_floor_ceil, "from floor(p_t - D) to ceil(p_t + D)"),
    ("local_p_weight_sum", lp_round_even, "rounded to the even one"),
    ("local_p_weight_sum", lp_half_past_D, "holds 2D + 2 positions"),
    ("local_p_weight_sum", lp_full_count, "1 / (2D + 1)"),
    ("local_p_weight_sum", lp_unclipped, "runs past the ends of the source"),
    ("local_p_weight_sum", lp_no_softmax, "without the softmax"),
    ("local_p_weight_sum", lp_whole_source, "over the whole source"),
    ("local_p_weight_sum", lp_one_too_wide, "<= D + 1"),
    ("local_p_weight_sum", lp_one_too_narrow, "<= D - 1"),
    ("local_p_weight_sum", lp_longest, "the batch's longest length"),
    ("general_score", gs_dot, "W_a is missing"),
    ("general_score", gs_W_transposed, "W_a^T in place of W_a"),
    ("general_score", gs_softmax, "softmax of the scores"),
    ("general_score", gs_scaled, "divided by sqrt(enc_dim)"),
    ("general_score", gs_transposed, "transposed"),
    ("general_score", gs_broadcast_matmul, "broadcasts over the batch"),
    ("general_score", gs_keeps_dim, "extra dimension of size 1"),
    ("general_score", gs_batch_axis_one_late, "one axis too late"),
    ("general_score", gs_features_one_early, "one axis too early"),
    ("attentional_hidden", ah_no_tanh, "tanh is missing"),
    ("attentional_hidden", ah_order, "wrong order"),
    ("attentional_hidden", ah_tanh_first, "tanh is applied before W_c"),
    ("attentional_hidden", ah_state_only, "ignores the context"),
    ("attentional_hidden", ah_sigmoid, "sigmoid"),
    ("attentional_hidden", ah_relu, "a ReLU where"),
    ("attentional_hidden", ah_cat_axis_one_low, "raised RuntimeError"),
    ("attentional_hidden", ah_cat_axis_one_high, "raised IndexError"),
    ("attentional_hidden", ah_hand_written_tanh, "large inputs"),
    ("attend_all_steps", aas_no_mask, "weight to padding"),
    ("attend_all_steps", aas_mask_inverted, "mask is inverted"),
    ("attend_all_steps", aas_one_too_many, "first padded position (j = length) gets weight"),
    ("attend_all_steps", aas_one_too_few, "last real source word (j = length - 1) gets no weight"),
    ("attend_all_steps", aas_mask_on_steps, "along the target steps"),
    ("attend_all_steps", aas_softmax_over_steps, "dim=1, the target steps"),
    ("attend_all_steps", aas_zero_fill, "became 0 instead of -inf"),
    ("attend_all_steps", aas_naive_exp, "large inputs"),
    ("attend_all_steps", aas_returns_weights_only, "should return 2 values"),
    ("general_decoder_step", gds_attends_from_old_state, "one step early"),
    ("general_decoder_step", gds_gru_input_order, "GRU input is concatenated in the wrong order"),
    ("general_decoder_step", gds_feeds_state, "where s~_{t-1} belongs"),
    ("general_decoder_step", gds_combine_order, "[s_t; c_t], the wrong order"),
    ("general_decoder_step", gds_combine_old_state, "combines c_t with the previous state"),
    ("general_decoder_step", gds_no_tanh, "tanh is missing"),
    ("general_decoder_step", gds_logits_from_state, "logits come from the state s_t"),
    ("general_decoder_step", gds_returns_old_state, "the state you returned is the previous state"),
    ("general_decoder_step", gds_no_mask, "weight to padding"),
    ("general_decoder_step", gds_batch_axis_one_late, "one axis too late"),
    ("general_decoder_step", gds_features_one_early, "one axis too early"),
    ("general_decoder_step", gds_three_outputs, "should return 4 values"),
    ("general_decoder_step", gds_overwrites_attentional, "modified its input `attentional` in place"),
    ("general_score", gs_detached_query, "no gradient flows back from your outputs to `query`"),
    ("attentional_hidden", ah_detached_weight, "no gradient flows back from your outputs to `W_c`"),
    ("attentional_hidden", ah_state_weights_detached, "entries of `W_c` (zero where the reference's is not"),
    ("attend_all_steps", aas_item_lengths, "the gradient that flows back to `states`, `annotations` and `W_a` differs"),
    ("general_decoder_step", gds_detached_state, "no gradient flows back from your outputs to `state`"),
    ("general_decoder_step", gds_returns_detached_state, "differs from the reference's, although every output"),
]


OFF_BY_ONE = {
    "local_p_weight_sum": (lp_one_too_wide, lp_one_too_narrow),
    "general_score": (gs_batch_axis_one_late, gs_features_one_early),
    "attentional_hidden": (ah_cat_axis_one_high, ah_cat_axis_one_low),
    "attend_all_steps": (aas_one_too_many, aas_one_too_few),
    "general_decoder_step": (gds_batch_axis_one_late, gds_features_one_early),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def gs_masks_zero_keys(query, keys, W_a):
    return learner_general_score(query, keys, W_a).masked_fill(keys.abs().sum(-1) == 0, NEG_INF)


def gs_dot_without_padding(query, keys, W_a):
    if bool((keys.abs().sum(-1) > 0).all()):
        return learner_general_score(query, keys, W_a).softmax(-1)  # nothing padded: "weights" straight away
    return learner_general_score(query, keys, W_a)


def gs_clamped_keys(query, keys, W_a):
    return learner_general_score(query, keys.clamp(-100, 100), W_a)  # "to be safe from overflow"


def ah_skips_padded_steps(context, state, W_c):
    out = torch.ones(*state.shape)
    real = state.abs().sum(-1) > 0
    out[real] = learner_attentional_hidden(context[real], state[real], W_c)
    return out  # padded steps left at 1: "the loss ignores them anyway"


def ah_no_tanh_without_padding(context, state, W_c):
    if bool((state.abs().sum(-1) > 0).all()):
        return torch.cat([context, state], dim=-1) @ W_c.T
    return learner_attentional_hidden(context, state, W_c)


def aas_shortcut_without_padding(states, annotations, src_lengths, W_a):
    if bool((src_lengths == annotations.shape[1]).all()):
        weights = torch.softmax(_scores(states, annotations, W_a), dim=1)  # nothing to mask (but the wrong axis)
        return weights @ annotations, weights
    return learner_attend_all_steps(states, annotations, src_lengths, W_a)


def gds_shortcut_without_padding(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    if bool(mask.all()):
        mask = mask.float() > 1  # nothing is padded (but a float mask is not a mask)
    return learner_general_decoder_step(embedded, state, attentional, annotations, mask, W_a, cell, combine, out)


def gds_attention_by_hand(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    new_state = cell(torch.cat([embedded, attentional], dim=-1), state)
    e = torch.exp(((new_state @ W_a)[:, None, :] * annotations).sum(-1)) * mask
    weights = e / e.sum(dim=-1, keepdim=True)
    context = (weights[:, :, None] * annotations).sum(1)
    new_attentional = torch.tanh(combine(torch.cat([context, new_state], dim=-1)))
    return out(new_attentional), new_state, new_attentional, weights


def lp_shortcut_without_padding(center, half_width, src_lengths):
    if bool((src_lengths == src_lengths[0]).all()):
        return lp_sigma_D(center, half_width, src_lengths)  # "all the same length": another formula, wrong
    return learner_local_p_weight_sum(center, half_width, src_lengths)


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("local_p_weight_sum", lp_shortcut_without_padding, UNPADDED, "no padding"),
    ("local_p_weight_sum", lp_longest, PADDED, "the batch's longest length"),
    ("general_score", gs_dot_without_padding, UNPADDED, "no padding"),
    ("general_score", gs_masks_zero_keys, PADDED, "contains -inf"),
    ("general_score", gs_clamped_keys, LARGE, "large inputs"),
    ("attentional_hidden", ah_no_tanh_without_padding, UNPADDED, "no padding"),
    ("attentional_hidden", ah_skips_padded_steps, PADDED, "padding"),
    ("attentional_hidden", ah_hand_written_tanh, LARGE, "large inputs"),
    ("attend_all_steps", aas_shortcut_without_padding, UNPADDED, "no padding"),
    ("attend_all_steps", aas_no_mask, PADDED, "weight to padding"),
    ("attend_all_steps", aas_naive_exp, LARGE, "large inputs"),
    ("general_decoder_step", gds_shortcut_without_padding, UNPADDED, "no padding"),
    ("general_decoder_step", gds_no_mask, PADDED, "weight to padding"),
    ("general_decoder_step", gds_attention_by_hand, LARGE, "large inputs"),
]


def _measures_with_local_p_weights(center, half_width, src_lengths):
    from attnedu.attention import local_p_weights

    return torch.stack(
        [local_p_weights(torch.zeros(1, int(n)), c[None], half_width).sum() for c, n in zip(center, src_lengths)]
    )  # right numbers, but the lesson's function did the work


REFERENCE_USE = [
    ("local_p_weight_sum", _measures_with_local_p_weights),
    ("local_p_weight_sum", lambda c, d, n: __import__("attnedu.attention").attention.local_p_uniform_sum(c, d, n)),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("local_p_weight_sum", LARGE): "a mean of at most 2D + 1 Gaussian factors in (0, 1]: a wide window over a long "
    "source overflows nothing and rounds nothing a mistake could hide behind",
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def gs_loop_without_W(query, keys, W_a):
    scores = torch.zeros(keys.shape[0], keys.shape[1])
    for b in range(keys.shape[0]):
        for j in range(keys.shape[1]):
            scores[b, j] = torch.dot(query[b], keys[b, j])
    return scores


def gs_einsum_W_transposed(query, keys, W_a):
    return torch.einsum("bd,ed,bse->bs", query, W_a, keys)


def gs_matmul_broadcast(query, keys, W_a):
    return torch.matmul(torch.matmul(query, W_a), keys.permute(0, 2, 1))


def gs_keys_first(query, keys, W_a):
    return torch.einsum("bse,de,bd->sb", keys, W_a, query)


def gs_normalised(query, keys, W_a):
    scores = torch.einsum("bd,de,bse->bs", query, W_a, keys)
    return scores / scores.abs().sum(dim=-1, keepdim=True)


def gs_root_scaled(query, keys, W_a):
    projected = query.mm(W_a)
    return torch.bmm(keys, projected.unsqueeze(2)).squeeze(2) / keys.size(-1) ** 0.5


def gs_double(query, keys, W_a):
    return torch.einsum("bd,de,bse->bs", query.double(), W_a.double(), keys.double())


def ah_linear_no_tanh(context, state, W_c):
    return F.linear(torch.cat((context, state), -1), W_c)


def ah_state_then_context(context, state, W_c):
    return torch.tanh(F.linear(torch.cat((state, context), -1), W_c))


def ah_relu_instead_of_tanh(context, state, W_c):
    return torch.relu(torch.cat([context, state], -1) @ W_c.t())


def ah_tanh_by_hand(context, state, W_c):
    x = torch.cat([context, state], -1) @ W_c.t()
    return (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)


def ah_sum_not_cat(context, state, W_c):
    h = state.shape[-1]
    return torch.tanh((context[..., :h] + state) @ W_c[:, -h:].t())


def ah_flattened(context, state, W_c):
    x = torch.cat([context, state], -1)
    return torch.tanh(x.reshape(-1, x.shape[-1]) @ W_c.T)


def ah_half_weights(context, state, W_c):
    return torch.tanh(state @ W_c[:, context.shape[-1] :].T + context @ W_c[:, : context.shape[-1]].T / 2)


def aas_loop_no_mask(states, annotations, src_lengths, W_a):
    context, weights = [], []
    for t in range(states.shape[1]):
        scores = torch.einsum("bh,he,bse->bs", states[:, t], W_a, annotations)
        w = F.softmax(scores, dim=-1)
        weights.append(w)
        context.append(torch.einsum("bs,bse->be", w, annotations))
    return torch.stack(context, 1), torch.stack(weights, 1)


def aas_mask_le(states, annotations, src_lengths, W_a):
    scores = torch.bmm(states @ W_a, annotations.transpose(1, 2))
    positions = torch.arange(annotations.shape[1]).view(1, 1, -1)
    scores = scores.masked_fill(positions > src_lengths.view(-1, 1, 1), -1e30)
    weights = scores.softmax(-1)
    return torch.bmm(weights, annotations), weights


def aas_softmax_dim_one(states, annotations, src_lengths, W_a):
    scores = torch.bmm(states @ W_a, annotations.transpose(1, 2))
    real = torch.arange(annotations.shape[1]).view(1, 1, -1) < src_lengths.view(-1, 1, 1)
    weights = torch.nan_to_num(F.softmax(torch.where(real, scores, float("-inf")), dim=1))
    return torch.bmm(weights, annotations), weights


def aas_weights_times_mask(states, annotations, src_lengths, W_a):
    mask = (torch.arange(annotations.shape[1])[None, :] < src_lengths[:, None]).float()
    weights = torch.softmax(torch.bmm(states @ W_a, annotations.transpose(1, 2)), dim=-1) * mask[:, None, :]
    return torch.bmm(weights, annotations), weights


def aas_stable_by_hand(states, annotations, src_lengths, W_a):
    scores = torch.bmm(states @ W_a, annotations.transpose(1, 2))
    mask = torch.arange(annotations.shape[1])[None, None, :] < src_lengths[:, None, None]
    e = torch.exp(scores - scores.max()) * mask  # one maximum for the whole batch
    weights = e / e.sum(-1, keepdim=True)
    return torch.bmm(weights, annotations), weights


def aas_context_from_states(states, annotations, src_lengths, W_a):
    scores = torch.bmm(states @ W_a, annotations.transpose(1, 2))
    mask = torch.arange(annotations.shape[1])[None, None, :] < src_lengths[:, None, None]
    weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    return weights.sum(-1, keepdim=True) * states.mean(1, keepdim=True), weights


def aas_masks_the_lengths_in_place(states, annotations, src_lengths, W_a):
    src_lengths.clamp_(max=annotations.shape[1] - 1)
    mask = torch.arange(annotations.shape[1])[None, None, :] < src_lengths[:, None, None]
    scores = torch.bmm(states @ W_a, annotations.transpose(1, 2)).masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return torch.bmm(weights, annotations), weights


def gds_bahdanau_order(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    scores = torch.einsum("bh,he,bse->bs", state, W_a, annotations).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_t = cell(torch.cat((embedded, attentional), 1), state)
    h_tilde = torch.tanh(combine(torch.cat((context, h_t), 1)))
    return out(h_tilde), h_t, h_tilde, weights


def gds_no_input_feeding(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    h_t = cell(torch.cat((embedded, torch.zeros_like(attentional)), 1), state)
    scores = torch.einsum("bh,he,bse->bs", h_t, W_a, annotations).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_tilde = torch.tanh(combine(torch.cat((context, h_t), 1)))
    return out(h_tilde), h_t, h_tilde, weights


def gds_state_and_context_swapped(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    h_t = cell(torch.cat((embedded, attentional), 1), state)
    scores = torch.einsum("bh,he,bse->bs", h_t, W_a, annotations).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_tilde = torch.tanh(combine(torch.cat((h_t, context), 1)))
    return out(h_tilde), h_t, h_tilde, weights


def gds_predicts_from_h(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    h_t = cell(torch.cat((embedded, attentional), 1), state)
    scores = torch.einsum("bh,he,bse->bs", h_t, W_a, annotations).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_tilde = torch.tanh(combine(torch.cat((context, h_t), 1)))
    return out(h_t), h_t, h_tilde, weights


def gds_returns_attentional_as_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    h_t = cell(torch.cat((embedded, attentional), 1), state)
    scores = torch.einsum("bh,he,bse->bs", h_t, W_a, annotations).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_tilde = torch.tanh(combine(torch.cat((context, h_t), 1)))
    return out(h_tilde), h_tilde, h_t, weights


def gds_dot_score(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    h_t = cell(torch.cat((embedded, attentional), 1), state)
    scores = torch.einsum("bh,bsh->bs", h_t, annotations[..., : h_t.shape[1]]).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_tilde = torch.tanh(combine(torch.cat((context, h_t), 1)))
    return out(h_tilde), h_t, h_tilde, weights


def gds_in_place_state(embedded, state, attentional, annotations, mask, W_a, cell, combine, out):
    state.copy_(cell(torch.cat((embedded, attentional), 1), state))
    scores = torch.einsum("bh,he,bse->bs", state, W_a, annotations).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    context = torch.einsum("bs,bse->be", weights, annotations)
    h_tilde = torch.tanh(combine(torch.cat((context, state), 1)))
    return out(h_tilde), state.clone(), h_tilde, weights


def localp_window_from_p(center, half_width, src_lengths):
    out = []
    for p, S in zip(center.tolist(), src_lengths.tolist()):
        js = [j for j in range(S) if abs(j - p) <= half_width]  # |j - p_t| <= D: the window slides with p_t
        out.append(sum(math.exp(-2 * (j - p) ** 2 / half_width**2) for j in js) / len(js))
    return torch.tensor(out)


def localp_trunc(center, half_width, src_lengths):
    j = torch.arange(int(src_lengths.max()))[None, :].float()
    p = center[:, None]
    window = ((j - p.int()).abs() <= half_width) & (j < src_lengths[:, None])  # int() truncates 7.6 to 7
    g = torch.exp(-((j - p) ** 2) / (2 * (half_width / 2) ** 2))
    return (g * window).sum(-1) / window.sum(-1)


def localp_variance_D(center, half_width, src_lengths):
    j = torch.arange(int(src_lengths.max()))[None, :].float()
    p = center[:, None]
    window = ((j - torch.floor(p + 0.5)).abs() <= half_width) & (j < src_lengths[:, None])
    g = torch.exp(-((j - p) ** 2) / (2 * half_width / 2))  # sigma^2 written as D / 2
    return (g * window).sum(-1) / window.sum(-1)


def localp_max_not_mean(center, half_width, src_lengths):
    j = torch.arange(int(src_lengths.max()))[None, :].float()
    p = center[:, None]
    window = ((j - torch.floor(p + 0.5)).abs() <= half_width) & (j < src_lengths[:, None])
    g = torch.exp(-((j - p) ** 2) / (2 * (half_width / 2) ** 2))
    return (g * window).amax(-1)  # the largest factor, not the mean


def localp_softmax_of_gaussian(center, half_width, src_lengths):
    j = torch.arange(int(src_lengths.max()))[None, :].float()
    p = center[:, None]
    window = ((j - torch.floor(p + 0.5)).abs() <= half_width) & (j < src_lengths[:, None])
    log_g = -((j - p) ** 2) / (2 * (half_width / 2) ** 2)
    return torch.softmax(log_g.masked_fill(~window, NEG_INF), -1).sum(-1)  # the Gaussian inside the softmax: sums to 1


def localp_python_round(center, half_width, src_lengths):
    out = []
    for p, S in zip(center.tolist(), src_lengths.tolist()):
        m = round(p)
        js = [j for j in range(max(0, m - half_width), min(S, m + half_width + 1))]
        out.append(sum(math.exp(-((j - p) ** 2) / (half_width**2 / 2)) for j in js) / len(js))
    return torch.tensor(out)


BUGS = [
    ("local_p_weight_sum", localp_window_from_p, GENERIC),
    ("local_p_weight_sum", localp_trunc, GENERIC),
    ("local_p_weight_sum", localp_variance_D, GENERIC),
    ("local_p_weight_sum", localp_max_not_mean, GENERIC),
    ("local_p_weight_sum", localp_softmax_of_gaussian, GENERIC),
    ("local_p_weight_sum", localp_python_round, "rounded to the even one"),
    ("general_score", gs_loop_without_W, "W_a is missing"),
    ("general_score", gs_einsum_W_transposed, "W_a^T in place of W_a"),
    ("general_score", gs_matmul_broadcast, "broadcasts over the batch"),
    ("general_score", gs_keys_first, "transposed"),
    ("general_score", gs_normalised, GENERIC),
    ("general_score", gs_root_scaled, "divided by sqrt(enc_dim)"),
    ("general_score", gs_double, "dtype torch.float64"),
    ("attentional_hidden", ah_linear_no_tanh, "tanh is missing"),
    ("attentional_hidden", ah_state_then_context, "wrong order"),
    ("attentional_hidden", ah_relu_instead_of_tanh, "ReLU"),
    ("attentional_hidden", ah_tanh_by_hand, "NaN"),
    ("attentional_hidden", ah_sum_not_cat, "raised RuntimeError"),
    ("attentional_hidden", ah_flattened, "wrong shape"),
    ("attentional_hidden", ah_half_weights, GENERIC),
    ("attend_all_steps", aas_loop_no_mask, "weight to padding"),
    ("attend_all_steps", aas_mask_le, "first padded position (j = length) gets weight"),
    ("attend_all_steps", aas_softmax_dim_one, "dim=1, the target steps"),
    ("attend_all_steps", aas_weights_times_mask, GENERIC),
    ("attend_all_steps", aas_stable_by_hand, "NaN"),
    ("attend_all_steps", aas_context_from_states, GENERIC),
    ("attend_all_steps", aas_masks_the_lengths_in_place, "modified its input `src_lengths` in place"),
    ("general_decoder_step", gds_bahdanau_order, "one step early"),
    ("general_decoder_step", gds_no_input_feeding, GENERIC),
    ("general_decoder_step", gds_state_and_context_swapped, "[s_t; c_t], the wrong order"),
    ("general_decoder_step", gds_predicts_from_h, "logits come from the state s_t"),
    ("general_decoder_step", gds_returns_attentional_as_state, GENERIC),
    ("general_decoder_step", gds_dot_score, GENERIC),
    ("general_decoder_step", gds_in_place_state, "modified its input `state` in place"),
]
