"""Lesson 13, 13a_sinks_and_gates and 13b_sparse_selection_and_delta_rule: the galleries of ``sink_softmax``,
``nsa_block_selection`` and ``gated_delta_step`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE,
BUGS, as tests/galleries/__init__.py describes them), REFERENCE_USE: functions that are, or call, the package's own
lesson 13 code (``attnedu.sinks_gates``, ``attnedu.sparse_attention``, ``attnedu.delta_rule``), which the exercises
forbid, and PREDICTIONS: the graded prediction ``predicted_recall``.

The correct versions are written as a learner would: the concat-and-drop form of gpt-oss, the denominator with a
maximum that includes the sink, a log-sum-exp merged with the sink by logaddexp, loops over heads; the selection in
loops over queries with a sorted list, vectorised with a stable sort, with the tie broken by a rank; the delta step
in its "erase then write" form with an identity matrix, as a correction, in loops over batch and heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu import delta_rule, sinks_gates, sparse_attention
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, NEG_INF, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def learner_sink_concat(scores, sink, mask):
    """gpt-oss's form: the sink as one more column, the softmax over m + 1, the column dropped."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    column = sink.reshape(1, -1, 1, 1).expand(scores.shape[0], -1, scores.shape[2], 1).to(scores.dtype)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def learner_sink_denominator(scores, sink, mask):
    """The denominator by hand, shifted by a maximum that includes the sink (finite for a fully masked row)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    s = sink[None, :, None, None].to(scores.dtype)
    top = torch.maximum(scores.max(dim=-1, keepdim=True).values, s)
    e = torch.exp(scores - top)
    return e / (e.sum(dim=-1, keepdim=True) + torch.exp(s - top))


def learner_sink_logaddexp(scores, sink, mask):
    """exp(z - log(e^lse + e^sink)): the row's log-sum-exp merged with the sink's logit."""
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, NEG_INF))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    total = torch.logaddexp(lse, sink.view(-1, 1, 1).to(scores.dtype))
    return torch.exp(scores - total)


def learner_sink_per_head(scores, sink, mask):
    """One head at a time, the sink's column appended with a loop."""
    if mask is not None:
        scores = scores.masked_fill(~mask.expand_as(scores), NEG_INF)
    out = []
    for h in range(scores.shape[1]):
        rows = scores[:, h]
        col = torch.ones_like(rows[..., :1]) * sink[h]
        out.append(F.softmax(torch.cat([col, rows], dim=-1), dim=-1)[..., 1:])
    return torch.stack(out, dim=1)


def _blocks(k, block_size):
    n = k.shape[-2]
    nb = -(-n // block_size)
    return n, nb


def learner_nsa_loops(q, k, block_size, top_k):
    """Loops over sequences, heads and queries: a sorted list of (score, block) for each query."""
    B, H, N, _ = q.shape
    n, nb = _blocks(k, block_size)
    means = torch.stack([k[..., b * block_size : (b + 1) * block_size, :].mean(dim=-2) for b in range(nb)], dim=-2)
    gate = q @ means.transpose(-1, -2)
    out = torch.zeros(B, H, N, nb, dtype=torch.bool)
    for b_ in range(B):
        for h in range(H):
            for i in range(N):
                own = i // block_size
                out[b_, h, i, 0] = out[b_, h, i, own] = True
                cands = sorted(range(1, own), key=lambda b: (-float(gate[b_, h, i, b]), b))
                for b in cands[:top_k]:
                    out[b_, h, i, b] = True
    return out


def learner_nsa_sort(q, k, block_size, top_k):
    """The hint's route: means over zero-padded blocks (the short last block's is off, and never competes), a stable
    descending sort, a scatter."""
    B, H, N, d = k.shape
    nb = -(-N // block_size)
    kp = F.pad(k, (0, 0, 0, nb * block_size - N))
    gate = q @ kp.unflatten(-2, (nb, block_size)).mean(-2).mT
    own = torch.arange(N) // block_size
    b = torch.arange(nb)
    cand = (b > 0) & (b[None, :] < own[:, None])
    order = torch.argsort(gate.masked_fill(~cand, float("-inf")), dim=-1, descending=True, stable=True)[..., :top_k]
    sel = torch.zeros(B, H, N, nb, dtype=torch.bool).scatter(-1, order, True) & cand
    return sel | (b == 0) | (b[None, :] == own[:, None])


def learner_nsa_rank(q, k, block_size, top_k):
    """Each candidate's rank counted directly: the blocks that beat it (larger score, or equal and earlier)."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    block_of_key = torch.arange(N) // block_size
    one_hot = F.one_hot(block_of_key, nb).to(k.dtype)  # (N, nb)
    means = (one_hot.T @ k) / one_hot.sum(0)[:, None]
    s = torch.einsum("bhid,bhcd->bhic", q, means)
    own = (torch.arange(N) // block_size)[:, None]
    blocks = torch.arange(nb)[None, :]
    cand = (blocks > 0) & (blocks < own)
    s = torch.where(cand, s, torch.tensor(float("-inf"), dtype=s.dtype))
    beats = (s[..., None, :] > s[..., :, None]) | (
        (s[..., None, :] == s[..., :, None]) & (blocks[..., None, :] < blocks[..., :, None])
    )
    rank = (beats & cand[None, None, :, None, :]).sum(-1)  # how many candidates beat block c
    return (cand & (rank < top_k)) | (blocks == 0) | (blocks == own)


def learner_nsa_sum_of_scores(q, k, block_size, top_k):
    """Blocks scored by the sum of their keys' scores, q . (block_size x the mean key): the same order as the mean key's
    scores, as every block that competes is full (the short last block is never before a query's own block)."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    s = q @ k.mT
    gate = torch.stack([s[..., i * block_size : (i + 1) * block_size].sum(-1) for i in range(nb)], dim=-1)
    return _select(q, k, block_size, top_k, gate=gate)


def learner_gdelta(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    S = alpha[:, None, None] * state
    read = (S @ k[..., None])[..., 0]
    return S + beta[:, None, None] * (v - read)[..., :, None] * k[..., None, :]


def learner_gdelta_erase_form(state, k, v, alpha, beta):
    """alpha S (I - beta k k^T) + beta v k^T, with the identity written out."""
    k = k / k.norm(dim=-1, keepdim=True)
    d_k = k.shape[-1]
    a, b = alpha.view(1, -1, 1, 1), beta.view(1, -1, 1, 1)
    eye = torch.eye(d_k, dtype=k.dtype)
    kk = torch.einsum("bhi,bhj->bhij", k, k)
    return a * state @ (eye - b * kk) + b * torch.einsum("bhi,bhj->bhij", v, k)


def learner_gdelta_loops(state, k, v, alpha, beta):
    out = torch.empty_like(state)
    for i in range(state.shape[0]):
        for h in range(state.shape[1]):
            key = k[i, h] / torch.sqrt((k[i, h] ** 2).sum())
            S = alpha[h] * state[i, h]
            out[i, h] = S + beta[h] * torch.outer(v[i, h] - S @ key, key)
    return out


CORRECT = {
    "sink_softmax": [learner_sink_concat, learner_sink_denominator, learner_sink_logaddexp, learner_sink_per_head],
    "nsa_block_selection": [learner_nsa_sort, learner_nsa_loops, learner_nsa_rank, learner_nsa_sum_of_scores],
    "gated_delta_step": [learner_gdelta, learner_gdelta_erase_form, learner_gdelta_loops],
}


def _sink_with_package(scores, sink, mask):
    return sinks_gates.softmax_with_sink(scores, sink, None if mask is None else mask.expand_as(scores))


def _selection_with_package(q, k, block_size, top_k):
    """MoBA's selection with one more block, then the first block added: right except where block 0 would have won."""
    selected = sparse_attention.moba_attention(q, k, k, block_size, top_k + 1).selected.clone()
    selected[..., 0] = True
    return selected


def _delta_with_package(state, k, v, alpha, beta):
    B, H = k.shape[:2]
    return delta_rule.delta_step(state, F.normalize(k, dim=-1), v, beta.expand(B, H), alpha.expand(B, H))


REFERENCE_USE = [
    ("sink_softmax", _sink_with_package),
    ("nsa_block_selection", _selection_with_package),
    ("gated_delta_step", _delta_with_package),
]

# --------------------------------------------------------------------------------------------
# Mutants: each known mistake, written as a learner would
# --------------------------------------------------------------------------------------------


def _masked(scores, mask, fill=NEG_INF):
    return scores if mask is None else scores.masked_fill(~mask, fill)


def sk_added_to_every_score(scores, sink, mask):
    return torch.softmax(_masked(scores, mask) + sink[None, :, None, None], dim=-1)


def sk_sink_column_kept(scores, sink, mask):
    s = _masked(scores, mask)
    col = sink[None, :, None, None].expand(*s.shape[:-1], 1)
    return torch.softmax(torch.cat([s, col], dim=-1), dim=-1)


def sk_sink_column_first_kept(scores, sink, mask):
    s = _masked(scores, mask)
    col = sink[None, :, None, None].expand(*s.shape[:-1], 1)
    return torch.softmax(torch.cat([col, s], dim=-1), dim=-1)


def sk_dropped_the_last_key(scores, sink, mask):
    """The sink's column put first, then the last column dropped, as gpt-oss drops its (last) sink column."""
    s = _masked(scores, mask)
    col = sink[None, :, None, None].expand(*s.shape[:-1], 1)
    return torch.softmax(torch.cat([col, s], dim=-1), dim=-1)[..., :-1]


def sk_dropped_the_first_key(scores, sink, mask):
    s = _masked(scores, mask)
    col = sink[None, :, None, None].expand(*s.shape[:-1], 1)
    return torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., 1:]


def sk_sink_on_query_axis(scores, sink, mask):
    s = _masked(scores, mask)
    top = torch.maximum(s.amax(-1, keepdim=True), sink[:, None])
    e = torch.exp(s - top)
    return e / (e.sum(-1, keepdim=True) + torch.exp(sink[:, None] - top))


def sk_one_sink_for_all(scores, sink, mask):
    s = _masked(scores, mask)
    col = sink[0].expand_as(s[..., :1])
    return torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]


def sk_no_sink(scores, sink, mask):
    return torch.softmax(_masked(scores, mask), dim=-1)


def sk_masked_with_zero(scores, sink, mask):
    return learner_sink_concat(scores if mask is None else scores * mask, sink, None)


def sk_mask_inverted(scores, sink, mask):
    return learner_sink_concat(scores, sink, None if mask is None else ~mask)


def ns_own_scored(q, k, block_size, top_k):
    """The own block among the candidates, the first block kept."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    gate = _gate(q, k, block_size)
    own = torch.arange(N) // block_size
    b = torch.arange(nb)
    cand = (b > 0) & (b[None, :] <= own[:, None])
    order = torch.argsort(gate.masked_fill(~cand, NEG_INF), dim=-1, descending=True, stable=True)[..., :top_k]
    return (torch.zeros_like(gate, dtype=torch.bool).scatter(-1, order, True) & cand) | (b == 0)


def _gate(q, k, block_size):
    N = k.shape[-2]
    nb = -(-N // block_size)
    means = torch.stack([k[..., i * block_size : (i + 1) * block_size, :].mean(-2) for i in range(nb)], dim=-2)
    return q @ means.mT


def _select(q, k, block_size, top_k, first_kept=True, own_kept=True, causal=True, others=None, gate=None):
    N = q.shape[-2]
    nb = -(-N // block_size)
    gate = _gate(q, k, block_size) if gate is None else gate
    own = torch.arange(N) // block_size
    b = torch.arange(nb)
    cand = (b[None, :] < own[:, None]) if causal else torch.ones(N, nb, dtype=torch.bool)
    if first_kept:
        cand = cand & (b > 0)
    if own_kept:
        cand = cand & (b[None, :] != own[:, None])
    n = top_k if others is None else others
    order = torch.argsort(gate.masked_fill(~cand, NEG_INF), dim=-1, descending=True, stable=True)[..., : max(n, 0)]
    sel = torch.zeros_like(gate, dtype=torch.bool).scatter(-1, order, True) & cand
    if first_kept:
        sel = sel | (b == 0)
    if own_kept:
        sel = sel | (b[None, :] == own[:, None])
    return sel


def ns_first_scored(q, k, block_size, top_k):
    return _select(q, k, block_size, top_k, first_kept=False)


def ns_future_leak(q, k, block_size, top_k):
    return _select(q, k, block_size, top_k, causal=False)


def ns_one_too_many(q, k, block_size, top_k):
    return _select(q, k, block_size, top_k, others=top_k + 1)


def ns_own_counted_twice(q, k, block_size, top_k):
    """top_k - 1 others: the own block counted in the top_k as MoBA counts it."""
    return _select(q, k, block_size, top_k, others=top_k - 1)


def ns_ties_later(q, k, block_size, top_k):
    N = q.shape[-2]
    nb = -(-N // block_size)
    gate = _gate(q, k, block_size)
    own = torch.arange(N) // block_size
    b = torch.arange(nb)
    cand = (b > 0) & (b[None, :] < own[:, None])
    # a stable sort of the blocks in reverse: among equal scores the later block comes first
    g = gate.masked_fill(~cand, NEG_INF).flip(-1)
    order = (nb - 1) - torch.argsort(g, dim=-1, descending=True, stable=True)[..., :top_k]
    sel = torch.zeros_like(gate, dtype=torch.bool).scatter(-1, order, True) & cand
    return sel | (b == 0) | (b[None, :] == own[:, None])


def ns_best_key(q, k, block_size, top_k):
    N = q.shape[-2]
    nb = -(-N // block_size)
    s = q @ k.mT
    gate = torch.stack([s[..., i * block_size : (i + 1) * block_size].amax(-1) for i in range(nb)], dim=-1)
    return _select(q, k, block_size, top_k, gate=gate)


def gd_sign(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    S = alpha[:, None, None] * state
    return S + beta[:, None, None] * ((S @ k[..., None])[..., 0] - v)[..., :, None] * k[..., None, :]


def gd_beta_outside(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    S = alpha[:, None, None] * state
    return beta[:, None, None] * (S + (v - (S @ k[..., None])[..., 0])[..., :, None] * k[..., None, :])


def gd_alpha_after(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    new = state + beta[:, None, None] * (v - (state @ k[..., None])[..., 0])[..., :, None] * k[..., None, :]
    return alpha[:, None, None] * new


def gd_read_before_decay(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    read = torch.einsum("bhvk,bhk->bhv", state, k)
    return alpha[:, None, None] * state + beta[:, None, None] * torch.einsum("bhv,bhk->bhvk", v - read, k)


def gd_not_unit(state, k, v, alpha, beta):
    S = alpha[:, None, None] * state
    read = (S @ k[..., None])[..., 0]
    return S + beta[:, None, None] * (v - read)[..., :, None] * k[..., None, :]


def gd_erase_left(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    eye = torch.eye(k.shape[-1])
    kk = k[..., :, None] * k[..., None, :]
    a, b = alpha[:, None, None], beta[:, None, None]
    return a * (eye - b * kk) @ state + b * v[..., :, None] * k[..., None, :]


def gd_write_k_v(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    a, b = alpha[:, None, None], beta[:, None, None]
    S = a * state
    return S - b * (S @ k[..., None]) * k[..., None, :] + b * k[..., :, None] * v[..., None, :]


def gd_rates_on_batch(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    S = alpha.view(-1, 1, 1, 1) * state
    return S + beta.view(-1, 1, 1, 1) * (v - (S @ k[..., None])[..., 0])[..., :, None] * k[..., None, :]


def gd_no_decay(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    return state + beta[:, None, None] * (v - (state @ k[..., None])[..., 0])[..., :, None] * k[..., None, :]


def gd_twice(state, k, v, alpha, beta):
    return learner_gdelta(learner_gdelta(state, k, v, alpha, beta), k, v, alpha, beta)


def gd_unchanged(state, k, v, alpha, beta):
    return state.clone()


MUTANTS = [
    ("sink_softmax", sk_added_to_every_score, "sums to 1, as a plain softmax's"),
    ("sink_softmax", sk_sink_column_kept, "one column too many"),
    ("sink_softmax", sk_sink_column_first_kept, "one column too many"),
    ("sink_softmax", sk_dropped_the_last_key, "one column to the right"),
    ("sink_softmax", sk_dropped_the_first_key, "one column to the left"),
    ("sink_softmax", sk_sink_on_query_axis, "broadcast against the wrong axis"),
    ("sink_softmax", sk_one_sink_for_all, "the same sink logit"),
    ("sink_softmax", sk_no_sink, "sums to 1, as a plain softmax's"),
    ("sink_softmax", sk_masked_with_zero, "set to 0 instead of -inf"),
    ("sink_softmax", sk_mask_inverted, "the mask is inverted"),
    ("nsa_block_selection", ns_own_scored, "own block is not always selected"),
    ("nsa_block_selection", ns_first_scored, "the first block is not always selected"),
    ("nsa_block_selection", ns_future_leak, "leaks future blocks"),
    ("nsa_block_selection", ns_one_too_many, "one block too many"),
    ("nsa_block_selection", ns_own_counted_twice, "one block too few"),
    ("nsa_block_selection", ns_ties_later, "ties were broken towards the later block"),
    ("nsa_block_selection", ns_best_key, "scored by their best key"),
    ("gated_delta_step", gd_sign, "the wrong sign"),
    ("gated_delta_step", gd_beta_outside, "beta scales the whole new state"),
    ("gated_delta_step", gd_alpha_after, "alpha was applied after the write"),
    ("gated_delta_step", gd_read_before_decay, "computed from the state before its decay"),
    ("gated_delta_step", gd_not_unit, "the key was not normalised"),
    ("gated_delta_step", gd_erase_left, "the erase is on the wrong side"),
    ("gated_delta_step", gd_write_k_v, "the write is transposed, k v^T"),
    ("gated_delta_step", gd_rates_on_batch, "broadcast along the batch axis"),
    ("gated_delta_step", gd_no_decay, "there is no decay"),
    ("gated_delta_step", gd_twice, "the write was applied twice"),
    ("gated_delta_step", gd_unchanged, "the state came back unchanged"),
]

OFF_BY_ONE = {
    "sink_softmax": (sk_dropped_the_last_key, sk_dropped_the_first_key),
    "nsa_block_selection": (ns_one_too_many, ns_own_counted_twice),
    "gated_delta_step": (gd_twice, gd_unchanged),
}

# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def sk_exp_without_maximum(scores, sink, mask):
    """exp(z) / (exp(s) + sum exp(z)) as written: right until a score or a sink passes exp's range."""
    e = torch.exp(_masked(scores, mask))
    return e / (e.sum(-1, keepdim=True) + torch.exp(sink)[None, :, None, None])


def sk_no_sink_without_a_mask(scores, sink, mask):
    """The sink handled in the masked branch only."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    return learner_sink_concat(scores, sink, mask)


def ns_whole_blocks_only(q, k, block_size, top_k):
    """N // block_size blocks: the short last block has no column (and its queries no own block)."""
    N = q.shape[-2]
    nb = N // block_size
    gate = _gate(q[..., : nb * block_size, :], k[..., : nb * block_size, :], block_size)
    sel = _select(q[..., : nb * block_size, :], k[..., : nb * block_size, :], block_size, top_k, gate=gate)
    return F.pad(sel, (0, 0, 0, N - nb * block_size))


def ns_one_block_more(q, k, block_size, top_k):
    """N // block_size + 1 blocks: an empty column after the last block when block_size divides N."""
    N = q.shape[-2]
    sel = learner_nsa_sort(q, k, block_size, top_k)
    return F.pad(sel, (0, 1)) if N % block_size == 0 else sel


def ns_gate_in_half(q, k, block_size, top_k):
    """The gate in float16, to save memory: past 65504 every score is inf, and all tie."""
    return _select(q, k, block_size, top_k, gate=_gate(q.half(), k.half(), block_size))


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("sink_softmax", sk_exp_without_maximum, LARGE, "This test case has large inputs"),
    ("sink_softmax", sk_masked_with_zero, PADDED, "set to 0 instead of -inf"),
    ("sink_softmax", sk_no_sink_without_a_mask, UNPADDED, "no padding"),
    ("nsa_block_selection", ns_whole_blocks_only, PADDED, "shape"),
    ("nsa_block_selection", ns_one_block_more, UNPADDED, "shape"),
    ("nsa_block_selection", ns_gate_in_half, LARGE, "large inputs"),
]

KINDS_NOT_APPLICABLE = {
    **{("gated_delta_step", kind): "one step of one state: no sequence, nothing padded" for kind in (PADDED, UNPADDED)},
    ("gated_delta_step", LARGE): "products and sums of the inputs, no exponential: nothing that large values alone "
    "break (a normalised key is a unit vector at any size)",
}

# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the variants
# --------------------------------------------------------------------------------------------


def skb_sigmoid_of_sink(scores, sink, mask):
    """The sink's share taken as sigmoid(sink) alone, whatever the row's scores."""
    s = _masked(scores, mask)
    return torch.softmax(s, -1) * (1 - torch.sigmoid(sink)).view(1, -1, 1, 1)


def skb_max_without_sink(scores, sink, mask):
    """The shift is the row's maximum only: NaN on a fully masked row."""
    s = _masked(scores, mask)
    m = s.amax(-1, keepdim=True)
    e = (s - m).exp()
    return e / (e.sum(-1, keepdim=True) + (sink.view(1, -1, 1, 1) - m).exp())


def skb_max_clamped(scores, sink, mask):
    """The row's maximum alone, clamped so that a fully masked row has no -inf: right values, and 0 * inf on the way
    back where the sink is far above every score."""
    s = _masked(scores, mask)
    m = s.amax(-1, keepdim=True).clamp(min=-1e4)
    e = torch.exp(s - m)
    return e / (e.sum(-1, keepdim=True) + torch.exp(sink.view(1, -1, 1, 1) - m))


def skb_nan_to_zero(scores, sink, mask):
    """The shift by the scores' maximum, the NaN of a fully masked row replaced by 0 afterwards."""
    return torch.nan_to_num(skb_max_without_sink(scores, sink, mask), nan=0.0)


def skb_shift_by_scores_unless_empty(scores, sink, mask):
    """The row's largest score as the shift, the sink's logit where the row has no score: right on a fully masked row,
    0 * inf on the way back where the sink is far above every score."""
    s = _masked(scores, mask)
    top = s.amax(-1, keepdim=True)
    logit = sink.view(1, -1, 1, 1).expand_as(top)
    top = torch.where(torch.isinf(top), logit, top)
    e = torch.exp(s - top)
    return e / (e.sum(-1, keepdim=True) + torch.exp(logit - top))


def skb_magnitude_by_sqrt(scores, sink, mask):
    """Right weights passed through sqrt(w ** 2), to be sure they are not negative: a NaN gradient where a weight is
    0 (the masked keys), in test cases with neither a fully masked row nor a sink beyond exp's range."""
    return torch.sqrt(learner_sink_concat(scores, sink, mask) ** 2)


def skb_softmax_over_queries(scores, sink, mask):
    s = _masked(scores, mask)
    col = sink.view(1, -1, 1, 1).expand(s.shape[0], -1, 1, s.shape[-1])
    return torch.softmax(torch.cat([s, col], dim=-2), dim=-2)[..., :-1, :]


def skb_sink_negated(scores, sink, mask):
    return learner_sink_concat(scores, -sink, mask)


def skb_masked_with_large_negative_after(scores, sink, mask):
    """The mask applied after the softmax, weights of masked keys set to 0 (no renormalisation)."""
    w = learner_sink_concat(scores, sink, None)
    return w if mask is None else w * mask


def skb_exp_sink_not(scores, sink, mask):
    """The sink's logit added to the denominator as it is, not its exponential."""
    s = _masked(scores, mask)
    m = torch.maximum(s.amax(-1, keepdim=True), sink.view(1, -1, 1, 1))
    e = torch.exp(s - m)
    return e / (e.sum(-1, keepdim=True) + sink.view(1, -1, 1, 1))


def skb_detached_sink(scores, sink, mask):
    """Right values, but the sink's logit detached: it would never be trained."""
    return learner_sink_concat(scores, sink.detach(), mask)


def nsb_causal_after_topk(q, k, block_size, top_k):
    """top-k over every block, the future ones removed afterwards: fewer than top_k kept where the future won."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    gate = _gate(q, k, block_size)
    own = (torch.arange(N) // block_size)[:, None]
    b = torch.arange(nb)[None, :]
    idx = gate.masked_fill((b == 0) | (b == own), NEG_INF).topk(min(top_k, nb), dim=-1).indices
    sel = torch.zeros_like(gate, dtype=torch.bool).scatter(-1, idx, True)
    return (sel & (b < own)) | (b == 0) | (b == own)


def nsb_topk_for_ties(q, k, block_size, top_k):
    """Right but for ties: torch.topk over the candidates, which promises no order among equal values."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    gate = _gate(q, k, block_size)
    own = (torch.arange(N) // block_size)[:, None]
    b = torch.arange(nb)[None, :]
    cand = (b > 0) & (b < own)
    idx = gate.masked_fill(~cand, NEG_INF).topk(min(top_k, nb), dim=-1).indices
    sel = torch.zeros_like(gate, dtype=torch.bool).scatter(-1, idx, True) & cand
    return sel | (b == 0) | (b == own)


def nsb_own_block_off(q, k, block_size, top_k):
    """The own block as (i + 1) // block_size."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    gate = _gate(q, k, block_size)
    own = torch.clamp((torch.arange(N) + 1) // block_size, max=nb - 1)[:, None]
    b = torch.arange(nb)[None, :]
    cand = (b > 0) & (b < own)
    order = torch.argsort(gate.masked_fill(~cand, NEG_INF), dim=-1, descending=True, stable=True)[..., :top_k]
    return (torch.zeros_like(gate, dtype=torch.bool).scatter(-1, order, True) & cand) | (b == 0) | (b == own)


def nsb_as_int(q, k, block_size, top_k):
    return learner_nsa_sort(q, k, block_size, top_k).long()


def nsb_indices(q, k, block_size, top_k):
    """The chosen block indices returned, not a mask."""
    gate = _gate(q, k, block_size)
    return gate.topk(min(top_k + 2, gate.shape[-1]), dim=-1).indices


def nsb_most_recent_blocks(q, k, block_size, top_k):
    """The top_k blocks just before the own one, no score: a sliding window of blocks."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    own = (torch.arange(N) // block_size)[:, None]
    b = torch.arange(nb)[None, :]
    keep = (b == 0) | (b == own) | ((b < own) & (b >= own - top_k))
    return keep.expand(*q.shape[:2], N, nb).clone()


def nsb_mean_attention_weight(q, k, block_size, top_k):
    """Blocks scored by the mean softmax weight of their keys (a softmax over every key, future ones included)."""
    N = q.shape[-2]
    nb = -(-N // block_size)
    w = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
    gate = torch.stack([w[..., i * block_size : (i + 1) * block_size].mean(-1) for i in range(nb)], dim=-1)
    return _select(q, k, block_size, top_k, gate=gate)


def nsb_no_first_block_for_block_zero(q, k, block_size, top_k):
    """Block 0 added for every query but the ones in block 0 (their own block, kept by the other rule)... and for
    block 1's queries the first block forgotten."""
    sel = learner_nsa_sort(q, k, block_size, top_k).clone()
    N = q.shape[-2]
    in_block_one = (torch.arange(N) // block_size) == 1
    sel[..., in_block_one, 0] = False
    return sel


def gdb_outer_transposed_read(state, k, v, alpha, beta):
    """The read as k @ S (the state used as (d_k, d_v)): runs on square states only."""
    k = F.normalize(k, dim=-1)
    S = alpha[:, None, None] * state
    read = (k[..., None, :] @ S)[..., 0, :]
    return S + beta[:, None, None] * (v - read)[..., :, None] * k[..., None, :]


def gdb_beta_twice(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    S = alpha[:, None, None] * state
    b = beta[:, None, None]
    return S - b * (S @ k[..., None]) * k[..., None, :] + b * b * v[..., :, None] * k[..., None, :]


def gdb_l1_normalised(state, k, v, alpha, beta):
    k = k / k.abs().sum(-1, keepdim=True)
    S = alpha[:, None, None] * state
    return S + beta[:, None, None] * (v - (S @ k[..., None])[..., 0])[..., :, None] * k[..., None, :]


def gdb_alpha_on_write_too(state, k, v, alpha, beta):
    k = F.normalize(k, dim=-1)
    a, b = alpha[:, None, None], beta[:, None, None]
    S = a * state
    return S + a * b * (v - (S @ k[..., None])[..., 0])[..., :, None] * k[..., None, :]


def gdb_additive(state, k, v, alpha, beta):
    """No erase: the additive memory with decay."""
    k = F.normalize(k, dim=-1)
    return alpha[:, None, None] * state + beta[:, None, None] * v[..., :, None] * k[..., None, :]


def gdb_sigmoid_rates(state, k, v, alpha, beta):
    """alpha and beta passed through a sigmoid, as if they were logits."""
    return learner_gdelta(state, k, v, torch.sigmoid(alpha), torch.sigmoid(beta))


def gdb_normalised_values(state, k, v, alpha, beta):
    return learner_gdelta(state, k, F.normalize(v, dim=-1), alpha, beta)


def gdb_in_place(state, k, v, alpha, beta):
    """The state decayed in place: the caller's tensor changes."""
    state.mul_(alpha[:, None, None])
    k = F.normalize(k, dim=-1)
    return state + beta[:, None, None] * (v - (state @ k[..., None])[..., 0])[..., :, None] * k[..., None, :]


BUGS = [
    ("sink_softmax", skb_sigmoid_of_sink, GENERIC),
    ("sink_softmax", skb_max_without_sink, "whose sink (400) exceeds every score of its rows"),
    ("sink_softmax", skb_nan_to_zero, "only in the gradients of head 0, where query 1 of sequence 0 has every key"),
    ("sink_softmax", skb_max_clamped, "only in the gradients of head 0, where query 1 of sequence 0 has every key"),
    ("sink_softmax", skb_magnitude_by_sqrt, "neither a NaN made at a masked row nor an exp that overflows"),
    ("sink_softmax", skb_shift_by_scores_unless_empty, "only in the gradients of head 2, whose sink (400) exceeds"),
    ("sink_softmax", skb_softmax_over_queries, GENERIC),
    ("sink_softmax", skb_sink_negated, GENERIC),
    ("sink_softmax", skb_masked_with_large_negative_after, GENERIC),
    ("sink_softmax", skb_exp_sink_not, GENERIC),
    ("sink_softmax", skb_detached_sink, GENERIC),
    ("nsa_block_selection", nsb_causal_after_topk, GENERIC),
    ("nsa_block_selection", nsb_topk_for_ties, "torch.topk does not promise"),
    ("nsa_block_selection", nsb_own_block_off, GENERIC),
    ("nsa_block_selection", nsb_as_int, GENERIC),
    ("nsa_block_selection", nsb_indices, GENERIC),
    ("nsa_block_selection", nsb_no_first_block_for_block_zero, GENERIC),
    ("nsa_block_selection", nsb_most_recent_blocks, GENERIC),
    ("nsa_block_selection", nsb_mean_attention_weight, GENERIC),
    ("gated_delta_step", gdb_outer_transposed_read, GENERIC),
    ("gated_delta_step", gdb_beta_twice, GENERIC),
    ("gated_delta_step", gdb_l1_normalised, GENERIC),
    ("gated_delta_step", gdb_alpha_on_write_too, GENERIC),
    ("gated_delta_step", gdb_additive, GENERIC),
    ("gated_delta_step", gdb_sigmoid_rates, GENERIC),
    ("gated_delta_step", gdb_normalised_values, GENERIC),
    ("gated_delta_step", gdb_in_place, GENERIC),
]

# --------------------------------------------------------------------------------------------
# The graded prediction
# --------------------------------------------------------------------------------------------


def pr_right():
    return 0.822, 0.465, 0.438, 0.770


def pr_reasoned():
    return 0.8, 0.45, 0.45, 0.75  # the solution's route: above the lesson at 2 d_k; the lesson's; a coin toss; n = d_k


def pr_as_tensors():
    return torch.tensor(0.82), torch.tensor(0.46), torch.tensor(0.44), torch.tensor(0.77)


def pr_delta_always_better():
    return 0.45, 0.85, 0.44, 0.77  # the delta rule above the additive memory past d_k: half credit on neither


def pr_roughly():
    return 0.65, 0.3, 0.6, 0.6  # each 0.15 to 0.17 off, the order right: half credit each


def pr_additive_overwrites():
    return 0.82, 0.46, 0.9, 0.77  # the additive memory as if it overwrote: above the delta rule


def pr_order_only():
    return 1.0, 0.0, 0.0, 1.0  # the order and nothing else: half for the two recalls above 0.7, none for the others


def pr_lesson_scaled():
    return 0.6, 0.4, 0.4, 0.7  # the lesson's d_k = 16 table read at the same ratio: the additive recall 0.22 low


def pr_order_too_far():
    return 0.5, 0.46, 0.44, 0.77  # the additive memory in the right order, but 0.32 low: no credit for the order
    # (0.75 in all, not 0.875)


def pr_all_wrong():
    return 0.1, 0.95, 1.0, 0.1


def pr_three_numbers():
    return 0.8, 0.45, 0.45


def pr_as_text():
    return "0.8", "0.45", "0.45", "0.75"


def pr_with_the_course_code():
    from attnedu.delta_rule import recall_curve

    a = recall_curve([64], 32, memories=("additive", "delta"), trials=2)
    b = recall_curve([32], 32, memories=("additive", "delta"), rewrites=32, trials=2)
    return a["additive"][0], a["delta"][0], b["additive"][0], b["delta"][0]


def pr_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("predicted_recall", pr_right, "passed", 1.0, "measured"),
    ("predicted_recall", pr_reasoned, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_recall", pr_as_tensors, "passed", 1.0, "full credit"),
    ("predicted_recall", pr_delta_always_better, "partial", 0.5, "delta rule is not the better memory"),
    ("predicted_recall", pr_roughly, "partial", 0.5, "within twice"),
    ("predicted_recall", pr_additive_overwrites, "partial", 0.75, "cannot overwrite"),
    ("predicted_recall", pr_order_only, "partial", 0.25, "but in the right order (half credit)"),
    ("predicted_recall", pr_lesson_scaled, "partial", 0.875, "Score: 0.875 of 1"),
    ("predicted_recall", pr_order_too_far, "partial", 0.75, "spreads over more value dimensions"),
    ("predicted_recall", pr_all_wrong, "failed", 0.0, "Score: 0 of 1"),
    ("predicted_recall", pr_three_numbers, "failed", 0.0, "should return a tuple of 4 values"),
    ("predicted_recall", pr_as_text, "failed", 0.0, "should return a tuple of 4 values"),
    ("predicted_recall", pr_with_the_course_code, "failed", 0.0, "`attnedu.delta_rule.recall_curve`"),
    ("predicted_recall", pr_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
