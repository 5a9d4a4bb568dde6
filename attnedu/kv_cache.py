"""KV caches (lesson 10, "The KV cache", "Sliding windows and a rolling buffer", "Attention sinks"): what a model
keeps between tokens, and how to keep less.

Vectors are rows (q = x W_q); positions, heads, layers and steps count from 0. Shapes: batch B, query heads H,
key/value heads H_kv (H_kv divides H), new tokens n, cached tokens m, head_dim d.

Generating token t+1 needs the keys and values of positions 0..t in every layer. They do not change once computed (a
causal model never lets an old position see a new one), so a cache keeps them and each step computes q, k, v for the
new tokens only:

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
    cache_chunk(q, k, v, k_cache, v_cache)   n new tokens of one layer through a cache

A model runs through a cache with ``attnedu.decoding`` (``lm_forward``, ``generate_greedy``, ``streaming_losses``);
its size is ``attnedu.cache_sizes.kv_cache_bytes``.

Each public entry (a cache's ``attend``, ``paged_attention``, ``cache_chunk``, ``rolling_cache_step``) checks its
arguments in one call (the checks are in ``attnedu._validate_kv_cache``), then runs the math in a private function
(``KVCache._attend``, ``_paged_attention``, ``_cache_chunk``, ``_rolling_cache_step``) that the package's own callers
(``attnedu.decoding``, the attention's KV-cache hook ``MultiHeadAttention._attend``) use directly.
"""

from __future__ import annotations

from collections import deque

import torch

from ._validate import check_instance, check_int, check_positive_int
from ._validate_kv_cache import check_attend, check_cache_chunk, check_paged_attention, check_rolling_cache_step
from .kv_sharing import _grouped_attention
from .positional import apply_rope


def _buffers(k, v, rows: int, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeroed K and V buffers (rows, H_kv, slots, d) of the dtype and device of the new keys k and values v (B, H_kv,
    n, d): the memory a preallocated, rolling or paged cache reserves at a layer's first tokens."""
    return k.new_zeros(rows, k.shape[1], slots, k.shape[-1]), v.new_zeros(rows, v.shape[1], slots, v.shape[-1])


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

    def attend(self, layer: int, q, k, v, positions: torch.Tensor) -> torch.Tensor:
        check_attend(self, layer, q, k, v, positions)
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


class _CountedKVCache(KVCache):
    """A ``KVCache`` whose layers count the tokens they have processed in ``lengths``: what it stores is not that many
    (a buffer reserved ahead, a window, blocks of a pool)."""

    def __init__(self, num_layers: int):
        super().__init__(num_layers)
        self.lengths = [0] * self.num_layers

    def _next_position(self, layer: int) -> int:
        return self.lengths[layer]

    def _rotated_into_buffers(self, layer, q, k, v, positions, slots: int):
        """q and k rotated at their positions; the layer's buffers of ``slots`` tokens reserved at its first tokens."""
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = _buffers(k, v, k.shape[0], slots)
        return apply_rope(q, positions), apply_rope(k, positions)


class PreallocatedKVCache(_CountedKVCache):
    """A ``KVCache`` without its copies: each layer's buffers ``k[layer]``, ``v[layer]`` (B, H_kv, max_length, d) are
    allocated once, at the layer's first tokens, and every new key and value is written in place, at positions
    m..m+n-1; attention reads the view ``[:, :, :m + n]`` (no copy). Storing a token costs that token, whatever the
    length; the price is the memory of ``max_length`` tokens, reserved from the start (``nbytes``), which a paged
    cache does not pay."""

    kind = "PreallocatedKVCache"

    def __init__(self, num_layers: int, max_length: int):
        super().__init__(num_layers)
        self.max_length = check_positive_int("max_length", max_length, "tokens each buffer can hold")

    def _attend(self, layer, q, k, v, positions):
        q, k = self._rotated_into_buffers(layer, q, k, v, positions, self.max_length)
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


class PagedSequence(_CountedKVCache):
    """One sequence's cache in a ``PagedKVCache`` pool (made by ``pool.sequence()``): ``block_table`` lists its
    blocks; ``attend`` (batch 1) writes the new keys and values into their blocks, taking a free block when a token
    starts a new one, then attends over the sequence's blocks read through the table (``paged_attention``)."""

    kind = "PagedSequence"

    def __init__(self, pool: PagedKVCache):
        check_instance("pool", pool, PagedKVCache, "a PagedKVCache")
        super().__init__(pool.num_layers)
        self.pool = pool
        self.block_table: list[int] = []

    def _stored(self, layer):
        return self.pool.k[layer]  # (num_blocks, H_kv, block_size, d): heads, head_dim and dtype; batch checked apart

    def _attend(self, layer, q, k, v, positions):
        pool, size = self.pool, self.pool.block_size
        q, k = apply_rope(q, positions), apply_rope(k, positions)
        if pool.k[layer] is None:
            pool.k[layer], pool.v[layer] = _buffers(k, v, pool.num_blocks, size)
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
    check_paged_attention(q, k_pool, v_pool, block_table, lengths)
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


class RollingKVCache(_CountedKVCache):
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

    def _attend(self, layer, q, k, v, positions):
        q, k = self._rotated_into_buffers(layer, q, k, v, positions, self.window)
        if self.slot_positions[layer] is None:
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


class SinkCache(_CountedKVCache):
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


def cache_chunk(q, k_new, v_new, k_cache, v_cache):
    """n new tokens of one layer at once through a KV cache with RoPE (a piece of a long prompt, or draft tokens to
    check: the exercise's reference): with m tokens cached at positions 0..m-1, new token i sits at position m + i,

        q_i, k_i <- RoPE(q_i, m + i), RoPE(k_i, m + i);  K = [k_cache; k_new];  V = [v_cache; v_new]
        o_i = softmax(q_i K^T / sqrt(d) over the keys at positions 0..m + i) V

    which is what causal attention over all m + n tokens gives at the new positions.

    q (B, H, n, d), k_new, v_new (B, H_kv, n, d), before RoPE; k_cache (B, H_kv, m, d) already rotated, v_cache
    (B, H_kv, m, d); m may be 0. -> o (B, H, n, d), K and V (B, H_kv, m + n, d)."""
    check_cache_chunk(q, k_new, v_new, k_cache, v_cache)
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
    position = check_rolling_cache_step(q, k_new, v_new, k_buffer, v_buffer, position)
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
