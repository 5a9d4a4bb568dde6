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
