"""The Triton kernels of ``attnedu.triton_attention``: FlashAttention-2's forward and its backward (D = rowsum(dO * O);
dK and dV per block of keys, which also adds dQ with atomics when ATOMIC_DQ; dQ per block of queries). Read
``attnedu.triton_attention`` first: it says what each computes, chooses their launch configurations and wraps them in
an autograd function.

This module imports triton, so it is not imported by the package: ``attnedu.triton_attention`` loads it on first
use, once per mode (compiled, or under Triton's interpreter when ``TRITON_INTERPRET=1``), since Triton reads that
setting when ``@triton.jit`` decorates a function. Plain pointer arithmetic (no block pointers, which Triton 3.9
removed), so that the same code runs on Triton 3.6 and 3.9; the forward can also read and write through tensor
descriptors (``tl.make_tensor_descriptor``, TMA on sm_90), where ``attnedu.triton_attention`` chooses to.
"""

import triton
import triton.language as tl

# Constants are written out in the kernels (a kernel may read only constexpr globals): log2(e) = 1.4426950408889634
# turns a natural-log log-sum-exp into base 2, ln(2) = 0.6931471805599453 turns it back.


@triton.jit
def _load(ptrs, row_ok, col_ok, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """A tile, with the bound checks a caller asks for (rows past the sequence, columns past head_dim); masked
    entries read 0. Checks not asked for cost nothing: the masks passed are then never computed."""
    if CHECK_ROWS:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=row_ok & col_ok, other=0.0)
        else:
            x = tl.load(ptrs, mask=row_ok, other=0.0)
    else:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=col_ok, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _forward_tiles(
    acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    rows, lo, hi, n_k, head_dim, value_dim, qk_scale,
    MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """Key blocks lo, lo + BLOCK_N, ... < hi into the running (acc, l, m) of one block of queries. MASKED: the
    blocks the diagonal crosses, or past the last key; otherwise every (query, key) pair is valid. USE_TMA: k_base
    and v_base are tensor descriptors of this head's K and V (the tiles are copied by the GPU's tensor memory
    accelerator, zeros past n_k and head_dim); otherwise pointers to them."""
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + cols
        if USE_TMA:
            k_t = tl.trans(k_base.load([start_n, 0]))
        else:
            k_t = _load(  # K^T tile: (BLOCK_D, BLOCK_N)
                k_base + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                keys[None, :] < n_k, dims[:, None] < head_dim, MASKED, PAD_D,
            )  # fmt: skip
        s = tl.dot(q, k_t)  # S = Q_i K_j^T: (BLOCK_M, BLOCK_N) raw scores, float32
        if MASKED:
            valid = keys[None, :] < n_k
            if IS_CAUSAL:
                valid = valid & (keys[None, :] <= rows[:, None])
            s = tl.where(valid, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # a row that has seen no valid key yet keeps m = -inf: subtract 0 instead, so that exp2(-inf - -inf)
            # does not make a NaN (exp2(-inf - 0) = 0 keeps its sum and output at 0)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(s - m_use[:, None])
            alpha = tl.exp2(m_i - m_use)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # qk_scale > 0: scale the row maxima, not the tile
            p = tl.exp2(s * qk_scale - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)  # rescale of the old sum and output
        l_i = l_i * alpha + tl.sum(p, 1)
        if USE_TMA:
            v = v_base.load([start_n, 0])
        else:
            v = _load(
                v_base + keys[:, None] * stride_vn + vdims[None, :] * stride_vd,
                keys[:, None] < n_k, vdims[None, :] < value_dim, MASKED, PAD_DV,
            )  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # O_i += P V_j, P cast to V's dtype as in FA2
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_forward_kernel(
    Q, K, V, O, LSE,  # Q (batch, heads, n_q, head_dim), K and V (batch, heads, n_k, dim), LSE (batch, heads, n_q)
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    heads, n_q, n_k, head_dim, value_dim,
    qk_scale,  # 1 / sqrt(head_dim) * log2(e): scores in base 2
    SEQ_BUCKET,  # not read: the autotuning key
    IS_CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program per (block of BLOCK_M queries, batch x head). USE_TMA: Q, K, V and O are read and written through
    tensor descriptors (TMA, sm_90 and later; the caller checks their alignment), else by pointers."""
    block_m = tl.program_id(0)  # which block of queries
    if IS_CAUSAL:  # heaviest first: the last query blocks, which loop over the most key blocks, are launched first
        block_m = tl.num_programs(0) - 1 - block_m
    batch_head = tl.program_id(1)  # which (batch, head)
    batch, head = (batch_head // heads).to(tl.int64), (batch_head % heads).to(tl.int64)
    start_m = block_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)  # query indices of this program
    dims = tl.arange(0, BLOCK_D)  # head_dim, padded to a power of two
    vdims = tl.arange(0, BLOCK_DV)

    q_base = Q + batch * stride_qb + head * stride_qh
    k_base = K + batch * stride_kb + head * stride_kh
    v_base = V + batch * stride_vb + head * stride_vh
    if USE_TMA:  # this head's matrices as tensor descriptors: whole tiles copied, zeros past the edges
        q = tl.make_tensor_descriptor(q_base, [n_q, head_dim], [stride_qm, 1], [BLOCK_M, BLOCK_D]).load([start_m, 0])
        k_base = tl.make_tensor_descriptor(k_base, [n_k, head_dim], [stride_kn, 1], [BLOCK_N, BLOCK_D])
        v_base = tl.make_tensor_descriptor(v_base, [n_k, value_dim], [stride_vn, 1], [BLOCK_N, BLOCK_DV])
    else:
        q = _load(q_base + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                  rows[:, None] < n_q, dims[None, :] < head_dim, True, PAD_D)  # fmt: skip

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base 2)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)  # unnormalised output
    full_end = (n_k // BLOCK_N) * BLOCK_N  # key blocks before this lie wholly inside the keys
    if IS_CAUSAL:  # stage 1 ends at the first key block that reaches this program's first query
        mid = tl.minimum((start_m // BLOCK_N) * BLOCK_N, full_end)
        hi = tl.minimum(start_m + BLOCK_M, n_k)  # key blocks wholly above the diagonal are never visited
    else:
        mid = full_end
        hi = n_k
    acc, l_i, m_i = _forward_tiles(  # stage 1: every pair valid, no mask
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd, rows, 0, mid, n_k,
        head_dim, value_dim, qk_scale, False, IS_CAUSAL, USE_TMA, PAD_D, PAD_DV, BLOCK_N, BLOCK_D, BLOCK_DV,
    )  # fmt: skip
    acc, l_i, m_i = _forward_tiles(  # stage 2: the diagonal blocks and the last, partial block, masked
        acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd, rows, mid, hi, n_k,
        head_dim, value_dim, qk_scale, True, IS_CAUSAL, USE_TMA, PAD_D, PAD_DV, BLOCK_N, BLOCK_D, BLOCK_DV,
    )  # fmt: skip
    acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a row with no valid key at all: 0, not NaN
    o_base = O + batch * stride_ob + head * stride_oh
    if USE_TMA:  # rows past n_q and columns past value_dim are not written
        o_desc = tl.make_tensor_descriptor(o_base, [n_q, value_dim], [stride_om, 1], [BLOCK_M, BLOCK_DV])
        o_desc.store([start_m, 0], acc.to(O.dtype.element_ty))
    else:
        o_ptrs = o_base + rows[:, None] * stride_om + vdims[None, :] * stride_od
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=(rows[:, None] < n_q) & (vdims[None, :] < value_dim))
    # natural-log log-sum-exp per query, what the backward needs: (m + log2 l) * ln(2)
    tl.store(LSE + batch_head.to(tl.int64) * n_q + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453,
             mask=rows < n_q)  # fmt: skip


@triton.jit
def attention_backward_delta_kernel(
    O, DO, DELTA,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_gb, stride_gh, stride_gm, stride_gd,
    heads, n_q, value_dim,
    BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """D_i = rowsum(dO_i * O_i), float32, (batch * heads, n_q)."""
    batch_head = tl.program_id(1)
    batch, head = (batch_head // heads).to(tl.int64), (batch_head % heads).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    vdims = tl.arange(0, BLOCK_DV)
    ok = (rows[:, None] < n_q) & (vdims[None, :] < value_dim)
    o = tl.load(O + batch * stride_ob + head * stride_oh + rows[:, None] * stride_om + vdims[None, :] * stride_od,
                mask=ok, other=0.0)  # fmt: skip
    do = tl.load(DO + batch * stride_gb + head * stride_gh + rows[:, None] * stride_gm + vdims[None, :] * stride_gd,
                 mask=ok, other=0.0)  # fmt: skip
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + batch_head.to(tl.int64) * n_q + rows, delta, mask=rows < n_q)


@triton.jit
def _dkdv_tiles(
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base,
    stride_qm, stride_qd, stride_gm, stride_gd, stride_dqm, stride_dqd,
    keys, lo, hi, n_q, head_dim, value_dim, qk_scale,
    MASKED: tl.constexpr, ATOMIC_DQ: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """Query blocks lo, lo + BLOCK_M, ... < hi into dK and dV of one block of keys, transposed (keys x queries)
    so that the key block stays in place. MASKED: the blocks the causal diagonal crosses. Query rows past n_q
    read Q = dO = 0 and lse = D = 0, so they add exactly 0 (P^T dO = 0 and dS = P * (0 - 0) = 0).
    ATOMIC_DQ: also add this tile's dS K_j (unscaled) into the float32 dQ buffer at dq_base with atomic adds, so
    that no separate dQ pass is needed; the rows past n_q are masked out of the store."""
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    for start_m in range(lo, hi, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        row_ok = rows < n_q
        q = _load(q_base + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
                  row_ok[:, None], dims[None, :] < head_dim, True, PAD_D)  # fmt: skip
        lse = tl.load(lse_base + rows, mask=row_ok, other=0.0) * 1.4426950408889634  # base 2
        p_t = tl.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])  # S^T = K_j Q_i^T: the scores, recomputed
        if MASKED:
            p_t = tl.where(keys[:, None] <= rows[None, :], p_t, 0.0)
        do = _load(do_base + rows[:, None] * stride_gm + vdims[None, :] * stride_gd,
                   row_ok[:, None], vdims[None, :] < value_dim, True, PAD_DV)  # fmt: skip
        dv += tl.dot(p_t.to(do.dtype), do)  # dV_j += P^T dO_i
        delta = tl.load(delta_base + rows, mask=row_ok, other=0.0)
        dp_t = tl.dot(v, tl.trans(do))  # dP^T = V_j dO_i^T
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk += tl.dot(ds_t, q)  # dK_j += dS^T Q_i
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t), k)  # dQ_i += dS K_j, added to float32 dQ by atomics
            tl.atomic_add(dq_base + rows[:, None] * stride_dqm + dims[None, :] * stride_dqd, dq,
                          mask=row_ok[:, None] & (dims[None, :] < head_dim), sem="relaxed")  # fmt: skip
    return dk, dv


@triton.jit
def attention_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, DQ,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gm, stride_gd,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    heads, n_q, n_k, head_dim, value_dim,
    qk_scale, sm_scale,
    SEQ_BUCKET,  # not read: the autotuning key
    IS_CAUSAL: tl.constexpr, ATOMIC_DQ: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program per (block of BLOCK_N keys, batch x head), the first key blocks (which, causal, meet the most
    query blocks) launched first: dK and dV of those keys; with ATOMIC_DQ, also their
    share of dQ, added into DQ (float32, zeroed by the caller, unscaled: the caller multiplies by sm_scale). Without
    it DQ is not touched."""
    batch_head = tl.program_id(1)
    batch, head = (batch_head // heads).to(tl.int64), (batch_head % heads).to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    keys = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    key_ok = keys[:, None] < n_k
    k = _load(K + batch * stride_kb + head * stride_kh + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
              key_ok, dims[None, :] < head_dim, True, PAD_D)  # fmt: skip
    v = _load(V + batch * stride_vb + head * stride_vh + keys[:, None] * stride_vn + vdims[None, :] * stride_vd,
              key_ok, vdims[None, :] < value_dim, True, PAD_DV)  # fmt: skip
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
    q_base = Q + batch * stride_qb + head * stride_qh
    do_base = DO + batch * stride_gb + head * stride_gh
    lse_base = LSE + batch_head.to(tl.int64) * n_q
    delta_base = DELTA + batch_head.to(tl.int64) * n_q
    dq_base = DQ + batch * stride_dqb + head * stride_dqh
    if IS_CAUSAL:
        # queries before start_n see none of these keys: start at the query block holding start_n. Query blocks
        # from the first multiple of BLOCK_M at or past start_n + BLOCK_N see all of them: no mask there.
        lo = (start_n // BLOCK_M) * BLOCK_M
        mid = tl.minimum(((start_n + BLOCK_N + BLOCK_M - 1) // BLOCK_M) * BLOCK_M, n_q)
    else:
        lo = 0
        mid = 0
    dk, dv = _dkdv_tiles(  # the diagonal blocks, masked
        dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, stride_qm, stride_qd, stride_gm, stride_gd,
        stride_dqm, stride_dqd, keys, lo, mid, n_q, head_dim, value_dim, qk_scale, True, ATOMIC_DQ, PAD_D, PAD_DV,
        BLOCK_M, BLOCK_D, BLOCK_DV,
    )  # fmt: skip
    dk, dv = _dkdv_tiles(  # the blocks below the diagonal (all of them when not causal), no mask
        dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, stride_qm, stride_qd, stride_gm, stride_gd,
        stride_dqm, stride_dqd, keys, mid, n_q, n_q, head_dim, value_dim, qk_scale, False, ATOMIC_DQ, PAD_D, PAD_DV,
        BLOCK_M, BLOCK_D, BLOCK_DV,
    )  # fmt: skip
    dk = dk * sm_scale  # dS was computed from scores without 1 / sqrt(head_dim)'s derivative: apply it once
    tl.store(DK + batch * stride_dkb + head * stride_dkh + keys[:, None] * stride_dkn + dims[None, :] * stride_dkd,
             dk.to(DK.dtype.element_ty), mask=key_ok & (dims[None, :] < head_dim))  # fmt: skip
    tl.store(DV + batch * stride_dvb + head * stride_dvh + keys[:, None] * stride_dvn + vdims[None, :] * stride_dvd,
             dv.to(DV.dtype.element_ty), mask=key_ok & (vdims[None, :] < value_dim))  # fmt: skip


@triton.jit
def _dq_tiles(
    dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
    rows, lo, hi, n_k, head_dim, value_dim, qk_scale,
    MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
):  # fmt: skip
    """Key blocks lo, lo + BLOCK_N, ... < hi into dQ of one block of queries. MASKED: as in the forward."""
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + cols
        k = _load(k_base + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
                  keys[:, None] < n_k, dims[None, :] < head_dim, MASKED, PAD_D)  # fmt: skip
        v = _load(v_base + keys[:, None] * stride_vn + vdims[None, :] * stride_vd,
                  keys[:, None] < n_k, vdims[None, :] < value_dim, MASKED, PAD_DV)  # fmt: skip
        p = tl.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])  # S = Q_i K_j^T: the scores, recomputed again
        if MASKED:
            valid = keys[None, :] < n_k
            if IS_CAUSAL:
                valid = valid & (keys[None, :] <= rows[:, None])
            p = tl.where(valid, p, 0.0)
        dp = tl.dot(do, tl.trans(v))  # dP = dO_i V_j^T, computed again
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)  # dQ_i += dS K_j
    return dq


@triton.jit
def attention_backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_gb, stride_gh, stride_gm, stride_gd,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    heads, n_q, n_k, head_dim, value_dim,
    qk_scale, sm_scale,
    SEQ_BUCKET,  # not read: the autotuning key
    IS_CAUSAL: tl.constexpr, PAD_D: tl.constexpr, PAD_DV: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    """One program per (block of BLOCK_M queries, batch x head): dQ of those queries. Query rows past n_q read
    Q = dO = 0 and lse = D = 0, so their (unstored) dQ is all that they touch."""
    batch_head = tl.program_id(1)
    batch, head = (batch_head // heads).to(tl.int64), (batch_head % heads).to(tl.int64)
    block_m = tl.program_id(0)
    if IS_CAUSAL:  # heaviest first, as in the forward
        block_m = tl.num_programs(0) - 1 - block_m
    start_m = block_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    vdims = tl.arange(0, BLOCK_DV)
    row_ok = rows < n_q
    q = _load(Q + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qm + dims[None, :] * stride_qd,
              row_ok[:, None], dims[None, :] < head_dim, True, PAD_D)  # fmt: skip
    do = _load(DO + batch * stride_gb + head * stride_gh + rows[:, None] * stride_gm + vdims[None, :] * stride_gd,
               row_ok[:, None], vdims[None, :] < value_dim, True, PAD_DV)  # fmt: skip
    lse = tl.load(LSE + batch_head.to(tl.int64) * n_q + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + batch_head.to(tl.int64) * n_q + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    k_base = K + batch * stride_kb + head * stride_kh
    v_base = V + batch * stride_vb + head * stride_vh
    full_end = (n_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:  # the same two stages as the forward
        mid = tl.minimum((start_m // BLOCK_N) * BLOCK_N, full_end)
        hi = tl.minimum(start_m + BLOCK_M, n_k)
    else:
        mid = full_end
        hi = n_k
    dq = _dq_tiles(
        dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd, rows, 0, mid, n_k,
        head_dim, value_dim, qk_scale, False, IS_CAUSAL, PAD_D, PAD_DV, BLOCK_N, BLOCK_D, BLOCK_DV,
    )  # fmt: skip
    dq = _dq_tiles(
        dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd, rows, mid, hi, n_k,
        head_dim, value_dim, qk_scale, True, IS_CAUSAL, PAD_D, PAD_DV, BLOCK_N, BLOCK_D, BLOCK_DV,
    )  # fmt: skip
    dq = dq * sm_scale
    tl.store(DQ + batch * stride_dqb + head * stride_dqh + rows[:, None] * stride_dqm + dims[None, :] * stride_dqd,
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None] & (dims[None, :] < head_dim))  # fmt: skip
