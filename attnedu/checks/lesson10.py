"""Checks for the exercises of lesson 10 (attention at inference).

The references are the package's own (``attnedu.kv_cache.cache_chunk``, ``paged_attention``, ``kv_cache_bytes``,
``rolling_cache_step``). Heads, lengths and widths differ from each other so that a transpose or a wrong axis shows.

The chunk through a KV cache (a transfer: the lesson feeds one token at a time by hand and chunks only through the
package's cache) has cases with an empty cache, one new token, several, and RoPE at positions large enough that a
rotation one step off shows; its variants include the positions off by one in both directions, every new token at
position m, the chunk counted from 0, no causal mask inside the chunk and SDPA's top-left is_causal. The paged decode
(a transfer: the lesson's paged cache serves one sequence; here a batch of them, grouped heads) gets pools whose
unused slots hold large numbers, block tables out of order, sequences whose last block is partly filled (padding) or
full (no padding); its variants include the lengths off by one both ways, the table ignored or read in the pool's
order, and the head pairings of lesson 10. The cache-size calculator (the transfer task:
configurations the lesson did not show, windows and batches combined) works on integer tensors, one configuration per
entry; its large case overflows 32-bit integers and is rounded by 32-bit floats, and a result left in float or int32
is named as such; a text shorter than its window tells tokens held from slots allocated. The rolling step (a
transfer task: the lesson's RollingKVCache, one token) gets buffers filled as earlier steps would have, the slots no
position has reached holding large finite numbers (a mask works as well as a slice), positions before the buffer is
full, just full and wrapped many times, and a window of 1; its variants include the slot one too far and one too
early, the last slot written over and over once the buffer is full, the window one key short and the key rotated by
its slot.

Exercises 1, 3 and 4 each open with a graded prediction (``checks.prediction``), made before the function is written and
measured with the course's own code: chunk_prediction (with an empty cache and a chunk of 3, the positions the first new
token reads, and whether feeding the tokens one at a time changes anything), server_cache_gib (a server's cache in GiB,
within 5%; a wrong guess that one known slip explains, query heads counted, GB for GiB or a 32-bit integer's
wrap-around, with its sign or without, is told which) and predicted_slots (a transfer to Mistral's window of positions
i - W .. i, which the spec of the exercise does not give: how many slots its rolling buffer needs, and which position
the new token then writes over). The learner's functions, predictions included, may not run anything from lesson 10's
modules (``OWN_CODE``): the exercises ask for their own code, and a prediction computed with the course's code would be
a measurement.
"""

from __future__ import annotations

import math

import torch

from ..cache_sizes import kv_cache_bytes
from ..kv_cache import _cache_chunk, paged_attention, rolling_cache_step
from ..positional import apply_rope
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Part, Variant, generator, kinds, randn
from .prediction import prediction_exercise

LESSON = "10_attention_at_inference"
OWN_CODE = (  # lesson 10's modules: the exercises ask for the learner's own code
    "attnedu.kv_cache",
    "attnedu.decoding",
    "attnedu.kv_sharing",
    "attnedu.cache_sizes",
    "attnedu.flex_masks",
    "attnedu.linear_attention",
)
SEQUENCES = ("sequence", "sequences", "batch index")  # what an index of an output's first axis is here

# --------------------------------------------------------------------------------------------
# kv_cache_chunk: n new tokens through a KV cache (a transfer task)
# --------------------------------------------------------------------------------------------


def _chunk_reference(q, k_new, v_new, k_cache, v_cache):
    return _cache_chunk(q, k_new, v_new, k_cache, v_cache)


def _chunk_cases() -> list[Case]:
    g = generator(100)

    def case(batch, heads, cached, new, head_dim, tags, scale=1.0, note=""):
        q, k_new, v_new = (scale * randn(g, batch, heads, new, head_dim) for _ in range(3))
        k_cache = scale * randn(g, batch, heads, cached, head_dim)
        if cached:  # stored already rotated, each by its own position
            k_cache = apply_rope(k_cache, torch.arange(cached))
        v_cache = scale * randn(g, batch, heads, cached, head_dim)
        description = f"batch {batch}, heads {heads}, {cached} cached tokens, {new} new, head_dim {head_dim}"
        return Case(description + (f"; {note}" if note else ""), (q, k_new, v_new, k_cache, v_cache), tags)

    return [
        case(2, 3, 5, 3, 8, kinds()),
        case(1, 2, 7, 4, 6, kinds(ONE)),
        case(3, 2, 0, 4, 8, kinds(), note="an empty cache: the start of a prompt"),
        case(2, 2, 6, 1, 8, kinds(), note="one new token: a decoding step"),
        case(2, 4, 40, 5, 16, kinds(), note="the new tokens at positions 40..44"),
        case(1, 1, 3, 2, 4, kinds(ONE), note="one head"),
        case(2, 2, 6, 3, 8, kinds(LARGE), scale=40.0, note="queries and keys around ±40: scores in the hundreds"),
    ]


def _chunk_with(q, k_new, v_new, k_cache, v_cache, *, offset=0, positions="chunk", rotate="both", order="after",
                attend="all", mask="causal", layout="halves", scale="head_dim", rerotate=False,
                store="rotated"):  # fmt: skip
    """A known-wrong chunk: new token i rotated at ``positions`` (m + i, every one at m, or i) + ``offset``, on
    ``rotate``; the new keys put ``order`` the cache; the queries reading ``attend`` (all keys, the cache only, the
    new keys only) under ``mask``; the cache returned with the new keys ``store``d rotated or as they came."""
    m, n = k_cache.shape[2], q.shape[2]
    at = {"chunk": torch.arange(m, m + n), "same": torch.full((n,), m), "from_zero": torch.arange(n)}[positions]
    at = at + offset
    q_r = apply_rope(q, at, layout) if rotate in ("both", "q") else q
    k_r = apply_rope(k_new, at, layout) if rotate in ("both", "k") else k_new
    cached = apply_rope(k_cache, torch.arange(m), layout) if rerotate and m else k_cache
    keys = torch.cat([cached, k_r], 2) if order == "after" else torch.cat([k_r, cached], 2)
    values = torch.cat([v_cache, v_new], 2) if order == "after" else torch.cat([v_new, v_cache], 2)
    read_k, read_v = {"all": (keys, values), "cache": (cached, v_cache), "new": (k_r, v_new)}[attend]
    length = read_k.shape[2]
    query = torch.arange(n)[:, None] + (length - n if attend != "cache" else length)  # each query's last key
    key = torch.arange(length)[None, :]
    allowed = {"causal": key <= query, "none": torch.ones(n, length, dtype=torch.bool),
               "top_left": key <= torch.arange(n)[:, None], "strict": key < query,
               "next": key <= query + 1}[mask]  # fmt: skip
    if attend == "cache":
        allowed = torch.ones(n, length, dtype=torch.bool)
    divisor = {"head_dim": math.sqrt(q.shape[-1]), "none": 1.0, "length": math.sqrt(keys.shape[2])}[scale]
    scores = (q_r @ read_k.transpose(-2, -1) / divisor).masked_fill(~allowed, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))  # a row with nothing allowed reads nothing
    if store == "unrotated":  # the output as above, the cache returned with the new keys as they came
        keys = torch.cat([cached, k_new], 2) if order == "after" else torch.cat([k_new, cached], 2)
    return weights @ read_v, keys, values


def _chunk_variant(diagnosis: str, *changes: dict) -> Variant:
    return Variant.with_changes(_chunk_with, diagnosis, *changes)


KV_CACHE_CHUNK = Exercise(
    name="kv_cache_chunk",
    lesson=LESSON,
    params=("q", "k_new", "v_new", "k_cache", "v_cache"),
    returns=(
        ("batch", "heads", "n", "head_dim"),
        ("batch", "heads", "cached_len + n", "head_dim"),
        ("batch", "heads", "cached_len + n", "head_dim"),
    ),  # fmt: skip
    output_names=("output", "k_cache", "v_cache"),
    units=(SEQUENCES,) * 3,
    reference=_chunk_reference,
    make_cases=_chunk_cases,
    variants=(
        _chunk_variant(
            "the queries attended before the new keys and values were appended: they read the cache only, not "
            "themselves nor the new tokens before them (and with an empty cache, nothing); a token reads its own key.",
            {"attend": "cache"},
        ),
        _chunk_variant(
            "the queries read only the new tokens' keys and values, not the cache: the output ignores every earlier "
            "token.",
            {"attend": "new"},
        ),
        _chunk_variant(
            "off by one: new token i was rotated as position m + i - 1. With m tokens cached at positions 0..m-1, "
            "the new ones are at m, m + 1, ...",
            {"offset": -1},
        ),
        _chunk_variant(
            "off by one: new token i was rotated as position m + i + 1. With m tokens cached at positions 0..m-1, "
            "the new ones are at m, m + 1, ...",
            {"offset": 1},
        ),
        _chunk_variant(
            "every new token was rotated as position m: each has its own position, m for the first, m + 1 for the "
            "next, and so on (it shows once the chunk has two tokens or more).",
            {"positions": "same"},
        ),
        _chunk_variant(
            "the new tokens were rotated as positions 0, 1, ...: they continue the text after the m cached tokens, "
            "so their positions start at m (the two agree only when the cache is empty).",
            {"positions": "from_zero"},
        ),
        _chunk_variant(
            "the new tokens attended to the new tokens after them: inside the chunk a token may read only the "
            "tokens up to itself, as in a causal model that sees the text one token at a time.",
            {"mask": "none"},
        ),
        _chunk_variant(
            "off by one: each new token also read the key of the token just after it in the chunk (the mask lets one "
            "later key through). A token reads the keys up to and including its own position, none after it.",
            {"mask": "next"},
        ),
        _chunk_variant(
            "the causal mask was aligned to the top-left corner: new token i read keys 0..i of all m + n, so it "
            "missed most of the cache. It sits at position m + i and reads keys 0..m + i (the mask aligned to the "
            "bottom-right corner); is_causal=True in torch's scaled_dot_product_attention aligns to the top-left.",
            {"mask": "top_left"},
        ),
        _chunk_variant(
            "off by one: each new token was kept from reading its own key (the mask is strict). A token reads the "
            "keys up to and including its own position.",
            {"mask": "strict"},
        ),
        _chunk_variant(
            "the queries were not rotated (only the new keys were): RoPE turns both the query and the key by the "
            "token's position.",
            {"rotate": "k"},
        ),
        _chunk_variant(
            "the new keys were not rotated (only the queries were): RoPE turns both, and the cache stores keys "
            "already rotated.",
            {"rotate": "q"},
        ),
        _chunk_variant(
            "neither the queries nor the new keys were rotated: RoPE turns both by each new token's position.",
            {"rotate": "none"},
        ),
        _chunk_variant(
            "the cached keys were rotated again: they were stored already rotated by their own positions. Rotate "
            "only the new queries and keys.",
            {"rerotate": True},
        ),
        _chunk_variant(
            "the cache you return holds the new keys as they came, before RoPE, though your output used them "
            "rotated: the cache stores each key already rotated by its position, as the keys it was given were, so "
            "that the next call can use it as it is.",
            {"store": "unrotated"},
        ),
        _chunk_variant(
            "the new keys and values went in front of the cache: the cache you return no longer lists its tokens "
            "in the order of their positions, and the causal mask, which reads a key's position from its place, "
            "lets the wrong keys through.",
            {"order": "before"},
        ),
        _chunk_variant(
            "RoPE used the interleaved layout (pairs 2i, 2i+1); the cache and the lesson's model pair feature i with "
            "feature i + head_dim/2.",
            {"layout": "interleaved"},
        ),
        _chunk_variant(
            "the scores are not scaled: each is a dot product of head_dim numbers, which attention divides by "
            "sqrt(head_dim).",
            {"scale": "none"},
        ),
        _chunk_variant(
            "the scores were divided by the square root of the number of keys, not of head_dim.",
            {"scale": "length"},
        ),
    ),
    hint=(
        "Where does new token i sit in the text, with m tokens cached before the chunk? Which keys of the grown "
        "cache may it read, and which may it not?",
        "Positions m..m+n-1 (m = k_cache.shape[2]); rotate each new query and key by its own position; K = "
        "[k_cache; k_new], V alike; scores q K^T / sqrt(head_dim) over m + n keys, with key j allowed for new token i "
        "when j <= m + i; softmax; times V; return the output and K, V.",
        "`m, n = k_cache.shape[2], q.shape[2]`; `pos = torch.arange(m, m + n)`; `q, k_new = rope(q, pos), "
        "rope(k_new, pos)`; `K = torch.cat([k_cache, k_new], dim=2)` (V alike); `allowed = torch.arange(m + n)[None, "
        ":] <= pos[:, None]`; `scores = (q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~allowed, "
        "float('-inf'))`; `out = torch.softmax(scores, dim=-1) @ V`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# paged_decode: a batch of sequences decoding one token each over a paged cache (a transfer task)
# --------------------------------------------------------------------------------------------

GARBAGE = 100.0  # what slots no token has reached hold: large and finite (a mask instead of a slice is fine)


def _paged_reference(q, k_pool, v_pool, block_table, lengths):
    return paged_attention(q, k_pool, v_pool, block_table, lengths)


def _paged_cases() -> list[Case]:
    g = generator(101)

    def case(heads, kv_heads, block_size, head_dim, tables, lengths, num_blocks, tags, scale=1.0, note=""):
        batch = len(tables)
        q = scale * randn(g, batch, heads, 1, head_dim)
        k_pool = GARBAGE * randn(g, num_blocks, kv_heads, block_size, head_dim)
        v_pool = GARBAGE * randn(g, num_blocks, kv_heads, block_size, head_dim)
        for blocks, length in zip(tables, lengths, strict=True):
            for p in range(length):  # what the sequence's earlier steps wrote, keys already rotated
                block, offset = blocks[p // block_size], p % block_size
                k_pool[block, :, offset] = scale * randn(g, kv_heads, head_dim)
                v_pool[block, :, offset] = randn(g, kv_heads, head_dim)
        width = max(len(t) for t in tables)
        table = torch.tensor([t + [-1] * (width - len(t)) for t in tables])
        description = (f"batch {batch}, {heads} query heads, {kv_heads} K/V heads, blocks of {block_size}, head_dim "
                       f"{head_dim}, block tables {tables}, lengths {lengths}")  # fmt: skip
        return Case(description + (f"; {note}" if note else ""),
                    (q, k_pool, v_pool, table, torch.tensor(lengths)), tags)  # fmt: skip

    # fmt: off
    return [
        case(4, 2, 4, 8, [[5, 1, 3], [2, 0]], [10, 6], 7, kinds(PADDED), note="each last block partly filled"),
        case(6, 3, 2, 4, [[3, 0], [1, 4], [2, 5]], [4, 4, 4], 6, kinds(UNPADDED), note="every block full"),
        case(8, 2, 3, 8, [[4, 2, 0]], [9], 5, kinds(ONE, UNPADDED)),
        case(8, 1, 4, 6, [[1], [0, 2]], [3, 5], 3, kinds(PADDED), note="multi-query: one K/V head"),
        case(4, 4, 2, 8, [[6, 1, 2], [0], [3, 4]], [5, 1, 3], 7, kinds(PADDED),
             note="as many K/V heads as query heads; a sequence of one token"),
        case(4, 2, 1, 8, [[2, 0, 1]], [3], 3, kinds(ONE, UNPADDED), note="blocks of one token"),
        case(4, 2, 4, 8, [[3, 0], [1, 2]], [8, 8], 4, kinds(LARGE, UNPADDED), scale=40.0,
             note="queries and keys around ±40"),
    ]
    # fmt: on


def _paged_with(q, k_pool, v_pool, block_table, lengths, *, pairing="interleave", pad=0, masked=True, table="given",
                scale="head_dim", transpose=True, empty="nan"):  # fmt: skip
    """A known-wrong paged decode: each sequence's keys gathered through ``table`` (the given one, the pool's blocks
    0, 1, 2, ... in turn, its blocks sorted, or every entry of its row, -1 included), the heads paired by
    ``pairing``, the keys at positions >= lengths + ``pad`` masked (or none; a sequence left with no key gives NaN,
    or 0 when ``empty`` is "zero", as a slice to no key does); the gathered blocks' head axis moved in front before
    their positions are joined, or not (``transpose``)."""
    batch, heads, _, d = q.shape
    num_blocks, kv_heads, size, _ = k_pool.shape
    group = heads // kv_heads
    out = []
    for b in range(batch):
        n = int(lengths[b])
        blocks = block_table[b][: -(-n // size)].tolist()
        if table == "all":
            blocks = block_table[b].tolist()
        elif table == "contiguous":
            blocks = list(range(len(blocks)))
        elif table == "sorted":
            blocks = sorted(blocks)
        k = torch.cat([k_pool[i] for i in blocks], dim=1)  # (H_kv, blocks * size, d), in position order
        v = torch.cat([v_pool[i] for i in blocks], dim=1)
        if not transpose:  # (blocks, H_kv, size, d) read in memory order as (H_kv, blocks * size, d)
            k, v = (pool[blocks].reshape(kv_heads, -1, d) for pool in (k_pool, v_pool))
        if pairing == "interleave":
            k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        elif pairing == "repeat":
            k, v = k.repeat(group, 1, 1), v.repeat(group, 1, 1)
        else:
            k, v = k[:1].expand(heads, -1, -1), v[:1].expand(heads, -1, -1)
        divisor = {"head_dim": math.sqrt(d), "none": 1.0, "heads": math.sqrt(d * kv_heads)}[scale]
        scores = q[b] @ k.transpose(-2, -1) / divisor  # (heads, 1, keys)
        if masked:
            keep = torch.arange(k.shape[1]) < n + pad
            scores = scores.masked_fill(~keep, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out.append((torch.nan_to_num(weights) if empty == "zero" else weights) @ v)
    return torch.stack(out)


def _paged_variant(diagnosis: str, *changes: dict) -> Variant:
    return Variant.with_changes(_paged_with, diagnosis, *changes)


PAGED_DECODE = Exercise(
    name="paged_decode",
    lesson=LESSON,
    params=("q", "k_pool", "v_pool", "block_table", "lengths"),
    returns=(("batch", "heads", "1", "head_dim"),),
    units=(SEQUENCES,),
    reference=_paged_reference,
    make_cases=_paged_cases,
    variants=(
        _paged_variant(
            "the K/V heads were tiled (0, 1, 0, 1, ..., as repeat lays them out): query head h read K/V head h % "
            "kv_heads. Consecutive query heads share a K/V head: head h reads h // group.",
            {"pairing": "repeat"},
        ),
        _paged_variant(
            "every query head read K/V head 0: query head h reads K/V head h // (heads // kv_heads).",
            {"pairing": "first"},
        ),
        _paged_variant(
            "the slots past each sequence's length were read: the rest of its last block (and the blocks after "
            "it) hold no token of the sequence, yet got weight.",
            {"masked": False},
        ),
        _paged_variant(
            "off by one: each sequence's newest token was left out (its key and value are already in the pool, in "
            "the slot of position lengths[b] - 1). Sequence b's keys are positions 0..lengths[b]-1, the newest "
            "included: a token reads itself.",
            {"pad": -1},
            {"pad": -1, "empty": "zero"},
        ),
        _paged_variant(
            "every entry of the block table was read, the -1 entries too, and every slot of those blocks: an index "
            "of -1 is the pool's last block in Python, so that block, and the slots past each sequence's length, "
            "got weight. The entries after a sequence's last block name no block, and its last block holds tokens "
            "only up to its length.",
            {"table": "all", "masked": False},
        ),
        _paged_variant(
            "the gathered blocks, (blocks, kv_heads, block_size, head_dim), were joined into positions with the "
            "block axis still in front of the head axis: a reshape keeps the order in memory, so each K/V head got "
            "a mix of the heads' keys. The head axis has to come first before the block and slot axes are merged "
            "(it shows wherever kv_heads > 1).",
            {"transpose": False},
        ),
        _paged_variant(
            "off by one: the slot after each sequence's last token was read too. Sequence b's keys are positions "
            "0..lengths[b]-1, and position lengths[b] holds no token yet.",
            {"pad": 1},
        ),
        _paged_variant(
            "the block table was ignored: the pool's blocks 0, 1, 2, ... were read as if each sequence's blocks sat "
            "one after another from the start. Sequence b's i-th block is the block block_table[b, i] names, "
            "wherever it is in the pool.",
            {"table": "contiguous"},
        ),
        _paged_variant(
            "the sequence's blocks were read in the pool's order, not the table's: position p is in block "
            "block_table[b, p // block_size], so the table's order is the order of the positions (it decides which "
            "block is the last, partly filled one).",
            {"table": "sorted"},
        ),
        _paged_variant(
            "the scores are not scaled: each is a dot product of head_dim numbers, which attention divides by "
            "sqrt(head_dim).",
            {"scale": "none"},
        ),
        _paged_variant(
            "the scores were divided by sqrt(head_dim * kv_heads); each score is a dot product of head_dim numbers "
            "only.",
            {"scale": "heads"},
        ),
    ),
    hint=(
        "For sequence b, which blocks of the pool hold its positions 0, 1, 2, ..., and in which order? Which slots "
        "of its last block hold tokens? And which K/V head does query head h read?",
        "Sequence b's keys: the blocks block_table[b, 0], block_table[b, 1], ... of the pool, one after another "
        "along the position axis, its first lengths[b] positions; each K/V head repeated group = heads // kv_heads "
        "times in place (0, 0, ..., 1, 1, ...); scores q K^T / sqrt(head_dim); softmax; times V.",
        "For each b: `blocks = block_table[b, : (lengths[b] + size - 1) // size]`; `k = k_pool[blocks]` (blocks, "
        "kv_heads, size, d) `.transpose(0, 1).reshape(kv_heads, -1, d)[:, : lengths[b]]` (v alike); `k = "
        "k.repeat_interleave(group, dim=0)`; `torch.softmax(q[b] @ k.transpose(-2, -1) / d ** 0.5, dim=-1) @ v`; "
        "then `torch.stack` the sequences.",
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
            f"layers {r[0]}, heads {r[1]}, K/V heads {r[2]}, head_dim {r[3]}, {r[4]} byte{'s' * (r[4] != 1)}, "
            f"{r[5]} tokens, batch "
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


def _bytes_with(L, H, Hkv, d, b, s, n, w, *, heads="kv", kv=2, window="min", dtype=None, back=True):  # noqa: E741
    """A known-wrong count; ``dtype`` (torch.int32, float32 or float64): the product computed in it, and converted
    back to torch.long if ``back``, else returned as it is."""
    tokens = {"min": torch.where(w > 0, torch.minimum(s, w), s), "ignored": s, "plus": torch.where(w > 0,
              torch.minimum(s, w + 1), s), "minus": torch.where(w > 0, torch.minimum(s, w - 1), s),
              "allocated": torch.where(w > 0, w, s), "zero": torch.minimum(s, w)}[window]  # fmt: skip
    count = {"kv": Hkv, "query": H}[heads]
    if dtype is None:
        return kv * L * count * d * b * tokens * n
    # in float32, every factor but 61 and 1,000,001 of the large case is a power of two or 3 times one: one rounding,
    # whatever the order of the products
    product = kv * L.to(dtype) * count.to(dtype) * d.to(dtype) * b.to(dtype) * tokens.to(dtype) * n.to(dtype)
    return product.long() if back else product


def _bytes_variant(diagnosis: str, *changes: dict, **change) -> Variant:
    return Variant.with_changes(_bytes_with, diagnosis, *changes, **change)


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
            {"dtype": torch.float32},
        ),
        _bytes_variant(
            "the product overflowed: computed in 32-bit integers it wraps past 2^31 bytes (2 GiB), where the "
            "inputs' int64 would not.",
            {"dtype": torch.int32},
        ),
        _bytes_variant(
            "the answer came back in 32-bit floats: a byte count is a whole number, and float32 holds whole numbers "
            "exactly only up to 2^24 (16,777,216), so the large answers are rounded; keep the 64-bit integers you were "
            "given.",
            {"dtype": torch.float32, "back": False},
        ),
        _bytes_variant(
            "the answer came back as floating-point numbers (float64): a byte count is a whole number, and the "
            "check expects the torch.long the inputs are (float64 holds whole numbers exactly only up to 2^53).",
            {"dtype": torch.float64, "back": False},
        ),
        _bytes_variant(
            "the answer came back in 32-bit integers, which wrap past 2^31 - 1 bytes (2 GiB): the large answers "
            "overflowed. Keep the inputs' 64-bit integers from the first product to the last.",
            {"dtype": torch.int32, "back": False},
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
                  query_at="position", attend="after", read="window", rerotate=False, scale=True,
                  store="rotated"):  # fmt: skip
    """A known-wrong step: the new token written to ``slot``; its key rotated at ``key_at``, its query at
    ``query_at``; the query attending ``attend`` the write, over the slots ``read`` names; the buffer given the new
    key rotated or as it came (``store``), the query reading it rotated either way."""
    window = k_buffer.shape[2]
    k_buffer, v_buffer = k_buffer.clone(), v_buffer.clone()
    s = {"mod": position % window, "next": (position + 1) % window, "previous": (position - 1) % window,
         "div": position // window, "last": min(position, window - 1)}[slot]  # fmt: skip
    rotation = {"position": position, "slot": position % window}
    q_r = q if query_at == "none" else apply_rope(q, torch.tensor([rotation[query_at]]))
    k_r = apply_rope(k_new, torch.tensor([rotation[key_at]]))
    old_k, old_v = k_buffer.clone(), v_buffer.clone()
    k_buffer[:, :, s], v_buffer[:, :, s] = k_r[:, :, 0], v_new[:, :, 0]
    keys, values = (k_buffer, v_buffer) if attend == "after" else (old_k, old_v)
    keys = keys.clone()
    if store == "unrotated":  # the buffer returned holds the key as it came; the query read the rotated one
        k_buffer[:, :, s] = k_new[:, :, 0]
    if read == "window":
        slots = list(range(min(position + 1, window)))
    elif read == "mod":  # slots 0..position % W: the buffer's first slots up to the new one
        slots = list(range(position % window + 1))
    elif read == "written":  # min(position, W) slots: before the buffer is full, not the new one
        slots = list(range(min(position, window)))
    elif read == "written, at least one":
        slots = list(range(max(1, min(position, window))))
    elif read == "first W - 1":  # slots 0..W-2 once the buffer is full
        slots = list(range(min(position + 1, window - 1)))
    elif read == "first W - 1, at least one":
        slots = list(range(max(1, min(position + 1, window - 1))))
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
    return Variant.with_changes(_rolling_with, diagnosis, *changes)


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
    units=(SEQUENCES,) * 3,
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
            "the new token went to slot min(position, W - 1): until the buffer is full that is its slot, but from "
            "then on every new token overwrote the last slot, so the first W - 1 slots kept positions 0 .. W - 2 for "
            "ever and the query read those instead of the tokens just before it. A rolling buffer reuses its slots "
            "in turn: the new token takes the slot of the token leaving the window.",
            {"slot": "last"},
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
            "the window is one short: once the buffer is full, the query read W - 1 keys, not W. A window of W keys "
            "holds the token itself and the W - 1 before it: every slot, once the buffer is full.",
            {"read": "short"},
            {"read": "first W - 1"},
            {"read": "first W - 1, at least one"},
        ),
        _rolling_variant(
            "once the buffer has wrapped, the query read only the slots from 0 up to the new token's, position % W: "
            "the slots after it hold the oldest positions of the window, which the query reads too. Which slots hold "
            "the window's positions does not depend on where the new one went, once every slot holds one.",
            {"read": "mod"},
        ),
        _rolling_variant(
            "before the buffer is full, the query read only the slots written before this step, min(position, W) "
            "of them, not the one its own key was just written to. The token reads its own key: positions "
            "0..position, in min(position + 1, W) slots.",
            {"read": "written"},
            {"read": "written, at least one"},
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
            "the buffer you return holds the new key as it came, before RoPE, though the query read it rotated: the "
            "buffer stores each key already rotated by its position, as the keys it was given were, so that the "
            "next step can use it as it is.",
            {"store": "unrotated"},
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
        "`W = k_buffer.shape[2]`; `k_buffer, v_buffer = k_buffer.clone(), v_buffer.clone()`; `slot = position % W`; "
        "`q, k_new = rope(q, position), rope(k_new, position)`; `k_buffer[:, :, slot] = k_new[:, :, 0]` (v alike, "
        "no RoPE); `n = min(position + 1, W)`; `K, V = k_buffer[:, :, :n], v_buffer[:, :, :n]`; `out = "
        "torch.softmax(q @ K.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ V`; `return out, k_buffer, v_buffer`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# The graded predictions (checks.prediction): each made before its exercise's function is written, each measured
# with the course's own code (the learner's function plays no part in the measurement)
# --------------------------------------------------------------------------------------------

# chunk_prediction (exercise 1): an empty cache and a chunk of 3 new tokens
CHUNK_NEW = 3


def _chunk_prediction_inputs() -> tuple[torch.Tensor, ...]:
    """q, k_new, v_new (1, 2, CHUNK_NEW, 8) in float64 (so that the chunk and the steps agree to rounding far below
    the tolerance), from seed 103; the queries and keys scaled by 4, so that the weights are far from uniform."""
    g = generator(103)
    q, k_new = (4 * randn(g, 1, 2, CHUNK_NEW, 8).double() for _ in range(2))
    return q, k_new, randn(g, 1, 2, CHUNK_NEW, 8).double()


def _chunk_prediction() -> tuple[frozenset, bool]:
    """The course's measurement, with ``attnedu.kv_cache``'s chunk: (the positions whose values make up the first
    new token's output, with an empty cache: the features that are not 0 when token p's value is e_p, for any of the
    queries; whether the outputs or the caches of the chunk differ from those of the 3 tokens fed one at a time, by
    more than 1e-9)."""
    q, k_new, v_new = _chunk_prediction_inputs()
    empty = torch.zeros(1, 2, 0, 8, dtype=torch.float64)
    one_hot = torch.eye(8, dtype=torch.float64)[:CHUNK_NEW].expand(1, 2, CHUNK_NEW, 8)  # token p's value is e_p
    first = _cache_chunk(q, k_new, one_hot, empty, empty)[0][0, :, 0]  # (heads, 8): the first new token, each head
    read = frozenset(int(p) for p in (first.abs() > 1e-12).any(dim=0).nonzero().flatten())
    output, k_chunk, v_chunk = _cache_chunk(q, k_new, v_new, empty, empty)
    k_cache, v_cache, steps = empty, empty, []
    for i in range(CHUNK_NEW):
        one = slice(i, i + 1)
        out, k_cache, v_cache = _cache_chunk(q[:, :, one], k_new[:, :, one], v_new[:, :, one], k_cache, v_cache)
        steps.append(out)
    same = all(
        torch.allclose(a, b, rtol=0.0, atol=1e-9)
        for a, b in ((torch.cat(steps, dim=2), output), (k_cache, k_chunk), (v_cache, v_chunk))
    )
    return read, not same


def _chunk_prediction_details(measured: tuple) -> str:
    read, differs = measured
    shown = ", ".join(str(p) for p in sorted(read))
    return (
        f"Measured with the course's cache, float64, random queries: the first new token's output mixes the values of "
        f"positions [{shown}]; the chunk against the {CHUNK_NEW} tokens one at a time: outputs and caches "
        + ("differ by more than 1e-9." if differs else "equal within 1e-9 (float rounding).")
    )


def _chunk_prediction_diagnosis(index: int, guess, measured: tuple) -> str:
    if index == 0:
        if not guess:
            return (
                "the first new token reads something: its own key, appended to the cache before it attends. With an "
                "empty cache, a token that attended before its key was appended would have nothing to read"
            )
        if any(p > 0 for p in guess):
            return (
                "the tokens after it in the chunk are not for it to read: inside the chunk each new token reads the "
                "positions up to its own, as it would if it came alone"
            )
        return ""
    if guess:
        return (
            "both ways, each new token reads the keys of positions 0 up to its own (inside the chunk, the causal mask "
            "sees to that), and each key is rotated once, by its own position, whichever call stored it"
        )
    return "a chunk and the same tokens one at a time agree: the outputs and the caches are the same"


CHUNK_PREDICTION = prediction_exercise(
    name="chunk_prediction",
    lesson=LESSON,
    question=(
        f"with an empty cache and {CHUNK_NEW} new tokens, the positions whose values make up the first new token's "
        f"output, and whether feeding the {CHUNK_NEW} one at a time would change an output or a cache"
    ),
    parts=(
        Part("the positions the first new token reads", frozenset),
        Part(f"feeding the {CHUNK_NEW} tokens one at a time changes an output or a cache", bool),
    ),
    measure=_chunk_prediction,
    details=_chunk_prediction_details,
    diagnose=_chunk_prediction_diagnosis,
    forbidden=OWN_CODE,  # a prediction, not a measurement made with the course's cache
    hint=(
        "Two questions. With nothing cached, which keys exist when the first new token attends, and which of them "
        "may it read? And does a token's output depend on whether the tokens before it came in the same call?",
        "The new keys are appended before the new tokens attend, and token i of the chunk reads the positions up to "
        "its own: the first reads one key, so its weight on it is 1 whatever the query. One at a time, each token "
        "reads the same keys, rotated by the same positions, as in the chunk.",
        "Answer with a list of positions and True or False: `return read, differs`, the two values you decided on "
        "(the check then measures both).",
    ),
)

# server_cache_gib (exercise 3): a server's batch, predicted in GiB before cache_bytes is written
SERVER = dict(num_layers=48, num_heads=40, num_kv_heads=8, head_dim=128, bytes_per_number=2, seq_len=100_000,
              batch=4, window=8192)  # fmt: skip
SERVER_MARGIN = 0.05  # full credit within 5% of the measurement, half within 10%


def _server_cache_gib() -> tuple[float]:
    """The course's measurement: ``kv_cache_bytes`` of the server's batch, in GiB (2^30 bytes)."""
    c = SERVER
    size = kv_cache_bytes(c["num_layers"], c["num_kv_heads"], c["head_dim"], c["bytes_per_number"],
                          tokens=c["seq_len"], batch=c["batch"], window=c["window"])  # fmt: skip
    return (size / 2**30,)


def _server_details(measured: tuple) -> str:
    c = SERVER
    per_token = kv_cache_bytes(c["num_layers"], c["num_kv_heads"], c["head_dim"], c["bytes_per_number"])
    kept = min(c["seq_len"], c["window"])
    unwindowed = per_token * c["seq_len"] * c["batch"] / 2**30
    return (
        f"A token costs {per_token:,} bytes in all {c['num_layers']} layers' keys and values; each sequence keeps "
        f"{kept:,} of its {c['seq_len']:,} tokens: {per_token * kept * c['batch']:,} bytes for the {c['batch']} "
        f"sequences, {measured[0]:.4g} GiB (without the window: {unwindowed:.4g} GiB)."
    )


# What a wrong guess is, as a multiple of the measurement, when it comes from one known slip (within 3% of that
# multiple; GB for GiB, 7% off, within 0.75%, so that a guess merely rounded up is not taken for it)
_SLIPS = (
    (SERVER["num_heads"] / SERVER["num_kv_heads"],
     "as if each of the 40 query heads had its own keys and values: only the 8 K/V heads' are cached"),
    (8.0, "as if bf16 took 16 bytes a number: it takes 16 bits, 2 bytes"),
    (SERVER["seq_len"] / SERVER["window"],
     "as if all 100,000 tokens of each sequence stayed: a window of 8,192 keeps at most 8,192"),
    (SERVER["num_heads"] / SERVER["num_kv_heads"] * SERVER["seq_len"] / SERVER["window"],
     "as if each query head had its own keys and values and all 100,000 tokens stayed: the K/V heads and the "
     "window cut both"),
    (0.5, "a key or a value, not both: the cache holds a key and a value for each K/V head"),
    (1 / SERVER["batch"], "one sequence's cache: the batch holds 4"),
    (2.0, "as if a number took 4 bytes (fp32): the model stores bf16, 2 bytes"),
    (1 / SERVER["num_layers"], "one layer's cache: the model has 48"),
    (2**30 / 10**9, "GB (10^9 bytes), where the question asks GiB (2^30 bytes)", 0.0075),
    (1024.0, "MiB, where the question asks GiB"),
    (2.0**30, "bytes, where the question asks GiB"),
)  # fmt: skip


def _server_diagnosis(index: int, guess: float, measured: tuple) -> str:
    size = round(measured[0] * 2**30)
    wrapped = ((size + 2**31) % 2**32 - 2**31) / 2**30  # the bytes as a 32-bit integer holds them, in GiB
    if wrapped != measured[0] and abs(abs(guess) - abs(wrapped)) <= 0.03 * abs(wrapped):
        unsigned = "" if (guess < 0) == (wrapped < 0) else " without its sign, which does not undo the wrap"
        return (
            f"it is the byte count as a 32-bit integer holds it{unsigned}: {size:,} bytes is more than 2^31 - 1, so "
            f"in int32 it wraps around to {round(wrapped * 2**30):,}, {wrapped:.4g} GiB. A cache's bytes need 64-bit "
            "integers"
        )
    if guess <= 0:
        return "a cache holds a positive number of bytes"
    ratio = guess / measured[0]
    for factor, cause, *within in _SLIPS:
        if abs(ratio / factor - 1) <= (within[0] if within else 0.03):
            times = f"{ratio:.4g} times" if ratio >= 1 else f"1/{1 / ratio:.4g} of"  # the guess's, not the slip's
            return f"it is {times} the measurement: {cause}"
    return ""


SERVER_CACHE_GIB = prediction_exercise(
    name="server_cache_gib",
    lesson=LESSON,
    question="the KV cache of the server's batch, in GiB",
    parts=(Part("the cache of the server's batch", margin=SERVER_MARGIN, relative=True, unit="GiB"),),
    measure=_server_cache_gib,
    details=_server_details,
    diagnose=_server_diagnosis,
    forbidden=OWN_CODE,  # a prediction, not a measurement made with the course's kv_cache_bytes
    hint=(
        "What does the cache hold for one token in one layer, and for which heads? Then: how many tokens does each "
        "sequence keep with the window, and how many sequences are there?",
        "Per token: 2 (a key and a value) x layers x K/V heads x head_dim x bytes per number; the query heads do not "
        "enter. Each sequence keeps min(seq_len, window) tokens; times the batch; divide by 2^30 for GiB.",
        "`return 2 * 48 * 8 * 128 * 2 * min(100_000, 8192) * 4 / 2**30`, worked out by hand or in the function.",
    ),
)

# predicted_slots (exercise 4): a rolling buffer for Mistral's window, positions i - W .. i (the lesson's cell on the
# two ways of counting a window), which the exercise's spec (a window of W keys in W slots) does not give directly
ROLLING = dict(window=4, last=9)  # Mistral's W, and the position of the step asked about


def _rolling_probe(slots: int, last: int) -> tuple[list[int], list[int], list[int]]:
    """The course's ``rolling_cache_step`` for positions 0..last in a buffer of ``slots`` slots, token p's value the
    unit vector e_p and a query of zeros (every key read gets the same weight): (the position each slot holds before
    the last step, -1 for none; after it; the positions whose values the last token's output mixes)."""
    head_dim = 16
    query, keys = torch.zeros(1, 1, 1, head_dim), randn(generator(7), last + 1, 1, 1, 1, head_dim)
    values = torch.eye(head_dim)[: last + 1].view(last + 1, 1, 1, 1, head_dim)
    k_buffer, v_buffer = torch.full((1, 1, slots, head_dim), -1.0), torch.full((1, 1, slots, head_dim), -1.0)

    def held() -> list[int]:
        return [int(v_buffer[0, 0, s].argmax()) if float(v_buffer[0, 0, s].max()) > 0 else -1 for s in range(slots)]

    for p in range(last + 1):
        before = held()
        out, k_buffer, v_buffer = rolling_cache_step(query, keys[p], values[p], k_buffer, v_buffer, p)
    return before, held(), [int(i) for i in (out[0, 0, 0] > 1e-6).nonzero().flatten()]


def _predicted_slots() -> tuple[int, int]:
    """The course's measurement: (the fewest slots with which the query at ``last`` reads every position of
    last - W .. last, the position whose key the token at ``last`` then writes over)."""
    window, last = ROLLING["window"], ROLLING["last"]
    wanted = set(range(last - window, last + 1))
    slots = next(n for n in range(1, last + 2) if wanted <= set(_rolling_probe(n, last)[2]))
    before, _, _ = _rolling_probe(slots, last)
    return slots, before[last % slots]


def _rolling_details(measured: tuple) -> str:
    window, last = ROLLING["window"], ROLLING["last"]
    slots, _ = measured
    _, _, read_w = _rolling_probe(window, last)
    before, after, read = _rolling_probe(slots, last)
    return (
        f"Measured with the course's rolling_cache_step, token p's value the unit vector e_p: with {window} slots the "
        f"query at {last} reads positions {', '.join(map(str, read_w))}; with {slots}, positions "
        f"{', '.join(map(str, read))} (i - {window} .. i), and the token at {last} goes to slot {last} mod {slots} = "
        f"{last % slots}, over position {before[last % slots]}; after it the slots hold "
        + ", ".join(f"slot {s}: {p}" for s, p in enumerate(after))
        + "."
    )


def _rolling_diagnosis(index: int, guess, measured: tuple) -> str:
    window, last = ROLLING["window"], ROLLING["last"]
    slots, _ = measured
    if index == 0:
        if guess == window:
            return (
                f"{window} slots hold {window} keys, the token's own among them: the query at {last} would read "
                f"positions {last - window + 1}..{last}, one fewer than i - {window} .. i"
            )
        if guess < window:
            return f"i - {window} .. i is {window + 1} positions, and a buffer holds one key per slot"
        return (
            f"with {guess} slots the query would read {guess} keys, positions {last - guess + 1}..{last}: more than "
            f"i - {window} .. i. One slot per key read is the fewest"
        )
    if guess == last - window:
        return (
            f"that is what a buffer of {window} slots writes over ({last} - {window}). With S slots, the token at p "
            f"goes to slot p mod S, over position p - S"
        )
    if guess == last:
        return f"{last} is the token itself: it writes over the position its slot held before it"
    if guess > last:
        return f"position {guess} is not written yet: the last position written is {last}"
    if last - slots < guess < last:
        return (
            f"position {guess} is in the window the query at {last} reads, so its key must still be there; the one "
            f"written over has just left the window"
        )
    return "with S slots, the token at p goes to slot p mod S, over the position p - S that held it"


PREDICTED_SLOTS = prediction_exercise(
    name="predicted_slots",
    lesson=LESSON,
    question=(
        f"a rolling buffer for Mistral's window, positions i - {ROLLING['window']} .. i: the fewest slots with which "
        f"the query at {ROLLING['last']} reads all of them, and the position whose key the token at "
        f"{ROLLING['last']} then writes over"
    ),
    parts=(
        Part("the slots the buffer needs", int),
        Part(f"the position the token at {ROLLING['last']} writes over", int),
    ),
    measure=_predicted_slots,
    details=_rolling_details,
    diagnose=_rolling_diagnosis,
    forbidden=OWN_CODE,  # a prediction, not a measurement made with the course's rolling cache
    hint=(
        "How many positions is i - 4 .. i, and how many keys can a buffer of S slots hold at once, the new token's "
        "own included? Then: which slot does position 9 go to in a buffer of that many slots, and which earlier "
        "position went there before it?",
        "A buffer of S slots holds the last S positions written, so it needs one slot per key the query reads: "
        "i - 4 .. i is 5 keys. With S slots, position p goes to slot p mod S, and the last position before p in that "
        "slot is p - S.",
        "`return 4 + 1, 9 - (4 + 1)`, or the same worked out by hand.",
    ),
)

EXERCISES = (
    CHUNK_PREDICTION, KV_CACHE_CHUNK, PAGED_DECODE, SERVER_CACHE_GIB, CACHE_BYTES, PREDICTED_SLOTS, ROLLING_STEP,
)  # fmt: skip
