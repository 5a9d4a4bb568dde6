"""Lesson 08, 08_flash_attention: the galleries of ``online_softmax``, ``block_update`` and ``causal_tiles``
(CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py
describes them).
"""

from __future__ import annotations

import math

import torch

from attnedu import checks
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.flash import online_softmax

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_online_softmax(scores, block_size):
    m = torch.full((scores.shape[0],), float("-inf"))
    l = torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        block = scores[:, start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=1).values)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(scores - m[:, None]) / l[:, None]


def learner_online_softmax_per_row(scores, block_size):
    out = torch.empty_like(scores)
    for r in range(scores.shape[0]):
        m, l = float("-inf"), 0.0
        for start in range(0, scores.shape[1], block_size):
            block = scores[r, start : start + block_size]
            m_new = max(m, block.max().item())
            l = l * math.exp(m - m_new) + torch.exp(block - m_new).sum().item()
            m = m_new
        out[r] = torch.exp(scores[r] - m) / l
    return out


def learner_block_update(m, l, acc, q_block, k_block, v_block, valid):
    s = q_block @ k_block.T / q_block.shape[1] ** 0.5
    s[:, ~valid] = float("-inf")
    m_new = torch.max(m, s.max(dim=1).values)
    p = torch.exp(s - m_new[:, None])
    alpha = torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def learner_causal_tiles(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def learner_causal_tiles_loop(n, block_q, block_k):
    rows, columns = math.ceil(n / block_q), math.ceil(n / block_k)
    compute = torch.zeros(rows, columns, dtype=torch.bool)
    masked = torch.zeros(rows, columns, dtype=torch.bool)
    for i in range(rows):
        for j in range(columns):
            first_query, last_query = i * block_q, min((i + 1) * block_q, n) - 1
            first_key, last_key = j * block_k, min((j + 1) * block_k, n) - 1
            compute[i, j] = first_key <= last_query  # some key is not after some query
            masked[i, j] = compute[i, j] and last_key > first_query  # and some key is after some query
    return compute, masked


CORRECT = {
    "online_softmax": [learner_online_softmax, learner_online_softmax_per_row, online_softmax],
    "block_update": [learner_block_update, checks.EXERCISES["block_update"].reference],
    "causal_tiles": [learner_causal_tiles, learner_causal_tiles_loop],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


# online_softmax
def online_no_rescale(scores, block_size):
    m, l = torch.full((scores.shape[0],), float("-inf")), torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        block = scores[:, start : start + block_size]
        m = torch.maximum(m, block.max(dim=1).values)
        l = l + torch.exp(block - m[:, None]).sum(dim=1)  # the old terms keep the old maximum
    return torch.exp(scores - m[:, None]) / l[:, None]


def online_rescale_inverted(scores, block_size):
    m, l = torch.full((scores.shape[0],), float("-inf")), torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        block = scores[:, start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=1).values)
        l = l * torch.exp(m_new - m).nan_to_num(0.0) + torch.exp(block - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(scores - m[:, None]) / l[:, None]


def online_per_block(scores, block_size):
    blocks = [scores[:, s : s + block_size] for s in range(0, scores.shape[1], block_size)]
    return torch.cat([torch.exp(b - b.max(dim=1, keepdim=True).values) / torch.exp(
        b - b.max(dim=1, keepdim=True).values).sum(dim=1, keepdim=True) for b in blocks], dim=1)  # fmt: skip


def _online_blocks(scores, block_size, width, stop):
    m, l = torch.full((scores.shape[0],), float("-inf")), torch.zeros(scores.shape[0])
    for start in range(0, stop, block_size):
        block = scores[:, start : start + width]
        if block.shape[1] == 0:
            continue
        m_new = torch.maximum(m, block.max(dim=1).values)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(scores - m[:, None]) / l[:, None]


def online_block_one_short(scores, block_size):
    return _online_blocks(scores, block_size, block_size - 1, scores.shape[1])


def online_block_one_long(scores, block_size):
    return _online_blocks(scores, block_size, block_size + 1, scores.shape[1])


def online_skips_partial_block(scores, block_size):
    return _online_blocks(scores, block_size, block_size, scores.shape[1] - block_size + 1)


def online_naive_exp(scores, block_size):
    l = torch.zeros(scores.shape[0])
    for start in range(0, scores.shape[1], block_size):
        l = l + torch.exp(scores[:, start : start + block_size]).sum(dim=1)  # no maximum: overflows
    return torch.exp(scores) / l[:, None]


def online_in_place(scores, block_size):
    scores -= scores.max(dim=1, keepdim=True).values  # "to be safe"
    return learner_online_softmax(scores, block_size)


def os_shortcut_without_padding(scores, block_size):
    if scores.shape[1] % block_size == 0:  # whole blocks: softmax each block (but the row is one distribution)
        return torch.softmax(scores.view(scores.shape[0], -1, block_size), dim=-1).flatten(1)
    return learner_online_softmax(scores, block_size)


# block_update
def _scores(q_block, k_block, valid):
    return (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(~valid, float("-inf"))


def update_acc_not_rescaled(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p = torch.exp(s - m_new[:, None])
    return m_new, torch.exp(m - m_new) * l + p.sum(dim=1), acc + p @ v_block


def update_nothing_rescaled(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p = torch.exp(s - m_new[:, None])
    return m_new, l + p.sum(dim=1), acc + p @ v_block


def update_without_sqrt(m, l, acc, q_block, k_block, v_block, valid):
    s = (q_block @ k_block.T).masked_fill(~valid, float("-inf"))
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_ignores_valid(m, l, acc, q_block, k_block, v_block, valid):
    s = q_block @ k_block.T / math.sqrt(q_block.shape[1])
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_p_one_step_late(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_m_one_step_early(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_softmax_tile(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p, alpha = torch.exp(s - m_new[:, None]), torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + torch.softmax(s, dim=1) @ v_block


def update_exp_then_divide(m, l, acc, q_block, k_block, v_block, valid):
    s = _scores(q_block, k_block, valid)
    m_new = torch.maximum(m, s.amax(dim=1))
    p = torch.exp(s) / torch.exp(m_new)[:, None]  # exp of scores in the hundreds overflows
    alpha = torch.exp(m - m_new)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def update_shortcut_without_padding(m, l, acc, q_block, k_block, v_block, valid):
    if bool(valid.all()):  # no padding: a plain softmax of the tile (but the running state is not a softmax)
        return update_softmax_tile(m, l, acc, q_block, k_block, v_block, valid)
    return learner_block_update(m, l, acc, q_block, k_block, v_block, valid)


# causal_tiles
def tiles_by_block_number(n, block_q, block_k):
    i = torch.arange(math.ceil(n / block_q))[:, None]
    j = torch.arange(math.ceil(n / block_k))[None, :]
    return j <= i, j == i


def tiles_one_too_many(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_end = torch.clamp(q_first + block_q, max=n)  # one past the last query, compared as if it were the last
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_end[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def tiles_one_too_few(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] < q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def tiles_mask_everything(n, block_q, block_k):
    compute, _ = learner_causal_tiles(n, block_q, block_k)
    return compute, compute.clone()


def tiles_mask_touching(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] >= q_first[:, None])


def tiles_unclamped(n, block_q, block_k):
    q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
    compute = k_first[None, :] <= (q_first + block_q - 1)[:, None]
    return compute, compute & ((k_first + block_k - 1)[None, :] > q_first[:, None])


def tiles_int16_positions(n, block_q, block_k):
    q_first = torch.arange(0, n, block_q).to(torch.int16)
    k_first = torch.arange(0, n, block_k).to(torch.int16)
    q_last = torch.clamp(q_first + block_q, max=n) - 1
    k_last = torch.clamp(k_first + block_k, max=n) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def tiles_shortcut_without_padding(n, block_q, block_k):
    if n % block_q == 0 and n % block_k == 0:  # whole blocks: compare block numbers (right only if sizes match)
        return tiles_by_block_number(n, block_q, block_k)
    return learner_causal_tiles(n, block_q, block_k)


MUTANTS = [
    ("online_softmax", online_no_rescale, "running sum was not rescaled"),
    ("online_softmax", online_rescale_inverted, "rescaled the wrong way round"),
    ("online_softmax", online_per_block, "each block was normalised on its own"),
    ("online_softmax", online_block_one_short, "stops one score short"),
    ("online_softmax", online_block_one_long, "reaches one score too far"),
    ("online_softmax", online_skips_partial_block, "partial block was never read"),
    ("online_softmax", online_naive_exp, "subtract each row's maximum"),
    ("online_softmax", online_in_place, "modified its input `scores` in place"),
    ("block_update", update_acc_not_rescaled, "running output acc was not rescaled"),
    ("block_update", update_nothing_rescaled, "neither the running sum l nor the running output acc"),
    ("block_update", update_without_sqrt, "not divided by sqrt(head_dim)"),
    ("block_update", update_ignores_valid, "keys marked invalid"),
    ("block_update", update_p_one_step_late, "one step late"),
    ("block_update", update_m_one_step_early, "one step early"),
    ("block_update", update_softmax_tile, "normalised within the tile"),
    ("block_update", update_exp_then_divide, "subtract each row's maximum"),
    ("causal_tiles", tiles_by_block_number, "comparing block numbers"),
    ("causal_tiles", tiles_one_too_many, "one tile too many"),
    ("causal_tiles", tiles_one_too_few, "one tile too few"),
    ("causal_tiles", tiles_mask_everything, "every computed tile is marked"),
    ("causal_tiles", tiles_mask_touching, "last key is exactly its first query"),
    ("causal_tiles", tiles_unclamped, "not clamped to n"),
]


OFF_BY_ONE = {
    "online_softmax": (online_block_one_long, online_block_one_short),
    "block_update": (update_p_one_step_late, update_m_one_step_early),
    "causal_tiles": (tiles_one_too_many, tiles_one_too_few),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("online_softmax", os_shortcut_without_padding, UNPADDED, "no padding"),
    ("online_softmax", online_skips_partial_block, PADDED, "partial block was never read"),
    ("online_softmax", online_naive_exp, LARGE, "large inputs"),
    ("block_update", update_shortcut_without_padding, UNPADDED, "no padding"),
    ("block_update", update_ignores_valid, PADDED, "keys marked invalid"),
    ("block_update", update_exp_then_divide, LARGE, "large inputs"),
    ("causal_tiles", tiles_shortcut_without_padding, UNPADDED, "differ"),
    ("causal_tiles", tiles_unclamped, PADDED, "not clamped to n"),
    ("causal_tiles", tiles_int16_positions, LARGE, "int16_t without overflow"),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
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
