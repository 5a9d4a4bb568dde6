"""Lesson 04, 04_query_key_value: the galleries of ``scaled_dot_product_attention`` and ``cross_attention``
(CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py
describes them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, NEG_INF, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
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


CORRECT = {
    "scaled_dot_product_attention": [learner_sdpa, learner_sdpa_by_hand],
    "cross_attention": [learner_cross_attention],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
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


MUTANTS = [
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


OFF_BY_ONE = {
    "scaled_dot_product_attention": (sd_sum_without_keepdim, sd_softmax_over_queries),
    "cross_attention": (ca_one_too_many, ca_one_too_few),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
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


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("scaled_dot_product_attention", sd_unscaled_without_padding, UNPADDED, "no padding"),
    ("scaled_dot_product_attention", sd_mask_ignored, PADDED, "softmax without the mask"),
    ("scaled_dot_product_attention", sd_naive_exp, LARGE, "large inputs"),
    ("cross_attention", ca_unscaled_without_padding, UNPADDED, "no padding"),
    ("cross_attention", ca_no_mask, PADDED, "weight to padding"),
    ("cross_attention", ca_naive_exp, LARGE, "large inputs"),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def sdpa_loops_unscaled(query, key, value, mask):
    batch, n_q, _ = query.shape
    weights = torch.zeros(batch, n_q, key.shape[1])
    for b in range(batch):
        for i in range(n_q):
            s = key[b] @ query[b, i]
            s = s.masked_fill(~mask[b, i], float("-inf"))
            weights[b, i] = torch.nan_to_num(F.softmax(s, dim=0))
    return torch.bmm(weights, value), weights


def sdpa_divides_by_len(query, key, value, mask):
    scores = torch.einsum("bid,bjd->bij", query, key) / key.size(1) ** 0.5
    weights = F.softmax(scores.masked_fill(mask.logical_not(), float("-inf")), -1).nan_to_num(0)
    return torch.einsum("bij,bjv->biv", weights, value), weights


def sdpa_einsum_wrong_axis(query, key, value, mask):
    scores = torch.einsum("bid,bjd->bij", query, key) * query.size(-1) ** -0.5
    weights = F.softmax(scores.masked_fill(mask.logical_not(), float("-inf")), 1).nan_to_num(0)
    return torch.einsum("bij,bjv->biv", weights, value), weights


def sdpa_where_minus_large(query, key, value, mask):
    scores = torch.bmm(query, key.mT) / math.sqrt(query.size(-1))
    weights = torch.softmax(torch.where(mask, scores, torch.full_like(scores, -1e9)), dim=-1)
    return torch.bmm(weights, value), weights


def sdpa_fill_true(query, key, value, mask):
    scores = torch.bmm(query, key.mT) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores.masked_fill(mask == True, float("-inf")), dim=-1)  # noqa: E712
    return torch.bmm(weights, value), weights


def sdpa_no_nan_guard(query, key, value, mask):
    scores = torch.bmm(query, key.mT) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores + torch.log(mask.float()), dim=-1)
    return torch.bmm(weights, value), weights


def sdpa_returns_swapped(query, key, value, mask):
    scores = torch.bmm(query, key.mT) / math.sqrt(query.size(-1))
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    return weights, torch.bmm(weights, value)


def sdpa_global_max(query, key, value, mask):
    scores = torch.bmm(query, key.mT) / math.sqrt(query.size(-1))
    e = torch.exp(scores - scores.max()) * mask
    weights = e / e.sum(-1, keepdim=True).clamp_min(1e-30)
    return torch.bmm(weights, value), weights


def sdpa_scales_after_softmax(query, key, value, mask):
    scores = torch.bmm(query, key.mT).masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0) / math.sqrt(query.size(-1))
    return torch.bmm(weights, value), weights


def ca_forgets_value_projection(target, source, source_lengths, W_Q, W_K, W_V):
    keep = torch.arange(source.size(1)).expand(source.size(0), -1) < source_lengths.unsqueeze(-1)
    scores = torch.einsum("btd,de,bsf,fe->bts", target, W_Q, source, W_K) / math.sqrt(W_K.size(1))
    weights = scores.masked_fill(~keep.unsqueeze(1), float("-inf")).softmax(-1)
    return torch.einsum("bts,bsd->btd", weights, source), weights


def ca_all_from_source(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = source @ W_Q, source @ W_K, source @ W_V
    keep = torch.arange(source.size(1)).expand(source.size(0), -1) < source_lengths.unsqueeze(-1)
    weights = (q @ k.mT / math.sqrt(k.size(-1))).masked_fill(~keep.unsqueeze(1), float("-inf")).softmax(-1)
    return weights @ v, weights


def ca_mask_le(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    keep = torch.arange(source.size(1)).view(1, 1, -1) <= source_lengths.view(-1, 1, 1)
    weights = (q @ k.mT / math.sqrt(k.size(-1))).masked_fill(~keep, float("-inf")).softmax(-1)
    return weights @ v, weights


def ca_unmasked_loop(target, source, source_lengths, W_Q, W_K, W_V):
    outputs, weights = [], []
    for b in range(target.size(0)):
        q, k, v = target[b] @ W_Q, source[b] @ W_K, source[b] @ W_V
        w = torch.softmax(q @ k.T / math.sqrt(q.size(-1)), dim=-1)
        outputs.append(w @ v)
        weights.append(w)
    return torch.stack(outputs), torch.stack(weights)


def ca_queries_from_source(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = source @ W_Q, target @ W_K, target @ W_V
    weights = (q @ k.mT / math.sqrt(k.size(-1))).softmax(-1)
    return weights @ v, weights


def ca_scaled_by_model_width(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    keep = torch.arange(source.size(1)).view(1, 1, -1) < source_lengths.view(-1, 1, 1)
    weights = (q @ k.mT / math.sqrt(target.size(-1))).masked_fill(~keep, float("-inf")).softmax(-1)
    return weights @ v, weights


def ca_truncates_to_shortest(target, source, source_lengths, W_Q, W_K, W_V):
    n = int(source_lengths.min())
    q, k, v = target @ W_Q, source[:, :n] @ W_K, source[:, :n] @ W_V
    weights = (q @ k.mT / math.sqrt(k.size(-1))).softmax(-1)
    return weights @ v, weights


BUGS = [
    ("scaled_dot_product_attention", sdpa_loops_unscaled, "the scale is missing"),
    ("scaled_dot_product_attention", sdpa_divides_by_len, "sqrt(key_len)"),
    ("scaled_dot_product_attention", sdpa_einsum_wrong_axis, "dim=1, the queries"),
    ("scaled_dot_product_attention", sdpa_where_minus_large, "uniform weights"),
    ("scaled_dot_product_attention", sdpa_fill_true, "mask is inverted"),
    ("scaled_dot_product_attention", sdpa_no_nan_guard, "fully masked row gives NaN"),
    ("scaled_dot_product_attention", sdpa_returns_swapped, "wrong shape"),
    ("scaled_dot_product_attention", sdpa_global_max, GENERIC),
    ("scaled_dot_product_attention", sdpa_scales_after_softmax, GENERIC),
    ("cross_attention", ca_forgets_value_projection, "wrong shape"),
    ("cross_attention", ca_all_from_source, GENERIC),
    ("cross_attention", ca_mask_le, "first padded source position"),
    ("cross_attention", ca_unmasked_loop, "weight to padding"),
    ("cross_attention", ca_queries_from_source, "roles are swapped"),
    ("cross_attention", ca_scaled_by_model_width, GENERIC),
    ("cross_attention", ca_truncates_to_shortest, "wrong shape"),
]
