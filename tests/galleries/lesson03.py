"""The mutant gallery of lessons 03-05, merged into tests/test_checks.py's tables (CORRECT, MUTANTS,
OFF_BY_ONE, KIND_MUTANTS) there; the independent gallery of these lessons is in tests/learner_bugs.py.
"""

from __future__ import annotations

import math

import torch

from attnedu.attention import general_score
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

NEG_INF = float("-inf")

# --------------------------------------------------------------------------------------------
# Lesson 03: correct versions, written as a learner would
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


CORRECT = {
    "general_score": [learner_general_score, learner_general_score_bmm, general_score],
    "attentional_hidden": [learner_attentional_hidden, learner_attentional_hidden_split],
    "attend_all_steps": [learner_attend_all_steps, learner_attend_all_steps_einsum],
    "general_decoder_step": [learner_general_decoder_step],
}

# --------------------------------------------------------------------------------------------
# Lesson 03: mutants
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


MUTANTS = [
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
    ("general_decoder_step", gds_feeds_state, "where h~_{t-1} belongs"),
    ("general_decoder_step", gds_combine_order, "[h_t; c_t], the wrong order"),
    ("general_decoder_step", gds_combine_old_state, "combines c_t with the previous state"),
    ("general_decoder_step", gds_no_tanh, "tanh is missing"),
    ("general_decoder_step", gds_logits_from_state, "logits come from the state h_t"),
    ("general_decoder_step", gds_returns_old_state, "the state you returned is the previous state"),
    ("general_decoder_step", gds_no_mask, "weight to padding"),
    ("general_decoder_step", gds_batch_axis_one_late, "one axis too late"),
    ("general_decoder_step", gds_features_one_early, "one axis too early"),
    ("general_decoder_step", gds_three_outputs, "should return 4 values"),
    ("general_decoder_step", gds_overwrites_attentional, "modified its input `attentional` in place"),
]

OFF_BY_ONE = {
    "general_score": (gs_batch_axis_one_late, gs_features_one_early),
    "attentional_hidden": (ah_cat_axis_one_high, ah_cat_axis_one_low),
    "attend_all_steps": (aas_one_too_many, aas_one_too_few),
    "general_decoder_step": (gds_batch_axis_one_late, gds_features_one_early),
}

# --------------------------------------------------------------------------------------------
# Lesson 03: mistakes that show on one kind of test case only
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


KIND_MUTANTS = [
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


# --------------------------------------------------------------------------------------------
# Lesson 04: correct versions
# --------------------------------------------------------------------------------------------


def learner_sdpa(query, key, value, mask):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def learner_sdpa_by_hand(query, key, value, mask):
    scores = torch.einsum("bqd,bkd->bqk", query, key) / query.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask, NEG_INF)
    top = scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores - torch.where(torch.isinf(top), torch.zeros_like(top), top))
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))
    return torch.einsum("bqk,bkv->bqv", weights, value), weights


def learner_cross_attention(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    real = torch.arange(source.shape[1])[None, :] < source_lengths[:, None]
    mask = real[:, None, :].expand(-1, target.shape[1], -1)
    return learner_sdpa(q, k, v, mask)


CORRECT.update(
    {
        "scaled_dot_product_attention": [learner_sdpa, learner_sdpa_by_hand],
        "cross_attention": [learner_cross_attention],
    }
)

# --------------------------------------------------------------------------------------------
# Lesson 04: mutants
# --------------------------------------------------------------------------------------------


def _sd(query, key, value, mask, *, scale=None, fill=NEG_INF, dim=-1, nan_ok=False, hide=None):
    scores = query @ key.transpose(-2, -1) / (math.sqrt(query.shape[-1]) if scale is None else scale)
    scores = scores.masked_fill(~mask if hide is None else hide, fill)
    weights = torch.softmax(scores, dim=dim)
    weights = weights if nan_ok else weights.nan_to_num(0.0)
    return weights @ value, weights


def sd_no_scale(query, key, value, mask):
    return _sd(query, key, value, mask, scale=1.0)


def sd_divided_by_dim(query, key, value, mask):
    return _sd(query, key, value, mask, scale=query.shape[-1])


def sd_value_dim(query, key, value, mask):
    return _sd(query, key, value, mask, scale=math.sqrt(value.shape[-1]))


def sd_softmax_over_queries(query, key, value, mask):
    return _sd(query, key, value, mask, dim=-2)


def sd_sum_without_keepdim(query, key, value, mask):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values) * mask
    weights = torch.nan_to_num(e / e.sum(dim=-1))
    return weights @ value, weights


def sd_mask_inverted(query, key, value, mask):
    return _sd(query, key, value, mask, hide=mask)


def sd_mask_ignored(query, key, value, mask):
    return _sd(query, key, value, mask, hide=torch.zeros_like(mask))


def sd_zero_fill(query, key, value, mask):
    return _sd(query, key, value, mask, fill=0.0)


def sd_zeroed_after(query, key, value, mask):
    weights = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]), dim=-1) * mask
    return weights @ value, weights


def sd_nan_row(query, key, value, mask):
    return _sd(query, key, value, mask, nan_ok=True)


def sd_large_negative(query, key, value, mask):
    return _sd(query, key, value, mask, fill=-1e9)


def sd_averages_keys(query, key, value, mask):
    return (lambda out, weights: (weights @ key, weights))(*learner_sdpa(query, key, value, mask))


def sd_naive_exp(query, key, value, mask):
    e = torch.exp(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])) * mask
    weights = torch.nan_to_num(e / e.sum(dim=-1, keepdim=True))
    return weights @ value, weights


def sd_in_place(query, key, value, mask):
    query /= math.sqrt(query.shape[-1])
    weights = torch.softmax((query @ key.transpose(-2, -1)).masked_fill(~mask, NEG_INF), dim=-1).nan_to_num(0.0)
    return weights @ value, weights


def sd_output_only(query, key, value, mask):
    return learner_sdpa(query, key, value, mask)[0]


def ca_no_mask(target, source, source_lengths, W_Q, W_K, W_V):
    weights = torch.softmax((target @ W_Q) @ (source @ W_K).transpose(1, 2) / math.sqrt(W_Q.shape[1]), dim=-1)
    return weights @ (source @ W_V), weights


def _ca(target, source, source_lengths, W_Q, W_K, W_V, offset=0, inverted=False, scaled=True):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    real = torch.arange(source.shape[1])[None, None, :] < (source_lengths + offset)[:, None, None]
    scores = q @ k.transpose(1, 2) / (math.sqrt(q.shape[-1]) if scaled else 1.0)
    weights = torch.softmax(scores.masked_fill(real if inverted else ~real, NEG_INF), dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def ca_mask_inverted(target, source, source_lengths, W_Q, W_K, W_V):
    return _ca(target, source, source_lengths, W_Q, W_K, W_V, inverted=True)


def ca_one_too_many(target, source, source_lengths, W_Q, W_K, W_V):
    return _ca(target, source, source_lengths, W_Q, W_K, W_V, offset=1)


def ca_one_too_few(target, source, source_lengths, W_Q, W_K, W_V):
    return _ca(target, source, source_lengths, W_Q, W_K, W_V, offset=-1)


def ca_no_scale(target, source, source_lengths, W_Q, W_K, W_V):
    return _ca(target, source, source_lengths, W_Q, W_K, W_V, scaled=False)


def ca_self_attention(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, target @ W_K, target @ W_V
    weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def ca_values_from_target(target, source, source_lengths, W_Q, W_K, W_V):
    out, weights = _ca(target, source, source_lengths, W_Q, W_K, W_V)
    return weights @ (target @ W_V), weights


def ca_roles_swapped(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = source @ W_Q, target @ W_K, target @ W_V
    weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def ca_q_k_swapped(target, source, source_lengths, W_Q, W_K, W_V):
    return _ca(target, source, source_lengths, W_K, W_Q, W_V)


def ca_transposed_weights(target, source, source_lengths, W_Q, W_K, W_V):
    return _ca(target, source, source_lengths, W_Q.T, W_K.T, W_V.T)


def ca_mask_without_query_axis(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    real = torch.arange(source.shape[1])[None, :] < source_lengths[:, None]
    scores = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(~real, NEG_INF)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


MUTANTS += [
    ("scaled_dot_product_attention", sd_no_scale, "the scale is missing"),
    ("scaled_dot_product_attention", sd_divided_by_dim, "divided by head_dim"),
    ("scaled_dot_product_attention", sd_value_dim, "sqrt(value_dim)"),
    ("scaled_dot_product_attention", sd_softmax_over_queries, "dim=1, the queries"),
    ("scaled_dot_product_attention", sd_sum_without_keepdim, "divided by the wrong row's sum"),
    ("scaled_dot_product_attention", sd_mask_inverted, "mask is inverted"),
    ("scaled_dot_product_attention", sd_mask_ignored, "softmax without the mask"),
    ("scaled_dot_product_attention", sd_zero_fill, "became 0 instead of -inf"),
    ("scaled_dot_product_attention", sd_zeroed_after, "without renormalising"),
    ("scaled_dot_product_attention", sd_nan_row, "fully masked row gives NaN"),
    ("scaled_dot_product_attention", sd_large_negative, "uniform weights"),
    ("scaled_dot_product_attention", sd_averages_keys, "averages the keys"),
    ("scaled_dot_product_attention", sd_naive_exp, "large inputs"),
    ("scaled_dot_product_attention", sd_in_place, "modified its input `query` in place"),
    ("scaled_dot_product_attention", sd_output_only, "should return 2 values"),
    ("cross_attention", ca_no_mask, "weight to padding"),
    ("cross_attention", ca_mask_inverted, "mask is inverted"),
    ("cross_attention", ca_one_too_many, "first padded source position"),
    ("cross_attention", ca_one_too_few, "last real source word"),
    ("cross_attention", ca_no_scale, "the scale is missing"),
    ("cross_attention", ca_self_attention, "self-attention over the target"),
    ("cross_attention", ca_values_from_target, "values come from the target"),
    ("cross_attention", ca_roles_swapped, "roles are swapped"),
    ("cross_attention", ca_q_k_swapped, "W_Q and W_K are swapped"),
    ("cross_attention", ca_transposed_weights, "transposed matrices"),
    ("cross_attention", ca_mask_without_query_axis, "raised RuntimeError"),
]

OFF_BY_ONE.update(
    {
        "scaled_dot_product_attention": (sd_sum_without_keepdim, sd_softmax_over_queries),
        "cross_attention": (ca_one_too_many, ca_one_too_few),
    }
)

# --------------------------------------------------------------------------------------------
# Lesson 04: mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def sd_unscaled_without_padding(query, key, value, mask):
    if bool(mask.all()):
        return _sd(query, key, value, mask, scale=1.0)  # nothing masked (but the scale is not optional)
    return learner_sdpa(query, key, value, mask)


def ca_unscaled_without_padding(target, source, source_lengths, W_Q, W_K, W_V):
    if bool((source_lengths == source.shape[1]).all()):
        return _ca(target, source, source_lengths, W_Q, W_K, W_V, scaled=False)
    return learner_cross_attention(target, source, source_lengths, W_Q, W_K, W_V)


def ca_naive_exp(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    real = torch.arange(source.shape[1])[None, None, :] < source_lengths[:, None, None]
    e = torch.exp(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])) * real
    weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


KIND_MUTANTS += [
    ("scaled_dot_product_attention", sd_unscaled_without_padding, UNPADDED, "no padding"),
    ("scaled_dot_product_attention", sd_mask_ignored, PADDED, "softmax without the mask"),
    ("scaled_dot_product_attention", sd_naive_exp, LARGE, "large inputs"),
    ("cross_attention", ca_unscaled_without_padding, UNPADDED, "no padding"),
    ("cross_attention", ca_no_mask, PADDED, "weight to padding"),
    ("cross_attention", ca_naive_exp, LARGE, "large inputs"),
]


# --------------------------------------------------------------------------------------------
# Lesson 05: correct versions
# --------------------------------------------------------------------------------------------


def learner_split_heads(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(1, 2)


def learner_split_heads_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def learner_merge_heads(x):
    batch, num_heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq_len, num_heads * head_dim)


def learner_merge_heads_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def _learner_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask[:, None], NEG_INF), dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def learner_multi_head_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    q, k, v = (learner_split_heads(x @ W, num_heads) for x, W in ((query, W_q), (key, W_k), (value, W_v)))
    heads, weights = _learner_attention(q, k, v, mask)
    return learner_merge_heads(heads) @ W_o, weights


def learner_grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    group = num_heads // num_kv_heads
    q = learner_split_heads(query @ W_q, num_heads)
    k = learner_split_heads(key @ W_k, num_kv_heads).repeat_interleave(group, dim=1)
    v = learner_split_heads(value @ W_v, num_kv_heads).repeat_interleave(group, dim=1)
    heads, weights = _learner_attention(q, k, v, mask)
    return learner_merge_heads(heads) @ W_o, weights


def learner_grouped_query_attention_grouped(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    """Without repeating: the query heads reshaped into (batch, num_kv_heads, group, ...) groups."""
    batch, query_len, d_model = query.shape
    head_dim, group = d_model // num_heads, num_heads // num_kv_heads
    q = (query @ W_q).view(batch, query_len, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    k = learner_split_heads(key @ W_k, num_kv_heads)[:, :, None]  # (batch, kv_heads, 1, key_len, head_dim)
    v = learner_split_heads(value @ W_v, num_kv_heads)[:, :, None]
    scores = (q @ k.transpose(-2, -1) / math.sqrt(head_dim)).masked_fill(~mask[:, None, None], NEG_INF)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    heads = (weights @ v).reshape(batch, num_heads, query_len, head_dim)
    return learner_merge_heads(heads) @ W_o, weights.reshape(batch, num_heads, query_len, -1)


CORRECT.update(
    {
        "split_heads": [learner_split_heads, learner_split_heads_chunks],
        "merge_heads": [learner_merge_heads, learner_merge_heads_cat],
        "multi_head_attention": [learner_multi_head_attention],
        "grouped_query_attention": [learner_grouped_query_attention, learner_grouped_query_attention_grouped],
    }
)

# --------------------------------------------------------------------------------------------
# Lesson 05: mutants
# --------------------------------------------------------------------------------------------


def sh_interleaved(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


def sh_no_transpose_reshape(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, num_heads, seq_len, d_model // num_heads)


def sh_axis_in_place(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads)


def sh_heads_and_dim_swapped(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, d_model // num_heads, num_heads).transpose(1, 2)


def sh_transpose_one_low(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(0, 1)


def sh_transpose_one_high(x, num_heads):
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, num_heads, d_model // num_heads).transpose(2, 3)


def sh_clamped(x, num_heads):
    return learner_split_heads(x.clamp(-1e4, 1e4), num_heads)  # "to be safe"


def mh_view_without_transpose(x):
    batch, num_heads, seq_len, head_dim = x.shape
    return x.reshape(batch, seq_len, num_heads * head_dim)


def mh_interleaved(x):
    batch, num_heads, seq_len, head_dim = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, seq_len, num_heads * head_dim)


def mh_sum(x):
    return x.sum(dim=1)


def mh_mean(x):
    return x.mean(dim=1)


def mh_cat_positions(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=1)


def mh_transpose_one_low(x):
    batch, num_heads, seq_len, head_dim = x.shape
    return x.transpose(0, 1).reshape(batch, seq_len, num_heads * head_dim)


def mh_transpose_one_high(x):
    batch, num_heads, seq_len, head_dim = x.shape
    return x.transpose(2, 3).reshape(batch, seq_len, num_heads * head_dim)


def mh_view_after_transpose(x):
    batch, num_heads, seq_len, head_dim = x.shape
    return x.transpose(1, 2).view(batch, seq_len, num_heads * head_dim)


def _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, *, split=None, merge=None, scale=None,
         head_axis=True, use_mask=True, dim=-1, project=True, average=False):  # fmt: skip
    split = split or learner_split_heads
    merge = merge or learner_merge_heads
    q, k, v = (split(x @ W, num_heads) for x, W in ((query, W_q), (key, W_k), (value, W_v)))
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if use_mask:
        scores = scores.masked_fill(~(mask[:, None] if head_axis else mask), NEG_INF)
    weights = torch.softmax(scores, dim=dim).nan_to_num(0.0)
    merged = merge(weights @ v)
    return (merged @ W_o if project else merged), (weights.mean(1) if average else weights)


def mha_no_output_projection(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, project=False)


def mha_scaled_by_d_model(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, scale=math.sqrt(query.shape[-1]))


def mha_no_scale(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, scale=1.0)


def mha_interleaved_split(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, split=sh_interleaved)


def mha_reshape_without_transpose(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, split=sh_no_transpose_reshape)


def mha_merge_without_transpose(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, merge=mh_view_without_transpose)


def mha_merge_one_low(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, merge=mh_transpose_one_low)


def mha_merge_one_high(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, merge=mh_transpose_one_high)


def mha_no_mask(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, use_mask=False)


def mha_mask_without_head_axis(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, head_axis=False)


def mha_softmax_over_queries(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, dim=-2)


def mha_averaged_weights(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, average=True)


def mha_linear_convention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return learner_multi_head_attention(query, key, value, mask, W_q.T, W_k.T, W_v.T, W_o.T, num_heads)


def mha_naive_exp(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    q, k, v = (learner_split_heads(x @ W, num_heads) for x, W in ((query, W_q), (key, W_k), (value, W_v)))
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) * mask[:, None]
    weights = e / e.sum(-1, keepdim=True)
    return learner_merge_heads(weights @ v) @ W_o, weights


def _gqa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads, *, tile=False, scale=None,
         merge=None, use_mask=True):  # fmt: skip
    group = num_heads // num_kv_heads
    q = learner_split_heads(query @ W_q, num_heads)
    k, v = learner_split_heads(key @ W_k, num_kv_heads), learner_split_heads(value @ W_v, num_kv_heads)
    if tile:
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    else:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if use_mask:
        scores = scores.masked_fill(~mask[:, None], NEG_INF)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (merge or learner_merge_heads)(weights @ v) @ W_o, weights


def gqa_tiled(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    return _gqa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads, tile=True)


def gqa_scaled_by_d_model(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    args = (query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)
    return _gqa(*args, scale=math.sqrt(query.shape[-1]))


def gqa_no_mask(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    return _gqa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads, use_mask=False)


def gqa_merge_one_low(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    return _gqa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads, merge=mh_transpose_one_low)


def gqa_merge_one_high(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    return _gqa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads, merge=mh_transpose_one_high)


def gqa_kv_split_into_all_heads(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    q = learner_split_heads(query @ W_q, num_heads)
    k, v = learner_split_heads(key @ W_k, num_heads), learner_split_heads(value @ W_v, num_heads)
    heads, weights = _learner_attention(q, k, v, mask)
    return learner_merge_heads(heads) @ W_o, weights


def gqa_naive_exp(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    group = num_heads // num_kv_heads
    q = learner_split_heads(query @ W_q, num_heads)
    k = learner_split_heads(key @ W_k, num_kv_heads).repeat_interleave(group, dim=1)
    v = learner_split_heads(value @ W_v, num_kv_heads).repeat_interleave(group, dim=1)
    e = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) * mask[:, None]
    weights = e / e.sum(-1, keepdim=True)
    return learner_merge_heads(weights @ v) @ W_o, weights


MUTANTS += [
    ("split_heads", sh_interleaved, "split in the wrong order"),
    ("split_heads", sh_no_transpose_reshape, "without a transpose"),
    ("split_heads", sh_axis_in_place, "heads axis is left in place"),
    ("split_heads", sh_heads_and_dim_swapped, "num_heads and head_dim are swapped"),
    ("split_heads", sh_transpose_one_low, "one too low"),
    ("split_heads", sh_transpose_one_high, "one too high"),
    ("merge_heads", mh_view_without_transpose, "without moving the heads axis back"),
    ("merge_heads", mh_interleaved, "interleaved"),
    ("merge_heads", mh_sum, "adds the heads up"),
    ("merge_heads", mh_mean, "averages the heads"),
    ("merge_heads", mh_cat_positions, "concatenated along the positions"),
    ("merge_heads", mh_transpose_one_low, "one too low"),
    ("merge_heads", mh_transpose_one_high, "one too high"),
    ("merge_heads", mh_view_after_transpose, "raised RuntimeError"),
    ("multi_head_attention", mha_no_output_projection, "W_o is missing"),
    ("multi_head_attention", mha_scaled_by_d_model, "divided by sqrt(d_model)"),
    ("multi_head_attention", mha_no_scale, "the scale is missing"),
    ("multi_head_attention", mha_interleaved_split, "split in the wrong order"),
    ("multi_head_attention", mha_reshape_without_transpose, "without the transpose"),
    ("multi_head_attention", mha_merge_without_transpose, "merged without moving the heads axis back"),
    ("multi_head_attention", mha_merge_one_low, "one too low"),
    ("multi_head_attention", mha_merge_one_high, "one too high"),
    ("multi_head_attention", mha_no_mask, "weight to masked keys"),
    ("multi_head_attention", mha_mask_without_head_axis, "no head axis"),
    ("multi_head_attention", mha_softmax_over_queries, "dim=-2, the queries"),
    ("multi_head_attention", mha_averaged_weights, "averaged over the heads"),
    ("multi_head_attention", mha_linear_convention, "nn.Linear's convention"),
    ("grouped_query_attention", gqa_tiled, "tiled"),
    ("grouped_query_attention", gqa_scaled_by_d_model, "divided by sqrt(d_model)"),
    ("grouped_query_attention", gqa_no_mask, "weight to masked keys"),
    ("grouped_query_attention", gqa_merge_one_low, "one too low"),
    ("grouped_query_attention", gqa_merge_one_high, "one too high"),
    ("grouped_query_attention", gqa_kv_split_into_all_heads, "raised RuntimeError"),
]

OFF_BY_ONE.update(
    {
        "split_heads": (sh_transpose_one_low, sh_transpose_one_high),
        "merge_heads": (mh_transpose_one_low, mh_transpose_one_high),
        "multi_head_attention": (mha_merge_one_low, mha_merge_one_high),
        "grouped_query_attention": (gqa_merge_one_low, gqa_merge_one_high),
    }
)

# --------------------------------------------------------------------------------------------
# Lesson 05: mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def sh_only_as_long_as_the_longest(x, num_heads):
    longest = int((x.abs().sum(-1) > 0).sum(1).max())  # the longest sentence, "the rest is padding"
    return learner_split_heads(x[:, :longest], num_heads)


def sh_shortcut_without_padding(x, num_heads):
    if bool((x.abs().sum(-1) > 0).all()):
        return sh_no_transpose_reshape(x, num_heads)  # nothing padded: "a plain reshape will do"
    return learner_split_heads(x, num_heads)


def mh_only_as_long_as_the_longest(x):
    longest = int((x.abs().sum(-1) > 0).any(1).sum(1).max())
    return learner_merge_heads(x[:, :, :longest])


def mh_shortcut_without_padding(x):
    if bool((x.abs().sum(-1) > 0).all()):
        return mh_view_without_transpose(x)
    return learner_merge_heads(x)


def mh_clamped(x):
    return learner_merge_heads(x.clamp(-1e4, 1e4))


def mha_unscaled_without_padding(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    if bool(mask.all()):
        return mha_no_scale(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads)
    return learner_multi_head_attention(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads)


def gqa_unscaled_without_padding(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    args = (query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)
    if bool(mask.all()):
        return _gqa(*args, scale=1.0)
    return learner_grouped_query_attention(*args)


KIND_MUTANTS += [
    ("split_heads", sh_shortcut_without_padding, UNPADDED, "no padding"),
    ("split_heads", sh_only_as_long_as_the_longest, PADDED, "wrong shape"),
    ("split_heads", sh_clamped, LARGE, "large inputs"),
    ("merge_heads", mh_shortcut_without_padding, UNPADDED, "no padding"),
    ("merge_heads", mh_only_as_long_as_the_longest, PADDED, "wrong shape"),
    ("merge_heads", mh_clamped, LARGE, "large inputs"),
    ("multi_head_attention", mha_unscaled_without_padding, UNPADDED, "no padding"),
    ("multi_head_attention", mha_no_mask, PADDED, "weight to masked keys"),
    ("multi_head_attention", mha_naive_exp, LARGE, "large inputs"),
    ("grouped_query_attention", gqa_unscaled_without_padding, UNPADDED, "no padding"),
    ("grouped_query_attention", gqa_no_mask, PADDED, "weight to masked keys"),
    ("grouped_query_attention", gqa_naive_exp, LARGE, "large inputs"),
]
