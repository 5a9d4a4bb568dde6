"""FlashAttention in PyTorch (lesson 08): the same attention as lesson 04, computed one tile at a time so
that the (query_len, key_len) score matrix never exists in memory.

    naive_attention    softmax(Q K^T / sqrt(head_dim)) V, with the whole score matrix S in memory
    online_softmax     softmax over the last axis, read one block of keys at a time (Milakov and Gimelshein 2018);
                       online_softmax_blocks yields the running maximum and sum after each block
    block_update       one tile of the FlashAttention forward: the online softmax carried into the output
    causal_tiles       which tiles a causal tiled pass computes, and which of those need the mask
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

Each public function checks its arguments in one call at its top (the checks are in ``attnedu._validate_flash``),
then computes; the tiled passes call the unchecked pieces (``_update``, ``_forward``, ``_backward``) themselves.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

import torch

from ._validate_flash import (
    check_attention_flops,
    check_block_update,
    check_causal_block_update,
    check_causal_tiles,
    check_merge_softmax_states,
    check_naive_attention,
    check_online_softmax,
    check_scores_bytes,
    check_tile_backward,
    check_tiled_attention,
    check_tiled_attention_backward,
)
from .masks import _causal_block

# Chosen by a sweep of block sizes from 128 x 128 to 1024 x 1024 on the course's 2-core CPU (torch 2.13, float32,
# batch 1, 8 heads, N = 4096, head_dim 64): 256 x 512 was the fastest. Larger query blocks amortise Python's cost per
# tile; a tile of heads x 256 x 512 float32 scores (4 MiB for 8 heads) stays small next to the N x N matrix.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 512
BACKWARD_ORDERS = ("key", "query")
# The tiled passes compute e^x as 2^(x log2 e): the scores are scaled by log2(e) with 1/sqrt(head_dim), once per
# query block, and torch.exp2 replaces torch.exp, as FlashAttention-2's kernels (and the course's Triton kernel) do.
# The same numbers; on the course's CPU (torch 2.13, float32) torch.exp2 took a fifth of torch.exp's time on a tile.
LOG2_E = math.log2(math.e)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are accumulated in float32, as FlashAttention's kernels do."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def naive_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, is_causal: bool = False):
    """softmax(Q K^T / sqrt(head_dim)) V, the whole (query_len, key_len) score matrix at once (lesson 04).

    query (batch, heads, query_len, head_dim), key (batch, heads, key_len, head_dim),
    value (batch, heads, key_len, value_dim) -> (batch, heads, query_len, value_dim), in query's dtype.
    Its memory grows as query_len x key_len: S and P each hold batch * heads * query_len * key_len numbers.
    """
    check_naive_attention(query, key, value, is_causal)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # S: (..., query_len, key_len)
    if is_causal:
        allowed = _causal_block(0, query.shape[-2], 0, key.shape[-2], device=query.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value  # P V


def online_softmax_blocks(scores: torch.Tensor, block_size: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """The online softmax's running state, after each block of ``block_size`` scores along the last axis:
    yields (end, m, l), where ``end`` is how many scores have been read, m (...,) the running maximum and
    l (...,) the running sum of exp(s - m), rescaled by exp(m_old - m_new) whenever the maximum grows.
    Computed in float32 (float64 for float64 scores). scores: (..., n)."""
    check_online_softmax(scores, block_size)
    work = scores.to(_compute_dtype(scores.dtype))
    m = torch.full(work.shape[:-1], float("-inf"), dtype=work.dtype, device=work.device)  # running max
    l = torch.zeros(work.shape[:-1], dtype=work.dtype, device=work.device)  # running sum of exp(s - m)
    for start in range(0, work.shape[-1], block_size):
        block = work[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(dim=-1)  # rescale, then add
        m = m_new
        yield start + block.shape[-1], m, l


def online_softmax(scores: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(scores, dim=-1), computed by reading the last axis ``block_size`` entries at a time.

    Pass 1 keeps only the running maximum m and the running sum l (``online_softmax_blocks``); pass 2 writes
    exp(s - m) / l. Equal to ``torch.softmax(scores, dim=-1)``. scores: (..., n) -> (..., n).
    """
    _, m, l = deque(online_softmax_blocks(scores, block_size), maxlen=1)[0]  # the state after the last block
    work = scores.to(m.dtype)
    return (torch.exp(work - m[..., None]) / l[..., None]).to(scores.dtype)


def _flatten(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(..., seq_len, dim) -> (batch * heads, seq_len, dim) in ``dtype``."""
    return x.reshape(-1, *x.shape[-2:]).to(dtype)


def causal_tiles(query_len: int, block_q: int, block_k: int, key_len: int | None = None):
    """Which tiles a causal tiled pass computes, and which of those need the mask: ``(compute, masked)``, each
    (query_blocks, key_blocks) bool. Query i may attend key j when j <= i (top-left aligned, as ``is_causal``).

    Tile (i, j) holds queries i*block_q .. min((i+1)*block_q, query_len) - 1 and keys j*block_k ..
    min((j+1)*block_k, key_len) - 1 (key_len defaults to query_len). It is computed when its first key is not
    after its last query (else every pair in it is in the future), and masked when, in addition, its last key is
    after its first query (the diagonal crosses it); the tiles below the diagonal need no mask at all.
    """
    key_len = check_causal_tiles(query_len, block_q, block_k, key_len)
    return _causal_tiles(query_len, block_q, block_k, key_len)


def _causal_tiles(query_len: int, block_q: int, block_k: int, key_len: int):
    q_first = torch.arange(0, query_len, block_q)
    q_last = (q_first + block_q).clamp(max=query_len) - 1
    k_first = torch.arange(0, key_len, block_k)
    k_last = (k_first + block_k).clamp(max=key_len) - 1
    compute = k_first[None, :] <= q_last[:, None]
    return compute, compute & (k_last[None, :] > q_first[:, None])


def _tiles(query_len: int, key_len: int, block_q: int, block_k: int, is_causal: bool):
    """(compute, masked) for every (query block, key block): all computed and none masked without a causal mask."""
    if is_causal:
        return _causal_tiles(query_len, block_q, block_k, key_len)
    shape = (-(-query_len // block_q), -(-key_len // block_k))
    return torch.ones(shape, dtype=torch.bool), torch.zeros(shape, dtype=torch.bool)


def block_update(m, l, acc, q_block, k_block, v_block, allowed=None, *, scale=None):
    """One tile of the FlashAttention forward, for one block of queries and one block of keys: the running
    maximum m (..., block_q), the running sum l (..., block_q) and the unnormalised output acc
    (..., block_q, value_dim), carried over one more tile. With s = Q_i K_j^T * scale (scale 1/sqrt(head_dim) by
    default; pass 1.0 for queries already scaled):

        m_new = max(m, rowmax(s));  P = exp(s - m_new);  alpha = exp(m - m_new)
        l_new = alpha * l + rowsum(P);  acc_new = alpha * acc + P V_j

    q_block (..., block_q, head_dim), k_block (..., block_k, head_dim), v_block (..., block_k, value_dim);
    allowed: None, or bool (True = may attend) broadcastable to (..., block_q, block_k), e.g. (block_k,) for keys
    past the end of the sequence or (block_q, block_k) for the causal diagonal. Returns (m_new, l_new, acc_new);
    the inputs are not modified. A row whose keys are all blocked keeps its state, once m is finite.
    """
    scale = check_block_update(m, l, acc, q_block, k_block, v_block, allowed, scale)
    return _update(m, l, acc, q_block, k_block, v_block, allowed, scale)


def _update(m, l, acc, q_block, k_block, v_block, allowed, scale, in_place: bool = False, base2: bool = False):
    """block_update on checked inputs; ``in_place`` overwrites l and acc (the tiled forward owns them); ``base2``:
    the scores, and m, are in units of log2 (the queries were scaled by log2 e too), and 2^x replaces e^x."""
    scores = q_block @ k_block.transpose(-2, -1)  # one tile of scores: (..., block_q, block_k)
    scale = 1.0 / math.sqrt(q_block.shape[-1]) if scale is None else scale
    if scale != 1.0:
        scores *= scale
    if allowed is not None:
        scores.masked_fill_(~allowed, float("-inf"))
    m_new = torch.maximum(m, scores.amax(dim=-1))
    exp, exp_ = (torch.exp2, torch.Tensor.exp2_) if base2 else (torch.exp, torch.Tensor.exp_)
    alpha = exp(m - m_new)  # <= 1: re-expresses l and acc, summed against m, against m_new
    p = exp_(scores.sub_(m_new[..., None]))  # in place: the tile's memory is reused for P
    if not in_place:
        l, acc = l.clone(), acc.clone()
    l.mul_(alpha).add_(p.sum(dim=-1))
    acc.mul_(alpha[..., None])
    if p.dim() == 3:  # (batch * heads, block_q, block_k): the product added in one fused call
        acc.baddbmm_(p, v_block)
    else:
        acc.add_(p @ v_block)
    return m_new, l, acc


def tiled_attention_forward(query, key, value, *, is_causal=False, block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K):
    """The FlashAttention forward: ``(output, lse)``, never holding more than one (block_q, block_k) tile of
    scores per (batch, head).

    For each block of queries Q_i: start with m = -inf, l = 0, acc = 0; for each block of keys K_j (in order),
    ``block_update``; then O_i = acc / l is the output and lse = m + log(l) the log-sum-exp of each query's
    scores. With ``is_causal``, the tiles wholly above the diagonal are skipped and only those it crosses are
    masked (``causal_tiles``). Computed in base 2 (``LOG2_E``): m in units of log2, 2^x for e^x, and
    lse = (m + log2 l) ln 2.
    Returns output (..., query_len, value_dim) in query's dtype and lse (..., query_len) in float32
    (float64 for float64 inputs).
    """
    block_q, block_k = check_tiled_attention(query, key, value, is_causal, block_q, block_k)
    return _forward(query, key, value, is_causal, block_q, block_k)


def _forward(query, key, value, is_causal: bool, block_q: int, block_k: int):
    lead, (n_q, head_dim), (n_k, value_dim) = query.shape[:-2], query.shape[-2:], value.shape[-2:]
    work = _compute_dtype(query.dtype)
    scale = 1.0 / math.sqrt(head_dim)
    q, k, v = _flatten(query, work), _flatten(key, work), _flatten(value, work)  # (batch * heads, seq, dim)
    out = torch.empty(q.shape[0], n_q, value_dim, dtype=work, device=q.device)
    lse = torch.empty(q.shape[0], n_q, dtype=work, device=q.device)
    compute, masked = _tiles(n_q, n_k, block_q, block_k, is_causal)
    for i, q_start in enumerate(range(0, n_q, block_q)):
        q_end = min(q_start + block_q, n_q)
        q_block = q[:, q_start:q_end] * (scale * LOG2_E)  # scaled once here, not in every tile; scores in log2 units
        m = torch.full((q.shape[0], q_end - q_start), float("-inf"), dtype=work, device=q.device)  # running max
        l = torch.zeros_like(m)  # running sum
        acc = torch.zeros(q.shape[0], q_end - q_start, value_dim, dtype=work, device=q.device)  # unnormalised O
        for j, k_start in enumerate(range(0, n_k, block_k)):
            if not compute[i, j]:
                break  # with a causal mask, every later key block is wholly in the future
            k_end = min(k_start + block_k, n_k)
            allowed = _causal_block(q_start, q_end, k_start, k_end, device=q.device) if masked[i, j] else None
            m, l, acc = _update(m, l, acc, q_block, k[:, k_start:k_end], v[:, k_start:k_end], allowed, 1.0, True, True)
        out[:, q_start:q_end] = acc / l[..., None]
        lse[:, q_start:q_end] = (m + torch.log2(l)) / LOG2_E  # back to natural log: ln x = log2 x / log2 e
    return out.reshape(*lead, n_q, value_dim).to(query.dtype), lse.reshape(*lead, n_q)


def tiled_attention_backward(query, key, value, out, lse, grad_out, *, is_causal=False,
                             block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K, order="key"):  # fmt: skip
    """Gradients (d_query, d_key, d_value) of tiled attention by recomputation: every tile of P is rebuilt
    from the saved log-sum-exp, P = exp(Q_i K_j^T / sqrt(head_dim) - lse_i), instead of being stored (computed as
    2^(x log2 e), as the forward, ``LOG2_E``).

    out and lse are what ``tiled_attention_forward`` returned for these inputs; grad_out has out's shape.
    With D_i = rowsum(dO_i * O_i) (one number per query):
        dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P * (dP - D_i)
        dQ_i += dS K_j / sqrt(head_dim);  dK_j += dS^T Q_i / sqrt(head_dim)

    ``order`` is which loop is outside. "key" (FlashAttention's backward since the first paper, Dao et al. 2022,
    Algorithm 4, kept by FlashAttention-2, which runs the key blocks in parallel): for each key block K_j, every
    query block; dK_j and dV_j are complete when its loop ends (on a GPU they never leave the chip) and dQ is
    added to from every key block (read-modify-written in HBM, or atomic additions when key blocks run at once).
    "query" (the forward's order): dQ_i is complete at the end of each outer step, and dK and dV are added to
    instead. Both compute the same tiles and the same gradients.
    """
    block_q, block_k = check_tiled_attention_backward(query, key, value, out, lse, grad_out, is_causal, block_q,
                                                      block_k, order, BACKWARD_ORDERS)  # fmt: skip
    return _backward(query, key, value, out, lse, grad_out, is_causal, block_q, block_k, order)


def _backward(query, key, value, out, lse, grad_out, is_causal: bool, block_q: int, block_k: int, order: str = "key"):
    n_q, head_dim, n_k = query.shape[-2], query.shape[-1], key.shape[-2]
    work = _compute_dtype(query.dtype)
    scale = 1.0 / math.sqrt(head_dim)
    q, k, v = _flatten(query, work), _flatten(key, work), _flatten(value, work)
    o, do = _flatten(out, work), _flatten(grad_out, work)
    lse2 = lse.reshape(-1, n_q, 1).to(work) * LOG2_E  # the log-sum-exp in log2 units: P = 2^(s log2 e - lse2)
    d_row = (do * o).sum(dim=-1, keepdim=True)  # D_i: (batch * heads, query_len, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    compute, masked = _tiles(n_q, n_k, block_q, block_k, is_causal)
    q_blocks = [slice(start, min(start + block_q, n_q)) for start in range(0, n_q, block_q)]
    k_blocks = [slice(start, min(start + block_k, n_k)) for start in range(0, n_k, block_k)]

    def tile(i: int, j: int) -> None:
        """Tile (i, j): P rebuilt from the log-sum-exp, dS = P * (dO V^T - D), and their three products added."""
        qs, ks = q_blocks[i], k_blocks[j]
        s = torch.bmm(q[:, qs], k[:, ks].transpose(1, 2)).mul_(scale * LOG2_E)  # the scores, in log2 units
        if masked[i, j]:
            s.masked_fill_(~_causal_block(qs.start, qs.stop, ks.start, ks.stop, device=s.device), float("-inf"))
        p = s.sub_(lse2[:, qs]).exp2_()  # the softmax tile, exp(s - lse) = 2^((s - lse) log2 e), in the scores' memory
        ds = torch.bmm(do[:, qs], v[:, ks].transpose(1, 2)).sub_(d_row[:, qs]).mul_(p)  # dS = P * (dP - D)
        dv[:, ks] += torch.bmm(p.transpose(1, 2), do[:, qs])  # dV_j += P^T dO_i
        dk[:, ks] += torch.bmm(ds.transpose(1, 2), q[:, qs]).mul_(scale)  # dK_j += dS^T Q_i / sqrt(head_dim)
        dq[:, qs] += torch.bmm(ds, k[:, ks]).mul_(scale)  # dQ_i += dS K_j / sqrt(head_dim)

    if order == "key":  # FlashAttention-2: a key block outside, its dK_j and dV_j finished before the next block
        for j in range(len(k_blocks)):
            for i in range(len(q_blocks)):
                if compute[i, j]:  # causal: the query blocks before the diagonal see nothing of key block j
                    tile(i, j)
    else:  # a query block outside, as the forward pass: dQ_i finished first, dK and dV added to from every block
        for i in range(len(q_blocks)):
            for j in range(len(k_blocks)):
                if not compute[i, j]:
                    break  # with a causal mask, every later key block is wholly in the future
                tile(i, j)
    return (dq.reshape(query.shape).to(query.dtype), dk.reshape(key.shape).to(key.dtype),
            dv.reshape(value.shape).to(value.dtype))  # fmt: skip


class TiledAttention(torch.autograd.Function):
    """Tiled attention with a backward by recomputation: it saves the inputs, the output and the log-sum-exp
    (one number per query), never a (query_len, key_len) matrix. Its inputs are checked by ``tiled_attention``."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, block_q, block_k):
        out, lse = _forward(query, key, value, is_causal, block_q, block_k)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.options = (is_causal, block_q, block_k)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        grads = _backward(query, key, value, out, lse, grad_out, *ctx.options)
        return (*grads, None, None, None)


def tiled_attention(query, key, value, *, is_causal=False, block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K):
    """FlashAttention in PyTorch: equal to ``torch.nn.functional.scaled_dot_product_attention(query, key, value,
    is_causal=is_causal)`` for any lengths (not only multiples of the blocks), in O(block_q * block_k) extra
    memory per (batch, head) instead of O(query_len * key_len).

    query (batch, heads, query_len, head_dim), key (batch, heads, key_len, head_dim),
    value (batch, heads, key_len, value_dim) -> (batch, heads, query_len, value_dim), in query's dtype
    (bfloat16 and float16 are accumulated in float32). Differentiable: the backward recomputes each tile.
    """
    block_q, block_k = check_tiled_attention(query, key, value, is_causal, block_q, block_k)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (query, key, value)):
        return TiledAttention.apply(query, key, value, is_causal, block_q, block_k)
    return _forward(query, key, value, is_causal, block_q, block_k)[0]


def attention_flops(batch: int, heads: int, n_q: int, n_k: int, head_dim: int, causal: bool = False) -> int:
    """Forward FLOPs of attention, the convention of the FlashAttention papers: two matrix products, Q K^T and
    P V, each n_q * n_k * head_dim multiply-adds per (batch, head), and a multiply-add is 2 FLOPs, so
    4 * n_q * n_k * head_dim FLOPs per (batch, head); halved when causal (only half the pairs are needed).
    Softmax is not counted. A backward pass is counted as 2.5 times the forward (forward + backward: 3.5 times)."""
    check_attention_flops(batch, heads, n_q, n_k, head_dim, causal)
    flops = 4 * batch * heads * n_q * n_k * head_dim
    return flops // 2 if causal else flops


def scores_bytes(batch: int, heads: int, n_q: int, n_k: int, bytes_per_number: int) -> int:
    """Bytes of one (batch, heads, n_q, n_k) score matrix: what naive attention allocates for S (and again for P)."""
    check_scores_bytes(batch, heads, n_q, n_k, bytes_per_number)
    return batch * heads * n_q * n_k * bytes_per_number


# ------------------------------------------------------------------------------------------------------------
# Pieces of the algorithm on their own (lesson 08's exercises): merging two partial softmax states (split-K,
# flash-decoding), the causal mask inside one tile, and the backward of one tile from the saved log-sum-exp
# ------------------------------------------------------------------------------------------------------------


def _safe_max(m: torch.Tensor) -> torch.Tensor:
    """m where it is finite, 0 where it is -inf (a query that has seen no key): exp(s - 0) = exp(-inf) = 0 there, and
    exp(m - m) never becomes exp(-inf - -inf) = NaN."""
    return torch.where(m == float("-inf"), torch.zeros_like(m), m)


def merge_softmax_states(m1, l1, o1, m2, l2, o2):
    """Combine the softmax states of the same queries over two disjoint sets of keys into the state over all of
    them, as split-K / flash-decoding does after computing each set of keys in its own program.

    A state over a set of keys B, per query: its maximum score m = max_{j in B} s_j, the sum l = sum_j exp(s_j - m),
    and the unnormalised output o = sum_j exp(s_j - m) v_j (the running state of ``block_update`` after B). Then

        m = max(m1, m2);   l = exp(m1 - m) l1 + exp(m2 - m) l2;   o = exp(m1 - m) o1 + exp(m2 - m) o2

    and softmax(s) V over all the keys is o / l, their log-sum-exp m + log(l). A state over no keys at all is
    m = -inf, l = 0, o = 0: it adds nothing, and two of them merge into another (never NaN).
    m1, l1, m2, l2 (...,); o1, o2 (..., value_dim) -> (m, l, o) with the same shapes. The inputs are not modified.
    """
    check_merge_softmax_states(m1, l1, o1, m2, l2, o2)
    m = torch.maximum(m1, m2)
    safe = _safe_max(m)
    alpha1, alpha2 = torch.exp(m1 - safe), torch.exp(m2 - safe)  # <= 1 each; one of them is 1 (unless both empty)
    return m, alpha1 * l1 + alpha2 * l2, alpha1[..., None] * o1 + alpha2[..., None] * o2


def causal_block_update(m, l, acc, q_block, k_block, v_block, q_start, k_start, *, scale=None):
    """``block_update`` for a tile of a causal pass, with the mask built inside the tile from its positions: the
    queries of q_block are at positions q_start, q_start + 1, ... and the keys of k_block at k_start, k_start + 1, ...
    (counted from 0 in the whole sequence), and query i may attend key j when j <= i.

    With s = Q K^T * scale (1/sqrt(head_dim) by default) and s_ij = -inf where key j is after query i:

        m_new = max(m, rowmax(s));  P = exp(s - m_new);  alpha = exp(m - m_new)
        l_new = alpha * l + rowsum(P);  acc_new = alpha * acc + P V

    except that a query that has seen no key yet, here or before (m_new = -inf), keeps m = -inf, l = 0, acc = 0
    instead of exp(-inf - -inf) = NaN: that happens when a tile starts after some of its queries, e.g. the first tile
    of a split that begins in the middle of the sequence.
    m, l (..., block_q), acc (..., block_q, value_dim), q_block (..., block_q, head_dim), k_block (..., block_k,
    head_dim), v_block (..., block_k, value_dim) -> (m_new, l_new, acc_new). The inputs are not modified.
    """
    q_start, k_start, scale = check_causal_block_update(m, l, acc, q_block, k_block, v_block, q_start, k_start, scale)
    scale = 1.0 / math.sqrt(q_block.shape[-1]) if scale is None else scale
    block_q, block_k = q_block.shape[-2], k_block.shape[-2]
    allowed = _causal_block(q_start, q_start + block_q, k_start, k_start + block_k, device=q_block.device)
    scores = (q_block @ k_block.transpose(-2, -1) * scale).masked_fill(~allowed, float("-inf"))
    m_new = torch.maximum(m, scores.amax(dim=-1))
    safe = _safe_max(m_new)
    p = torch.exp(scores - safe[..., None])
    alpha = torch.exp(m - safe)
    return m_new, alpha * l + p.sum(dim=-1), alpha[..., None] * acc + p @ v_block


def tile_backward(q_block, k_block, v_block, do_block, lse, D, *, scale=None):
    """The backward of one tile (a block of queries against a block of keys), from what the forward saved: the
    contributions ``(dq, dk, dv)`` of this tile to the gradients of Q, K and V.

    lse (..., block_q) is each query's log-sum-exp over ALL its keys (from the forward), so P is rebuilt exactly, and
    D (..., block_q) is rowsum(dO * O), computed once per query before the tiles:

        S = Q K^T * scale;  P = exp(S - lse);  dV = P^T dO;  dP = dO V^T;  dS = P * (dP - D)
        dQ = dS K * scale;  dK = dS^T Q * scale

    (scale 1/sqrt(head_dim) by default). Summed over the key blocks, the dQ contributions are the gradient of the
    query block; summed over the query blocks, dK and dV those of the key block.
    q_block (..., block_q, head_dim), k_block (..., block_k, head_dim), v_block (..., block_k, value_dim),
    do_block (..., block_q, value_dim) -> dq (..., block_q, head_dim), dk (..., block_k, head_dim),
    dv (..., block_k, value_dim).
    """
    scale = check_tile_backward(q_block, k_block, v_block, do_block, lse, D, scale)
    scale = 1.0 / math.sqrt(q_block.shape[-1]) if scale is None else scale
    p = torch.exp(q_block @ k_block.transpose(-2, -1) * scale - lse[..., None])  # the softmax tile, rebuilt
    dv = p.transpose(-2, -1) @ do_block
    ds = p * (do_block @ v_block.transpose(-2, -1) - D[..., None])
    return ds @ k_block * scale, ds.transpose(-2, -1) @ q_block * scale, dv
