"""Lesson 05, 05_multi_head_attention: the galleries of ``split_heads``, ``merge_heads``, ``multi_head_attention``,
``grouped_query_attention``, ``per_head_weights`` and ``one_offset_accuracy`` (CORRECT, MUTANTS, OFF_BY_ONE,
KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them).
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
    weights = torch.softmax(scores.masked_fill(~mask[:, None], NEG_INF), dim=-1)
    nothing_to_attend = ~mask.any(dim=-1)[:, None, :, None]  # (batch, 1, query_len, 1): zero those rows only
    weights = weights.masked_fill(nothing_to_attend, 0.0)
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
    weights = torch.where(mask[:, None, None].any(-1, keepdim=True), torch.softmax(scores, dim=-1), 0.0)
    heads = (weights @ v).reshape(batch, num_heads, query_len, head_dim)
    return learner_merge_heads(heads) @ W_o, weights.reshape(batch, num_heads, query_len, -1)


def learner_multi_head_attention_sdpa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    """PyTorch's attention for the heads, the weights computed beside it for the second output (issue 30): on scores
    in the hundreds the two softmaxes' float32 rounding differs in the gradient (8.6e-5 against 2e-14 for W_q)."""
    q, k, v = (learner_split_heads(x @ W, num_heads) for x, W in ((query, W_q), (key, W_k), (value, W_v)))
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask[:, None], NEG_INF)
    return learner_merge_heads(heads) @ W_o, torch.softmax(scores, dim=-1)


def learner_grouped_query_attention_sdpa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    """The same for grouped-query attention, PyTorch's attention pairing the heads itself."""
    q = learner_split_heads(query @ W_q, num_heads)
    k, v = learner_split_heads(key @ W_k, num_kv_heads), learner_split_heads(value @ W_v, num_kv_heads)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], enable_gqa=True)
    group = num_heads // num_kv_heads
    scores = q @ k.repeat_interleave(group, dim=1).transpose(-2, -1) / math.sqrt(q.shape[-1])
    return learner_merge_heads(heads) @ W_o, torch.softmax(scores.masked_fill(~mask[:, None], NEG_INF), dim=-1)


def learner_per_head_weights(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    head_dim = d_model // num_heads
    blocks = in_proj_weight.chunk(3)  # q, k, v, each (out, in) as nn.Linear keeps them
    return tuple(torch.stack([b[i * head_dim : (i + 1) * head_dim].T for i in range(num_heads)]) for b in blocks)


def learner_per_head_weights_view(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    w = in_proj_weight.view(3, num_heads, d_model // num_heads, d_model).permute(0, 1, 3, 2)
    return w[0], w[1], w[2]


def learner_one_offset_accuracy(lengths, vocab, offsets, read):
    L = lengths.float()
    beyond = {o: L.clamp(max=abs(o)) for o in offsets}  # positions whose neighbour at o is off the sequence
    edge = sum(beyond.values())  # right every time
    read_inside = L - beyond[read]  # right every time
    others_inside = sum(L - beyond[o] for o in offsets) - read_inside  # right one time in vocab
    return (edge + read_inside + others_inside / vocab) / (L * len(offsets))


def learner_one_offset_accuracy_per_offset(lengths, vocab, offsets, read):
    """Offset by offset: the share of its L answers that is right, then the mean over the offsets."""
    shares = []
    for o in offsets:
        outside = torch.minimum(lengths, torch.tensor(abs(o))).double() / lengths
        shares.append(outside + (1 - outside) * (1.0 if o == read else 1.0 / vocab))
    return torch.stack(shares).mean(dim=0).float()


CORRECT = {
    "split_heads": [learner_split_heads, learner_split_heads_chunks],
    "merge_heads": [learner_merge_heads, learner_merge_heads_cat],
    "multi_head_attention": [learner_multi_head_attention, learner_multi_head_attention_sdpa],
    "grouped_query_attention": [
        learner_grouped_query_attention,
        learner_grouped_query_attention_grouped,
        learner_grouped_query_attention_sdpa,
    ],
    "per_head_weights": [learner_per_head_weights, learner_per_head_weights_view],
    "one_offset_accuracy": [learner_one_offset_accuracy, learner_one_offset_accuracy_per_offset],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
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


def mha_every_nan_replaced(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    """The rows with nothing to attend zeroed by replacing every NaN: a NaN query comes out as zeros."""
    return _mha(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads)


def gqa_every_nan_replaced(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    return _gqa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)


def gqa_sdpa_nan_to_num(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    """PyTorch's attention, its output and the weights beside it passed through nan_to_num."""
    output, weights = learner_grouped_query_attention_sdpa(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads,
                                                           num_kv_heads)  # fmt: skip
    return torch.nan_to_num(output), torch.nan_to_num(weights)


def sh_detached(x, num_heads):
    return learner_split_heads(x.detach(), num_heads)


def mh_through_lists(x):
    return torch.tensor(learner_merge_heads(x).tolist())


def mha_detached_output_projection(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    return learner_multi_head_attention(query, key, value, mask, W_q, W_k, W_v, W_o.detach(), num_heads)


def gqa_key_data(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    return learner_grouped_query_attention(query, key.data, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads)


def _phw(in_proj_weight, num_heads, *, transpose=True, step=None, start=0, stop=0, order=(0, 1, 2)):
    d_model = in_proj_weight.shape[1]
    head_dim = d_model // num_heads
    blocks = in_proj_weight.chunk(3)
    out = []
    for b in (blocks[k] for k in order):
        heads = []
        for i in range(num_heads):
            rows = b[i::num_heads] if step else b[i * head_dim + start : (i + 1) * head_dim + stop]
            heads.append(rows.T if transpose else rows)
        out.append(torch.stack(heads))
    return tuple(out)


def phw_not_transposed(in_proj_weight, num_heads):
    return _phw(in_proj_weight, num_heads, transpose=False)


def phw_interleaved(in_proj_weight, num_heads):
    return _phw(in_proj_weight, num_heads, step=True)


def phw_one_row_too_many(in_proj_weight, num_heads):
    return _phw(in_proj_weight, num_heads, stop=1)


def phw_one_row_too_few(in_proj_weight, num_heads):
    return _phw(in_proj_weight, num_heads, stop=-1)


def phw_k_first(in_proj_weight, num_heads):
    return _phw(in_proj_weight, num_heads, order=(1, 0, 2))


def phw_columns(in_proj_weight, num_heads):
    head_dim = in_proj_weight.shape[1] // num_heads
    return tuple(
        torch.stack([b[:, i * head_dim : (i + 1) * head_dim] for i in range(num_heads)])
        for b in in_proj_weight.chunk(3)
    )


def phw_straight_reshape(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    return tuple(b.reshape(num_heads, d_model, d_model // num_heads) for b in in_proj_weight.chunk(3))


def phw_whole_block(in_proj_weight, num_heads):
    return tuple(b.T.expand(num_heads, -1, -1) for b in in_proj_weight.chunk(3))


def phw_transpose_then_reshape(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    return tuple(b.T.reshape(num_heads, d_model, d_model // num_heads) for b in in_proj_weight.chunk(3))


def _ooa(lengths, vocab, offsets, read, *, beyond=None, p=None, edge_sure=True, longest=False):
    L = torch.full_like(lengths, int(lengths.max())).float() if longest else lengths.float()
    beyond = beyond or (lambda L, o: L.clamp(max=abs(o)))
    p = 1 / vocab if p is None else p
    total = torch.zeros_like(L)
    for o in offsets:
        out = beyond(L, o)
        total = total + (out if edge_sure else out * p) + (L - out) * (1.0 if o == read else p)
    return total / (L * len(offsets))


def ooa_no_edge(lengths, vocab, offsets, read):
    L = lengths.float()
    return (L + (len(offsets) - 1) * L / vocab) / (L * len(offsets))  # "every answer is inside"


def ooa_no_guesses(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, p=0.0)


def ooa_guess_counts_edge_class(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, p=1 / (vocab + 1))


def ooa_edges_guessed(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, edge_sure=False)


def ooa_uncapped(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, beyond=lambda L, o: torch.full_like(L, float(abs(o))))


def ooa_one_per_offset(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, beyond=lambda L, o: L.clamp(max=1))


def ooa_one_too_many(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, beyond=lambda L, o: L.clamp(max=abs(o) + 1))


def ooa_one_too_few(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, beyond=lambda L, o: L.clamp(max=abs(o) - 1))


def ooa_read_unclamped(lengths, vocab, offsets, read):
    L = lengths.float()
    beyond = {o: L.clamp(max=abs(o)) for o in offsets}
    read_inside = L - abs(read)  # the clamp forgotten for the offset read alone
    others_inside = sum(L - beyond[o] for o in offsets) - (L - beyond[read])
    return (sum(beyond.values()) + read_inside + others_inside / vocab) / (L * len(offsets))


def ooa_longest(lengths, vocab, offsets, read):
    return _ooa(lengths, vocab, offsets, read, longest=True)


MUTANTS = [
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
    ("multi_head_attention", mha_every_nan_replaced, "every NaN became 0: in the test case whose query 1"),
    ("grouped_query_attention", gqa_every_nan_replaced, "every NaN became 0: in the test case whose query 1"),
    ("grouped_query_attention", gqa_sdpa_nan_to_num, "every NaN became 0: in the test case whose query 1"),
    ("split_heads", sh_detached, "no gradient flows back from your outputs to `x`"),
    ("merge_heads", mh_through_lists, "no gradient flows back from your outputs to `x`"),
    ("multi_head_attention", mha_detached_output_projection, "no gradient flows back from your outputs to `W_o`"),
    ("grouped_query_attention", gqa_key_data, "no gradient flows back from your outputs to `key`"),
    ("per_head_weights", phw_not_transposed, "your matrices are not transposed"),
    ("per_head_weights", phw_interleaved, "every num_heads-th row"),
    ("per_head_weights", phw_one_row_too_many, "stack expects each tensor to be equal size"),
    ("per_head_weights", phw_one_row_too_few, "has the wrong shape"),
    ("per_head_weights", phw_k_first, "blocks are in the wrong order"),
    ("per_head_weights", phw_columns, "cut from the input features"),
    ("per_head_weights", phw_straight_reshape, "reshaped straight to (num_heads, d_model, head_dim)"),
    ("per_head_weights", phw_whole_block, "every head got the whole (d_model, d_model) projection"),
    ("per_head_weights", phw_transpose_then_reshape, "transposed, then cut by a reshape"),
    ("one_offset_accuracy", ooa_no_edge, "edge answers count as guesses"),
    ("one_offset_accuracy", ooa_no_guesses, "the guesses are missing"),
    ("one_offset_accuracy", ooa_guess_counts_edge_class, "one time in vocab + 1"),
    ("one_offset_accuracy", ooa_edges_guessed, "edge answers were guessed like the others"),
    ("one_offset_accuracy", ooa_uncapped, "reaches past the whole sequence"),
    ("one_offset_accuracy", ooa_one_per_offset, "each offset puts one position beyond the edge"),
    ("one_offset_accuracy", ooa_one_too_many, "|o| + 1 positions"),
    ("one_offset_accuracy", ooa_one_too_few, "|o| - 1 positions"),
    ("one_offset_accuracy", ooa_longest, "the batch's longest length"),
    ("one_offset_accuracy", ooa_read_unclamped, "goes below zero there"),
]


OFF_BY_ONE = {
    "split_heads": (sh_transpose_one_low, sh_transpose_one_high),
    "merge_heads": (mh_transpose_one_low, mh_transpose_one_high),
    "multi_head_attention": (mha_merge_one_low, mha_merge_one_high),
    "grouped_query_attention": (gqa_merge_one_low, gqa_merge_one_high),
    "per_head_weights": (phw_one_row_too_many, phw_one_row_too_few),
    "one_offset_accuracy": (ooa_one_too_many, ooa_one_too_few),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
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


def ooa_shortcut_without_padding(lengths, vocab, offsets, read):
    if bool((lengths == lengths[0]).all()):
        return ooa_edges_guessed(lengths, vocab, offsets, read)  # a second formula, wrong, for this case
    return learner_one_offset_accuracy(lengths, vocab, offsets, read)


def ooa_shared_length(lengths, vocab, offsets, read):
    return learner_one_offset_accuracy(lengths.max().expand_as(lengths), vocab, offsets, read)


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
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
    ("one_offset_accuracy", ooa_shortcut_without_padding, UNPADDED, "no padding"),
    ("one_offset_accuracy", ooa_shared_length, PADDED, "the batch's longest length"),
]


def _package_formula(lengths, vocab, offsets, read):
    from attnedu.tasks import one_offset_accuracy

    return one_offset_accuracy(lengths, vocab, offsets, read)


REFERENCE_USE = [("one_offset_accuracy", _package_formula)]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("per_head_weights", PADDED): "weights, not sequences: there is nothing to pad",
    ("per_head_weights", UNPADDED): "weights, not sequences: there is nothing to pad",
    ("per_head_weights", LARGE): "slicing and transposing move numbers without arithmetic: nothing overflows",
    ("one_offset_accuracy", LARGE): "a few counts and one division each: long sequences and a large vocabulary "
    "overflow nothing and round nothing a mistake could hide behind",
}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def split_reshape_then_permute_wrong(x, num_heads):
    b, n, d = x.size()
    return x.reshape(b, n, num_heads, d // num_heads).permute(0, 2, 3, 1)


def split_einops_style_interleave(x, num_heads):
    b, n, d = x.size()
    return x.reshape(b, n, -1, num_heads).movedim(-1, 1)


def split_chunk_on_positions(x, num_heads):
    return torch.stack(torch.chunk(x, num_heads, dim=1), dim=1)


def split_loop_over_heads(x, num_heads):
    head_dim = x.size(-1) // num_heads
    return torch.stack([x[:, :, h * head_dim : (h + 1) * head_dim] for h in range(num_heads)], dim=1).squeeze()


def split_unflatten_no_move(x, num_heads):
    return x.unflatten(-1, (num_heads, -1))


def split_head_dim_heads(x, num_heads):
    b, n, d = x.size()
    return x.reshape(b, n, num_heads, -1).permute(0, 3, 1, 2)


def split_as_float64(x, num_heads):
    b, n, d = x.size()
    return x.double().reshape(b, n, num_heads, -1).transpose(1, 2)


def merge_flatten_wrong(x):
    return x.flatten(start_dim=2).reshape(x.size(0), x.size(2), -1)


def merge_permute_features_first(x):
    return x.permute(0, 2, 3, 1).flatten(2)


def merge_view_of_transpose(x):
    return x.transpose(1, 2).view(x.size(0), x.size(2), -1)


def merge_stack_positions(x):
    return torch.cat(list(x.unbind(1)), dim=-2)


def merge_loop_add(x):
    out = torch.zeros_like(x[:, 0])
    for h in range(x.size(1)):
        out = out + x[:, h]
    return out


def merge_movedim_wrong(x):
    return x.movedim(1, -1).reshape(x.size(0), x.size(2), -1)


def merge_keeps_heads(x):
    return x.transpose(1, 2)


def mha_einsum_no_out(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = query.shape
    q = torch.einsum("bnd,de->bne", query, W_q).reshape(b, n, num_heads, -1)
    k = torch.einsum("bmd,de->bme", key, W_k).reshape(b, key.shape[1], num_heads, -1)
    v = torch.einsum("bmd,de->bme", value, W_v).reshape(b, key.shape[1], num_heads, -1)
    scores = torch.einsum("bnhe,bmhe->bhnm", q, k) / math.sqrt(q.shape[-1])
    weights = scores.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(-1).nan_to_num(0.0)
    return torch.einsum("bhnm,bmhe->bnhe", weights, v).reshape(b, n, d), weights


def mha_einsum_d_model_scale(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = query.shape
    q = torch.einsum("bnd,de->bne", query, W_q).reshape(b, n, num_heads, -1)
    k = torch.einsum("bmd,de->bme", key, W_k).reshape(b, key.shape[1], num_heads, -1)
    v = torch.einsum("bmd,de->bme", value, W_v).reshape(b, key.shape[1], num_heads, -1)
    scores = torch.einsum("bnhe,bmhe->bhnm", q, k) / math.sqrt(d)
    weights = scores.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(-1).nan_to_num(0.0)
    return torch.einsum("bhnm,bmhe->bnhe", weights, v).reshape(b, n, d) @ W_o, weights


def mha_loop_over_heads_unmasked(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    head_dim = query.shape[-1] // num_heads
    outs, all_weights = [], []
    for h in range(num_heads):
        cols = slice(h * head_dim, (h + 1) * head_dim)
        q, k, v = query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols]
        w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(head_dim), dim=-1)
        outs.append(w @ v)
        all_weights.append(w)
    return torch.cat(outs, dim=-1) @ W_o, torch.stack(all_weights, dim=1)


def mha_loop_mask_broadcast(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = query.shape
    heads = lambda t: t.reshape(b, t.shape[1], num_heads, -1).transpose(1, 2)  # noqa: E731
    q, k, v = heads(query @ W_q), heads(key @ W_k), heads(value @ W_v)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d // num_heads)).masked_fill(mask == 0, float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def mha_merge_by_reshape(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = query.shape
    heads = lambda t: t.reshape(b, t.shape[1], num_heads, -1).transpose(1, 2)  # noqa: E731
    q, k, v = heads(query @ W_q), heads(key @ W_k), heads(value @ W_v)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d // num_heads)).masked_fill(~mask[:, None], float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)
    return (weights @ v).reshape(b, n, d) @ W_o, weights


def mha_torch_mean_weights(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = query.shape
    heads = lambda t: t.reshape(b, t.shape[1], num_heads, -1).transpose(1, 2)  # noqa: E731
    q, k, v = heads(query @ W_q), heads(key @ W_k), heads(value @ W_v)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d // num_heads)).masked_fill(~mask[:, None], float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights.mean(dim=1)


def mha_softmax_before_scale(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = query.shape
    heads = lambda t: t.reshape(b, t.shape[1], num_heads, -1).transpose(1, 2)  # noqa: E731
    q, k, v = heads(query @ W_q), heads(key @ W_k), heads(value @ W_v)
    weights = (q @ k.transpose(-1, -2)).masked_fill(~mask[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    weights = weights / math.sqrt(d // num_heads)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def gqa_tile_with_expand(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    b, n, d = query.shape
    hd = d // num_heads
    q = (query @ W_q).view(b, n, num_heads, hd).transpose(1, 2)
    k = (key @ W_k).view(b, -1, num_kv_heads, hd).transpose(1, 2)
    v = (value @ W_v).view(b, -1, num_kv_heads, hd).transpose(1, 2)
    k = torch.cat([k] * (num_heads // num_kv_heads), dim=1)
    v = torch.cat([v] * (num_heads // num_kv_heads), dim=1)
    weights = (q @ k.mT / math.sqrt(hd)).masked_fill(~mask[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def gqa_first_kv_head_only(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    b, n, d = query.shape
    hd = d // num_heads
    q = (query @ W_q).view(b, n, num_heads, hd).transpose(1, 2)
    k = (key @ W_k).view(b, -1, num_kv_heads, hd).transpose(1, 2)[:, :1]
    v = (value @ W_v).view(b, -1, num_kv_heads, hd).transpose(1, 2)[:, :1]
    weights = (q @ k.mT / math.sqrt(hd)).masked_fill(~mask[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def gqa_kv_head_dim_wrong(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    b, n, d = query.shape
    q = (query @ W_q).view(b, n, num_heads, -1).transpose(1, 2)
    k = (key @ W_k).view(b, -1, num_heads, d // num_heads).transpose(1, 2)
    v = (value @ W_v).view(b, -1, num_heads, d // num_heads).transpose(1, 2)
    weights = (q @ k.mT / math.sqrt(d // num_heads)).masked_fill(~mask[:, None], float("-inf")).softmax(-1)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def gqa_unmasked_loop(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    b, n, d = query.shape
    hd, group = d // num_heads, num_heads // num_kv_heads
    outs, ws = [], []
    for h in range(num_heads):
        g = h // group
        q = query @ W_q[:, h * hd : (h + 1) * hd]
        k, v = key @ W_k[:, g * hd : (g + 1) * hd], value @ W_v[:, g * hd : (g + 1) * hd]
        w = torch.softmax(q @ k.mT / math.sqrt(hd), dim=-1)
        outs.append(w @ v)
        ws.append(w)
    return torch.cat(outs, -1) @ W_o, torch.stack(ws, 1)


def gqa_scale_by_kv_width(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    b, n, d = query.shape
    hd, group = d // num_heads, num_heads // num_kv_heads
    q = (query @ W_q).view(b, n, num_heads, hd).transpose(1, 2)
    k = (key @ W_k).view(b, -1, num_kv_heads, hd).transpose(1, 2).repeat_interleave(group, 1)
    v = (value @ W_v).view(b, -1, num_kv_heads, hd).transpose(1, 2).repeat_interleave(group, 1)
    scores = q @ k.mT / math.sqrt(W_k.shape[1])
    weights = scores.masked_fill(~mask[:, None], float("-inf")).softmax(-1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def gqa_mask_no_head_axis(query, key, value, mask, W_q, W_k, W_v, W_o, num_heads, num_kv_heads):
    b, n, d = query.shape
    hd, group = d // num_heads, num_heads // num_kv_heads
    q = (query @ W_q).view(b, n, num_heads, hd).transpose(1, 2)
    k = (key @ W_k).view(b, -1, num_kv_heads, hd).transpose(1, 2).repeat_interleave(group, 1)
    v = (value @ W_v).view(b, -1, num_kv_heads, hd).transpose(1, 2).repeat_interleave(group, 1)
    weights = torch.where(mask, q @ k.mT / math.sqrt(hd), float("-inf")).softmax(-1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2).reshape(b, n, d) @ W_o, weights


def heads_from_linear_convention(in_proj_weight, num_heads):
    q, k, v = in_proj_weight.chunk(3)
    return tuple(m.T.reshape(num_heads, m.shape[0], -1) for m in (q, k, v))  # transposes, then cuts the rows


def heads_loop_over_features(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    out = []
    for block in in_proj_weight.split(d_model):
        out.append(torch.stack([block[h * (d_model // num_heads) : (h + 1) * (d_model // num_heads), :] for h in
                                range(num_heads)]))  # fmt: skip
    return tuple(out)


def heads_numpy(in_proj_weight, num_heads):
    import numpy as np

    d_model = in_proj_weight.shape[1]
    w = np.asarray(in_proj_weight).reshape(3, num_heads, d_model // num_heads, d_model).transpose(0, 1, 3, 2)
    return tuple(torch.from_numpy(w[i].astype(np.float64)) for i in range(3))


def heads_value_first(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    w = in_proj_weight.view(3, num_heads, d_model // num_heads, d_model).transpose(2, 3)
    return w[2], w[1], w[0]


def heads_shared_slice(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    head_dim = d_model // num_heads
    q, k, v = in_proj_weight.chunk(3)
    return tuple(m[:head_dim].T.expand(num_heads, -1, -1) for m in (q, k, v))  # head 0's rows for every head


def heads_only_queries(in_proj_weight, num_heads):
    d_model = in_proj_weight.shape[1]
    w = in_proj_weight[:d_model].view(num_heads, d_model // num_heads, d_model).transpose(1, 2)
    return w, w, w


def offsets_loop_positions(lengths, vocab, offsets, read):
    """Position by position, as a learner might count: but the guess is right one time in vocab - 1."""
    out = []
    for L in lengths.tolist():
        right = 0.0
        for i in range(L):
            for o in offsets:
                if not 0 <= i + o < L or o == read:
                    right += 1
                else:
                    right += 1 / (vocab - 1) if vocab > 1 else 1.0
        out.append(right / (L * len(offsets)))
    return torch.tensor(out)


def offsets_edge_counted_once(lengths, vocab, offsets, read):
    L = lengths.float()
    edge = sum(L.clamp(max=abs(o)) for o in offsets)
    return (edge + L + (len(offsets) - 1) * L / vocab) / (L * len(offsets))  # the read offset's edges counted twice


def offsets_count_not_share(lengths, vocab, offsets, read):
    L = lengths.float()
    beyond = {o: L.clamp(max=abs(o)) for o in offsets}
    return sum(beyond.values()) + L - beyond[read] + sum(L - beyond[o] for o in offsets if o != read) / vocab


def offsets_integer_division(lengths, vocab, offsets, read):
    beyond = {o: lengths.clamp(max=abs(o)) for o in offsets}
    others = sum(lengths - beyond[o] for o in offsets if o != read) // vocab  # whole answers only
    return (sum(beyond.values()) + lengths - beyond[read] + others) / (lengths * len(offsets))


def offsets_read_guessed(lengths, vocab, offsets, read):
    L = lengths.float()
    edge = sum(L.clamp(max=abs(o)) for o in offsets)
    return (edge + (L * len(offsets) - edge) / vocab) / (L * len(offsets))  # forgot that the read offset is known


def offsets_forgot_abs(lengths, vocab, offsets, read):
    L = lengths.float()
    beyond = {o: L.clamp(min=0, max=o) for o in offsets}  # o, not |o|: the offsets before the token lose their edge
    others = sum(L - beyond[o] for o in offsets if o != read)
    return (sum(beyond.values()) + L - beyond[read] + others / vocab) / (L * len(offsets))


BUGS = [
    ("one_offset_accuracy", offsets_forgot_abs, GENERIC),
    ("one_offset_accuracy", offsets_loop_positions, GENERIC),
    ("one_offset_accuracy", offsets_edge_counted_once, GENERIC),
    ("one_offset_accuracy", offsets_count_not_share, GENERIC),
    ("one_offset_accuracy", offsets_integer_division, GENERIC),
    ("one_offset_accuracy", offsets_read_guessed, GENERIC),
    ("per_head_weights", heads_from_linear_convention, "transposed, then cut by a reshape"),
    ("per_head_weights", heads_loop_over_features, "your matrices are not transposed"),
    ("per_head_weights", heads_numpy, "dtype torch.float64"),
    ("per_head_weights", heads_value_first, "blocks are in the wrong order"),
    ("per_head_weights", heads_shared_slice, GENERIC),
    ("per_head_weights", heads_only_queries, GENERIC),
    ("split_heads", split_reshape_then_permute_wrong, GENERIC),
    ("split_heads", split_einops_style_interleave, "split in the wrong order"),
    ("split_heads", split_chunk_on_positions, GENERIC),
    ("split_heads", split_loop_over_heads, "batch of one"),
    ("split_heads", split_unflatten_no_move, "heads axis is left in place"),
    ("split_heads", split_head_dim_heads, "wrong shape"),
    ("split_heads", split_as_float64, "dtype torch.float64"),
    ("merge_heads", merge_flatten_wrong, "without moving the heads axis back"),
    ("merge_heads", merge_permute_features_first, "interleaved"),
    ("merge_heads", merge_view_of_transpose, "raised RuntimeError"),
    ("merge_heads", merge_stack_positions, "concatenated along the positions"),
    ("merge_heads", merge_loop_add, "adds the heads up"),
    ("merge_heads", merge_movedim_wrong, "interleaved"),
    ("merge_heads", merge_keeps_heads, "wrong shape"),
    ("multi_head_attention", mha_einsum_no_out, "W_o is missing"),
    ("multi_head_attention", mha_einsum_d_model_scale, "divided by sqrt(d_model)"),
    ("multi_head_attention", mha_loop_over_heads_unmasked, "weight to masked keys"),
    ("multi_head_attention", mha_loop_mask_broadcast, "no head axis"),
    ("multi_head_attention", mha_merge_by_reshape, "merged without moving the heads axis back"),
    ("multi_head_attention", mha_torch_mean_weights, "averaged over the heads"),
    ("multi_head_attention", mha_softmax_before_scale, GENERIC),
    ("grouped_query_attention", gqa_tile_with_expand, "tiled"),
    ("grouped_query_attention", gqa_first_kv_head_only, GENERIC),
    ("grouped_query_attention", gqa_kv_head_dim_wrong, "raised RuntimeError"),
    ("grouped_query_attention", gqa_unmasked_loop, "weight to masked keys"),
    ("grouped_query_attention", gqa_scale_by_kv_width, GENERIC),
    ("grouped_query_attention", gqa_mask_no_head_axis, "no head axis"),
]
