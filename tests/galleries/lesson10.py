"""Lesson 10, 10_attention_at_inference: the galleries of ``kv_cache_chunk``, ``paged_decode``, ``cache_bytes`` and
``rolling_step`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py
describes them), REFERENCE_USE: functions that are, or call, the package's own lesson 10 modules (``attnedu.kv_cache``,
``cache_sizes``, ...), which the exercises forbid, and PREDICTIONS: the graded predictions ``chunk_prediction``,
``server_cache_gib`` and ``predicted_slots``.

The correct versions are written as a learner would: with torch's SDPA (enable_gqa), by hand, with einsum or loops.
The KV-cache chunk and the rolling step read one sequence's cache (or buffer) and a cache-size calculator reads
configurations: none has padding (KINDS_NOT_APPLICABLE). The paged decode's padding is the unused rest of each
sequence's last block.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu import cache_sizes, kv_cache
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.positional import apply_rope

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def learner_kv_cache_chunk(q, k_new, v_new, k_cache, v_cache):
    m, n = k_cache.shape[2], q.shape[2]
    pos = torch.arange(m, m + n)
    q, k_new = apply_rope(q, pos), apply_rope(k_new, pos)
    K = torch.cat([k_cache, k_new], dim=2)
    V = torch.cat([v_cache, v_new], dim=2)
    scores = q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(torch.arange(m + n)[None, :] > pos[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ V, K, V


def learner_kv_cache_chunk_sdpa(q, k_new, v_new, k_cache, v_cache):
    """RoPE written out by hand (halves layout), torch's SDPA with the causal mask aligned to the bottom-right."""
    m, n, d = k_cache.shape[2], q.shape[2], q.shape[-1]
    pos = torch.arange(m, m + n, dtype=torch.float64)[:, None]
    angle = pos * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cos(angle).float(), torch.sin(angle).float()

    def rope(x):
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    K, V = torch.cat((k_cache, rope(k_new)), 2), torch.cat((v_cache, v_new), 2)
    mask = torch.ones(n, m + n, dtype=torch.bool).tril(diagonal=m)
    return F.scaled_dot_product_attention(rope(q), K, V, attn_mask=mask), K, V


def learner_kv_cache_chunk_loop(q, k_new, v_new, k_cache, v_cache):
    """One token at a time, the cache grown after each: what a decoding loop does."""
    K, V, outs = k_cache, v_cache, []
    for i in range(q.shape[2]):
        pos = torch.tensor([K.shape[2]])
        K = torch.cat([K, apply_rope(k_new[:, :, i : i + 1], pos)], dim=2)
        V = torch.cat([V, v_new[:, :, i : i + 1]], dim=2)
        w = torch.softmax(apply_rope(q[:, :, i : i + 1], pos) @ K.mT / math.sqrt(q.shape[-1]), dim=-1)
        outs.append(w @ V)
    return torch.cat(outs, dim=2), K, V


def _gather(pool, blocks, n):
    """(H_kv, n, d): a sequence's first n positions, its blocks one after another."""
    return pool[blocks].transpose(0, 1).reshape(pool.shape[1], -1, pool.shape[-1])[:, :n]


def learner_paged_decode(q, k_pool, v_pool, block_table, lengths):
    size, group = k_pool.shape[2], q.shape[1] // k_pool.shape[1]
    out = []
    for b in range(q.shape[0]):
        n = int(lengths[b])
        blocks = block_table[b, : (n + size - 1) // size]
        k = _gather(k_pool, blocks, n).repeat_interleave(group, dim=0)
        v = _gather(v_pool, blocks, n).repeat_interleave(group, dim=0)
        out.append(torch.softmax(q[b] @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v)
    return torch.stack(out)


def learner_paged_decode_sdpa(q, k_pool, v_pool, block_table, lengths):
    """Every sequence's whole table gathered at once (padding entries clamped to a real block), masked by length,
    then SDPA with enable_gqa for the head pairing."""
    size = k_pool.shape[2]
    table = block_table.clamp(min=0)
    k = k_pool[table].transpose(1, 2).flatten(2, 3)  # (B, H_kv, blocks * size, d)
    v = v_pool[table].transpose(1, 2).flatten(2, 3)
    keep = torch.arange(table.shape[1] * size)[None, :] < lengths[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], enable_gqa=True)


def learner_paged_decode_positions(q, k_pool, v_pool, block_table, lengths):
    """Position by position: block p // size, offset p % size; einsum for the scores."""
    size, group = k_pool.shape[2], q.shape[1] // k_pool.shape[1]
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        where = [(int(block_table[b, p // size]), p % size) for p in range(int(lengths[b]))]
        k = torch.stack([k_pool[i, :, o] for i, o in where], dim=1)  # (H_kv, n, d)
        v = torch.stack([v_pool[i, :, o] for i, o in where], dim=1)
        k, v = k[torch.arange(q.shape[1]) // group], v[torch.arange(q.shape[1]) // group]
        s = torch.einsum("hqd,hkd->hqk", q[b], k) / math.sqrt(q.shape[-1])
        out[b] = torch.einsum("hqk,hkd->hqd", s.softmax(-1), v)
    return out


def learner_cache_bytes(num_layers, num_heads, num_kv_heads, head_dim, bytes_per_number, seq_len, batch, window):
    tokens = torch.where(window > 0, torch.minimum(seq_len, window), seq_len)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * batch * tokens


def learner_cache_bytes_loop(num_layers, num_heads, num_kv_heads, head_dim, bytes_per_number, seq_len, batch, window):
    out = []
    for i in range(len(num_layers)):
        tokens = int(seq_len[i]) if int(window[i]) == 0 else min(int(seq_len[i]), int(window[i]))
        out.append(2 * int(num_layers[i]) * int(num_kv_heads[i]) * int(head_dim[i]) * int(bytes_per_number[i])
                   * tokens * int(batch[i]))  # fmt: skip
    return torch.tensor(out)


def learner_rolling_step(q, k_new, v_new, k_buffer, v_buffer, position):
    W = k_buffer.shape[2]
    k_buffer, v_buffer = k_buffer.clone(), v_buffer.clone()
    pos = torch.tensor([position])
    k_buffer[:, :, position % W] = apply_rope(k_new, pos)[:, :, 0]
    v_buffer[:, :, position % W] = v_new[:, :, 0]
    n = min(position + 1, W)
    K, V = k_buffer[:, :, :n], v_buffer[:, :, :n]
    scores = apply_rope(q, pos) @ K.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ V, k_buffer, v_buffer


def learner_rolling_step_masked(q, k_new, v_new, k_buffer, v_buffer, position):
    """Every slot read, the never-written ones masked out, torch's SDPA for the attention."""
    W = k_buffer.shape[2]
    kb, vb = k_buffer.clone(), v_buffer.clone()
    slot = position % W
    kb[:, :, slot : slot + 1] = apply_rope(k_new, torch.tensor([position]))
    vb[:, :, slot : slot + 1] = v_new
    written = (torch.arange(W) <= position)[None, :]  # before the buffer is full, slots position+1.. hold nothing
    out = F.scaled_dot_product_attention(apply_rope(q, torch.tensor([position])), kb, vb, attn_mask=written)
    return out, kb, vb


def learner_rolling_step_in_order(q, k_new, v_new, k_buffer, v_buffer, position):
    """The window's positions oldest first, gathered slot by slot, einsum for the attention."""
    W, d = k_buffer.shape[2], q.shape[-1]
    k_buf, v_buf = k_buffer.detach().clone(), v_buffer.detach().clone()
    k_buf[:, :, position % W, :] = apply_rope(k_new, torch.tensor([position])).squeeze(2)
    v_buf[:, :, position % W, :] = v_new.squeeze(2)
    slots = [p % W for p in range(max(0, position - W + 1), position + 1)]
    K, V = k_buf[:, :, slots], v_buf[:, :, slots]
    s = torch.einsum("bhqd,bhkd->bhqk", apply_rope(q, torch.tensor([position])), K) / d**0.5
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), V), k_buf, v_buf


CORRECT = {
    "kv_cache_chunk": [learner_kv_cache_chunk, learner_kv_cache_chunk_sdpa, learner_kv_cache_chunk_loop],
    "paged_decode": [learner_paged_decode, learner_paged_decode_sdpa, learner_paged_decode_positions],
    "cache_bytes": [learner_cache_bytes, learner_cache_bytes_loop],
    "rolling_step": [learner_rolling_step, learner_rolling_step_masked, learner_rolling_step_in_order],
}


def _chunk_with_the_packages_cache(q, k_new, v_new, k_cache, v_cache):
    cache = kv_cache.KVCache(1)
    cache.k[0], cache.v[0] = k_cache, v_cache
    m = k_cache.shape[2]
    out = cache.attend(0, q, k_new, v_new, torch.arange(m, m + q.shape[2]))
    return out, cache.k[0], cache.v[0]


REFERENCE_USE = [
    ("kv_cache_chunk", kv_cache.cache_chunk),
    ("kv_cache_chunk", _chunk_with_the_packages_cache),
    ("paged_decode", kv_cache.paged_attention),
    (
        "cache_bytes",
        lambda L, H, Hkv, d, b, s, n, w: torch.tensor(
            [cache_sizes.kv_cache_bytes(*r) for r in zip(*(t.tolist() for t in (L, Hkv, d, b, s, n)))]
        ),
    ),  # fmt: skip
    ("rolling_step", kv_cache.rolling_cache_step),
]

# --------------------------------------------------------------------------------------------
# Mutants, with the diagnosis each must get
# --------------------------------------------------------------------------------------------


def _chunk(q, k_new, v_new, k_cache, v_cache, *, shift=0, same=False, from_zero=False, rot_q=True, rot_k=True,
           before=False, read="all", causal="bottom", divide=None, layout="halves", again=False):  # fmt: skip
    m, n = k_cache.shape[2], q.shape[2]
    pos = (torch.full((n,), m) if same else torch.arange(n) if from_zero else torch.arange(m, m + n)) + shift
    if rot_q:
        q = apply_rope(q, pos, layout)
    if rot_k:
        k_new = apply_rope(k_new, pos, layout)
    if again and m:
        k_cache = apply_rope(k_cache, torch.arange(m))
    K = torch.cat([k_new, k_cache], 2) if before else torch.cat([k_cache, k_new], 2)
    V = torch.cat([v_new, v_cache], 2) if before else torch.cat([v_cache, v_new], 2)
    if read == "cache":
        if m == 0:
            return torch.zeros_like(v_new), K, V
        return F.scaled_dot_product_attention(q, k_cache, v_cache, scale=None if divide is None else 1.0), K, V
    keys, values = (K, V) if read == "all" else (k_new, v_new)
    rows, cols = torch.arange(n)[:, None], torch.arange(keys.shape[2])[None, :]
    offset = keys.shape[2] - n
    allowed = {"bottom": cols <= rows + offset, "top": cols <= rows, "none": cols >= 0,
               "strict": cols < rows + offset}[causal]  # fmt: skip
    scale = math.sqrt(q.shape[-1]) if divide is None else divide(K)
    s = (q @ keys.mT / scale).masked_fill(~allowed, -math.inf)
    return torch.nan_to_num(s.softmax(-1)) @ values, K, V


def ch_attend_first(*a):
    return _chunk(*a, read="cache")


def ch_new_only(*a):
    return _chunk(*a, read="new")


def ch_position_minus_one(*a):
    return _chunk(*a, shift=-1)


def ch_position_plus_one(*a):
    return _chunk(*a, shift=1)


def ch_all_at_m(*a):
    return _chunk(*a, same=True)


def ch_from_zero(*a):
    return _chunk(*a, from_zero=True)


def ch_no_mask(*a):
    return _chunk(*a, causal="none")


def ch_top_left(*a):
    return _chunk(*a, causal="top")


def ch_strict(*a):
    return _chunk(*a, causal="strict")


def ch_q_not_rotated(*a):
    return _chunk(*a, rot_q=False)


def ch_k_not_rotated(*a):
    return _chunk(*a, rot_k=False)


def ch_no_rope(*a):
    return _chunk(*a, rot_q=False, rot_k=False)


def ch_rotated_again(*a):
    return _chunk(*a, again=True)


def ch_prepended(*a):
    return _chunk(*a, before=True)


def ch_interleaved(*a):
    return _chunk(*a, layout="interleaved")


def ch_unscaled(*a):
    return _chunk(*a, divide=lambda K: 1.0)


def ch_by_length(*a):
    return _chunk(*a, divide=lambda K: math.sqrt(K.shape[2]))


def ch_one_key_ahead(q, k_new, v_new, k_cache, v_cache):
    """The mask's comparison off by one: `> pos + 1` instead of `> pos`."""
    m, n = k_cache.shape[2], q.shape[2]
    pos = torch.arange(m, m + n)
    q, k_new = apply_rope(q, pos), apply_rope(k_new, pos)
    K, V = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    s = (q @ K.mT / math.sqrt(q.shape[-1])).masked_fill(torch.arange(m + n)[None, :] > pos[:, None] + 1, -math.inf)
    return s.softmax(-1) @ V, K, V


def ch_cache_unrotated(q, k_new, v_new, k_cache, v_cache):
    """Attends with the rotated keys, returns the cache grown with the keys as they came."""
    m = k_cache.shape[2]
    pos = torch.arange(m, m + q.shape[2])
    K = torch.cat([k_cache, apply_rope(k_new, pos)], 2)
    V = torch.cat([v_cache, v_new], 2)
    keep = torch.ones(q.shape[2], m + q.shape[2], dtype=torch.bool).tril(diagonal=m)
    out = F.scaled_dot_product_attention(apply_rope(q, pos), K, V, attn_mask=keep)
    return out, torch.cat([k_cache, k_new], 2), V


def _paged(q, k_pool, v_pool, block_table, lengths, *, how="interleave", extra=0, mask=True, blocks="table",
           divide=None):  # fmt: skip
    size, heads, kv_heads = k_pool.shape[2], q.shape[1], k_pool.shape[1]
    group = heads // kv_heads
    out = []
    for b in range(q.shape[0]):
        n = int(lengths[b])
        used = block_table[b, : -(-n // size)]
        used = {"table": used, "pool": torch.arange(len(used)), "sorted": used.sort().values}[blocks]
        k = k_pool[used].transpose(0, 1).reshape(kv_heads, -1, q.shape[-1])
        v = v_pool[used].transpose(0, 1).reshape(kv_heads, -1, q.shape[-1])
        if how == "interleave":
            k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        elif how == "repeat":
            k, v = k.repeat(group, 1, 1), v.repeat(group, 1, 1)
        else:
            k, v = k[[0] * heads], v[[0] * heads]
        s = q[b] @ k.mT / (math.sqrt(q.shape[-1]) if divide is None else divide(q, k_pool))
        if mask:
            s = s.masked_fill(torch.arange(k.shape[1]) >= n + extra, -math.inf)
        out.append(s.softmax(-1) @ v)
    return torch.stack(out)


def pd_repeat(*a):
    return _paged(*a, how="repeat")


def pd_head_zero(*a):
    return _paged(*a, how="first")


def pd_no_mask(*a):
    return _paged(*a, mask=False)


def pd_last_masked(*a):
    return _paged(*a, extra=-1)


def pd_one_more(*a):
    return _paged(*a, extra=1)


def pd_pool_order(*a):
    return _paged(*a, blocks="pool")


def pd_sorted_blocks(*a):
    return _paged(*a, blocks="sorted")


def pd_unscaled(*a):
    return _paged(*a, divide=lambda q, k: 1.0)


def pd_by_heads(*a):
    return _paged(*a, divide=lambda q, k: math.sqrt(q.shape[-1] * k.shape[1]))


def pd_newest_left_out(q, k_pool, v_pool, block_table, lengths):
    """Positions 0..lengths[b] - 2 sliced out, as if the newest token were not in the pool yet."""
    size, group = k_pool.shape[2], q.shape[1] // k_pool.shape[1]
    out = []
    for b in range(q.shape[0]):
        n = int(lengths[b])
        blocks = block_table[b, : -(-n // size)]
        k = _gather(k_pool, blocks, n)[:, : n - 1].repeat_interleave(group, 0)
        v = _gather(v_pool, blocks, n)[:, : n - 1].repeat_interleave(group, 0)
        out.append(torch.softmax(q[b] @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v)
    return torch.stack(out)


def pd_every_entry(q, k_pool, v_pool, block_table, lengths):
    """The table's whole row gathered, its -1 entries too (Python reads -1 as the last block), and nothing cut."""
    group = q.shape[1] // k_pool.shape[1]
    out = []
    for b in range(q.shape[0]):
        k = _gather(k_pool, block_table[b], None).repeat_interleave(group, 0)
        v = _gather(v_pool, block_table[b], None).repeat_interleave(group, 0)
        out.append(torch.softmax(q[b] @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v)
    return torch.stack(out)


def pd_no_transpose(q, k_pool, v_pool, block_table, lengths):
    """(blocks, kv_heads, size, d) reshaped to (kv_heads, blocks * size, d) as it lies in memory."""
    size, kv_heads, d = k_pool.shape[2], k_pool.shape[1], k_pool.shape[3]
    out = []
    for b in range(q.shape[0]):
        n = int(lengths[b])
        blocks = block_table[b, : -(-n // size)]
        k = k_pool[blocks].reshape(kv_heads, -1, d)[:, :n]
        v = v_pool[blocks].reshape(kv_heads, -1, d)[:, :n]
        out.append(F.scaled_dot_product_attention(q[b : b + 1], k[None], v[None], enable_gqa=True)[0])
    return torch.stack(out)


def cb_query_heads(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(L, H, H, d, b, s, n, w)


def cb_no_two(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(L, H, Hkv, d, b, s, n, w) // 2


def cb_no_window(L, H, Hkv, d, b, s, n, w):
    return 2 * L * Hkv * d * b * s * n


def cb_window_plus(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(L, H, Hkv, d, b, s, n, torch.where(w > 0, w + 1, w))


def cb_window_minus(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(L, H, Hkv, d, b, s, n, torch.where(w > 0, w - 1, w))


def cb_int32(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(*(t.to(torch.int32) for t in (L, H, Hkv, d, b, s, n, w))).long()


def cb_int32_result(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(*(t.to(torch.int32) for t in (L, H, Hkv, d, b, s, n, w)))


def cb_float_result(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(*(t.float() for t in (L, H, Hkv, d, b, s, n, w)))


def cb_double_result(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(*(t.double() for t in (L, H, Hkv, d, b, s, n, w)))


def cb_allocated(L, H, Hkv, d, b, s, n, w):
    """The lesson's RollingKVCache allocates all W slots at once: W counted, however short the text."""
    tokens = torch.where(w > 0, w, s)
    return 2 * L * Hkv * d * b * n * tokens


def _rolling(q, k_new, v_new, k_buffer, v_buffer, position, *, slot=None, key_pos=None, rot_q=True, first=False,
             keys="window", again=False, divide=True):  # fmt: skip
    W = k_buffer.shape[2]
    kb, vb = k_buffer.clone(), v_buffer.clone()
    where = position % W if slot is None else slot(position, W)
    k = apply_rope(k_new, torch.tensor([position if key_pos is None else key_pos(position, W)]))
    if rot_q:
        q = apply_rope(q, torch.tensor([position]))
    old_k, old_v = kb.clone(), vb.clone()
    kb[:, :, where], vb[:, :, where] = k[:, :, 0], v_new[:, :, 0]
    K, V = (old_k, old_v) if first else (kb, vb)
    if keys == "window":
        chosen = [p % W for p in range(max(0, position - W + 1), position + 1)]
    elif keys == "all":
        chosen = list(range(W))
    else:  # W - 1 keys
        chosen = [p % W for p in range(max(0, position - W + 2), position + 1)]
    K, V = K[:, :, chosen], V[:, :, chosen]
    if again:  # each older key turned once more by the position it holds
        held = torch.tensor([position - (position - c) % W for c in chosen])
        turned = apply_rope(K, held)
        keep_new = torch.tensor([c == where for c in chosen])[:, None]
        K = torch.where(keep_new, K, turned)
    s = q @ K.mT / (math.sqrt(q.shape[-1]) if divide else 1.0)
    return s.softmax(-1) @ V, kb, vb


def rs_slot_plus_one(*a):
    return _rolling(*a, slot=lambda p, W: (p + 1) % W)


def rs_slot_minus_one(*a):
    return _rolling(*a, slot=lambda p, W: (p - 1) % W)


def rs_slot_div(*a):
    return _rolling(*a, slot=lambda p, W: p // W)


def rs_slot_last(*a):
    return _rolling(*a, slot=lambda p, W: min(p, W - 1))


def rs_attend_first(*a):
    return _rolling(*a, first=True)


def rs_reads_unwritten(*a):
    return _rolling(*a, keys="all")


def rs_window_short(*a):
    return _rolling(*a, keys="short")


def rs_window_plus_one(q, k_new, v_new, k_buffer, v_buffer, position):
    """As RollingKVCache.attend reads, without its distance mask: the buffer's filled slots, then the new key."""
    W = k_buffer.shape[2]
    pos = torch.tensor([position])
    k, filled = apply_rope(k_new, pos), min(position, W)
    K = torch.cat([k_buffer[:, :, :filled], k], dim=2)
    V = torch.cat([v_buffer[:, :, :filled], v_new], dim=2)
    out = F.scaled_dot_product_attention(apply_rope(q, pos), K, V)
    kb, vb = k_buffer.clone(), v_buffer.clone()
    kb[:, :, position % W], vb[:, :, position % W] = k[:, :, 0], v_new[:, :, 0]
    return out, kb, vb


def rs_key_by_slot(*a):
    return _rolling(*a, key_pos=lambda p, W: p % W)


def rs_q_not_rotated(*a):
    return _rolling(*a, rot_q=False)


def rs_rotated_again(*a):
    return _rolling(*a, again=True)


def rs_unscaled(*a):
    return _rolling(*a, divide=False)


def _rolling_reads(q, k_new, v_new, k_buffer, v_buffer, position, count):
    """The right write, then the first ``count(position, W)`` slots read."""
    W = k_buffer.shape[2]
    kb, vb = k_buffer.clone(), v_buffer.clone()
    pos = torch.tensor([position])
    kb[:, :, position % W], vb[:, :, position % W] = apply_rope(k_new, pos)[:, :, 0], v_new[:, :, 0]
    n = count(position, W)
    s = apply_rope(q, pos) @ kb[:, :, :n].mT / math.sqrt(q.shape[-1])
    return s.softmax(-1) @ vb[:, :, :n], kb, vb


def rs_up_to_its_slot(*a):
    return _rolling_reads(*a, count=lambda p, W: p % W + 1)


def rs_written_before(*a):
    return _rolling_reads(*a, count=lambda p, W: min(p, W))


def rs_first_slots_short(*a):
    return _rolling_reads(*a, count=lambda p, W: max(1, min(p + 1, W - 1)))


def rs_key_kept_unrotated(q, k_new, v_new, k_buffer, v_buffer, position):
    """Attends with the rotated key (concatenated apart), stores the key as it came."""
    W = k_buffer.shape[2]
    pos = torch.tensor([position])
    kb, vb = k_buffer.clone(), v_buffer.clone()
    kb[:, :, position % W], vb[:, :, position % W] = k_new[:, :, 0], v_new[:, :, 0]
    keys = [kb[:, :, s] if s != position % W else apply_rope(k_new, pos)[:, :, 0] for s in range(min(position + 1, W))]
    K = torch.stack(keys, dim=2)
    out = F.scaled_dot_product_attention(apply_rope(q, pos), K, vb[:, :, : min(position + 1, W)])
    return out, kb, vb


MUTANTS = [
    ("kv_cache_chunk", ch_attend_first, "attended before the new keys and values were appended"),
    ("kv_cache_chunk", ch_new_only, "read only the new tokens' keys and values"),
    ("kv_cache_chunk", ch_position_minus_one, "position m + i - 1"),
    ("kv_cache_chunk", ch_position_plus_one, "position m + i + 1"),
    ("kv_cache_chunk", ch_all_at_m, "every new token was rotated as position m"),
    ("kv_cache_chunk", ch_from_zero, "rotated as positions 0, 1"),
    ("kv_cache_chunk", ch_no_mask, "attended to the new tokens after them"),
    ("kv_cache_chunk", ch_top_left, "aligned to the top-left corner"),
    ("kv_cache_chunk", ch_strict, "kept from reading its own key"),
    ("kv_cache_chunk", ch_q_not_rotated, "the queries were not rotated"),
    ("kv_cache_chunk", ch_k_not_rotated, "the new keys were not rotated"),
    ("kv_cache_chunk", ch_no_rope, "neither the queries nor the new keys were rotated"),
    ("kv_cache_chunk", ch_rotated_again, "the cached keys were rotated again"),
    ("kv_cache_chunk", ch_prepended, "went in front of the cache"),
    ("kv_cache_chunk", ch_interleaved, "interleaved layout"),
    ("kv_cache_chunk", ch_unscaled, "the scores are not scaled"),
    ("kv_cache_chunk", ch_by_length, "square root of the number of keys"),
    ("kv_cache_chunk", ch_one_key_ahead, "also read the key of the token just after it"),
    ("kv_cache_chunk", ch_cache_unrotated, "the cache you return holds the new keys as they came"),
    ("paged_decode", pd_repeat, "the K/V heads were tiled"),
    ("paged_decode", pd_head_zero, "every query head read K/V head 0"),
    ("paged_decode", pd_no_mask, "the slots past each sequence's length were read"),
    ("paged_decode", pd_last_masked, "each sequence's newest token was left out"),
    ("paged_decode", pd_newest_left_out, "each sequence's newest token was left out"),
    ("paged_decode", pd_every_entry, "the -1 entries too"),
    ("paged_decode", pd_no_transpose, "with the block axis still in front of the head axis"),
    ("paged_decode", pd_one_more, "the slot after each sequence's last token was read too"),
    ("paged_decode", pd_pool_order, "the block table was ignored"),
    ("paged_decode", pd_sorted_blocks, "read in the pool's order, not the table's"),
    ("paged_decode", pd_unscaled, "the scores are not scaled"),
    ("paged_decode", pd_by_heads, "sqrt(head_dim * kv_heads)"),
    ("cache_bytes", cb_query_heads, "you counted the query heads"),
    ("cache_bytes", cb_no_two, "the factor 2 is missing"),
    ("cache_bytes", cb_no_window, "the window was ignored"),
    ("cache_bytes", cb_window_plus, "window + 1 tokens"),
    ("cache_bytes", cb_window_minus, "window - 1 tokens"),
    ("cache_bytes", cb_int32, "32-bit integers"),
    ("cache_bytes", cb_int32_result, "came back in 32-bit integers"),
    ("cache_bytes", cb_float_result, "came back in 32-bit floats"),
    ("cache_bytes", cb_double_result, "came back as floating-point numbers (float64)"),
    ("cache_bytes", cb_allocated, "you counted the slots the buffer allocates"),
    ("rolling_step", rs_slot_plus_one, "slot (position + 1) % W"),
    ("rolling_step", rs_slot_minus_one, "slot (position - 1) % W"),
    ("rolling_step", rs_slot_div, "slot position // W"),
    ("rolling_step", rs_slot_last, "slot min(position, W - 1)"),
    ("rolling_step", rs_attend_first, "attended before its key and value were written"),
    ("rolling_step", rs_reads_unwritten, "the query read every slot"),
    ("rolling_step", rs_window_short, "the window is one short"),
    ("rolling_step", rs_window_plus_one, "the window is one too long"),
    ("rolling_step", rs_key_by_slot, "rotated by its slot"),
    ("rolling_step", rs_q_not_rotated, "the query was not rotated"),
    ("rolling_step", rs_rotated_again, "rotated again by their positions"),
    ("rolling_step", rs_unscaled, "the scores are not scaled"),
    ("rolling_step", rs_up_to_its_slot, "only the slots from 0 up to the new token's"),
    ("rolling_step", rs_written_before, "only the slots written before this step"),
    ("rolling_step", rs_first_slots_short, "the window is one short"),
    ("rolling_step", rs_key_kept_unrotated, "the buffer you return holds the new key as it came"),
]

# the positions one step late and one early; the length one slot too far and one too near; the window one token too
# long and one too short; the slot one too far on and one too early
OFF_BY_ONE = {
    "kv_cache_chunk": (ch_position_plus_one, ch_position_minus_one),
    "paged_decode": (pd_one_more, pd_last_masked),
    "cache_bytes": (cb_window_plus, cb_window_minus),
    "rolling_step": (rs_slot_plus_one, rs_slot_minus_one),
}

# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def ch_softmax_by_exp(q, k_new, v_new, k_cache, v_cache):
    m, n = k_cache.shape[2], q.shape[2]
    pos = torch.arange(m, m + n)
    q, k_new = apply_rope(q, pos), apply_rope(k_new, pos)
    K, V = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    e = torch.exp(q @ K.mT / math.sqrt(q.shape[-1])) * (torch.arange(m + n)[None, :] <= pos[:, None])
    return e / e.sum(-1, keepdim=True) @ V, K, V


def pd_softmax_by_exp(q, k_pool, v_pool, block_table, lengths):
    size, group = k_pool.shape[2], q.shape[1] // k_pool.shape[1]
    out = []
    for b in range(q.shape[0]):
        n = int(lengths[b])
        blocks = block_table[b, : -(-n // size)]
        k = _gather(k_pool, blocks, n).repeat_interleave(group, 0)
        v = _gather(v_pool, blocks, n).repeat_interleave(group, 0)
        e = torch.exp(q[b] @ k.mT / math.sqrt(q.shape[-1]))
        out.append(e / e.sum(-1, keepdim=True) @ v)
    return torch.stack(out)


def pd_fast_path_unpadded(q, k_pool, v_pool, block_table, lengths):
    """When every last block is full, 'nothing to mask' — and the K/V heads taken with repeat there."""
    if bool((lengths % k_pool.shape[2] == 0).all()):
        return pd_repeat(q, k_pool, v_pool, block_table, lengths)
    return learner_paged_decode(q, k_pool, v_pool, block_table, lengths)


def cb_float32(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(*(t.float() for t in (L, H, Hkv, d, b, s, n, w))).long()


def ch_squeezed(*args):
    """`.squeeze(0)` "to drop the batch axis": harmless until the batch has one sequence."""
    return tuple(t.squeeze(0) for t in learner_kv_cache_chunk(*args))


def pd_squeezed(*args):
    return learner_paged_decode(*args).squeeze(0)


def rs_squeezed(*args):
    return tuple(t.squeeze(0) for t in learner_rolling_step(*args))


def rs_softmax_by_exp(q, k_new, v_new, k_buffer, v_buffer, position):
    W = k_buffer.shape[2]
    kb, vb = k_buffer.clone(), v_buffer.clone()
    pos = torch.tensor([position])
    kb[:, :, position % W], vb[:, :, position % W] = apply_rope(k_new, pos)[:, :, 0], v_new[:, :, 0]
    n = min(position + 1, W)
    e = torch.exp(apply_rope(q, pos) @ kb[:, :, :n].mT / math.sqrt(q.shape[-1]))
    return e / e.sum(-1, keepdim=True) @ vb[:, :, :n], kb, vb


KIND_MUTANTS = [
    *batch_of_one({"cache_bytes": CORRECT["cache_bytes"]}),
    ("kv_cache_chunk", ch_squeezed, "a batch of one", "batch of one"),
    ("paged_decode", pd_squeezed, "a batch of one", "batch of one"),
    ("kv_cache_chunk", ch_softmax_by_exp, LARGE, "This test case has large inputs"),
    ("paged_decode", pd_softmax_by_exp, LARGE, "This test case has large inputs"),
    ("paged_decode", pd_no_mask, PADDED, "the slots past each sequence's length were read"),
    ("paged_decode", pd_fast_path_unpadded, UNPADDED, "no padding"),
    ("cache_bytes", cb_float32, LARGE, "computed in 32-bit floats"),
    ("rolling_step", rs_squeezed, "a batch of one", "batch of one"),
    ("rolling_step", rs_softmax_by_exp, LARGE, "This test case has large inputs"),
]

KINDS_NOT_APPLICABLE = {
    **{
        ("kv_cache_chunk", kind): "a chunk reads one sequence's whole cache: nothing is padded"
        for kind in (PADDED, UNPADDED)
    },  # fmt: skip
    **{
        ("cache_bytes", kind): "a configuration is a row of numbers: nothing is padded" for kind in (PADDED, UNPADDED)
    },  # fmt: skip
    **{
        ("rolling_step", kind): "one step reads one sequence's buffer; never-written slots are no padding"
        for kind in (PADDED, UNPADDED)
    },  # fmt: skip
}

# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the variants
# --------------------------------------------------------------------------------------------


def chb_is_causal(q, k_new, v_new, k_cache, v_cache):
    """torch's is_causal, as in training: fine for a whole sequence, top-left aligned for a chunk after a cache."""
    m = k_cache.size(2)
    pos = torch.arange(m, m + q.size(2))
    K, V = torch.cat((k_cache, apply_rope(k_new, pos)), -2), torch.cat((v_cache, v_new), -2)
    return F.scaled_dot_product_attention(apply_rope(q, pos), K, V, is_causal=True), K, V


def chb_positions_in_chunk(q, k_new, v_new, k_cache, v_cache):
    """RoPE by the position inside the chunk."""
    p = torch.arange(q.size(2))
    m = k_cache.size(2)
    K, V = torch.cat((k_cache, apply_rope(k_new, p)), -2), torch.cat((v_cache, v_new), -2)
    keep = torch.ones(q.size(2), K.size(2), dtype=torch.bool).tril(diagonal=m)
    return F.scaled_dot_product_attention(apply_rope(q, p), K, V, attn_mask=keep), K, V


def chb_one_position(q, k_new, v_new, k_cache, v_cache):
    """Uses the one-token step's position, m, for the whole chunk."""
    m, n = k_cache.size(2), q.size(2)
    p = torch.tensor([m] * n)
    K, V = torch.cat((k_cache, apply_rope(k_new, p)), -2), torch.cat((v_cache, v_new), -2)
    keep = torch.ones(n, m + n, dtype=torch.bool).tril(diagonal=m)
    return F.scaled_dot_product_attention(apply_rope(q, p), K, V, attn_mask=keep), K, V


def chb_no_mask(q, k_new, v_new, k_cache, v_cache):
    m = k_cache.size(2)
    pos = torch.arange(m, m + q.size(2))
    K, V = torch.cat((k_cache, apply_rope(k_new, pos)), -2), torch.cat((v_cache, v_new), -2)
    return F.scaled_dot_product_attention(apply_rope(q, pos), K, V), K, V


def chb_each_reads_cache_and_itself(q, k_new, v_new, k_cache, v_cache):
    """A loop that forgets to grow the cache between the new tokens: each reads the old cache and itself only."""
    m, outs = k_cache.size(2), []
    for i in range(q.size(2)):
        p = torch.tensor([m + i])
        K = torch.cat((k_cache, apply_rope(k_new[:, :, i : i + 1], p)), -2)
        V = torch.cat((v_cache, v_new[:, :, i : i + 1]), -2)
        outs.append(F.scaled_dot_product_attention(apply_rope(q[:, :, i : i + 1], p), K, V))
    pos = torch.arange(m, m + q.size(2))
    return torch.cat(outs, 2), torch.cat((k_cache, apply_rope(k_new, pos)), -2), torch.cat((v_cache, v_new), -2)


def chb_softmax_over_heads(q, k_new, v_new, k_cache, v_cache):
    m = k_cache.size(2)
    pos = torch.arange(m, m + q.size(2))
    K = torch.cat((k_cache, apply_rope(k_new, pos)), -2)
    V = torch.cat((v_cache, v_new), -2)
    s = torch.einsum("bhqd,bhkd->bhqk", apply_rope(q, pos), K) / math.sqrt(q.size(-1))
    s = s.masked_fill(torch.arange(K.size(2))[None] > pos[:, None], -math.inf)
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(dim=1).nan_to_num(), V), K, V


def chb_values_rotated(q, k_new, v_new, k_cache, v_cache):
    m = k_cache.size(2)
    pos = torch.arange(m, m + q.size(2))
    K = torch.cat((k_cache, apply_rope(k_new, pos)), -2)
    V = torch.cat((v_cache, apply_rope(v_new, pos)), -2)
    keep = torch.ones(q.size(2), K.size(2), dtype=torch.bool).tril(diagonal=m)
    return F.scaled_dot_product_attention(apply_rope(q, pos), K, V, attn_mask=keep), K, V


def chb_returns_old_cache(q, k_new, v_new, k_cache, v_cache):
    out, _, _ = learner_kv_cache_chunk(q, k_new, v_new, k_cache, v_cache)
    return out, k_cache, v_cache


def pdb_whole_pool(q, k_pool, v_pool, block_table, lengths):
    """Flattens the whole pool into one long cache and takes each sequence's first lengths[b] positions."""
    kv, d = k_pool.size(1), k_pool.size(-1)
    k_all = k_pool.transpose(0, 1).reshape(kv, -1, d)
    v_all = v_pool.transpose(0, 1).reshape(kv, -1, d)
    outs = []
    for b in range(q.size(0)):
        n = int(lengths[b])
        outs.append(F.scaled_dot_product_attention(q[b : b + 1], k_all[None, :, :n], v_all[None, :, :n],
                                                   enable_gqa=True))  # fmt: skip
    return torch.cat(outs)


def pdb_first_table_for_all(q, k_pool, v_pool, block_table, lengths):
    """Reads sequence 0's block table for every sequence."""
    return learner_paged_decode(q, k_pool, v_pool, block_table[:1].expand_as(block_table), lengths)


def pdb_mask_with_zero(q, k_pool, v_pool, block_table, lengths):
    size = k_pool.size(2)
    table = block_table.clamp(min=0)
    k = k_pool[table].transpose(1, 2).flatten(2, 3).repeat_interleave(q.size(1) // k_pool.size(1), 1)
    v = v_pool[table].transpose(1, 2).flatten(2, 3).repeat_interleave(q.size(1) // k_pool.size(1), 1)
    s = q @ k.transpose(2, 3) / math.sqrt(q.size(-1))
    keep = (torch.arange(table.size(1) * size)[None] < lengths[:, None])[:, None, None]
    return (s * keep).softmax(-1) @ v  # zeros, not -inf, past the length


def pdb_mask_after_softmax(q, k_pool, v_pool, block_table, lengths):
    size = k_pool.size(2)
    table = block_table.clamp(min=0)
    k = k_pool[table].transpose(1, 2).flatten(2, 3).repeat_interleave(q.size(1) // k_pool.size(1), 1)
    v = v_pool[table].transpose(1, 2).flatten(2, 3).repeat_interleave(q.size(1) // k_pool.size(1), 1)
    w = (q @ k.transpose(2, 3) / math.sqrt(q.size(-1))).softmax(-1)
    keep = (torch.arange(table.size(1) * size)[None] < lengths[:, None])[:, None, None]
    return (w * keep) @ v  # not renormalised


def pdb_lengths_as_last_index(q, k_pool, v_pool, block_table, lengths):
    size = k_pool.size(2)
    table = block_table.clamp(min=0)
    k, v = (p[table].transpose(1, 2).flatten(2, 3) for p in (k_pool, v_pool))
    keep = (torch.arange(table.size(1) * size)[None] <= lengths[:, None])[:, None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)


def pdb_tile(q, k_pool, v_pool, block_table, lengths):
    size = k_pool.size(2)
    table = block_table.clamp(min=0)
    g = q.size(1) // k_pool.size(1)
    k, v = (p[table].transpose(1, 2).flatten(2, 3).tile(1, g, 1, 1) for p in (k_pool, v_pool))
    keep = (torch.arange(table.size(1) * size)[None] < lengths[:, None])[:, None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def cbb_bits(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(L, H, Hkv, d, b, s, n, w) * 8


def cbb_window_max(L, H, Hkv, d, b, s, n, w):
    return 2 * L * Hkv * d * b * n * torch.maximum(s, w)


def cbb_per_token(L, H, Hkv, d, b, s, n, w):
    return 2 * L * Hkv * d * b * torch.ones_like(s)


def cbb_head_dim_from_heads(L, H, Hkv, d, b, s, n, w):
    return 2 * L * (H * d // Hkv) * b * n * torch.where(w > 0, torch.minimum(s, w), s)


def cbb_no_batch(L, H, Hkv, d, b, s, n, w):
    return 2 * L * Hkv * d * b * torch.where(w > 0, torch.minimum(s, w), s)


def cbb_window_always(L, H, Hkv, d, b, s, n, w):
    return 2 * L * Hkv * d * b * n * torch.minimum(s, w)


def rsb_in_place(q, k_new, v_new, k_buffer, v_buffer, position):
    """Writes straight into the given buffers (no copy)."""
    W = k_buffer.size(2)
    p = torch.full((1,), position)
    k_buffer[:, :, position % W] = apply_rope(k_new, p).squeeze(2)
    v_buffer[:, :, position % W] = v_new.squeeze(2)
    n = min(position + 1, W)
    out = F.scaled_dot_product_attention(apply_rope(q, p), k_buffer[:, :, :n], v_buffer[:, :, :n])
    return out, k_buffer, v_buffer


def rsb_slot_from_one(q, k_new, v_new, k_buffer, v_buffer, position):
    """'Slots count from 1': position % W + 1, wrapped back to 0 at the end."""
    W = k_buffer.size(2)
    i = position % W + 1
    if i == W:
        i = 0
    kb, vb = k_buffer.clone(), v_buffer.clone()
    p = torch.full((1,), position)
    kb[:, :, i], vb[:, :, i] = apply_rope(k_new, p)[:, :, 0], v_new[:, :, 0]
    n = min(position + 1, W)
    return F.scaled_dot_product_attention(apply_rope(q, p), kb[:, :, :n], vb[:, :, :n]), kb, vb


def rsb_sdpa_whole_buffer(q, k_new, v_new, k_buffer, v_buffer, position):
    kb, vb = k_buffer.clone(), v_buffer.clone()
    p = torch.full((1,), position)
    kb[:, :, position % kb.size(2)] = apply_rope(k_new, p)[:, :, 0]
    vb[:, :, position % vb.size(2)] = v_new[:, :, 0]
    return F.scaled_dot_product_attention(apply_rope(q, p), kb, vb), kb, vb


def rsb_mask_by_zero(q, k_new, v_new, k_buffer, v_buffer, position):
    """Never-written slots get a score of 0 instead of no weight."""
    W = k_buffer.size(2)
    kb, vb = k_buffer.clone(), v_buffer.clone()
    p = torch.full((1,), position)
    kb[:, :, position % W], vb[:, :, position % W] = apply_rope(k_new, p)[:, :, 0], v_new[:, :, 0]
    s = torch.einsum("bhqd,bhkd->bhqk", apply_rope(q, p), kb) / math.sqrt(q.size(-1))
    s = s * (torch.arange(W) <= position)
    return s.softmax(-1) @ vb, kb, vb


def rsb_values_rotated(q, k_new, v_new, k_buffer, v_buffer, position):
    W = k_buffer.size(2)
    kb, vb = k_buffer.clone(), v_buffer.clone()
    p = torch.full((1,), position)
    kb[:, :, position % W], vb[:, :, position % W] = apply_rope(k_new, p)[:, :, 0], apply_rope(v_new, p)[:, :, 0]
    n = min(position + 1, W)
    return F.scaled_dot_product_attention(apply_rope(q, p), kb[:, :, :n], vb[:, :, :n]), kb, vb


def rsb_returns_old_buffers(q, k_new, v_new, k_buffer, v_buffer, position):
    out, _, _ = learner_rolling_step(q, k_new, v_new, k_buffer, v_buffer, position)
    return out, k_buffer, v_buffer


def rsb_key_stored_unrotated(q, k_new, v_new, k_buffer, v_buffer, position):
    """Stores the raw key and rotates only a copy for this step's attention."""
    W = k_buffer.size(2)
    kb, vb = k_buffer.clone(), v_buffer.clone()
    kb[:, :, position % W], vb[:, :, position % W] = k_new[:, :, 0], v_new[:, :, 0]
    n = min(position + 1, W)
    K = kb[:, :, :n].clone()
    K[:, :, position % W] = apply_rope(k_new, torch.full((1,), position))[:, :, 0]
    out = F.scaled_dot_product_attention(apply_rope(q, torch.full((1,), position)), K, vb[:, :, :n])
    return out, kb, vb


def rsb_attend_then_write(q, k_new, v_new, k_buffer, v_buffer, position):
    W = k_buffer.size(2)
    p = torch.full((1,), position)
    n = min(position, W)
    if n:
        out = F.scaled_dot_product_attention(apply_rope(q, p), k_buffer[:, :, :n], v_buffer[:, :, :n])
    else:
        out = torch.zeros_like(v_new)
    kb, vb = k_buffer.clone(), v_buffer.clone()
    kb[:, :, position % W], vb[:, :, position % W] = apply_rope(k_new, p)[:, :, 0], v_new[:, :, 0]
    return out, kb, vb


BUGS = [
    ("kv_cache_chunk", chb_is_causal, "aligned to the top-left corner"),
    ("kv_cache_chunk", chb_positions_in_chunk, "rotated as positions 0, 1"),
    ("kv_cache_chunk", chb_one_position, "every new token was rotated as position m"),
    ("kv_cache_chunk", chb_no_mask, "attended to the new tokens after them"),
    ("kv_cache_chunk", chb_each_reads_cache_and_itself, GENERIC),
    ("kv_cache_chunk", chb_softmax_over_heads, GENERIC),
    ("kv_cache_chunk", chb_values_rotated, GENERIC),
    ("kv_cache_chunk", chb_returns_old_cache, GENERIC),
    ("paged_decode", pdb_whole_pool, "the block table was ignored"),
    ("paged_decode", pdb_first_table_for_all, GENERIC),
    ("paged_decode", pdb_mask_with_zero, GENERIC),
    ("paged_decode", pdb_mask_after_softmax, GENERIC),
    ("paged_decode", pdb_lengths_as_last_index, "the slot after each sequence's last token was read too"),
    ("paged_decode", pdb_tile, "the K/V heads were tiled"),
    ("cache_bytes", cbb_bits, GENERIC),
    ("cache_bytes", cbb_window_max, GENERIC),
    ("cache_bytes", cbb_per_token, GENERIC),
    ("cache_bytes", cbb_head_dim_from_heads, GENERIC),
    ("cache_bytes", cbb_no_batch, GENERIC),
    ("cache_bytes", cbb_window_always, "window 0 means no window"),
    ("rolling_step", rsb_in_place, "in place"),
    ("rolling_step", rsb_slot_from_one, "slot (position + 1) % W"),
    ("rolling_step", rsb_sdpa_whole_buffer, "the query read every slot"),
    ("rolling_step", rsb_mask_by_zero, GENERIC),
    ("rolling_step", rsb_values_rotated, GENERIC),
    ("rolling_step", rsb_returns_old_buffers, GENERIC),
    ("rolling_step", rsb_key_stored_unrotated, "the buffer you return holds the new key as it came"),
    ("rolling_step", rsb_attend_then_write, "attended before its key and value were written"),
]


# --------------------------------------------------------------------------------------------
# The graded predictions chunk_prediction, server_cache_gib and predicted_slots: (exercise, the learner's prediction
# function, status, score, a substring of its message)
# --------------------------------------------------------------------------------------------


def cp_right():
    return [0], False


def cp_as_tuple_and_tensor():
    return (0,), torch.tensor(False)


def cp_as_set():
    return {0}, False


def cp_attends_first():
    return [], False  # attends to the cache, empty, before appending


def cp_reads_the_whole_chunk():
    return [0, 1, 2], False  # no causal mask inside the chunk


def cp_chunk_differs():
    return [0], True  # a chunk must give other numbers than one token at a time


def cp_both_wrong():
    return [0, 1, 2], True


def cp_as_numbers():
    return 0, 0


def cp_the_output_named():
    return "v_new[:, :, 0]", False


def cp_with_the_course_code():
    q = k = torch.randn(1, 1, 3, 4)
    empty = torch.zeros(1, 1, 0, 4)
    out, _, _ = kv_cache.cache_chunk(q, k, torch.eye(4)[:3][None, None], empty, empty)
    return [int(p) for p in (out[0, 0, 0] > 0).nonzero().flatten()], False


def cp_unwritten():
    raise NotImplementedError


def sc_by_hand():
    return 2 * 48 * 8 * 128 * 2 * min(100_000, 8192) * 4 / 2**30


def sc_rounded():
    return 6


def sc_as_tensor():
    return torch.tensor(6.0)


def sc_query_heads():
    return 2 * 48 * 40 * 128 * 2 * 8192 * 4 / 2**30  # 30 GiB


def sc_bits():
    return 2 * 48 * 8 * 128 * 16 * 8192 * 4 / 2**30


def sc_window_ignored():
    return 73.24


def sc_query_heads_and_no_window():
    return 366


def sc_in_gb():
    return 2 * 48 * 8 * 128 * 2 * 8192 * 4 / 1e9  # 6.44


def sc_nearly():
    return 6.5  # within twice the margin, not a known slip


def sc_one_sequence():
    return 1.5


def sc_in_mib():
    return 6144


def sc_in_bytes():
    return 6_442_450_944


def sc_as_text():
    return "6 GiB"


def sc_int32_wrapped():
    return -2  # the worked answer's int32 warning, taken for the answer


def sc_int32_sign_dropped():
    return 2.0  # the int32 answer, -2 GiB, with its sign taken for the mistake


def sc_in_gb_rounded():
    return 6.4  # GB for GiB, rounded: the message gives this guess's ratio, not the slip's 1.074


def sc_with_the_course_code():
    return cache_sizes.kv_cache_bytes(48, 8, 128, 2, tokens=100_000, batch=4, window=8192) / 2**30


def sc_unwritten():
    raise NotImplementedError


def ps_right():
    return 5, 4


def ps_as_tensors():
    return torch.tensor(5), torch.tensor(4)


def ps_as_list():
    return [4 + 1, 9 - 5]


def ps_four_slots():
    return 4, 4  # the exercise's buffer of W slots: one key short of i - 4 .. i


def ps_four_slots_consistent():
    return 4, 5  # what 4 slots would write over: consistent, both wrong


def ps_six_slots():
    return 6, 4


def ps_overwrites_itself():
    return 5, 9


def ps_overwrites_the_previous():
    return 5, 8


def ps_not_written_yet():
    return 5, 10


def ps_the_oldest_ever():
    return 5, 0  # the first position written, as if the buffer filled once and then stopped


def ps_as_floats():
    return 5.0, 4


def ps_digits_as_text():
    return 5, "4"


def ps_one_answer():
    return 5


def ps_with_the_course_code():
    k_buffer = v_buffer = torch.zeros(1, 1, 5, 16)
    for p in range(9):
        x = torch.eye(16)[p].view(1, 1, 1, 16)
        _, k_buffer, v_buffer = kv_cache.rolling_cache_step(torch.zeros(1, 1, 1, 16), x, x, k_buffer, v_buffer, p)
    return 5, int(v_buffer[0, 0, 9 % 5].argmax())


def ps_unwritten():
    raise NotImplementedError


PREDICTIONS = [
    ("chunk_prediction", cp_right, "passed", 1.0, "you predicted [0], measured [0]: ✅ right"),
    ("chunk_prediction", cp_as_tuple_and_tensor, "passed", 1.0, "Score: 1 of 1"),
    ("chunk_prediction", cp_as_set, "passed", 1.0, "Score: 1 of 1"),
    ("chunk_prediction", cp_attends_first, "partial", 0.5, "its own key, appended to the cache before it attends"),
    ("chunk_prediction", cp_reads_the_whole_chunk, "partial", 0.5, "The tokens after it in the chunk are not for"),
    ("chunk_prediction", cp_chunk_differs, "partial", 0.5, "the causal mask sees to that"),
    ("chunk_prediction", cp_both_wrong, "failed", 0.0, "Score: 0 of 1"),
    ("chunk_prediction", cp_as_numbers, "failed", 0.0, "should return a tuple of 2 values: a list of whole numbers"),
    ("chunk_prediction", cp_the_output_named, "failed", 0.0, "should return a tuple of 2 values"),
    ("chunk_prediction", cp_with_the_course_code, "failed", 0.0, "`attnedu.kv_cache.cache_chunk`"),
    ("chunk_prediction", cp_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
    ("server_cache_gib", sc_by_hand, "passed", 1.0, "within 5% of the measurement (full credit)"),
    ("server_cache_gib", sc_rounded, "passed", 1.0, "you predicted 6 GiB, measured 6 GiB"),
    ("server_cache_gib", sc_as_tensor, "passed", 1.0, "full credit"),
    ("server_cache_gib", sc_query_heads, "failed", 0.0, "It is 5 times the measurement: as if each of the 40 query"),
    ("server_cache_gib", sc_bits, "failed", 0.0, "16 bits, 2 bytes"),
    ("server_cache_gib", sc_window_ignored, "failed", 0.0, "a window of 8,192 keeps at most 8,192"),
    ("server_cache_gib", sc_query_heads_and_no_window, "failed", 0.0, "the K/V heads and the window cut both"),
    ("server_cache_gib", sc_in_gb, "partial", 0.5, "GB (10^9 bytes), where the question asks GiB"),
    ("server_cache_gib", sc_nearly, "partial", 0.5, "within twice 5% of the measurement (half credit)"),
    ("server_cache_gib", sc_one_sequence, "failed", 0.0, "one sequence's cache"),
    ("server_cache_gib", sc_in_mib, "failed", 0.0, "MiB, where the question asks GiB"),
    ("server_cache_gib", sc_in_bytes, "failed", 0.0, "bytes, where the question asks GiB"),
    ("server_cache_gib", sc_as_text, "failed", 0.0, "should return a number"),
    ("server_cache_gib", sc_int32_wrapped, "failed", 0.0, "it wraps around to -2,147,483,648, -2 GiB"),
    ("server_cache_gib", sc_int32_sign_dropped, "failed", 0.0, "holds it without its sign, which does not undo"),
    ("server_cache_gib", sc_in_gb_rounded, "partial", 0.5, "It is 1.067 times the measurement: GB (10^9 bytes)"),
    ("server_cache_gib", sc_with_the_course_code, "failed", 0.0, "`attnedu.cache_sizes.kv_cache_bytes`"),
    ("server_cache_gib", sc_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
    ("predicted_slots", ps_right, "passed", 1.0, "you predicted 5, measured 5: ✅ right"),
    ("predicted_slots", ps_as_tensors, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_slots", ps_as_list, "passed", 1.0, "Score: 1 of 1"),
    ("predicted_slots", ps_four_slots, "partial", 0.5, "4 slots hold 4 keys, the token's own among them"),
    ("predicted_slots", ps_four_slots_consistent, "failed", 0.0, "That is what a buffer of 4 slots writes over"),
    ("predicted_slots", ps_six_slots, "partial", 0.5, "With 6 slots the query would read 6 keys"),
    ("predicted_slots", ps_overwrites_itself, "partial", 0.5, "9 is the token itself"),
    ("predicted_slots", ps_overwrites_the_previous, "partial", 0.5, "is in the window the query at 9 reads"),
    ("predicted_slots", ps_not_written_yet, "partial", 0.5, "Position 10 is not written yet"),
    ("predicted_slots", ps_the_oldest_ever, "partial", 0.5, "over the position p - S that held it"),
    ("predicted_slots", ps_as_floats, "failed", 0.0, "should return a tuple of 2 values: a whole number"),
    ("predicted_slots", ps_digits_as_text, "failed", 0.0, "should return a tuple of 2 values: a whole number"),
    ("predicted_slots", ps_one_answer, "failed", 0.0, "should return a tuple of 2 values"),
    ("predicted_slots", ps_with_the_course_code, "failed", 0.0, "`attnedu.kv_cache.rolling_cache_step`"),
    ("predicted_slots", ps_unwritten, "not_attempted", 0.0, "still raises NotImplementedError"),
]
