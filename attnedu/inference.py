"""Attention at inference time (lesson 10): what a model keeps between tokens, and how to keep less.

Vectors are rows (q = x W_q); positions, heads, layers and steps count from 0. Shapes: batch B, query heads H,
key/value heads H_kv (H_kv divides H), new tokens n, cached tokens m, head_dim d.

The KV cache. Generating token t+1 needs the keys and values of positions 0..t in every layer. They do not change
once computed (a causal model never lets an old position see a new one), so a cache keeps them and each step
computes q, k, v for the new tokens only:

    K_t = [K_{t-1}; k_t],  V_t = [V_{t-1}; v_t],   o_t = softmax(q_t K_t^T / sqrt(d)) V_t

Every cache holds one sequence (or one batch of sequences) from position 0 on, and refuses new tokens whose
positions do not continue what it holds (a second sequence restarted at 0 would read the first one's keys).

    KVCache               per layer, K and V (B, H_kv, m, d), keys stored already rotated by RoPE; it grows by
                          torch.cat, which copies the whole cache at every step
    PreallocatedKVCache   the same, in a buffer of max_length tokens allocated once and written in place
    PagedKVCache          vLLM's PagedAttention memory (Kwon et al. 2023): a pool of fixed-size blocks shared by
                          many sequences, each with a block table; PagedKVCache.sequence() is one sequence's cache
    paged_attention(q, k_pool, v_pool, block_table, lengths)   attention of the newest tokens of a batch of
                          sequences over their blocks in the pool
    RollingKVCache        a fixed buffer of ``window`` slots; position p lives in slot p % window (Mistral 7B)
    rolling_cache_step(q, k, v, k_buffer, v_buffer, position)   one token through a rolling buffer
    SinkCache             the first ``sinks`` tokens plus the last ``window`` ones, positions counted inside the
                          cache (StreamingLLM, Xiao et al. 2024)
    lm_forward(model, tokens, cache)   a DecoderLM (attnedu.blocks) run on new tokens, reading and filling a
                          cache; with cache=None, the whole sequence under ``mask`` (a check against model(tokens))
    generate_greedy(model, prompt, steps, cache)   greedy decoding, recomputing the prefix or with a cache
    streaming_losses(model, ids, cache)  next-token losses of a stream fed one token at a time through a cache

Sizes. kv_cache_bytes = 2 (K and V) * layers * H_kv * d * bytes per number, per token; MODEL_CONFIGS holds
published configurations; mla_cache_bytes the same for a latent cache.

Sharing and compressing keys and values:

    grouped_attention(q, k, v, mask)   query head h reads key/value head h // (H / H_kv), as
                          torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)
    mean_pool_kv_heads(W, H, H_kv), to_grouped_query(model, H_kv)   MHA -> GQA by averaging the K/V projections of
                          each group of heads (Ainslie et al. 2023)
    mla_attention(...)    multi-head latent attention (DeepSeek-V2): c = x W_dkv (B, n, d_c) is cached, k = c W_uk,
                          v = c W_uv; ``absorbed=True`` folds W_uk into the queries and W_uv into W_o; W_qr, W_kr add
                          the decoupled RoPE part, one rotated key of d_r numbers per token, shared by the heads

Masks as functions (FlexAttention, torch.nn.attention.flex_attention), equal to attnedu.masks':

    causal_mod, sliding_window_mod(window), document_mod(ids), prefix_lm_mod(prefix_lengths), alibi_score_mod(slopes)
    flex_attention_cpu(q, k, v, mask_mod, score_mod)   eager FlexAttention on the CPU, with clear errors where the
                          pinned torch stops (no backward on the CPU)
    block_map(mask_mod, length, block_size)   which blocks of the score matrix a BlockMask skips, computes in full or
                          computes with the mask_mod applied

Linear attention (Katharopoulos et al. 2020): phi(x) = elu(x) + 1 and

    o_i = phi(q_i) S / (phi(q_i) z),   S = sum_j phi(k_j)^T v_j  (d x d_v),   z = sum_j phi(k_j)^T

so the cost grows like N d d_v instead of N^2 d, and what the keys held is squeezed into one d x d_v matrix.

Every public function checks what it is given and refuses, naming the argument, what it expected and what came; the
math then runs in a private function (``_grouped_attention``, ``KVCache._attend``, ``_lm_forward``, ...) that internal
callers use directly.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections import deque
from collections.abc import Callable

import torch
from torch import nn

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_float,
    check_ids,
    check_instance,
    check_int,
    check_positive_int,
    check_same_dtype,
    check_size,
    check_tensor,
    describe,
)
from .attention import masked_softmax, scaled_dot_product_attention
from .multihead import _grouped_attention as _heads_attention
from .multihead import merge_heads, split_heads
from .positional import apply_rope

# --------------------------------------------------------------------------------------------
# Grouped-query attention on heads
# --------------------------------------------------------------------------------------------


def _check_heads(q, k, v, names=("q", "k", "v")) -> tuple[int, int]:
    """q (B, H, n, d), k and v (B, H_kv, m, d) of one float dtype, H_kv dividing H; ``names`` as the caller calls
    them. -> (H, H_kv)."""
    nq, nk, nv = names
    check_tensor(nq, q, 4, "(batch, heads, query_len, head_dim)")
    check_tensor(nk, k, 4, "(batch, kv_heads, key_len, head_dim)")
    check_tensor(nv, v, 4, "(batch, kv_heads, key_len, head_dim)")
    for name, x in ((nq, q), (nk, k), (nv, v)):
        check_float(name, x)
    check_same_dtype(**{nq: q, nk: k, nv: v})
    if k.shape != v.shape:
        raise ValueError(f"{nk} and {nv} should have the same shape (batch, kv_heads, key_len, head_dim), got {nk} "
                         f"{describe(k)} and {nv} {describe(v)}")  # fmt: skip
    if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{nq} and {nk} should share batch and head_dim, got {nq} {describe(q)} and {nk} "
                         f"{describe(k)}")  # fmt: skip
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(
            f"{nk} should have a number of heads that divides {nq}'s {heads}, got {kv_heads}: every key/value head "
            "serves the same number of query heads"
        )
    return heads, kv_heads


def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Grouped-query attention on heads: query head h reads key/value head h // group, group = H / H_kv, the pairing
    of ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``. H_kv = H is multi-head attention,
    H_kv = 1 multi-query attention (Shazeer 2019).

    q (B, H, n, d); k, v (B, H_kv, m, d); mask None or bool (n, m) or broadcastable to (B, H, n, m), True = may
    attend -> (B, H, n, d). The K/V heads are repeated with ``repeat_interleave`` (head 0, 0, ..., 1, 1, ...): the
    cache holds H_kv heads, the arithmetic reads them H / H_kv times.
    """
    _check_heads(q, k, v)
    if mask is not None:
        check_bool_mask("mask", mask)
    return _grouped_attention(q, k, v, mask)


def _grouped_attention(q, k, v, mask=None):
    """``attnedu.multihead``'s grouped-query attention (its one home), the heads only; a mask (n, m) serves every
    sequence and head."""
    if mask is not None and mask.dim() == 2:
        mask = mask[None, None]  # (1, 1, n, m): every sequence, every head
    return _heads_attention(q, k, v, mask)[0]


# --------------------------------------------------------------------------------------------
# Caches
# --------------------------------------------------------------------------------------------


def _shown(positions: torch.Tensor) -> str:
    values = positions.tolist()
    if len(values) <= 8:
        return str(values)
    return f"[{values[0]}, {values[1]}, ..., {values[-1]}] ({len(values)} positions)"


class KVCache:
    """Every layer's keys and values so far: ``k[layer]``, ``v[layer]`` (B, H_kv, m, d), keys rotated by RoPE at
    their positions. Memory grows by 2 * layers * H_kv * d numbers per token.

    ``attend(layer, q, k, v, positions)`` takes the new tokens' q (B, H, n, d), k, v (B, H_kv, n, d) before RoPE
    and their positions (n,), which must continue what the layer holds (m, m + 1, ..., m + n - 1): it rotates q and
    k, appends k and v, and returns the attention of the new queries over every cached key at or before their
    positions -> (B, H, n, d). ``seen`` counts the tokens processed; ``next_position(layer)`` is the position the
    layer's next token must have.

    Appending with ``torch.cat`` allocates a new tensor and copies the whole cache into it at every step: the copy
    grows with the cache (``PreallocatedKVCache`` writes in place instead)."""

    kind = "KVCache"

    def __init__(self, num_layers: int):
        self.num_layers = check_positive_int("num_layers", num_layers, "layers, one cache each")
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers

    @property
    def seen(self) -> int:
        """Tokens processed so far (by layer 0; ``lm_forward`` keeps every layer at the same count)."""
        return self._next_position(0)

    def next_position(self, layer: int) -> int:
        """The position the next token of ``layer`` must have: the number of tokens the layer has processed."""
        check_int("layer", layer, "a layer counted from 0", minimum=0, maximum=self.num_layers - 1)
        return self._next_position(layer)

    def _next_position(self, layer: int) -> int:
        return 0 if self.k[layer] is None else self.k[layer].shape[2]

    def _stored(self, layer: int) -> torch.Tensor | None:
        """A tensor (B, H_kv, *, d) whose batch, heads, head_dim, dtype and device new keys must share, or None."""
        return self.k[layer]

    def _check_batch(self, name: str, batch: int) -> None:
        """Raise unless ``batch`` sequences may be added (a subclass that holds one sequence says so)."""

    def _check(self, layer, q, k, v, positions) -> None:
        check_int("layer", layer, "a layer counted from 0", minimum=0, maximum=self.num_layers - 1)
        _check_heads(q, k, v)
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"q and k should hold the same new tokens, got q {describe(q)} and k {describe(k)}")
        self._check_batch("q", q.shape[0])
        stored = self._stored(layer)
        if stored is not None:
            held = (stored.shape[0], stored.shape[1], stored.shape[3], stored.dtype, stored.device)
            if (k.shape[0], k.shape[1], k.shape[3], k.dtype, k.device) != held:
                raise ValueError(
                    f"k should be (batch {held[0]}, {held[1]} K/V heads, n, head_dim {held[2]}), {held[3]} on "
                    f"{held[4]}, like the keys layer {layer} of the cache already holds, got {describe(k)} on "
                    f"{k.device}; a cache serves the sequences it started with: start a new one for other sequences"
                )
        self._check_positions(layer, positions, q.shape[2])

    def _check_positions(self, layer: int, positions, n: int) -> None:
        check_tensor("positions", positions, 1, "(n,) positions of the new tokens")
        if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
            raise TypeError(f"positions should be whole numbers (an integer dtype such as torch.long), got dtype "
                            f"{positions.dtype}; pass torch.arange(start, start + n)")  # fmt: skip
        check_size("positions", positions, 0, n, "n, one position per new token")
        start = self._next_position(layer)
        expected = torch.arange(start, start + n, device=positions.device)
        if not torch.equal(positions, expected.to(positions.dtype)):
            held = "is empty" if start == 0 else f"holds positions 0..{start - 1}"
            raise ValueError(
                f"positions should continue what layer {layer} of the {self.kind} holds: it {held}, so the new tokens "
                f"are at {_shown(expected)}, got {_shown(positions)}; a cache holds one sequence from position 0 on, "
                "in order: for another sequence start a new cache"
            )

    def attend(self, layer: int, q, k, v, positions: torch.Tensor) -> torch.Tensor:
        self._check(layer, q, k, v, positions)
        return self._attend(layer, q, k, v, positions)

    def _attend(self, layer, q, k, v, positions):
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)  # append, then attend: a token reads its own key too
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        key_positions = torch.arange(k.shape[2], device=q.device)
        return _grouped_attention(q, k, v, key_positions[None, :] <= positions[:, None])

    def nbytes(self) -> int:
        """Bytes held by the cached tensors, summed: the measurement to compare with ``kv_cache_bytes``."""
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v) if t is not None)


class PreallocatedKVCache(KVCache):
    """A ``KVCache`` without its copies: each layer's buffers ``k[layer]``, ``v[layer]`` (B, H_kv, max_length, d) are
    allocated once, at the layer's first tokens, and every new key and value is written in place, at positions
    m..m+n-1; attention reads the view ``[:, :, :m + n]`` (no copy). Storing a token costs that token, whatever the
    length; the price is the memory of ``max_length`` tokens, reserved from the start (``nbytes``), which a paged
    cache does not pay."""

    kind = "PreallocatedKVCache"

    def __init__(self, num_layers: int, max_length: int):
        super().__init__(num_layers)
        self.max_length = check_positive_int("max_length", max_length, "tokens each buffer can hold")
        self.lengths = [0] * self.num_layers

    def _next_position(self, layer: int) -> int:
        return self.lengths[layer]

    def _check(self, layer, q, k, v, positions) -> None:
        super()._check(layer, q, k, v, positions)
        if self.lengths[layer] + q.shape[2] > self.max_length:
            raise ValueError(
                f"q should fit in the buffer: layer {layer} holds {self.lengths[layer]} of max_length="
                f"{self.max_length} tokens, got {q.shape[2]} new ones; make the cache with a larger max_length"
            )

    def _attend(self, layer, q, k, v, positions):
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if self.k[layer] is None:
            batch, kv_heads, _, head_dim = k.shape
            self.k[layer] = k.new_empty(batch, kv_heads, self.max_length, head_dim)
            self.v[layer] = v.new_empty(batch, kv_heads, self.max_length, v.shape[-1])
        start, end = self.lengths[layer], self.lengths[layer] + k.shape[2]
        self.k[layer][:, :, start:end] = k  # written in place: nothing else is copied
        self.v[layer][:, :, start:end] = v
        self.lengths[layer] = end
        key_positions = torch.arange(end, device=q.device)
        keys, values = self.k[layer][:, :, :end], self.v[layer][:, :, :end]  # views of the buffers
        return _grouped_attention(q, keys, values, key_positions[None, :] <= positions[:, None])


class PagedKVCache:
    """vLLM's PagedAttention memory (Kwon et al. 2023): every layer's keys and values live in one pool of
    ``num_blocks`` blocks of ``block_size`` tokens, ``k[layer]``, ``v[layer]`` (num_blocks, H_kv, block_size, d),
    shared by many sequences. ``sequence()`` starts one: a ``PagedSequence``, a cache with a **block table**, the
    list of the physical blocks that hold its logical blocks 0, 1, 2, ... (position p sits in block
    ``table[p // block_size]`` at offset ``p % block_size``). A sequence takes a free block only when it starts a new
    one, and ``free()`` gives its blocks back. Every block has the same size, so any free block serves any sequence:
    memory is never too scattered to use (no fragmentation between sequences), and at most ``block_size - 1`` slots
    stand empty in each sequence's last block. The pool is allocated at the first write (its sizes from that write).
    """

    def __init__(self, num_layers: int, num_blocks: int, block_size: int):
        self.num_layers = check_positive_int("num_layers", num_layers, "layers, one pool each")
        self.num_blocks = check_positive_int("num_blocks", num_blocks, "blocks in the pool")
        self.block_size = check_positive_int("block_size", block_size, "tokens per block")
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers
        self.free_blocks: deque[int] = deque(range(num_blocks))  # taken from the left, given back on the right

    def sequence(self) -> PagedSequence:
        """A new sequence's cache, with an empty block table."""
        return PagedSequence(self)

    def _take(self) -> int:
        if not self.free_blocks:
            raise RuntimeError(f"the pool is full: all {self.num_blocks} blocks of {self.block_size} tokens are in "
                               "use; free a finished sequence (its free()) or make a larger pool")  # fmt: skip
        return self.free_blocks.popleft()

    def nbytes(self) -> int:
        """Bytes of the pool, every block counted, used or free."""
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v) if t is not None)

    def blocks_in_use(self) -> int:
        return self.num_blocks - len(self.free_blocks)


class PagedSequence(KVCache):
    """One sequence's cache in a ``PagedKVCache`` pool (made by ``pool.sequence()``): ``block_table`` lists its
    blocks; ``attend`` (batch 1) writes the new keys and values into their blocks, taking a free block when a token
    starts a new one, then attends over the sequence's blocks read through the table (``paged_attention``)."""

    kind = "PagedSequence"

    def __init__(self, pool: PagedKVCache):
        check_instance("pool", pool, PagedKVCache, "a PagedKVCache")
        super().__init__(pool.num_layers)
        self.pool = pool
        self.block_table: list[int] = []
        self.lengths = [0] * pool.num_layers

    def _next_position(self, layer: int) -> int:
        return self.lengths[layer]

    def _stored(self, layer):
        return self.pool.k[layer]  # (num_blocks, H_kv, block_size, d): heads, head_dim and dtype; batch checked apart

    def _check_batch(self, name: str, batch: int) -> None:
        if batch != 1:
            raise ValueError(f"{name} should hold one sequence (batch 1) for a PagedSequence, got batch {batch}; "
                             "start one sequence per prompt with pool.sequence()")  # fmt: skip

    def _check(self, layer, q, k, v, positions) -> None:
        check_int("layer", layer, "a layer counted from 0", minimum=0, maximum=self.num_layers - 1)
        _check_heads(q, k, v)
        self._check_batch("q", q.shape[0])
        stored = self._stored(layer)
        if stored is not None and (k.shape[1], k.shape[3], k.dtype) != (stored.shape[1], stored.shape[3], stored.dtype):
            raise ValueError(f"k should have {stored.shape[1]} K/V heads of {stored.shape[3]} in {stored.dtype}, as "
                             f"the pool's layer {layer} holds, got {describe(k)}")  # fmt: skip
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"q and k should hold the same new tokens, got q {describe(q)} and k {describe(k)}")
        self._check_positions(layer, positions, q.shape[2])

    def _attend(self, layer, q, k, v, positions):
        pool, size = self.pool, self.pool.block_size
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if pool.k[layer] is None:
            _, kv_heads, _, head_dim = k.shape
            pool.k[layer] = k.new_zeros(pool.num_blocks, kv_heads, size, head_dim)
            pool.v[layer] = v.new_zeros(pool.num_blocks, kv_heads, size, v.shape[-1])
        end = int(positions[-1]) + 1
        while len(self.block_table) * size < end:  # a token that starts a new logical block takes a free block
            self.block_table.append(pool._take())
        table = torch.tensor(self.block_table, device=q.device)
        blocks, offsets = table[positions // size], positions % size
        pool.k[layer][blocks, :, offsets] = k[0].transpose(0, 1)  # (n, H_kv, d): each token into its block's slot
        pool.v[layer][blocks, :, offsets] = v[0].transpose(0, 1)
        self.lengths[layer] = end
        return _paged_attention(q, pool.k[layer], pool.v[layer], table[None], torch.tensor([end], device=q.device))

    def free(self) -> None:
        """Give this sequence's blocks back to the pool; the sequence is empty again."""
        self.pool.free_blocks.extend(self.block_table)
        self.block_table = []
        self.lengths = [0] * self.num_layers

    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds (its last block counted whole, used or not)."""
        return sum(len(self.block_table) * t[0].numel() * t.element_size()
                   for t in (*self.pool.k, *self.pool.v) if t is not None)  # fmt: skip


def paged_attention(q, k_pool, v_pool, block_table, lengths):
    """Attention over a paged cache: sequence b's keys are positions 0..lengths[b]-1, position p in block
    ``block_table[b, p // block_size]`` of the pool at offset ``p % block_size``; its n queries are its last n
    positions (a decoding step: n = 1), each reading the keys at or before it; query head h reads K/V head h // group.

    q (B, H, n, d), already rotated; k_pool, v_pool (num_blocks, H_kv, block_size, d); block_table (B, max_blocks)
    integers (entries past a sequence's last block are never read; a block may appear in several sequences' tables,
    as sequences that share a prefix do, but only once in one sequence's); lengths (B,) -> (B, H, n, d).

    vLLM's kernel reads the blocks where they are; this reference gathers each sequence's blocks into one tensor
    (a copy) and runs ordinary attention on it, which is easier to read and gives the same numbers."""
    check_tensor("q", q, 4, "(batch, heads, n, head_dim)")
    check_tensor("k_pool", k_pool, 4, "(num_blocks, kv_heads, block_size, head_dim)")
    check_tensor("v_pool", v_pool, 4, "(num_blocks, kv_heads, block_size, head_dim)")
    for name, x in (("q", q), ("k_pool", k_pool), ("v_pool", v_pool)):
        check_float(name, x)
    check_same_dtype(q=q, k_pool=k_pool, v_pool=v_pool)
    if k_pool.shape != v_pool.shape:
        raise ValueError(f"k_pool and v_pool should have the same shape, got {describe(k_pool)} and "
                         f"{describe(v_pool)}")  # fmt: skip
    num_blocks, kv_heads, size, head_dim = k_pool.shape
    check_size("q", q, 3, head_dim, "head_dim, as the pool's")
    if q.shape[1] % kv_heads:
        raise ValueError(f"k_pool should have a number of K/V heads that divides q's {q.shape[1]} heads, got "
                         f"{kv_heads}")  # fmt: skip
    for name, x, doc in (("block_table", block_table, "(batch, max_blocks)"), ("lengths", lengths, "(batch,)")):
        check_tensor(name, x, 2 if name == "block_table" else 1, doc)
        if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
            raise TypeError(f"{name} should hold integers (torch.long), got dtype {x.dtype}")
        check_size(name, x, 0, q.shape[0], "batch, one row per sequence")
    n = q.shape[2]
    if int(lengths.min()) < n or int(lengths.max()) > block_table.shape[1] * size:
        raise ValueError(f"lengths should be between n={n} (the queries are the last n positions) and "
                         f"{block_table.shape[1] * size} (the table's blocks x block_size={size}), got "
                         f"{lengths.tolist()}")  # fmt: skip
    used = torch.arange(block_table.shape[1], device=lengths.device)[None, :] * size < lengths[:, None]
    read = block_table[used]
    if int(read.min()) < 0 or int(read.max()) >= num_blocks:
        raise ValueError(f"block_table should name blocks 0..{num_blocks - 1} of the pool where the sequences have "
                         f"tokens, got {read.unique().tolist()}")  # fmt: skip
    for b in range(block_table.shape[0]):
        blocks = block_table[b][used[b]]
        if len(blocks.unique()) < len(blocks):
            twice = [int(x) for x in blocks.unique() if int((blocks == x).sum()) > 1]
            raise ValueError(f"block_table should name each block at most once in one sequence's row (two of its "
                             f"positions cannot share a slot; sharing a block across sequences is fine), got row {b} "
                             f"{blocks.tolist()}, which names {twice} more than once")  # fmt: skip
    return _paged_attention(q, k_pool, v_pool, block_table, lengths)


def _paged_attention(q, k_pool, v_pool, block_table, lengths):
    batch, _, n, _ = q.shape
    _, kv_heads, size, head_dim = k_pool.shape
    table = block_table.clamp(0, k_pool.shape[0] - 1)  # entries past a sequence's blocks: masked below, never read

    def gather(pool):  # (B, max_blocks, H_kv, size, d) -> (B, H_kv, max_blocks * size, d), position order
        return pool[table].transpose(1, 2).reshape(batch, kv_heads, -1, pool.shape[-1])

    keys, values = gather(k_pool), gather(v_pool)
    key_positions = torch.arange(keys.shape[2], device=q.device)  # (m_max,)
    query_positions = lengths[:, None] - n + torch.arange(n, device=q.device)  # (B, n): the last n positions
    mask = key_positions[None, None, :] <= query_positions[:, :, None]  # (B, n, m_max): causal, and < lengths[b]
    return _grouped_attention(q, keys, values, mask[:, None])


class RollingKVCache(KVCache):
    """A sliding-window cache of fixed memory (Mistral 7B's rolling buffer): ``window`` slots per layer; the key and
    value of position p are written to slot p % window, overwriting position p - window, so query p reads positions
    p - window + 1 .. p: the mask ``attnedu.masks.sliding_window_mask(length, window - 1, causal=True)``.

    Slots hold positions out of order (..., 8, 9, 2, 3, ...): attention does not care about the order of its keys,
    RoPE already rotated each key by its own position, and ``slot_positions`` records which position each slot holds
    (-1: empty), from which the mask is built.

    Memory: all ``window`` slots of a layer are allocated at its first token, so ``nbytes()`` (the bytes allocated)
    is ``kv_cache_bytes(..., tokens=window)`` from the start, while the tokens it holds, ``kv_cache_bytes(...,
    tokens=t, window=window)`` after t tokens, are fewer until the buffer is full."""

    kind = "RollingKVCache"

    def nbytes(self) -> int:
        """Bytes of the buffers allocated: every slot counted, from the first token on, whether it holds a token yet
        or not (``kv_cache_bytes(..., tokens=window)``; the tokens held are fewer until the buffer is full)."""
        return super().nbytes()

    def __init__(self, num_layers: int, window: int):
        super().__init__(num_layers)
        self.window = check_positive_int("window", window, "slots in the buffer: keys each query may read")
        self.slot_positions: list[torch.Tensor | None] = [None] * num_layers
        self.lengths = [0] * self.num_layers

    def _next_position(self, layer: int) -> int:
        return self.lengths[layer]

    def _attend(self, layer, q, k, v, positions):
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if self.k[layer] is None:
            batch, kv_heads, _, head_dim = k.shape
            self.k[layer] = k.new_zeros(batch, kv_heads, self.window, head_dim)
            self.v[layer] = v.new_zeros(batch, kv_heads, self.window, v.shape[-1])
            self.slot_positions[layer] = torch.full((self.window,), -1, dtype=torch.long, device=k.device)
        filled = self.slot_positions[layer] >= 0
        keys = torch.cat([self.k[layer][:, :, filled], k], dim=2)
        values = torch.cat([self.v[layer][:, :, filled], v], dim=2)
        key_positions = torch.cat([self.slot_positions[layer][filled], positions])
        distance = positions[:, None] - key_positions[None, :]
        out = _grouped_attention(q, keys, values, (distance >= 0) & (distance < self.window))
        last = slice(max(0, len(positions) - self.window), None)  # only the last `window` new tokens can stay
        slots = positions[last] % self.window
        self.k[layer][:, :, slots] = k[:, :, last]
        self.v[layer][:, :, slots] = v[:, :, last]
        self.slot_positions[layer][slots] = positions[last]
        self.lengths[layer] += len(positions)
        return out


class SinkCache(KVCache):
    """StreamingLLM's cache (Xiao et al. 2024): the first ``sinks`` tokens ("attention sinks") plus the most recent
    ``window`` tokens, the new one included; everything between is evicted. Keys are stored *before* RoPE and rotated
    by their slot in the cache (0, 1, ..., len - 1), the query by its own slot, so positions never exceed
    sinks + window - 1 however long the stream. ``sinks=0`` is plain window attention with the same positions.
    Tokens go in one at a time; their ``positions`` (in the text) must still follow one another."""

    kind = "SinkCache"

    def __init__(self, num_layers: int, window: int, sinks: int = 0):
        super().__init__(num_layers)
        self.window = check_positive_int("window", window, "recent tokens kept")
        self.sinks = check_int("sinks", sinks, "first tokens always kept", minimum=0)
        self.lengths = [0] * self.num_layers

    def _next_position(self, layer: int) -> int:
        return self.lengths[layer]

    def _check(self, layer, q, k, v, positions) -> None:
        super()._check(layer, q, k, v, positions)
        if q.shape[2] != 1:
            raise ValueError(f"q should hold one new token for a SinkCache (it is filled one token at a time), got "
                             f"{describe(q)}; feed the stream token by token")  # fmt: skip

    def _attend(self, layer, q, k, v, positions):
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        if k.shape[2] > self.sinks + self.window:  # evict the oldest token after the sinks
            k = torch.cat([k[:, :, : self.sinks], k[:, :, -self.window :]], dim=2)
            v = torch.cat([v[:, :, : self.sinks], v[:, :, -self.window :]], dim=2)
        self.k[layer], self.v[layer] = k, v
        self.lengths[layer] += 1
        slots = torch.arange(k.shape[2], device=k.device)
        return _grouped_attention(apply_rope(q, slots[-1:]), apply_rope(k, slots), v)


def _check_step(q, k_new, v_new, k_old, v_old, old_names: tuple[str, str], old_doc: str) -> None:
    """The arguments of a one-token step: q (B, H, 1, d), k_new and v_new (B, H_kv, 1, d), the two stored tensors
    (B, H_kv, *, d), all of one float dtype."""
    new = "(batch, heads, 1, head_dim)"
    for name, x, doc in (("q", q, new), ("k_new", k_new, new), ("v_new", v_new, new), (old_names[0], k_old, old_doc),
                         (old_names[1], v_old, old_doc)):  # fmt: skip
        check_tensor(name, x, 4, doc, allow_empty=name == "k_cache" or name == "v_cache")
        check_float(name, x)
        if doc == new:
            check_size(name, x, 2, 1, "1: one new token per step")
    check_same_dtype(**{"q": q, "k_new": k_new, "v_new": v_new, old_names[0]: k_old, old_names[1]: v_old})
    _check_heads(q, k_new, v_new, ("q", "k_new", "v_new"))
    kept = (k_new.shape[0], k_new.shape[1], k_new.shape[3])
    for name, x in zip(old_names, (k_old, v_old), strict=True):
        if (x.shape[0], x.shape[1], x.shape[3]) != kept:
            raise ValueError(
                f"{name} should be {old_doc} with the batch, heads and head_dim of k_new {tuple(k_new.shape)}, got "
                f"{describe(x)}"
            )
    if k_old.shape != v_old.shape:
        raise ValueError(f"{old_names[0]} and {old_names[1]} should have the same shape, got {describe(k_old)} and "
                         f"{describe(v_old)}")  # fmt: skip


def cache_chunk(q, k_new, v_new, k_cache, v_cache):
    """n new tokens of one layer at once through a KV cache with RoPE (a piece of a long prompt, or draft tokens to
    check: the exercise's reference): with m tokens cached at positions 0..m-1, new token i sits at position m + i,

        q_i, k_i <- RoPE(q_i, m + i), RoPE(k_i, m + i);  K = [k_cache; k_new];  V = [v_cache; v_new]
        o_i = softmax(q_i K^T / sqrt(d) over the keys at positions 0..m + i) V

    which is what causal attention over all m + n tokens gives at the new positions.

    q (B, H, n, d), k_new, v_new (B, H_kv, n, d), before RoPE; k_cache (B, H_kv, m, d) already rotated, v_cache
    (B, H_kv, m, d); m may be 0. -> o (B, H, n, d), K and V (B, H_kv, m + n, d)."""
    _check_heads(q, k_new, v_new, ("q", "k_new", "v_new"))
    doc = "(batch, kv_heads, cached_len, head_dim)"
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(name, x, 4, doc, allow_empty=True)
        check_float(name, x)
    check_same_dtype(q=q, k_new=k_new, k_cache=k_cache, v_cache=v_cache)
    if k_cache.shape != v_cache.shape or (k_cache.shape[0], k_cache.shape[1], k_cache.shape[3]) != (
        k_new.shape[0], k_new.shape[1], k_new.shape[3]
    ):  # fmt: skip
        raise ValueError(
            f"k_cache and v_cache should be {doc} with the batch, heads and head_dim of k_new {tuple(k_new.shape)}, "
            f"got k_cache {describe(k_cache)} and v_cache {describe(v_cache)}"
        )
    return _cache_chunk(q, k_new, v_new, k_cache, v_cache)


def _cache_chunk(q, k_new, v_new, k_cache, v_cache):
    m, n = k_cache.shape[2], q.shape[2]
    positions = torch.arange(m, m + n, device=q.device)
    keys = torch.cat([k_cache, apply_rope(k_new, positions)], dim=2)
    values = torch.cat([v_cache, v_new], dim=2)
    mask = torch.arange(m + n, device=q.device)[None, :] <= positions[:, None]  # (n, m + n): bottom-right causal
    return _grouped_attention(apply_rope(q, positions), keys, values, mask), keys, values


def rolling_cache_step(q, k_new, v_new, k_buffer, v_buffer, position: int):
    """One decoding step of one layer with a rolling buffer of W slots and RoPE (the exercise's reference; what
    ``RollingKVCache`` does one token at a time). Position p lives in slot p % W, so before this step slot s holds
    the latest position p < ``position`` with p % W = s; slots no position has reached yet (position < W) hold
    anything. The new token, at ``position``:

        q, k_new <- RoPE(q, position), RoPE(k_new, position);  slot position % W <- k_new, v_new
        o = softmax(q K^T / sqrt(d)) V over the slots holding positions max(0, position - W + 1) .. position

    so it reads itself and the W - 1 tokens before it, whatever order the slots hold them in.

    q, k_new, v_new (B, H, 1, d), before RoPE; k_buffer, v_buffer (B, H, W, d), keys already rotated; position an
    int >= 0. -> o (B, H, 1, d) and new buffers (B, H, W, d); the given ones are not modified."""
    _check_step(q, k_new, v_new, k_buffer, v_buffer, ("k_buffer", "v_buffer"), "(batch, heads, window, head_dim)")
    position = check_int("position", position, "the new token's position, counted from 0", minimum=0)
    return _rolling_cache_step(q, k_new, v_new, k_buffer, v_buffer, position)


def _rolling_cache_step(q, k_new, v_new, k_buffer, v_buffer, position):
    window = k_buffer.shape[2]
    at = torch.tensor([position], device=q.device)
    slot = position % window
    k_buffer, v_buffer = k_buffer.clone(), v_buffer.clone()
    k_buffer[:, :, slot] = apply_rope(k_new, at)[:, :, 0]  # write first: the token reads its own key
    v_buffer[:, :, slot] = v_new[:, :, 0]
    filled = min(position + 1, window)  # slots 0..filled-1 hold positions; the others were never written
    read_k, read_v = k_buffer[:, :, :filled], v_buffer[:, :, :filled]  # (sliced, not masked: 0 * NaN is NaN)
    return _grouped_attention(apply_rope(q, at), read_k, read_v), k_buffer, v_buffer


# --------------------------------------------------------------------------------------------
# A DecoderLM with a cache
# --------------------------------------------------------------------------------------------


def _check_model(model) -> None:
    from .blocks import DecoderLM

    check_instance("model", model, DecoderLM, "an attnedu.blocks.DecoderLM")


def _check_cache(model, cache, batch: int, n: int) -> None:
    """A cache ``lm_forward`` may feed ``batch`` sequences of n new tokens: one layer per block, every layer at the
    same position, the heads and sequences it already holds."""
    check_instance("cache", cache, KVCache, "a KVCache (or PreallocatedKVCache, PagedSequence, RollingKVCache, "
                   "SinkCache)", "make one with KVCache(len(model.blocks))")  # fmt: skip
    if cache.num_layers != len(model.blocks):
        raise ValueError(f"cache should have one layer per block, {len(model.blocks)}, got {cache.num_layers}")
    starts = [cache._next_position(layer) for layer in range(cache.num_layers)]
    if len(set(starts)) > 1:
        raise ValueError(f"cache should hold the same tokens in every layer, got layers at positions {starts}; it "
                         "was fed outside lm_forward: start a new cache")  # fmt: skip
    cache._check_batch("tokens", batch)
    attention = model.blocks[0].attention
    dtype = model.embedding.weight.dtype
    for layer in range(cache.num_layers):
        stored = cache._stored(layer)
        if stored is None:
            continue
        wanted = (attention.num_kv_heads, attention.head_dim, dtype)
        if (stored.shape[1], stored.shape[3], stored.dtype) != wanted:
            raise ValueError(f"cache should hold {wanted[0]} K/V heads of {wanted[1]} in {dtype}, this model's, "
                             f"got layer {layer} holding {describe(stored)}: a cache serves the model that filled "
                             "it")  # fmt: skip
        if not isinstance(cache, PagedSequence) and stored.shape[0] != batch:
            raise ValueError(f"tokens should continue the {stored.shape[0]} sequence(s) the cache holds, got a batch "
                             f"of {batch}; start a new cache for other sequences")  # fmt: skip
    if isinstance(cache, PreallocatedKVCache) and starts[0] + n > cache.max_length:
        raise ValueError(f"tokens should fit in the cache: it holds {starts[0]} of max_length={cache.max_length} "
                         f"tokens, got {n} new ones; make the cache with a larger max_length")  # fmt: skip
    if isinstance(cache, SinkCache) and n != 1:
        raise ValueError(f"tokens should be one new token for a SinkCache (it is filled one token at a time), got "
                         f"{n}; feed the stream token by token")  # fmt: skip


def lm_forward(model, tokens: torch.Tensor, cache: KVCache | None = None, mask: torch.Tensor | None = None):
    """``DecoderLM``'s forward, block by block, on ``tokens`` (B, n) at positions cache.seen .. cache.seen + n - 1.

    With a cache: each block's attention goes through the cache (which stores the new keys and values) and the
    cache advances by n. Without one: the whole sequence at positions 0..n-1 under ``mask`` (n, n) bool (default
    causal), which must equal ``model(tokens)`` for the causal mask. -> logits (B, n, vocab_size)."""
    _check_model(model)
    check_ids("tokens", tokens, model.embedding.num_embeddings, 2, "(batch, n) of token ids")
    n = tokens.shape[1]
    if cache is not None:
        _check_cache(model, cache, tokens.shape[0], n)
        if mask is not None:
            raise ValueError("mask should be None with a cache: the cache decides what each query reads")
    elif mask is not None:
        check_bool_mask("mask", mask)
        check_tensor("mask", mask, 2, "(n, n), True = may attend")
        if tuple(mask.shape) != (n, n):
            raise ValueError(f"mask should be (n, n) = {(n, n)}, got {describe(mask)}")
    return _lm_forward(model, tokens, cache, mask)


def _lm_forward(model, tokens, cache=None, mask=None):
    """The model's own forward pass (``DecoderLM._forward``), each block's attention reading and filling ``cache``
    (``MultiHeadAttention._attend``), or under ``mask`` (n, n)."""
    return model._forward(tokens, mask=None if mask is None else mask[None, None], cache=cache)


def _check_empty(cache) -> None:
    if cache.seen:
        raise ValueError(f"cache should be empty (a new cache per sequence), got one that has seen {cache.seen} "
                         "tokens")  # fmt: skip


@torch.no_grad()
def generate_greedy(model, prompt: torch.Tensor, steps: int, cache: KVCache | None = None) -> torch.Tensor:
    """Greedy decoding of ``steps`` tokens after ``prompt`` (1-D ids). Without a cache every step recomputes the
    whole sequence (``model(ids)``: cost ~ t^2 at step t, so ~ T^3 in all for the attention, T^2 for the rest); with
    one, the prompt is processed once (prefill) and each step feeds the one new token (decode). -> 1-D ids, the
    prompt included."""
    _check_model(model)
    check_ids("prompt", prompt, model.embedding.num_embeddings, 1, "(prompt_len,) of token ids")
    steps = check_int("steps", steps, "tokens to add", minimum=0)
    if cache is not None:
        _check_cache(model, cache, 1, 1)
        _check_empty(cache)
        if isinstance(cache, PreallocatedKVCache) and len(prompt) + steps - 1 > cache.max_length:
            raise ValueError(f"cache should hold the prompt and the steps, {len(prompt) + steps - 1} tokens, got "
                             f"max_length={cache.max_length}")  # fmt: skip
    model.eval()
    ids = prompt
    if cache is None:
        for _ in range(steps):
            ids = torch.cat([ids, model(ids[None])[0, -1].argmax()[None]])
        return ids
    if isinstance(cache, SinkCache):  # filled one token at a time
        for t in range(len(prompt)):
            logits = _lm_forward(model, prompt[None, t : t + 1], cache)
    else:
        logits = _lm_forward(model, prompt[None], cache)
    for step in range(steps):
        token = logits[0, -1].argmax()[None]
        ids = torch.cat([ids, token])
        if step < steps - 1:  # the last token's keys and values would never be read
            logits = _lm_forward(model, token[None], cache)
    return ids


@torch.no_grad()
def streaming_losses(model, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Feed the stream ``ids`` (1-D) through ``cache`` (empty) one token at a time; -> (len - 1,) the loss (nats) of
    predicting ids[t + 1] after ids[0..t], t = 0..len-2, as far as the cache lets the model see."""
    _check_model(model)
    check_ids("ids", ids, model.embedding.num_embeddings, 1, "(length,) of token ids")
    _check_cache(model, cache, 1, 1)
    _check_empty(cache)
    if len(ids) < 2:
        raise ValueError(f"ids should hold at least 2 tokens (one to read, one to predict), got {describe(ids)}")
    if isinstance(cache, PreallocatedKVCache) and len(ids) - 1 > cache.max_length:
        raise ValueError(f"cache should hold {len(ids) - 1} tokens, got max_length={cache.max_length}")
    model.eval()
    losses = []
    for t in range(len(ids) - 1):
        logits = _lm_forward(model, ids[None, t : t + 1], cache)[0, -1]
        losses.append(nn.functional.cross_entropy(logits, ids[t + 1]))
    return torch.stack(losses)


@torch.no_grad()
def window_recompute_losses(model, ids: torch.Tensor, window: int) -> torch.Tensor:
    """The quality a window cache aims for: each token predicted from the last ``window`` tokens, recomputed from
    scratch at positions 0..window-1 (StreamingLLM's "sliding window with re-computation", too slow to serve).
    -> (len - window,) losses of ids[window..], comparable with ``streaming_losses(...)[window - 1:]``."""
    _check_model(model)
    check_ids("ids", ids, model.embedding.num_embeddings, 1, "(length,) of token ids")
    window = check_positive_int("window", window, "tokens each prediction reads")
    if len(ids) <= window:
        raise ValueError(f"ids should be longer than window={window}, got {describe(ids)}")
    windows = ids.unfold(0, window, 1)[: len(ids) - window]  # (len - window, window)
    logits = model(windows)[:, -1]
    return nn.functional.cross_entropy(logits, ids[window:], reduction="none")


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------

# Published configurations (layers, query heads, key/value heads, head_dim; the context length the model was released
# with and, for Mistral-7B v0.1, its sliding window); MLA: latent d_c and decoupled RoPE key
MODEL_CONFIGS = {
    "Llama-2-7B (MHA)": dict(num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, context=4096),
    "Llama-3-8B (GQA-8)": dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, context=8192),
    "Mistral-7B (GQA-8)": dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, context=8192, window=4096),
    "Llama-3-70B (GQA-8)": dict(num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128, context=8192),
    "Falcon-7B (MQA)": dict(num_layers=32, num_heads=71, num_kv_heads=1, head_dim=64, context=2048),
}
LLAMA2_7B_PARAMETERS = 6_738_415_616  # the released checkpoint's parameter count (for the weights read per step)
DEEPSEEK_V2 = dict(num_layers=60, num_heads=128, head_dim=128, latent_dim=512, rope_dim=64)


def _check_bytes_per_number(value) -> int:
    value = check_positive_int("bytes_per_number", value, "bytes of one stored number")
    if value not in (1, 2, 4, 8):
        raise ValueError(f"bytes_per_number should be 1 (8-bit), 2 (fp16/bf16), 4 (fp32) or 8 (fp64), got {value}"
                         + ("; that counts bits: fp16 is 2 bytes" if value in (16, 32, 64) else ""))  # fmt: skip
    return value


def kv_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_number: int = 2, tokens: int = 1, batch: int = 1,
    window: int | None = None,
) -> int:  # fmt: skip
    """2 (K and V) * layers * H_kv * head_dim * bytes per number * tokens * batch. Per token of Llama-2-7B in fp16:
    2 * 32 * 32 * 128 * 2 = 524,288 bytes (512 KiB). With a sliding ``window`` (a rolling buffer), at most
    ``window`` tokens are kept: tokens is replaced by min(tokens, window)."""
    for name, value, meaning in (("num_layers", num_layers, "layers"), ("num_kv_heads", num_kv_heads, "K/V heads"),
                                 ("head_dim", head_dim, "features per head"), ("tokens", tokens, "cached tokens"),
                                 ("batch", batch, "sequences")):  # fmt: skip
        check_positive_int(name, value, meaning)
    bytes_per_number = _check_bytes_per_number(bytes_per_number)
    if window is not None:
        tokens = min(tokens, check_positive_int("window", window, "tokens a rolling buffer keeps"))
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * tokens * batch


def mla_cache_bytes(
    num_layers: int, latent_dim: int, rope_dim: int = 0, bytes_per_number: int = 2, tokens: int = 1, batch: int = 1
) -> int:
    """Multi-head latent attention caches one latent c (d_c numbers) and one shared RoPE key (rope_dim) per token and
    layer, whatever the number of heads: layers * (d_c + rope_dim) * bytes * tokens * batch."""
    for name, value in (("num_layers", num_layers), ("latent_dim", latent_dim), ("tokens", tokens),
                        ("batch", batch)):  # fmt: skip
        check_positive_int(name, value, "a size")
    bytes_per_number = _check_bytes_per_number(bytes_per_number)
    rope_dim = check_int("rope_dim", rope_dim, "features of the decoupled RoPE key", minimum=0)
    if rope_dim % 2:
        raise ValueError(f"rope_dim should be even (RoPE turns pairs of features), got {rope_dim}")
    return num_layers * (latent_dim + rope_dim) * bytes_per_number * tokens * batch


def decode_step_costs(num_heads: int, head_dim: int, latent_dim: int, rope_dim: int = 0) -> dict[str, dict[str, int]]:
    """What one decoding step of one layer costs **per cached token**: numbers read from the cache, and
    multiply-adds of the attention over it (the new token's own projections cost the same whatever the length, and
    are left out). H heads of d, latent d_c, RoPE key d_r:

                              numbers read   multiply-adds
        MHA                       2 H d          H d (scores) + H d (weighted sum)
        MLA, absorbed             d_c + d_r      H (d_c + d_r) + H d_c
        MLA, keys recomputed      d_c + d_r      2 d_c H d (k = c W_uk, v = c W_uv) + H (d + d_r) + H d

    The absorbed form compares each head's query with the latents in the latent space (d_c numbers, not d), so it
    reads less and computes more per token than MHA when d_c > d; recomputing the keys and values keeps the cache
    small and pays 2 d_c H d multiply-adds per cached token at every step. -> {name: {"numbers read", "multiply-adds"}}.
    """
    for name, value in (("num_heads", num_heads), ("head_dim", head_dim), ("latent_dim", latent_dim)):
        check_positive_int(name, value, "a size")
    check_int("rope_dim", rope_dim, "features of the decoupled RoPE key", minimum=0)
    H, d, c, r = num_heads, head_dim, latent_dim, rope_dim
    return {
        "MHA": {"numbers read": 2 * H * d, "multiply-adds": 2 * H * d},
        "MLA, absorbed": {"numbers read": c + r, "multiply-adds": H * (c + r) + H * c},
        "MLA, keys recomputed": {"numbers read": c + r, "multiply-adds": 2 * c * H * d + H * (d + r) + H * d},
    }


# --------------------------------------------------------------------------------------------
# MHA -> GQA by mean-pooling (Ainslie et al. 2023)
# --------------------------------------------------------------------------------------------


def mean_pool_kv_heads(W: torch.Tensor, num_heads: int, num_kv_heads: int, pool: str = "mean") -> torch.Tensor:
    """W (d_model, H * d), a key or value projection applied as x @ W, -> (d_model, H_kv * d): the columns of each
    group of H / H_kv consecutive heads averaged, so new K/V head g is the mean of old heads g*group .. g*group+group-1
    (the query heads that will share it). ``pool="first"`` keeps the first head of each group instead (the
    alternative Ainslie et al. compare mean-pooling with)."""
    check_tensor("W", W, 2, "(d_model, num_heads * head_dim)")
    check_float("W", W)
    num_heads = check_positive_int("num_heads", num_heads, "the heads of W")
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads, "the K/V heads to keep")
    if W.shape[1] % num_heads or num_heads % num_kv_heads:
        raise ValueError(f"num_heads should divide W's {W.shape[1]} columns and num_kv_heads should divide "
                         f"num_heads, got num_heads={num_heads}, num_kv_heads={num_kv_heads}")  # fmt: skip
    check_choice("pool", pool, ("mean", "first"))
    return _mean_pool_kv_heads(W, num_heads, num_kv_heads, pool)


def _mean_pool_kv_heads(W, num_heads, num_kv_heads, pool="mean"):
    d_model, head_dim = W.shape[0], W.shape[1] // num_heads
    groups = W.view(d_model, num_kv_heads, num_heads // num_kv_heads, head_dim)
    return (groups.mean(dim=2) if pool == "mean" else groups[:, :, 0]).reshape(d_model, -1)


@torch.no_grad()
def to_grouped_query(model, num_kv_heads: int, pool: str = "mean"):
    """A copy of the DecoderLM ``model`` (multi-head) with ``num_kv_heads`` key/value heads per block, their W_k and
    W_v mean-pooled over each group (``mean_pool_kv_heads``; ``pool="first"``: the first head of each group kept);
    every other weight copied unchanged."""
    from .blocks import DecoderLM

    _check_model(model)
    first = model.blocks[0].attention
    if first.num_kv_heads != first.num_heads:
        raise ValueError(f"model should be multi-head (num_kv_heads == num_heads), got {first.num_kv_heads} K/V heads "
                         f"for {first.num_heads} query heads")  # fmt: skip
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads, "K/V heads to keep")
    check_choice("pool", pool, ("mean", "first"))
    if first.num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads should divide num_heads={first.num_heads}, got {num_kv_heads}")
    new = DecoderLM(model.embedding.num_embeddings, first.d_model, first.num_heads, len(model.blocks),
                    model.blocks[0].feed_forward.up.weight.shape[0], num_kv_heads, model.tie_embeddings,
                    model.norm.eps)  # fmt: skip
    state = dict(model.state_dict())
    for i in range(len(model.blocks)):
        for name in ("W_k", "W_v"):
            key = f"blocks.{i}.attention.{name}.weight"  # nn.Linear's weight is (out, in): pool its transpose
            state[key] = _mean_pool_kv_heads(state[key].T, first.num_heads, num_kv_heads, pool).T.contiguous()
    new.load_state_dict(state)
    return new.eval()


# --------------------------------------------------------------------------------------------
# Multi-head latent attention (DeepSeek-V2)
# --------------------------------------------------------------------------------------------


def mla_attention(
    x,
    W_q,
    W_dkv,
    W_uk,
    W_uv,
    W_o,
    num_heads: int,
    mask=None,
    absorbed: bool = False,
    W_qr=None,
    W_kr=None,
):
    """Multi-head latent attention (DeepSeek-V2, Sec. 2.1), with or without its decoupled RoPE part:

        c = x W_dkv (B, n, d_c)      cached: d_c numbers per token and layer, for all heads
        q = x W_q,  k = c W_uk,  v = c W_uv, each split into H heads of d
        o = Concat_h softmax(q_h k_h^T / sqrt(d)) v_h  W_o

    absorbed=True computes the same without ever forming k or v: q_h k_h^T = (q_h W_uk,h^T) c^T, so each head's query
    moves into the latent space (d_c), and softmax(...) v_h W_o,h = (softmax(...) c) (W_uv,h W_o,h), one folded
    matrix per head.

    Decoupled RoPE (W_qr and W_kr given). RoPE on k = c W_uk would break the first fold: the score would be
    q_h R_(i-j) W_uk,h^T c_j^T, with a rotation that depends on the pair (i, j) between the query and the latent, so
    no single matrix can be folded into the query. DeepSeek-V2 leaves the content part without positions and adds a
    small separate part that carries them:

        q^R = RoPE(x W_qr) (H heads of d_r),  k^R = RoPE(x W_kr) (B, n, d_r), one key shared by all heads
        score_h(i, j) = (q_h,i k_h,j^T + q^R_h,i k^R_j^T) / sqrt(d + d_r)

    so the cache holds c and k^R: d_c + d_r numbers per token and layer (``mla_cache_bytes``), and the absorbed form
    still works for the content part.

    x (B, n, d_model); W_q (d_model, H d); W_dkv (d_model, d_c); W_uk, W_uv (d_c, H d); W_o (H d, d_model); mask None
    or bool (n, n); W_qr (d_model, H d_r) and W_kr (d_model, d_r), both or neither, d_r even; positions 0..n-1.
    Returns output (B, n, d_model), latent c (B, n, d_c), and k^R (B, n, d_r) rotated (None without RoPE): the two
    tensors a cache would keep.
    """
    check_tensor("x", x, 3, "(batch, n, d_model)")
    check_float("x", x)
    num_heads = check_positive_int("num_heads", num_heads, "query heads")
    check_bool("absorbed", absorbed, "whether to fold the up-projections into the queries and W_o")
    d_model = x.shape[-1]
    check_tensor("W_dkv", W_dkv, 2, "(d_model, latent_dim)")
    latent = W_dkv.shape[1]
    check_tensor("W_q", W_q, 2, "(d_model, num_heads * head_dim)")
    width = W_q.shape[1]
    if width % num_heads:
        raise ValueError(f"num_heads should divide W_q's {width} columns, got num_heads={num_heads}")
    shapes = [("W_q", W_q, (d_model, width)), ("W_dkv", W_dkv, (d_model, latent)), ("W_uk", W_uk, (latent, width)),
               ("W_uv", W_uv, (latent, width)), ("W_o", W_o, (width, d_model))]  # fmt: skip
    if (W_qr is None) != (W_kr is None):
        raise ValueError(
            "W_qr and W_kr should be given together (the decoupled RoPE query and key projections) or not at all, "
            f"got W_qr {describe(W_qr)} and W_kr {describe(W_kr)}"
        )
    rope = W_kr is not None
    if rope:
        check_tensor("W_kr", W_kr, 2, "(d_model, rope_dim)")
        rope_dim = W_kr.shape[1]
        if rope_dim % 2:
            raise ValueError(f"W_kr should have an even number of columns (RoPE turns pairs), got {describe(W_kr)}")
        shapes += [("W_qr", W_qr, (d_model, num_heads * rope_dim)), ("W_kr", W_kr, (d_model, rope_dim))]
    for name, W, shape in shapes:
        check_tensor(name, W, 2, str(shape))
        if tuple(W.shape) != shape:
            raise ValueError(f"{name} should be {shape} (applied as x @ {name}), got {describe(W)}")
    check_same_dtype(x=x, **{name: W for name, W, _ in shapes})
    batch, n, _ = x.shape
    head_dim = width // num_heads
    if mask is not None:
        check_bool_mask("mask", mask)
        check_tensor("mask", mask, 2, "(n, n)")
        check_size("mask", mask, 0, n, "n queries")
        check_size("mask", mask, 1, n, "n keys")
    c = x @ W_dkv  # (B, n, d_c)
    q = split_heads(x @ W_q, num_heads)  # (B, H, n, d)
    k_rope, q_rope, scale = None, None, head_dim
    if rope:
        positions = torch.arange(n)
        q_rope = apply_rope(split_heads(x @ W_qr, num_heads), positions)  # (B, H, n, d_r)
        k_rope = apply_rope(x @ W_kr, positions)  # (B, n, d_r): one key for all heads
        scale = head_dim + rope_dim
    if not absorbed:  # the paper's form: each head's query and key are [content; rope], concatenated
        k, v = split_heads(c @ W_uk, num_heads), split_heads(c @ W_uv, num_heads)
        if rope:
            q = torch.cat([q, q_rope], dim=-1)
            k = torch.cat([k, k_rope[:, None].expand(-1, num_heads, -1, -1)], dim=-1)
        heads, _ = scaled_dot_product_attention(q, k, v, None if mask is None else mask[None, None])
        return merge_heads(heads) @ W_o, c, k_rope
    W_uk_heads = W_uk.view(latent, num_heads, head_dim)  # (d_c, H, d)
    q_latent = torch.einsum("bhnd,chd->bhnc", q, W_uk_heads)  # each head's query in the latent space
    scores = q_latent @ c[:, None].transpose(-2, -1)  # (B, H, n, n), the content part
    if rope:
        scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)  # plus the position part, from the shared key
    weights = masked_softmax(scores / math.sqrt(scale), None if mask is None else mask.expand_as(scores))
    read = weights @ c[:, None]  # (B, H, n, d_c): each head reads the latents
    W_uv_o = torch.einsum("chd,hde->hce", W_uv.view(latent, num_heads, head_dim), W_o.view(num_heads, head_dim, -1))
    return torch.einsum("bhnc,hce->bne", read, W_uv_o), c, k_rope


# --------------------------------------------------------------------------------------------
# FlexAttention on the CPU
# --------------------------------------------------------------------------------------------


def causal_mod(b, h, q_idx, kv_idx):
    """mask_mod of ``attnedu.masks.causal_mask``: key j at or before query i."""
    return q_idx >= kv_idx


def sliding_window_mod(window: int) -> Callable:
    """mask_mod of ``masks.sliding_window_mask(length, window, causal=True)``: 0 <= i - j <= window."""
    window = check_int("window", window, "how many earlier neighbours", minimum=0)

    def mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)

    return mod


def _check_integers(name: str, x, minimum: int | None = None) -> None:
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(f"{name} should hold integers (torch.long), got dtype {x.dtype}")
    if minimum is not None and int(x.min()) < minimum:
        raise ValueError(f"{name} should be at least {minimum}, got {x.tolist()}")


def document_mod(document_ids: torch.Tensor) -> Callable:
    """mask_mod of ``masks.document_mask(document_ids)``: same document and causal. The mod indexes
    ``document_ids`` (batch, length), so it serves inputs of that batch and length only (``flex_attention_cpu`` and
    ``mask_from_mod`` check it)."""
    check_tensor("document_ids", document_ids, 2, "(batch, length)")
    _check_integers("document_ids", document_ids)

    def mod(b, h, q_idx, kv_idx):
        return (document_ids[b, q_idx] == document_ids[b, kv_idx]) & (q_idx >= kv_idx)

    mod.sizes = {"batch": document_ids.shape[0], "length": document_ids.shape[1], "name": "document_ids"}
    return mod


def prefix_lm_mod(prefix_lengths: torch.Tensor) -> Callable:
    """mask_mod of ``masks.prefix_lm_mask(prefix_lengths, lengths, length)`` without padding: causal, or key in the
    prefix (read both ways). Serves inputs of batch ``len(prefix_lengths)``."""
    check_tensor("prefix_lengths", prefix_lengths, 1, "(batch,)")
    _check_integers("prefix_lengths", prefix_lengths, minimum=0)

    def mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) | (kv_idx < prefix_lengths[b])

    mod.sizes = {"batch": prefix_lengths.shape[0], "name": "prefix_lengths"}
    return mod


def alibi_score_mod(slopes: torch.Tensor) -> Callable:
    """score_mod of ALiBi (``positional.alibi_bias``): score - slope_h * (i - j). Serves ``len(slopes)`` heads."""
    check_tensor("slopes", slopes, 1, "(num_heads,)")
    check_float("slopes", slopes)

    def mod(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    mod.sizes = {"heads": slopes.shape[0], "name": "slopes"}
    return mod


def _check_mod(name: str, fn, arity: int, batch: int, heads: int, length: int) -> None:
    """``fn`` a function of ``arity`` positional arguments; one of the course's mods built for these sizes."""
    if fn is None:
        return
    signature = "(b, h, q_idx, kv_idx) -> bool" if arity == 4 else "(score, b, h, q_idx, kv_idx) -> score"
    if not callable(fn):
        raise TypeError(f"{name} should be a function {signature}, got {describe(fn)}")
    try:
        inspect.signature(fn).bind(*range(arity))
    except TypeError:
        raise TypeError(f"{name} should take {arity} arguments {signature}, got a function with signature "
                        f"{inspect.signature(fn)}") from None  # fmt: skip
    except ValueError:  # a builtin without a signature: let torch try it
        pass
    sizes = getattr(fn, "sizes", {})
    for key, value in (("batch", batch), ("heads", heads), ("length", length)):
        if key in sizes and sizes[key] != value:
            raise ValueError(f"{name} should serve inputs of {key} {value}, got one built from {sizes['name']} "
                             f"for {key} {sizes[key]}; build it from {sizes['name']} that match the "
                             "inputs")  # fmt: skip


def flex_attention_cpu(q, k, v, mask_mod: Callable | None = None, score_mod: Callable | None = None):
    """``torch.nn.attention.flex_attention.flex_attention`` in eager mode: q, k, v (B, H, N, d) -> (B, H, N, d); the
    mask from ``mask_mod(b, h, q_idx, kv_idx) -> bool`` (through ``create_block_mask``), the scores changed by
    ``score_mod(score, b, h, q_idx, kv_idx)``. Eager FlexAttention builds the whole score matrix (no fused kernel:
    that needs torch.compile, and only the compiled kernel skips the blocks its BlockMask marks empty), which is what
    a lesson-sized check needs.

    Where torch 2.13's CPU support stops, this says so instead of crashing deep inside torch (measured): no backward
    on the CPU (inputs that require grad are refused), and a device other than the CPU is refused on a machine
    without CUDA."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    _check_heads(q, k, v)
    if q.shape[1] != k.shape[1] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k should have the same heads and length here, got q {describe(q)}, k {describe(k)}")
    if q.device.type == "cuda" and not torch.cuda.is_available():  # pragma: no cover - a CUDA tensor implies CUDA
        raise RuntimeError("q is on a CUDA device, but this machine has no CUDA")
    if q.device.type == "cpu" and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(
            "q, k, v should not require grad on the CPU: FlexAttention in torch 2.13 has no backward on the CPU "
            "(torch raises 'FlexAttention does not support backward on CPU'); for training on the CPU use "
            "attnedu.attention.scaled_dot_product_attention with an explicit mask from attnedu.masks"
        )
    batch, heads, n, _ = q.shape
    _check_mod("mask_mod", mask_mod, 4, batch, heads, n)
    _check_mod("score_mod", score_mod, 5, batch, heads, n)
    try:
        block_mask = None
        if mask_mod is not None:
            block_mask = create_block_mask(mask_mod, batch, heads, n, n, device=q.device.type)
        with warnings.catch_warnings():  # "called without torch.compile()": eager on purpose, see the docstring
            warnings.simplefilter("ignore")
            return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    except IndexError as error:
        raise ValueError(f"mask_mod and score_mod should index only within the tensors they read for inputs of batch "
                         f"{batch}, {heads} heads and length {n}, got: {error}") from error  # fmt: skip


def mask_from_mod(mask_mod: Callable, batch: int, heads: int, length: int) -> torch.Tensor:
    """The dense (B, H, N, N) bool mask a mask_mod describes (``create_mask``), to compare with attnedu.masks'."""
    from torch.nn.attention.flex_attention import create_mask

    for name, value in (("batch", batch), ("heads", heads), ("length", length)):
        check_positive_int(name, value, "a size")
    if mask_mod is None:
        raise TypeError("mask_mod should be a function (b, h, q_idx, kv_idx) -> bool, got None")
    _check_mod("mask_mod", mask_mod, 4, batch, heads, length)
    try:
        return create_mask(mask_mod, batch, heads, length, length, device="cpu")
    except IndexError as error:
        raise ValueError(f"mask_mod should index only within the tensors it reads for batch {batch}, {heads} heads "
                         f"and length {length}, got: {error}") from error  # fmt: skip


EMPTY_BLOCK, PARTIAL_BLOCK, FULL_BLOCK = 0, 1, 2


def block_map(mask_mod: Callable, length: int, block_size: int = 128, batch: int = 0) -> torch.Tensor:
    """What FlexAttention's BlockMask (``create_block_mask``) records for a mask_mod: the score matrix of sequence
    ``batch`` (length x length, head 0) cut into blocks of block_size x block_size, each one

        EMPTY_BLOCK (0)    every entry masked: the compiled kernel skips it, no score computed
        PARTIAL_BLOCK (1)  some entries masked: computed, with mask_mod applied entry by entry
        FULL_BLOCK (2)     no entry masked: computed, mask_mod never called

    -> (blocks, blocks) long, blocks = ceil(length / block_size), row by row the blocks of ``kv_num_blocks``
    (PARTIAL) and ``full_kv_num_blocks`` (FULL). The share of EMPTY_BLOCK entries is the share of blocks the compiled
    kernel skips. It equals ``BlockMask.sparsity()`` / 100 only when length is a multiple of block_size: torch counts
    every computed block as block_size^2 scores, against length^2 in all, so with a last block cut short it reports
    less (at length 130 in blocks of 128, a negative number)."""
    from torch.nn.attention.flex_attention import create_block_mask

    length = check_positive_int("length", length, "queries and keys")
    block_size = check_positive_int("block_size", block_size, "rows and columns of a block")
    sizes = getattr(mask_mod, "sizes", {})
    batch = check_int("batch", batch, "the sequence to show", minimum=0, maximum=sizes.get("batch", batch + 1) - 1)
    _check_mod("mask_mod", mask_mod, 4, sizes.get("batch", batch + 1), 1, length)
    try:
        mask = create_block_mask(mask_mod, sizes.get("batch", batch + 1), 1, length, length, device="cpu",
                                 BLOCK_SIZE=block_size)  # fmt: skip
    except IndexError as error:
        raise ValueError(f"mask_mod should index only within the tensors it reads for length {length}, got: "
                         f"{error}") from error  # fmt: skip
    blocks = -(-length // block_size)
    out = torch.zeros(blocks, blocks, dtype=torch.long)
    for indices, counts, kind in ((mask.kv_indices, mask.kv_num_blocks, PARTIAL_BLOCK),
                                  (mask.full_kv_indices, mask.full_kv_num_blocks, FULL_BLOCK)):  # fmt: skip
        if indices is None:
            continue
        for row in range(blocks):
            out[row, indices[batch, 0, row, : counts[batch, 0, row]]] = kind
    return out


# --------------------------------------------------------------------------------------------
# Linear attention (Katharopoulos et al. 2020)
# --------------------------------------------------------------------------------------------


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 > 0, the feature map of Katharopoulos et al."""
    check_tensor("x", x, (1, 2, 3, 4, 5), "(..., d)")
    check_float("x", x)
    return nn.functional.elu(x) + 1.0


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Linear attention: o_i = phi(q_i) S / (phi(q_i) z), S = sum_j phi(k_j)^T v_j (d x d_v), z = sum_j phi(k_j),
    the sums over all keys, or over j <= i if ``causal`` (running sums: the "RNN" form, a state of d x d_v numbers
    however long the sequence). Time and memory grow like N d d_v, not N^2.

    q (..., N, d), k (..., M, d), v (..., M, d_v) -> (..., N, d_v); causal needs N == M."""
    check_tensor("q", q, (3, 4), "(..., N, d)")
    check_tensor("k", k, (3, 4), "(..., M, d)")
    check_tensor("v", v, (3, 4), "(..., M, d_v)")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_float(name, x)
    check_same_dtype(q=q, k=k, v=v)
    check_bool("causal", causal, "whether query i reads keys j <= i only")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q, k, v should share leading dims, k and v their length, q and k head_dim; got q "
                         f"{describe(q)}, k {describe(k)}, v {describe(v)}")  # fmt: skip
    fq, fk = nn.functional.elu(q) + 1.0, nn.functional.elu(k) + 1.0  # phi, elu_feature_map
    if not causal:
        state = fk.transpose(-2, -1) @ v  # (..., d, d_v)
        return (fq @ state) / (fq @ fk.sum(dim=-2)[..., None])
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal linear attention needs as many queries as keys, got q {describe(q)}, k {describe(k)}")
    states = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=-3)  # (..., N, d, d_v): S after each key
    norms = torch.cumsum(fk, dim=-2)  # (..., N, d)
    numerator = (fq[..., None, :] @ states).squeeze(-2)
    return numerator / (fq * norms).sum(-1, keepdim=True)
