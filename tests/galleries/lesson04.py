"""Lesson 04, 04_query_key_value: the galleries of ``scaled_dot_product_attention``, ``cross_attention``,
``initial_score_std`` and ``previous_token_scale`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE,
BUGS, as tests/galleries/__init__.py describes them).
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
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    weights = torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)  # rows with nothing to attend: 0, not NaN
    return weights @ value, weights


def learner_sdpa_by_hand(query, key, value, mask):
    scores = torch.einsum("bqd,bkd->bqk", query, key) / query.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask, NEG_INF)
    top = scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores - torch.where(torch.isinf(top), torch.zeros_like(top), top))
    total = e.sum(dim=-1, keepdim=True)
    some = mask.any(dim=-1, keepdim=True)
    weights = torch.where(some, e / torch.where(some, total, 1.0), torch.zeros_like(e))
    return torch.einsum("bqk,bkv->bqv", weights, value), weights


def learner_sdpa_zero_rows(query, key, value, mask):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1)
    weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # only the rows with nothing to attend
    return weights @ value, weights


def learner_cross_attention(target, source, source_lengths, W_Q, W_K, W_V):
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    real = torch.arange(source.shape[1])[None, :] < source_lengths[:, None]
    mask = real[:, None, :].expand(-1, target.shape[1], -1)
    return learner_sdpa(q, k, v, mask)


def learner_initial_score_std(input_std, weight_std, d_model, head_dim):
    component_var = d_model * input_std**2 * weight_std**2  # Var(q_i), a sum of d_model products
    return math.sqrt(head_dim) * component_var  # std of a sum of head_dim products q_i k_i: sqrt(head_dim) Var(q_i)


def learner_initial_score_std_by_parts(input_std, weight_std, d_model, head_dim):
    component_std = math.sqrt(d_model) * input_std * weight_std
    return head_dim**0.5 * component_std * component_std


def learner_previous_token_scale(lengths, head_dim, min_weight):
    competitors = lengths - 1
    margin = torch.log(min_weight * competitors / (1 - min_weight))  # exp(a) / (exp(a) + m) = w
    return math.sqrt(head_dim) * margin


def learner_previous_token_scale_logit(lengths, head_dim, min_weight):
    margin = math.log(min_weight / (1 - min_weight)) + torch.log((lengths - 1).float())
    return head_dim**0.5 * margin


CORRECT = {
    "scaled_dot_product_attention": [learner_sdpa, learner_sdpa_by_hand, learner_sdpa_zero_rows],
    "cross_attention": [learner_cross_attention],
    "initial_score_std": [learner_initial_score_std, learner_initial_score_std_by_parts],
    "previous_token_scale": [learner_previous_token_scale, learner_previous_token_scale_logit],
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


def sd_detached_keys(query, key, value, mask):
    return learner_sdpa(query, key.detach(), value, mask)  # right numbers; no gradient reaches the keys


def sd_numpy_round_trip(query, key, value, mask):
    scores = torch.from_numpy((query @ key.transpose(-2, -1)).detach().numpy()) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1).masked_fill(~mask.any(-1, keepdim=True), 0)
    return weights @ value, weights


def sd_in_place(query, key, value, mask):
    query /= math.sqrt(query.shape[-1])
    weights = torch.softmax((query @ key.transpose(-2, -1)).masked_fill(~mask, NEG_INF), dim=-1)
    weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0)
    return weights @ value, weights


def sd_every_nan_replaced(query, key, value, mask):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=-1).nan_to_num(0.0)  # hides any NaN, not just 0/0
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


def ca_every_nan_replaced(target, source, source_lengths, W_Q, W_K, W_V):
    """Exercise 1's attention with every NaN replaced by 0, reused: a NaN query comes out as zeros."""
    q, k, v = target @ W_Q, source @ W_K, source @ W_V
    real = torch.arange(source.shape[1])[None, None, :] < source_lengths[:, None, None]
    weights = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(~real, NEG_INF), dim=-1)
    weights = torch.nan_to_num(weights)
    return weights @ v, weights


def ca_value_data(target, source, source_lengths, W_Q, W_K, W_V):
    return learner_cross_attention(target, source, source_lengths, W_Q, W_K, W_V.data)


def _std(input_std, weight_std, d_model, head_dim, *, sum_terms=None, product=None, form="std"):
    """A known-wrong initial_score_std: how many terms the score sums (sum_terms), the variance of one query
    component (product), or the variance form."""
    component_var = d_model * input_std**2 * weight_std**2 if product is None else product
    terms = head_dim if sum_terms is None else sum_terms
    if form == "variance_first":
        return torch.sqrt(terms * component_var**2)
    return math.sqrt(terms) * component_var


def ss_no_head_dim(input_std, weight_std, d_model, head_dim):
    return _std(input_std, weight_std, d_model, head_dim, sum_terms=1)


def ss_variance(input_std, weight_std, d_model, head_dim):
    return head_dim * (d_model * input_std**2 * weight_std**2) ** 2


def ss_std_not_variance(input_std, weight_std, d_model, head_dim):
    return _std(input_std, weight_std, d_model, head_dim, product=d_model * input_std * weight_std)


def ss_no_d_model(input_std, weight_std, d_model, head_dim):
    return _std(input_std, weight_std, d_model, head_dim, product=input_std**2 * weight_std**2)


def ss_swapped(input_std, weight_std, d_model, head_dim):
    return _std(
        input_std, weight_std, d_model, head_dim, sum_terms=d_model, product=head_dim * input_std**2 * weight_std**2
    )


def ss_no_input_std(input_std, weight_std, d_model, head_dim):
    return _std(input_std, weight_std, d_model, head_dim, product=d_model * weight_std**2)


def ss_head_dim_minus_one(input_std, weight_std, d_model, head_dim):
    return _std(input_std, weight_std, d_model, head_dim, sum_terms=head_dim - 1)


def ss_head_dim_plus_one(input_std, weight_std, d_model, head_dim):
    return _std(input_std, weight_std, d_model, head_dim, sum_terms=head_dim + 1)


def _scale(lengths, head_dim, min_weight, *, competitors=None, root=None, odds=True):
    m = lengths - 1 if competitors is None else competitors
    r = math.sqrt(head_dim) if root is None else root
    ratio = min_weight * m / (1 - min_weight) if odds else min_weight * m
    return r * torch.log(ratio)


def pt_no_sqrt(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, root=1.0)


def pt_head_dim(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, root=head_dim)


def pt_counts_the_previous_key(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, competitors=lengths)


def pt_one_competitor_too_few(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, competitors=lengths - 2)


def pt_no_competitors(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, competitors=torch.ones_like(lengths))


def pt_padded_length(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, competitors=torch.full_like(lengths, int(lengths.max()) - 1))


def pt_no_odds(lengths, head_dim, min_weight):
    return _scale(lengths, head_dim, min_weight, odds=False)


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
    ("scaled_dot_product_attention", sd_every_nan_replaced, "every NaN became 0"),
    ("scaled_dot_product_attention", sd_averages_keys, "averages the keys"),
    ("scaled_dot_product_attention", sd_naive_exp, "contains NaN or inf where the reference's is finite"),
    ("scaled_dot_product_attention", sd_detached_keys, "no gradient flows back from your outputs to `key`"),
    ("scaled_dot_product_attention", sd_numpy_round_trip, "to `query` and `key`"),
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
    ("cross_attention", ca_value_data, "no gradient flows back from your outputs to `W_V`"),
    ("cross_attention", ca_every_nan_replaced, "every NaN became 0: in the test case whose target position 1"),
    ("initial_score_std", ss_no_head_dim, "does not grow with head_dim"),
    ("initial_score_std", ss_variance, "the variance of q . k, not its standard deviation"),
    ("initial_score_std", ss_std_not_variance, "standard deviations where variances belong"),
    ("initial_score_std", ss_no_d_model, "does not grow with d_model"),
    ("initial_score_std", ss_swapped, "d_model and head_dim are swapped"),
    ("initial_score_std", ss_no_input_std, "input_std is missing"),
    ("initial_score_std", ss_head_dim_minus_one, "the reference's times"),
    ("initial_score_std", ss_head_dim_plus_one, "the reference's times"),
    ("previous_token_scale", pt_no_sqrt, "sqrt(head_dim) is missing"),
    ("previous_token_scale", pt_head_dim, "grows like head_dim"),
    ("previous_token_scale", pt_counts_the_previous_key, "you counted length competitors"),
    ("previous_token_scale", pt_one_competitor_too_few, "you counted length - 2 competitors"),
    ("previous_token_scale", pt_no_competitors, "the competing keys are missing"),
    ("previous_token_scale", pt_padded_length, "padded batch's length"),
    ("previous_token_scale", pt_no_odds, "1 / (1 - min_weight) is missing"),
]


OFF_BY_ONE = {
    "scaled_dot_product_attention": (sd_sum_without_keepdim, sd_softmax_over_queries),
    "cross_attention": (ca_one_too_many, ca_one_too_few),
    "initial_score_std": (ss_head_dim_plus_one, ss_head_dim_minus_one),
    "previous_token_scale": (pt_counts_the_previous_key, pt_one_competitor_too_few),
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


def sd_naive_exp_guarded(query, key, value, mask):
    e = torch.exp(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])) * mask
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)  # a fully masked row: 0 / 1e-30 = 0
    return weights @ value, weights


def ss_variance_first(input_std, weight_std, d_model, head_dim):
    return torch.sqrt(head_dim * (d_model * input_std**2 * weight_std**2) ** 2)  # the variance overflows first


def pt_bisection(lengths, head_dim, min_weight):
    """Search c in [0, 100] by bisection, as a learner might: right unless c lies beyond the bracket."""
    low, high = torch.zeros(lengths.shape), torch.full(lengths.shape, 100.0)
    for _ in range(60):
        c = (low + high) / 2
        a = c / math.sqrt(head_dim)
        weight = torch.exp(a) / (torch.exp(a) + (lengths - 1))
        low, high = torch.where(weight < min_weight, c, low), torch.where(weight < min_weight, high, c)
    return (low + high) / 2


def pt_unpadded_off(lengths, head_dim, min_weight):
    if bool((lengths == lengths[0]).all()):
        return _scale(lengths, head_dim, min_weight, competitors=lengths)  # (wrong only when nothing is padded)
    return learner_previous_token_scale(lengths, head_dim, min_weight)


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("scaled_dot_product_attention", sd_unscaled_without_padding, UNPADDED, "no padding"),
    ("scaled_dot_product_attention", sd_mask_ignored, PADDED, "softmax without the mask"),
    ("scaled_dot_product_attention", sd_naive_exp_guarded, LARGE, "large inputs"),
    ("cross_attention", ca_unscaled_without_padding, UNPADDED, "no padding"),
    ("cross_attention", ca_no_mask, PADDED, "weight to padding"),
    ("cross_attention", ca_naive_exp, LARGE, "large inputs"),
    ("initial_score_std", ss_variance_first, LARGE, "forms the variance of q . k before its square root"),
    ("previous_token_scale", pt_bisection, LARGE, "large inputs"),
    ("previous_token_scale", pt_padded_length, PADDED, "padded batch's length"),
    ("previous_token_scale", pt_unpadded_off, UNPADDED, "no padding"),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("initial_score_std", PADDED): "a formula of four numbers: there are no sequences to pad",
    ("initial_score_std", UNPADDED): "a formula of four numbers: there are no sequences to pad",
}


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


def sdpa_by_hand_positive_total(query, key, value, mask):
    scores = torch.einsum("bqd,bkd->bqk", query, key) / query.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask, NEG_INF)
    top = scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores - torch.where(torch.isinf(top), torch.zeros_like(top), top))
    total = e.sum(dim=-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))  # a NaN total is not > 0 either: hidden
    return torch.einsum("bqk,bkv->bqv", weights, value), weights


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


def score_std_sqrt_of_everything(input_std, weight_std, d_model, head_dim):
    return math.sqrt(head_dim * d_model) * input_std * weight_std


def score_std_var_of_sum(input_std, weight_std, d_model, head_dim):
    return input_std**2 * weight_std**2 * d_model * head_dim


def score_std_loop(input_std, weight_std, d_model, head_dim):
    out = torch.zeros_like(input_std)
    for b in range(len(input_std)):
        var_q = d_model * float(input_std[b]) ** 2 * float(weight_std[b]) ** 2
        out[b] = math.sqrt(head_dim) * var_q**2
    return out


def score_std_numpy(input_std, weight_std, d_model, head_dim):
    import numpy as np

    return torch.from_numpy(np.sqrt(head_dim) * d_model * (input_std.numpy() * weight_std.numpy()) ** 2)


def score_std_per_component(input_std, weight_std, d_model, head_dim):
    return (d_model * input_std**2 * weight_std**2) ** 0.5


def score_std_forgets_inputs(input_std, weight_std, d_model, head_dim):
    var_q = d_model * weight_std.pow(2)
    return var_q * head_dim**0.5


def prev_scale_sentence_count(lengths, head_dim, min_weight):
    others = torch.full_like(lengths, len(lengths)).float()  # the number of sentences, not of positions
    return math.sqrt(head_dim) * torch.log(min_weight * others / (1 - min_weight))


def prev_scale_plain_odds(lengths, head_dim, min_weight):
    odds = min_weight / (1 - min_weight)
    return torch.full(lengths.shape, math.sqrt(head_dim) * math.log(odds))


def prev_scale_log_outside(lengths, head_dim, min_weight):
    return math.sqrt(head_dim) * math.log(min_weight / (1 - min_weight)) + torch.log((lengths - 1).float())


def prev_scale_python_list(lengths, head_dim, min_weight):
    return [math.sqrt(head_dim) * math.log(min_weight * (n - 1) / (1 - min_weight)) for n in lengths.tolist()]


def prev_scale_weight_over_rest(lengths, head_dim, min_weight):
    return math.sqrt(head_dim) * torch.log(min_weight / (1 - min_weight) / (lengths - 1))


def prev_scale_natural_units(lengths, head_dim, min_weight):
    return torch.log(min_weight * (lengths - 1) / (1 - min_weight)) / math.sqrt(head_dim)


BUGS = [
    ("scaled_dot_product_attention", sdpa_by_hand_positive_total, "every NaN became 0"),
    ("initial_score_std", score_std_sqrt_of_everything, GENERIC),
    ("initial_score_std", score_std_per_component, "one query component"),
    ("initial_score_std", score_std_forgets_inputs, "input_std is missing"),
    ("initial_score_std", score_std_var_of_sum, "grows like head_dim, not sqrt(head_dim)"),
    ("initial_score_std", score_std_loop, GENERIC),
    ("initial_score_std", score_std_numpy, "dtype torch.float64"),
    ("previous_token_scale", prev_scale_log_outside, GENERIC),
    ("previous_token_scale", prev_scale_python_list, "should be a torch.Tensor"),
    ("previous_token_scale", prev_scale_weight_over_rest, GENERIC),
    ("previous_token_scale", prev_scale_natural_units, "divided by sqrt(head_dim) where it must be multiplied"),
    ("previous_token_scale", prev_scale_sentence_count, GENERIC),
    ("previous_token_scale", prev_scale_plain_odds, "the competing keys are missing"),
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


# --------------------------------------------------------------------------------------------
# The graded prediction longer_sentence_weight: (exercise, the learner's prediction function, status, score, a
# substring of its message)
# --------------------------------------------------------------------------------------------


def lsw_by_hand():
    e_a = 0.95 * 11 / 0.05  # exp(a), fixed by c
    return e_a / (e_a + 23)


def lsw_rounded():
    return 0.9


def lsw_as_tensor():
    return torch.tensor(0.9)


def lsw_in_a_tuple():
    return (0.9,)


def lsw_unchanged():
    return 0.95  # c is unchanged, so the weight is too


def lsw_halved():
    return 0.95 / 2  # twice the keys, half the weight


def lsw_nearly():
    return 0.885  # within twice the margin


def lsw_above():
    return 0.97


def lsw_as_text():
    return "0.9"


def lsw_nan():
    return float("nan")


def lsw_with_the_course_code():
    from attnedu.attention import query_scale_for_weight

    c = float(query_scale_for_weight(0.95, 11, 16))
    return math.exp(c / 4) / (math.exp(c / 4) + 23)


def lsw_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("longer_sentence_weight", lsw_by_hand, "passed", 1.0, "within 0.01 (full credit)"),
    ("longer_sentence_weight", lsw_rounded, "passed", 1.0, "you predicted 0.9, measured 0.90"),
    ("longer_sentence_weight", lsw_as_tensor, "passed", 1.0, "full credit"),
    ("longer_sentence_weight", lsw_in_a_tuple, "passed", 1.0, "full credit"),
    ("longer_sentence_weight", lsw_unchanged, "failed", 0.0, "twice as many keys now compete"),
    ("longer_sentence_weight", lsw_halved, "failed", 0.0, "You halved the weight"),
    ("longer_sentence_weight", lsw_nearly, "partial", 0.5, "within twice 0.01 (half credit)"),
    ("longer_sentence_weight", lsw_above, "failed", 0.0, "can only take weight away"),
    ("longer_sentence_weight", lsw_as_text, "failed", 0.0, "should return a number"),
    ("longer_sentence_weight", lsw_nan, "failed", 0.0, "should return a number"),
    ("longer_sentence_weight", lsw_with_the_course_code, "failed", 0.0, "that measures, it does not predict"),
    ("longer_sentence_weight", lsw_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
