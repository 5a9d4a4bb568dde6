"""The reference kernels of lesson 08's Triton exercises (``attnedu.triton_basics`` says what each computes and runs
them): a row-wise softmax whose rows may be longer than a block, the FlashAttention forward of one head, one
program per block of queries, without and with a causal mask, and the part of its backward that gives dV, one program
per block of keys.

This module imports triton, so nothing imports it at package import: ``attnedu.triton_basics`` loads it on first use,
once per mode (compiled, or under Triton's interpreter). Plain pointer arithmetic only (no block pointers, no tensor
descriptors), so that the same code runs on Triton 3.6 and 3.9; every tensor is row-major with its own row stride.
Each kernel is self-contained (no helper functions): ``compare_on_gpu`` compiles a kernel from its own source.
"""

import triton
import triton.language as tl

# exp(x) = exp2(x * log2(e)): written out in the kernels, which may read only constexpr globals.
# log2(e) = 1.4426950408889634


@triton.jit
def softmax_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """Y[row] = softmax(X[row]) for the row of this program, read BLOCK numbers at a time: a first pass keeps the
    running maximum m and the running sum l of exp(x - m) (the online softmax), a second writes exp(x - m) / l."""
    row = tl.program_id(0)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    m = tl.full([1], float("-inf"), tl.float32)  # running maximum
    l = tl.zeros([1], tl.float32)  # running sum of exp(x - m)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))  # past the end: -inf, weight 0
        m_new = tl.maximum(m, tl.max(x, 0))
        l = l * tl.exp2((m - m_new) * 1.4426950408889634) + tl.sum(tl.exp2((x - m_new) * 1.4426950408889634), 0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(y_row + cols, tl.exp2((x - m) * 1.4426950408889634) / l, mask=cols < n_cols)


@triton.jit
def attention_kernel(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    """O = softmax(Q K^T * sm_scale) V for one head, one program per block of BLOCK_M queries, looping over the
    keys BLOCK_N at a time with the online softmax (exp2, the running maximum, the rescale of l and acc)."""
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)  # the queries of this program
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running maximum, in base 2
    l = tl.zeros([BLOCK_M], tl.float32)  # running sum
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # unnormalised output
    qk_scale = sm_scale * 1.4426950408889634  # scores in base 2, for exp2
    for start_n in range(0, n_keys, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
        v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
        s = tl.where(keys[None, :] < n_keys, tl.dot(q, k_t) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)  # rescale of the old sum and output
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m = m_new
    tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)


@triton.jit
def causal_attention_kernel(Q, K, V, O, n_queries, n_keys, stride_q, stride_k, stride_v, stride_o, sm_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    """``attention_kernel`` with query i attending keys 0..i: key blocks after the block's last query are skipped,
    and inside the blocks the diagonal crosses, the keys after each query get score -inf."""
    start_m = tl.program_id(0) * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for start_n in range(0, tl.minimum(start_m + BLOCK_M, n_keys), BLOCK_N):  # no block wholly in the future
        keys = start_n + tl.arange(0, BLOCK_N)
        k_t = tl.load(K + keys[None, :] * stride_k + dims[:, None], mask=keys[None, :] < n_keys, other=0.0)
        v = tl.load(V + keys[:, None] * stride_v + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
        allowed = (keys[None, :] < n_keys) & (keys[None, :] <= rows[:, None])  # key j <= query i
        s = tl.where(allowed, tl.dot(q, k_t) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m = m_new
    tl.store(O + rows[:, None] * stride_o + dims[None, :], acc / l[:, None], mask=rows[:, None] < n_queries)


@triton.jit
def dv_kernel(Q, K, DO, LSE, DV, n_queries, n_keys, stride_q, stride_k, stride_do, stride_dv, sm_scale,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr):  # fmt: skip
    """dV = P^T dO for one head, one program per block of BLOCK_N keys (keys outside), looping over the queries
    BLOCK_M at a time: P^T is rebuilt from the log-sum-exp the forward saved (natural log, one per query),
    P_ij = exp(s_ij * sm_scale - lse_i) = exp2(s_ij * sm_scale * log2(e) - lse_i * log2(e)). With CAUSAL, key j is seen
    by queries i >= j only: the loop starts at the query block that holds query start_n, and masks inside the blocks
    the diagonal crosses."""
    start_n = tl.program_id(0) * BLOCK_N
    keys = start_n + tl.arange(0, BLOCK_N)  # the keys of this program
    dims = tl.arange(0, HEAD_DIM)
    k = tl.load(K + keys[:, None] * stride_k + dims[None, :], mask=keys[:, None] < n_keys, other=0.0)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # scores in base 2
    lo = 0
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M  # the query blocks before it see none of these keys
    for start_m in range(lo, n_queries, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q = tl.load(Q + rows[:, None] * stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        do = tl.load(DO + rows[:, None] * stride_do + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)
        lse = tl.load(LSE + rows, mask=rows < n_queries, other=0.0) * 1.4426950408889634  # base 2
        p_t = tl.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])  # P^T: (BLOCK_N, BLOCK_M)
        if CAUSAL:
            p_t = tl.where(keys[:, None] <= rows[None, :], p_t, 0.0)  # key j <= query i
        dv += tl.dot(p_t, do)  # padding queries add 0: their dO rows were loaded as 0
    tl.store(DV + keys[:, None] * stride_dv + dims[None, :], dv, mask=keys[:, None] < n_keys)
