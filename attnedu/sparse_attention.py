"""Sparse selection (lesson 13, "Sparse selection"): each query reads only some of the keys before it, and which ones
it reads is chosen from the data. Three rules, one causal self-attention, vectors as rows; shapes q, k (B, H, N, d),
v (B, H, N, d_v); positions count from 0; query i may only ever read keys j <= i.

    sliding window (the baseline; attnedu.masks.sliding_window_mask):   read j with i - window <= j <= i

    MoBA, block top-k (Lu et al. 2025, "MoBA: Mixture of Block Attention for Long-Context LLMs"):
        cut the keys into blocks of block_size; block b's representative is its mean key  kbar_b = mean_{j in b} k_j
        block score  s_{i,b} = q_i . kbar_b  for the blocks b before query i's own block (MoBA's paper: its gate)
        read  query i's own block (always, with the causal mask inside it)  +  the top_k - 1 earlier blocks of
              largest s_{i,b}; a block after query i's is never read.  top_k counts the own block.

    DSA, the lightning indexer's token top-k (DeepSeek-V3.2-Exp, "DeepSeek Sparse Attention", eq. 1-2):
        I_{t,s} = sum_{j=1}^{H_I} w_{t,j} ReLU(q^I_{t,j} . k^I_s)       H_I small indexer heads, one key k^I_s per token
        read  the top_k keys s <= t of largest I_{t,s} (all of them while t + 1 <= top_k); every head of the
              attention reads the same tokens (one selection per token, as in the reference's MQA mode).

Then  o_i = sum_{j read by i} softmax_j(q_i . k_j / sqrt(d)) v_j,  the softmax over the keys read only. When the
selection covers every block (top_k >= the number of blocks) or every token (top_k >= N), or the window every earlier
position (window >= N - 1), each is dense causal attention: the tests assert it in float64.

What is followed (read before writing):
    MoBA   MoonshotAI/MoBA, moba/moba_naive.py, ``moba_attn_varlen_naive``: the score is q . mean(K_block) (unscaled);
           blocks with keys after the query get -inf and the query's own block +inf before ``torch.topk(k=min(topk,
           num_block))``, so top_k counts the own block; the last block may be shorter (ceil(N / block_size)
           blocks, its mean over the keys it has); the causal mask is applied to the token mask afterwards (tril).
    DSA    deepseek-ai/DeepSeek-V3.2-Exp, inference/model.py, ``Indexer.forward`` and ``MLA.forward``, and
           inference/kernel.py, ``fp8_index_kernel``: sum over indexer heads of ReLU(q . k) times the head's weight;
           the weights fold in H_I^-0.5 and d_I^-0.5 (here: whatever ``weights`` holds; top-k does not see a positive
           scale); the causal mask is added to the index scores before ``topk(min(index_topk, end_pos))`` and again
           to the attention scores, so a short prefix reads fewer than top_k keys and never a future one. Their
           sizes: H_I = 64 indexer heads of d_I = 128, top_k = 2048 (inference/config_671B_v3.2.json). Left out
           here: RoPE on part of the indexer's q and k, the Hadamard rotation and FP8 quantisation, the KV cache.

Counts (``SparseCounts``, totals over batch and heads). ``scores`` is the number of attention scores q_i . k_j
computed (one per key read), against ``dense_scores`` = N(N+1)/2 per sequence and head for dense causal attention.
``selection_scores`` is what choosing cost: MoBA's block scores q_i . kbar_b over the earlier blocks, DSA's H_I dot
products per query and earlier token, 0 for the window. ``kv_bytes`` counts, per query, the bytes of K and V read for
its scores ((d + d_v) x element size per key read) plus the bytes the selection read (a mean key, d numbers, per block
score; an indexer key, d_I numbers, per query and earlier token, once for all heads), against ``dense_kv_bytes``.
Keys and values are counted per head (multi-head attention; DeepSeek's MLA in its MQA mode reads one latent per token
for all heads). The indexer is what keeps DSA's fraction of bytes above zero at any length: with equal element sizes
it tends to d_I / (H (d + d_v)) as N grows, whatever top_k.

What NSA adds (Yuan et al. 2025, "Native Sparse Attention: Hardware-Aligned and Natively Trainable Sparse
Attention", arXiv:2502.11089; its attention is not implemented here, only what it reads): three branches per query,
mixed by gates g in [0, 1] computed from the input:  o_t = g_cmp Attn(q_t, compressed K/V) + g_slc Attn(q_t, selected
blocks) + g_win Attn(q_t, sliding window). The compressed branch turns each block of l consecutive keys, the blocks
taken every d <= l positions, into one key by a learned MLP (a learned MoBA mean); the selected branch reads the top n
blocks of l' keys, scored from the compressed branch's own attention probabilities, so choosing costs no extra dot
products; the window branch reads the last w keys. The paper's sizes: l = 32, d = 16, l' = 64, n = 16, w = 512
(``NSA_SIZES``, its section 4.1; the first block and the 2 most recent are always among the n), in a 27B-parameter
mixture-of-experts model (3B active) pretrained on 270B tokens (260B in the paper's introduction). Each 64-key block is
scored by the compressed attention its overlapping summaries got, summed over the query heads of a GQA group, so the
group reads one set of blocks. ``nsa_decoding_keys`` counts the keys one decoding step's attention reads with those
sizes (the paper's Table 4 sums the same three parts: 5,632 against 65,536 at 64k tokens, an expected speed-up of
11.6x for memory-bound decoding attention); its Triton attention kernels measured 9.0x (forward) and 6.0x (backward)
against Triton FlashAttention-2 at 64k on A100s (its Figure 6). The gated sum as written by the paper and by the
implementations that follow it: NVIDIA cuDNN's NSA frontend, flash-linear-attention's ``naive_nsa`` (which
mean-pools the compressed keys and shares one K/V across the branches).

The retrieval task (``retrieval_task``, lesson 13's experiments): N keys on the unit sphere in runs of ``passage``
consecutive tokens that share a topic direction t_p,  k_j = normalise(c t_p(j) + sqrt(1 - c^2) u_j)  with t, u random
unit vectors and c = ``topic`` (c = 0: every key unrelated to its neighbours); values v_j ~ N(0, I). The last
``asked`` positions ask for a key written more than ``window`` positions earlier:
q_i = s sqrt(d) normalise(k_a + noise g / sqrt(d)) with g ~ N(0, I), so that q_i . k_j / sqrt(d) = s cos(q_i, k_j)
(s = ``sharpness``); every other position's query is a random direction of the same length (it asks nothing, but it
is computed and counted). The built query stands in for what a trained
head's query projection learns: to point at the key of the token it needs (lesson 10's recall). The indexer's inputs
are a random projection of the same q and k to ``index_dim`` numbers, one indexer head of weight 1: a random
projection P (d x d_I, entries N(0, 1 / d_I)) keeps dot products on average (E[P P^T] = I), standing in for the small
projections DeepSeek trains. ``retrieval_recall``: the share of the asked positions whose output is nearer (Euclidean)
to the right value than to any other of the N values.

Each public function checks its arguments in one call (the checks are at the end of this module), then the math.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ._validate import (
    check_float,
    check_int,
    check_number,
    check_positive_int,
    check_same_dtype,
    check_tensor,
    describe,
)
from .masks import _causal_block, _sliding_window_mask


class SparseCounts(NamedTuple):
    """What one sparse attention call computed and read (totals over batch and heads), against dense causal attention
    on the same inputs. See the module docstring for what each count includes."""

    scores: int
    dense_scores: int
    selection_scores: int
    kv_bytes: int
    dense_kv_bytes: int

    @property
    def scores_fraction(self) -> float:
        """Attention scores computed / dense causal attention's (the selection's own scores not included)."""
        return self.scores / self.dense_scores

    @property
    def kv_bytes_fraction(self) -> float:
        """Bytes of K/V read, the selection's reads included / dense causal attention's."""
        return self.kv_bytes / self.dense_kv_bytes


class SparseAttention(NamedTuple):
    """output (B, H, N, d_v); selected: MoBA (B, H, N, num_blocks) bool, block b read by query i; DSA (B, N, N) bool,
    token s read by query t (every head); window (N, N) bool; keys_read (B, H, N, N) bool, key j read by query i
    (causal mask applied); counts: SparseCounts."""

    output: torch.Tensor
    selected: torch.Tensor
    keys_read: torch.Tensor
    counts: SparseCounts


def block_mean_keys(k: torch.Tensor, block_size: int) -> torch.Tensor:
    """MoBA's block representatives: k (B, H, N, d) -> (B, H, ceil(N / block_size), d), block b's mean key
    kbar_b = mean of k_j for j in b*block_size .. min(N, (b+1)*block_size) - 1 (the last block may be shorter)."""
    block_size = _check_block_mean_keys(k, block_size)
    return _block_mean_keys(k, block_size)


def _block_mean_keys(k, block_size):
    n = k.shape[-2]
    blocks = -(-n // block_size)
    padded = torch.nn.functional.pad(k, (0, 0, 0, blocks * block_size - n))  # zeros after the last key
    sums = padded.unflatten(-2, (blocks, block_size)).sum(dim=-2)  # (B, H, blocks, d)
    sizes = torch.full((blocks,), block_size, dtype=k.dtype, device=k.device)
    sizes[-1] = n - (blocks - 1) * block_size
    return sums / sizes[:, None]


def moba_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int, top_k: int) -> SparseAttention:
    """MoBA's causal block top-k attention (the module docstring has the math): q, k (B, H, N, d), v (B, H, N, d_v);
    block_size keys per block; top_k blocks read per query, its own block among them (top_k = 1: the own block only).

    -> SparseAttention(output (B, H, N, d_v), selected (B, H, N, num_blocks) bool, keys_read (B, H, N, N), counts).
    The selection is discrete (torch.topk's indices): no gradient flows through it, only through the keys read."""
    block_size, top_k = _check_moba_attention(q, k, v, block_size, top_k)
    n = q.shape[-2]
    blocks = -(-n // block_size)
    own = torch.arange(n, device=q.device) // block_size  # (N,) each query's own block
    block_ids = torch.arange(blocks, device=q.device)
    with torch.no_grad():  # the selection: indices only
        score = q @ _block_mean_keys(k, block_size).transpose(-2, -1)  # (B, H, N, blocks): s_{i,b} = q_i . kbar_b
        score = score.masked_fill(block_ids[None, :] > own[:, None], float("-inf"))  # future blocks: never
        score = score.masked_fill(block_ids[None, :] == own[:, None], float("inf"))  # own block: always
        chosen = score.topk(min(top_k, blocks), dim=-1).indices
        selected = torch.zeros(score.shape, dtype=torch.bool, device=q.device).scatter_(-1, chosen, True)
        selected &= block_ids[None, :] <= own[:, None]  # a short prefix has fewer than top_k blocks: no future one
    keys_read = selected.repeat_interleave(block_size, dim=-1)[..., :n] & _causal_block(0, n, 0, n, device=q.device)
    past_blocks = int(own.sum()) * q.shape[0] * q.shape[1]  # block scores computed: the blocks before each query's own
    counts = _counts(q, v, keys_read, past_blocks, past_blocks * q.shape[-1] * k.element_size())
    return SparseAttention(_attend(q, k, v, keys_read), selected, keys_read, counts)


def indexer_scores(q_index: torch.Tensor, k_index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V3.2's lightning indexer, eq. (1): I_{t,s} = sum_j w_{t,j} ReLU(q^I_{t,j} . k^I_s), for every pair
    (no mask: the causal mask is the selection's).

    q_index (B, N, H_I, d_I): H_I indexer queries per token; k_index (B, N, d_I): one indexer key per token, shared by
    the indexer heads; weights (B, N, H_I): each query's weight per indexer head -> (B, N, N), [t, s]."""
    _check_indexer_scores(q_index, k_index, weights)
    return _indexer_scores(q_index, k_index, weights)


def _indexer_scores(q_index, k_index, weights):
    per_head = torch.relu(torch.einsum("bthd,bsd->bths", q_index, k_index))  # (B, N, H_I, N)
    return torch.einsum("bth,bths->bts", weights, per_head)


def dsa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_index: torch.Tensor,
    k_index: torch.Tensor,
    weights: torch.Tensor,
    top_k: int,
) -> SparseAttention:
    """DeepSeek Sparse Attention (the module docstring has the math): the lightning indexer scores every earlier
    token (``indexer_scores``), each query keeps the top_k of largest score, and every head attends over those only.

    q, k (B, H, N, d), v (B, H, N, d_v); q_index (B, N, H_I, d_I), k_index (B, N, d_I), weights (B, N, H_I).
    -> SparseAttention(output (B, H, N, d_v), selected (B, N, N) bool, keys_read (B, H, N, N), counts). The top-k is
    discrete: no gradient reaches the indexer through the output (DeepSeek trains it with its own loss)."""
    top_k = _check_dsa_attention(q, k, v, q_index, k_index, weights, top_k)
    batch, heads, n, _ = q.shape
    causal = _causal_block(0, n, 0, n, device=q.device)
    with torch.no_grad():
        index = _indexer_scores(q_index, k_index, weights).masked_fill(~causal, float("-inf"))
        chosen = index.topk(min(top_k, n), dim=-1).indices
        selected = torch.zeros(index.shape, dtype=torch.bool, device=q.device).scatter_(-1, chosen, True) & causal
    keys_read = selected[:, None].expand(batch, heads, n, n)
    pairs = batch * n * (n + 1) // 2  # (query, earlier token) pairs the indexer scored
    index_heads, index_dim = q_index.shape[-2], q_index.shape[-1]
    counts = _counts(q, v, keys_read, pairs * index_heads, pairs * index_dim * k_index.element_size())
    return SparseAttention(_attend(q, k, v, keys_read), selected, keys_read, counts)


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> SparseAttention:
    """The baseline: query i reads keys i - window .. i (``attnedu.masks.sliding_window_mask(N, window,
    causal=True)``), the same keys whatever the data. q, k (B, H, N, d), v (B, H, N, d_v); window >= 0.
    -> SparseAttention(output (B, H, N, d_v), selected (N, N) bool (the mask), keys_read (B, H, N, N), counts)."""
    window = _check_sliding_window_attention(q, k, v, window)
    n = q.shape[-2]
    selected = _sliding_window_mask(n, window, True).to(q.device)
    keys_read = selected.expand(*q.shape[:2], n, n)
    return SparseAttention(_attend(q, k, v, keys_read), selected, keys_read, _counts(q, v, keys_read, 0, 0))


NSA_SIZES = {"block": 32, "stride": 16, "select_block": 64, "n_select": 16, "window": 512}  # Yuan et al. 2025


class NSAKeysRead(NamedTuple):
    """Keys (each with its value) one NSA decoding step reads at most, per branch; ``total`` is their sum."""

    compressed: int
    selected: int
    window: int

    @property
    def total(self) -> int:
        return self.compressed + self.selected + self.window


def nsa_decoding_keys(
    n_cached: int,
    *,
    block: int = NSA_SIZES["block"],
    stride: int = NSA_SIZES["stride"],
    select_block: int = NSA_SIZES["select_block"],
    n_select: int = NSA_SIZES["n_select"],
    window: int = NSA_SIZES["window"],
) -> NSAKeysRead:
    """The keys NSA reads to decode one token with ``n_cached`` tokens in the cache (the new one included), defaults
    the paper's sizes (``NSA_SIZES``): the compressed keys, one per block of ``block`` tokens starting every ``stride``
    (floor((n_cached - block) / stride) + 1 of them, 0 while n_cached < block); ``n_select`` selected blocks of
    ``select_block`` tokens (fewer while the cache holds fewer); the last ``window`` tokens. The three parts are summed
    as the paper's Table 4 sums them: the paper gives each branch its own keys and values, so nothing is read twice (a
    model that shares one cache across the branches reads the overlap of the selected blocks and the window once: for
    it this is an upper bound), and a compressed key costs what a key does. The compressed count is the length of the
    paper's eq. (8), floor((t - l)/d) + 1: one fewer than its Table 4 (which takes t/d), so each total here is one
    below the table's and the ratios agree to the decimal it prints. Dense attention reads n_cached keys."""
    n_cached, block, stride, select_block, n_select, window = _check_nsa_decoding_keys(
        n_cached, block, stride, select_block, n_select, window
    )
    compressed = (n_cached - block) // stride + 1 if n_cached >= block else 0
    selected = min(n_select * select_block, n_cached)
    return NSAKeysRead(compressed, selected, min(window, n_cached))


def _attend(q, k, v, keys_read):
    """softmax over the keys read only; every query reads at least itself, so no row is empty."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~keys_read, float("-inf")), dim=-1) @ v


def _counts(q, v, keys_read, selection_scores, selection_bytes) -> SparseCounts:
    batch, heads, n, _ = q.shape
    per_key = (q.shape[-1] + v.shape[-1]) * v.element_size()  # one key and one value
    scores = int(keys_read.sum())
    dense = batch * heads * n * (n + 1) // 2
    return SparseCounts(scores, dense, int(selection_scores), scores * per_key + int(selection_bytes), dense * per_key)


class RetrievalTask(NamedTuple):
    """q, k (batch, 1, N, head_dim), v (batch, 1, N, head_dim); q_index (batch, N, 1, index_dim), k_index (batch, N,
    index_dim), weights (batch, N, 1): the indexer's inputs for ``dsa_attention``; positions (asked,): the positions
    that ask; targets (batch, asked): the position of the key each asks for."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_index: torch.Tensor
    k_index: torch.Tensor
    weights: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor


def retrieval_task(
    n: int,
    head_dim: int,
    *,
    batch: int = 1,
    passage: int = 64,
    topic: float = 0.6,
    noise: float = 0.3,
    sharpness: float = 16.0,
    asked: int = 64,
    window: int = 128,
    index_dim: int = 16,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> RetrievalTask:
    """The retrieval task of the module docstring: ``batch`` independent sequences of ``n`` tokens, one head of
    ``head_dim`` features; the last ``asked`` positions each ask for a key written more than ``window`` positions
    before it. Built from ``seed`` alone (a torch.Generator), so the same arguments give the same task."""
    n, head_dim, batch, passage, asked, window, index_dim = _check_retrieval_task(
        n, head_dim, batch, passage, topic, noise, sharpness, asked, window, index_dim, dtype
    )
    g = torch.Generator().manual_seed(seed)

    def unit(*shape):
        return torch.nn.functional.normalize(torch.randn(*shape, head_dim, generator=g, dtype=torch.float64), dim=-1)

    topics = unit(batch, -(-n // passage))[:, torch.arange(n) // passage]  # (batch, N, d): t_p(j)
    k = torch.nn.functional.normalize(topic * topics + math.sqrt(1 - topic**2) * unit(batch, n), dim=-1)
    v = torch.randn(batch, n, head_dim, generator=g, dtype=torch.float64)
    q = unit(batch, n)
    positions = torch.arange(n - asked, n)
    targets = torch.randint(0, n - asked - window, (batch, asked), generator=g)
    asked_keys = k.gather(1, targets[..., None].expand(batch, asked, head_dim))
    jitter = noise * torch.randn(batch, asked, head_dim, generator=g, dtype=torch.float64) / math.sqrt(head_dim)
    q[:, positions] = torch.nn.functional.normalize(asked_keys + jitter, dim=-1)
    q = sharpness * math.sqrt(head_dim) * q
    projection = torch.randn(head_dim, index_dim, generator=g, dtype=torch.float64) / math.sqrt(index_dim)
    return RetrievalTask(
        *(x[:, None].to(dtype) for x in (q, k, v)),
        (q @ projection)[:, :, None].to(dtype),
        (k @ projection).to(dtype),
        torch.ones(batch, n, 1, dtype=dtype),
        positions,
        targets,
    )


def retrieval_recall(output: torch.Tensor, task: RetrievalTask) -> torch.Tensor:
    """output (batch, 1, N, head_dim) of an attention over ``task`` -> (batch,): the share of the asked positions
    whose output is nearer to the value of the key asked for than to any other value of its sequence."""
    _check_retrieval_recall(output, task)
    answers = output[:, 0, task.positions].double()  # (batch, asked, d)
    nearest = torch.cdist(answers, task.v[:, 0].double()).argmin(dim=-1)
    return (nearest == task.targets).double().mean(dim=-1)


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_self_attention(q, k, v) -> None:
    """q, k (B, H, N, d), v (B, H, N, d_v): one float dtype, as many heads and positions (causal self-attention)."""
    check_tensor("q", q, 4, "(batch, heads, N, head_dim)")
    check_tensor("k", k, 4, "(batch, heads, N, head_dim)")
    check_tensor("v", v, 4, "(batch, heads, N, value_dim)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x)
    check_same_dtype(q=q, k=k, v=v)
    if q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"q and k should have the same shape (batch, heads, N, head_dim) and v the same (batch, heads, N), got q "
            f"{describe(q)}, k {describe(k)}, v {describe(v)}; selection here is causal self-attention, one "
            "key/value head per query head"
        )


def _check_block_mean_keys(k, block_size) -> int:
    check_tensor("k", k, 4, "(batch, heads, N, head_dim)")
    check_float("k", k)
    return check_positive_int("block_size", block_size, "keys per block")


def _check_moba_attention(q, k, v, block_size, top_k) -> tuple[int, int]:
    _check_self_attention(q, k, v)
    block_size = check_positive_int("block_size", block_size, "keys per block")
    top_k = check_positive_int("top_k", top_k, "blocks read per query, its own block included")
    return block_size, top_k


def _check_indexer_scores(q_index, k_index, weights) -> None:
    check_tensor("q_index", q_index, 4, "(batch, N, index_heads, index_dim)")
    check_tensor("k_index", k_index, 3, "(batch, N, index_dim)")
    check_tensor("weights", weights, 3, "(batch, N, index_heads)")
    for name, x in (("q_index", q_index), ("k_index", k_index), ("weights", weights)):
        check_float(name, x)
    check_same_dtype(q_index=q_index, k_index=k_index, weights=weights)
    batch, n, heads, dim = q_index.shape
    if tuple(k_index.shape) != (batch, n, dim):
        raise ValueError(f"k_index should be of shape (batch, N, index_dim) = {(batch, n, dim)} to match q_index "
                         f"{describe(q_index)}, got {describe(k_index)}")  # fmt: skip
    if tuple(weights.shape) != (batch, n, heads):
        raise ValueError(f"weights should be of shape (batch, N, index_heads) = {(batch, n, heads)} to match q_index "
                         f"{describe(q_index)}, got {describe(weights)}")  # fmt: skip


def _check_dsa_attention(q, k, v, q_index, k_index, weights, top_k) -> int:
    _check_self_attention(q, k, v)
    _check_indexer_scores(q_index, k_index, weights)
    if q_index.shape[:2] != (q.shape[0], q.shape[2]):
        raise ValueError(f"q_index should be of shape (batch, N, index_heads, index_dim) with q's batch and N "
                         f"{(q.shape[0], q.shape[2])}, got {describe(q_index)} for q {describe(q)}")  # fmt: skip
    return check_positive_int("top_k", top_k, "tokens read per query")


def _check_sliding_window_attention(q, k, v, window) -> int:
    _check_self_attention(q, k, v)
    return check_int("window", window, "how many earlier keys each query reads besides itself", minimum=0)


def _check_nsa_decoding_keys(n_cached, block, stride, select_block, n_select, window):
    n_cached = check_positive_int("n_cached", n_cached, "tokens in the cache, the new one included")
    block = check_positive_int("block", block, "tokens per compressed block (the paper's l)")
    stride = check_int("stride", stride, "tokens between compressed blocks' starts (the paper's d)", 1, block)
    select_block = check_positive_int("select_block", select_block, "tokens per selected block (the paper's l')")
    n_select = check_positive_int("n_select", n_select, "blocks selected per query (the paper's n)")
    window = check_int("window", window, "tokens in the sliding window (the paper's w)", minimum=0)
    return n_cached, block, stride, select_block, n_select, window


def _check_retrieval_task(n, head_dim, batch, passage, topic, noise, sharpness, asked, window, index_dim, dtype):
    n = check_positive_int("n", n, "tokens per sequence")
    head_dim = check_positive_int("head_dim", head_dim, "features per key")
    batch = check_positive_int("batch", batch, "independent sequences")
    passage = check_positive_int("passage", passage, "consecutive tokens sharing a topic")
    topic = check_number("topic", topic, "the topic's share of each key, in [0, 1]", minimum=0.0)
    if topic > 1:
        raise ValueError(f"topic (the topic's share of each key) should be in [0, 1], got {topic!r}")
    check_number("noise", noise, "the query's distance from the key it asks for", minimum=0.0)
    check_number("sharpness", sharpness, "score per unit of cosine", minimum=0.0, strict=True)
    asked = check_positive_int("asked", asked, "positions that ask, the last ones")
    window = check_int("window", window, "how far back every answer lies, at least", minimum=0)
    index_dim = check_positive_int("index_dim", index_dim, "features of the indexer's keys")
    if n <= asked + window:
        raise ValueError(
            f"n ({n} tokens) should exceed asked + window = {asked + window}: every answer lies more than window "
            "positions before the last asked positions; pass a longer n or a shorter window"
        )
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype should be torch.float32 or torch.float64, got {dtype!r}")
    return n, head_dim, batch, passage, asked, window, index_dim


def _check_retrieval_recall(output, task) -> None:
    if not isinstance(task, RetrievalTask):
        raise TypeError(f"task should be a RetrievalTask (from retrieval_task), got {type(task).__name__}")
    check_tensor("output", output, 4, "(batch, 1, N, head_dim)")
    check_float("output", output)
    if output.shape != task.v.shape:
        raise ValueError(f"output should have the task's shape (batch, 1, N, head_dim) = {tuple(task.v.shape)}, got "
                         f"{describe(output)}")  # fmt: skip
