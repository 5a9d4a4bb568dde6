"""An independent gallery of buggy solutions, written as a learner would: loops, einsum, gather, hand-written
softmax and tanh, different names and orders; none copied from the checks' known-wrong variants.

Each entry is (exercise, function, what its message must contain): a substring of the diagnosis it must get,
or GENERIC where no specific diagnosis is expected (then no known-wrong variant may be named).
tests/test_checks.py asserts that none gets a wrong diagnosis, and that few get only a count of differing
entries (a message that neither names a variant nor says anything localised).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

GENERIC = "generic"

# --------------------------------------------------------------------------------------------
# Lesson 01
# --------------------------------------------------------------------------------------------


def pm_loop_one_short(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        mask[b, : lengths[b] - 1] = True
    return mask


def pm_positions_from_one(lengths, max_len):
    positions = torch.arange(1, max_len + 1)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def pm_greater_than(lengths, max_len):
    return lengths.unsqueeze(1) >= torch.arange(max_len).unsqueeze(0)


def pm_no_broadcast(lengths, max_len):
    return torch.arange(max_len) < lengths


def pm_longest(lengths, max_len):
    longest = max(lengths.tolist())
    return torch.arange(longest).expand(len(lengths), longest) < lengths.view(-1, 1)


def pm_as_int(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).int()


def pm_python_lists(lengths, max_len):
    return torch.tensor([[1 if j < n else 0 for j in range(max_len)] for n in lengths.tolist()])


def pm_transposed_at_the_end(lengths, max_len):
    return (lengths[:, None] > torch.arange(max_len)[None, :]).T


def pm_strictly_after(lengths, max_len):
    return torch.arange(max_len).expand(len(lengths), -1) > lengths[:, None]


def lrs_list_comprehension(states, lengths):
    return torch.stack([states[b, lengths[b]] for b in range(states.shape[0])])


def lrs_gather(states, lengths):
    index = lengths.view(-1, 1, 1).expand(-1, 1, states.size(2))
    return states.gather(1, index).squeeze(1)


def lrs_first_length_for_all(states, lengths):
    return states[:, lengths[0] - 1]


def lrs_minus_one_in_place(states, lengths):
    idx = lengths
    idx -= 1
    return states[torch.arange(len(idx)), idx]


def lrs_time_major_transpose(states, lengths):
    time_major = states.transpose(0, 1)  # (src_len, batch, hidden)
    return time_major[torch.arange(states.shape[0]), lengths - 1]


def lrs_masked_sum(states, lengths):
    mask = torch.arange(states.shape[1])[None, :] < lengths[:, None]
    return (states * mask[:, :, None]).sum(dim=1)


def lrs_squeeze(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1].squeeze()


def lrs_last_column(states, lengths):
    return states[torch.arange(len(lengths)), states.shape[1] - 1, :]


def rp_cat_wrong_order(src, lengths):
    rows = []
    for row, n in zip(src, lengths.tolist()):
        rows.append(torch.cat([row[n:], row[:n].flip(0)]))
    return torch.stack(rows)


def rp_flip_dim_one(src, lengths):
    out = src.clone()
    for b in range(len(lengths)):
        n = lengths[b]
        out[b, :n] = src[b, :n].flip(1)
    return out


def rp_whole_row_loop(src, lengths):
    out = torch.zeros_like(src)
    for b in range(src.shape[0]):
        out[b] = torch.flip(src[b], dims=[0])
    return out


def rp_slice_to_zero(src, lengths):
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, n:0:-1]
    return out


def rp_index_from_length(src, lengths):
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, torch.arange(n, 0, -1)]
    return out


def rp_no_copy(src, lengths):
    out = src
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = torch.flip(src[b, :n], dims=[0])
    return out


def rp_shortest_length(src, lengths):
    n = int(lengths.min())
    out = src.clone()
    out[:, :n] = src[:, :n].flip(1)
    return out


def rp_longest_length(src, lengths):
    n = int(lengths.max())
    out = src.clone()
    out[:, :n] = src[:, :n].flip(1)
    return out


def rp_float_buffer(src, lengths):
    out = torch.zeros(src.shape)
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, :n].flip(0)
    return out


def rp_index_loop_n_minus_two(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        for j in range(n):
            out[b, j] = src[b, n - 2 - j]
    return out


def bs_both_at_last_word(states, lengths):
    half = states.shape[-1] // 2
    rows = torch.arange(states.shape[0])
    return torch.cat([states[rows, lengths - 1, :half], states[rows, lengths - 1, half:]], dim=-1)


def bs_forward_at_end(states, lengths):
    h = states.size(2) // 2
    return torch.cat((states[:, -1, :h], states[:, 0, h:]), dim=1)


def bs_forward_at_length(states, lengths):
    h = states.size(2) // 2
    forward = torch.stack([states[b, lengths[b], :h] for b in range(len(lengths))])
    return torch.cat([forward, states[:, 0, h:]], dim=-1)


def bs_backward_first(states, lengths):
    h = states.shape[2] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1][:, :h]
    backward = states[:, 0][:, h:]
    return torch.cat([backward, forward], dim=-1)


def bs_cat_on_batch(states, lengths):
    h = states.shape[2] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1, :h]
    return torch.cat([forward, states[:, 0, h:]])


def bs_interleaved_view(states, lengths):
    batch, src_len, features = states.shape
    split = states.view(batch, src_len, features // 2, 2)  # as if the directions alternated
    forward = split[torch.arange(batch), lengths - 1, :, 0]
    backward = split[:, 0, :, 1]
    return torch.cat([forward, backward], dim=-1)


def bs_forward_features_twice(states, lengths):
    h = states.shape[-1] // 2
    last = states[torch.arange(states.shape[0]), lengths - 1]
    first = states[:, 0]
    return torch.cat([last[:, :h], first[:, :h]], dim=-1)


def bs_one_before(states, lengths):
    h = states.shape[-1] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 2, :h]
    return torch.cat([forward, states[:, 0, h:]], dim=-1)


def bs_decrement_in_place(states, lengths):
    lengths.sub_(1)
    h = states.shape[-1] // 2
    return torch.cat([states[torch.arange(states.shape[0]), lengths, :h], states[:, 0, h:]], dim=-1)


# --------------------------------------------------------------------------------------------
# Lesson 02
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
    ("padding_mask", pm_loop_one_short, "one True too few"),
    ("padding_mask", pm_positions_from_one, "one True too few"),
    ("padding_mask", pm_greater_than, "one True too many"),
    ("padding_mask", pm_no_broadcast, "raised RuntimeError"),
    ("padding_mask", pm_longest, "only as long as the longest sentence"),
    ("padding_mask", pm_as_int, "dtype torch.int32"),
    ("padding_mask", pm_python_lists, "dtype torch.int64"),
    ("padding_mask", pm_transposed_at_the_end, "transposed"),
    ("padding_mask", pm_strictly_after, GENERIC),
    ("last_real_state", lrs_list_comprehension, "one after the last real word"),
    ("last_real_state", lrs_gather, "one after the last real word"),
    ("last_real_state", lrs_first_length_for_all, GENERIC),
    ("last_real_state", lrs_minus_one_in_place, "modified its input `lengths` in place"),
    ("last_real_state", lrs_time_major_transpose, "axes are used in the wrong order"),
    ("last_real_state", lrs_masked_sum, GENERIC),
    ("last_real_state", lrs_squeeze, "wrong shape"),
    ("last_real_state", lrs_last_column, "`states[:, -1]`"),
    ("reverse_padded", rp_cat_wrong_order, "padding moved to the front"),
    ("reverse_padded", rp_flip_dim_one, "raised IndexError"),
    ("reverse_padded", rp_whole_row_loop, "padding moved to the front"),
    ("reverse_padded", rp_slice_to_zero, "raised ValueError"),
    ("reverse_padded", rp_index_from_length, "token `n - j`"),
    ("reverse_padded", rp_no_copy, "modified its input `src` in place"),
    ("reverse_padded", rp_shortest_length, GENERIC),
    ("reverse_padded", rp_longest_length, GENERIC),
    ("reverse_padded", rp_float_buffer, "expected torch.int64"),
    ("reverse_padded", rp_index_loop_n_minus_two, "token `n - 2 - j`"),
    ("bidirectional_summary", bs_both_at_last_word, "backward half was taken at the last real word"),
    ("bidirectional_summary", bs_forward_at_end, "forward half comes from the last position"),
    ("bidirectional_summary", bs_forward_at_length, "one after the last real word"),
    ("bidirectional_summary", bs_backward_first, "halves are swapped"),
    ("bidirectional_summary", bs_cat_on_batch, "the same sizes in another order"),
    ("bidirectional_summary", bs_interleaved_view, GENERIC),
    ("bidirectional_summary", bs_forward_features_twice, GENERIC),
    ("bidirectional_summary", bs_one_before, "one before the last real word"),
    ("bidirectional_summary", bs_decrement_in_place, "modified its input `lengths` in place"),
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


# --------------------------------------------------------------------------------------------
# Lesson 06 (after lessons 03-05)
# --------------------------------------------------------------------------------------------


def cpm_loop_one_ahead(lengths, max_len):
    mask = torch.zeros(lengths.shape[0], max_len, max_len, dtype=torch.bool)
    for b in range(lengths.shape[0]):
        n = int(lengths[b])
        for i in range(max_len):
            mask[b, i, : min(i + 2, n)] = True
    return mask


def cpm_strict_upper(lengths, max_len):
    allowed = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
    keys = torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)
    return allowed.unsqueeze(0) & keys.unsqueeze(1)


def cpm_outer_padding(lengths, max_len):
    real = torch.arange(max_len).expand(len(lengths), max_len) < lengths.view(-1, 1)
    pairs = real.unsqueeze(2) & real.unsqueeze(1)
    return pairs & torch.tril(torch.ones(max_len, max_len)).bool()


def cpm_float_product(lengths, max_len):
    keys = (torch.arange(max_len)[None, :] < lengths[:, None]).float()
    return torch.tril(torch.ones(max_len, max_len)) * keys[:, None, :]


def cpm_longest_sentence(lengths, max_len):
    n = int(lengths.max())
    tri = torch.ones(n, n).tril().bool()
    return tri[None] & (torch.arange(n)[None, :] < lengths[:, None])[:, None]


def cpm_forgets_query_axis(lengths, max_len):
    keys = torch.arange(max_len)[None, :] < lengths[:, None]
    return torch.ones(max_len, max_len, dtype=torch.bool).tril() & keys


def cpm_length_inclusive(lengths, max_len):
    keys = torch.arange(max_len).view(1, 1, -1) <= lengths.view(-1, 1, 1)
    return torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)).unsqueeze(0) & keys


def cpm_ge(lengths, max_len):
    i = torch.arange(max_len).view(-1, 1)
    j = torch.arange(max_len).view(1, -1)
    return (j >= i).unsqueeze(0) & (j < lengths.view(-1, 1, 1))


def cpm_loop_transposed(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        for i in range(max_len):
            mask[b, : min(i + 1, n), i] = True
    return mask


def ta_where_big_negative(mask, dtype):
    return torch.where(mask, 0.0, -1e9).to(dtype)


def ta_not_times_inf(mask, dtype):
    return mask.logical_not().float() * float("-inf")


def ta_log_float32(mask, dtype):
    return torch.log(mask.float())


def ta_fill_where_true(mask, dtype):
    return torch.zeros_like(mask, dtype=dtype).masked_fill(mask, float("-inf"))


def ta_float32_min(mask, dtype):
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(torch.float32).min)


def ta_ones_and_inf(mask, dtype):
    out = mask.to(dtype)
    out[out == 0] = float("-inf")
    return out


def ta_minus_one_times_inf(mask, dtype):
    return (mask.to(dtype) - 1) * float("inf")


def ta_inverted_bool(mask, dtype):
    return mask.logical_not()


def plm_loop_prefix_inclusive(prefix_lengths, lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        n, p = int(lengths[b]), int(prefix_lengths[b])
        for i in range(max_len):
            for j in range(n):
                mask[b, i, j] = j <= i or j <= p
    return mask


def plm_blocks_without_padding(prefix_lengths, lengths, max_len):
    pos = torch.arange(max_len)
    prefix = pos[None, :] < prefix_lengths[:, None]
    return (prefix[:, :, None] & prefix[:, None, :]) | torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))


def plm_loop_prefix_rows(prefix_lengths, lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        n, p = int(lengths[b]), int(prefix_lengths[b])
        for i in range(max_len):
            if i < p:
                mask[b, i, :n] = True
            else:
                mask[b, i, : min(i + 1, n)] = True
    return mask


def plm_loop_causal_only(prefix_lengths, lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        for i in range(max_len):
            mask[b, i, : min(i + 1, int(lengths[b]))] = True
    return mask


def plm_prefix_minus_one(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    causal = j[None, :] <= j[:, None]
    prefix = j[None, None, :] < (prefix_lengths - 1)[:, None, None]
    return (causal | prefix) & (j < lengths[:, None])[:, None, :]


def plm_padded_rows_empty(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    real = j[None, :] < lengths[:, None]
    visible = (j[None, :] <= j[:, None]) | (j[None, None, :] < prefix_lengths[:, None, None])
    return visible & real[:, None, :] & real[:, :, None]


def plm_float(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    visible = (j[None, :] <= j[:, None]).float() + (j[None, None, :] < prefix_lengths[:, None, None]).float()
    return visible.clamp(max=1) * (j[None, :] < lengths[:, None]).float()[:, None, :]


def plm_or_all(prefix_lengths, lengths, max_len):
    j = torch.arange(max_len)
    causal = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
    prefix = j.view(1, 1, -1) < prefix_lengths.view(-1, 1, 1)
    real = j.view(1, 1, -1) < lengths.view(-1, 1, 1)
    return causal | prefix | real


BUGS += [
    ("causal_padding_mask", cpm_loop_one_ahead, "the next key, j = i + 1"),
    ("causal_padding_mask", cpm_strict_upper, GENERIC),
    ("causal_padding_mask", cpm_outer_padding, "rows of padding queries are all False"),
    ("causal_padding_mask", cpm_float_product, "dtype torch.float32, expected torch.bool"),
    ("causal_padding_mask", cpm_longest_sentence, "not max_len"),
    ("causal_padding_mask", cpm_forgets_query_axis, "raised RuntimeError"),
    ("causal_padding_mask", cpm_length_inclusive, "one key too many"),
    ("causal_padding_mask", cpm_ge, "triangle is the wrong one"),
    ("causal_padding_mask", cpm_loop_transposed, "query and key axes are swapped"),
    ("to_additive", ta_where_big_negative, "hold -1e9 instead of -inf"),
    ("to_additive", ta_not_times_inf, "NaN"),
    ("to_additive", ta_log_float32, "always float32"),
    ("to_additive", ta_fill_where_true, "inverted"),
    ("to_additive", ta_float32_min, GENERIC),
    ("to_additive", ta_ones_and_inf, GENERIC),
    ("to_additive", ta_minus_one_times_inf, "0 * -inf is NaN"),
    ("to_additive", ta_inverted_bool, "still a boolean tensor"),
    ("prefix_lm_mask", plm_loop_prefix_inclusive, "one key too long"),
    ("prefix_lm_mask", plm_blocks_without_padding, "padding is not masked"),
    ("prefix_lm_mask", plm_loop_prefix_rows, "applied to the queries"),
    ("prefix_lm_mask", plm_loop_causal_only, "the prefix is ignored"),
    ("prefix_lm_mask", plm_prefix_minus_one, "one key too short"),
    ("prefix_lm_mask", plm_padded_rows_empty, "rows of padding queries are all False"),
    ("prefix_lm_mask", plm_float, "dtype torch.float32"),
    ("prefix_lm_mask", plm_or_all, "combined with OR"),
]


# --------------------------------------------------------------------------------------------
# Lesson 07 (after lessons 03-05)
# --------------------------------------------------------------------------------------------


def _pe_rows(n, d):
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return pe


def as_tutorial_seq_first(embeddings):
    pe = _pe_rows(64 if embeddings.size(0) < 64 else embeddings.size(0), embeddings.size(2)).unsqueeze(1)
    return embeddings + pe[: embeddings.size(0)]  # written for (seq_len, batch, d_model)


def as_positions_plus_one(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    return embeddings + _pe_rows(n + 1, d)[1:]


def as_cos_first(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pos = torch.arange(n).unsqueeze(1).float()
    div = torch.pow(10000.0, torch.arange(0, d, 2).float() / d)
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.cos(pos / div)
    pe[:, 1::2] = torch.sin(pos / div)
    return embeddings + pe


def as_cat_sin_cos(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    angles = torch.arange(n).float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
    return embeddings + torch.cat([angles.sin(), angles.cos()], dim=-1)


def as_feature_index_exponent(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pe = torch.zeros(n, d)
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (i / d))
    return embeddings + pe


def as_exp_log_no_minus(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    position = torch.arange(n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * (math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return embeddings + pe


def as_plus_equals(embeddings):
    embeddings += _pe_rows(embeddings.shape[1], embeddings.shape[2])
    return embeddings


def as_odd_uses_own_index(embeddings):
    n, d = embeddings.shape[1], embeddings.shape[2]
    pe = torch.zeros(n, d)
    for pos in range(n):
        for j in range(d):
            angle = pos / 10000 ** (j / d)  # each feature with its own index, the cosines one step off
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return embeddings + pe


def ar_adjacent_pairs(x, positions):
    d = x.shape[-1]
    theta = 10000 ** (-torch.arange(0, d, 2).float() / d)
    ang = positions[:, None].float() * theta
    even, odd = x[..., ::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., ::2] = even * ang.cos() - odd * ang.sin()
    out[..., 1::2] = even * ang.sin() + odd * ang.cos()
    return out


def ar_rotate_half_wrong_sign(x, positions):
    d = x.shape[-1]
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d)
    emb = torch.cat([positions.float()[:, None] * inv_freq] * 2, dim=-1)
    rotated = torch.cat([x[..., d // 2 :], -x[..., : d // 2]], dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def ar_arange_positions(x, positions):
    d, n = x.shape[-1], x.shape[-2]
    ang = torch.arange(n).float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def ar_paper_index(x, positions):
    d = x.shape[-1]
    i = torch.arange(d // 2).float()
    theta = 10000 ** (-2 * (i - 1) / d)  # the paper's theta_i, with i from 0
    ang = positions.float()[:, None] * theta
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def ar_repeat_interleave(x, positions):
    d = x.shape[-1]
    freqs = positions.float()[:, None] / 10000 ** (torch.arange(0, d, 2).float() / d)
    emb = freqs.repeat_interleave(2, dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def ar_heads_axis(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)  # (seq, 1, d/2)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def ar_rotates_in_place(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2].clone(), x[..., d // 2 :].clone()
    x[..., : d // 2] = a * ang.cos() - b * ang.sin()
    x[..., d // 2 :] = a * ang.sin() + b * ang.cos()
    return x


def _my_rope(x, positions):
    d = x.shape[-1]
    ang = positions.float()[:, None] * 10000 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * ang.cos() - b * ang.sin(), a * ang.sin() + b * ang.cos()], dim=-1)


def rsb_no_sqrt(q, k, q_positions, k_positions):
    return torch.einsum("bhqd,bhkd->bhqk", _my_rope(q, q_positions), _my_rope(k, k_positions))


def rsb_same_positions(q, k, q_positions, k_positions):
    positions = torch.arange(max(q.shape[-2], k.shape[-2]))
    return _my_rope(q, positions[: q.shape[-2]]) @ _my_rope(k, positions[: k.shape[-2]]).mT / q.shape[-1] ** 0.5


def rsb_query_top_left(q, k, q_positions, k_positions):
    rq = _my_rope(q, torch.arange(q.shape[-2]))
    return rq @ _my_rope(k, k_positions).transpose(2, 3) / math.sqrt(q.size(-1))


def rsb_key_unrotated(q, k, q_positions, k_positions):
    return _my_rope(q, q_positions) @ k.transpose(-1, -2) / math.sqrt(q.size(-1))


def rsb_k_times_q(q, k, q_positions, k_positions):
    return _my_rope(k, k_positions) @ _my_rope(q, q_positions).transpose(-1, -2) / math.sqrt(q.size(-1))


def rsb_relative_wrong_sign(q, k, q_positions, k_positions):
    rows = []
    for t, m in enumerate(q_positions.tolist()):
        rk = _my_rope(k, m - k_positions)
        rows.append(q[:, :, t : t + 1] @ rk.transpose(-1, -2))  # (batch, heads, 1, key)
    return torch.cat(rows, dim=2) / math.sqrt(q.size(-1))


def rsb_weights(q, k, q_positions, k_positions):
    scores = _my_rope(q, q_positions) @ _my_rope(k, k_positions).mT / math.sqrt(q.size(-1))
    return F.softmax(scores, dim=-1)


def rsb_adjacent_pairs(q, k, q_positions, k_positions):
    return ar_adjacent_pairs(q, q_positions) @ ar_adjacent_pairs(k, k_positions).mT / math.sqrt(q.size(-1))


BUGS += [
    ("add_sinusoidal", as_tutorial_seq_first, "taken from the batch axis"),
    ("add_sinusoidal", as_positions_plus_one, "the positions count from 1"),
    ("add_sinusoidal", as_cos_first, "sin and cos are swapped"),
    ("add_sinusoidal", as_cat_sin_cos, "first half of the features"),
    ("add_sinusoidal", as_feature_index_exponent, "the exponent is i / d_model"),
    ("add_sinusoidal", as_exp_log_no_minus, GENERIC),
    ("add_sinusoidal", as_plus_equals, "modified its input `embeddings` in place"),
    ("add_sinusoidal", as_odd_uses_own_index, GENERIC),
    ("apply_rope", ar_adjacent_pairs, "interleaved layout"),
    ("apply_rope", ar_rotate_half_wrong_sign, "rotation goes the wrong way"),
    ("apply_rope", ar_arange_positions, "`positions` was ignored"),
    ("apply_rope", ar_paper_index, "one pair too low"),
    ("apply_rope", ar_repeat_interleave, "laid out for interleaved pairs"),
    ("apply_rope", ar_heads_axis, GENERIC),
    ("apply_rope", ar_rotates_in_place, "modified its input `x` in place"),
    ("rope_scores", rsb_no_sqrt, "not scaled"),
    ("rope_scores", rsb_same_positions, "both `q_positions` and `k_positions` were ignored"),
    ("rope_scores", rsb_query_top_left, "queries were placed at positions 0, 1"),
    ("rope_scores", rsb_key_unrotated, "only the queries were rotated"),
    ("rope_scores", rsb_k_times_q, "transposed"),
    ("rope_scores", rsb_relative_wrong_sign, "score at the opposite offset"),
    ("rope_scores", rsb_weights, "softmax of the scores"),
    ("rope_scores", rsb_adjacent_pairs, "interleaved layout"),
]
