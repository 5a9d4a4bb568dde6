"""FlashAttention in PyTorch (lesson 08): the same attention as lesson 04, computed one tile at a time so
that the (query_len, key_len) score matrix never exists in memory.

    naive_attention    softmax(Q K^T / sqrt(head_dim)) V, with the whole score matrix S in memory
    online_softmax     softmax over the last axis, read one block of keys at a time (Milakov and Gimelshein 2018)
    tiled_attention    the FlashAttention forward (Dao et al. 2022, 2023), and a backward by recomputation
    attention_flops    the FLOP count every benchmark of the course uses

Shapes: ``query`` is (batch, heads, query_len, head_dim), ``key`` (batch, heads, key_len, head_dim) and
``value`` (batch, heads, key_len, value_dim); any number of leading dimensions works, as long as the
three tensors share them. ``is_causal=True`` means query i may attend to keys 0..i, counted from the top
left, as in ``torch.nn.functional.scaled_dot_product_attention``.

The online softmax, for one row of scores s_1..s_n read in blocks: keep a running maximum m and a running
sum l = sum_j exp(s_j - m). When a block B arrives,

    m_new = max(m, max_{j in B} s_j)
    l_new = exp(m - m_new) * l + sum_{j in B} exp(s_j - m_new)          (the rescale of the old sum)
    o_new = exp(m - m_new) * o + sum_{j in B} exp(s_j - m_new) v_j      (the same rescale for the output)

and at the end softmax(s) V = o / l. The log-sum-exp m + log(l) is all the backward pass needs to
rebuild any tile of the softmax: P_ij = exp(s_ij - lse_i).
"""

from __future__ import annotations

import math

import torch

from ._validate import check_float, check_min_dims, check_positive_int, describe

# Chosen by a sweep of block sizes from 128 x 128 to 1024 x 1024 on the course's 2-core CPU (torch 2.13, float32,
# batch 1, 8 heads, N = 4096, head_dim 64): 256 x 512 was the fastest. Larger query blocks amortise Python's cost per
# tile; a tile of heads x 256 x 512 float32 scores (4 MiB for 8 heads) stays small next to the N x N matrix.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 512
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
SHAPE_DOC = "(batch, heads, seq_len, head_dim)"


def _check_qkv(query, key, value) -> None:
    for name, x in (("query", query), ("key", key), ("value", value)):
        check_min_dims(name, x, 2, SHAPE_DOC)
        check_float(name, x)
        if x.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {x.dtype}; use one of float32, bfloat16, float16, float64")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}; "
            "convert with .to(query.dtype)"
        )
    if not (query.device == key.device == value.device):
        devices = f"{query.device}, {key.device}, {value.device}"
        raise ValueError(f"query, key and value must be on one device, got {devices}; move them with .to(query.device)")
    if not (query.dim() == key.dim() == value.dim()) or not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        raise ValueError(
            f"query, key and value must share their leading dimensions (batch, heads), got query {describe(query)}, "
            f"key {describe(key)}, value {describe(value)}; nothing is broadcast: expand or repeat them first"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same head_dim (last dimension) to be multiplied, got {query.shape[-1]} and "
            f"{key.shape[-1]}; did you pass (batch, seq_len, heads, head_dim)? Transpose to {SHAPE_DOC}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same key_len (dimension -2), got {key.shape[-2]} and {value.shape[-2]}: "
            "every key needs its value"
        )
    if min(query.shape[-2], key.shape[-2]) == 0:
        raise ValueError(f"query_len and key_len must be at least 1, got {query.shape[-2]} and {key.shape[-2]}")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are accumulated in float32, as FlashAttention's kernels do."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def naive_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, is_causal: bool = False):
    """softmax(Q K^T / sqrt(head_dim)) V, the whole (query_len, key_len) score matrix at once (lesson 04).

    query (batch, heads, query_len, head_dim), key (batch, heads, key_len, head_dim),
    value (batch, heads, key_len, value_dim) -> (batch, heads, query_len, value_dim), in query's dtype.
    Its memory grows as query_len x key_len: S and P each hold batch * heads * query_len * key_len numbers.
    """
    _check_qkv(query, key, value)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # S: (..., query_len, key_len)
    if is_causal:
        allowed = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value  # P V


def online_softmax(scores: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(scores, dim=-1), computed by reading the last axis ``block_size`` entries at a time.

    Pass 1 keeps only the running maximum m and the running sum l (rescaled by exp(m_old - m_new) whenever
    the maximum grows); pass 2 writes exp(s - m) / l. Equal to ``torch.softmax(scores, dim=-1)``.
    scores: (..., n) -> (..., n).
    """
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {describe(scores)}")
    check_float("scores", scores)
    check_positive_int("block_size", block_size, "how many scores to read at a time")
    if scores.dim() == 0 or scores.shape[-1] == 0:
        raise ValueError(f"scores need a last dimension of length at least 1, got {describe(scores)}")
    work = scores.to(_compute_dtype(scores.dtype))
    m = torch.full(work.shape[:-1], float("-inf"), dtype=work.dtype, device=work.device)  # running max
    l = torch.zeros(work.shape[:-1], dtype=work.dtype, device=work.device)  # running sum of exp(s - m)
    for start in range(0, work.shape[-1], block_size):
        block = work[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)  # rescale, then add
        m = m_new
    return (torch.exp(work - m[..., None]) / l[..., None]).to(scores.dtype)


def _flatten(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(..., seq_len, dim) -> (batch * heads, seq_len, dim) in ``dtype``."""
    return x.reshape(-1, *x.shape[-2:]).to(dtype)


def _block_sizes(block_q, block_k) -> tuple[int, int]:
    check_positive_int("block_q", block_q, "queries per tile")
    check_positive_int("block_k", block_k, "keys per tile")
    return block_q, block_k


def _last_key(q_end: int, key_len: int, is_causal: bool) -> int:
    """Keys from this index on are never read by queries before ``q_end``: with a causal mask, the tiles
    wholly above the diagonal (every key index > every query index) are skipped without being computed."""
    return min(key_len, q_end) if is_causal else key_len


def _causal_fill(scores: torch.Tensor, q_start: int, k_start: int) -> None:
    """Set to -inf, in place, the scores of keys after their query, in a tile that crosses the diagonal."""
    rows = torch.arange(q_start, q_start + scores.shape[-2], device=scores.device)[:, None]
    cols = torch.arange(k_start, k_start + scores.shape[-1], device=scores.device)[None, :]
    scores.masked_fill_(cols > rows, float("-inf"))


def tiled_attention_forward(query, key, value, *, is_causal=False, block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K):
    """The FlashAttention forward: ``(output, lse)``, never holding more than one (block_q, block_k) tile of
    scores per (batch, head).

    For each block of queries Q_i, for each block of keys K_j (in order), with s = Q_i K_j^T / sqrt(head_dim):
        m_new = max(m, rowmax(s));  P = exp(s - m_new);  alpha = exp(m - m_new)
        l = alpha * l + rowsum(P);  O = alpha * O + P V_j;  m = m_new
    then O / l is the output and lse = m + log(l) the log-sum-exp of each query's scores.
    Returns output (..., query_len, value_dim) in query's dtype and lse (..., query_len) in float32
    (float64 for float64 inputs).
    """
    _check_qkv(query, key, value)
    block_q, block_k = _block_sizes(block_q, block_k)
    lead, (n_q, head_dim), (n_k, value_dim) = query.shape[:-2], query.shape[-2:], value.shape[-2:]
    work = _compute_dtype(query.dtype)
    scale = 1.0 / math.sqrt(head_dim)
    q, k, v = _flatten(query, work), _flatten(key, work), _flatten(value, work)  # (batch * heads, seq, dim)
    k_t = k.transpose(1, 2)  # (batch * heads, head_dim, key_len): read in column blocks, never copied
    out = torch.empty(q.shape[0], n_q, value_dim, dtype=work, device=q.device)
    lse = torch.empty(q.shape[0], n_q, dtype=work, device=q.device)
    for q_start in range(0, n_q, block_q):
        q_end = min(q_start + block_q, n_q)
        q_block = q[:, q_start:q_end] * scale
        m = torch.full((q.shape[0], q_end - q_start, 1), float("-inf"), dtype=work, device=q.device)  # running max
        l = torch.zeros_like(m)  # running sum
        acc = torch.zeros(q.shape[0], q_end - q_start, value_dim, dtype=work, device=q.device)  # unnormalised O
        for k_start in range(0, _last_key(q_end, n_k, is_causal), block_k):
            k_end = min(k_start + block_k, n_k)
            s = torch.bmm(q_block, k_t[:, :, k_start:k_end])  # one tile of scores: (batch * heads, bq, bk)
            if is_causal and k_end - 1 > q_start:  # the tile crosses the diagonal
                _causal_fill(s, q_start, k_start)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            alpha = torch.exp(m - m_new)  # <= 1: re-expresses l and O, summed against m, against m_new
            p = s.sub_(m_new).exp_()  # in place: the tile's memory is reused for P
            l.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
            acc.mul_(alpha).baddbmm_(p, v[:, k_start:k_end])
            m = m_new
            del s, p  # free this tile before the next one is allocated: one tile alive at a time
        out[:, q_start:q_end] = acc / l
        lse[:, q_start:q_end] = (m + torch.log(l)).squeeze(-1)
    return out.reshape(*lead, n_q, value_dim).to(query.dtype), lse.reshape(*lead, n_q)


def tiled_attention_backward(query, key, value, out, lse, grad_out, *, is_causal=False,
                             block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K):  # fmt: skip
    """Gradients (d_query, d_key, d_value) of tiled attention by recomputation: every tile of P is rebuilt
    from the saved log-sum-exp, P = exp(Q_i K_j^T / sqrt(head_dim) - lse_i), instead of being stored.

    With D_i = rowsum(dO_i * O_i) (one number per query):
        dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P * (dP - D_i)
        dQ_i += dS K_j / sqrt(head_dim);  dK_j += dS^T Q_i / sqrt(head_dim)
    """
    block_q, block_k = _block_sizes(block_q, block_k)
    n_q, head_dim, n_k = query.shape[-2], query.shape[-1], key.shape[-2]
    work = _compute_dtype(query.dtype)
    scale = 1.0 / math.sqrt(head_dim)
    q, k, v = _flatten(query, work), _flatten(key, work), _flatten(value, work)
    o, do = _flatten(out, work), _flatten(grad_out, work)
    lse = lse.reshape(-1, n_q, 1).to(work)
    d_row = (do * o).sum(dim=-1, keepdim=True)  # D_i: (batch * heads, query_len, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for q_start in range(0, n_q, block_q):
        q_end = min(q_start + block_q, n_q)
        q_block, do_block = q[:, q_start:q_end], do[:, q_start:q_end]
        for k_start in range(0, _last_key(q_end, n_k, is_causal), block_k):
            k_end = min(k_start + block_k, n_k)
            s = torch.bmm(q_block, k[:, k_start:k_end].transpose(1, 2)) * scale
            if is_causal and k_end - 1 > q_start:
                _causal_fill(s, q_start, k_start)
            p = torch.exp(s - lse[:, q_start:q_end])  # the softmax tile, rebuilt
            dv[:, k_start:k_end] += p.transpose(1, 2) @ do_block
            ds = p * (do_block @ v[:, k_start:k_end].transpose(1, 2) - d_row[:, q_start:q_end])
            dq[:, q_start:q_end] += ds @ k[:, k_start:k_end] * scale
            dk[:, k_start:k_end] += ds.transpose(1, 2) @ q_block * scale
    return (dq.reshape(query.shape).to(query.dtype), dk.reshape(key.shape).to(key.dtype),
            dv.reshape(value.shape).to(value.dtype))  # fmt: skip


class TiledAttention(torch.autograd.Function):
    """Tiled attention with a backward by recomputation: it saves the inputs, the output and the log-sum-exp
    (one number per query), never a (query_len, key_len) matrix."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, block_q, block_k):
        out, lse = tiled_attention_forward(query, key, value, is_causal=is_causal, block_q=block_q, block_k=block_k)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.options = {"is_causal": is_causal, "block_q": block_q, "block_k": block_k}
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        grads = tiled_attention_backward(query, key, value, out, lse, grad_out, **ctx.options)
        return (*grads, None, None, None)


def tiled_attention(query, key, value, *, is_causal=False, block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K):
    """FlashAttention in PyTorch: equal to ``torch.nn.functional.scaled_dot_product_attention(query, key, value,
    is_causal=is_causal)`` for any lengths (not only multiples of the blocks), in O(block_q * block_k) extra
    memory per (batch, head) instead of O(query_len * key_len).

    query (batch, heads, query_len, head_dim), key (batch, heads, key_len, head_dim),
    value (batch, heads, key_len, value_dim) -> (batch, heads, query_len, value_dim), in query's dtype
    (bfloat16 and float16 are accumulated in float32). Differentiable: the backward recomputes each tile.
    """
    _check_qkv(query, key, value)
    _block_sizes(block_q, block_k)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be True or False, got {is_causal!r}")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value)):
        return TiledAttention.apply(query, key, value, is_causal, block_q, block_k)
    return tiled_attention_forward(query, key, value, is_causal=is_causal, block_q=block_q, block_k=block_k)[0]


def attention_flops(batch: int, heads: int, n_q: int, n_k: int, head_dim: int, causal: bool = False) -> int:
    """Forward FLOPs of attention, the convention of the FlashAttention papers: two matrix products
    (Q K^T and P V), each 2 * n_q * n_k * head_dim multiply-adds counted as 2 FLOPs, so 4 * n_q * n_k * head_dim
    per (batch, head); halved when causal (only half the pairs are needed). Softmax is not counted.
    (A backward pass is counted as 2.5 times this.)"""
    for name, value in (("batch", batch), ("heads", heads), ("n_q", n_q), ("n_k", n_k), ("head_dim", head_dim)):
        check_positive_int(name, value, "a size")
    flops = 4 * batch * heads * n_q * n_k * head_dim
    return flops // 2 if causal else flops


def scores_bytes(batch: int, heads: int, n_q: int, n_k: int, bytes_per_number: int) -> int:
    """Bytes of one (batch, heads, n_q, n_k) score matrix: what naive attention allocates for S (and again for P)."""
    for name, value in (("batch", batch), ("heads", heads), ("n_q", n_q), ("n_k", n_k)):
        check_positive_int(name, value, "a size")
    check_positive_int("bytes_per_number", bytes_per_number, "2 for bfloat16/float16, 4 for float32")
    return batch * heads * n_q * n_k * bytes_per_number
