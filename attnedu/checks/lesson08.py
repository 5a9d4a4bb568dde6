"""Checks for the exercises of lesson 08 (FlashAttention).

Part A, the algorithm in PyTorch: merging two partial softmax states (split-K, flash-decoding), which tiles a causal
pass computes, the causal mask inside one tile, the backward of one tile from the saved log-sum-exp, and what a
benchmark should report from a timing loop. Part B, Triton kernels, run on the CPU under Triton's interpreter by a
launcher of the course (``attnedu.triton_basics``): a row-wise softmax, the FlashAttention forward of one head, and
its causal version; and, for the lesson on the backward (``LESSON_BACKWARD``), the backward's dV in a kernel with
the keys outside, P rebuilt from the log-sum-exp the forward saved, causal or not.

Here "padding" means what it means inside a FlashAttention kernel: a length that is not a multiple of the block, so
that the last block is partial (a kernel pads it and masks the padding); for the merge, a query whose keys in one
split are all padding, so that its state there is empty; for the timing loop, shapes that got different numbers of
calls (a partial last round). Rows are built so that the running maximum grows from one block to the next, which is
when a missing or wrong rescale shows; "large inputs" are scores in the hundreds, where exp overflows (for the
timing loop: a slow function, whose compilation hides in the noise). The kernels' large inputs also hold the rows
where the running maximum does not grow, or must not be trusted: one number (or key) 100 above the rest in the first,
a middle or the last block (a maximum replaced by each block's own, or kept from the first block, overflows), and
queries whose scores are all about -400 (a maximum started at 0, or taken before the mask, underflows to 0 / 0). The
attention kernels' such scores are exact in float32 (entries on a grid of 1/8), and every case stays far from where
exp2 turns subnormal for the known mistakes (tests/test_checks.py checks it), so that what a wrong kernel gives there
does not depend on the machine's NumPy.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import torch

from ..bench import steady_medians
from ..flash import (
    causal_block_update,
    causal_tiles,
    merge_softmax_states,
    naive_attention,
    online_softmax,
    tile_backward,
)
from ..triton_basics import launch_attention, launch_dv, launch_softmax
from .exercise import EMPTY_ROW, LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Variant, generator, kinds, randn

# Lesson 08 is two lessons: the forward (08a) and the backward and the GPU (08b). Notebooks made before the split say
# FORMER_LESSON; the grader still grades them, on the exercises they were handed out with (FORMER_EXERCISES).
LESSON_FORWARD = "08a_flash_attention_forward"
LESSON_BACKWARD = "08b_flash_attention_backward"
FORMER_LESSON = "08_flash_attention"
QUERIES = ("query", "queries", "index")
KEYS = ("key", "keys", "index")
ROWS = ("row", "rows", "index")
NEG_INF = float("-inf")
LN2, LOG2_E = math.log(2.0), 1.4426950408889634
KERNEL_NAN_NOTE = (
    "NaN comes from 0/0, inf - inf or 0 * inf, inf from an overflow; and the entries of the output your kernel never "
    "stores stay NaN (the launcher fills the output with NaN first)."
)


def _safe(m: torch.Tensor) -> torch.Tensor:
    return torch.where(m == NEG_INF, torch.zeros_like(m), m)


# --------------------------------------------------------------------------------------------
# merge_softmax_states
# --------------------------------------------------------------------------------------------


def _state(scores: torch.Tensor, values: torch.Tensor, keys: torch.Tensor):
    """Each query's state (m, l, o) over the keys where ``keys`` (queries, n) is True: empty (-inf, 0, 0) if none."""
    s = scores.masked_fill(~keys, NEG_INF)
    m = s.amax(dim=1)
    p = torch.exp(s - _safe(m)[:, None])
    return m, p.sum(dim=1), p @ values


def _merge_cases() -> list[Case]:
    g = generator(28)

    def case(description, tags, queries, n1, n2, value_dim, allowed=None, offset=0.0, spread=2.0) -> Case:
        n = n1 + n2
        trend = torch.linspace(-3.0, 3.0, n) * torch.tensor([1.0 if r % 2 else -1.0 for r in range(queries)])[:, None]
        scores = offset * torch.ones(queries, 1) + spread * randn(g, queries, n) + trend  # maxima in either split
        values = randn(g, n, value_dim)
        keys = torch.ones(queries, n, dtype=torch.bool) if allowed is None else allowed(torch.arange(n))
        first = torch.arange(n) < n1
        return Case(description, (*_state(scores, values, keys & first), *_state(scores, values, keys & ~first)), tags)

    lengths = torch.tensor([10, 4, 7])[:, None]
    return [
        case("4 queries, two splits of 6 keys each, value_dim 3", kinds(UNPADDED), 4, 6, 6, 3),
        case("3 queries, splits of 5 and 3 keys, value_dim 2", kinds(UNPADDED), 3, 5, 3, 2),
        case("one query, two splits of 4 keys, value_dim 2", kinds(ONE, UNPADDED), 1, 4, 4, 2),
        case("3 queries of lengths 10, 4 and 7 (then padding), two splits of 6 keys: the second query's keys all fall "
             "in the first split, so its second state is empty (m2 = -inf, l2 = 0, o2 = 0)", kinds(PADDED), 3, 6, 6,
             3, allowed=lambda j: j[None, :] < lengths),
        case("one query that may attend only to keys 5 to 7 (a window), splits of 4 and 4: its first state is empty",
             kinds(ONE, PADDED), 1, 4, 4, 2, allowed=lambda j: (j >= 5)[None, :]),
        case("4 queries, splits of 5 and 5; the third has no key at all (both of its states are empty), so its merged "
             "state must be empty too: m = -inf, l = 0, o = 0", kinds(PADDED, EMPTY_ROW), 4, 5, 5, 2,
             allowed=lambda j: torch.tensor([True, True, False, True])[:, None] & (j >= 0)[None, :]),
        case("3 queries with scores in the hundreds (maxima from about -600 to +300), two splits of 6 keys",
             kinds(LARGE, UNPADDED), 3, 6, 6, 2, offset=-150.0, spread=200.0),
    ]  # fmt: skip


def _merge_with(factor="right", l_rule="sum", o_rule="sum", safe=True):
    """merge_softmax_states with one known mistake: ``factor`` "right", "none" or "inverted" (raw, or guarded when
    ``safe``); the sums combined by ``l_rule`` ("sum", "sum_unscaled", "max", "max_scaled"); the outputs by
    ``o_rule`` ("sum", "sum_unscaled", "averaged", "averaged_normalised")."""

    def merge(m1, l1, o1, m2, l2, o2):
        m = torch.maximum(m1, m2)
        ref = _safe(m) if safe else m
        if factor == "right":
            a1, a2 = torch.exp(m1 - ref), torch.exp(m2 - ref)
        elif factor == "none":
            a1, a2 = torch.ones_like(m1), torch.ones_like(m2)
        else:  # inverted: exp(m - m_i) >= 1
            a1, a2 = torch.exp(ref - m1), torch.exp(ref - m2)
            if safe:
                a1, a2 = torch.where(m1 == NEG_INF, 0.0, a1), torch.where(m2 == NEG_INF, 0.0, a2)
        l = {"sum": a1 * l1 + a2 * l2, "sum_unscaled": l1 + l2, "max": torch.maximum(l1, l2),
             "max_scaled": torch.maximum(a1 * l1, a2 * l2)}[l_rule]  # fmt: skip
        if o_rule == "sum":
            o = a1[:, None] * o1 + a2[:, None] * o2
        elif o_rule == "sum_unscaled":
            o = o1 + o2
        else:
            mean = (o1 / l1[:, None] + o2 / l2[:, None]) / 2
            o = mean * l[:, None] if o_rule == "averaged" else mean
        return m, l, o

    return merge


MERGE_SOFTMAX_STATES = Exercise(
    name="merge_softmax_states",
    lesson=LESSON_FORWARD,
    params=("m1", "l1", "o1", "m2", "l2", "o2"),
    returns=(("queries",), ("queries",), ("queries", "value_dim")),
    output_names=("m", "l", "o"),
    reference=merge_softmax_states,
    make_cases=_merge_cases,
    units=(QUERIES,) * 3,
    variants=(
        Variant(
            "neither state was rescaled to the merged maximum: l1 + l2 and o1 + o2 add numbers measured against two "
            "different maxima, m1 and m2. Each state's l and o must first be multiplied by its factor "
            "exp(m_i - m), which is 1 for the state whose maximum is the larger and less than 1 for the other.",
            _merge_with(factor="none"),
            _merge_with(factor="none", safe=False),
        ),
        Variant(
            "the sums l were rescaled but the outputs o were not: o1 + o2 adds outputs measured against two "
            "different maxima. Multiply each o_i by the same factor exp(m_i - m) as its l_i.",
            _merge_with(o_rule="sum_unscaled"),
            _merge_with(o_rule="sum_unscaled", safe=False),
        ),
        Variant(
            "the outputs o were rescaled but the sums l were not: l1 + l2 adds sums measured against two different "
            "maxima. Multiply each l_i by the same factor exp(m_i - m) as its o_i.",
            _merge_with(l_rule="sum_unscaled"),
            _merge_with(l_rule="sum_unscaled", safe=False),
        ),
        Variant(
            "the rescale is the wrong way round, exp(m - m_i), which is at least 1: the state whose maximum is the "
            "smaller must shrink, by exp(m_i - m) (its maximum minus the merged one).",
            _merge_with(factor="inverted"),
            _merge_with(factor="inverted", safe=False),
        ),
        Variant(
            "the sums were merged with a maximum, as the maxima are: l is a sum over all the keys of both states, so "
            "the two (rescaled) sums add up, they do not compete.",
            _merge_with(l_rule="max"),
            _merge_with(l_rule="max_scaled"),
            _merge_with(l_rule="max", safe=False),
            _merge_with(l_rule="max_scaled", safe=False),
        ),
        Variant(
            "the normalised outputs o_i / l_i were averaged: each state's output weighs as much as the other's, "
            "whatever its share of the weight. A state over keys with higher scores must count for more, in "
            "proportion to its share of the total weight: its unnormalised output, rescaled to the merged maximum, "
            "carries that share, and the division by l comes only at the very end.",
            _merge_with(o_rule="averaged"),
            _merge_with(o_rule="averaged_normalised"),
        ),
        Variant(
            "a query with no key in either state (m1 = m2 = -inf) came out NaN: its factor exp(m1 - m) is exp(-inf - "
            "(-inf)) = exp(NaN). A merge of two empty states must stay empty (m = -inf, l = 0, o = 0): an empty "
            "state's factor must come out exp(-inf) = 0, so -inf - (-inf) must never be computed.",
            _merge_with(safe=False),
        ),
    ),
    large_note="This test case has large inputs: maxima in the hundreds (from about -600 to +300). exp(m1) on its own "
    "is inf in float32 above about 88 and 0 below about -104, so inf / inf or 0 / 0 gives NaN: only differences such "
    "as m1 - m, which are never above 0, may go into an exp.",
    nan_note="NaN comes from 0/0, inf - inf or 0 * inf. A state over no keys has m = -inf, l = 0 and o = 0: -inf - "
    "(-inf) is NaN, and so is o / l there.",
    hint=(
        "Each state's l and o are sums measured against its own maximum. Against which maximum must the merged "
        "sums be measured, and by what factor does a term e^(s - m1) become e^(s - m)?",
        "m = max(m1, m2); each state's factor is a_i = exp(m_i - m), 1 for the state with the larger maximum and "
        "less for the other: l = a1 l1 + a2 l2 and o = a1 o1 + a2 o2 (each row of o by its query's factor). Where "
        "m is -inf (no key in either state), exp(-inf - (-inf)) is NaN: measure against 0 there instead.",
        "`m = torch.maximum(m1, m2)`; `ref = torch.where(m == float('-inf'), 0.0, m)`; `a1, a2 = torch.exp(m1 - ref), "
        "torch.exp(m2 - ref)`; return `m, a1 * l1 + a2 * l2, a1[:, None] * o1 + a2[:, None] * o2`.",
    ),
)


# --------------------------------------------------------------------------------------------
# causal_tiles
# --------------------------------------------------------------------------------------------


def _causal_tiles_cases() -> list[Case]:
    def case(n: int, block_q: int, block_k: int, tags, note: str = "") -> Case:
        rows, columns = -(-n // block_q), -(-n // block_k)
        text = f"n {n}, block_q {block_q}, block_k {block_k}: {rows} x {columns} tiles"
        return Case(text + (f"; {note}" if note else ""), (n, block_q, block_k), tags)

    return [
        case(8, 2, 2, kinds(UNPADDED)),
        case(12, 4, 3, kinds(UNPADDED), "blocks of different sizes"),
        case(10, 3, 4, kinds(PADDED), "the last query block and the last key block are partial"),
        case(4, 4, 2, kinds(ONE, UNPADDED), "a single block of queries"),
        case(5, 8, 2, kinds(ONE, PADDED), "a single, partial block of queries"),
        case(13, 2, 5, kinds(PADDED), "partial last blocks"),
        case(70000, 16384, 8192, kinds(LARGE, PADDED), "positions beyond 32767"),
    ]


def _tiles_by_index(n, block_q, block_k):
    rows, columns = torch.arange(-(-n // block_q)), torch.arange(-(-n // block_k))
    return columns[None, :] <= rows[:, None], columns[None, :] == rows[:, None]


def _tiles_with(compute_rule=None, mask_rule=None, clamp: bool = True):
    """causal_tiles with one rule replaced: compute_rule(k_first, q_last), mask_rule(k_last, q_first)."""

    def tiles(n, block_q, block_k):
        q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)
        q_last = (q_first + block_q).clamp(max=n) - 1 if clamp else q_first + block_q - 1
        k_last = (k_first + block_k).clamp(max=n) - 1 if clamp else k_first + block_k - 1
        compute = (compute_rule or (lambda kf, ql: kf <= ql))(k_first[None, :], q_last[:, None])
        return compute, compute & (mask_rule or (lambda kl, qf: kl > qf))(k_last[None, :], q_first[:, None])

    return tiles


CAUSAL_TILES = Exercise(
    name="causal_tiles",
    lesson=LESSON_FORWARD,
    params=("n", "block_q", "block_k"),
    returns=(("query_blocks", "key_blocks"), ("query_blocks", "key_blocks")),
    output_names=("compute", "masked"),
    reference=causal_tiles,
    make_cases=_causal_tiles_cases,
    units=(("query block", "query blocks", "index"),) * 2,
    variants=(
        Variant(
            "the tiles were chosen by comparing block numbers (key block j <= query block i, and j == i for the "
            "mask), which is right only when block_q equals block_k. A tile is chosen by the positions it covers: "
            "its first and last key against its first and last query.",
            _tiles_by_index,
        ),
        Variant(
            "one tile too many: a tile whose first key comes right after the block's last query is computed, though "
            "every key in it is in the future of every query. A tile is needed only when its first key is at or "
            "before the block's last query.",
            _tiles_with(compute_rule=lambda kf, ql: kf <= ql + 1),
        ),
        Variant(
            "one tile too few: a tile whose first key is exactly the block's last query is skipped, but that query "
            "may attend to that key (j <= i includes j == i). A tile is needed whenever its first key is at or before "
            "the block's last query.",
            _tiles_with(compute_rule=lambda kf, ql: kf < ql),
        ),
        Variant(
            "every computed tile is marked for the mask. Only a tile the diagonal crosses (its last key after its "
            "first query) holds pairs to mask; the tiles below the diagonal need no mask at all.",
            _tiles_with(mask_rule=lambda kl, qf: torch.ones_like(kl > qf)),
        ),
        Variant(
            "a tile whose last key is exactly its first query is marked for the mask, but key i and query i may "
            "attend to each other: nothing in it needs masking. A tile needs the mask only when its last key comes "
            "after its first query.",
            _tiles_with(mask_rule=lambda kl, qf: kl >= qf),
        ),
        Variant(
            "the ends of the last, partial blocks were not clamped to n: the last block's last position was taken "
            "as a full block's, past the end of the sequence, so a partial key block was marked for the mask because "
            "of keys that do not exist. No block ends after position n - 1.",
            _tiles_with(clamp=False),
        ),
    ),
    hint=(
        "Draw n = 10 with block_q 3 and block_k 4 on paper: which positions does each block hold, and for each tile, "
        "which is its first key, its last key, its first query and its last query?",
        "A tile is computed when its first key is not after its last query, and masked when, in addition, its last "
        "key is after its first query. The last block may be partial: its last position is n - 1, not the block's "
        "end.",
        "`q_first, k_first = torch.arange(0, n, block_q), torch.arange(0, n, block_k)`; `q_last = (q_first + "
        "block_q).clamp(max=n) - 1`, the same for keys; `compute = k_first[None, :] <= q_last[:, None]`; "
        "`masked = compute & (k_last[None, :] > q_first[:, None])`.",
    ),
)


# --------------------------------------------------------------------------------------------
# causal_block_update
# --------------------------------------------------------------------------------------------


def _causal_update_cases() -> list[Case]:
    g = generator(38)
    n, head_dim, value_dim = 12, 5, 3
    q, k, v = randn(g, n, head_dim), randn(g, n, head_dim), randn(g, n, value_dim)
    k[:, 0] += torch.linspace(-2.0, 3.0, n)  # later keys score higher: the running maximum grows
    q[:, 0] = q[:, 0].abs() + 1.0

    def case(description, tags, q_start, q_end, k_start, k_end, earlier=(), scale=1.0) -> Case:
        qs, ks, vs = scale * q[q_start:q_end], scale * k, v
        m, l, acc = torch.full((q_end - q_start,), NEG_INF), torch.zeros(q_end - q_start), torch.zeros(
            q_end - q_start, value_dim)  # fmt: skip
        for e_start, e_end in earlier:  # the state after the earlier tiles of this block of queries
            m, l, acc = causal_block_update(m, l, acc, qs, ks[e_start:e_end], vs[e_start:e_end], q_start, e_start)
        return Case(description, (m, l, acc, qs, ks[k_start:k_end], vs[k_start:k_end], q_start, k_start), tags)

    return [
        case("the diagonal tile: queries 4 to 7 against keys 4 to 7, after the tile of keys 0 to 3 (blocks of 4)",
             kinds(UNPADDED), 4, 8, 4, 8, earlier=[(0, 4)]),
        case("a tile below the diagonal: queries 8 to 11 against keys 4 to 7 (no pair to mask), after keys 0 to 3",
             kinds(UNPADDED), 8, 12, 4, 8, earlier=[(0, 4)]),
        case("the first tile: queries 0 to 3 against keys 0 to 3 (m = -inf, l = 0, acc = 0)", kinds(UNPADDED),
             0, 4, 0, 4),
        case("the first tile of a split that starts at key 6: queries 4 to 7 against keys 6 to 9 (m = -inf, l = 0, "
             "acc = 0); queries 4 and 5 see no key yet", kinds(UNPADDED, EMPTY_ROW), 4, 8, 6, 10),
        case("a sequence of 10 in blocks of 4: the last, partial block of queries (8, 9) against the last, partial "
             "block of keys (8, 9), after keys 0 to 7", kinds(PADDED), 8, 10, 8, 10, earlier=[(0, 4), (4, 8)]),
        case("a sequence of 10 in blocks of 4: the last, partial block of queries (8, 9) against keys 4 to 7, after "
             "keys 0 to 3", kinds(PADDED), 8, 10, 4, 8, earlier=[(0, 4)]),
        case("a sequence of 9 in blocks of 4: the last block holds one query, 8, against keys 4 to 7, after keys 0 "
             "to 3", kinds(ONE, PADDED), 8, 9, 4, 8, earlier=[(0, 4)]),
        case("the diagonal tile (queries and keys 4 to 7) with scores in the hundreds, where exp overflows, after "
             "keys 0 to 3", kinds(LARGE, UNPADDED), 4, 8, 4, 8, earlier=[(0, 4)], scale=8.0),
    ]  # fmt: skip


def _causal_update_with(rule=lambda qp, kp, qi, kj: kp <= qp, safe=True, fill=NEG_INF, rescale_acc=True,
                        scale=True):  # fmt: skip
    """causal_block_update with one known mistake: the mask ``rule`` of absolute positions qp, kp and positions in
    the tile qi, kj; without the guard for rows that see no key (``safe``); masked scores ``fill``ed with 0; ..."""

    def update(m, l, acc, q_block, k_block, v_block, q_start, k_start):
        qi, kj = torch.arange(q_block.shape[0])[:, None], torch.arange(k_block.shape[0])[None, :]
        allowed = rule(q_start + qi, k_start + kj, qi, kj)
        s = q_block @ k_block.T / (math.sqrt(q_block.shape[1]) if scale else 1.0)
        s = s.masked_fill(~allowed, fill)
        m_new = torch.maximum(m, s.amax(dim=1))
        ref = _safe(m_new) if safe else m_new
        p, alpha = torch.exp(s - ref[:, None]), torch.exp(m - ref)
        return m_new, alpha * l + p.sum(dim=1), (alpha[:, None] * acc if rescale_acc else acc) + p @ v_block

    return update


def _both(**kwargs):
    """The mistake written with and without the guard for rows that see no key."""
    return _causal_update_with(**kwargs), _causal_update_with(safe=False, **kwargs)


CAUSAL_BLOCK_UPDATE = Exercise(
    name="causal_block_update",
    lesson=LESSON_FORWARD,
    params=("m", "l", "acc", "q_block", "k_block", "v_block", "q_start", "k_start"),
    returns=(("block_q",), ("block_q",), ("block_q", "value_dim")),
    output_names=("m", "l", "acc"),
    reference=causal_block_update,
    make_cases=_causal_update_cases,
    units=(QUERIES,) * 3,
    variants=(
        Variant(
            "the diagonal is off by one, one key too few: a query may not attend to its own key (the tile's "
            "diagonal pairs are masked). Query i may attend key j when j <= i, so key i too.",
            *_both(rule=lambda qp, kp, qi, kj: kp < qp),
        ),
        Variant(
            "the diagonal is off by one, one key too many: each query also attends to the key right after it, one "
            "step into the future. Query i may attend key j when j <= i.",
            *_both(rule=lambda qp, kp, qi, kj: kp <= qp + 1),
        ),
        Variant(
            "the mask compares positions inside the tile (row i and column j of the tile, counted from 0) instead of "
            "positions in the sequence: that is right only for a tile on the diagonal whose queries and keys start "
            "at the same position. Query q_start + i may attend key k_start + j when k_start + j <= q_start + i.",
            *_both(rule=lambda qp, kp, qi, kj: kj <= qi),
        ),
        Variant(
            "the mask mixes positions in the sequence with positions inside the tile: one side counts from the "
            "tile's start (q_start or k_start) and the other from 0. Compare k_start + j with q_start + i.",
            *_both(rule=lambda qp, kp, qi, kj: kp <= qi),
            *_both(rule=lambda qp, kp, qi, kj: kj <= qp),
        ),
        Variant(
            "the mask is inverted: the scores set to -inf are those of the keys a query may attend (j <= i), and "
            "the future keys were kept.",
            *_both(rule=lambda qp, kp, qi, kj: kp > qp),
            *_both(rule=lambda qp, kp, qi, kj: kp >= qp),
        ),
        Variant(
            "no causal mask at all: every query attends to every key of the tile, the future ones included.",
            *_both(rule=lambda qp, kp, qi, kj: kp >= 0),
        ),
        Variant(
            "the masked scores became 0 instead of -inf: exp(0 - m_new) is not 0, so the future keys still get "
            "weight. A key a query may not attend must get score -inf.",
            *_both(fill=0.0),
        ),
        Variant(
            "a query that sees no key in this tile, and saw none before (m = -inf), came out NaN: its scores are all "
            "-inf, so m_new = -inf and exp(s - m_new) = exp(-inf - (-inf)) = exp(NaN). Such a query must keep its "
            "empty state (m = -inf, l = 0, acc = 0): its weights and factor must come out exp(-inf) = 0, so -inf - "
            "(-inf) must never be computed.",
            _causal_update_with(safe=False),
        ),
        Variant(
            "the running output acc was not rescaled when the maximum grew: it was summed against the old maximum, "
            "and must shrink by the same factor as l, alpha = exp(m - m_new), before the tile's P V is added.",
            *_both(rescale_acc=False),
        ),
        Variant(
            "the scores were not divided by sqrt(head_dim), so every score is too large by that factor and the "
            "weights too sharp.",
            *_both(scale=False),
        ),
    ),
    large_note="This test case has large inputs: scores in the hundreds. exp(s) on its own is inf in float32 above "
    "about 88, so inf / inf or inf * 0 gives NaN: subtract the running maximum before the exp, exp(s - m_new), which "
    "is at most 1.",
    nan_note="NaN comes from 0/0, inf - inf or 0 * inf: for a query whose scores are all -inf, m_new is -inf, and "
    "-inf - (-inf) is NaN.",
    hint=(
        "Which position in the sequence does row r of q_block hold, and column c of k_block? The mask compares "
        "those positions, not r and c. Then the update is the lesson's tiled_forward step, with -inf where a pair "
        "is not allowed.",
        "q_pos = q_start + 0, 1, ...; k_pos = k_start + 0, 1, ...; allowed where k_pos <= q_pos. s = q k^T / "
        "sqrt(head_dim), -inf where not allowed; m_new = max(m, rowmax(s)). A row with m_new = -inf has seen no key: "
        "measure its exp against 0 there, so that exp(-inf) = 0 and not exp(-inf + inf) = NaN.",
        "`q_pos = q_start + torch.arange(q_block.shape[0])`, `k_pos` likewise; `s = (q_block @ k_block.T / "
        "math.sqrt(q_block.shape[1])).masked_fill(k_pos[None, :] > q_pos[:, None], float('-inf'))`; `m_new = "
        "torch.maximum(m, s.max(dim=1).values)`; `ref = torch.where(m_new == float('-inf'), 0.0, m_new)`; `p = "
        "torch.exp(s - ref[:, None])`, `alpha = torch.exp(m - ref)`; return m_new, `alpha * l + p.sum(1)`, "
        "`alpha[:, None] * acc + p @ v_block`.",
    ),
)


# --------------------------------------------------------------------------------------------
# tile_backward
# --------------------------------------------------------------------------------------------


def _tile_backward_cases() -> list[Case]:
    g = generator(48)

    def problem(n_q, n_k, head_dim, value_dim, scale=1.0):
        q, k, v = scale * randn(g, n_q, head_dim), scale * randn(g, n_k, head_dim), randn(g, n_k, value_dim)
        grad_out = randn(g, n_q, value_dim)
        s = q @ k.T / math.sqrt(head_dim)
        lse = torch.logsumexp(s, dim=1)
        out = torch.softmax(s, dim=1) @ v
        return q, k, v, grad_out, lse, (grad_out * out).sum(dim=1)

    def case(description, tags, sizes, rows, keys, scale=1.0) -> Case:
        q, k, v, grad_out, lse, d = problem(*sizes, scale=scale)
        return Case(description, (q[rows], k[keys], v[keys], grad_out[rows], lse[rows], d[rows]), tags)

    return [
        case("queries 4 to 7 against keys 4 to 7 of 12 (blocks of 4), head_dim 5, value_dim 3", kinds(UNPADDED),
             (12, 12, 5, 3), slice(4, 8), slice(4, 8)),
        case("queries 0 to 3 against keys 8 to 11 of 12, head_dim 3, value_dim 2", kinds(UNPADDED), (8, 12, 3, 2),
             slice(0, 4), slice(8, 12)),
        case("queries 4 to 7 against the last, partial block of keys (8, 9) of 10, head_dim 5, value_dim 3",
             kinds(PADDED), (8, 10, 5, 3), slice(4, 8), slice(8, 10)),
        case("the last, partial block of queries (8, 9) of 10 against keys 0 to 3, head_dim 4, value_dim 2",
             kinds(PADDED), (10, 8, 4, 2), slice(8, 10), slice(0, 4)),
        case("one query (the last of 9, a partial block of one) against keys 4 to 7 of 8, head_dim 3, value_dim 2",
             kinds(ONE, PADDED), (9, 8, 3, 2), slice(8, 9), slice(4, 8)),
        case("queries 4 to 7 against keys 0 to 3 of 8, scores in the hundreds, where exp overflows",
             kinds(LARGE, UNPADDED), (8, 8, 4, 3), slice(4, 8), slice(0, 4), scale=8.0),
    ]  # fmt: skip


def _backward_with(p_rule="lse", d_rule="minus", times_p=True, dq_scale=1, dk_scale=1, dv_t=True, dk_t=True,
                   dk_from="q"):  # fmt: skip
    """tile_backward with one known mistake: P from the tile's own softmax or unscaled scores; D missing, added or
    summed over this tile's keys only;
    dS without P; dq, dk times scale ** dq_scale, ** dk_scale; P or dS not transposed; dK from K."""

    def backward(q_block, k_block, v_block, do_block, lse, d):
        scale = 1.0 / math.sqrt(q_block.shape[1])
        s = q_block @ k_block.T * scale
        if p_rule == "tile":
            p = torch.softmax(s, dim=1)
        elif p_rule == "unscaled":
            p = torch.exp(q_block @ k_block.T - lse[:, None])
        else:
            p = torch.exp(s - lse[:, None])
        dv = (p.T if dv_t else p) @ do_block
        dp = do_block @ v_block.T
        diff = {"minus": dp - d[:, None], "none": dp, "plus": dp + d[:, None],
                "tile": dp - (p * dp).sum(dim=1, keepdim=True)}[d_rule]  # fmt: skip
        ds = p * diff if times_p else diff
        dk = (ds.T if dk_t else ds) @ (q_block if dk_from == "q" else k_block)
        return ds @ k_block * scale**dq_scale, dk * scale**dk_scale, dv

    return backward


TILE_BACKWARD = Exercise(
    name="tile_backward",
    lesson=LESSON_BACKWARD,
    params=("q_block", "k_block", "v_block", "do_block", "lse", "D"),
    returns=(("block_q", "head_dim"), ("block_k", "head_dim"), ("block_k", "value_dim")),
    output_names=("dq", "dk", "dv"),
    reference=tile_backward,
    make_cases=_tile_backward_cases,
    units=(QUERIES, KEYS, KEYS),
    variants=(
        Variant(
            "P was recomputed as a softmax of the tile on its own (its own maximum and sum), not rebuilt from lse: "
            "the tile holds only some of each query's keys, so its softmax sums to one over the wrong set. The "
            "forward saved lse, the log-sum-exp over all the keys, so that P = exp(S - lse) is exact in every tile.",
            _backward_with(p_rule="tile"),
        ),
        Variant(
            "P was rebuilt from scores that were not multiplied by scale: lse is the log-sum-exp of the scaled scores "
            "S = Q K^T * scale, so P = exp(S - lse) needs them scaled too.",
            _backward_with(p_rule="unscaled"),
        ),
        Variant(
            "D is missing: dS = P * dP. The softmax's backward subtracts, from each row of dP, its weighted mean "
            "rowsum(P * dP), which equals D = rowsum(dO * O): dS = P * (dP - D).",
            _backward_with(d_rule="none"),
        ),
        Variant(
            "D was added instead of subtracted: dS = P * (dP - D), with D = rowsum(dO * O).",
            _backward_with(d_rule="plus"),
        ),
        Variant(
            "your D covers only this tile's keys: the row sums of P * dP were taken over the tile, but the softmax's "
            "backward subtracts the sum over all of a query's keys, of which a tile holds only some. That is why D "
            "comes in as an argument, computed once from the whole output. It shows in dq and dk; dv does not use D.",
            _backward_with(d_rule="tile"),
        ),
        Variant(
            "dS lacks the factor P: dS = P * (dP - D), elementwise, is the gradient of the scores through the softmax.",
            _backward_with(times_p=False),
        ),
        Variant(
            "dq and dk are both missing the factor scale (1 / sqrt(head_dim)): S = Q K^T * scale, so the gradient "
            "of Q is dS K * scale and that of K is dS^T Q * scale.",
            _backward_with(dq_scale=0, dk_scale=0),
        ),
        Variant(
            "dq and dk are multiplied by scale twice (scale squared): S = Q K^T * scale brings one factor scale "
            "into each, dS K * scale and dS^T Q * scale.",
            _backward_with(dq_scale=2, dk_scale=2),
        ),
        Variant(
            "dq is missing the factor scale (dk has it): dQ = dS K * scale, since S = Q K^T * scale.",
            _backward_with(dq_scale=0),
        ),
        Variant(
            "dk is missing the factor scale (dq has it): dK = dS^T Q * scale, since S = Q K^T * scale.",
            _backward_with(dk_scale=0),
        ),
        Variant(
            "P was not transposed for dv: each key's gradient gathers over the queries, dV = P^T dO, a (block_k, "
            "value_dim) product.",
            _backward_with(dv_t=False),
        ),
        Variant(
            "dS was not transposed for dk: each key's gradient gathers over the queries, dK = dS^T Q * scale.",
            _backward_with(dk_t=False),
        ),
        Variant(
            "dk was computed from K instead of Q: S = Q K^T, so the gradient of K is dS^T Q * scale (and that of Q "
            "is dS K * scale).",
            _backward_with(dk_from="k"),
        ),
    ),
    large_note="This test case has large inputs: scores in the hundreds. exp(S) on its own is inf in float32 above "
    "about 88, so exp(S) / exp(lse) is inf / inf = NaN: rebuild P in one step, exp(S - lse), which is at most 1.",
    hint=(
        "Work backwards through the three steps of the forward, O = P V, P = softmax(S), S = Q K^T scale, and write "
        "the shape of each gradient next to it: which one needs P, which one needs D, and where does the scale "
        "come back?",
        "P = exp(S - lse) for this tile; dV = P^T dO; dP = dO V^T; dS = P * (dP - D) elementwise, with D one "
        "number per query; dQ = dS K scale and dK = dS^T Q scale.",
        "`scale = 1 / math.sqrt(q_block.shape[1])`; `p = torch.exp(q_block @ k_block.T * scale - lse[:, None])`; "
        "`dv = p.T @ do_block`; `ds = p * (do_block @ v_block.T - D[:, None])`; return `ds @ k_block * scale`, "
        "`ds.T @ q_block * scale`, `dv`.",
    ),
)


# --------------------------------------------------------------------------------------------
# benchmark_median
# --------------------------------------------------------------------------------------------


def _timing_cases() -> list[Case]:
    g = generator(58)

    def case(description, tags, order, typical, compile_ms, spikes=(), noise=0.04) -> Case:
        """Per-call times of a loop that ran shape ``order[i]`` at call i: about ``typical[s]`` ms each, plus
        ``compile_ms`` on each shape's first call, times (1 + noise * N(0, 1)), plus each (call, ms) of spikes."""
        ids = torch.tensor(order)
        times = torch.tensor(typical)[ids] * (1 + noise * randn(g, len(order)))
        first = torch.tensor([order.index(s) for s in range(len(typical))])
        times[first] += compile_ms
        for call, extra in spikes:
            times[call] += extra
        return Case(description, (ids, times.float()), tags)

    def rounds(shapes: int, count: int) -> list[int]:
        return [s for _ in range(count) for s in range(shapes)]

    # A slow function, written out: compiling adds 50 ms to calls of about 2 s that vary by 100 ms, so each shape's
    # first call is not its slowest (another process added 4 s to one later call of each).
    slow_ids = torch.tensor(rounds(2, 6))
    slow = torch.tensor([1890.0, 2710.0, 2010.0, 2560.0, 1930.0, 6650.0, 6100.0, 2600.0, 2050.0, 2480.0, 1975.0,
                         2640.0])  # fmt: skip
    return [
        case("2 shapes called in turn, 8 calls each, about 1.2 and 4.5 ms, the first call of each 35 ms longer "
             "(compiling); one call 6 ms longer (another process)", kinds(UNPADDED), rounds(2, 8), [1.2, 4.5], 35.0,
             spikes=[(6, 6.0)]),
        case("3 shapes called in turn, 5 calls each, about 0.8, 2 and 6 ms; a spike of 20 ms in one call",
             kinds(UNPADDED), rounds(3, 5), [0.8, 2.0, 6.0], 35.0, spikes=[(11, 20.0)]),
        case("one shape, 9 calls of about 3 ms, the first 50 ms longer", kinds(ONE, UNPADDED), rounds(1, 9), [3.0],
             50.0, spikes=[(4, 9.0)]),
        case("3 shapes in turn, 19 calls: the third shape stopped after 5 rounds (7, 7 and 5 calls)", kinds(PADDED),
             rounds(3, 5) + rounds(2, 2), [1.0, 2.5, 4.0], 30.0, spikes=[(9, 8.0)]),
        case("2 shapes timed one after the other, not in turn: 6 calls of the first, then 9 of the second",
             kinds(PADDED), [0] * 6 + [1] * 9, [2.0, 0.7], 25.0, spikes=[(10, 5.0)]),
        Case("a slow function: 2 shapes in turn, 6 calls each of about 2 and 2.6 s that vary by about 100 ms; "
             "compiling adds 50 ms to each first call, and another process adds 4 s to one later call of each",
             (slow_ids, slow), kinds(LARGE, UNPADDED)),
    ]  # fmt: skip


def _by_shape(shape_ids, times):
    return [times[shape_ids == s] for s in range(int(shape_ids.max()) + 1)]


def _lower_median(x: torch.Tensor) -> float:
    return float(x.median())  # torch.median: the lower of the two middle values


def _middle_median(x: torch.Tensor) -> float:
    return statistics.median(x.tolist())


def _timing_with(drop=lambda shape_ids, s, calls: calls[1:], stat=_middle_median):
    """benchmark_median with one known mistake: the calls kept, ``drop(shape_ids, shape, its calls)``, and the
    statistic ``stat`` of them."""

    def summary(shape_ids, times):
        return torch.tensor([stat(drop(shape_ids, s, c)) for s, c in enumerate(_by_shape(shape_ids, times))])

    return summary


def _medians(drop):
    return _timing_with(drop, _middle_median), _timing_with(drop, _lower_median)


def _drop_first_overall(shape_ids, s, calls):
    return calls[1:] if int(shape_ids[0]) == s else calls


def _drop_first_round(shape_ids, s, calls):
    """The first `shapes` calls dropped, as if they held one call of each shape."""
    shapes = int(shape_ids.max()) + 1
    return calls[int((shape_ids[:shapes] == s).sum()) :]


def _drop_slowest(shape_ids, s, calls):
    return torch.cat([calls[: int(calls.argmax())], calls[int(calls.argmax()) + 1 :]])


BENCHMARK_MEDIAN = Exercise(
    name="benchmark_median",
    lesson=LESSON_BACKWARD,
    params=("shape_ids", "times_ms"),
    returns=(("shapes",),),
    reference=steady_medians,
    make_cases=_timing_cases,
    units=(("shape", "shapes", "index"),),
    variants=(
        Variant(
            "the warm-up calls were kept: each shape's first call pays for compiling (and autotuning, allocating, "
            "filling caches) once, and is not what a call costs afterwards. Drop each shape's first call.",
            *_medians(lambda shape_ids, s, calls: calls),
        ),
        Variant(
            "only the very first call of the loop was dropped: compilation and autotuning happen again for each new "
            "shape (they are keyed on it), so each shape's own first call is a warm-up.",
            *_medians(_drop_first_overall),
        ),
        Variant(
            "the first `shapes` calls of the loop were dropped, as if the first round held one call of each shape: "
            "when shapes are not timed in turn, those calls all belong to one shape. Drop each shape's own first "
            "call, wherever it is.",
            *_medians(_drop_first_round),
        ),
        Variant(
            "two calls of each shape were dropped, one more than the warm-up: only each shape's first call pays for "
            "compiling.",
            *_medians(lambda shape_ids, s, calls: calls[2:]),
        ),
        Variant(
            "each shape's slowest call was dropped rather than its first: for a slow function, compiling adds less "
            "than the noise, and the slowest call is one that another process slowed down. Drop each shape's first "
            "call by its position, whatever its time.",
            *_medians(_drop_slowest),
        ),
        Variant(
            "for an even number of calls, the median is the mean of the two middle values, but `torch.median` "
            "returns the lower of the two: the shapes that keep an even number of calls come out too low.",
            _timing_with(stat=_lower_median),
        ),
        Variant(
            "the mean of the calls after the warm-up: a single call slowed down by another process moves a mean "
            "(by its extra time over the number of calls), not a median. Report the median.",
            _timing_with(stat=lambda x: float(x.mean())),
        ),
        Variant(
            "the mean of all the calls, warm-up included: both the first call's compilation and the spikes of other "
            "processes move it. Drop each shape's first call and take the median of the rest.",
            _timing_with(lambda shape_ids, s, calls: calls, stat=lambda x: float(x.mean())),
        ),
        Variant(
            "the minimum, the luckiest call: it says what a call can cost, not what it usually costs. Report the "
            "median of the calls after each shape's first.",
            _timing_with(stat=lambda x: float(x.min())),
            _timing_with(lambda shape_ids, s, calls: calls, stat=lambda x: float(x.min())),
        ),
    ),
    large_note="This test case is a slow function: calls of about two seconds, in which compiling (50 ms) hides in "
    "the noise, so no threshold on the time finds the warm-up: its position does.",
    nan_note="NaN here usually means a median of no calls at all: check that each shape keeps the calls after its "
    "first.",
    hint=(
        "Which calls belong to shape s, and in what order did they run? The warm-up is found by its position "
        "among them, not by its time.",
        "For each shape: its calls in order, without the first; their median (for an even count, the mean of the "
        "two middle values). One number per shape.",
        "`calls = times_ms[shape_ids == s]`; `statistics.median(calls[1:].tolist())` (or `torch.quantile(calls[1:], "
        "0.5)`) for s in 0, ..., shapes - 1; return them as `torch.tensor([...])`.",
    ),
)


# --------------------------------------------------------------------------------------------
# softmax_kernel (Triton, under the interpreter)
# --------------------------------------------------------------------------------------------


def _softmax_kernel_cases() -> list[Case]:
    g = generator(68)

    def rows(count: int, n: int, spread: float = 2.0, offset: float = 0.0) -> torch.Tensor:
        """Rising rows (the maximum grows from one block to the next), every other one below 0."""
        shift = torch.tensor([offset - (3.0 if r % 2 else 0.0) for r in range(count)])[:, None]
        return shift + spread * randn(g, count, n) + torch.linspace(0.0, 4.0, n)

    def spiked() -> torch.Tensor:
        """3 rows of 48 with no trend, each with one number 100 above the rest: in the first, middle, last block."""
        x = 2.0 * randn(g, 3, 48)
        x[0, 5], x[1, 24], x[2, 45] = 100.0, 100.0, 100.0
        return x

    large = torch.cat([rows(1, 32, 30.0, 300.0), rows(1, 32, 30.0, -600.0)])
    return [
        Case("4 rows of 32 numbers, BLOCK = 16: two full blocks a row", (rows(4, 32), 16), kinds(UNPADDED)),
        Case("3 rows of 40 numbers, BLOCK = 16: the last block of each row holds 8", (rows(3, 40), 16), kinds(PADDED)),
        Case("one row of 48 numbers, BLOCK = 16", (rows(1, 48), 16), kinds(ONE, UNPADDED)),
        Case("one row of 10 numbers, BLOCK = 16: a row shorter than one block", (rows(1, 10), 16), kinds(ONE, PADDED)),
        Case("2 rows of 64 numbers, BLOCK = 32", (rows(2, 64), 32), kinds(UNPADDED)),
        Case("3 rows of 37 numbers, BLOCK = 8: five blocks, the last holds 5", (rows(3, 37), 8), kinds(PADDED)),
        Case("2 rows of 32 numbers around +300 and -600, BLOCK = 16, where exp overflows (or underflows to 0)",
             (large, 16), kinds(LARGE, UNPADDED)),
        Case("3 rows of 48 numbers, BLOCK = 16, each with one number 100 above the rest of its row: in the first "
             "block (row 0), the middle block (row 1), the last block (row 2); exp(100) overflows in float32",
             (spiked(), 16), kinds(LARGE, UNPADDED)),
    ]  # fmt: skip


def _blockwise_softmax(rescale=lambda l, m, m_new: l * torch.exp(m - m_new), one_pass=False):
    """An online softmax of each row with one known mistake in its rescale; or written block by block with the
    running maximum and sum at the time (``one_pass``)."""

    def softmax(x, block):
        m, l = torch.full((x.shape[0],), NEG_INF), torch.zeros(x.shape[0])
        pieces = []
        for start in range(0, x.shape[1], block):
            b = x[:, start : start + block]
            m_new = torch.maximum(m, b.amax(dim=1))
            l = rescale(l, m, m_new) + torch.exp(b - m_new[:, None]).sum(dim=1)
            m = m_new
            pieces.append(torch.exp(b - m[:, None]) / l[:, None])
        return torch.cat(pieces, dim=1) if one_pass else torch.exp(x - m[:, None]) / l[:, None]

    return softmax


def _measured_against(block_max: str):
    """An online softmax whose reference maximum is not the running maximum of the row: ``"each"``, each block's own
    maximum replaces it (the rescale still applied, so the last block's maximum is the one used); ``"first"``, the
    first block's maximum, kept for the whole row; ``"zero"``, the running maximum started at 0, not -inf. Exact
    unless an exp overflows or every one underflows (in float32, as the kernel)."""

    def softmax(x, block):
        m, l = torch.full((x.shape[0],), 0.0 if block_max == "zero" else NEG_INF), torch.zeros(x.shape[0])
        for start in range(0, x.shape[1], block):
            b = x[:, start : start + block]
            if block_max == "zero":
                m_new = torch.maximum(m, b.amax(dim=1))
            else:
                m_new = b.amax(dim=1) if block_max == "each" or start == 0 else m
            l = l * torch.exp(m - m_new) + torch.exp(b - m_new[:, None]).sum(dim=1)  # l * exp(-inf) = 0 at first
            m = m_new
        return torch.exp(x - m[:, None]) / l[:, None]

    return softmax


def _padding_as(value: float):
    def softmax(x, block):
        width = -(-x.shape[1] // block) * block
        padded = torch.cat([x, torch.full((x.shape[0], width - x.shape[1]), value)], dim=1)
        return torch.softmax(padded, dim=1)[:, : x.shape[1]]

    return softmax


def _last_column_left_out(store_all: bool):
    def softmax(x, block):
        out = torch.full_like(x, float("nan"))
        inner = torch.softmax(x[:, :-1], dim=1)
        out[:, :-1] = inner
        if store_all:
            out[:, -1] = 0.0  # read as -inf: weight exp(-inf) = 0, stored
        return out

    return softmax


def _rescaled_input(factor: float):
    def softmax(x, block):
        return torch.softmax(x * factor, dim=1)

    return softmax


def _per_block(x, block):
    return torch.cat([torch.softmax(b, dim=1) for b in x.split(block, dim=1)], dim=1)


def _no_max(x, block):
    e = torch.exp(x)
    return e / e.sum(dim=1, keepdim=True)


SOFTMAX_KERNEL = Exercise(
    name="softmax_kernel",
    lesson=LESSON_FORWARD,
    params=("x", "block"),
    returns=(("rows", "n_cols"),),
    reference=online_softmax,
    make_cases=_softmax_kernel_cases,
    units=(ROWS,),
    launch=launch_softmax,
    variants=(
        Variant(
            "the running sum l was not rescaled when the maximum grew: the terms already in l were computed against "
            "the old maximum, so they are too large by exp(m_new - m_old). Whenever the maximum grows, the terms "
            "already in l must shrink by exp(m_old - m_new), before the new block's terms are added.",
            _blockwise_softmax(rescale=lambda l, m, m_new: l),
        ),
        Variant(
            "the running sum l was rescaled the wrong way round, by exp(m_new - m), which is at least 1: the old "
            "terms must shrink when the maximum grows, by exp(m_old - m_new), at most 1 (old minus new).",
            _blockwise_softmax(rescale=lambda l, m, m_new: torch.where(l > 0, l * torch.exp(m_new - m), l)),
        ),
        Variant(
            "each block was normalised on its own: the numbers of every block sum to one, instead of the whole row. "
            "The blocks only build up the row's maximum m and sum l; a second pass over the row writes "
            "exp(x - m) / l with the final ones.",
            _per_block,
        ),
        Variant(
            "each block was written in the same pass that reads it, with the maximum and sum of the blocks read so "
            "far: the first blocks are divided by a sum that is not yet the row's. Finish the pass that finds m and "
            "l, then loop over the row again to write exp(x - m) / l.",
            _blockwise_softmax(one_pass=True),
        ),
        Variant(
            "tl.exp2 was used without the factor log2(e): exp2(x - m) is 2 to the power x - m, not e to it, so "
            "this is the softmax of x * ln(2). exp(z) = exp2(z * log2(e)), with log2(e) = 1.4426950408889634.",
            _rescaled_input(LN2),
        ),
        Variant(
            "the numbers were multiplied by log2(e) and then given to tl.exp, not tl.exp2: exp(z * log2(e)) is not "
            "exp(z). The factor belongs with exp2: exp(z) = exp2(z * log2(e)).",
            _rescaled_input(LOG2_E),
        ),
        Variant(
            "the lanes of the last, partial block past the end of the row were read as 0 (the masked load's fill "
            "value), so they count in the maximum and the sum as numbers of value 0, in every row whose last block "
            "is partial. Lanes that do not exist must weigh nothing: their fill value must have exponential 0.",
            _padding_as(0.0),
        ),
        Variant(
            "the mask stops one column early and leaves out the last number of each row (it is never stored, and "
            "was read as padding): the columns of a row are 0 to n_cols - 1, every one of them real.",
            _last_column_left_out(False),
            _last_column_left_out(True),
        ),
        Variant(
            "each block's own maximum replaced the running maximum, so the numbers are measured against the maximum "
            "of the last block read, not of the row: while the numbers rise from block to block that is harmless, "
            "but a row whose largest number is in an earlier block (100 above the rest here) makes exp2((m_old - "
            "m_new) * log2(e)) overflow to inf, and inf / inf is NaN. The running maximum can only grow: it is the "
            "larger of the old one and the block's.",
            _measured_against("each"),
        ),
        Variant(
            "the maximum was taken from the first block only and never updated: a number in a later block that is "
            "far above it (100 above the rest here) makes its exp2((x - m) * log2(e)) overflow to inf, and inf / inf "
            "is NaN. Each block may raise the maximum, and the sum must follow it.",
            _measured_against("first"),
        ),
        Variant(
            "the running maximum did not start at -inf: it started at 0 (or another number above every number of a "
            "row), so for a row whose numbers are all far below that (around -600 here) every exp2((x - m) * log2(e)) "
            "underflows to 0, the sum stays 0, and 0 / 0 is NaN. Before the first block, no number has been read: "
            "the maximum must start below every possible number.",
            _measured_against("zero"),
        ),
        Variant(
            "the row's maximum was not subtracted before the exponential: exp2(x * log2(e)) overflows to inf for "
            "numbers above about 88, and inf / inf is NaN. Only differences x - m, with m the running maximum, may "
            "go into the exponential: they are at most 0, so it is at most 1.",
            _no_max,
        ),
    ),
    large_note="This test case has large inputs: numbers around +300 and -600, or one number 100 above the rest of "
    "its row. exp2(x * log2(e)) is inf in float32 for x above about 88, and 0 below about -104, so inf / inf or 0 / 0 "
    "gives NaN: every exponent must be at most 0, a number minus a maximum at least as large (x - m), or an old "
    "maximum minus the new one (m_old - m_new).",
    nan_note=KERNEL_NAN_NOTE,
    hint=(
        "Two passes over the row: the first to learn its maximum and sum (Exercise 1's state, without o), the "
        "second to write the weights. What must a load past the end of the row give, so that it adds nothing to "
        "either?",
        "First pass, block by block: m_new = max(m, max of the block); l = l e^(m - m_new) + sum of e^(x - m_new); "
        "padding loads as -inf. Second pass: e^(x - m) / l, stored with the same mask. e^x = 2^(x log2 e).",
        "`row = tl.program_id(0)`; in `for start in range(0, n_cols, BLOCK)`: `cols = start + tl.arange(0, BLOCK)`, "
        "`x = tl.load(X + row * stride_x + cols, mask=cols < n_cols, other=float('-inf'))`, then the update with "
        "`tl.exp2((m - m_new) * log2_e)`; the second loop loads again and `tl.store(Y + row * stride_y + cols, "
        "tl.exp2((x - m) * log2_e) / l, mask=cols < n_cols)`.",
    ),
)


# --------------------------------------------------------------------------------------------
# attention_kernel and causal_attention_kernel (Triton, under the interpreter)
# --------------------------------------------------------------------------------------------


# Float32 rounds a score s to about |s| * 2^-24, which moves exp(s), and so a weight, by that much of itself, whatever
# the order of operations: at scores of -400 more than the check's default tolerance. A correct forward that scales q
# (or the K tile) before the product, not the product after, differs from the reference by 2.5e-5 of the largest
# output there, 1.04 x max|s| * 2^-24 (and by at most 1.2 x on every large case, causal or not: measured under the
# interpreter). Each attention case allows SCORE_ROUNDING x max|s| * 2^-24 of each entry and of the largest one; the
# mistakes the large cases exist for give NaN, inf or differences of order 1.
SCORE_ROUNDING = 8.0


def _score_tolerance(case: Case) -> Case:
    """``case`` with ``tolerance`` SCORE_ROUNDING x (its largest |score|, q k^T / sqrt(head_dim)) x 2^-24."""
    q, k = case.args[:2]
    largest = float((q @ k.T).abs().max()) / math.sqrt(q.shape[-1])
    return dataclasses.replace(case, tolerance=SCORE_ROUNDING * largest * 2.0**-24)


def _attention_kernel_cases(causal: bool) -> list[Case]:
    return [_score_tolerance(case) for case in _attention_kernel_case_inputs(causal)]


def _attention_kernel_case_inputs(causal: bool) -> list[Case]:
    g = generator(78 if causal else 88)
    head_dim = 16

    def qkv(n_q, n_k, scale=1.0):
        q, k, v = scale * randn(g, n_q, head_dim), scale * randn(g, n_k, head_dim), randn(g, n_k, head_dim)
        q[:, 0] = q[:, 0].abs() + 2.0 * scale  # later keys score higher: the running maximum grows
        k[:, 0] += scale * torch.linspace(-3.0, 3.0, n_k)
        return q, k, v

    def extreme(n_q, n_k, low=(), spikes=()):
        """q, k, v whose scores are exact in float32 (entries on a grid of 1/8, so every product and sum is): about
        N(0, 0.9) for most pairs; about -400 for the queries of ``low``, against every key; and for each (queries,
        key, height) of ``spikes``, those queries score that key ``height`` above the rest (dimensions 0 to 3 carry
        these)."""
        q, k = torch.round(8 * randn(g, n_q, head_dim)) / 8, torch.round(8 * randn(g, n_k, head_dim)) / 8
        q[:, :4], k[:, :4] = 0.0, 0.0
        k[:, 0] = 8.0
        q[list(low), 0] = -200.0  # score (-200 * 8) / sqrt(16) = -400
        for d, (queries, key, height) in enumerate(spikes, start=1):
            k[key, d], q[list(queries), d] = 8.0, height / 2.0
        return q, k, randn(g, n_k, head_dim)

    if causal:
        return [
            Case("64 queries and keys, head_dim 16, BLOCK_M 16, BLOCK_N 32: full blocks", (*qkv(64, 64), 16, 32),
                 kinds(UNPADDED)),
            Case("48 queries and keys, BLOCK_M 16, BLOCK_N 32: the last key block holds 16 of 32",
                 (*qkv(48, 48), 16, 32), kinds(PADDED)),
            Case("one query and one key, BLOCK_M 16, BLOCK_N 32", (*qkv(1, 1), 16, 32), kinds(ONE, PADDED)),
            Case("32 queries and keys, BLOCK_M 32, BLOCK_N 16", (*qkv(32, 32), 32, 16), kinds(UNPADDED)),
            Case("80 queries and keys, BLOCK_M 16, BLOCK_N 32: the last key block holds 16", (*qkv(80, 80), 16, 32),
                 kinds(PADDED)),
            Case("32 queries and keys with scores in the hundreds, BLOCK_M 16, BLOCK_N 32",
                 (*qkv(32, 32, scale=6.0), 16, 32), kinds(LARGE, UNPADDED)),
            Case("48 queries and keys, BLOCK_M 16, BLOCK_N 16, scores far from 0: queries 0 to 14 score the keys they "
                 "may see about -400, and queries 8 to 14 score key 15, in their future, 400 above that; queries 32 "
                 "to 47 score key 3 100 above the rest", (*extreme(48, 48, low=range(15), spikes=[
                     (range(8, 15), 15, 400.0), (range(32, 48), 3, 100.0)]), 16, 16), kinds(LARGE, UNPADDED)),
        ]  # fmt: skip
    return [
        Case("32 queries, 64 keys, head_dim 16, BLOCK_M 16, BLOCK_N 32: full blocks", (*qkv(32, 64), 16, 32),
             kinds(UNPADDED)),
        Case("32 queries, 40 keys, BLOCK_N 32: the last key block holds 8 keys of 32", (*qkv(32, 40), 16, 32),
             kinds(PADDED)),
        Case("one query, 32 keys, BLOCK_M 16, BLOCK_N 32", (*qkv(1, 32), 16, 32), kinds(ONE, UNPADDED)),
        Case("16 queries, 96 keys, BLOCK_M 16, BLOCK_N 32: three key blocks", (*qkv(16, 96), 16, 32),
             kinds(UNPADDED)),
        Case("48 queries, 50 keys, BLOCK_M 16, BLOCK_N 16: the last key block holds 2", (*qkv(48, 50), 16, 16),
             kinds(PADDED)),
        Case("16 queries, 64 keys with scores in the hundreds, BLOCK_M 16, BLOCK_N 32",
             (*qkv(16, 64, scale=6.0), 16, 32), kinds(LARGE, UNPADDED)),
        Case("16 queries, 48 keys, BLOCK_M 16, BLOCK_N 16, scores far from 0: queries 0 to 3 score every key about "
             "-400; queries 4 to 7, 8 to 11 and 12 to 15 score one key 100 above the rest, in the first, middle and "
             "last key block", (*extreme(16, 48, low=range(4), spikes=[(range(4, 8), 2, 100.0),
                                (range(8, 12), 21, 100.0), (range(12, 16), 45, 100.0)]), 16, 16),
             kinds(LARGE, UNPADDED)),
        Case("16 queries, 12 keys, BLOCK_M 16, BLOCK_N 16: fewer keys than one block; queries 0 to 7 score every key "
             "about -400", (*extreme(16, 12, low=range(8)), 16, 16), kinds(LARGE, PADDED)),
    ]  # fmt: skip


def _attention(q, k, v, block_m, block_n):
    return naive_attention(q, k, v)


def _causal_attention(q, k, v, block_m, block_n):
    return naive_attention(q, k, v, is_causal=True)


def _kernel_loop(rescale_l=True, rescale_acc=True, base=2.0, factor=LOG2_E, scaled=True, pad_score=None,
                 drop_last_key=False, causal=None, hi="diagonal", m_start=NEG_INF, running=True,
                 max_before_mask=False):  # fmt: skip
    """What an attention kernel computes with one known mistake, block by block as the kernel does (BLOCK_N keys at
    a time, in float32): the rescale of l or acc missing; the exponential in ``base`` of the scores times ``factor``
    (2 and log2(e) when right); sm_scale left out; keys past the end scored ``pad_score`` (0 when the score mask is
    missing); the last key dropped; the causal rule ``causal(query, key)``, over the key blocks up to ``hi``
    ("diagonal": those that hold keys up to the block's last query; "before": those before its first); the running
    maximum started at ``m_start``, replaced by each block's own (not ``running``), or taken over the block's scores
    before the mask set any to -inf (``max_before_mask``: a padding key scores 0, its K row loaded as 0)."""

    def attend(q, k, v, block_m, block_n):
        n_q, head_dim = q.shape
        n_k = k.shape[0] - (1 if drop_last_key else 0)
        out = torch.empty(n_q, v.shape[1])
        for start_m in range(0, n_q, block_m):
            rows = torch.arange(start_m, min(start_m + block_m, n_q))
            m, l = torch.full((len(rows),), m_start), torch.zeros(len(rows))
            acc = torch.zeros(len(rows), v.shape[1])
            end = k.shape[0]
            if causal is not None:
                end = min(start_m + block_m, k.shape[0]) if hi == "diagonal" else start_m
            for start_n in range(0, end, block_n):
                keys = torch.arange(start_n, start_n + block_n)
                inside = keys < k.shape[0]
                kb = torch.zeros(block_n, head_dim)
                vb = torch.zeros(block_n, v.shape[1])
                kb[inside], vb[inside] = k[keys[inside]], v[keys[inside]]
                s = q[rows] @ kb.T * ((1.0 / math.sqrt(head_dim)) if scaled else 1.0) * factor
                valid = (keys < n_k)[None, :].expand(len(rows), -1)
                if causal is not None:
                    valid = valid & causal(rows[:, None], keys[None, :])
                if pad_score is not None:
                    valid = valid | ~inside[None, :]
                    s = torch.where(inside[None, :], s, torch.full_like(s, pad_score))
                raw = s
                s = s.masked_fill(~valid, NEG_INF)
                block_max = (raw if max_before_mask else s).amax(dim=1)
                m_new = torch.maximum(m, block_max) if running else block_max
                p = torch.pow(base, s - m_new[:, None])
                alpha = torch.pow(base, m - m_new)
                l = (l * alpha if rescale_l else l) + p.sum(dim=1)
                acc = (acc * alpha[:, None] if rescale_acc else acc) + p @ vb
                m = m_new
            out[rows] = acc / l[:, None]
        return out

    return attend


def _attention_variants(causal: bool) -> tuple[Variant, ...]:
    rule = (lambda i, j: j <= i) if causal else None
    common = (
        Variant(
            "the running output acc was not rescaled when the maximum grew: like l, it holds terms computed against "
            "the old maximum, and must shrink by alpha = exp2(m - m_new) before the block's P V is added.",
            _kernel_loop(rescale_acc=False, causal=rule),
        ),
        Variant(
            "the running sum l was not rescaled when the maximum grew (acc was): its terms were computed against the "
            "old maximum, and must shrink by the same alpha = exp2(m - m_new) as acc before the block's sum is added.",
            _kernel_loop(rescale_l=False, causal=rule),
        ),
        Variant(
            "neither l nor acc was rescaled when the maximum grew: both hold terms computed against the old maximum. "
            "Multiply both by alpha = exp2(m - m_new) before adding the block's.",
            _kernel_loop(rescale_l=False, rescale_acc=False, causal=rule),
        ),
        Variant(
            "tl.exp2 was used without the factor log2(e): the scores must be multiplied by sm_scale * log2(e) "
            "(1.4426950408889634) before exp2, since exp(s) = exp2(s * log2(e)); without it this is the softmax of "
            "the scores times ln(2).",
            _kernel_loop(factor=1.0, causal=rule),
        ),
        Variant(
            "the scores were multiplied by log2(e) but given to tl.exp: the factor log2(e) belongs with tl.exp2, "
            "exp(s) = exp2(s * log2(e)).",
            _kernel_loop(base=math.e, causal=rule),
        ),
        Variant(
            "the scores were not multiplied by sm_scale (1 / sqrt(HEAD_DIM)), so every score is too large by "
            "sqrt(HEAD_DIM) and the weights too sharp.",
            _kernel_loop(scaled=False, causal=rule),
        ),
        Variant(
            "the running maximum m did not start at -inf: it started at 0 (or another number above every score of a "
            "query), so for a query whose scores are all far below that (about -400 here) every exp2(s - m_new) "
            "underflows to 0, l stays 0, and acc / l is 0 / 0 = NaN. Before the first block no score has been read: "
            "the maximum must start below every possible score.",
            _kernel_loop(m_start=0.0, causal=rule),
        ),
        Variant(
            "each block's own maximum replaced the running maximum: while the scores rise from block to block that "
            "is harmless, but when a block's maximum is below an earlier one, alpha = exp2(m - m_new) is above 1, and "
            + (
                "far below (a key 100 above the rest in an earlier block here, or a query the mask hides a whole block "
                "from: its maximum there is -inf) "
                if causal
                else "far below (a key 100 above the rest in an earlier block here) "
            )
            + "it overflows to inf or is NaN. The running maximum can only grow: it is the larger of the old one and "
            "the block's.",
            _kernel_loop(running=False, causal=rule),
        ),
    )
    if causal:
        below = rule
        return common + (
            Variant(
                "the diagonal is off by one, one key too few: a query may not attend to its own key, and the first "
                "query sees no key at all. Query i may attend key j when j <= i.",
                _kernel_loop(causal=lambda i, j: j < i),
            ),
            Variant(
                "the diagonal is off by one, one key too many: each query also attends to the key right after it, "
                "one step into the future. Query i may attend key j when j <= i.",
                _kernel_loop(causal=lambda i, j: j <= i + 1),
            ),
            Variant(
                "no mask inside the tiles the diagonal crosses: the loop stops after the key block of the block's "
                "last query, but within that block each query also sees the keys after it. Inside the tiles the "
                "diagonal crosses, a key after its query must get score -inf.",
                _kernel_loop(causal=lambda i, j: j >= 0),
            ),
            Variant(
                "the loop over key blocks stops before the block of the program's first query: the keys from there "
                "up to each query itself are never read (the first block of queries reads none at all). The loop "
                "must go on to the key block that holds the program's last query, and mask inside it.",
                _kernel_loop(causal=below, hi="before"),
            ),
            Variant(
                "no causal mask at all: every query attends to every key, the future ones included.",
                _kernel_loop(),
            ),
        )
    return common + (
        # Not for the causal kernel: there a future key's score counts in such a maximum, and on the test case with
        # random scores in the hundreds some query's own scores are 126 to 150 below it in base 2, where exp2 gives a
        # subnormal number or 0 depending on the machine's NumPy (so whether the kernel gives NaN there does too).
        Variant(
            "the block's maximum was taken over the scores before the mask set any of them to -inf: a key past "
            "n_keys (its K row loaded as 0, so its score is 0) then counts in the maximum though it gets no weight, "
            "and for a query whose own scores are all far below 0 (about -400 here), every exp2(s - m_new) "
            "underflows to 0, l stays 0, and acc / l is 0 / 0 = NaN. The maximum must be taken over the scores after "
            "the mask.",
            _kernel_loop(max_before_mask=True),
        ),
        Variant(
            "keys past n_keys got weight: their K rows were loaded as 0 (the load was masked), so their score is "
            "0, not -inf, and exp2(0 - m) is not 0. A key past the end must get score -inf, whatever its K row holds.",
            _kernel_loop(pad_score=0.0),
        ),
        Variant(
            "the mask stops one key early and leaves out the last key: the keys are 0 to n_keys - 1, every one of "
            "them real.",
            _kernel_loop(drop_last_key=True),
        ),
    )


def _attention_exercise(causal: bool) -> Exercise:
    name = "causal_attention_kernel" if causal else "attention_kernel"
    return Exercise(
        name=name,
        lesson=LESSON_FORWARD,
        params=("q", "k", "v", "block_m", "block_n"),
        returns=(("n_queries", "head_dim"),),
        reference=_causal_attention if causal else _attention,
        make_cases=lambda: _attention_kernel_cases(causal),
        units=(QUERIES,),
        launch=launch_attention,
        variants=_attention_variants(causal),
        large_note="This test case has large inputs: scores in the hundreds, or about -400, or one key 100 above the "
        "rest. exp of a score is inf in float32 above about 88 and 0 below about -104, so inf / inf or 0 / 0 gives "
        "NaN: every exponent must be at most 0, a score minus a maximum at least as large (s - m_new), or an old "
        "maximum minus the new one (m - m_new), and a query's largest score must give exp2(0) = 1.",
        nan_note=KERNEL_NAN_NOTE,
        hint=(
            (
                "Which key blocks can hold a key that one of this program's queries may see? (Its last query is "
                "start_m + BLOCK_M - 1.) Inside a block, which (query, key) pairs must get -inf?"
                if causal
                else "This program's queries against every key, BLOCK_N keys at a time: the loop body is the "
                "lesson's tiled_forward step, written with loads. Which loads can reach past the last key, and "
                "what must those keys' scores be?"
            ),
            "Per block of keys: keys = start_n + 0 .. BLOCK_N - 1; load K^T as (HEAD_DIM, BLOCK_N) and V as "
            "(BLOCK_N, HEAD_DIM), masked where keys >= n_keys; s = (q K^T) sm_scale log2(e), -inf where a key is "
            + ("past n_keys or after the query (key > query)" if causal else "past n_keys")
            + "; m_new = max(m, rowmax(s)); p = 2^(s - m_new); alpha = 2^(m - m_new); l = l alpha + rowsum(p); "
            "acc = acc alpha + p V."
            + (" The loop can stop after the block that holds the program's last query." if causal else ""),
            "In the loop `for start_n in range(0, "
            + ("tl.minimum(start_m + BLOCK_M, n_keys)" if causal else "n_keys")
            + ", BLOCK_N)`: `keys = start_n + tl.arange(0, BLOCK_N)`; `k_t = tl.load(K + keys[None, :] * stride_k + "
            "dims[:, None], mask=keys[None, :] < n_keys, other=0.0)`, and V as (BLOCK_N, HEAD_DIM); `s = "
            "tl.where(allowed, tl.dot(q, k_t) * (sm_scale * 1.4426950408889634), float('-inf'))` with allowed "
            + (
                "`(keys[None, :] < n_keys) & (keys[None, :] <= rows[:, None])`"
                if causal
                else "`keys[None, :] < n_keys`"
            )
            + "; then `m_new = tl.maximum(m, tl.max(s, 1))`, `p = tl.exp2(s - m_new[:, None])`, `alpha = "
            "tl.exp2(m - m_new)`, `l = l * alpha + tl.sum(p, 1)`, `acc = acc * alpha[:, None] + tl.dot(p, v)`, "
            "`m = m_new`.",
        ),
    )


ATTENTION_KERNEL = _attention_exercise(causal=False)
CAUSAL_ATTENTION_KERNEL = _attention_exercise(causal=True)


# --------------------------------------------------------------------------------------------
# dv_kernel (Triton, under the interpreter): the backward's dV, keys outside
# --------------------------------------------------------------------------------------------


def _dv_cases() -> list[Case]:
    g = generator(98)
    head_dim = 16

    def case(description, tags, n_q, n_k, block_m, block_n, causal, scale=1.0) -> Case:
        q, k = scale * randn(g, n_q, head_dim), scale * randn(g, n_k, head_dim)
        d_out = randn(g, n_q, head_dim)
        s = q.double() @ k.double().T / math.sqrt(head_dim)
        if causal:
            s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool).triu(1), NEG_INF)
        lse = torch.logsumexp(s, dim=1).float()  # what the forward saved: natural log, over the keys each query sees
        return Case(description, (q, k, d_out, lse, block_m, block_n, causal), tags)

    return [
        case("32 queries, 32 keys, head_dim 16, BLOCK_M 16, BLOCK_N 16, not causal: full blocks", kinds(UNPADDED),
             32, 32, 16, 16, False),
        case("40 queries, 24 keys, BLOCK_M 16, BLOCK_N 16, not causal: the last query block holds 8 queries of 16, "
             "the last key block 8 keys", kinds(PADDED), 40, 24, 16, 16, False),
        case("48 queries and keys, causal, BLOCK_M 16, BLOCK_N 16: full blocks", kinds(UNPADDED), 48, 48, 16, 16,
             True),
        case("48 queries and keys, causal, BLOCK_M 32, BLOCK_N 16: the last query block holds 16 of 32, and key "
             "block 1 (keys 16 to 31) starts inside query block 0", kinds(PADDED), 48, 48, 32, 16, True),
        case("40 queries and keys, causal, BLOCK_M 16, BLOCK_N 32: the last query block holds 8, the last key block "
             "8 of 32", kinds(PADDED), 40, 40, 16, 32, True),
        case("one query and one key, causal, BLOCK_M 16, BLOCK_N 16", kinds(ONE, PADDED), 1, 1, 16, 16, True),
        case("48 queries and keys, causal, BLOCK_M 16, BLOCK_N 16, scores in the hundreds (exp of a score "
             "overflows)", kinds(LARGE, UNPADDED), 48, 48, 16, 16, True, scale=6.0),
    ]  # fmt: skip


def _dv(q, k, d_out, lse, block_m, block_n, causal):
    """dV = P^T dO: the gradient that flows back to V through attention(q, k, v) (causal or not) from the output's
    gradient d_out, by autograd through naive_attention in float64 (V's values do not enter it); lse is not needed."""
    with torch.enable_grad():  # the checks compute references under no_grad
        v = torch.zeros(k.shape, dtype=torch.float64, requires_grad=True)
        naive_attention(q.double(), k.double(), v, is_causal=causal).backward(d_out.double())
    return v.grad.float()


def _dv_loop(p_rule="lse", scaled=True, pad_keys=True, lse_pad=0.0, transpose=True, accumulate=True,
             rule=lambda i, j: j <= i, loop="diagonal", mask_layout="p_t", guard=False):  # fmt: skip
    """What a dV kernel computes with one known mistake, block by block as it does (keys outside, BLOCK_M queries at a
    time, padding rows of Q and dO loaded as 0, in float32): P^T rebuilt by ``p_rule`` ("lse": exp2(s qk_scale -
    lse log2(e)); "lse_natural": lse not converted to base 2; "no_log2e": exp2(s sm_scale - lse); "exp_log2e": exp
    of the base-2 numbers; "tile": a softmax over the tile's keys, the padding keys masked if ``pad_keys``, and with
    ``guard`` weights 0, not NaN, for a query that sees none of the tile's keys); sm_scale
    left out; the padding queries' lse loaded as ``lse_pad``; P not transposed (P dO, which runs only when BLOCK_M ==
    BLOCK_N); dV set rather than added to (only the last query block counts); with causal, the mask ``rule(query,
    key)``, built for P and applied to P^T (``mask_layout`` "p"), over the query blocks ``loop``: "diagonal", from
    the block that holds the program's first key; "every", all of them; "block_number", from block number
    program_id; "forward", those up to the program's last key (the forward's bound)."""

    def dv_of(q, k, d_out, lse, block_m, block_n, causal):
        n_q, head_dim = q.shape
        n_k = k.shape[0]
        scale = 1.0 / math.sqrt(head_dim) if scaled else 1.0
        dv = torch.empty(n_k, head_dim)
        for program, start_n in enumerate(range(0, n_k, block_n)):
            keys = torch.arange(start_n, start_n + block_n)
            kb = torch.zeros(block_n, head_dim)
            kb[keys < n_k] = k[keys[keys < n_k]]
            acc = torch.zeros(block_n, head_dim)
            lo, hi = 0, n_q
            if causal and loop == "diagonal":
                lo = start_n // block_m * block_m
            elif causal and loop == "block_number":
                lo = program * block_m
            elif causal and loop == "forward":
                hi = min(start_n + block_n, n_q)
            for start_m in range(lo, hi, block_m):
                rows = torch.arange(start_m, start_m + block_m)
                real = rows < n_q
                qb, dob = torch.zeros(block_m, head_dim), torch.zeros(block_m, head_dim)
                lb = torch.full((block_m,), lse_pad)
                qb[real], dob[real], lb[real] = q[rows[real]], d_out[rows[real]], lse[rows[real]]
                s_t = kb @ qb.T * scale  # (BLOCK_N, BLOCK_M)
                allowed = torch.ones(block_n, block_m, dtype=torch.bool)
                if causal and mask_layout == "p":
                    allowed = rule(start_m + torch.arange(block_m)[:, None], start_n + torch.arange(block_n)[None, :])
                elif causal:
                    allowed = rule(rows[None, :], keys[:, None])
                if p_rule == "tile":
                    visible = allowed & ((keys < n_k)[:, None] if pad_keys else True)
                    p_t = torch.softmax(s_t.masked_fill(~visible, NEG_INF), dim=0)
                    p_t = torch.nan_to_num(p_t, nan=0.0) if guard else p_t  # NaN only where no key is visible
                else:
                    x = {"lse": (s_t * LOG2_E - lb[None, :] * LOG2_E, 2.0),
                         "lse_natural": (s_t * LOG2_E - lb[None, :], 2.0),
                         "no_log2e": (s_t - lb[None, :], 2.0),
                         "exp_log2e": (s_t * LOG2_E - lb[None, :] * LOG2_E, math.e)}[p_rule]  # fmt: skip
                    p_t = torch.where(allowed, torch.pow(x[1], x[0]), 0.0)
                contribution = p_t @ dob if transpose else p_t.T @ dob
                acc = acc + contribution if accumulate else contribution
            dv[start_n : start_n + block_n] = acc[: min(block_n, n_k - start_n)]
        return dv

    return dv_of


def _dv_variants() -> tuple[Variant, ...]:
    def tile(**changes):
        return tuple(_dv_loop(p_rule="tile", loop=loop, pad_keys=pad, guard=guard, **changes)
                     for loop in ("diagonal", "every") for pad in (True, False) for guard in (False, True))  # fmt: skip

    return (
        Variant(
            "P was recomputed as a softmax over the tile's keys (its own maximum and sum), not rebuilt from lse: the "
            "tile holds only BLOCK_N of each query's keys, so the weights sum to one over the wrong set. lse, the "
            "log-sum-exp over all the keys a query sees, is what makes P_ij = exp(s_ij - lse_i) exact in every tile.",
            *tile(),
        ),
        Variant(
            "lse was used as it came, in natural units, next to scores in base 2: the kernel's exponent is a score "
            "times sm_scale * log2(e) minus lse, but exp(s - lse) = exp2((s - lse) * log2(e)), so lse too must be "
            "multiplied by log2(e).",
            _dv_loop(p_rule="lse_natural"),
        ),
        Variant(
            "tl.exp2 was used without the factor log2(e), on the score times sm_scale minus lse: that is 2 to the "
            "power s - lse, not e to it. exp(z) = exp2(z * log2(e)), for the whole exponent.",
            _dv_loop(p_rule="no_log2e"),
        ),
        Variant(
            "the exponent was converted to base 2 (multiplied by log2(e)) and then given to tl.exp: the factor "
            "log2(e) belongs with tl.exp2, exp(z) = exp2(z * log2(e)).",
            _dv_loop(p_rule="exp_log2e"),
        ),
        Variant(
            "the scores were not multiplied by sm_scale (1 / sqrt(HEAD_DIM)): lse is the log-sum-exp of the scaled "
            "scores, so P = exp(s * sm_scale - lse) needs them scaled too.",
            _dv_loop(scaled=False),
        ),
        Variant(
            "P was not transposed: P dO adds each query's weights over keys to the rows of keys, and runs only when "
            "BLOCK_M equals BLOCK_N. Key j's dV gathers over the queries, dV_j = sum over i of P_ij dO_i: that is "
            "P^T dO, a (BLOCK_N, BLOCK_M) tile times a (BLOCK_M, HEAD_DIM) one.",
            _dv_loop(transpose=False),
        ),
        Variant(
            "dV keeps only the last block of queries: each block's product replaced the sum of the earlier ones "
            "instead of adding to it. dV_j sums over every query that sees key j.",
            _dv_loop(accumulate=False),
        ),
        Variant(
            "the padding queries of the last, partial block (past n_queries) got infinite weight: their lse was "
            "loaded as -inf, so exp2(s - lse) is inf, and inf times their dO rows (loaded as 0) is NaN. A padding "
            "query must add nothing: either its weights or its dO row must come out 0, and inf * 0 is not 0.",
            _dv_loop(lse_pad=NEG_INF),
        ),
        Variant(
            "no causal mask at all: P was rebuilt for the keys in a query's future too, where exp(s - lse) is not a "
            "weight at all (lse covers only the keys the query sees). Key j gets dV from the queries i >= j only.",
            _dv_loop(rule=lambda i, j: j >= 0, loop="every"),
        ),
        Variant(
            "the diagonal is off by one, one key too few: a query's weight on its own key was dropped. Query i sees "
            "key j when j <= i, so key i too.",
            _dv_loop(rule=lambda i, j: j < i),
            _dv_loop(rule=lambda i, j: j < i, loop="every"),
        ),
        Variant(
            "the diagonal is off by one, one key too many: each key also gets dV from the query just before it, "
            "which does not see it. Query i sees key j when j <= i.",
            _dv_loop(rule=lambda i, j: j <= i + 1),
            _dv_loop(rule=lambda i, j: j <= i + 1, loop="every"),
        ),
        Variant(
            "the loop over the queries took the forward's bound, in the wrong direction: it covers the query blocks "
            "up to this program's last key, whose queries come before (or at) these keys and mostly do not see them, "
            "and never reaches the queries after them, the ones that do. With the keys outside, the blocks to skip "
            "are the first ones: a key is seen by the queries at or after it.",
            _dv_loop(loop="forward"),
        ),
        Variant(
            "the loop over the queries starts at query block number program_id, as if a key block and a query block "
            "covered the same positions: right only when BLOCK_M equals BLOCK_N. The first query that sees this "
            "program's keys is the one at position start_n, in the query block that holds it.",
            _dv_loop(loop="block_number"),
        ),
        Variant(
            "the causal mask was built for P, (BLOCK_M, BLOCK_N) with queries down and keys across, and applied to "
            "P^T, (BLOCK_N, BLOCK_M) with keys down: it runs only when BLOCK_M equals BLOCK_N, and compares the "
            "wrong positions. In P^T, row a is key start_n + a and column b is query start_m + b.",
            _dv_loop(mask_layout="p"),
            _dv_loop(mask_layout="p", loop="every"),
        ),
    )


DV_KERNEL = Exercise(
    name="dv_kernel",
    lesson=LESSON_BACKWARD,
    params=("q", "k", "d_out", "lse", "block_m", "block_n", "causal"),
    returns=(("n_keys", "head_dim"),),
    reference=_dv,
    make_cases=_dv_cases,
    units=(KEYS,),
    launch=launch_dv,
    variants=_dv_variants(),
    large_note="This test case has large inputs: scores in the hundreds. exp of a score is inf in float32 above "
    "about 88, so exp(s) / exp(lse) is inf / inf = NaN: rebuild P in one step, with the exponent s * sm_scale - lse, "
    "which is at most 0.",
    nan_note=KERNEL_NAN_NOTE,
    hint=(
        "This program owns BLOCK_N keys and must visit every query that sees them. The forward saved, per query, "
        "what makes its weights exact without the other keys: which number, and in which units? With a causal mask, "
        "which queries see key start_n, and which block of queries holds the first of them?",
        "Per block of queries: rows = start_m + 0 .. BLOCK_M - 1, loads of Q, dO and LSE masked where rows >= "
        "n_queries (dO as 0); P^T = exp2(K Q^T * sm_scale * log2(e) - lse * log2(e)), a (BLOCK_N, BLOCK_M) tile; "
        "with CAUSAL, 0 where key > query, and the loop may start at the block that holds query start_n; "
        "dV += P^T dO.",
        "`lo = 0`, and under `if CAUSAL:` `lo = (start_n // BLOCK_M) * BLOCK_M`; in `for start_m in "
        "range(lo, n_queries, BLOCK_M)`: `rows = start_m + tl.arange(0, BLOCK_M)`; `q = tl.load(Q + rows[:, None] * "
        "stride_q + dims[None, :], mask=rows[:, None] < n_queries, other=0.0)`, dO likewise with stride_do, `lse = "
        "tl.load(LSE + rows, mask=rows < n_queries, other=0.0)`; `p_t = tl.exp2(tl.dot(k, tl.trans(q)) * sm_scale "
        "* 1.4426950408889634 - lse[None, :] * 1.4426950408889634)`; with CAUSAL `p_t = tl.where(keys[:, None] <= "
        "rows[None, :], p_t, 0.0)`; `dv += tl.dot(p_t, do)`.",
    ),
)

EXERCISES = (  # in the order of their notebooks: 08a's, then 08b's
    MERGE_SOFTMAX_STATES,
    CAUSAL_TILES,
    CAUSAL_BLOCK_UPDATE,
    SOFTMAX_KERNEL,
    ATTENTION_KERNEL,
    CAUSAL_ATTENTION_KERNEL,
    TILE_BACKWARD,
    BENCHMARK_MEDIAN,
    DV_KERNEL,
)
# The exercises of the notebook before the split, in its order (all still checked, under the same names).
FORMER_EXERCISES = tuple(
    e.name
    for e in (
        MERGE_SOFTMAX_STATES,
        CAUSAL_TILES,
        CAUSAL_BLOCK_UPDATE,
        TILE_BACKWARD,
        BENCHMARK_MEDIAN,
        SOFTMAX_KERNEL,
        ATTENTION_KERNEL,
        CAUSAL_ATTENTION_KERNEL,
    )
)
