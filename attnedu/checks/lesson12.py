"""Checks for the exercises of lesson 12 (attention across devices).

One ring step (``ring_step``: the running softmax state of one query chunk, (out, lse), and the K/V chunk just
received -> the state after it; the step ``attnedu.context_parallel.ring_attention_forward(step=...)`` takes) is
checked in float64 on states a ring really holds: the empty state (out = 0, lse = -inf) and states over earlier keys,
the diagonal pair (causal mask inside the chunk) and full pairs, a batch of one and scores in the thousands, where an
exp without its maximum overflows. Its values only are compared: ring attention's backward is the package's, rebuilt
from the forward's out and lse, so the step's autograd graph plays no part in training. The variants: the outputs
averaged (from the empty state too, or with the first step's block output kept as it is) or added without the
log-sum-exp, the log-sum-exp of two taken as their maximum, the two weights swapped, the block's output or the
running output added without its weight, the diagonal without its mask, with it shifted one key either way (the
strict mask leaves the chunk's first query no key: its NaN is matched whichever way the log-sum-exps were written),
transposed or applied to every pair, lse not updated or replaced by the block's, the scores not scaled.

The striped layout (a transfer: the lesson shows contiguous and zigzag chunks; ``striped_mask``) puts token t on rank
t mod P (Brandon et al. 2023), so rank r's local index i is position i P + r; the mask between rank r's queries and rank
s's keys is j <= i for s <= r and j < i for s > r. The variants: the local indices compared as positions, the diagonal
excluded everywhere, the mask transposed, the contiguous layout's rule, the ranks' order reversed, the positions one
off either way.

The all-to-all of Ulysses (``ulysses_all_to_all``) is graded in one process: the P ranks' shards stacked, (P, batch,
H, n, d), -> what each rank holds after the all-to-all, (P, batch, H/P, N, d), all N tokens of its head group (heads
r H/P .. (r + 1) H/P - 1), in sequence order (contiguous shards). The variants: head groups interleaved, a transpose
missing before the exchange or after it, the tokens in striped order, no exchange, the head group one rank off either
way.

The prediction (``predicted_imbalance``, a transfer of the lesson's count of score blocks): the busiest rank's causal
work over the idlest rank's, P = 8 and 64 tokens, contiguous, zigzag and striped, in scores (query, key <= query), so
that a diagonal block of 8 tokens is 36 of 64 scores, not half; counted from the causal mask and the positions each
rank holds. The learner's functions may not run the course's
``attnedu.context_parallel`` or ``attnedu.flash`` (``OWN_CODE``).
"""

from __future__ import annotations

import math

import torch

from .exercise import LARGE, ONE, Case, Exercise, Part, Variant, generator, kinds
from .prediction import prediction_exercise

LESSON = "12_attention_across_devices"
OWN_CODE = ("attnedu.context_parallel", "attnedu.flash", "attnedu.checks.lesson12")
SEQUENCES = ("sequence", "sequences", "batch index")
NEG_INF = float("-inf")

# --------------------------------------------------------------------------------------------
# ring_step: one (query chunk, key chunk) pair of a ring, merged into the running state
# --------------------------------------------------------------------------------------------


def _randn(g, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def _attend(query, key, value, mask=None):
    """(out, lse) of the queries over these keys, float64; ``mask`` (n, n) True where allowed."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    return torch.softmax(scores, dim=-1) @ value, torch.logsumexp(scores, dim=-1)


def _ring_cases() -> list[Case]:
    g = generator(1200)

    def case(batch, heads, n, head_dim, value_dim, earlier, diagonal, tags, scale=1.0, note=""):
        query = _randn(g, batch, heads, n, head_dim, scale=scale)
        key, value = _randn(g, batch, heads, n, head_dim, scale=scale), _randn(g, batch, heads, n, value_dim)
        if earlier:  # the state over `earlier` keys seen before: what a ring holds after its first pairs
            out, lse = _attend(query, _randn(g, batch, heads, earlier, head_dim, scale=scale),
                               _randn(g, batch, heads, earlier, value_dim))  # fmt: skip
            state = f"a state over {earlier} earlier keys"
        else:
            out = torch.zeros(batch, heads, n, value_dim, dtype=torch.float64)
            lse = torch.full((batch, heads, n), NEG_INF, dtype=torch.float64)
            state = "the empty state (out = 0, lse = -inf)"
        pair = "the diagonal pair (causal mask inside the chunk)" if diagonal else "a full pair"
        description = f"batch {batch}, heads {heads}, chunks of {n}, head_dim {head_dim}, {state}, {pair}"
        return Case(description + (f"; {note}" if note else ""), (out, lse, query, key, value, diagonal), tags)

    return [
        case(2, 3, 4, 5, 6, 0, False, kinds(), note="the first step of a ring without a mask"),
        case(2, 3, 5, 4, 3, 0, True, kinds(), note="the first step of a causal ring: its own chunk"),
        case(3, 2, 4, 6, 5, 7, False, kinds()),
        case(2, 2, 6, 4, 4, 6, True, kinds(), note="zigzag: a full pair came before the diagonal one"),
        case(1, 2, 3, 4, 5, 4, False, kinds(ONE)),
        case(1, 3, 4, 5, 2, 0, True, kinds(ONE)),
        case(
            2,
            2,
            4,
            8,
            3,
            5,
            True,
            kinds(LARGE),
            scale=20.0,
            note="queries and keys around ±20: scores near a "
            "thousand and the log-sum-exps too, beyond exp's range in float64 (about 709)",
        ),  # fmt: skip
        case(2, 3, 3, 8, 4, 6, False, kinds(LARGE), scale=20.0, note="scores near a thousand"),
    ]


def _ring_step_with(out, lse, query, key, value, diagonal, *, merge="lse", weights="right", mask="causal",
                    new_lse="merged", scale=True, stable="torch"):  # fmt: skip
    """A ring step with switches, each a known mistake: ``merge`` the two outputs with their log-sum-exp ("lse"),
    their mean ("average"; "average_first": the block's output alone from the empty state, the mean after it), their
    sum ("sum"), or with the maximum of the two lse as the new lse ("max"); ``weights`` "right", "swapped" (each
    output scaled by the other's weight), "block_unscaled" (the block's output added as it is), "old_unscaled" (the
    running output added as it is); ``mask`` on the diagonal "causal" (j <= i), "none", "next" (j <= i + 1),
    "strict" (j < i), "transposed" (j >= i), or "every" (the causal mask on every pair); ``new_lse`` "merged", "old"
    (not updated), "block" (the block's own); ``scale`` the scores by 1/sqrt(head_dim). ``stable``: how the two
    log-sum-exps are written, which matters only for a query with no key (all its scores -inf): "torch"
    (torch.logsumexp and torch.logaddexp: -inf stays -inf), "max" (both as a maximum plus the log of a sum of exps
    of the differences: -inf - (-inf) gives NaN), or "block_max" (the block's that way, the merge by logaddexp)."""
    n = query.shape[-2]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    rule = {"causal": j <= i, "none": None, "next": j <= i + 1, "strict": j < i, "transposed": j >= i,
            "every": j <= i}[mask]  # fmt: skip
    allowed = rule if (diagonal or mask == "every") else None
    scores = query @ key.transpose(-2, -1) / (math.sqrt(query.shape[-1]) if scale else 1.0)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, NEG_INF)
    if stable == "torch":
        block_lse = torch.logsumexp(scores, dim=-1)
    else:
        top = scores.amax(dim=-1)
        block_lse = top + torch.log(torch.exp(scores - top[..., None]).sum(-1))
    block_out = torch.softmax(scores, dim=-1) @ value
    if merge == "max":
        merged = torch.maximum(lse, block_lse)
    elif stable == "max":
        top = torch.maximum(lse, block_lse)
        merged = top + torch.log(torch.exp(lse - top) + torch.exp(block_lse - top))
    else:
        merged = torch.logaddexp(lse, block_lse)
    w_old, w_block = torch.exp(lse - merged)[..., None], torch.exp(block_lse - merged)[..., None]
    if weights == "swapped":
        w_old, w_block = w_block, w_old
    elif weights == "block_unscaled":
        w_block = torch.ones_like(w_block)
    elif weights == "old_unscaled":
        w_old = torch.ones_like(w_old)
    first = torch.isneginf(lse)[..., None]  # the empty state: no key seen yet
    combined = {"lse": w_old * out + w_block * block_out, "max": w_old * out + w_block * block_out,
                "average": (out + block_out) / 2, "sum": out + block_out,
                "average_first": torch.where(first, block_out, (out + block_out) / 2)}[merge]  # fmt: skip
    returned = {"merged": merged, "old": lse, "block": block_lse}[new_lse]
    return combined, returned.clone()


def _ring_reference(out, lse, query, key, value, diagonal):
    return _ring_step_with(out, lse, query, key, value, diagonal)


def _ring_variant(diagnosis: str, *changes: dict, **change) -> Variant:
    return Variant.with_changes(_ring_step_with, diagnosis, *changes, **change)


RING_STEP = Exercise(
    name="ring_step",
    lesson=LESSON,
    params=("out", "lse", "query", "key", "value", "diagonal"),
    returns=(("batch", "heads", "n", "value_dim"), ("batch", "heads", "n")),
    output_names=("out", "lse"),
    units=(SEQUENCES, SEQUENCES),
    reference=_ring_reference,
    make_cases=_ring_cases,
    variants=(
        _ring_variant(
            "the two outputs were averaged with equal weights: each is an average over its own keys, and the merged "
            "output weighs them by the share of the softmax mass each set of keys holds, exp(lse_a - lse) and "
            "exp(lse_b - lse), which the log-sum-exps give. Equal shares happen only when the two sets of keys "
            "hold the same mass, which a state over several blocks and one new block rarely do.",
            dict(merge="average"),
            dict(merge="average_first"),
        ),
        _ring_variant(
            "the two outputs were added: each is already normalised over its own keys, so their sum is not an "
            "average of the values; the merged output weighs each by the share of the softmax mass its keys hold.",
            merge="sum",
        ),
        _ring_variant(
            "the new lse is the larger of the two log-sum-exps: the log of a sum of exponentials is more than its "
            "largest term (log(exp(a) + exp(b)) > max(a, b)), so the weights of the two outputs no longer add up to "
            "1.",
            merge="max",
        ),
        _ring_variant(
            "the two weights were swapped: the running output was scaled by the block's share of the softmax mass, "
            "and the block's output by the running state's share. Each output is weighted by the exponential of its "
            "own log-sum-exp minus the merged one.",
            weights="swapped",
        ),
        _ring_variant(
            "the running output was rescaled but the block's output was added as it is: both are normalised over "
            "their own keys, and each needs its own weight, exp(its lse - the merged lse), for the two to add up to "
            "one softmax.",
            weights="block_unscaled",
        ),
        _ring_variant(
            "the block's output was weighted but the running output was added as it is: the running output is "
            "normalised over the keys seen before, and after this block those keys hold only part of the softmax "
            "mass, exp(lse - the merged lse), so it needs that weight too for the two to add up to one softmax.",
            weights="old_unscaled",
        ),
        _ring_variant(
            "the diagonal pair was computed without its causal mask: the query chunk and the key chunk are the same "
            "positions there, and query i may not read keys after it (j > i).",
            mask="none",
        ),
        _ring_variant(
            "off by one: on the diagonal pair each query also read the key just after it (the mask lets one later "
            "key through). Query i reads keys j <= i of its own chunk.",
            mask="next",
        ),
        _ring_variant(
            "off by one: on the diagonal pair each query was kept from its own key (the mask is strict), so the "
            "chunk's first query read no key at all, and a softmax over no key is 0/0: that is where the NaN comes "
            "from, not from the empty state. Query i must read key i: keys j <= i, itself included.",
            *(dict(mask="strict", stable=form) for form in ("torch", "max", "block_max")),
        ),
        _ring_variant(
            "the diagonal pair's mask is transposed: query i read the keys after it (j >= i) instead of those up to "
            "it.",
            mask="transposed",
        ),
        _ring_variant(
            "the causal mask was applied to a full pair too: when diagonal is False the key chunk lies wholly before "
            "the query chunk (pairs wholly in the future are never computed), so every query reads every key of it.",
            mask="every",
        ),
        _ring_variant(
            "lse was returned unchanged: the new state is over the keys seen before and these, and its log-sum-exp "
            "must grow with them (from the empty state, it stays -inf, and the next merge gives the new block all "
            "the weight).",
            new_lse="old",
        ),
        _ring_variant(
            "the lse returned is the block's own, not the merged one: the state is over every key seen so far, so "
            "the next merge would weigh all earlier keys as if they were only this block's.",
            new_lse="block",
        ),
        _ring_variant(
            "the scores are not scaled: each is a dot product of head_dim numbers, which attention divides by "
            "sqrt(head_dim).",
            scale=False,
        ),
    ),
    hint=(
        "Two steps: attention of the query chunk over this one key chunk (with the causal mask when diagonal), as an "
        "output and a log-sum-exp; then the merge of lesson 08a, in the (out, lse) form. What weight does each of the "
        "two outputs get?",
        "Block: s = q k^T / sqrt(head_dim), masked where j > i when diagonal; lse_b = logsumexp(s) over the keys, "
        "out_b = softmax(s) v. Merge: lse_new = log(exp(lse) + exp(lse_b)), computed stably (logaddexp); out_new = "
        "exp(lse - lse_new) out + exp(lse_b - lse_new) out_b. From the empty state exp(-inf) is 0: out_new = out_b.",
        "`s = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5`; if diagonal: `n = s.shape[-1]; s = "
        "s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float('-inf'))`; `lse_b = torch.logsumexp(s, "
        "dim=-1)`; `out_b = torch.softmax(s, dim=-1) @ value`; `new = torch.logaddexp(lse, lse_b)`; `return "
        "torch.exp(lse - new)[..., None] * out + torch.exp(lse_b - new)[..., None] * out_b, new`.",
    ),
    large_note="This test case has large inputs: scores and log-sum-exps near a thousand. exp(s) on its own is inf "
    "in float64 above about 709, and inf / inf or inf - inf is NaN: subtract a maximum (or the log-sum-exp) before "
    "exponentiating.",
    nan_note="NaN comes from 0/0, inf - inf or 0 * inf. Two places give it here: a query whose scores are all "
    "masked reads no key, and its softmax (and its log-sum-exp written with a maximum) is 0/0, though every pair "
    "gives each query at least one key; and the empty state, whose lse is -inf, where -inf - (-inf) is NaN (the "
    "merged lse is finite once a block has a key, so lse - merged is -inf, whose exp is 0). Look at which queries "
    "hold the NaN, and on which pairs.",
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# striped_mask: the causal mask between two ranks' shards in the striped layout (a transfer)
# --------------------------------------------------------------------------------------------


def _striped_cases() -> list[Case]:
    def case(pairs, world_size, shard_len, tags, note=""):
        q = torch.tensor([p[0] for p in pairs])
        k = torch.tensor([p[1] for p in pairs])
        shown = ", ".join(f"({a}, {b})" for a, b in pairs)
        description = f"P = {world_size}, shards of {shard_len}, (query rank, key rank) pairs {shown}"
        return Case(description + (f"; {note}" if note else ""), (q, k, world_size, shard_len), tags)

    return [
        case([(0, 0), (1, 0), (0, 1), (1, 1)], 2, 4, kinds(), note="every pair of two ranks"),
        case([(2, 1), (1, 2), (3, 3), (0, 3), (3, 0)], 4, 3, kinds()),
        case([(1, 2)], 3, 5, kinds(ONE), note="one pair: keys on a later rank"),
        case([(4, 1), (1, 4), (2, 2), (0, 4), (4, 0), (3, 2)], 5, 6, kinds(), note="shards longer than P"),
        case([(r, s) for r in range(8) for s in range(8)][::5], 8, 64, kinds(LARGE), note="P = 8, shards of 64"),
    ]


def _striped_with(query_ranks, key_ranks, world_size, shard_len, *, rule="striped", shift=0, transpose=False):
    """A striped mask with switches: ``rule`` "striped" (positions i P + r), "local" (j <= i whatever the ranks),
    "strict" (j < i whatever the ranks), "contiguous" (rank r holds positions r n .. (r + 1) n - 1), "reversed"
    (the ranks' order reversed: j <= i for s >= r, j < i for s < r); ``shift`` moves the query's position;
    ``transpose`` the mask."""
    i = torch.arange(shard_len)[:, None]
    j = torch.arange(shard_len)[None, :]
    r, s = query_ranks[:, None, None], key_ranks[:, None, None]
    if rule == "striped":
        mask = j * world_size + s <= i * world_size + r + shift
    elif rule == "local":
        mask = (j <= i).expand(len(query_ranks), -1, -1)
    elif rule == "strict":
        mask = (j < i).expand(len(query_ranks), -1, -1)
    elif rule == "contiguous":
        mask = s * shard_len + j <= r * shard_len + i
    else:
        mask = torch.where(s >= r, j <= i, j < i)
    return mask.transpose(-2, -1).contiguous() if transpose else mask.contiguous()


def _striped_reference(query_ranks, key_ranks, world_size, shard_len):
    return _striped_with(query_ranks, key_ranks, world_size, shard_len)


def _striped_variant(diagnosis: str, **change) -> Variant:
    return Variant.with_changes(_striped_with, diagnosis, **change)


STRIPED_MASK = Exercise(
    name="striped_mask",
    lesson=LESSON,
    params=("query_ranks", "key_ranks", "world_size", "shard_len"),
    returns=(("pairs", "shard_len", "shard_len"),),
    units=(("pair of ranks", "pairs of ranks", "index"),),
    reference=_striped_reference,
    make_cases=_striped_cases,
    variants=(
        _striped_variant(
            "the local indices were compared as if they were positions (j <= i on every pair of ranks): local index "
            "i of rank r is position i P + r, so on a key rank after the query rank, key j = i is later than query "
            "i and is not for it to read.",
            rule="local",
        ),
        _striped_variant(
            "the mask is strict on every pair of ranks (j < i): on a key rank before the query rank, or the same "
            "rank, key j = i is at an earlier position (or is the query itself) and may be read.",
            rule="strict",
        ),
        _striped_variant(
            "the mask is transposed: entry (i, j) should say whether query i may read key j, and yours says whether "
            "key j's position may read query i's.",
            transpose=True,
        ),
        _striped_variant(
            "this is the contiguous layout's mask (rank r holding positions r n .. r n + n - 1): in the striped "
            "layout token t is on rank t mod P, so every rank holds positions from the whole sequence.",
            rule="contiguous",
        ),
        _striped_variant(
            "the ranks' order is reversed: key j = i is allowed when the key's rank is at or after the query's, "
            "where its position is later. Local index i of rank r is position i P + r.",
            rule="reversed",
        ),
        _striped_variant(
            "off by one: each query also read the key one position after it. Query at position p reads keys at "
            "positions up to p, itself included.",
            shift=1,
        ),
        _striped_variant(
            "off by one: each query was kept from the key at its own position (the query itself). A query reads "
            "keys at positions up to its own, itself included.",
            shift=-1,
        ),
    ),
    hint=(
        "Rank r holds tokens r, r + P, r + 2P, ...: what position is its local index i? Then query i of rank r may "
        "read key j of rank s when the key's position is not after the query's.",
        "Position of local index i on rank r: i P + r. Allowed: j P + s <= i P + r, which is j <= i when s <= r and "
        "j < i when s > r. One (shard_len, shard_len) mask per pair, stacked.",
        "`i = torch.arange(shard_len)[:, None]`; `j = torch.arange(shard_len)[None, :]`; `r = query_ranks[:, None, "
        "None]`; `s = key_ranks[:, None, None]`; `return j * world_size + s <= i * world_size + r`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# ulysses_all_to_all: "my tokens, all heads" -> "all tokens, my heads", simulated in one process
# --------------------------------------------------------------------------------------------


def _ulysses_cases() -> list[Case]:
    g = generator(1210)

    def case(world_size, batch, heads, shard_len, dim, tags, scale=1.0, note=""):
        shards = _randn(g, world_size, batch, heads, shard_len, dim, scale=scale).float()
        description = f"P = {world_size}, batch {batch}, {heads} heads, shards of {shard_len} tokens, dim {dim}"
        return Case(description + (f"; {note}" if note else ""), (shards,), tags)

    return [
        case(2, 2, 4, 3, 5, kinds()),
        case(3, 2, 6, 2, 4, kinds(), note="two heads per rank"),
        case(4, 3, 8, 2, 3, kinds()),
        case(2, 1, 6, 4, 2, kinds(ONE), note="three heads per rank"),
        case(3, 2, 9, 5, 4, kinds(LARGE), scale=1e6, note="values around ±1e6, and longer shards"),
    ]


def _ulysses_with(shards, *, groups="contiguous", pack="transposed", unpack="transposed", order="contiguous",
                  exchange=True, offset=0):  # fmt: skip
    """A Ulysses exchange with switches: rank r's head ``groups`` "contiguous" (heads g H/P .. (g + 1) H/P - 1) or
    "interleaved" (heads g, g + P, ...); the send buffer made with the rank axis moved to the front (``pack``
    "transposed") or by a reshape alone ("reshaped"); the received chunks joined along the sequence with the
    rank axis moved beside it (``unpack`` "transposed") or by a reshape alone; tokens in ``order`` "contiguous" (rank
    p's shard is positions p n .. p n + n - 1) or "striped"; ``exchange`` False keeps each rank's own buffer;
    ``offset`` gives rank r the head group of rank r + offset."""
    world_size, batch, heads, shard_len, dim = shards.shape
    group = heads // world_size
    buffers = []
    for x in shards:  # (batch, H, n, d) -> (P, batch, H/P, n, d), chunk p for rank p
        if groups == "contiguous":
            split = x.reshape(batch, world_size, group, shard_len, dim)
        else:
            split = x.reshape(batch, group, world_size, shard_len, dim).transpose(1, 2)
        if pack == "transposed":
            buffers.append(split.transpose(0, 1).contiguous())
        else:
            buffers.append(x.reshape(world_size, batch, group, shard_len, dim))
    buffers = torch.stack(buffers)  # (source rank, destination rank, batch, H/P, n, d)
    if offset:
        buffers = buffers.roll(-offset, dims=1)
    received = buffers.transpose(0, 1) if exchange else buffers  # received[r][p]: rank p's chunk for rank r
    out = []
    for chunks in received:  # (P, batch, H/P, n, d) -> (batch, H/P, N, d)
        if unpack == "transposed":
            joined = chunks.permute(1, 2, 0, 3, 4)  # (batch, H/P, P, n, d)
        else:
            joined = chunks.reshape(batch, group, world_size, shard_len, dim)
        if order == "striped":
            joined = joined.transpose(2, 3)
        out.append(joined.reshape(batch, group, world_size * shard_len, dim))
    return torch.stack(out)


def _ulysses_reference(shards):
    return _ulysses_with(shards)


def _ulysses_variant(diagnosis: str, **change) -> Variant:
    return Variant.with_changes(_ulysses_with, diagnosis, **change)


ULYSSES_ALL_TO_ALL = Exercise(
    name="ulysses_all_to_all",
    lesson=LESSON,
    params=("shards",),
    returns=(("world_size", "batch", "heads / world_size", "seq_len", "head_dim"),),
    units=(("rank", "ranks", "index"),),
    reference=_ulysses_reference,
    make_cases=_ulysses_cases,
    variants=(
        _ulysses_variant(
            "the head groups are interleaved: rank r received heads r, r + P, r + 2P, ... Each rank takes a "
            "contiguous group of H/P heads, heads r H/P up to (r + 1) H/P - 1.",
            groups="interleaved",
        ),
        _ulysses_variant(
            "the send buffer was made by a reshape alone: the head groups are along the heads axis, behind the "
            "batch, so the chunk for rank p is not a block of the tensor as it lies in memory; the axis of "
            "destination ranks must be moved to the front before the exchange.",
            pack="reshaped",
        ),
        _ulysses_variant(
            "the received chunks were joined by a reshape alone: they arrive with the source rank as the first "
            "axis, and the sequence of all N tokens is that axis moved beside the tokens of each chunk (behind the "
            "batch and the heads), then the two merged.",
            unpack="reshaped",
        ),
        _ulysses_variant(
            "the tokens are in striped order: source rank p's shard holds positions p n up to p n + n - 1 "
            "(contiguous shards), so the whole sequence is the chunks one after another, rank 0's first.",
            order="striped",
        ),
        _ulysses_variant(
            "nothing was exchanged: each rank kept the chunks of its own send buffer, so it holds only its own "
            "tokens (for every head group) instead of every rank's tokens of its head group. Chunk p goes to rank "
            "p.",
            exchange=False,
        ),
        _ulysses_variant(
            "off by one: rank r received the head group of rank r + 1 (the last rank the first group). Rank r "
            "holds heads r H/P up to (r + 1) H/P - 1.",
            offset=1,
        ),
        _ulysses_variant(
            "off by one: rank r received the head group of rank r - 1 (rank 0 the last group). Rank r holds heads "
            "r H/P up to (r + 1) H/P - 1.",
            offset=-1,
        ),
    ),
    hint=(
        "Follow one number: token t of rank p's shard, head h. Which rank must hold it after the exchange, and "
        "where in that rank's (batch, H/P, N, d)? Then do it in three moves: each rank cuts its heads into P "
        "groups (the send buffer, chunk q for rank q), the exchange, each rank joins what it received.",
        "Send buffer of rank p: (batch, H, n, d) -> (batch, P, H/P, n, d) -> destination axis first, (P, batch, "
        "H/P, n, d). The all-to-all: received[r][p] = buffer[p][r] (swap the first two axes of all ranks' buffers "
        "stacked). Rank r joins (P, batch, H/P, n, d) -> (batch, H/P, P, n, d) -> (batch, H/P, P n, d): token t "
        "of rank p lands at position p n + t.",
        "`P, B, H, n, d = shards.shape`; `buffers = shards.reshape(P, B, P, H // P, n, d).transpose(1, 2)`; "
        "`received = buffers.transpose(0, 1)`; `return received.permute(0, 2, 3, 1, 4, 5).reshape(P, B, H // P, "
        "P * n, d)`.",
    ),
    forbidden=OWN_CODE,
)

# --------------------------------------------------------------------------------------------
# predicted_imbalance (prediction): the busiest rank's causal work over the idlest's, P = 8, three layouts
# --------------------------------------------------------------------------------------------

IMBALANCE = dict(world_size=8, seq_len=64)  # shards of 8 tokens: the diagonal's n (n + 1) / 2 is not n^2 / 2
IMBALANCE_LAYOUTS = ("contiguous", "zigzag", "striped")
IMBALANCE_MARGINS = (0.05, 0.05, 0.05)  # contiguous: relative (about 13); zigzag, striped: absolute (near 1)


def _rank_positions(layout: str, rank: int, world_size: int, seq_len: int) -> torch.Tensor:
    if layout == "striped":  # token t on rank t mod P (Brandon et al. 2023)
        return torch.arange(rank, seq_len, world_size)
    from ..context_parallel import shard_positions

    return shard_positions(seq_len, rank, world_size, layout)


def _imbalance_work(layout: str) -> list[int]:
    """Scores each rank computes in causal attention (query i, key j <= i), counted from the whole sequence's causal
    mask and the positions each rank holds (the course's ``shard_positions``; striped: t mod P)."""
    p, n = IMBALANCE["world_size"], IMBALANCE["seq_len"]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return [int(causal[_rank_positions(layout, r, p, n)].sum()) for r in range(p)]


def _predicted_imbalance() -> tuple[float, float, float]:
    """The course's count: busiest over idlest rank's scores, contiguous, zigzag and striped."""
    return tuple(max(w) / min(w) for w in map(_imbalance_work, IMBALANCE_LAYOUTS))


def _imbalance_details(measured: tuple) -> str:
    p, n = IMBALANCE["world_size"], IMBALANCE["seq_len"]
    rows = [
        f"{layout}: {', '.join(map(str, _imbalance_work(layout)))} (busiest over idlest {ratio:.4g})"
        for layout, ratio in zip(IMBALANCE_LAYOUTS, measured, strict=True)
    ]
    return (
        f"Counted from the causal mask of the {n} positions and the positions each of the {p} ranks holds, the "
        f"scores (query, key <= query) per rank 0..{p - 1}: " + "; ".join(rows) + f". In all, {n * (n + 1) // 2} "
        "scores. The lesson times the ranks: their times follow these counts only roughly (fixed costs per block, "
        "and the waits of the ring)."
    )


def _near(guess: float, value: float, within: float = 0.02) -> bool:
    return abs(guess - value) <= within * max(1.0, abs(value))


def _imbalance_diagnosis(index: int, guess: float, measured: tuple) -> str:
    p, n = IMBALANCE["world_size"], IMBALANCE["seq_len"] // IMBALANCE["world_size"]
    if index == 0:
        if _near(guess, 2 * p - 1):
            return (
                f"{2 * p - 1} is ({p} - 1/2) / (1/2): each diagonal block counted as half a block, which it is for "
                f"long shards; with shards of {n} tokens, a diagonal block lets n (n + 1) / 2 = {n * (n + 1) // 2} of "
                f"its {n * n} scores through"
            )
        if _near(guess, p):
            return (
                f"{p} is ({p - 1} + 1) / (0 + 1): the diagonal block counted as a whole one. Its causal mask leaves "
                "about half of its scores"
            )
        if guess <= 1.5:
            return (
                "with contiguous chunks the ranks do not do equal work: rank 0's queries come first and see only "
                f"their own chunk, rank {p - 1}'s see the whole sequence"
            )
        return ""
    if index == 1:
        if guess > 1.1:
            return (
                f"zigzag gives rank r chunks r and {2 * p - 1} - r of {2 * p}: an early chunk, with little to read, "
                "and a late one, with much; their scores add up to the same on every rank"
            )
        return ""
    if guess < 1.1:
        return (
            "striped is balanced only as the shards grow: against its own shard and those of earlier ranks a rank's "
            f"queries read j <= i, n (n + 1) / 2 scores each, and against later ranks' only j < i, n (n - 1) / 2; the "
            f"last rank has {p} of the first kind, rank 0 one"
        )
    return ""


def _imbalance_credit(index: int, guess: float, measured: tuple) -> float:
    """Half credit for the contiguous ratio of long shards, 2P - 1 (its line says where that route runs out)."""
    return 0.5 if index == 0 and _near(guess, 2 * IMBALANCE["world_size"] - 1) else 0.0


PREDICTED_IMBALANCE = prediction_exercise(
    name="predicted_imbalance",
    lesson=LESSON,
    question=(
        f"causal attention over {IMBALANCE['seq_len']} tokens on P = {IMBALANCE['world_size']} ranks: the busiest "
        "rank's scores over the idlest rank's, with contiguous, zigzag and striped shards"
    ),
    parts=tuple(
        Part(f"busiest over idlest, {layout}", margin=margin, relative=layout == "contiguous")
        for layout, margin in zip(IMBALANCE_LAYOUTS, IMBALANCE_MARGINS, strict=True)
    ),
    measure=_predicted_imbalance,
    details=_imbalance_details,
    diagnose=_imbalance_diagnosis,
    credit=_imbalance_credit,
    forbidden=OWN_CODE,  # a prediction, not a count made with the course's code
    hint=(
        "Count scores, not blocks: a query reads the keys at or before its position. With shards of n = 8 tokens, "
        "how many scores does a full (query chunk, key chunk) pair give, and a diagonal one? Which pairs does the "
        "first rank have, and the last, in each layout?",
        "Full pair n^2 = 64, diagonal n (n + 1) / 2 = 36. Contiguous: rank r has r full pairs and one diagonal. "
        "Zigzag (chunks of 4, rank r holding chunks r and 15 - r): every rank 15 full pairs of 16 and 2 diagonals "
        "of 10. Striped: against ranks s <= r, j <= i (36 each); against s > r, j < i (28 each).",
        "`return (7 * 64 + 36) / 36, 1.0, (8 * 36) / (36 + 7 * 28)`, worked out by hand.",
    ),
)

EXERCISES = (RING_STEP, PREDICTED_IMBALANCE, STRIPED_MASK, ULYSSES_ALL_TO_ALL)
