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


# --------------------------------------------------------------------------------------------
# Lesson 08
# --------------------------------------------------------------------------------------------


def os_rows_loop_no_rescale(scores, block_size):
    out = torch.empty_like(scores)
    for r, row in enumerate(scores):
        biggest, total = -math.inf, 0.0
        for start in range(0, len(row), block_size):
            chunk = row[start : start + block_size]
            biggest = max(biggest, chunk.max().item())
            total += torch.exp(chunk - biggest).sum().item()
        out[r] = torch.exp(row - biggest) / total
    return out


def os_blocks_softmaxed(scores, block_size):
    pieces = []
    for start in range(0, scores.shape[1], block_size):
        chunk = scores[:, start : start + block_size]
        e = torch.exp(chunk - chunk.max(dim=1, keepdim=True).values)
        pieces.append(e / e.sum(dim=1, keepdim=True))
    return torch.cat(pieces, dim=1)


def os_no_max(scores, block_size):
    total = sum(torch.exp(scores[:, s : s + block_size]).sum(dim=1) for s in range(0, scores.shape[1], block_size))
    return torch.exp(scores) / total[:, None]


def os_no_final_division(scores, block_size):
    m = torch.full((scores.shape[0], 1), -math.inf)
    for start in range(0, scores.shape[1], block_size):
        m = torch.maximum(m, scores[:, start : start + block_size].amax(dim=1, keepdim=True))
    return torch.exp(scores - m)


def os_double(scores, block_size):
    s = scores.double()
    m, l = torch.full((s.shape[0], 1), -math.inf, dtype=torch.float64), torch.zeros(s.shape[0], 1, dtype=torch.float64)
    for start in range(0, s.shape[1], block_size):
        chunk = s[:, start : start + block_size]
        new = torch.maximum(m, chunk.amax(dim=1, keepdim=True))
        l = l * torch.exp(m - new) + torch.exp(chunk - new).sum(dim=1, keepdim=True)
        m = new
    return torch.exp(s - m) / l


def os_while_whole_blocks(scores, block_size):
    m, l, start = torch.full((scores.shape[0], 1), -math.inf), torch.zeros(scores.shape[0], 1), 0
    while start + block_size <= scores.shape[1]:
        chunk = scores[:, start : start + block_size]
        new = torch.maximum(m, chunk.amax(dim=1, keepdim=True))
        l = l * torch.exp(m - new) + torch.exp(chunk - new).sum(dim=1, keepdim=True)
        m, start = new, start + block_size
    return torch.exp(scores - m) / l


def os_rescales_new_terms(scores, block_size):
    m, l = torch.full((scores.shape[0], 1), -math.inf), torch.zeros(scores.shape[0], 1)
    for start in range(0, scores.shape[1], block_size):
        chunk = scores[:, start : start + block_size]
        new = torch.maximum(m, chunk.amax(dim=1, keepdim=True))
        l = l + torch.exp(m - new) * torch.exp(chunk - new).sum(dim=1, keepdim=True)
        m = new
    return torch.exp(scores - m) / l


def os_one_maximum_for_all_rows(scores, block_size):
    m, l = torch.tensor(-math.inf), torch.zeros(scores.shape[0], 1)
    for start in range(0, scores.shape[1], block_size):
        chunk = scores[:, start : start + block_size]
        new = torch.maximum(m, chunk.max())
        l = l * torch.exp(m - new) + torch.exp(chunk - new).sum(dim=1, keepdim=True)
        m = new
    return torch.exp(scores - m) / l


def bu_loop_acc_kept(m, l, acc, q_block, k_block, v_block, valid):
    m_out, l_out, acc_out = m.clone(), l.clone(), acc.clone()
    for i in range(q_block.shape[0]):
        row = torch.where(valid, k_block @ q_block[i] / math.sqrt(q_block.shape[1]), torch.tensor(-math.inf))
        top = max(m[i].item(), row.max().item())
        w = torch.exp(row - top)
        l_out[i] = l[i] * math.exp(m[i].item() - top) + w.sum()
        acc_out[i] = acc[i] + w @ v_block  # the old output keeps the old maximum
        m_out[i] = top
    return m_out, l_out, acc_out


def bu_einsum_unscaled(m, l, acc, q_block, k_block, v_block, valid):
    s = torch.einsum("qd,kd->qk", q_block, k_block).masked_fill(~valid, -math.inf)
    new = torch.maximum(m, s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, shrink * l + w.sum(dim=1), shrink[:, None] * acc + torch.einsum("qk,kv->qv", w, v_block)


def bu_mask_with_zero(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])) * valid  # invalid keys: 0, not -inf
    new = torch.maximum(m, s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, shrink * l + w.sum(dim=1), shrink[:, None] * acc + w @ v_block


def bu_sqrt_of_value_dim(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T / math.sqrt(v_block.shape[1])).masked_fill(~valid, -math.inf)
    new = torch.maximum(m, s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, shrink * l + w.sum(dim=1), shrink[:, None] * acc + w @ v_block


def bu_shrinks_the_new_part(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(~valid, -math.inf)
    new = torch.maximum(m, s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, l + shrink * w.sum(dim=1), acc + shrink[:, None] * (w @ v_block)


def bu_returns_two(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(~valid, -math.inf)
    new = torch.maximum(m, s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, shrink[:, None] * acc + w @ v_block


def bu_in_place(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(~valid, -math.inf)
    new = torch.maximum(m, s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    acc.mul_(shrink[:, None]).add_(w @ v_block)
    return new, shrink * l + w.sum(dim=1), acc


def bu_double(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block.double() @ k_block.double().T / math.sqrt(q_block.shape[1])).masked_fill(~valid, -math.inf)
    new = torch.maximum(m.double(), s.amax(dim=1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m.double() - new)
    return new, shrink * l.double() + w.sum(dim=1), shrink[:, None] * acc.double() + w @ v_block.double()


def ct_block_numbers_loop(n, block_q, block_k):
    rows, columns = -(-n // block_q), -(-n // block_k)
    compute = torch.tensor([[j <= i for j in range(columns)] for i in range(rows)])
    return compute, torch.tensor([[j == i for j in range(columns)] for i in range(rows)])


def ct_end_not_last(n, block_q, block_k):
    rows, columns = -(-n // block_q), -(-n // block_k)
    compute = torch.zeros(rows, columns, dtype=torch.bool)
    masked = torch.zeros(rows, columns, dtype=torch.bool)
    for i in range(rows):
        for j in range(columns):
            compute[i, j] = j * block_k <= min((i + 1) * block_q, n)  # the end, one past the last query
            masked[i, j] = bool(compute[i, j]) and min((j + 1) * block_k, n) - 1 > i * block_q
    return compute, masked


def ct_strictly_before(n, block_q, block_k):
    starts_q, starts_k = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    last_q = (starts_q + block_q).clamp(max=n) - 1
    last_k = (starts_k + block_k).clamp(max=n) - 1
    compute = starts_k.unsqueeze(0) < last_q.unsqueeze(1)
    return compute, compute & (last_k.unsqueeze(0) > starts_q.unsqueeze(1))


def ct_mask_by_block_number(n, block_q, block_k):
    starts_q, starts_k = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    compute = starts_k.unsqueeze(0) <= ((starts_q + block_q).clamp(max=n) - 1).unsqueeze(1)
    i, j = torch.meshgrid(torch.arange(len(starts_q)), torch.arange(len(starts_k)), indexing="ij")
    return compute, i == j


def ct_as_int(n, block_q, block_k):
    starts_q, starts_k = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    last_q = (starts_q + block_q).clamp(max=n) - 1
    last_k = (starts_k + block_k).clamp(max=n) - 1
    compute = (starts_k[None, :] <= last_q[:, None]).long()
    return compute, compute * (last_k[None, :] > starts_q[:, None]).long()


def ct_key_blocks_first(n, block_q, block_k):
    starts_q, starts_k = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    last_q = (starts_q + block_q).clamp(max=n) - 1
    last_k = (starts_k + block_k).clamp(max=n) - 1
    compute = starts_k[:, None] <= last_q[None, :]
    return compute, compute & (last_k[:, None] > starts_q[None, :])


def ct_mask_without_compute(n, block_q, block_k):
    starts_q, starts_k = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    last_q = (starts_q + block_q).clamp(max=n) - 1
    last_k = (starts_k + block_k).clamp(max=n) - 1
    return starts_k[None, :] <= last_q[:, None], last_k[None, :] > starts_q[:, None]


def ct_loop_without_min(n, block_q, block_k):
    rows, columns = math.ceil(n / block_q), math.ceil(n / block_k)
    compute = torch.zeros(rows, columns, dtype=torch.bool)
    masked = torch.zeros(rows, columns, dtype=torch.bool)
    for i in range(rows):
        for j in range(columns):
            compute[i, j] = j * block_k <= (i + 1) * block_q - 1
            masked[i, j] = bool(compute[i, j]) and (j + 1) * block_k - 1 > i * block_q
    return compute, masked


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
    ("online_softmax", os_rows_loop_no_rescale, "running sum was not rescaled"),
    ("online_softmax", os_blocks_softmaxed, "each block was normalised on its own"),
    ("online_softmax", os_no_max, "large inputs"),
    ("online_softmax", os_no_final_division, GENERIC),
    ("online_softmax", os_double, "dtype torch.float64"),
    ("online_softmax", os_while_whole_blocks, "partial block was never read"),
    ("online_softmax", os_rescales_new_terms, GENERIC),
    ("online_softmax", os_one_maximum_for_all_rows, GENERIC),
    ("block_update", bu_loop_acc_kept, "running output acc was not rescaled"),
    ("block_update", bu_einsum_unscaled, "not divided by sqrt(head_dim)"),
    ("block_update", bu_mask_with_zero, "keys marked invalid"),
    ("block_update", bu_sqrt_of_value_dim, GENERIC),
    ("block_update", bu_shrinks_the_new_part, GENERIC),
    ("block_update", bu_returns_two, "should return 3 values"),
    ("block_update", bu_in_place, "modified its input `acc` in place"),
    ("block_update", bu_double, "dtype torch.float64"),
    ("causal_tiles", ct_block_numbers_loop, "comparing block numbers"),
    ("causal_tiles", ct_end_not_last, "one tile too many"),
    ("causal_tiles", ct_strictly_before, "one tile too few"),
    ("causal_tiles", ct_mask_by_block_number, GENERIC),
    ("causal_tiles", ct_as_int, "dtype torch.int64"),
    ("causal_tiles", ct_key_blocks_first, GENERIC),
    ("causal_tiles", ct_mask_without_compute, GENERIC),
    ("causal_tiles", ct_loop_without_min, "not clamped to n"),
]


# ============================================================================================
# Lessons 03-05 (Luong; query, key, value; multi-head): a block of its own, appended to BUGS
# ============================================================================================

# --- Lesson 03 -------------------------------------------------------------------------------


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


def ah_relu(context, state, W_c):
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


BUGS_03 = [
    ("general_score", gs_loop_without_W, "W_a is missing"),
    ("general_score", gs_einsum_W_transposed, "W_a^T in place of W_a"),
    ("general_score", gs_matmul_broadcast, "broadcasts over the batch"),
    ("general_score", gs_keys_first, "transposed"),
    ("general_score", gs_normalised, GENERIC),
    ("general_score", gs_root_scaled, "divided by sqrt(enc_dim)"),
    ("general_score", gs_double, "dtype torch.float64"),
    ("attentional_hidden", ah_linear_no_tanh, "tanh is missing"),
    ("attentional_hidden", ah_state_then_context, "wrong order"),
    ("attentional_hidden", ah_relu, "ReLU"),
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
    ("general_decoder_step", gds_state_and_context_swapped, "[h_t; c_t], the wrong order"),
    ("general_decoder_step", gds_predicts_from_h, "logits come from the state h_t"),
    ("general_decoder_step", gds_returns_attentional_as_state, GENERIC),
    ("general_decoder_step", gds_dot_score, GENERIC),
    ("general_decoder_step", gds_in_place_state, "modified its input `state` in place"),
]

BUGS += BUGS_03


# --- Lesson 04 -------------------------------------------------------------------------------


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


BUGS_04 = [
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

BUGS += BUGS_04


# --- Lesson 05 -------------------------------------------------------------------------------


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


BUGS_05 = [
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

BUGS += BUGS_05
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
