"""Lesson 12, 12_attention_across_devices: the galleries of ``ring_step``, ``striped_mask`` and ``ulysses_all_to_all``
(CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py describes them),
REFERENCE_USE: functions that are, or call, the package's own lesson 12 and 08 code (``attnedu.context_parallel``,
``attnedu.flash``), which the exercises forbid, and PREDICTIONS: the graded prediction ``predicted_imbalance``.

The correct versions are written as a learner would: logsumexp and logaddexp, maxima by hand, SDPA with a sigmoid for
the merge, a softmax over the two states; positions compared, a mask per pair in a loop, the whole sequence's mask
indexed; the exchange in one reshape, in loops over ranks, by indexing. None of the three has padding, and nothing in a
mask of positions or a permutation of numbers grows with the inputs (KINDS_NOT_APPLICABLE).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu import context_parallel, flash
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED

from .common import GENERIC, batch_of_one

NEG_INF = float("-inf")

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def _block(query, key, value, diagonal, scale=None):
    s = query @ key.transpose(-2, -1) / (scale or math.sqrt(query.shape[-1]))
    if diagonal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), NEG_INF)
    return s


def learner_ring_step(out, lse, query, key, value, diagonal):
    s = _block(query, key, value, diagonal)
    lse_b = torch.logsumexp(s, dim=-1)
    out_b = torch.softmax(s, dim=-1) @ value
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse - new)[..., None] * out + torch.exp(lse_b - new)[..., None] * out_b, new


def learner_ring_step_maxima(out, lse, query, key, value, diagonal):
    """Lesson 08's (m, l, o) by hand: the block's maximum, then the merge with the larger of the two maxima."""
    s = torch.einsum("bhqd,bhkd->bhqk", query, key) / math.sqrt(query.shape[-1])
    if diagonal:
        s = s.masked_fill(torch.arange(s.shape[-1])[None, :] > torch.arange(s.shape[-2])[:, None], NEG_INF)
    m_b = s.max(dim=-1).values
    p = torch.exp(s - m_b[..., None])
    l_b = p.sum(-1)
    lse_b = m_b + torch.log(l_b)
    m = torch.maximum(lse, lse_b)  # finite: the block has a key for every query
    a, b = torch.exp(lse - m), torch.exp(lse_b - m)
    new_out = (a[..., None] * out + b[..., None] * (p @ value) / l_b[..., None]) / (a + b)[..., None]
    return new_out, m + torch.log(a + b)


def learner_ring_step_sdpa(out, lse, query, key, value, diagonal):
    """SDPA for the block's output (is_causal aligns to the top-left: right for equal chunks), a sigmoid to merge."""
    out_b = F.scaled_dot_product_attention(query, key, value, is_causal=bool(diagonal))
    lse_b = torch.logsumexp(_block(query, key, value, diagonal), dim=-1)
    share = torch.sigmoid(lse_b - lse)[..., None]  # the block's share of the mass: 1 from the empty state
    return out + share * (out_b - out), torch.logaddexp(lse, lse_b)


def learner_ring_step_stacked(out, lse, query, key, value, diagonal):
    """The two states stacked: a softmax over them gives both weights at once."""
    s = _block(query, key, value, diagonal)
    lse_b = torch.logsumexp(s, dim=-1)
    out_b = torch.softmax(s, dim=-1) @ value
    both = torch.stack([lse, lse_b])
    w = torch.softmax(both, dim=0)
    return w[0][..., None] * out + w[1][..., None] * out_b, torch.logsumexp(both, dim=0)


def learner_striped_mask(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = i[None, :] * world_size + query_ranks[:, None]  # (pairs, n): local index i of rank r is i P + r
    k_pos = i[None, :] * world_size + key_ranks[:, None]
    return k_pos[:, None, :] <= q_pos[:, :, None]


def learner_striped_mask_rule(query_ranks, key_ranks, world_size, shard_len):
    """The rule in local indices, one pair at a time: j <= i when s <= r, j < i when s > r."""
    masks = []
    for r, s in zip(query_ranks.tolist(), key_ranks.tolist()):
        ones = torch.ones(shard_len, shard_len, dtype=torch.bool)
        masks.append(ones.tril() if s <= r else ones.tril(-1))
    return torch.stack(masks)


def learner_striped_mask_full(query_ranks, key_ranks, world_size, shard_len):
    """The whole sequence's causal mask, its rows and columns picked by each rank's positions."""
    n = world_size * shard_len
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    out = []
    for r, s in zip(query_ranks, key_ranks):
        rows, cols = torch.arange(int(r), n, world_size), torch.arange(int(s), n, world_size)
        out.append(causal[rows][:, cols])
    return torch.stack(out)


def learner_ulysses_all_to_all(shards):
    P, B, H, n, d = shards.shape
    buffers = shards.reshape(P, B, P, H // P, n, d).transpose(1, 2)  # [source][destination]
    received = buffers.transpose(0, 1)  # [destination][source]
    return received.permute(0, 2, 3, 1, 4, 5).reshape(P, B, H // P, P * n, d)


def learner_ulysses_all_to_all_loops(shards):
    """Each rank packs (chunk over heads), the exchange by hand, each rank joins along the sequence."""
    world_size = shards.shape[0]
    sent = [list(torch.chunk(x, world_size, dim=1)) for x in shards]  # sent[p][q]: rank p's chunk for rank q
    got = [[sent[p][r] for p in range(world_size)] for r in range(world_size)]
    return torch.stack([torch.cat(chunks, dim=2) for chunks in got])


def learner_ulysses_all_to_all_index(shards):
    world_size, batch, heads, n, d = shards.shape
    g = heads // world_size
    out = torch.empty(world_size, batch, g, world_size * n, d, dtype=shards.dtype)
    for r in range(world_size):
        for p in range(world_size):
            out[r, :, :, p * n : (p + 1) * n] = shards[p, :, r * g : (r + 1) * g]
    return out


CORRECT = {
    "ring_step": [learner_ring_step, learner_ring_step_maxima, learner_ring_step_sdpa, learner_ring_step_stacked],
    "striped_mask": [learner_striped_mask, learner_striped_mask_rule, learner_striped_mask_full],
    "ulysses_all_to_all": [learner_ulysses_all_to_all, learner_ulysses_all_to_all_loops,
                           learner_ulysses_all_to_all_index],
}  # fmt: skip


def _ring_step_with_the_packages_merge(out, lse, query, key, value, diagonal):
    block_out, block_lse = flash.tiled_attention_forward(query, key, value, is_causal=bool(diagonal))
    m, _, o = flash.merge_softmax_states(lse, torch.ones_like(lse), out, block_lse, torch.ones_like(block_lse),
                                         block_out)  # fmt: skip
    total = torch.logaddexp(lse, block_lse)
    return o / torch.exp(total - m)[..., None], total


def _striped_with_the_packages_positions(query_ranks, key_ranks, world_size, shard_len):
    positions = context_parallel.shard_positions(world_size * shard_len, 0, 1)  # 0 .. N - 1, one rank
    pos = positions.reshape(shard_len, world_size).T  # rank r's positions, striped
    return torch.stack([pos[s][None, :] <= pos[r][:, None] for r, s in zip(query_ranks, key_ranks)])


REFERENCE_USE = [
    ("ring_step", _ring_step_with_the_packages_merge),
    ("striped_mask", _striped_with_the_packages_positions),
]

# --------------------------------------------------------------------------------------------
# Mutants: each known mistake, written as a learner would
# --------------------------------------------------------------------------------------------


def _pieces(query, key, value, diagonal, mask=None, scale=True):
    s = query @ key.transpose(-2, -1)
    if scale:
        s = s / math.sqrt(query.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    elif diagonal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), NEG_INF)
    return torch.softmax(s, dim=-1) @ value, torch.logsumexp(s, dim=-1)


def rs_average(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    return 0.5 * (out + out_b), torch.logaddexp(lse, lse_b)


def rs_average_after_the_first(out, lse, query, key, value, diagonal):
    """The empty state handled on its own (the block's output kept as it is), the two outputs averaged after it."""
    out_b, lse_b = _pieces(query, key, value, diagonal)
    first = torch.isinf(lse).unsqueeze(-1)
    return torch.where(first, out_b, (out + out_b) / 2), torch.logaddexp(lse, lse_b)


def rs_sum(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    return out + out_b, torch.logaddexp(lse, lse_b)


def rs_max_lse(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    new = torch.max(lse, lse_b)
    return torch.exp(lse - new).unsqueeze(-1) * out + torch.exp(lse_b - new).unsqueeze(-1) * out_b, new


def rs_swapped(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse_b - new).unsqueeze(-1) * out + torch.exp(lse - new).unsqueeze(-1) * out_b, new


def rs_block_unscaled(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse - new).unsqueeze(-1) * out + out_b, new


def rs_old_unscaled(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    new = torch.logaddexp(lse, lse_b)
    return out + torch.exp(lse_b - new).unsqueeze(-1) * out_b, new


def _merged(out, lse, out_b, lse_b):
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse - new).unsqueeze(-1) * out + torch.exp(lse_b - new).unsqueeze(-1) * out_b, new


def rs_no_mask(out, lse, query, key, value, diagonal):
    return _merged(out, lse, *_pieces(query, key, value, False))


def rs_mask_next(out, lse, query, key, value, diagonal):
    n = query.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).tril(1) if diagonal else None
    return _merged(out, lse, *_pieces(query, key, value, diagonal, mask))


def rs_mask_strict(out, lse, query, key, value, diagonal):
    n = query.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).tril(-1) if diagonal else None
    return _merged(out, lse, *_pieces(query, key, value, diagonal, mask))


def rs_mask_strict_by_maxima(out, lse, query, key, value, diagonal):
    """The strict mask, the log-sum-exps written with maxima: the first query's lse is NaN, not -inf."""
    s = _block(query, key, value, False)
    if diagonal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(-1), NEG_INF)
    m_b = s.amax(-1)
    p = torch.exp(s - m_b[..., None])
    lse_b = m_b + torch.log(p.sum(-1))
    m = torch.maximum(lse, lse_b)
    new = m + torch.log(torch.exp(lse - m) + torch.exp(lse_b - m))
    out_b = p @ value / p.sum(-1, keepdim=True)
    return torch.exp(lse - new)[..., None] * out + torch.exp(lse_b - new)[..., None] * out_b, new


def rs_mask_transposed(out, lse, query, key, value, diagonal):
    n = query.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).triu() if diagonal else None
    return _merged(out, lse, *_pieces(query, key, value, diagonal, mask))


def rs_mask_every_pair(out, lse, query, key, value, diagonal):
    return _merged(out, lse, *_pieces(query, key, value, True))


def rs_lse_not_updated(out, lse, query, key, value, diagonal):
    new_out, _ = _merged(out, lse, *_pieces(query, key, value, diagonal))
    return new_out, lse


def rs_lse_of_the_block(out, lse, query, key, value, diagonal):
    out_b, lse_b = _pieces(query, key, value, diagonal)
    return _merged(out, lse, out_b, lse_b)[0], lse_b


def rs_not_scaled(out, lse, query, key, value, diagonal):
    return _merged(out, lse, *_pieces(query, key, value, diagonal, scale=False))


def sm_local(query_ranks, key_ranks, world_size, shard_len):
    return torch.ones(len(query_ranks), shard_len, shard_len, dtype=torch.bool).tril()


def sm_strict(query_ranks, key_ranks, world_size, shard_len):
    return torch.ones(len(query_ranks), shard_len, shard_len, dtype=torch.bool).tril(-1)


def sm_transposed(query_ranks, key_ranks, world_size, shard_len):
    return learner_striped_mask(query_ranks, key_ranks, world_size, shard_len).transpose(1, 2)


def sm_contiguous(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = query_ranks[:, None] * shard_len + i[None, :]
    k_pos = key_ranks[:, None] * shard_len + i[None, :]
    return k_pos[:, None, :] <= q_pos[:, :, None]


def sm_reversed(query_ranks, key_ranks, world_size, shard_len):
    masks = []
    for r, s in zip(query_ranks.tolist(), key_ranks.tolist()):
        ones = torch.ones(shard_len, shard_len, dtype=torch.bool)
        masks.append(ones.tril() if s >= r else ones.tril(-1))
    return torch.stack(masks)


def sm_plus_one(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = i[None, :] * world_size + query_ranks[:, None]
    k_pos = i[None, :] * world_size + key_ranks[:, None]
    return k_pos[:, None, :] <= q_pos[:, :, None] + 1


def sm_minus_one(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = i[None, :] * world_size + query_ranks[:, None]
    k_pos = i[None, :] * world_size + key_ranks[:, None]
    return k_pos[:, None, :] < q_pos[:, :, None]


def ua_interleaved(shards):
    P, B, H, n, d = shards.shape
    buffers = shards.reshape(P, B, H // P, P, n, d).permute(0, 3, 1, 2, 4, 5)  # head h to rank h mod P
    return buffers.transpose(0, 1).permute(0, 2, 3, 1, 4, 5).reshape(P, B, H // P, P * n, d)


def ua_pack_reshaped(shards):
    P, B, H, n, d = shards.shape
    buffers = shards.reshape(P, P, B, H // P, n, d)  # the destination axis taken from the front as it lies
    return buffers.transpose(0, 1).permute(0, 2, 3, 1, 4, 5).reshape(P, B, H // P, P * n, d)


def ua_unpack_reshaped(shards):
    P, B, H, n, d = shards.shape
    received = shards.reshape(P, B, P, H // P, n, d).transpose(1, 2).transpose(0, 1)
    return received.reshape(P, B, H // P, P * n, d)


def ua_striped(shards):
    P, B, H, n, d = shards.shape
    received = shards.reshape(P, B, P, H // P, n, d).transpose(1, 2).transpose(0, 1)
    return received.permute(0, 2, 3, 4, 1, 5).reshape(P, B, H // P, P * n, d)  # token t of each rank in turn


def ua_no_exchange(shards):
    P, B, H, n, d = shards.shape
    mine = shards.reshape(P, B, P, H // P, n, d)  # each rank's own buffer, never sent
    return mine.permute(0, 1, 3, 2, 4, 5).reshape(P, B, H // P, P * n, d)


def ua_group_plus_one(shards):
    P = shards.shape[0]
    out = learner_ulysses_all_to_all_index(shards)
    return out[[(r + 1) % P for r in range(P)]]


def ua_group_minus_one(shards):
    P = shards.shape[0]
    out = learner_ulysses_all_to_all_loops(shards)
    return out[[(r - 1) % P for r in range(P)]]


MUTANTS = [
    ("ring_step", rs_average, "averaged with equal weights"),
    ("ring_step", rs_average_after_the_first, "averaged with equal weights"),
    ("ring_step", rs_sum, "the two outputs were added"),
    ("ring_step", rs_max_lse, "the larger of the two log-sum-exps"),
    ("ring_step", rs_swapped, "the two weights were swapped"),
    ("ring_step", rs_block_unscaled, "the block's output was added as it is"),
    ("ring_step", rs_old_unscaled, "the running output was added as it is"),
    ("ring_step", rs_no_mask, "computed without its causal mask"),
    ("ring_step", rs_mask_next, "also read the key just after it"),
    ("ring_step", rs_mask_strict, "Query i must read key i"),
    ("ring_step", rs_mask_strict_by_maxima, "Query i must read key i"),
    ("ring_step", rs_mask_transposed, "mask is transposed"),
    ("ring_step", rs_mask_every_pair, "applied to a full pair too"),
    ("ring_step", rs_lse_not_updated, "lse was returned unchanged"),
    ("ring_step", rs_lse_of_the_block, "the lse returned is the block's own"),
    ("ring_step", rs_not_scaled, "the scores are not scaled"),
    ("striped_mask", sm_local, "compared as if they were positions"),
    ("striped_mask", sm_strict, "the mask is strict on every pair"),
    ("striped_mask", sm_transposed, "the mask is transposed"),
    ("striped_mask", sm_contiguous, "the contiguous layout's mask"),
    ("striped_mask", sm_reversed, "the ranks' order is reversed"),
    ("striped_mask", sm_plus_one, "also read the key one position after it"),
    ("striped_mask", sm_minus_one, "kept from the key at its own position"),
    ("ulysses_all_to_all", ua_interleaved, "the head groups are interleaved"),
    ("ulysses_all_to_all", ua_pack_reshaped, "the send buffer was made by a reshape alone"),
    ("ulysses_all_to_all", ua_unpack_reshaped, "the received chunks were joined by a reshape alone"),
    ("ulysses_all_to_all", ua_striped, "the tokens are in striped order"),
    ("ulysses_all_to_all", ua_no_exchange, "nothing was exchanged"),
    ("ulysses_all_to_all", ua_group_plus_one, "the head group of rank r + 1"),
    ("ulysses_all_to_all", ua_group_minus_one, "the head group of rank r - 1"),
]

OFF_BY_ONE = {
    "ring_step": (rs_mask_next, rs_mask_strict),
    "striped_mask": (sm_plus_one, sm_minus_one),
    "ulysses_all_to_all": (ua_group_plus_one, ua_group_minus_one),
}

# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def rs_exp_without_maximum(out, lse, query, key, value, diagonal):
    """log(sum(exp(s))) and log(exp(a) + exp(b)) as written: right until the scores pass exp's range."""
    s = _block(query, key, value, diagonal)
    lse_b = torch.log(torch.exp(s).sum(-1))
    out_b = torch.exp(s) @ value / torch.exp(s).sum(-1, keepdim=True)
    new = torch.log(torch.exp(lse) + torch.exp(lse_b))
    a, b = torch.exp(lse) / torch.exp(new), torch.exp(lse_b) / torch.exp(new)
    return a[..., None] * out + b[..., None] * out_b, new


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("ring_step", rs_exp_without_maximum, LARGE, "This test case has large inputs"),
]

KINDS_NOT_APPLICABLE = {
    **{("ring_step", kind): "a chunk of a sequence holds no padding" for kind in (PADDED, UNPADDED)},
    **{("striped_mask", kind): "a mask between two shards of positions: no padding" for kind in (PADDED, UNPADDED)},
    ("striped_mask", LARGE): "whole-number positions compared: nothing grows with the inputs but the mask",
    **{("ulysses_all_to_all", kind): "every rank's shard is full: nothing is padded" for kind in (PADDED, UNPADDED)},
    ("ulysses_all_to_all", LARGE): "a permutation of the numbers: nothing is computed on them that large values break",
}  # fmt: skip

# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the variants
# --------------------------------------------------------------------------------------------


def rsb_softmax_over_queries(out, lse, query, key, value, diagonal):
    s = _block(query, key, value, diagonal)
    out_b = torch.softmax(s, dim=-2) @ value
    lse_b = torch.logsumexp(s, dim=-1)
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse - new)[..., None] * out + torch.exp(lse_b - new)[..., None] * out_b, new


def rsb_weights_by_exp(out, lse, query, key, value, diagonal):
    """The weights as exp(lse) / (exp(lse) + exp(lse_b)): overflows once the log-sum-exps pass 709."""
    s = _block(query, key, value, diagonal)
    lse_b = torch.logsumexp(s, dim=-1)
    a, b = torch.exp(lse), torch.exp(lse_b)
    out_b = torch.softmax(s, dim=-1) @ value
    return (a[..., None] * out + b[..., None] * out_b) / (a + b)[..., None], torch.log(a + b)


def rsb_sdpa_strict(out, lse, query, key, value, diagonal):
    n = query.shape[-2]
    allowed = torch.arange(n)[None, :] < torch.arange(n)[:, None] if diagonal else None
    s = query @ key.mT / math.sqrt(query.shape[-1])
    if allowed is not None:
        s = torch.where(allowed, s, torch.tensor(NEG_INF, dtype=s.dtype))
    out_b = torch.softmax(s, -1) @ value
    lse_b = s.logsumexp(-1)
    share = torch.sigmoid(lse_b - lse).unsqueeze(-1)
    return (1 - share) * out + share * out_b, torch.logaddexp(lse, lse_b)


def rsb_sdpa_always_causal(out, lse, query, key, value, diagonal):
    out_b = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    n = query.shape[-2]
    s = (query @ key.mT / math.sqrt(query.shape[-1])).masked_fill(torch.ones(n, n).triu(1).bool(), NEG_INF)
    lse_b = s.logsumexp(-1)
    share = torch.sigmoid(lse_b - lse).unsqueeze(-1)
    return out + share * (out_b - out), torch.logaddexp(lse, lse_b)


def rsb_mean_of_lses(out, lse, query, key, value, diagonal):
    s = _block(query, key, value, diagonal)
    lse_b = torch.logsumexp(s, dim=-1)
    out_b = torch.softmax(s, dim=-1) @ value
    new = torch.where(torch.isinf(lse), lse_b, (lse + lse_b) / 2)
    return torch.exp(lse - new).nan_to_num()[..., None] * out + torch.exp(lse_b - new)[..., None] * out_b, new


def rsb_forgets_the_state(out, lse, query, key, value, diagonal):
    s = _block(query, key, value, diagonal)
    return torch.softmax(s, dim=-1) @ value, torch.logsumexp(s, dim=-1)


def rsb_scaled_by_chunk_length(out, lse, query, key, value, diagonal):
    s = query @ key.transpose(-2, -1) / math.sqrt(key.shape[-2])
    if diagonal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), NEG_INF)
    lse_b = torch.logsumexp(s, dim=-1)
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse - new)[..., None] * out + torch.exp(lse_b - new)[..., None] * (s.softmax(-1) @ value), new


def rsb_weights_summed_not_normalised(out, lse, query, key, value, diagonal):
    """exp(lse) and exp(lse_b) rescaled by the larger one, but the sum of the two never divided by."""
    s = _block(query, key, value, diagonal)
    lse_b = torch.logsumexp(s, dim=-1)
    m = torch.maximum(lse, lse_b)
    a, b = torch.exp(lse - m), torch.exp(lse_b - m)
    return a[..., None] * out + b[..., None] * (s.softmax(-1) @ value), m + torch.log(a + b)


def rsb_strict_tril_by_hand(out, lse, query, key, value, diagonal):
    """The learner's review's strict mask: tril(-1) kept, the block's lse as its maximum plus a log, logaddexp merge."""
    s = torch.einsum("bhqd,bhkd->bhqk", query, key) / query.shape[-1] ** 0.5
    if diagonal:
        keep = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).tril(-1)
        s = s.masked_fill(~keep, float("-inf"))
    m = s.amax(-1)
    p = torch.exp(s - m[..., None])
    l = p.sum(-1)  # noqa: E741
    lse_b = m + torch.log(l)
    new = torch.logaddexp(lse, lse_b)
    return torch.exp(lse - new)[..., None] * out + torch.exp(lse_b - new)[..., None] * (p @ value / l[..., None]), new


def rsb_average_unless_empty(out, lse, query, key, value, diagonal):
    """Lesson 12's cell 7 mistake, with the first step special-cased by its lse."""
    s = _block(query, key, value, diagonal)
    out_b = s.softmax(-1) @ value
    lse_b = s.logsumexp(-1)
    if torch.isneginf(lse).all():
        return out_b, lse_b
    return (out + out_b) / 2, torch.logaddexp(lse, lse_b)


def rsb_rescale_only_the_block(out, lse, query, key, value, diagonal):
    s = _block(query, key, value, diagonal)
    lse_b = s.logsumexp(-1)
    new = torch.logaddexp(lse, lse_b)
    share = torch.sigmoid(lse_b - lse)  # the block's share: right; the old output kept whole: wrong
    return out + share[..., None] * (s.softmax(-1) @ value), new


def smb_rank_major(query_ranks, key_ranks, world_size, shard_len):
    out = []
    for r, s in zip(query_ranks.tolist(), key_ranks.tolist()):
        q_pos = torch.arange(r * shard_len, (r + 1) * shard_len)
        k_pos = torch.arange(s * shard_len, (s + 1) * shard_len)
        out.append(q_pos[:, None] >= k_pos[None, :])
    return torch.stack(out)


def smb_strict_positions(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    return (i[None, None, :] * world_size + key_ranks[:, None, None]) < (
        i[None, :, None] * world_size + query_ranks[:, None, None]
    )


def smb_less_than_rule(query_ranks, key_ranks, world_size, shard_len):
    """The rule with s < r where it is s <= r: the rank's own shard loses its diagonal."""
    i = torch.arange(shard_len)
    le, lt = i[None, :] <= i[:, None], i[None, :] < i[:, None]
    return torch.stack([le if s < r else lt for r, s in zip(query_ranks, key_ranks)])


def smb_rank_subtracted(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = i[None, :] * world_size - query_ranks[:, None]
    k_pos = i[None, :] * world_size - key_ranks[:, None]
    return k_pos[:, None, :] <= q_pos[:, :, None]


def smb_as_integers(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = i[None, :] * world_size + query_ranks[:, None]
    k_pos = i[None, :] * world_size + key_ranks[:, None]
    return (k_pos[:, None, :] <= q_pos[:, :, None]).long()


def smb_stride_confused(query_ranks, key_ranks, world_size, shard_len):
    i = torch.arange(shard_len)
    q_pos = i[None, :] * shard_len + query_ranks[:, None]  # the stride of shard_len, not P
    k_pos = i[None, :] * shard_len + key_ranks[:, None]
    return k_pos[:, None, :] <= q_pos[:, :, None]


def smb_all_allowed(query_ranks, key_ranks, world_size, shard_len):
    return torch.ones(len(query_ranks), shard_len, shard_len, dtype=torch.bool)


def uab_view_groups(shards):
    P, B, H, n, d = shards.shape
    out = []
    for r in range(P):
        heads = torch.arange(H).view(H // P, P)[:, r]  # head h to rank h mod P
        out.append(torch.cat([shards[p][:, heads] for p in range(P)], dim=2))
    return torch.stack(out)


def uab_joined_along_heads(shards):
    P, B, H, n, d = shards.shape
    g = H // P
    return torch.stack([torch.cat([shards[p][:, r * g : (r + 1) * g] for p in range(P)], dim=1) for r in range(P)])


def uab_sources_reversed(shards):
    P, B, H, n, d = shards.shape
    g = H // P
    return torch.stack([torch.cat([shards[p][:, r * g : (r + 1) * g] for p in reversed(range(P))], dim=2)
                        for r in range(P)])  # fmt: skip


def uab_stacked_not_joined(shards):
    P, B, H, n, d = shards.shape
    g = H // P
    return torch.stack([torch.stack([shards[p][:, r * g : (r + 1) * g] for p in range(P)]) for r in range(P)])


def uab_all_heads(shards):
    P, B, H, n, d = shards.shape
    whole = shards.permute(1, 2, 0, 3, 4).reshape(B, H, P * n, d)
    return whole[None].expand(P, -1, -1, -1, -1)


def uab_batch_and_heads_mixed(shards):
    P, B, H, n, d = shards.shape
    buffers = shards.reshape(P, B, P, H // P, n, d).transpose(1, 2).transpose(0, 1)
    return buffers.permute(0, 3, 2, 1, 4, 5).reshape(P, B, H // P, P * n, d)  # batch and head axes swapped


BUGS = [
    ("ring_step", rsb_softmax_over_queries, GENERIC),
    ("ring_step", rsb_weights_by_exp, GENERIC),
    ("ring_step", rsb_sdpa_strict, "kept from its own key"),
    ("ring_step", rsb_strict_tril_by_hand, "Query i must read key i"),
    ("ring_step", rsb_average_unless_empty, "averaged with equal weights"),
    ("ring_step", rsb_rescale_only_the_block, "the running output was added as it is"),
    ("ring_step", rsb_sdpa_always_causal, "applied to a full pair too"),
    ("ring_step", rsb_mean_of_lses, GENERIC),
    ("ring_step", rsb_forgets_the_state, GENERIC),
    ("ring_step", rsb_scaled_by_chunk_length, GENERIC),
    ("ring_step", rsb_weights_summed_not_normalised, GENERIC),
    ("striped_mask", smb_rank_major, "the contiguous layout's mask"),
    ("striped_mask", smb_strict_positions, "kept from the key at its own position"),
    ("striped_mask", smb_less_than_rule, "kept from the key at its own position"),
    ("striped_mask", smb_rank_subtracted, "the ranks' order is reversed"),
    ("striped_mask", smb_as_integers, GENERIC),
    ("striped_mask", smb_stride_confused, GENERIC),
    ("striped_mask", smb_all_allowed, GENERIC),
    ("ulysses_all_to_all", uab_view_groups, "the head groups are interleaved"),
    ("ulysses_all_to_all", uab_joined_along_heads, GENERIC),
    ("ulysses_all_to_all", uab_sources_reversed, GENERIC),
    ("ulysses_all_to_all", uab_stacked_not_joined, GENERIC),
    ("ulysses_all_to_all", uab_all_heads, GENERIC),
    ("ulysses_all_to_all", uab_batch_and_heads_mixed, GENERIC),
]

# --------------------------------------------------------------------------------------------
# The graded prediction
# --------------------------------------------------------------------------------------------


def pi_right():
    return 484 / 36, 1.0, 288 / 232


def pi_by_hand():
    full, diagonal, strict = 8 * 8, 8 * 9 // 2, 8 * 7 // 2
    return (
        (7 * full + diagonal) / diagonal,
        (15 * 16 + 2 * 10) / (15 * 16 + 2 * 10),
        8 * diagonal / (diagonal + 7 * strict),
    )


def pi_as_tensors():
    return torch.tensor(13.44), torch.tensor(1), torch.tensor(1.24)


def pi_nearly():
    return 13.0, 1.02, 1.2


def pi_roughly():
    return 14.5, 1.0, 1.24  # 8% off on the contiguous part: within twice its margin


def pi_blocks_of_long_shards():
    return 15.0, 1.0, 1.24  # 2P - 1: a diagonal block as half a block, right for long shards only


def pi_diagonal_whole():
    return 8.0, 1.0, 1.24


def pi_striped_balanced():
    return 13.44, 1.0, 1.0


def pi_zigzag_unequal():
    return 13.44, 2.0, 1.24


def pi_contiguous_balanced():
    return 1.0, 1.0, 1.24


def pi_all_wrong():
    return 8.0, 2.0, 1.0


def pi_two_numbers():
    return 13.44, 1.0


def pi_as_text():
    return "13", "1", "1.2"


def pi_with_the_course_code():
    n, p = 64, 8
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    ratios = []
    for layout in ("contiguous", "zigzag"):
        work = [int(causal[context_parallel.shard_positions(n, r, p, layout)].sum()) for r in range(p)]
        ratios.append(max(work) / min(work))
    striped = [int(causal[torch.arange(r, n, p)].sum()) for r in range(p)]
    return ratios[0], ratios[1], max(striped) / min(striped)


def pi_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("predicted_imbalance", pi_right, "passed", 1.0, "measured 13.44"),
    ("predicted_imbalance", pi_by_hand, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_imbalance", pi_as_tensors, "passed", 1.0, "full credit"),
    ("predicted_imbalance", pi_nearly, "passed", 1.0, "(full credit)"),
    ("predicted_imbalance", pi_roughly, "partial", 5 / 6, "within twice"),
    ("predicted_imbalance", pi_blocks_of_long_shards, "partial", 5 / 6, "which it is for long shards"),
    ("predicted_imbalance", pi_diagonal_whole, "partial", 2 / 3, "the diagonal block counted as a whole one"),
    ("predicted_imbalance", pi_striped_balanced, "partial", 2 / 3, "balanced only as the shards grow"),
    ("predicted_imbalance", pi_zigzag_unequal, "partial", 2 / 3, "their scores add up to the same on every rank"),
    ("predicted_imbalance", pi_contiguous_balanced, "partial", 2 / 3, "the ranks do not do equal work"),
    ("predicted_imbalance", pi_all_wrong, "failed", 0.0, "Score: 0 of 1"),
    ("predicted_imbalance", pi_two_numbers, "failed", 0.0, "should return a tuple of 3 values"),
    ("predicted_imbalance", pi_as_text, "failed", 0.0, "should return a tuple of 3 values"),
    ("predicted_imbalance", pi_with_the_course_code, "failed", 0.0, "`attnedu.context_parallel.shard_positions`"),
    ("predicted_imbalance", pi_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
