"""Checks for the exercises of lesson 10 (attention at inference).

The references are the package's own (``attnedu.inference.cache_step``, ``grouped_attention``, ``kv_cache_bytes``,
``rolling_cache_step``).
Heads, lengths and widths differ from each other so that a transpose or a wrong axis shows. The KV-cache step
has a case with an empty cache (the first token) and RoPE at positions large enough that a rotation one step off
shows; its known-wrong variants include the position off by one in both directions. Grouped-query decoding reads a
batch of caches of different lengths (right-padded): its padded and unpadded cases; the padding off by one in both
directions. The cache-size calculator (the transfer task: configurations the lesson did not show, windows and
batches combined) works on integer tensors, one configuration per entry; its large case overflows 32-bit integers and
is rounded by 32-bit floats; a text shorter than its window tells tokens held from slots allocated. The rolling step
(a transfer task: the lesson's RollingKVCache, one token) gets buffers filled as earlier steps would have, the slots
no position has reached holding large finite numbers (a mask works as well as a slice), positions before the buffer
is full, just full and wrapped many times, and a window of 1; its variants include the slot one too far and one too
early, the window one key short and the key rotated by its slot.
The learner's functions may not run anything from ``attnedu.inference``: the exercises ask for their own code.
"""

from __future__ import annotations

import math

import torch

from ..inference import cache_step, grouped_attention, kv_cache_bytes, rolling_cache_step
from ..masks import padding_mask
from ..positional import apply_rope
from .calling import attempt as _attempt
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Variant, generator, kinds, randn

LESSON = "10_attention_at_inference"
OWN_CODE = ("attnedu.inference",)

# --------------------------------------------------------------------------------------------
# kv_cache_step
# --------------------------------------------------------------------------------------------


def _step_cases() -> list[Case]:
    g = generator(100)

    def case(batch, heads, cached, head_dim, tags, scale=1.0, note=""):
        q, k_new, v_new = (scale * randn(g, batch, heads, 1, head_dim) for _ in range(3))
        k_cache = scale * randn(g, batch, heads, cached, head_dim)
        if cached:  # stored already rotated, each by its own position
            k_cache = apply_rope(k_cache, torch.arange(cached))
        v_cache = scale * randn(g, batch, heads, cached, head_dim)
        description = f"batch {batch}, heads {heads}, {cached} cached tokens, head_dim {head_dim}"
        return Case(description + (f"; {note}" if note else ""), (q, k_new, v_new, k_cache, v_cache), tags)

    return [
        case(2, 3, 5, 8, kinds()),
        case(1, 2, 7, 6, kinds(ONE)),
        case(3, 2, 0, 8, kinds(), note="an empty cache: the first token"),
        case(2, 4, 40, 16, kinds(), note="the new token at position 40"),
        case(1, 1, 3, 4, kinds(ONE), note="one head"),
        case(2, 2, 6, 8, kinds(LARGE), scale=40.0, note="queries and keys around ±40: scores in the hundreds"),
    ]


def _step_with(q, k_new, v_new, k_cache, v_cache, *, offset=0, rotate="both", order="after", attend="all",
               layout="halves", scale="head_dim", rerotate=False):  # fmt: skip
    """A known-wrong step: RoPE at position m + offset, on ``rotate``; the new key put ``order`` the cache; the
    query reading ``attend`` (all keys, the cache only, the new key only)."""
    m = k_cache.shape[2]
    position = torch.tensor([m + offset])
    q_r = apply_rope(q, position, layout) if rotate in ("both", "q") else q
    k_r = apply_rope(k_new, position, layout) if rotate in ("both", "k") else k_new
    cached = apply_rope(k_cache, torch.arange(m), layout) if rerotate and m else k_cache
    keys = torch.cat([cached, k_r], 2) if order == "after" else torch.cat([k_r, cached], 2)
    values = torch.cat([v_cache, v_new], 2) if order == "after" else torch.cat([v_new, v_cache], 2)
    read_k, read_v = {"all": (keys, values), "cache": (cached, v_cache), "new": (k_r, v_new)}[attend]
    divisor = {"head_dim": math.sqrt(q.shape[-1]), "none": 1.0, "length": math.sqrt(keys.shape[2])}[scale]
    weights = torch.softmax(q_r @ read_k.transpose(-2, -1) / divisor, dim=-1)
    return weights @ read_v, keys, values


def _step_variant(diagnosis: str, **changes) -> Variant:
    def fn(*args):
        return _step_with(*args, **changes)

    return Variant(diagnosis, fn)


KV_CACHE_STEP = Exercise(
    name="kv_cache_step",
    lesson=LESSON,
    params=("q", "k_new", "v_new", "k_cache", "v_cache"),
    returns=(
        ("batch", "heads", "1", "head_dim"),
        ("batch", "heads", "cached_len + 1", "head_dim"),
        ("batch", "heads", "cached_len + 1", "head_dim"),
    ),  # fmt: skip
    output_names=("output", "k_cache", "v_cache"),
    reference=cache_step,
    make_cases=_step_cases,
    variants=(
        _step_variant(
            "the query attended before its key and value were appended: it read the cache only, not itself (and "
            "the first token had nothing to read); a token reads its own key too.",
            attend="cache",
        ),
        _step_variant(
            "the query read only the new token's key and value, not the cache: the output ignores every earlier token.",
            attend="new",
        ),
        _step_variant(
            "off by one: the new token was rotated as position m - 1. With m tokens cached at positions 0..m-1, the "
            "new one is at position m.",
            offset=-1,
        ),
        _step_variant(
            "off by one: the new token was rotated as position m + 1. With m tokens cached at positions 0..m-1, the "
            "new one is at position m.",
            offset=1,
        ),
        _step_variant(
            "the query was not rotated (only the new key was): RoPE turns both the query and the key by the "
            "token's position.",
            rotate="k",
        ),
        _step_variant(
            "the new key was not rotated (only the query was): RoPE turns both, and the cache stores keys already "
            "rotated.",
            rotate="q",
        ),
        _step_variant(
            "neither the query nor the new key was rotated: RoPE turns both by the new token's position.",
            rotate="none",
        ),
        _step_variant(
            "the cached keys were rotated again: they were stored already rotated by their own positions. Rotate "
            "only the new query and key.",
            rerotate=True,
        ),
        _step_variant(
            "the new key and value went in front of the cache: this step's output is the same (attention ignores "
            "the order of its keys), but the cache you return no longer lists its tokens in the order of their "
            "positions, which a causal mask over several new tokens, a window that drops the oldest entry, or "
            "padding at the end of a batch's caches relies on.",
            order="before",
        ),
        _step_variant(
            "RoPE used the interleaved layout (pairs 2i, 2i+1); the cache and the lesson's model pair feature i with "
            "feature i + head_dim/2.",
            layout="interleaved",
        ),
        _step_variant(
            "the scores are not scaled: each is a dot product of head_dim numbers, which attention divides by "
            "sqrt(head_dim).",
            scale="none",
        ),
        _step_variant(
            "the scores were divided by the square root of the number of keys, not of head_dim.",
            scale="length",
        ),
    ),
    hint=(
        "Which position does the new token have, if the cache holds m tokens at positions 0..m-1? And does it "
        "read its own key?",
        "m = k_cache.shape[2]; rotate q and k_new at position m; K = [k_cache; k_new], V = [v_cache; v_new] along "
        "the length axis; o = softmax(q K^T / sqrt(head_dim)) V; return o, K, V.",
        "`m = k_cache.shape[2]`; `q, k_new = rope(q, m), rope(k_new, m)` (the notebook's helper); "
        "`K = torch.cat([k_cache, k_new], dim=2)` (V alike); "
        "`o = torch.softmax(q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ V`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# grouped_decode
# --------------------------------------------------------------------------------------------


def _grouped_reference(q, k_cache, v_cache, lengths):
    keep = padding_mask(lengths, k_cache.shape[2])[:, None, None, :]  # (batch, 1, 1, cached_len)
    return grouped_attention(q, k_cache, v_cache, keep)


def _grouped_cases() -> list[Case]:
    g = generator(101)

    def case(batch, heads, kv_heads, cached, head_dim, lengths, tags, scale=1.0, note=""):
        q = scale * randn(g, batch, heads, 1, head_dim)
        k, v = scale * randn(g, batch, kv_heads, cached, head_dim), randn(g, batch, kv_heads, cached, head_dim)
        description = (f"batch {batch}, {heads} query heads, {kv_heads} K/V heads, cache of {cached}, head_dim "
                       f"{head_dim}, lengths {lengths}")  # fmt: skip
        return Case(description + (f"; {note}" if note else ""), (q, k, v, torch.tensor(lengths)), tags)

    return [
        case(2, 4, 2, 6, 8, [6, 4], kinds(PADDED)),
        case(3, 6, 3, 5, 4, [5, 5, 5], kinds(UNPADDED)),
        case(1, 8, 2, 7, 8, [7], kinds(ONE, UNPADDED)),
        case(2, 8, 1, 5, 6, [3, 5], kinds(PADDED), note="multi-query: one K/V head"),
        case(3, 4, 4, 4, 8, [4, 1, 2], kinds(PADDED), note="as many K/V heads as query heads"),
        case(1, 4, 2, 5, 8, [2], kinds(ONE, PADDED)),
        case(2, 4, 2, 6, 8, [6, 6], kinds(LARGE, UNPADDED), scale=40.0, note="queries and keys around ±40"),
    ]


def _grouped_with(q, k, v, lengths, *, pairing="interleave", pad=0, scale="head_dim", masked=True):
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    if pairing == "interleave":
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    elif pairing == "repeat":
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    elif pairing == "first":
        k, v = k[:, :1].expand(-1, heads, -1, -1), v[:, :1].expand(-1, heads, -1, -1)
    divisor = {"head_dim": math.sqrt(q.shape[-1]), "none": 1.0, "heads": math.sqrt(q.shape[-1] * kv_heads)}[scale]
    scores = q @ k.transpose(-2, -1) / divisor
    if masked:
        keep = torch.arange(k.shape[2])[None, :] < (lengths + pad)[:, None]
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _grouped_variant(diagnosis: str, **changes) -> Variant:
    def fn(*args):
        return _grouped_with(*args, **changes)

    return Variant(diagnosis, fn)


GROUPED_DECODE = Exercise(
    name="grouped_decode",
    lesson=LESSON,
    params=("q", "k_cache", "v_cache", "lengths"),
    returns=(("batch", "heads", "1", "head_dim"),),
    reference=_grouped_reference,
    make_cases=_grouped_cases,
    variants=(
        _grouped_variant(
            "the K/V heads were tiled (0, 1, 0, 1, ..., as repeat lays them out): query head h read K/V head h % "
            "kv_heads. Consecutive query heads share a K/V head: head h reads h // group.",
            pairing="repeat",
        ),
        _grouped_variant(
            "every query head read K/V head 0: query head h reads K/V head h // (heads // kv_heads).",
            pairing="first",
        ),
        _grouped_variant(
            "the padding was read: keys at positions >= lengths[b] are not tokens of sequence b, yet they got weight.",
            masked=False,
        ),
        _grouped_variant(
            "off by one: the last real key was masked too. Sequence b's keys are positions 0..lengths[b]-1.",
            pad=-1,
        ),
        _grouped_variant(
            "off by one: the first padding position was read too. Sequence b's keys are positions "
            "0..lengths[b]-1, and position lengths[b] is padding.",
            pad=1,
        ),
        _grouped_variant(
            "the scores are not scaled: each is a dot product of head_dim numbers, which attention divides by "
            "sqrt(head_dim).",
            scale="none",
        ),
        _grouped_variant(
            "the scores were divided by sqrt(head_dim * kv_heads); each score is a dot product of head_dim numbers "
            "only.",
            scale="heads",
        ),
    ),
    hint=(
        "Which K/V head does query head h read, when `group = heads // kv_heads` consecutive query heads share one? "
        "And which keys of a padded cache belong to sequence b?",
        "Repeat each K/V head `group` times in place (head 0, 0, ..., 1, 1, ...), so the shapes match q's heads; "
        "scores q K^T / sqrt(head_dim); -inf where position >= lengths[b]; softmax over the keys; times V.",
        "`k = k_cache.repeat_interleave(group, dim=1)` (v alike); `keep = torch.arange(m) < lengths[:, None]`; "
        "`scores.masked_fill(~keep[:, None, None, :], float('-inf'))`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# cache_bytes: the transfer task
# --------------------------------------------------------------------------------------------


def _bytes_reference(num_layers, num_heads, num_kv_heads, head_dim, bytes_per_number, seq_len, batch, window):
    rows = zip(*(t.tolist() for t in (num_layers, num_kv_heads, head_dim, bytes_per_number, seq_len, batch, window)))
    return torch.tensor([kv_cache_bytes(l, h, d, b, s, n, w or None) for l, h, d, b, s, n, w in rows])  # noqa: E741


def _bytes_cases() -> list[Case]:
    def case(rows, tags, note=""):
        columns = tuple(torch.tensor(c) for c in zip(*rows))
        description = f"{len(rows)} configuration{'s' if len(rows) > 1 else ''}: " + "; ".join(
            f"layers {r[0]}, heads {r[1]}, K/V heads {r[2]}, head_dim {r[3]}, {r[4]} bytes, {r[5]} tokens, batch "
            f"{r[6]}, window {r[7] or 'none'}"
            for r in rows[:3]
        )
        return Case(description + (f"; {note}" if note else ""), columns, tags)

    # (layers, heads, kv_heads, head_dim, bytes, seq_len, batch, window); window 0 = none
    return [
        case(
            [(28, 28, 4, 128, 2, 4096, 1, 0), (26, 8, 4, 256, 2, 8192, 2, 4096), (16, 32, 8, 64, 4, 100, 3, 0)], kinds()
        ),  # fmt: skip
        case([(24, 16, 16, 64, 2, 1000, 1, 0)], kinds(ONE), note="a single configuration"),
        case(
            [
                (40, 40, 8, 128, 2, 32768, 4, 4096),
                (2, 4, 1, 8, 1, 10, 5, 16),
                (12, 12, 12, 64, 4, 512, 8, 0),
                (32, 32, 8, 128, 2, 4096, 1, 4096),
            ],
            kinds(),
            note="windows longer and shorter than the text",
        ),  # fmt: skip
        case(
            [(61, 64, 8, 128, 2, 1_000_001, 64, 0), (61, 128, 128, 192, 2, 131072, 16, 0)],
            kinds(LARGE),
            note="caches of terabytes: more than 2^31 bytes",
        ),  # fmt: skip
    ]


def _bytes_with(L, H, Hkv, d, b, s, n, w, *, heads="kv", kv=2, window="min", int32=False, float32=False):  # noqa: E741
    tokens = {"min": torch.where(w > 0, torch.minimum(s, w), s), "ignored": s, "plus": torch.where(w > 0,
              torch.minimum(s, w + 1), s), "minus": torch.where(w > 0, torch.minimum(s, w - 1), s),
              "allocated": torch.where(w > 0, w, s), "zero": torch.minimum(s, w)}[window]  # fmt: skip
    count = {"kv": Hkv, "query": H}[heads]
    if int32:
        return (kv * L.int() * count.int() * d.int() * b.int() * tokens.int() * n.int()).long()
    if float32:  # every factor but 61 and 1,000,001 of the large case is a power of two or 3 times one: one rounding,
        # whatever the order of the products
        return (kv * L.float() * count.float() * d.float() * b.float() * tokens.float() * n.float()).long()
    return kv * L * count * d * b * tokens * n


def _bytes_variant(diagnosis: str, **changes) -> Variant:
    def fn(*args):
        return _bytes_with(*args, **changes)

    return Variant(diagnosis, fn)


CACHE_BYTES = Exercise(
    name="cache_bytes",
    lesson=LESSON,
    params=("num_layers", "num_heads", "num_kv_heads", "head_dim", "bytes_per_number", "seq_len", "batch", "window"),
    returns=(("configurations",),),
    reference=_bytes_reference,
    make_cases=_bytes_cases,
    units=(("configuration", "configurations", "index"),),
    variants=(
        _bytes_variant(
            "you counted the query heads: the cache holds keys and values, one per K/V head; queries are not cached.",
            heads="query",
        ),
        _bytes_variant("the factor 2 is missing: the cache holds a key *and* a value per head.", kv=1),
        _bytes_variant(
            "the window was ignored: a rolling buffer keeps at most window tokens, however long the text (window 0 "
            "means none).",
            window="ignored",
        ),
        _bytes_variant(
            "off by one: you kept window + 1 tokens. A window of W keeps W keys.",
            window="plus",
        ),
        _bytes_variant(
            "off by one: you kept window - 1 tokens. A window of W keeps W keys.",
            window="minus",
        ),
        _bytes_variant(
            "you counted the slots the buffer allocates, window, even where fewer tokens were written: a text "
            "shorter than the window fills only seq_len of them, and the rest hold no token yet.",
            window="allocated",
        ),
        _bytes_variant(
            "the configurations without a window (window 0) got no tokens: window 0 means no window, every token "
            "stays, not a window of 0 tokens.",
            window="zero",
        ),
        _bytes_variant(
            "the product was computed in 32-bit floats: they hold whole numbers exactly only up to 2^24 (16,777,216), "
            "so the terabyte answer was rounded before it came back as an integer.",
            float32=True,
        ),
        _bytes_variant(
            "the product overflowed: computed in 32-bit integers it wraps past 2^31 bytes (2 GiB), where the "
            "inputs' int64 would not.",
            int32=True,
        ),
    ),
    hint=(
        "What does the cache hold per token, per layer? And how many tokens does a rolling buffer of W slots hold "
        "after seq_len tokens, when seq_len is more than W, and when it is less?",
        "2 (a key and a value) x layers x K/V heads x head_dim x bytes per number x batch x tokens kept, where tokens "
        "kept is seq_len, or min(seq_len, window) when window > 0.",
        "`tokens = torch.where(window > 0, torch.minimum(seq_len, window), seq_len)`; `return 2 * num_layers * "
        "num_kv_heads * head_dim * bytes_per_number * batch * tokens`.",
    ),
    forbidden=OWN_CODE,
)


# --------------------------------------------------------------------------------------------
# rolling_step: one decoding step through a rolling buffer (a transfer task: the lesson's RollingKVCache, one token)
# --------------------------------------------------------------------------------------------

GARBAGE = 100.0  # what the slots no position has reached hold: large and finite (a mask instead of a slice is fine)


def _rolling_cases() -> list[Case]:
    g = generator(102)

    def case(batch, heads, window, head_dim, position, tags, scale=1.0, note=""):
        q, k_new, v_new = (scale * randn(g, batch, heads, 1, head_dim) for _ in range(3))
        k_buffer = GARBAGE * randn(g, batch, heads, window, head_dim)
        v_buffer = GARBAGE * randn(g, batch, heads, window, head_dim)
        for earlier in range(max(0, position - window), position):  # what the steps before this one wrote
            k = scale * randn(g, batch, heads, 1, head_dim)
            k_buffer[:, :, earlier % window] = apply_rope(k, torch.tensor([earlier]))[:, :, 0]  # stored rotated
            v_buffer[:, :, earlier % window] = scale * randn(g, batch, heads, head_dim)
        unwritten = window - position if position < window else 0  # slots position..W-1, before this step
        description = f"batch {batch}, heads {heads}, window {window}, head_dim {head_dim}, position {position}"
        if unwritten:
            description += f", {unwritten} slot{'s' if unwritten > 1 else ''} never written (holding large numbers)"
        return Case(description + (f"; {note}" if note else ""), (q, k_new, v_new, k_buffer, v_buffer, position), tags)

    return [
        case(2, 3, 4, 8, 9, kinds(), note="the buffer has wrapped twice"),
        case(1, 2, 5, 6, 7, kinds(ONE)),
        case(2, 2, 1, 8, 5, kinds(), note="a window of 1: the token reads only itself"),
        case(3, 2, 4, 8, 0, kinds(), note="the first token"),
        case(2, 3, 6, 8, 2, kinds(), note="the buffer not yet full"),
        case(2, 2, 5, 8, 4, kinds(), note="the buffer just full"),
        case(1, 2, 3, 8, 40, kinds(ONE), note="position 40: the buffer has wrapped 13 times"),
        case(2, 8, 4, 4, 5, kinds(), note="eight heads"),
        case(2, 2, 4, 8, 6, kinds(LARGE), scale=40.0, note="queries, keys and values around ±40"),
    ]


def _held(position: int, slot: int, window: int) -> int:
    """The position slot ``slot`` holds once ``position`` is written (the latest p <= position with p % W = slot)."""
    return position - (position - slot) % window


def _rolling_with(q, k_new, v_new, k_buffer, v_buffer, position, *, slot="mod", key_at="position",
                  query_at="position", attend="after", read="window", rerotate=False, scale=True):  # fmt: skip
    """A known-wrong step: the new token written to ``slot``; its key rotated at ``key_at``, its query at
    ``query_at``; the query attending ``attend`` the write, over the slots ``read`` names."""
    window = k_buffer.shape[2]
    k_buffer, v_buffer = k_buffer.clone(), v_buffer.clone()
    s = {"mod": position % window, "next": (position + 1) % window, "previous": (position - 1) % window,
         "div": position // window}[slot]  # fmt: skip
    rotation = {"position": position, "slot": position % window}
    q_r = q if query_at == "none" else apply_rope(q, torch.tensor([rotation[query_at]]))
    k_r = apply_rope(k_new, torch.tensor([rotation[key_at]]))
    old_k, old_v = k_buffer.clone(), v_buffer.clone()
    k_buffer[:, :, s], v_buffer[:, :, s] = k_r[:, :, 0], v_new[:, :, 0]
    keys, values = (k_buffer, v_buffer) if attend == "after" else (old_k, old_v)
    if read == "window":
        slots = list(range(min(position + 1, window)))
    elif read == "before":  # attended first, over the slots written before this step
        slots = list(range(min(position, window)))
    elif read == "all":
        slots = list(range(window))
    elif read == "plus":
        slots = []  # replaced below
    else:  # "short": positions position - W + 2 .. position, W - 1 keys
        slots = [p % window for p in range(max(0, position - window + 2), position + 1)]
    read_k, read_v = keys[:, :, slots], values[:, :, slots]
    if read == "plus":  # the buffer as it was (its filled slots), then the new key: W + 1 keys once it is full
        held = list(range(min(position, window)))
        read_k = torch.cat([old_k[:, :, held], k_r], dim=2)
        read_v = torch.cat([old_v[:, :, held], v_new], dim=2)
    if rerotate:
        again = [i for i, sl in enumerate(slots) if sl != s]
        held = torch.tensor([_held(position, slots[i], window) for i in again], dtype=torch.long)
        read_k = read_k.clone()
        read_k[:, :, again] = apply_rope(read_k[:, :, again], held)
    divisor = math.sqrt(q.shape[-1]) if scale else 1.0
    weights = torch.softmax(q_r @ read_k.transpose(-2, -1) / divisor, dim=-1)
    return weights @ read_v, k_buffer, v_buffer


def _rolling_variant(diagnosis: str, *changes: dict) -> Variant:
    def version(change):
        def fn(*args):
            return _rolling_with(*args, **change)

        return fn

    return Variant(diagnosis, *(version(c) for c in changes))


ROLLING_STEP = Exercise(
    name="rolling_step",
    lesson=LESSON,
    params=("q", "k_new", "v_new", "k_buffer", "v_buffer", "position"),
    returns=(
        ("batch", "heads", "1", "head_dim"),
        ("batch", "heads", "window", "head_dim"),
        ("batch", "heads", "window", "head_dim"),
    ),  # fmt: skip
    output_names=("output", "k_buffer", "v_buffer"),
    reference=rolling_cache_step,
    make_cases=_rolling_cases,
    variants=(
        _rolling_variant(
            "the new token went one slot too far: to slot (position + 1) % W. It overwrote a token the window still "
            "holds, and the slot of the token leaving the window kept it, so the query read it.",
            {"slot": "next"},
        ),
        _rolling_variant(
            "the new token went one slot too early: to slot (position - 1) % W, over the token just before it, "
            "while the token leaving the window stayed and was read.",
            {"slot": "previous"},
        ),
        _rolling_variant(
            "the new token went to slot position // W: that counts how many times the buffer has wrapped, not "
            "where in the buffer the position falls (and past W * W positions it is not a slot at all).",
            {"slot": "div"},
        ),
        _rolling_variant(
            "the query attended before its key and value were written: it read what its slot held before (the "
            "token leaving the window, or never-written numbers, or nothing), not itself.",
            {"attend": "before"},
            {"attend": "before", "read": "before"},
        ),
        _rolling_variant(
            "the query read every slot, also those no token has reached yet (the position is below W - 1): they "
            "hold whatever the buffer started with, not keys.",
            {"read": "all"},
        ),
        _rolling_variant(
            "the window is one too long: the query read the buffer as it was before this step and the new key "
            "after it, W + 1 keys once the buffer is full. The token at position - W, which the new one overwrites, "
            "was read too.",
            {"read": "plus"},
        ),
        _rolling_variant(
            "the window is one short: the query read W - 1 keys, positions position - W + 2 .. position. A window "
            "of W keys holds the token itself and the W - 1 before it.",
            {"read": "short"},
        ),
        _rolling_variant(
            "the new key was rotated by its slot, position % W, not by its position: RoPE encodes where the token "
            "sits in the text; the slot only says where it is stored (the two agree until the buffer wraps).",
            {"key_at": "slot"},
            {"key_at": "slot", "query_at": "slot"},
        ),
        _rolling_variant(
            "the query was not rotated (only the new key was): RoPE turns both the query and the key by the "
            "token's position.",
            {"query_at": "none"},
        ),
        _rolling_variant(
            "the keys in the buffer were rotated again by their positions: they were stored already rotated. Only "
            "the new query and key are rotated in this step.",
            {"rerotate": True},
        ),
        _rolling_variant(
            "the scores are not scaled: each is a dot product of head_dim numbers, which attention divides by "
            "sqrt(head_dim).",
            {"scale": False},
        ),
    ),
    hint=(
        "Which slot does position p live in, if W slots are reused in turn? Which positions may the query at p read, "
        "and which slots hold them (before the buffer is full, and after)? And does the token read its own key?",
        "Copy the buffers; rotate q and k_new at `position`; write k_new, v_new into slot position % W; the slots "
        "that hold positions max(0, position - W + 1) .. position are the first min(position + 1, W); "
        "o = softmax(q K^T / sqrt(head_dim)) V over those; return o and the two buffers.",
        "`k_buffer, v_buffer = k_buffer.clone(), v_buffer.clone()`; `slot = position % W`; "
        "`k_buffer[:, :, slot] = rope(k_new, position)[:, :, 0]` (v alike, no RoPE); `n = min(position + 1, W)`; "
        "`K, V = k_buffer[:, :, :n], v_buffer[:, :, :n]`; then the softmax of exercise 1.",
    ),
    forbidden=OWN_CODE,
)

EXERCISES = (KV_CACHE_STEP, GROUPED_DECODE, CACHE_BYTES, ROLLING_STEP)

# --------------------------------------------------------------------------------------------
# The predictions of exercises 3 and 4: each compared with the lesson's own answer (and the learner's function too)
# --------------------------------------------------------------------------------------------

SERVER = (40, 40, 8, 128, 2, 32768, 4, 4096)  # exercise 3's question: layers, heads, K/V heads, head_dim, bytes,
# tokens, sequences, window


def check_cache_prediction(my_guess_gib, cache_bytes) -> None:
    """Exercise 3: the learner's guess (GiB) and their ``cache_bytes`` on the server's question, each against the
    right answer, within 5%."""
    layers, _, kv_heads, head_dim, size, tokens, batch, window = SERVER
    right = kv_cache_bytes(layers, kv_heads, head_dim, size, tokens=tokens, batch=batch, window=window) / 2**30
    guess = _attempt(lambda: float(my_guess_gib()))
    answer = _attempt(lambda: int(cache_bytes(*(torch.tensor([n]) for n in SERVER))[0]) / 2**30)
    for who, value, missing in (("your prediction", guess, "Write your prediction in my_guess_gib (by hand)"),
                                ("your cache_bytes", answer, "Write cache_bytes")):  # fmt: skip
        if value is None:
            print(f"{missing} above, then run this cell again.")
        else:
            close = abs(value - right) <= 0.05 * right
            print(f"{who}: {value:g} GiB, {'✅ within' if close else '❌ more than'} 5% of the right answer")


def check_rolling_prediction(predicted_slots, rolling_step) -> None:
    """Exercise 4: the learner's (position in slot 2, positions query 9 reads) for W = 4 after position 9, and what
    their ``rolling_step`` does, each against the lesson's rolling_cache_step. Token p's value is the unit vector e_p
    and the query is zero (equal weights), so the output's nonzero features are the positions read."""
    window, head_dim = 4, 16
    query, keys = torch.zeros(1, 1, 1, head_dim), randn(generator(7), 10, 1, 1, 1, head_dim)
    values = torch.eye(head_dim)[:10].view(10, 1, 1, 1, head_dim)

    def run(step):
        k_buf, v_buf = torch.full((1, 1, window, head_dim), -1.0), torch.full((1, 1, window, head_dim), -1.0)
        for p in range(10):
            out, k_buf, v_buf = step(query, keys[p], values[p], k_buf, v_buf, p)
        return int(v_buf[0, 0, 2].argmax()), [int(i) for i in (out[0, 0, 0] > 1e-6).nonzero().flatten()]

    right = run(rolling_cache_step)
    predicted = _attempt(lambda: predicted_slots())
    measured = _attempt(lambda: run(rolling_step))
    for who, value, missing in (("your prediction", predicted, "Write your prediction in predicted_slots"),
                                ("your rolling_step", measured, "Write rolling_step")):  # fmt: skip
        if value is None:
            print(f"{missing} above, then run this cell again.")
            continue
        agree = value[0] == right[0] and sorted(value[1]) == right[1]
        print(f"{who}: slot 2 holds position {value[0]}; query 9 reads positions {sorted(value[1])}: "
              f"{'✅ right' if agree else '❌ not what the rule gives'}")  # fmt: skip
