"""The input checks of ``attnedu.kv_cache``: one ``check_<function>`` per public entry there (a cache's ``attend``,
``paged_attention``, ``cache_chunk``, ``rolling_cache_step``), which it calls in its first line before its math, so
that a caller's mistake is refused with a message that names the argument (in the one form of ``attnedu._validate``).
``check_heads`` (q, k, v on heads, H_kv dividing H) is shared with ``attnedu.kv_sharing`` and ``attnedu.flex_masks``;
``check_batch`` with ``attnedu.decoding``. A cache's kind is read from its ``kind`` (this module imports no cache).
"""

from __future__ import annotations

import torch

from ._validate import check_float, check_int, check_same_dtype, check_size, check_tensor, describe


def check_heads(q, k, v, names=("q", "k", "v")) -> tuple[int, int]:
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


def _shown(positions: torch.Tensor) -> str:
    values = positions.tolist()
    if len(values) <= 8:
        return str(values)
    return f"[{values[0]}, {values[1]}, ..., {values[-1]}] ({len(values)} positions)"


def check_batch(cache, name: str, batch: int) -> None:
    """Raise unless ``batch`` sequences may be added to ``cache`` (a PagedSequence holds one sequence)."""
    if cache.kind == "PagedSequence" and batch != 1:
        raise ValueError(f"{name} should hold one sequence (batch 1) for a PagedSequence, got batch {batch}; "
                         "start one sequence per prompt with pool.sequence()")  # fmt: skip


def check_attend(cache, layer, q, k, v, positions) -> None:
    """The arguments of ``cache.attend(layer, q, k, v, positions)``: a layer of the cache; q (B, H, n, d), k, v
    (B, H_kv, n, d) like what the layer holds; positions that continue it; and what the cache's kind adds (a
    preallocated buffer must fit them, a sink cache takes one token at a time)."""
    check_int("layer", layer, "a layer counted from 0", minimum=0, maximum=cache.num_layers - 1)
    check_heads(q, k, v)
    if cache.kind == "PagedSequence":
        check_batch(cache, "q", q.shape[0])
        stored = cache._stored(layer)
        if stored is not None and (k.shape[1], k.shape[3], k.dtype) != (stored.shape[1], stored.shape[3], stored.dtype):
            raise ValueError(f"k should have {stored.shape[1]} K/V heads of {stored.shape[3]} in {stored.dtype}, as "
                             f"the pool's layer {layer} holds, got {describe(k)}")  # fmt: skip
        if q.shape[2] != k.shape[2]:
            raise ValueError(f"q and k should hold the same new tokens, got q {describe(q)} and k {describe(k)}")
        _check_positions(cache, layer, positions, q.shape[2])
        return
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k should hold the same new tokens, got q {describe(q)} and k {describe(k)}")
    check_batch(cache, "q", q.shape[0])
    stored = cache._stored(layer)
    if stored is not None:
        held = (stored.shape[0], stored.shape[1], stored.shape[3], stored.dtype, stored.device)
        if (k.shape[0], k.shape[1], k.shape[3], k.dtype, k.device) != held:
            raise ValueError(
                f"k should be (batch {held[0]}, {held[1]} K/V heads, n, head_dim {held[2]}), {held[3]} on "
                f"{held[4]}, like the keys layer {layer} of the cache already holds, got {describe(k)} on "
                f"{k.device}; a cache serves the sequences it started with: start a new one for other sequences"
            )
    _check_positions(cache, layer, positions, q.shape[2])
    if cache.kind == "PreallocatedKVCache" and cache.lengths[layer] + q.shape[2] > cache.max_length:
        raise ValueError(
            f"q should fit in the buffer: layer {layer} holds {cache.lengths[layer]} of max_length="
            f"{cache.max_length} tokens, got {q.shape[2]} new ones; make the cache with a larger max_length"
        )
    if cache.kind == "SinkCache" and q.shape[2] != 1:
        raise ValueError(f"q should hold one new token for a SinkCache (it is filled one token at a time), got "
                         f"{describe(q)}; feed the stream token by token")  # fmt: skip


def _check_positions(cache, layer: int, positions, n: int) -> None:
    check_tensor("positions", positions, 1, "(n,) positions of the new tokens")
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise TypeError(f"positions should be whole numbers (an integer dtype such as torch.long), got dtype "
                        f"{positions.dtype}; pass torch.arange(start, start + n)")  # fmt: skip
    check_size("positions", positions, 0, n, "n, one position per new token")
    start = cache._next_position(layer)
    expected = torch.arange(start, start + n, device=positions.device)
    if not torch.equal(positions, expected.to(positions.dtype)):
        held = "is empty" if start == 0 else f"holds positions 0..{start - 1}"
        raise ValueError(
            f"positions should continue what layer {layer} of the {cache.kind} holds: it {held}, so the new tokens "
            f"are at {_shown(expected)}, got {_shown(positions)}; a cache holds one sequence from position 0 on, "
            "in order: for another sequence start a new cache"
        )


def check_paged_attention(q, k_pool, v_pool, block_table, lengths) -> None:
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


def check_cache_chunk(q, k_new, v_new, k_cache, v_cache) -> None:
    check_heads(q, k_new, v_new, ("q", "k_new", "v_new"))
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


def check_rolling_cache_step(q, k_new, v_new, k_buffer, v_buffer, position) -> int:
    """The arguments of a one-token step: q (B, H, 1, d), k_new and v_new (B, H_kv, 1, d), the buffers (B, H_kv, W,
    d), all of one float dtype; position an int >= 0. -> position."""
    new, old = "(batch, heads, 1, head_dim)", "(batch, heads, window, head_dim)"
    for name, x, doc in (("q", q, new), ("k_new", k_new, new), ("v_new", v_new, new), ("k_buffer", k_buffer, old),
                         ("v_buffer", v_buffer, old)):  # fmt: skip
        check_tensor(name, x, 4, doc)
        check_float(name, x)
        if doc == new:
            check_size(name, x, 2, 1, "1: one new token per step")
    check_same_dtype(q=q, k_new=k_new, v_new=v_new, k_buffer=k_buffer, v_buffer=v_buffer)
    check_heads(q, k_new, v_new, ("q", "k_new", "v_new"))
    kept = (k_new.shape[0], k_new.shape[1], k_new.shape[3])
    for name, x in (("k_buffer", k_buffer), ("v_buffer", v_buffer)):
        if (x.shape[0], x.shape[1], x.shape[3]) != kept:
            raise ValueError(
                f"{name} should be {old} with the batch, heads and head_dim of k_new {tuple(k_new.shape)}, got "
                f"{describe(x)}"
            )
    if k_buffer.shape != v_buffer.shape:
        raise ValueError(f"k_buffer and v_buffer should have the same shape, got {describe(k_buffer)} and "
                         f"{describe(v_buffer)}")  # fmt: skip
    return check_int("position", position, "the new token's position, counted from 0", minimum=0)
