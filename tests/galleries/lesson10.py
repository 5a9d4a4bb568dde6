"""Lesson 10, 10_attention_at_inference: the galleries of ``kv_cache_step``, ``grouped_decode``, ``cache_bytes`` and
``rolling_step``
(CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as tests/galleries/__init__.py describes
them), and REFERENCE_USE: functions that are, or call, the package's own ``attnedu.inference``, which the exercises
forbid.

The correct versions are written as a learner would: with torch's SDPA (enable_gqa), by hand, with einsum or loops.
The KV-cache step and the rolling step read one sequence's cache (or buffer) and a cache-size calculator reads
configurations: none has padding (KINDS_NOT_APPLICABLE).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnedu import inference
from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.positional import apply_rope

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions
# --------------------------------------------------------------------------------------------


def learner_kv_cache_step(q, k_new, v_new, k_cache, v_cache):
    pos = torch.tensor([k_cache.shape[2]])
    q, k_new = apply_rope(q, pos), apply_rope(k_new, pos)
    K = torch.cat([k_cache, k_new], dim=2)
    V = torch.cat([v_cache, v_new], dim=2)
    out = torch.softmax(q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ V
    return out, K, V


def learner_kv_cache_step_sdpa(q, k_new, v_new, k_cache, v_cache):
    """RoPE written out by hand (halves layout), torch's SDPA for the attention."""
    m, d = k_cache.shape[2], q.shape[-1]
    angle = m * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = torch.cos(angle).float(), torch.sin(angle).float()

    def rope(x):
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    K, V = torch.cat((k_cache, rope(k_new)), 2), torch.cat((v_cache, v_new), 2)
    return F.scaled_dot_product_attention(rope(q), K, V), K, V


def learner_grouped_decode(q, k_cache, v_cache, lengths):
    group = q.shape[1] // k_cache.shape[1]
    k = k_cache.repeat_interleave(group, dim=1)
    v = v_cache.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    keep = torch.arange(k.shape[2])[None, :] < lengths[:, None]
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def learner_grouped_decode_sdpa(q, k_cache, v_cache, lengths):
    keep = torch.arange(k_cache.shape[2])[None, :] < lengths[:, None]
    return F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=keep[:, None, None, :], enable_gqa=True)


def learner_grouped_decode_loop(q, k_cache, v_cache, lengths):
    batch, heads, _, d = q.shape
    group = heads // k_cache.shape[1]
    out = torch.zeros_like(q)
    for b in range(batch):
        n = int(lengths[b])
        for h in range(heads):
            k, v = k_cache[b, h // group, :n], v_cache[b, h // group, :n]
            w = torch.softmax(q[b, h] @ k.T / math.sqrt(d), dim=-1)
            out[b, h] = w @ v
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
    "kv_cache_step": [learner_kv_cache_step, learner_kv_cache_step_sdpa],
    "grouped_decode": [learner_grouped_decode, learner_grouped_decode_sdpa, learner_grouped_decode_loop],
    "cache_bytes": [learner_cache_bytes, learner_cache_bytes_loop],
    "rolling_step": [learner_rolling_step, learner_rolling_step_masked, learner_rolling_step_in_order],
}


def _step_with_the_packages_cache(q, k_new, v_new, k_cache, v_cache):
    cache = inference.KVCache(1)
    cache.k[0], cache.v[0], cache.seen = k_cache, v_cache, k_cache.shape[2]
    out = cache.attend(0, q, k_new, v_new, torch.tensor([k_cache.shape[2]]))
    return out, cache.k[0], cache.v[0]


REFERENCE_USE = [
    ("kv_cache_step", inference.cache_step),
    ("kv_cache_step", _step_with_the_packages_cache),
    (
        "grouped_decode",
        lambda q, k, v, lengths: inference.grouped_attention(
            q, k, v, (torch.arange(k.shape[2])[None, :] < lengths[:, None])[:, None, None, :]
        ),
    ),  # fmt: skip
    (
        "cache_bytes",
        lambda L, H, Hkv, d, b, s, n, w: torch.tensor(
            [inference.kv_cache_bytes(*r) for r in zip(*(t.tolist() for t in (L, Hkv, d, b, s, n)))]
        ),
    ),  # fmt: skip
    ("rolling_step", inference.rolling_cache_step),
]

# --------------------------------------------------------------------------------------------
# Mutants, with the diagnosis each must get
# --------------------------------------------------------------------------------------------


def _step(q, k_new, v_new, k_cache, v_cache, *, shift=0, rot_q=True, rot_k=True, before=False, read="all",
          divide=None, layout="halves", again=False):  # fmt: skip
    m = k_cache.shape[2]
    pos = torch.tensor([m + shift])
    if rot_q:
        q = apply_rope(q, pos, layout)
    if rot_k:
        k_new = apply_rope(k_new, pos, layout)
    if again and m:
        k_cache = apply_rope(k_cache, torch.arange(m))
    K = torch.cat([k_new, k_cache], 2) if before else torch.cat([k_cache, k_new], 2)
    V = torch.cat([v_new, v_cache], 2) if before else torch.cat([v_cache, v_new], 2)
    keys, values = {"all": (K, V), "cache": (k_cache, v_cache), "new": (k_new, v_new)}[read]
    scale = math.sqrt(q.shape[-1]) if divide is None else divide(K)
    return torch.softmax(q @ keys.mT / scale, -1) @ values, K, V


def st_attend_first(*a):
    return _step(*a, read="cache")


def st_new_only(*a):
    return _step(*a, read="new")


def st_position_minus_one(*a):
    return _step(*a, shift=-1)


def st_position_plus_one(*a):
    return _step(*a, shift=1)


def st_q_not_rotated(*a):
    return _step(*a, rot_q=False)


def st_k_not_rotated(*a):
    return _step(*a, rot_k=False)


def st_no_rope(*a):
    return _step(*a, rot_q=False, rot_k=False)


def st_rotated_again(*a):
    return _step(*a, again=True)


def st_prepended(*a):
    return _step(*a, before=True)


def st_interleaved(*a):
    return _step(*a, layout="interleaved")


def st_unscaled(*a):
    return _step(*a, divide=lambda K: 1.0)


def st_by_length(*a):
    return _step(*a, divide=lambda K: math.sqrt(K.shape[2]))


def _grouped(q, k, v, lengths, *, how="interleave", extra=0, divide=None, mask=True):
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    if how == "interleave":
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    elif how == "repeat":
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    else:
        k, v = k[:, [0] * heads], v[:, [0] * heads]
    s = q @ k.mT / (math.sqrt(q.shape[-1]) if divide is None else divide(q, k))
    if mask:
        keep = torch.arange(k.shape[2])[None] < (lengths[:, None] + extra)
        s = s.masked_fill(~keep[:, None, None], -math.inf)
    return s.softmax(-1) @ v


def gd_repeat(*a):
    return _grouped(*a, how="repeat")


def gd_head_zero(*a):
    return _grouped(*a, how="first")


def gd_no_mask(*a):
    return _grouped(*a, mask=False)


def gd_last_key_masked(*a):
    return _grouped(*a, extra=-1)


def gd_first_pad_read(*a):
    return _grouped(*a, extra=1)


def gd_unscaled(*a):
    return _grouped(*a, divide=lambda q, k: 1.0)


def gd_by_heads(q, k, v, lengths):
    return _grouped(q, k, v, lengths, divide=lambda q_, k_: math.sqrt(q.shape[-1] * k.shape[1]))


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


MUTANTS = [
    ("kv_cache_step", st_attend_first, "attended before its key and value were appended"),
    ("kv_cache_step", st_new_only, "read only the new token's key and value"),
    ("kv_cache_step", st_position_minus_one, "position m - 1"),
    ("kv_cache_step", st_position_plus_one, "position m + 1"),
    ("kv_cache_step", st_q_not_rotated, "the query was not rotated"),
    ("kv_cache_step", st_k_not_rotated, "the new key was not rotated"),
    ("kv_cache_step", st_no_rope, "neither the query nor the new key was rotated"),
    ("kv_cache_step", st_rotated_again, "the cached keys were rotated again"),
    ("kv_cache_step", st_prepended, "went in front of the cache"),
    ("kv_cache_step", st_interleaved, "interleaved layout"),
    ("kv_cache_step", st_unscaled, "the scores are not scaled"),
    ("kv_cache_step", st_by_length, "square root of the number of keys"),
    ("grouped_decode", gd_repeat, "the K/V heads were tiled"),
    ("grouped_decode", gd_head_zero, "every query head read K/V head 0"),
    ("grouped_decode", gd_no_mask, "the padding was read"),
    ("grouped_decode", gd_last_key_masked, "the last real key was masked too"),
    ("grouped_decode", gd_first_pad_read, "the first padding position was read too"),
    ("grouped_decode", gd_unscaled, "the scores are not scaled"),
    ("grouped_decode", gd_by_heads, "sqrt(head_dim * kv_heads)"),
    ("cache_bytes", cb_query_heads, "you counted the query heads"),
    ("cache_bytes", cb_no_two, "the factor 2 is missing"),
    ("cache_bytes", cb_no_window, "the window was ignored"),
    ("cache_bytes", cb_window_plus, "window + 1 tokens"),
    ("cache_bytes", cb_window_minus, "window - 1 tokens"),
    ("cache_bytes", cb_int32, "32-bit integers"),
    ("cache_bytes", cb_allocated, "you counted the slots the buffer allocates"),
    ("rolling_step", rs_slot_plus_one, "slot (position + 1) % W"),
    ("rolling_step", rs_slot_minus_one, "slot (position - 1) % W"),
    ("rolling_step", rs_slot_div, "slot position // W"),
    ("rolling_step", rs_attend_first, "attended before its key and value were written"),
    ("rolling_step", rs_reads_unwritten, "the query read every slot"),
    ("rolling_step", rs_window_short, "the window is one short"),
    ("rolling_step", rs_window_plus_one, "the window is one too long"),
    ("rolling_step", rs_key_by_slot, "rotated by its slot"),
    ("rolling_step", rs_q_not_rotated, "the query was not rotated"),
    ("rolling_step", rs_rotated_again, "rotated again by their positions"),
    ("rolling_step", rs_unscaled, "the scores are not scaled"),
]

# the position one step late and one early; the padding boundary one key too far and one too near; the window one
# token too long and one too short; the slot one too far on and one too early
OFF_BY_ONE = {
    "kv_cache_step": (st_position_plus_one, st_position_minus_one),
    "grouped_decode": (gd_first_pad_read, gd_last_key_masked),
    "cache_bytes": (cb_window_plus, cb_window_minus),
    "rolling_step": (rs_slot_plus_one, rs_slot_minus_one),
}

# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def st_softmax_by_exp(q, k_new, v_new, k_cache, v_cache):
    pos = torch.tensor([k_cache.shape[2]])
    q, k_new = apply_rope(q, pos), apply_rope(k_new, pos)
    K, V = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    e = torch.exp(q @ K.mT / math.sqrt(q.shape[-1]))
    return e / e.sum(-1, keepdim=True) @ V, K, V


def gd_softmax_by_exp(q, k, v, lengths):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    e = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]))
    e = e * (torch.arange(k.shape[2])[None] < lengths[:, None])[:, None, None]
    return e / e.sum(-1, keepdim=True) @ v


def gd_fast_path_unpadded(q, k, v, lengths):
    """When nothing is padded, 'no mask needed' — and the K/V heads taken with repeat there."""
    if bool((lengths == k.shape[2]).all()):
        return gd_repeat(q, k, v, lengths)
    return learner_grouped_decode(q, k, v, lengths)


def cb_float32(L, H, Hkv, d, b, s, n, w):
    return learner_cache_bytes(*(t.float() for t in (L, H, Hkv, d, b, s, n, w))).long()


def st_squeezed(*args):
    """`.squeeze(0)` "to drop the batch axis": harmless until the batch has one sequence."""
    return tuple(t.squeeze(0) for t in learner_kv_cache_step(*args))


def gd_squeezed(*args):
    return learner_grouped_decode(*args).squeeze(0)


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
    ("kv_cache_step", st_squeezed, "a batch of one", "batch of one"),
    ("grouped_decode", gd_squeezed, "a batch of one", "batch of one"),
    ("kv_cache_step", st_softmax_by_exp, LARGE, "This test case has large inputs"),
    ("grouped_decode", gd_softmax_by_exp, LARGE, "This test case has large inputs"),
    ("grouped_decode", gd_no_mask, PADDED, "the padding was read"),
    ("grouped_decode", gd_fast_path_unpadded, UNPADDED, "no padding"),
    ("cache_bytes", cb_float32, LARGE, "computed in 32-bit floats"),
    ("rolling_step", rs_squeezed, "a batch of one", "batch of one"),
    ("rolling_step", rs_softmax_by_exp, LARGE, "This test case has large inputs"),
]

KINDS_NOT_APPLICABLE = {
    **{
        ("kv_cache_step", kind): "one step reads one sequence's whole cache: nothing is padded"
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


def stb_cache_only(q, k_new, v_new, k_cache, v_cache):
    m = k_cache.size(2)
    p = torch.full((1,), m)
    qr, kr = apply_rope(q, p), apply_rope(k_new, p)
    att = F.scaled_dot_product_attention(qr, k_cache, v_cache) if m else torch.zeros_like(v_new)
    return att, torch.cat((k_cache, kr), -2), torch.cat((v_cache, v_new), -2)


def stb_position_from_one(q, k_new, v_new, k_cache, v_cache):
    p = torch.tensor([k_cache.size(2) + 1])  # "positions start at 1"
    K = torch.cat((k_cache, apply_rope(k_new, p)), -2)
    V = torch.cat((v_cache, v_new), -2)
    return F.scaled_dot_product_attention(apply_rope(q, p), K, V), K, V


def stb_forgot_rope(q, k_new, v_new, k_cache, v_cache):
    K, V = torch.cat((k_cache, k_new), -2), torch.cat((v_cache, v_new), -2)
    return F.scaled_dot_product_attention(q, K, V), K, V


def stb_cache_keys_raw_positions(q, k_new, v_new, k_cache, v_cache):
    """Rotates everything at the end, the whole new cache by positions 0..m."""
    K, V = torch.cat((k_cache, k_new), -2), torch.cat((v_cache, v_new), -2)
    m = k_cache.size(2)
    K = apply_rope(K, torch.arange(m + 1))
    return F.scaled_dot_product_attention(apply_rope(q, torch.tensor([m])), K, V), K, V


def stb_softmax_over_heads(q, k_new, v_new, k_cache, v_cache):
    pos = torch.tensor([k_cache.size(2)])
    K = torch.cat((k_cache, apply_rope(k_new, pos)), -2)
    V = torch.cat((v_cache, v_new), -2)
    s = torch.einsum("bhqd,bhkd->bhqk", apply_rope(q, pos), K) / math.sqrt(q.size(-1))
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(dim=1), V), K, V


def stb_values_rotated(q, k_new, v_new, k_cache, v_cache):
    pos = torch.tensor([k_cache.size(2)])
    K = torch.cat((k_cache, apply_rope(k_new, pos)), -2)
    V = torch.cat((v_cache, apply_rope(v_new, pos)), -2)
    return F.scaled_dot_product_attention(apply_rope(q, pos), K, V), K, V


def stb_returns_old_cache(q, k_new, v_new, k_cache, v_cache):
    out, _, _ = learner_kv_cache_step(q, k_new, v_new, k_cache, v_cache)
    return out, k_cache, v_cache


def gdb_tile(q, k, v, lengths):
    g = q.size(1) // k.size(1)
    keep = (torch.arange(k.size(2)).unsqueeze(0) < lengths.unsqueeze(1)).view(len(lengths), 1, 1, -1)
    return F.scaled_dot_product_attention(q, k.tile(1, g, 1, 1), v.tile(1, g, 1, 1), attn_mask=keep)


def gdb_mean_queries(q, k, v, lengths):
    """Averages each group's queries into one, then expands the result."""
    g = q.size(1) // k.size(1)
    qm = q.view(q.size(0), k.size(1), g, 1, q.size(-1)).mean(2)
    keep = (torch.arange(k.size(2))[None] < lengths[:, None])[:, None, None]
    out = F.scaled_dot_product_attention(qm, k, v, attn_mask=keep)
    return out.repeat_interleave(g, 1)


def gdb_mask_with_zero(q, k, v, lengths):
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.size(-1))
    keep = (torch.arange(k.size(2))[None] < lengths[:, None])[:, None, None]
    return (s * keep).softmax(-1) @ v  # zeros, not -inf, at the padding


def gdb_mask_after_softmax(q, k, v, lengths):
    g = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    w = (q @ k.transpose(2, 3) / math.sqrt(q.size(-1))).softmax(-1)
    keep = (torch.arange(k.size(2))[None] < lengths[:, None])[:, None, None]
    return (w * keep) @ v  # not renormalised


def gdb_lengths_as_last_index(q, k, v, lengths):
    keep = (torch.arange(k.size(2))[None] <= lengths[:, None])[:, None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)


def gdb_last_index_exclusive(q, k, v, lengths):
    """Treats lengths as the index of the last real key, then leaves it out."""
    last = lengths - 1
    keep = (torch.arange(k.size(2))[None] < last[:, None])[:, None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)


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
    ("kv_cache_step", stb_cache_only, "attended before its key and value were appended"),
    ("kv_cache_step", stb_position_from_one, "position m + 1"),
    ("kv_cache_step", stb_forgot_rope, "neither the query nor the new key was rotated"),
    ("kv_cache_step", stb_cache_keys_raw_positions, "the cached keys were rotated again"),
    ("kv_cache_step", stb_softmax_over_heads, GENERIC),
    ("kv_cache_step", stb_values_rotated, GENERIC),
    ("kv_cache_step", stb_returns_old_cache, GENERIC),
    ("grouped_decode", gdb_tile, "the K/V heads were tiled"),
    ("grouped_decode", gdb_mean_queries, GENERIC),
    ("grouped_decode", gdb_mask_with_zero, GENERIC),
    ("grouped_decode", gdb_mask_after_softmax, GENERIC),
    ("grouped_decode", gdb_lengths_as_last_index, "the first padding position was read too"),
    ("grouped_decode", gdb_last_index_exclusive, GENERIC),  # length 1: SDPA reads nothing, yet gives no NaN
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
    ("rolling_step", rsb_key_stored_unrotated, GENERIC),
    ("rolling_step", rsb_attend_then_write, "attended before its key and value were written"),
]
