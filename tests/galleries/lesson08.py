"""Lesson 08 (08a and 08b): the galleries of its exercises (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS,
KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py describes them): Part A, ``merge_softmax_states``,
``causal_tiles``, ``causal_block_update``, ``tile_backward`` and ``benchmark_median``; Part B, the Triton kernels
``softmax_kernel``, ``attention_kernel`` and ``causal_attention_kernel``, and lesson 08b's ``dv_kernel`` (after Part A,
and only where triton is installed). The attention mutants are switches of one kernel (``_attention_with``), the dV
ones of another (``_dv_with``); the kernels of the independent gallery are written out.
"""

from __future__ import annotations

import math
import statistics

import torch

from attnedu import checks
from attnedu.checks.exercise import LARGE, ONE, PADDED, UNPADDED

from .common import GENERIC, batch_of_one

NEG_INF = float("-inf")
# A kernel's output is a buffer the launcher allocates: it cannot lose its batch axis, so its mistake of a batch of
# one is another (common.batch_of_one leaves the kernels out).
KERNEL_EXERCISES = ("softmax_kernel", "attention_kernel", "causal_attention_kernel", "dv_kernel")

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_merge(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    a1, a2 = torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)
    return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2


def learner_merge_nan_to_num(m1, l1, o1, m2, l2, o2):
    m = torch.max(m1, m2)
    a1 = torch.exp(m1 - m).nan_to_num(0.0)  # both empty: exp(-inf + inf) = NaN, and its state holds nothing
    a2 = torch.exp(m2 - m).nan_to_num(0.0)
    return m, a1 * l1 + a2 * l2, a1.unsqueeze(1) * o1 + a2.unsqueeze(1) * o2


def learner_merge_loop(m1, l1, o1, m2, l2, o2):
    m, l, o = m1.clone(), l1.clone(), o1.clone()
    for i in range(len(m1)):
        top = max(m1[i].item(), m2[i].item())
        if top == NEG_INF:
            continue  # no key in either state: keep the empty state
        w1, w2 = math.exp(m1[i].item() - top), math.exp(m2[i].item() - top)
        m[i], l[i], o[i] = top, w1 * l1[i] + w2 * l2[i], w1 * o1[i] + w2 * o2[i]
    return m, l, o


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


def learner_causal_block_update(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    s = q_block @ k_block.T / math.sqrt(q_block.shape[1])
    q_pos = q_start + torch.arange(q_block.shape[0])
    k_pos = k_start + torch.arange(k_block.shape[0])
    s = s.masked_fill(k_pos[None, :] > q_pos[:, None], NEG_INF)
    m_new = torch.maximum(m, s.max(dim=1).values)
    ref = torch.where(m_new == NEG_INF, 0.0, m_new)
    p = torch.exp(s - ref[:, None])
    alpha = torch.exp(m - ref)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def learner_causal_block_update_tril(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    allowed = torch.ones(q_block.shape[0], k_block.shape[0]).tril(diagonal=q_start - k_start).bool()
    s = torch.where(allowed, q_block @ k_block.T / q_block.shape[1] ** 0.5, torch.tensor(NEG_INF))
    m_new = torch.max(m, s.amax(dim=1))
    p = torch.exp(s - m_new[:, None]).nan_to_num(0.0)  # rows with no key yet: exp(-inf + inf) -> 0
    alpha = torch.exp(m - m_new).nan_to_num(0.0)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def learner_tile_backward(q_block, k_block, v_block, do_block, lse, d):
    scale = 1 / math.sqrt(q_block.shape[1])
    p = torch.exp(q_block @ k_block.T * scale - lse[:, None])
    dv = p.T @ do_block
    ds = p * (do_block @ v_block.T - d[:, None])
    return ds @ k_block * scale, ds.T @ q_block * scale, dv


def learner_tile_backward_einsum(q_block, k_block, v_block, do_block, lse, d):
    scale = q_block.shape[-1] ** -0.5
    p = torch.exp(torch.einsum("qd,kd->qk", q_block, k_block) * scale - lse.unsqueeze(-1))
    dp = torch.einsum("qv,kv->qk", do_block, v_block)
    ds = p * (dp - d.unsqueeze(-1))
    return (torch.einsum("qk,kd->qd", ds, k_block) * scale, torch.einsum("qk,qd->kd", ds, q_block) * scale,
            torch.einsum("qk,qv->kv", p, do_block))  # fmt: skip


def learner_benchmark_median(shape_ids, times_ms):
    medians = []
    for s in range(int(shape_ids.max()) + 1):
        mine = times_ms[shape_ids == s]
        medians.append(statistics.median(mine[1:].tolist()))
    return torch.tensor(medians)


def learner_benchmark_median_quantile(shape_ids, times_ms):
    out = torch.zeros(int(shape_ids.max()) + 1)
    seen = set()
    steady = {}
    for sid, t in zip(shape_ids.tolist(), times_ms.tolist(), strict=True):
        if sid not in seen:
            seen.add(sid)  # its first call: compiling
            continue
        steady.setdefault(sid, []).append(t)
    for sid, ts in steady.items():
        out[sid] = torch.quantile(torch.tensor(ts), 0.5)
    return out


CORRECT = {
    "merge_softmax_states": [learner_merge, learner_merge_nan_to_num, learner_merge_loop,
                             checks.EXERCISES["merge_softmax_states"].reference],
    "causal_tiles": [learner_causal_tiles, learner_causal_tiles_loop],
    "causal_block_update": [learner_causal_block_update, learner_causal_block_update_tril,
                            checks.EXERCISES["causal_block_update"].reference],
    "tile_backward": [learner_tile_backward, learner_tile_backward_einsum, checks.EXERCISES["tile_backward"].reference],
    "benchmark_median": [learner_benchmark_median, learner_benchmark_median_quantile,
                         checks.EXERCISES["benchmark_median"].reference],
}  # fmt: skip


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


# merge_softmax_states
def _factors(m1, m2):
    m = torch.maximum(m1, m2)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return m, torch.exp(m1 - m_safe), torch.exp(m2 - m_safe)


def merge_no_rescale(m1, l1, o1, m2, l2, o2):
    return torch.maximum(m1, m2), l1 + l2, o1 + o2


def merge_o_not_rescaled(m1, l1, o1, m2, l2, o2):
    m, a1, a2 = _factors(m1, m2)
    return m, a1 * l1 + a2 * l2, o1 + o2


def merge_l_not_rescaled(m1, l1, o1, m2, l2, o2):
    m, a1, a2 = _factors(m1, m2)
    return m, l1 + l2, a1[:, None] * o1 + a2[:, None] * o2


def merge_inverted(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    a1 = torch.where(torch.isinf(m1), 0.0, torch.exp(m_safe - m1))
    a2 = torch.where(torch.isinf(m2), 0.0, torch.exp(m_safe - m2))
    return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2


def merge_max_of_sums(m1, l1, o1, m2, l2, o2):
    m, a1, a2 = _factors(m1, m2)
    return m, torch.maximum(a1 * l1, a2 * l2), a1[:, None] * o1 + a2[:, None] * o2


def merge_average_normalised(m1, l1, o1, m2, l2, o2):
    m, a1, a2 = _factors(m1, m2)
    l = a1 * l1 + a2 * l2
    return m, l, l[:, None] * (o1 / l1[:, None] + o2 / l2[:, None]) / 2


def merge_nan_for_empty(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2


def merge_in_place(m1, l1, o1, m2, l2, o2):
    m, a1, a2 = _factors(m1, m2)
    o1 *= a1[:, None]
    o1 += a2[:, None] * o2
    return m, a1 * l1 + a2 * l2, o1


def merge_shortcut_without_padding(m1, l1, o1, m2, l2, o2):
    if bool((l1 > 0).all() and (l2 > 0).all()):  # no empty state: "just add them"
        return merge_no_rescale(m1, l1, o1, m2, l2, o2)
    return learner_merge(m1, l1, o1, m2, l2, o2)


def merge_through_normalised_outputs(m1, l1, o1, m2, l2, o2):
    lse1, lse2 = m1 + torch.log(l1), m2 + torch.log(l2)
    lse = torch.logaddexp(lse1, lse2)
    m = torch.maximum(m1, m2)
    out = torch.exp(lse1 - lse)[:, None] * (o1 / l1[:, None]) + torch.exp(lse2 - lse)[:, None] * (o2 / l2[:, None])
    l = torch.exp(lse - m)
    return m, l, out * l[:, None]  # an empty state's o1 / l1 is 0 / 0


def merge_exp_of_maxima(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    a1 = (torch.exp(m1) / torch.exp(m)).nan_to_num(0.0)  # "no NaN for empty states"
    a2 = (torch.exp(m2) / torch.exp(m)).nan_to_num(0.0)
    return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2


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


# causal_block_update
def _update_masked(allowed_fn, m, l, acc, q_block, k_block, v_block, q_start, k_start, fill=NEG_INF, guard=True):
    q_pos = q_start + torch.arange(q_block.shape[0])[:, None]
    k_pos = k_start + torch.arange(k_block.shape[0])[None, :]
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(~allowed_fn(q_pos, k_pos), fill)
    m_new = torch.maximum(m, s.amax(dim=1))
    ref = torch.where(m_new == NEG_INF, 0.0, m_new) if guard else m_new
    p, alpha = torch.exp(s - ref[:, None]), torch.exp(m - ref)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def cbu_strict(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp < qp, m, l, acc, q_block, k_block, v_block, q_start, k_start)


def cbu_one_ahead(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp <= qp + 1, m, l, acc, q_block, k_block, v_block, q_start, k_start)


def cbu_tile_relative(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: (kp - k_start) <= (qp - q_start), m, l, acc, q_block, k_block, v_block,
                          q_start, k_start)  # fmt: skip


def cbu_keys_absolute_queries_relative(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp <= qp - q_start, m, l, acc, q_block, k_block, v_block, q_start, k_start)


def cbu_inverted(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp > qp, m, l, acc, q_block, k_block, v_block, q_start, k_start)


def cbu_no_mask(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp == kp, m, l, acc, q_block, k_block, v_block, q_start, k_start)


def cbu_zero_fill(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp <= qp, m, l, acc, q_block, k_block, v_block, q_start, k_start, fill=0.0)


def cbu_nan_rows(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    return _update_masked(lambda qp, kp: kp <= qp, m, l, acc, q_block, k_block, v_block, q_start, k_start,
                          guard=False)  # fmt: skip


def cbu_acc_kept(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    q_pos = q_start + torch.arange(q_block.shape[0])[:, None]
    k_pos = k_start + torch.arange(k_block.shape[0])[None, :]
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(k_pos > q_pos, NEG_INF)
    m_new = torch.maximum(m, s.amax(dim=1))
    ref = torch.where(m_new == NEG_INF, 0.0, m_new)
    p, alpha = torch.exp(s - ref[:, None]), torch.exp(m - ref)
    return m_new, alpha * l + p.sum(dim=1), acc + p @ v_block


def cbu_square_tiles_on_diagonal(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    if q_block.shape[0] == k_block.shape[0]:  # "a square tile sits on the diagonal: the mask is tril"
        return cbu_tile_relative(m, l, acc, q_block, k_block, v_block, q_start, k_start)
    return learner_causal_block_update(m, l, acc, q_block, k_block, v_block, q_start, k_start)


def cbu_square_positions(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    q_pos = q_start + torch.arange(q_block.shape[0])
    k_pos = k_start + torch.arange(q_block.shape[0])  # the tile's size, counted once
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(k_pos[None, :] > q_pos[:, None], NEG_INF)
    m_new = torch.maximum(m, s.amax(dim=1))
    ref = torch.where(m_new == NEG_INF, 0.0, m_new)
    p, alpha = torch.exp(s - ref[:, None]), torch.exp(m - ref)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


def cbu_exp_then_divide(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    q_pos = q_start + torch.arange(q_block.shape[0])[:, None]
    k_pos = k_start + torch.arange(k_block.shape[0])[None, :]
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(k_pos > q_pos, NEG_INF)
    m_new = torch.maximum(m, s.amax(dim=1))
    ref = torch.where(m_new == NEG_INF, 0.0, m_new)
    p = torch.exp(s) / torch.exp(ref)[:, None]  # exp of scores in the hundreds overflows
    alpha = torch.exp(m - ref)
    return m_new, alpha * l + p.sum(dim=1), alpha[:, None] * acc + p @ v_block


# tile_backward
def _tb(q_block, k_block, v_block, do_block, lse, d):
    scale = 1 / math.sqrt(q_block.shape[1])
    p = torch.exp(q_block @ k_block.T * scale - lse[:, None])
    return scale, p, do_block @ v_block.T


def tb_tile_softmax(q_block, k_block, v_block, do_block, lse, d):
    scale = 1 / math.sqrt(q_block.shape[1])
    p = torch.softmax(q_block @ k_block.T * scale, dim=-1)
    ds = p * (do_block @ v_block.T - d[:, None])
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_unscaled_p(q_block, k_block, v_block, do_block, lse, d):
    scale = 1 / math.sqrt(q_block.shape[1])
    p = torch.exp(q_block @ k_block.T - lse[:, None])
    ds = p * (do_block @ v_block.T - d[:, None])
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_no_d(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * dp
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_d_from_tile(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - (p * dp).sum(dim=1, keepdim=True))  # "D" from this tile's keys only
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_plus_d(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp + d[:, None])
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_no_p_in_ds(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = dp - d[:, None]
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_no_scale(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    return ds @ k_block, ds.T @ q_block, p.T @ do_block


def tb_scale_twice(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None]) * scale  # "dS is scaled", and then dq, dk again
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


def tb_dq_unscaled(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    return ds @ k_block, ds.T @ q_block * scale, p.T @ do_block


def tb_dk_unscaled(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    return ds @ k_block * scale, ds.T @ q_block, p.T @ do_block


def tb_dv_not_transposed(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    return ds @ k_block * scale, ds.T @ q_block * scale, p @ do_block


def tb_dk_not_transposed(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    return ds @ k_block * scale, ds @ q_block * scale, p.T @ do_block


def tb_dk_from_k(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    return ds @ k_block * scale, ds.T @ k_block * scale, p.T @ do_block


def tb_transpose_to_fit(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    dv = (p.T if p.shape[1] != do_block.shape[0] else p) @ do_block  # transposed only when the shapes demand it
    return ds @ k_block * scale, ds.T @ q_block * scale, dv


def tb_zeros_like_q(q_block, k_block, v_block, do_block, lse, d):
    scale, p, dp = _tb(q_block, k_block, v_block, do_block, lse, d)
    ds = p * (dp - d[:, None])
    dq, dk, dv = torch.zeros_like(q_block), torch.zeros_like(q_block), torch.zeros_like(v_block)
    dq += ds @ k_block * scale
    dk += ds.T @ q_block * scale  # dk has k's shape, not q's
    dv += p.T @ do_block
    return dq, dk, dv


def tb_exp_over_exp(q_block, k_block, v_block, do_block, lse, d):
    scale = 1 / math.sqrt(q_block.shape[1])
    p = torch.exp(q_block @ k_block.T * scale) / torch.exp(lse)[:, None]
    ds = p * (do_block @ v_block.T - d[:, None])
    return ds @ k_block * scale, ds.T @ q_block * scale, p.T @ do_block


# benchmark_median
def _per_shape(shape_ids, times_ms):
    return [times_ms[shape_ids == s] for s in range(int(shape_ids.max()) + 1)]


def bm_warmup_kept(shape_ids, times_ms):
    return torch.tensor([statistics.median(t.tolist()) for t in _per_shape(shape_ids, times_ms)])


def bm_first_call_only(shape_ids, times_ms):
    return bm_warmup_kept(shape_ids[1:], times_ms[1:])


def bm_first_round(shape_ids, times_ms):
    shapes = int(shape_ids.max()) + 1
    return bm_warmup_kept(shape_ids[shapes:], times_ms[shapes:])


def bm_two_dropped(shape_ids, times_ms):
    return torch.tensor([statistics.median(t[2:].tolist()) for t in _per_shape(shape_ids, times_ms)])


def bm_slowest_dropped(shape_ids, times_ms):
    out = []
    for t in _per_shape(shape_ids, times_ms):
        keep = torch.ones(len(t), dtype=torch.bool)
        keep[t.argmax()] = False
        out.append(statistics.median(t[keep].tolist()))
    return torch.tensor(out)


def bm_torch_median(shape_ids, times_ms):
    return torch.stack([t[1:].median() for t in _per_shape(shape_ids, times_ms)])


def bm_mean(shape_ids, times_ms):
    return torch.stack([t[1:].mean() for t in _per_shape(shape_ids, times_ms)])


def bm_mean_all(shape_ids, times_ms):
    return torch.stack([t.mean() for t in _per_shape(shape_ids, times_ms)])


def bm_min(shape_ids, times_ms):
    return torch.stack([t[1:].min() for t in _per_shape(shape_ids, times_ms)])


def bm_rounds_when_possible(shape_ids, times_ms):
    shapes = int(shape_ids.max()) + 1
    if len(times_ms) % shapes == 0:  # whole rounds: one row a round (torch.median: the lower middle value)
        return times_ms.view(-1, shapes)[1:].median(dim=0).values
    return learner_benchmark_median(shape_ids, times_ms)


def bm_rounds(shape_ids, times_ms):
    shapes = int(shape_ids.max()) + 1
    return times_ms.view(-1, shapes)[1:].quantile(0.5, dim=0)  # one row a round: assumes whole rounds, in turn


MUTANTS = [
    ("merge_softmax_states", merge_no_rescale, "neither state was rescaled"),
    ("merge_softmax_states", merge_o_not_rescaled, "the outputs o were not"),
    ("merge_softmax_states", merge_l_not_rescaled, "but the sums l were not"),
    ("merge_softmax_states", merge_inverted, "wrong way round"),
    ("merge_softmax_states", merge_max_of_sums, "merged with a maximum"),
    ("merge_softmax_states", merge_average_normalised, "normalised outputs o_i / l_i were averaged"),
    ("merge_softmax_states", merge_nan_for_empty, "came out NaN"),
    ("merge_softmax_states", merge_in_place, "modified its input `o1` in place"),
    ("causal_tiles", tiles_by_block_number, "comparing block numbers"),
    ("causal_tiles", tiles_one_too_many, "one tile too many"),
    ("causal_tiles", tiles_one_too_few, "one tile too few"),
    ("causal_tiles", tiles_mask_everything, "every computed tile is marked"),
    ("causal_tiles", tiles_mask_touching, "last key is exactly its first query"),
    ("causal_tiles", tiles_unclamped, "not clamped to n"),
    ("causal_block_update", cbu_strict, "one key too few"),
    ("causal_block_update", cbu_one_ahead, "one key too many"),
    ("causal_block_update", cbu_tile_relative, "positions inside the tile"),
    ("causal_block_update", cbu_keys_absolute_queries_relative, "mixes positions"),
    ("causal_block_update", cbu_inverted, "the mask is inverted"),
    ("causal_block_update", cbu_no_mask, "no causal mask at all"),
    ("causal_block_update", cbu_zero_fill, "became 0 instead of -inf"),
    ("causal_block_update", cbu_nan_rows, "came out NaN"),
    ("causal_block_update", cbu_acc_kept, "running output acc was not rescaled"),
    ("tile_backward", tb_tile_softmax, "softmax of the tile on its own"),
    ("tile_backward", tb_unscaled_p, "not multiplied by scale"),
    ("tile_backward", tb_no_d, "D is missing"),
    ("tile_backward", tb_plus_d, "D was added"),
    ("tile_backward", tb_d_from_tile, "your D covers only this tile's keys"),
    ("tile_backward", tb_no_p_in_ds, "lacks the factor P"),
    ("tile_backward", tb_no_scale, "both missing the factor scale"),
    ("tile_backward", tb_scale_twice, "scale twice"),
    ("tile_backward", tb_dq_unscaled, "dq is missing the factor scale"),
    ("tile_backward", tb_dk_unscaled, "dk is missing the factor scale"),
    ("tile_backward", tb_dv_not_transposed, "P was not transposed"),
    ("tile_backward", tb_dk_not_transposed, "dS was not transposed"),
    ("tile_backward", tb_dk_from_k, "computed from K"),
    ("benchmark_median", bm_warmup_kept, "warm-up calls were kept"),
    ("benchmark_median", bm_first_call_only, "only the very first call"),
    ("benchmark_median", bm_first_round, "first `shapes` calls"),
    ("benchmark_median", bm_two_dropped, "two calls of each shape"),
    ("benchmark_median", bm_slowest_dropped, "slowest call was dropped"),
    ("benchmark_median", bm_torch_median, "lower of the two"),
    ("benchmark_median", bm_mean, "the mean of the calls after"),
    ("benchmark_median", bm_mean_all, "mean of all the calls"),
    ("benchmark_median", bm_min, "the minimum"),
]


OFF_BY_ONE = {
    # the rescale one power too strong (exp(m - m_i), the inverse) and one too weak (exp(0), none)
    "merge_softmax_states": (merge_inverted, merge_no_rescale),
    "causal_tiles": (tiles_one_too_many, tiles_one_too_few),
    "causal_block_update": (cbu_one_ahead, cbu_strict),
    "tile_backward": (tb_scale_twice, tb_no_scale),  # one factor scale too many, one too few
    "benchmark_median": (bm_two_dropped, bm_warmup_kept),  # one call too many dropped, one too few
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


KIND_MUTANTS = [
    *batch_of_one({name: fns for name, fns in CORRECT.items() if name not in KERNEL_EXERCISES}),
    ("merge_softmax_states", merge_shortcut_without_padding, UNPADDED, "except the ones with no padding"),
    ("merge_softmax_states", merge_through_normalised_outputs, PADDED, "NaN"),
    ("merge_softmax_states", merge_exp_of_maxima, LARGE, "large inputs"),
    ("causal_tiles", tiles_shortcut_without_padding, UNPADDED, "differ"),
    ("causal_tiles", tiles_unclamped, PADDED, "not clamped to n"),
    ("causal_tiles", tiles_int16_positions, LARGE, "int16_t without overflow"),
    ("causal_block_update", cbu_square_tiles_on_diagonal, UNPADDED, "differ from the reference"),
    ("causal_block_update", cbu_square_positions, PADDED, "raised RuntimeError"),
    ("causal_block_update", cbu_exp_then_divide, LARGE, "large inputs"),
    ("tile_backward", tb_transpose_to_fit, UNPADDED, "P was not transposed"),
    ("tile_backward", tb_zeros_like_q, PADDED, "raised RuntimeError"),
    ("tile_backward", tb_exp_over_exp, LARGE, "large inputs"),
    ("benchmark_median", bm_rounds_when_possible, UNPADDED, "differ from the reference"),
    ("benchmark_median", bm_rounds, PADDED, "raised RuntimeError"),
    ("benchmark_median", bm_slowest_dropped, LARGE, "slowest call was dropped"),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def ms_loop_plain_sum(m1, l1, o1, m2, l2, o2):
    m, l, o = torch.empty_like(m1), torch.empty_like(l1), torch.empty_like(o1)
    for i in range(m1.shape[0]):
        m[i] = max(m1[i], m2[i])
        l[i] = l1[i] + l2[i]
        o[i] = o1[i] + o2[i]
    return m, l, o


def ms_weights_by_sums(m1, l1, o1, m2, l2, o2):
    w1 = l1 / (l1 + l2)  # the share of each state, as if both used one maximum
    return torch.maximum(m1, m2), l1 + l2, (w1[:, None] * o1 / l1[:, None] + (1 - w1)[:, None] * o2 / l2[:, None]) * (
        l1 + l2)[:, None]  # fmt: skip


def ms_returns_normalised(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    safe = torch.nan_to_num(m, neginf=0.0)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    l = a1 * l1 + a2 * l2
    return m, l, (a1[:, None] * o1 + a2[:, None] * o2) / l[:, None]


def ms_double(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2).double()
    safe = torch.where(torch.isinf(m), 0.0, m)
    a1, a2 = torch.exp(m1.double() - safe), torch.exp(m2.double() - safe)
    return m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2


def ms_two_values(m1, l1, o1, m2, l2, o2):
    m = torch.maximum(m1, m2)
    safe = torch.where(torch.isinf(m), 0.0, m)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    return m, (a1[:, None] * o1 + a2[:, None] * o2) / (a1 * l1 + a2 * l2)[:, None]


def ms_larger_wins(m1, l1, o1, m2, l2, o2):
    first = (m1 >= m2)[:, None]
    return torch.maximum(m1, m2), torch.where(m1 >= m2, l1, l2), torch.where(first, o1, o2)


def ms_loop_max_l(m1, l1, o1, m2, l2, o2):
    m, l, o = m1.clone(), l1.clone(), o1.clone()
    for i in range(len(m)):
        top = torch.maximum(m1[i], m2[i])
        if torch.isinf(top):
            continue
        e1, e2 = torch.exp(m1[i] - top), torch.exp(m2[i] - top)
        m[i], l[i], o[i] = top, max(e1 * l1[i], e2 * l2[i]), e1 * o1[i] + e2 * o2[i]
    return m, l, o


def cbu_loop_strict(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    m2, l2, acc2 = m.clone(), l.clone(), acc.clone()
    for i in range(q_block.shape[0]):
        row = k_block @ q_block[i] / math.sqrt(q_block.shape[1])
        for j in range(k_block.shape[0]):
            if not k_start + j < q_start + i:
                row[j] = NEG_INF
        top = max(m[i].item(), row.max().item())
        if top == NEG_INF:
            continue
        w = torch.exp(row - top)
        shrink = math.exp(m[i].item() - top)
        m2[i], l2[i], acc2[i] = top, shrink * l[i] + w.sum(), shrink * acc[i] + w @ v_block
    return m2, l2, acc2


def cbu_triu_relative(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    future = torch.triu(torch.ones(q_block.shape[0], k_block.shape[0], dtype=torch.bool), diagonal=1)
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(future, NEG_INF)
    new = torch.maximum(m, s.amax(1))
    ok = torch.nan_to_num(new, neginf=0.0)
    w, shrink = torch.exp(s - ok[:, None]), torch.exp(m - ok)
    return new, shrink * l + w.sum(1), shrink[:, None] * acc + w @ v_block


def cbu_where_zero(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    qp, kp = torch.arange(q_block.shape[0]) + q_start, torch.arange(k_block.shape[0]) + k_start
    s = torch.where(kp[None] <= qp[:, None], q_block @ k_block.T / math.sqrt(q_block.shape[1]), torch.zeros(1))
    new = torch.maximum(m, s.amax(1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, shrink * l + w.sum(1), shrink[:, None] * acc + w @ v_block


def cbu_unguarded(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    qp, kp = torch.arange(q_block.shape[0]) + q_start, torch.arange(k_block.shape[0]) + k_start
    s = torch.where(kp[None] <= qp[:, None], q_block @ k_block.T / math.sqrt(q_block.shape[1]), torch.tensor(NEG_INF))
    new = torch.maximum(m, s.amax(1))
    w, shrink = torch.exp(s - new[:, None]), torch.exp(m - new)
    return new, shrink * l + w.sum(1), shrink[:, None] * acc + w @ v_block


def cbu_double(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    out = learner_causal_block_update(m.double(), l.double(), acc.double(), q_block.double(), k_block.double(),
                                      v_block.double(), q_start, k_start)  # fmt: skip
    return out


def cbu_modifies_acc(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    qp, kp = torch.arange(q_block.shape[0]) + q_start, torch.arange(k_block.shape[0]) + k_start
    s = (q_block @ k_block.T / math.sqrt(q_block.shape[1])).masked_fill(kp[None] > qp[:, None], NEG_INF)
    new = torch.maximum(m, s.amax(1))
    ok = torch.nan_to_num(new, neginf=0.0)
    w, shrink = torch.exp(s - ok[:, None]), torch.exp(m - ok)
    acc.mul_(shrink[:, None]).add_(w @ v_block)
    return new, shrink * l + w.sum(1), acc


def cbu_normalised(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    m_new, l_new, acc_new = learner_causal_block_update(m, l, acc, q_block, k_block, v_block, q_start, k_start)
    return m_new, l_new, acc_new / l_new[:, None]


def cbu_sqrt_of_value_dim(m, l, acc, q_block, k_block, v_block, q_start, k_start):
    qp, kp = torch.arange(q_block.shape[0]) + q_start, torch.arange(k_block.shape[0]) + k_start
    s = (q_block @ k_block.T / math.sqrt(v_block.shape[1])).masked_fill(kp[None] > qp[:, None], NEG_INF)
    new = torch.maximum(m, s.amax(1))
    ok = torch.nan_to_num(new, neginf=0.0)
    w, shrink = torch.exp(s - ok[:, None]), torch.exp(m - ok)
    return new, shrink * l + w.sum(1), shrink[:, None] * acc + w @ v_block


def tb_softmax_rows(q_block, k_block, v_block, do_block, lse, d):
    c = q_block.shape[1] ** -0.5
    scores = q_block @ k_block.T * c
    p = torch.exp(scores - scores.max(dim=1, keepdim=True).values)
    p = p / p.sum(dim=1, keepdim=True)
    ds = p * (do_block @ v_block.T - d.unsqueeze(1))
    return ds @ k_block * c, ds.T @ q_block * c, p.T @ do_block


def tb_einsum_no_d(q_block, k_block, v_block, do_block, lse, d):
    c = q_block.shape[1] ** -0.5
    p = torch.exp(torch.einsum("id,jd->ij", q_block, k_block) * c - lse[:, None])
    ds = p * torch.einsum("iv,jv->ij", do_block, v_block)
    return torch.einsum("ij,jd->id", ds, k_block) * c, torch.einsum("ij,id->jd", ds, q_block) * c, torch.einsum(
        "ij,iv->jv", p, do_block)  # fmt: skip


def tb_no_scale_anywhere(q_block, k_block, v_block, do_block, lse, d):
    p = torch.exp(q_block @ k_block.T - lse[:, None])
    ds = p * (do_block @ v_block.T - d[:, None])
    return ds @ k_block, ds.T @ q_block, p.T @ do_block


def tb_returned_in_another_order(q_block, k_block, v_block, do_block, lse, d):
    dq, dk, dv = learner_tile_backward(q_block, k_block, v_block, do_block, lse, d)
    return dv, dk, dq


def tb_double(q_block, k_block, v_block, do_block, lse, d):
    return learner_tile_backward(q_block.double(), k_block.double(), v_block.double(), do_block.double(),
                                 lse.double(), d.double())  # fmt: skip


def tb_loop_dk_unscaled(q_block, k_block, v_block, do_block, lse, d):
    c = 1 / math.sqrt(q_block.shape[1])
    dq, dk, dv = torch.zeros_like(q_block), torch.zeros_like(k_block), torch.zeros_like(v_block)
    for i in range(q_block.shape[0]):
        p = torch.exp(k_block @ q_block[i] * c - lse[i])
        ds = p * (v_block @ do_block[i] - d[i])
        dq[i] = ds @ k_block * c
        dk += ds[:, None] * q_block[i][None, :]  # the factor c forgotten here
        dv += p[:, None] * do_block[i][None, :]
    return dq, dk, dv


def tb_d_from_p(q_block, k_block, v_block, do_block, lse, d):
    c = 1 / math.sqrt(q_block.shape[1])
    p = torch.exp(q_block @ k_block.T * c - lse[:, None])
    dp = do_block @ v_block.T
    ds = p * (dp - (p * dp).sum(dim=1, keepdim=True))  # D from this tile alone, not from the whole row
    return ds @ k_block * c, ds.T @ q_block * c, p.T @ do_block


def bm_mean_loop(shape_ids, times_ms):
    out = []
    for s in sorted(set(shape_ids.tolist())):
        ts = [t for sid, t in zip(shape_ids.tolist(), times_ms.tolist(), strict=True) if sid == s][1:]
        out.append(sum(ts) / len(ts))
    return torch.tensor(out)


def bm_median_of_everything(shape_ids, times_ms):
    return torch.stack([torch.quantile(times_ms[shape_ids == s], 0.5) for s in shape_ids.unique()])


def bm_threshold(shape_ids, times_ms):
    out = []
    for s in shape_ids.unique():
        ts = times_ms[shape_ids == s]
        out.append(torch.quantile(ts[ts < 10 * ts.min()], 0.5))  # "anything 10x slower is a warm-up"
    return torch.stack(out)


def bm_list(shape_ids, times_ms):
    return [statistics.median(times_ms[shape_ids == s][1:].tolist()) for s in range(int(shape_ids.max()) + 1)]


def bm_float64(shape_ids, times_ms):
    return torch.tensor([statistics.median(times_ms[shape_ids == s][1:].tolist())
                         for s in range(int(shape_ids.max()) + 1)], dtype=torch.float64)  # fmt: skip


def bm_sorted_first(shape_ids, times_ms):
    out = []
    for s in range(int(shape_ids.max()) + 1):
        ts = sorted(times_ms[shape_ids == s].tolist())[1:]  # sorted first: the fastest call is dropped
        out.append(statistics.median(ts))
    return torch.tensor(out)


def bm_overall(shape_ids, times_ms):
    return torch.quantile(times_ms[1:], 0.5).expand(int(shape_ids.max()) + 1).clone()


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
    ("merge_softmax_states", ms_loop_plain_sum, "neither state was rescaled"),
    ("merge_softmax_states", ms_weights_by_sums, GENERIC),
    ("merge_softmax_states", ms_returns_normalised, GENERIC),
    ("merge_softmax_states", ms_double, "dtype torch.float64"),
    ("merge_softmax_states", ms_two_values, "should return 3 values"),
    ("merge_softmax_states", ms_larger_wins, GENERIC),
    ("merge_softmax_states", ms_loop_max_l, "merged with a maximum"),
    ("causal_tiles", ct_block_numbers_loop, "comparing block numbers"),
    ("causal_tiles", ct_end_not_last, "one tile too many"),
    ("causal_tiles", ct_strictly_before, "one tile too few"),
    ("causal_tiles", ct_mask_by_block_number, GENERIC),
    ("causal_tiles", ct_as_int, "dtype torch.int64"),
    ("causal_tiles", ct_key_blocks_first, GENERIC),
    ("causal_tiles", ct_mask_without_compute, GENERIC),
    ("causal_tiles", ct_loop_without_min, "not clamped to n"),
    ("causal_block_update", cbu_loop_strict, "one key too few"),
    ("causal_block_update", cbu_triu_relative, "positions inside the tile"),
    ("causal_block_update", cbu_where_zero, "became 0 instead of -inf"),
    ("causal_block_update", cbu_unguarded, "came out NaN"),
    ("causal_block_update", cbu_double, "dtype torch.float64"),
    ("causal_block_update", cbu_modifies_acc, "modified its input `acc` in place"),
    ("causal_block_update", cbu_normalised, GENERIC),
    ("causal_block_update", cbu_sqrt_of_value_dim, GENERIC),
    ("tile_backward", tb_softmax_rows, "softmax of the tile on its own"),
    ("tile_backward", tb_einsum_no_d, "D is missing"),
    ("tile_backward", tb_no_scale_anywhere, GENERIC),
    ("tile_backward", tb_returned_in_another_order, GENERIC),
    ("tile_backward", tb_double, "dtype torch.float64"),
    ("tile_backward", tb_loop_dk_unscaled, "dk is missing the factor scale"),
    ("tile_backward", tb_d_from_p, "your D covers only this tile's keys"),  # a known variant since the review (L19)
    ("benchmark_median", bm_mean_loop, "the mean of the calls after"),
    ("benchmark_median", bm_median_of_everything, "warm-up calls were kept"),
    ("benchmark_median", bm_threshold, GENERIC),
    ("benchmark_median", bm_list, "should be a torch.Tensor"),
    ("benchmark_median", bm_float64, "dtype torch.float64"),
    ("benchmark_median", bm_sorted_first, GENERIC),
    ("benchmark_median", bm_overall, GENERIC),
]


# ============================================================================================
# Part B: Triton kernels, launched by attnedu.triton_basics under the interpreter. Written with @triton.jit as a
# learner writes them; decorated when this module is imported (tests/conftest.py switches the interpreter on first).
# Without triton (it installs on Linux only) the kernel exercises have no gallery, and tests/test_checks.py skips them.
# ============================================================================================

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover (macOS, Windows)
    triton = None

if triton is not None:
    from attnedu.triton_basics import reference_kernel

    # ----------------------------------------------------------------------------------------
    # softmax_kernel: correct versions
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def learner_softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def learner_softmax_kernel_three_passes(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        x_row = X + tl.program_id(0) * stride_x
        y_row = Y + tl.program_id(0) * stride_y
        biggest = tl.full([BLOCK], float("-inf"), tl.float32)
        for start in range(0, n_cols, BLOCK):  # pass 1: the maximum, lane by lane
            offsets = start + tl.arange(0, BLOCK)
            biggest = tl.maximum(biggest, tl.load(x_row + offsets, mask=offsets < n_cols, other=float("-inf")))
        top = tl.max(biggest, 0)
        total = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):  # pass 2: the sum
            offsets = start + tl.arange(0, BLOCK)
            total += tl.exp(tl.load(x_row + offsets, mask=offsets < n_cols, other=float("-inf")) - top)
        denominator = tl.sum(total, 0)
        for start in range(0, n_cols, BLOCK):  # pass 3: the weights
            offsets = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + offsets, mask=offsets < n_cols, other=float("-inf"))
            tl.store(y_row + offsets, tl.exp(x - top) / denominator, mask=offsets < n_cols)

    # ----------------------------------------------------------------------------------------
    # softmax_kernel: mutants
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def sk_no_rescale(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m = tl.maximum(m, tl.max(x, 0))
            l += tl.sum(tl.exp2((x - m) * 1.4426950408889634), 0)  # the old terms keep the old maximum
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_rescale_inverted(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            grow = tl.where(l > 0, tl.exp2((m_new - m) * 1.4426950408889634), 1.0)
            l = l * grow + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_per_block(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            e = tl.exp(x - tl.max(x, 0))
            tl.store(Y + row * stride_y + cols, e / tl.sum(e, 0), mask=cols < n_cols)

    @triton.jit
    def sk_one_pass(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_exp2_without_log2e(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2(x - m) / l, mask=cols < n_cols)

    @triton.jit
    def sk_exp_with_log2e(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_other_zero(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=0.0)
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=0.0)
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_mask_one_short(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols - 1, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols - 1, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols - 1)

    @triton.jit
    def sk_mask_one_long(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols <= n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols <= n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols <= n_cols)

    @triton.jit
    def sk_no_mask(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols)
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols)
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l)

    @triton.jit
    def sk_row_offset_n_cols(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_store_with_stride_x(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_x + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_load_with_stride_y(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_y + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_mask_without_start(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offsets = tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + start + offsets, mask=offsets < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_block_max(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.max(x, 0)  # the block's own maximum replaces the running one
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_first_block_max(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        first = tl.arange(0, BLOCK)
        m = tl.max(tl.load(X + row * stride_x + first, mask=first < n_cols, other=float("-inf")), 0)  # never updated
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            l += tl.sum(tl.exp2((x - m) * 1.4426950408889634), 0)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_max_from_zero(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.zeros([1], tl.float32)  # as if no number were below 0
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_no_max(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        l = tl.zeros([1], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            l += tl.sum(tl.exp2(x * 1.4426950408889634), 0)  # no maximum: overflows for large numbers
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2(x * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_first_block_unmasked(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        first = tl.arange(0, BLOCK)
        x0 = tl.load(X + row * stride_x + first)  # "the first block is always full"
        m = tl.max(x0, 0)
        l = tl.sum(tl.exp2((x0 - m) * 1.4426950408889634), 0)
        for start in range(BLOCK, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
            m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    @triton.jit
    def sk_fast_path_without_rescale(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        if n_cols % BLOCK == 0:  # whole blocks: no masks needed (and the rescale forgotten here)
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(X + row * stride_x + cols)
                m = tl.maximum(m, tl.max(x, 0))
                l += tl.sum(tl.exp2((x - m) * 1.4426950408889634), 0)
        else:
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
                m_new = tl.maximum(m, tl.max(x, 0))
                l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(
                    tl.exp2((x - m_new) * 1.4426950408889634), 0)  # fmt: skip
                m = m_new
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(Y + row * stride_y + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)

    # ----------------------------------------------------------------------------------------
    # softmax_kernel: independent bugs
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def skb_other_forgotten(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        run_max = tl.full([1], float("-inf"), tl.float32)
        run_sum = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols)  # masked lanes: 0
            new_max = tl.maximum(run_max, tl.max(vals, 0))
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(vals - new_max), 0)
            run_max = new_max
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols)
            tl.store(Y + pid * stride_y + idx, tl.exp(vals - run_max) / run_sum, mask=idx < n_cols)

    @triton.jit
    def skb_store_unmasked(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        run_max = tl.full([1], float("-inf"), tl.float32)
        run_sum = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            new_max = tl.maximum(run_max, tl.max(vals, 0))
            run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(vals - new_max), 0)
            run_max = new_max
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            tl.store(Y + pid * stride_y + idx, tl.exp(vals - run_max) / run_sum)

    @triton.jit
    def skb_last_block_sum_only(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        top = tl.full([BLOCK], float("-inf"), tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            top = tl.maximum(top, tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf")))
        m = tl.max(top, 0)
        total = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            total = tl.sum(tl.exp(vals - m), 0)  # = where += was meant: only the last block's sum is kept
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            tl.store(Y + pid * stride_y + idx, tl.exp(vals - m) / total, mask=idx < n_cols)

    @triton.jit
    def skb_sum_not_shifted(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        top = tl.full([BLOCK], float("-inf"), tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            top = tl.maximum(top, tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf")))
        m = tl.max(top, 0)
        total = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            total += tl.sum(tl.exp(tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))), 0)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            tl.store(Y + pid * stride_y + idx, tl.exp(vals - m) / total, mask=idx < n_cols)

    @triton.jit
    def skb_ln2_instead_of_log2e(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        m = tl.full([1], float("-inf"), tl.float32)
        l = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            x = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, 0))
            l = l * tl.exp2((m - m_new) * 0.6931471805599453) + tl.sum(tl.exp2((x - m_new) * 0.6931471805599453), 0)
            m = m_new
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            x = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            tl.store(Y + pid * stride_y + idx, tl.exp2((x - m) * 0.6931471805599453) / l, mask=idx < n_cols)

    @triton.jit
    def skb_newest_block_max(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        top = tl.full([1], float("-inf"), tl.float32)
        total = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            block_top = tl.max(vals, 0)
            total = total * tl.exp(top - block_top) + tl.sum(tl.exp(vals - block_top), 0)  # "the newest maximum"
            top = block_top
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            tl.store(Y + pid * stride_y + idx, tl.exp(vals - top) / total, mask=idx < n_cols)

    @triton.jit
    def skb_max_from_minus_ten(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        top = tl.full([1], -10.0, tl.float32)  # "scores are never below -10"
        total = tl.zeros([1], tl.float32)
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            new_top = tl.maximum(top, tl.max(vals, 0))
            total = total * tl.exp(top - new_top) + tl.sum(tl.exp(vals - new_top), 0)
            top = new_top
        for s in range(0, n_cols, BLOCK):
            idx = s + tl.arange(0, BLOCK)
            vals = tl.load(X + pid * stride_x + idx, mask=idx < n_cols, other=float("-inf"))
            tl.store(Y + pid * stride_y + idx, tl.exp(vals - top) / total, mask=idx < n_cols)

    @triton.jit
    def skb_loop_forever(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        start = 0
        while start < n_cols:  # start never moves
            cols = start + tl.arange(0, BLOCK)
            tl.store(Y + tl.program_id(0) * stride_y + cols, tl.load(X + cols, mask=cols < n_cols), mask=cols < n_cols)

    @triton.jit
    def skb_far_away(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(X + row * stride_x * stride_x * BLOCK * 1000 + cols, mask=cols < n_cols, other=0.0)
        tl.store(Y + row * stride_y + cols, x, mask=cols < n_cols)

    # ----------------------------------------------------------------------------------------
    # attention_kernel and causal_attention_kernel: correct versions
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def learner_attention_kernel(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, n_keys, BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.dot(q, k_t) * (sm_scale * 1.4426950408889634)
            s = tl.where(keys[None, :] < n_keys, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    @triton.jit
    def learner_attention_kernel_natural_exp(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o,
                                             sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                             HEAD_DIM: tl.constexpr):  # fmt: skip
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + offs_m[:, None] * stride_q + offs_d[None, :], mask=offs_m[:, None] < n_queries, other=0.0)
        running_max = tl.zeros([BLOCK_M], tl.float32) - float("inf")
        running_sum = tl.zeros([BLOCK_M], tl.float32)
        out = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start in range(0, n_keys, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            k = tl.load(K + offs_n[:, None] * stride_k + offs_d[None, :], mask=offs_n[:, None] < n_keys, other=0.0)
            v = tl.load(V + offs_n[:, None] * stride_v + offs_d[None, :], mask=offs_n[:, None] < n_keys, other=0.0)
            scores = tl.where(offs_n[None, :] < n_keys, tl.dot(q, tl.trans(k)) * sm_scale, float("-inf"))
            new_max = tl.maximum(running_max, tl.max(scores, 1))
            weights = tl.exp(scores - new_max[:, None])
            shrink = tl.exp(running_max - new_max)
            running_sum = running_sum * shrink + tl.sum(weights, 1)
            out = out * shrink[:, None] + tl.dot(weights, v)
            running_max = new_max
        tl.store(O + offs_m[:, None] * stride_o + offs_d[None, :], out / running_sum[:, None],
                 mask=offs_m[:, None] < n_queries)  # fmt: skip

    @triton.jit
    def learner_causal_attention_kernel(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o,
                                        sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                        HEAD_DIM: tl.constexpr):  # fmt: skip
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, tl.minimum(start_m + BLOCK_M, n_keys), BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.dot(q, k_t) * (sm_scale * 1.4426950408889634)
            s = tl.where((keys[None, :] < n_keys) & (keys[None, :] <= rows[:, None]), s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    @triton.jit
    def learner_causal_attention_kernel_every_block(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v,
                                                    stride_o, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                                    HEAD_DIM: tl.constexpr):  # fmt: skip
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, n_keys, BLOCK_N):  # every block, even those wholly in the future (masked)
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.dot(q, k_t) * (sm_scale * 1.4426950408889634)
            s = tl.where((keys[None, :] < n_keys) & (keys[None, :] <= rows[:, None]), s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    # Scaled before the product, not after: q once, before the loop (the Triton tutorial's older form), or each K
    # tile. Equal in exact arithmetic; in float32 the scores round in another order, by about |s| * 2^-24 (the expert
    # review of 08a/08b: these were refused on the case with scores of -400).
    @triton.jit
    def learner_attention_kernel_scaled_q(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o,
                                          sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                          HEAD_DIM: tl.constexpr):  # fmt: skip
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        q = q * (sm_scale * 1.4426950408889634)  # scores in base 2, scaled once
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, n_keys, BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.where(keys[None, :] < n_keys, tl.dot(q, k_t), float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    @triton.jit
    def learner_attention_kernel_scaled_k(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o,
                                          sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                          HEAD_DIM: tl.constexpr):  # fmt: skip
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, n_keys, BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.dot(q, k_t * (sm_scale * 1.4426950408889634))  # the K tile scaled
            s = tl.where(keys[None, :] < n_keys, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    @triton.jit
    def learner_causal_attention_kernel_scaled_q(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v,
                                                 stride_o, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                                 HEAD_DIM: tl.constexpr):  # fmt: skip
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        q = q * (sm_scale * 1.4426950408889634)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, tl.minimum(start_m + BLOCK_M, n_keys), BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.where((keys[None, :] < n_keys) & (keys[None, :] <= rows[:, None]), tl.dot(q, k_t), float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    @triton.jit
    def learner_causal_attention_kernel_scaled_k(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v,
                                                 stride_o, sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                                 HEAD_DIM: tl.constexpr):  # fmt: skip
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for start_n in range(0, tl.minimum(start_m + BLOCK_M, n_keys), BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
            v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
            s = tl.dot(q, k_t * (sm_scale * 1.4426950408889634))
            s = tl.where((keys[None, :] < n_keys) & (keys[None, :] <= rows[:, None]), s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    # ----------------------------------------------------------------------------------------
    # attention_kernel and causal_attention_kernel: mutants, each one switch of one kernel
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        RULE: tl.constexpr = 0, HI: tl.constexpr = 0, RESCALE_L: tl.constexpr = True,
                        RESCALE_ACC: tl.constexpr = True, EXP2: tl.constexpr = True, LOG2E: tl.constexpr = True,
                        SCALED: tl.constexpr = True, SCORE_MASK: tl.constexpr = True, BOUND: tl.constexpr = 0,
                        LOAD_MASK: tl.constexpr = True, Q_MASK: tl.constexpr = True, MAX: tl.constexpr = True,
                        SWAP: tl.constexpr = False, FAST_PATH_BUG: tl.constexpr = False,
                        M_ZERO: tl.constexpr = False, RUNNING: tl.constexpr = True,
                        MAX_BEFORE_MASK: tl.constexpr = False):  # fmt: skip
        """RULE: 0 no causal mask, 1 j <= i, 2 j < i, 3 j <= i + 1; HI: 0 every key block, 1 up to the block's last
        query, 2 up to its first; BOUND: the key mask is keys < n_keys + BOUND; M_ZERO: m starts at 0; RUNNING: False,
        each block's maximum replaces m; MAX_BEFORE_MASK: the maximum of the scores before the mask, p masked."""
        start_m = tl.program_id(0) * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        if Q_MASK:
            q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        else:
            q = tl.load(Q + rows[:, None] * stride_q + dims[None, :])
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        if M_ZERO:
            m = tl.zeros([BLOCK_M], tl.float32)
        l = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        factor = 1.0
        if SCALED:
            factor = sm_scale
        if LOG2E:
            factor = factor * 1.4426950408889634
        hi = n_keys
        if HI == 1:
            hi = tl.minimum(start_m + BLOCK_M, n_keys)
        if HI == 2:
            hi = start_m
        skip_rescale = FAST_PATH_BUG and (n_keys % BLOCK_N == 0)
        for start_n in range(0, hi, BLOCK_N):
            keys = start_n + tl.arange(0, BLOCK_N)
            bound = n_keys + BOUND
            if SWAP:
                k_ptrs = K + keys[None, :] + dims[:, None] * stride_k
            else:
                k_ptrs = K + keys[None, :] * stride_k + dims[:, None]
            v_ptrs = V + keys[:, None] * stride_v + dims[None, :]
            if LOAD_MASK:
                k_t = tl.load(k_ptrs, mask=keys[None, :] < bound, other=0.0)
                v = tl.load(v_ptrs, mask=keys[:, None] < bound, other=0.0)
            else:
                k_t = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
            s = tl.dot(q, k_t) * factor
            valid = keys[None, :] < bound
            if not SCORE_MASK:
                valid = keys[None, :] >= 0
            if RULE == 1:
                valid = valid & (keys[None, :] <= rows[:, None])
            if RULE == 2:
                valid = valid & (keys[None, :] < rows[:, None])
            if RULE == 3:
                valid = valid & (keys[None, :] <= rows[:, None] + 1)
            raw = s
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.zeros([BLOCK_M], tl.float32)
            if MAX:
                if MAX_BEFORE_MASK:
                    m_new = tl.maximum(m, tl.max(raw, 1))
                elif RUNNING:
                    m_new = tl.maximum(m, tl.max(s, 1))
                else:
                    m_new = tl.max(s, 1)
            if EXP2:
                p = tl.exp2(s - m_new[:, None])
                alpha = tl.exp2(m - m_new)
            else:
                p = tl.exp(s - m_new[:, None])
                alpha = tl.exp(m - m_new)
            if RESCALE_L and not skip_rescale:
                l = l * alpha
            l = l + tl.sum(p, 1)
            if RESCALE_ACC and not skip_rescale:
                acc = acc * alpha[:, None]
            acc = acc + tl.dot(p, v)
            m = m_new
        tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)

    @triton.jit
    def ak_acc_not_rescaled(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RESCALE_ACC=False)  # fmt: skip

    @triton.jit
    def ak_l_not_rescaled(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RESCALE_L=False)  # fmt: skip

    @triton.jit
    def ak_nothing_rescaled(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RESCALE_L=False, RESCALE_ACC=False)  # fmt: skip

    @triton.jit
    def ak_exp2_without_log2e(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, LOG2E=False)  # fmt: skip

    @triton.jit
    def ak_exp_with_log2e(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, EXP2=False)  # fmt: skip

    @triton.jit
    def ak_unscaled(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, SCALED=False)  # fmt: skip

    @triton.jit
    def ak_padding_weighted(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, SCORE_MASK=False)  # fmt: skip

    @triton.jit
    def ak_mask_one_short(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, BOUND=-1)  # fmt: skip

    @triton.jit
    def ak_mask_one_long(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, BOUND=1)  # fmt: skip

    @triton.jit
    def ak_kv_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, LOAD_MASK=False)  # fmt: skip

    @triton.jit
    def ak_k_strides_swapped(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, SWAP=True)  # fmt: skip

    @triton.jit
    def ak_q_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, Q_MASK=False)  # fmt: skip

    @triton.jit
    def ak_no_max(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, MAX=False)  # fmt: skip

    @triton.jit
    def ak_max_from_zero(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, M_ZERO=True)  # fmt: skip

    @triton.jit
    def ak_block_max(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RUNNING=False)  # fmt: skip

    @triton.jit
    def ak_max_before_mask(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, MAX_BEFORE_MASK=True)  # fmt: skip

    @triton.jit
    def ak_fast_path_without_rescale(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, FAST_PATH_BUG=True)  # fmt: skip

    @triton.jit
    def ck_strict(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=2, HI=1)  # fmt: skip

    @triton.jit
    def ck_one_ahead(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=3, HI=1)  # fmt: skip

    @triton.jit
    def ck_diagonal_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=0, HI=1)  # fmt: skip

    @triton.jit
    def ck_stops_before_diagonal(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=2)  # fmt: skip

    @triton.jit
    def ck_not_causal(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM)  # fmt: skip

    @triton.jit
    def ck_acc_not_rescaled(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, RESCALE_ACC=False)  # fmt: skip

    @triton.jit
    def ck_exp2_without_log2e(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, LOG2E=False)  # fmt: skip

    @triton.jit
    def ck_q_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, Q_MASK=False)  # fmt: skip

    @triton.jit
    def ck_kv_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, LOAD_MASK=False)  # fmt: skip

    @triton.jit
    def ck_max_from_zero(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, M_ZERO=True)  # fmt: skip

    @triton.jit
    def ck_block_max(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, RUNNING=False)  # fmt: skip

    @triton.jit
    def ck_no_max(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, MAX=False)  # fmt: skip

    @triton.jit
    def ck_fast_path_without_rescale(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        _attention_with(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale, BLOCK_M,
                        BLOCK_N, HEAD_DIM, RULE=1, HI=1, FAST_PATH_BUG=True)  # fmt: skip

    # ----------------------------------------------------------------------------------------
    # attention kernels: independent bugs
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def akb_p_against_old_max(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], -1e30, tl.float32)  # a large negative number in place of -inf
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, -1e30)
            w = tl.exp(sc - mx[:, None])  # against the maximum before this block
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_block_softmax(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        out = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf"))
            w = tl.exp(sc - tl.max(sc, 1)[:, None])
            out += tl.dot(w / tl.sum(w, 1)[:, None], vv)  # each block's softmax, added up
        tl.store(O + r[:, None] * stride_o + d[None, :], out, mask=r[:, None] < n_queries)

    @triton.jit
    def akb_keys_loaded_with_inf(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=float("-inf"))
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.dot(q, kt) * sm_scale  # -inf keys: their scores are -inf (or NaN)
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_v_with_k_stride(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)  # K's stride
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_unnormalised(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            num = num * tl.exp(mx - mx_new)[:, None] + tl.dot(tl.exp(sc - mx_new[:, None]), vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num, mask=r[:, None] < n_queries)  # never divided by l

    @triton.jit
    def akb_stops_a_block_early(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys - BLOCK_N, BLOCK_N):  # "the last block is handled below" (it is not)
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_weights_masked_not_scores(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                      HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.dot(q, kt) * sm_scale
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.where(c[None, :] < n_keys, tl.exp(sc - mx_new[:, None]), 0.0)  # the weights masked, not the scores
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_max_from_minus_hundred(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], -100.0, tl.float32)  # "lower than any score"
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_first_block_unmasked(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        c = tl.arange(0, BLOCK_N)  # "the first block of keys is always full": it starts the state
        sc = tl.dot(q, tl.load(K + c[None, :] * stride_k + d[:, None])) * sm_scale
        mx = tl.max(sc, 1)
        w = tl.exp(sc - mx[:, None])
        den = tl.sum(w, 1)
        num = tl.dot(w, tl.load(V + c[:, None] * stride_v + d[None, :]))
        for j in range(BLOCK_N, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def akb_max_from_first_block(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        c = tl.arange(0, BLOCK_N)
        k0 = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
        mx = tl.max(tl.where(c[None, :] < n_keys, tl.dot(q, k0) * sm_scale, float("-inf")), 1)  # kept for every block
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            w = tl.exp(tl.where(c[None, :] < n_keys, tl.dot(q, kt) * sm_scale, float("-inf")) - mx[:, None])
            den += tl.sum(w, 1)
            num += tl.dot(w, vv)
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_newest_block_max(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        r = start + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, tl.minimum(start + BLOCK_M, n_keys), BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where((c[None, :] < n_keys) & (c[None, :] <= r[:, None]), tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.max(sc, 1)  # this block's maximum
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_weights_masked_not_scores(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                      HEAD_DIM: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        r = start + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, tl.minimum(start + BLOCK_M, n_keys), BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.dot(q, kt) * sm_scale
            mx_new = tl.maximum(mx, tl.max(sc, 1))  # future keys count in the maximum
            w = tl.where((c[None, :] < n_keys) & (c[None, :] <= r[:, None]), tl.exp(sc - mx_new[:, None]), 0.0)
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_mask_rows_in_block(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        r = start + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, tl.minimum(start + BLOCK_M, n_keys), BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            allowed = (c[None, :] < n_keys) & (c[None, :] <= tl.arange(0, BLOCK_M)[:, None])  # rows counted from 0
            sc = tl.where(allowed, tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_masked_with_zero(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        r = start + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, tl.minimum(start + BLOCK_M, n_keys), BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where((c[None, :] < n_keys) & (c[None, :] <= r[:, None]), tl.dot(q, kt) * sm_scale, 0.0)
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_future_only(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where((c[None, :] < n_keys) & (c[None, :] >= r[:, None]), tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_loop_to_block_n(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        r = start + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, tl.minimum(start + BLOCK_N, n_keys), BLOCK_N):  # BLOCK_N where BLOCK_M was meant
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where((c[None, :] < n_keys) & (c[None, :] <= r[:, None]), tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_sqrt_missing(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        r = start + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, tl.minimum(start + BLOCK_M, n_keys), BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] < n_keys, other=0.0)
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            ok = (c[None, :] < n_keys) & (c[None, :] <= r[:, None])
            sc = tl.where(ok, tl.dot(q, kt) * sm_scale * sm_scale, float("-inf"))  # 1 / head_dim, not 1 / sqrt
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    @triton.jit
    def ckb_keys_loaded_unmasked_outside(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o,
                                         sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                         HEAD_DIM: tl.constexpr):  # fmt: skip
        r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
        mx = tl.full([BLOCK_M], float("-inf"), tl.float32)
        den = tl.zeros([BLOCK_M], tl.float32)
        num = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        for j in range(0, n_keys, BLOCK_N):
            c = j + tl.arange(0, BLOCK_N)
            kt = tl.load(K + c[None, :] * stride_k + d[:, None], mask=c[None, :] <= r[:, None], other=0.0)  # 2-D?
            vv = tl.load(V + c[:, None] * stride_v + d[None, :], mask=c[:, None] < n_keys, other=0.0)
            sc = tl.where(c[None, :] <= r[:, None], tl.dot(q, kt) * sm_scale, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(sc, 1))
            w = tl.exp(sc - mx_new[:, None])
            shrink = tl.exp(mx - mx_new)
            den = den * shrink + tl.sum(w, 1)
            num = num * shrink[:, None] + tl.dot(w, vv)
            mx = mx_new
        tl.store(O + r[:, None] * stride_o + d[None, :], num / den[:, None], mask=r[:, None] < n_queries)

    # ----------------------------------------------------------------------------------------
    # dv_kernel (lesson 08b): correct versions
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def learner_dv_kernel(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                          CAUSAL: tl.constexpr):  # fmt: skip
        start_n = tl.program_id(0) * BLOCK_N
        keys = start_n + tl.arange(0, BLOCK_N)
        dims = tl.arange(0, HEAD_DIM)
        k = tl.load(K + keys[:, None] * stride_k + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        lo = 0
        if CAUSAL:
            lo = start_n  # the first query that sees key start_n; the blocks of queries need not be aligned
        for start_m in range(lo, n_queries, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
            do = tl.load(DO + rows[:, None] * stride_do + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
            lse = tl.load(LSE + rows, mask=rows < n_queries, other=0.0)
            s_t = tl.dot(k, tl.trans(q)) * (sm_scale * 1.4426950408889634) - lse[None, :] * 1.4426950408889634
            if CAUSAL:
                s_t = tl.where(keys[:, None] <= rows[None, :], s_t, float("-inf"))
            dv += tl.dot(tl.exp2(s_t), do)
        tl.store(DV + keys[:, None] * stride_dv + dims[None, :], dv, mask=keys[:, None] < n_keys)

    @triton.jit
    def learner_dv_kernel_every_block(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
                                      sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                      CAUSAL: tl.constexpr):  # fmt: skip
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        k = tl.load(K + offs_n[:, None] * stride_k + offs_d[None, :], mask=offs_n[:, None] < n_keys, other=0.0)
        grad_v = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for start in range(0, n_queries, BLOCK_M):  # every block of queries, the masked ones too
            offs_m = start + tl.arange(0, BLOCK_M)
            ok = offs_m < n_queries
            q = tl.load(Q + offs_m[:, None] * stride_q + offs_d[None, :], mask=ok[:, None], other=0.0)
            do = tl.load(DO + offs_m[:, None] * stride_do + offs_d[None, :], mask=ok[:, None], other=0.0)
            lse = tl.load(LSE + offs_m, mask=ok, other=0.0)
            p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])  # P: (BLOCK_M, BLOCK_N), natural exp
            keep = ok[:, None]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(keep, p, 0.0)
            grad_v += tl.dot(tl.trans(p), do)
        tl.store(DV + offs_n[:, None] * stride_dv + offs_d[None, :], grad_v, mask=offs_n[:, None] < n_keys)

    # ----------------------------------------------------------------------------------------
    # dv_kernel: mutants, each one switch of one kernel
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                 P_RULE: tl.constexpr = 0, SCALED: tl.constexpr = True, LSE_PAD: tl.constexpr = 0.0,
                 TRANSPOSE: tl.constexpr = True, ACCUMULATE: tl.constexpr = True, RULE: tl.constexpr = 1,
                 LOOP: tl.constexpr = 0, MASK_FOR_P: tl.constexpr = False, LAST: tl.constexpr = 0,
                 FAST_PATH_BUG: tl.constexpr = False, EXP_OVER_EXP: tl.constexpr = False):  # fmt: skip
        """P_RULE: 0 lse, 1 a softmax over the tile's keys, 2 lse not in base 2, 3 no log2(e), 4 tl.exp of base 2,
        5 as 1, guarded (0, not NaN, where a query sees none of the tile's keys); RULE: 0 no causal mask, 1 j <= i,
        2 j < i, 3 j <= i + 1; LOOP: 0 from the diagonal's block, 1 every block,
        2 from block number program_id, 3 up to the last key (the forward's bound); LAST: the loop ends at n_queries
        - LAST; FAST_PATH_BUG: sm_scale left out when every block is full; EXP_OVER_EXP: exp(s) / exp(lse)."""
        pid = tl.program_id(0)
        start_n = pid * BLOCK_N
        keys = start_n + tl.arange(0, BLOCK_N)
        dims = tl.arange(0, HEAD_DIM)
        k = tl.load(K + keys[:, None] * stride_k + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        scale = sm_scale
        if not SCALED:
            scale = 1.0
        if FAST_PATH_BUG and (n_queries % BLOCK_M == 0) and (n_keys % BLOCK_N == 0):
            scale = 1.0
        lo = 0
        hi = n_queries - LAST
        if CAUSAL and LOOP == 0:
            lo = (start_n // BLOCK_M) * BLOCK_M
        if CAUSAL and LOOP == 2:
            lo = pid * BLOCK_M
        if CAUSAL and LOOP == 3:
            hi = tl.minimum(start_n + BLOCK_N, n_queries)
        for start_m in range(lo, hi, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
            do = tl.load(DO + rows[:, None] * stride_do + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
            lse = tl.load(LSE + rows, mask=rows < n_queries, other=LSE_PAD)
            s_t = tl.dot(k, tl.trans(q)) * scale  # (BLOCK_N, BLOCK_M)
            allowed = keys[:, None] >= 0
            if CAUSAL:
                if MASK_FOR_P:
                    allowed = (keys[None, :] <= rows[:, None]) & (keys[None, :] >= 0)
                elif RULE == 1:
                    allowed = keys[:, None] <= rows[None, :]
                elif RULE == 2:
                    allowed = keys[:, None] < rows[None, :]
                elif RULE == 3:
                    allowed = keys[:, None] <= rows[None, :] + 1
            if P_RULE == 1:
                s_t = tl.where(allowed & (keys[:, None] < n_keys), s_t, float("-inf"))
                e = tl.exp(s_t - tl.max(s_t, 0)[None, :])
                p_t = e / tl.sum(e, 0)[None, :]
            elif P_RULE == 5:  # the same, guarded: a query that sees none of the tile's keys gets weights 0, not NaN
                s_t = tl.where(allowed & (keys[:, None] < n_keys), s_t, float("-inf"))
                top = tl.max(s_t, 0)
                e = tl.exp(s_t - tl.where(top == float("-inf"), 0.0, top)[None, :])
                total = tl.sum(e, 0)
                p_t = e / tl.where(total > 0, total, 1.0)[None, :]
            elif EXP_OVER_EXP:
                p_t = tl.where(allowed, tl.exp(s_t) / tl.exp(lse)[None, :], 0.0)
            elif P_RULE == 2:
                p_t = tl.where(allowed, tl.exp2(s_t * 1.4426950408889634 - lse[None, :]), 0.0)
            elif P_RULE == 3:
                p_t = tl.where(allowed, tl.exp2(s_t - lse[None, :]), 0.0)
            elif P_RULE == 4:
                p_t = tl.where(allowed, tl.exp(s_t * 1.4426950408889634 - lse[None, :] * 1.4426950408889634), 0.0)
            else:
                p_t = tl.where(allowed, tl.exp2(s_t * 1.4426950408889634 - lse[None, :] * 1.4426950408889634), 0.0)
            if TRANSPOSE:
                contribution = tl.dot(p_t, do)
            else:
                contribution = tl.dot(tl.trans(p_t), do)
            if ACCUMULATE:
                dv += contribution
            else:
                dv = contribution
        tl.store(DV + keys[:, None] * stride_dv + dims[None, :], dv, mask=keys[:, None] < n_keys)

    @triton.jit
    def dv_tile_softmax(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, P_RULE=1)  # fmt: skip

    @triton.jit
    def dv_tile_softmax_guarded(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, P_RULE=5)  # fmt: skip

    @triton.jit
    def dv_lse_natural(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, P_RULE=2)  # fmt: skip

    @triton.jit
    def dv_exp2_without_log2e(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, P_RULE=3)  # fmt: skip

    @triton.jit
    def dv_exp_with_log2e(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, P_RULE=4)  # fmt: skip

    @triton.jit
    def dv_unscaled(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, SCALED=False)  # fmt: skip

    @triton.jit
    def dv_not_transposed(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, TRANSPOSE=False)  # fmt: skip

    @triton.jit
    def dv_not_accumulated(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, ACCUMULATE=False)  # fmt: skip

    @triton.jit
    def dv_padding_lse_minus_inf(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, LSE_PAD=float("-inf"))  # fmt: skip

    @triton.jit
    def dv_not_causal(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, RULE=0, LOOP=1)  # fmt: skip

    @triton.jit
    def dv_strict(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, RULE=2)  # fmt: skip

    @triton.jit
    def dv_one_ahead(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, RULE=3)  # fmt: skip

    @triton.jit
    def dv_forward_bound(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, LOOP=3)  # fmt: skip

    @triton.jit
    def dv_block_number(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, LOOP=2)  # fmt: skip

    @triton.jit
    def dv_mask_built_for_p(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, MASK_FOR_P=True)  # fmt: skip

    @triton.jit
    def dv_last_query_excluded(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, LAST=1)  # fmt: skip

    @triton.jit
    def dv_fast_path_unscaled(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, FAST_PATH_BUG=True)  # fmt: skip

    @triton.jit
    def dv_exp_over_exp(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
            sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        _dv_with(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale, BLOCK_M,
                 BLOCK_N, HEAD_DIM, CAUSAL, EXP_OVER_EXP=True)  # fmt: skip

    # ----------------------------------------------------------------------------------------
    # dv_kernel: independent bugs
    # ----------------------------------------------------------------------------------------

    @triton.jit
    def dvb_softmax_per_tile(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                             CAUSAL: tl.constexpr):  # fmt: skip
        c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for i in range(0, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_do + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            sc = tl.dot(qq, tl.trans(kk)) * sm_scale
            ok = c[None, :] < n_keys
            if CAUSAL:
                ok = ok & (c[None, :] <= r[:, None])
            sc = tl.where(ok, sc, float("-inf"))
            w = tl.exp(sc - tl.max(sc, 1)[:, None])
            w = w / tl.sum(w, 1)[:, None]  # "the softmax, as in the forward"
            out += tl.dot(tl.trans(w), g)
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out, mask=c[:, None] < n_keys)

    @triton.jit
    def dvb_lse_unmasked(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                         CAUSAL: tl.constexpr):  # fmt: skip
        c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for i in range(0, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_do + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            w = tl.exp(tl.dot(kk, tl.trans(qq)) * sm_scale - tl.load(LSE + r)[None, :])  # one number per query: no mask
            if CAUSAL:
                w = tl.where(c[:, None] <= r[None, :], w, 0.0)
            out += tl.dot(w, g)
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out, mask=c[:, None] < n_keys)

    @triton.jit
    def dvb_do_with_q_stride(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                             CAUSAL: tl.constexpr):  # fmt: skip
        c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for i in range(0, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)  # dO "like Q"
            lse = tl.load(LSE + r, mask=r < n_queries, other=0.0)
            w = tl.exp(tl.dot(kk, tl.trans(qq)) * sm_scale - lse[None, :])
            if CAUSAL:
                w = tl.where(c[:, None] <= r[None, :], w, 0.0)
            out += tl.dot(w, g)
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out, mask=c[:, None] < n_keys)

    @triton.jit
    def dvb_scale_on_weights(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                             CAUSAL: tl.constexpr):  # fmt: skip
        c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for i in range(0, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_do + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            lse = tl.load(LSE + r, mask=r < n_queries, other=0.0)
            w = tl.exp(tl.dot(kk, tl.trans(qq)) - lse[None, :]) * sm_scale  # the scale on P, not on the scores
            if CAUSAL:
                w = tl.where(c[:, None] <= r[None, :], w, 0.0)
            out += tl.dot(w, g)
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out, mask=c[:, None] < n_keys)

    @triton.jit
    def dvb_starts_after_diagonal(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
                                  sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                  CAUSAL: tl.constexpr):  # fmt: skip
        first = tl.program_id(0) * BLOCK_N
        c = first + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        start = 0
        if CAUSAL:
            start = (first // BLOCK_M + 1) * BLOCK_M  # "the queries after this block of keys"
        for i in range(start, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_do + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            lse = tl.load(LSE + r, mask=r < n_queries, other=0.0)
            w = tl.exp(tl.dot(kk, tl.trans(qq)) * sm_scale - lse[None, :])
            if CAUSAL:
                w = tl.where(c[:, None] <= r[None, :], w, 0.0)
            out += tl.dot(w, g)
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out, mask=c[:, None] < n_keys)

    @triton.jit
    def dvb_store_unmasked(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                           CAUSAL: tl.constexpr):  # fmt: skip
        c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for i in range(0, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_do + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            lse = tl.load(LSE + r, mask=r < n_queries, other=0.0)
            w = tl.exp(tl.dot(kk, tl.trans(qq)) * sm_scale - lse[None, :])
            if CAUSAL:
                w = tl.where(c[:, None] <= r[None, :], w, 0.0)
            out += tl.dot(w, g)
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out)  # "the padding keys' rows are never read"

    @triton.jit
    def dvb_sums_instead_of_product(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv,
                                    sm_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                    CAUSAL: tl.constexpr):  # fmt: skip
        c = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        d = tl.arange(0, HEAD_DIM)
        kk = tl.load(K + c[:, None] * stride_k + d[None, :], mask=c[:, None] < n_keys, other=0.0)
        out = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
        for i in range(0, n_queries, BLOCK_M):
            r = i + tl.arange(0, BLOCK_M)
            qq = tl.load(Q + r[:, None] * stride_q + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            g = tl.load(DO + r[:, None] * stride_do + d[None, :], mask=r[:, None] < n_queries, other=0.0)
            lse = tl.load(LSE + r, mask=r < n_queries, other=0.0)
            w = tl.exp(tl.dot(kk, tl.trans(qq)) * sm_scale - lse[None, :])
            if CAUSAL:
                w = tl.where(c[:, None] <= r[None, :], w, 0.0)
            out += tl.sum(w, 1)[:, None] * tl.sum(g, 0)[None, :]  # each factor summed on its own
        tl.store(DV + c[:, None] * stride_dv + d[None, :], out, mask=c[:, None] < n_keys)

    CORRECT.update(
        softmax_kernel=[learner_softmax_kernel, learner_softmax_kernel_three_passes, reference_kernel("softmax")],
        attention_kernel=[learner_attention_kernel, learner_attention_kernel_natural_exp,
                          learner_attention_kernel_scaled_q, learner_attention_kernel_scaled_k,
                          reference_kernel("attention")],
        causal_attention_kernel=[learner_causal_attention_kernel, learner_causal_attention_kernel_every_block,
                                 learner_causal_attention_kernel_scaled_q, learner_causal_attention_kernel_scaled_k,
                                 reference_kernel("causal_attention")],
        dv_kernel=[learner_dv_kernel, learner_dv_kernel_every_block, reference_kernel("dv")],
    )  # fmt: skip
    MUTANTS += [
        ("softmax_kernel", sk_no_rescale, "running sum l was not rescaled"),
        ("softmax_kernel", sk_rescale_inverted, "rescaled the wrong way round"),
        ("softmax_kernel", sk_per_block, "each block was normalised on its own"),
        ("softmax_kernel", sk_one_pass, "written in the same pass"),
        ("softmax_kernel", sk_exp2_without_log2e, "without the factor log2(e)"),
        ("softmax_kernel", sk_exp_with_log2e, "then given to tl.exp"),
        ("softmax_kernel", sk_other_zero, "were read as 0"),
        ("softmax_kernel", sk_mask_one_short, "leaves out the last number"),
        ("softmax_kernel", sk_mask_one_long, "one past the last"),
        ("softmax_kernel", sk_no_mask, "needs a mask: `mask=cols < n_cols`"),
        ("softmax_kernel", sk_row_offset_n_cols, "rows are stride_x = "),
        ("softmax_kernel", sk_store_with_stride_x, "rows are stride_y = "),
        (
            "softmax_kernel",
            sk_load_with_stride_y,
            "has a mask on n_cols and row 0 ran it without this: so it is where "
            "the row starts that is off. Rows of X are stride_x = ",
        ),
        ("softmax_kernel", sk_mask_without_start, "needs a mask"),
        ("softmax_kernel", sk_no_max, "maximum was not subtracted"),
        ("softmax_kernel", sk_block_max, "each block's own maximum replaced the running maximum"),
        ("softmax_kernel", sk_first_block_max, "taken from the first block only"),
        ("softmax_kernel", sk_max_from_zero, "did not start at -inf"),
        ("attention_kernel", ak_acc_not_rescaled, "running output acc was not rescaled"),
        ("attention_kernel", ak_l_not_rescaled, "running sum l was not rescaled"),
        ("attention_kernel", ak_nothing_rescaled, "neither l nor acc"),
        ("attention_kernel", ak_exp2_without_log2e, "without the factor log2(e)"),
        ("attention_kernel", ak_exp_with_log2e, "given to tl.exp"),
        ("attention_kernel", ak_unscaled, "not multiplied by sm_scale"),
        ("attention_kernel", ak_padding_weighted, "keys past n_keys got weight"),
        ("attention_kernel", ak_mask_one_short, "leaves out the last key"),
        ("attention_kernel", ak_mask_one_long, "one past the last"),
        ("attention_kernel", ak_kv_unmasked, "needs a mask: `mask=... < n_keys`"),
        ("attention_kernel", ak_k_strides_swapped, "stride used for the wrong axis"),
        ("attention_kernel", ak_max_from_zero, "did not start at -inf"),
        ("attention_kernel", ak_block_max, "each block's own maximum replaced the running maximum"),
        ("attention_kernel", ak_max_before_mask, "before the mask set any of them to -inf: a key past n_keys"),
        ("causal_attention_kernel", ck_strict, "one key too few"),
        ("causal_attention_kernel", ck_one_ahead, "one key too many"),
        ("causal_attention_kernel", ck_diagonal_unmasked, "no mask inside the tiles the diagonal crosses"),
        ("causal_attention_kernel", ck_stops_before_diagonal, "stops before the block"),
        ("causal_attention_kernel", ck_not_causal, "no causal mask at all"),
        ("causal_attention_kernel", ck_acc_not_rescaled, "running output acc was not rescaled"),
        ("causal_attention_kernel", ck_exp2_without_log2e, "without the factor log2(e)"),
        ("dv_kernel", dv_tile_softmax, "a softmax over the tile's keys"),
        ("dv_kernel", dv_tile_softmax_guarded, "a softmax over the tile's keys"),
        ("dv_kernel", dv_lse_natural, "lse was used as it came, in natural units"),
        ("dv_kernel", dv_exp2_without_log2e, "tl.exp2 was used without the factor log2(e)"),
        ("dv_kernel", dv_exp_with_log2e, "and then given to tl.exp"),
        ("dv_kernel", dv_unscaled, "not multiplied by sm_scale"),
        ("dv_kernel", dv_not_transposed, "P was not transposed"),
        ("dv_kernel", dv_not_accumulated, "keeps only the last block of queries"),
        ("dv_kernel", dv_padding_lse_minus_inf, "got infinite weight"),
        ("dv_kernel", dv_not_causal, "no causal mask at all"),
        ("dv_kernel", dv_strict, "one key too few"),
        ("dv_kernel", dv_one_ahead, "one key too many"),
        ("dv_kernel", dv_forward_bound, "the forward's bound, in the wrong direction"),
        ("dv_kernel", dv_block_number, "starts at query block number program_id"),
        ("dv_kernel", dv_mask_built_for_p, "the causal mask was built for P"),
        ("causal_attention_kernel", ck_max_from_zero, "did not start at -inf"),
        ("causal_attention_kernel", ck_block_max, "each block's own maximum replaced the running maximum"),
    ]
    OFF_BY_ONE.update(
        softmax_kernel=(sk_mask_one_long, sk_mask_one_short),
        attention_kernel=(ak_mask_one_long, ak_mask_one_short),
        causal_attention_kernel=(ck_one_ahead, ck_strict),
        dv_kernel=(dv_one_ahead, dv_strict),
    )
    KIND_MUTANTS += [
        ("softmax_kernel", sk_first_block_unmasked, ONE, "past the end of the row"),
        ("softmax_kernel", sk_other_zero, PADDED, "were read as 0"),
        ("softmax_kernel", sk_fast_path_without_rescale, UNPADDED, "no padding"),
        ("softmax_kernel", sk_no_max, LARGE, "maximum was not subtracted"),
        ("attention_kernel", ak_q_unmasked, ONE, "past the last one (n_queries = 1"),
        ("attention_kernel", ak_padding_weighted, PADDED, "keys past n_keys got weight"),
        ("attention_kernel", ak_fast_path_without_rescale, UNPADDED, "differ from the reference"),
        ("attention_kernel", ak_no_max, LARGE, "large inputs"),
        ("causal_attention_kernel", ck_q_unmasked, ONE, "past the last one (n_queries = 1"),
        ("causal_attention_kernel", ck_kv_unmasked, PADDED, "past the last one (n_keys = "),
        ("causal_attention_kernel", ck_fast_path_without_rescale, UNPADDED, "differ from the reference"),
        ("causal_attention_kernel", ck_no_max, LARGE, "large inputs"),
        ("dv_kernel", dv_last_query_excluded, ONE, "except the ones with a batch of one"),
        ("dv_kernel", dv_padding_lse_minus_inf, PADDED, "got infinite weight"),
        ("dv_kernel", dv_fast_path_unscaled, UNPADDED, "except the ones with no padding"),
        ("dv_kernel", dv_exp_over_exp, LARGE, "large inputs"),
    ]
    BUGS += [
        ("softmax_kernel", skb_other_forgotten, "were read as 0"),
        ("softmax_kernel", skb_store_unmasked, "needs a mask: `mask=cols < n_cols`"),
        ("softmax_kernel", skb_last_block_sum_only, GENERIC),
        ("softmax_kernel", skb_sum_not_shifted, GENERIC),
        ("softmax_kernel", skb_ln2_instead_of_log2e, GENERIC),
        ("softmax_kernel", skb_loop_forever, "did not finish"),
        ("softmax_kernel", skb_newest_block_max, "each block's own maximum replaced the running maximum"),
        ("softmax_kernel", skb_max_from_minus_ten, "did not start at -inf"),
        ("softmax_kernel", skb_far_away, "far outside every tensor"),
        ("attention_kernel", akb_p_against_old_max, GENERIC),
        ("attention_kernel", akb_block_softmax, GENERIC),
        ("attention_kernel", akb_keys_loaded_with_inf, GENERIC),
        ("attention_kernel", akb_v_with_k_stride, "another tensor's stride"),
        ("attention_kernel", akb_unnormalised, GENERIC),
        ("attention_kernel", akb_stops_a_block_early, GENERIC),
        ("attention_kernel", akb_weights_masked_not_scores, "before the mask set any of them to -inf"),
        ("attention_kernel", akb_max_from_minus_hundred, "did not start at -inf"),
        ("attention_kernel", akb_first_block_unmasked, "past the last one (n_keys = 12"),
        ("attention_kernel", akb_max_from_first_block, GENERIC),
        ("causal_attention_kernel", ckb_mask_rows_in_block, GENERIC),
        ("causal_attention_kernel", ckb_masked_with_zero, GENERIC),
        ("causal_attention_kernel", ckb_future_only, GENERIC),
        ("causal_attention_kernel", ckb_loop_to_block_n, GENERIC),
        ("causal_attention_kernel", ckb_sqrt_missing, GENERIC),
        ("causal_attention_kernel", ckb_keys_loaded_unmasked_outside, GENERIC),
        ("causal_attention_kernel", ckb_newest_block_max, "each block's own maximum replaced the running maximum"),
        ("causal_attention_kernel", ckb_weights_masked_not_scores, GENERIC),
        ("dv_kernel", dvb_softmax_per_tile, "a softmax over the tile's keys"),
        ("dv_kernel", dvb_lse_unmasked, "past the last one (n_queries = 40"),
        ("dv_kernel", dvb_do_with_q_stride, "another tensor's stride"),
        ("dv_kernel", dvb_scale_on_weights, GENERIC),
        ("dv_kernel", dvb_starts_after_diagonal, GENERIC),
        ("dv_kernel", dvb_store_unmasked, "stored to DV at keys"),
        ("dv_kernel", dvb_sums_instead_of_product, GENERIC),
    ]
