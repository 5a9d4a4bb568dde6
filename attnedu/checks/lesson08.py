"""Checks for the exercises of lesson 08 (FlashAttention).

Here "padding" means what it means inside a FlashAttention kernel: a sequence whose length is not a multiple of
the block size, so that its last block is partial (a kernel pads it and masks the padding). Cases "with no
padding" have only full blocks. Rows are built so that the running maximum grows from one block to the next,
which is when a missing or wrong rescale shows; large inputs are scores in the hundreds, where exp overflows.
"""

from __future__ import annotations

import math

import torch

from ..flash import block_update, causal_tiles, online_softmax
from .exercise import LARGE, ONE, PADDED, UNPADDED, Case, Exercise, Variant, generator, kinds, randn

LESSON = "08_flash_attention"

# --------------------------------------------------------------------------------------------
# online_softmax
# --------------------------------------------------------------------------------------------


def _online_softmax_cases() -> list[Case]:
    g = generator(8)

    def rising(rows: int, n: int, spread: float = 2.0, offset: float = 0.0) -> torch.Tensor:
        """Random scores with an upward trend, so that later blocks raise the running maximum."""
        return offset + spread * randn(g, rows, n) + torch.linspace(0.0, 4.0, n)

    large = torch.cat([rising(1, 12, 30.0, 300.0), rising(1, 12, 30.0, -600.0)])
    return [
        Case("4 rows of 8 scores, blocks of 4 (two full blocks)", (rising(4, 8), 4), kinds(UNPADDED)),
        Case(
            "3 rows of 10 scores, blocks of 4: the last block holds only 2 scores (a partial block)",
            (rising(3, 10), 4),
            kinds(PADDED),
        ),
        Case("one row of 9 scores, blocks of 3", (rising(1, 9), 3), kinds(ONE, UNPADDED)),
        Case("one row of 7 scores, blocks of 5: the second block holds 2", (rising(1, 7), 5), kinds(ONE, PADDED)),
        Case("2 rows of 5 scores, blocks of 1 (one score at a time)", (rising(2, 5), 1), kinds(UNPADDED)),
        Case("3 rows of 6 scores, block_size 8: one partial block holds them all", (rising(3, 6), 8), kinds(PADDED)),
        Case(
            "2 rows of 12 scores around +300 and -600, blocks of 4, where exp overflows (or underflows to 0)",
            (large, 4),
            kinds(LARGE, UNPADDED),
        ),
    ]


def _blockwise(rescale, block_slice=lambda start, size: slice(start, start + size), last_start=None):
    """An online softmax whose rescale of the running sum and whose blocks can be wrong (the known mistakes)."""

    def softmax(scores, block_size):
        n = scores.shape[1]
        m = torch.full((scores.shape[0],), float("-inf"))
        l = torch.zeros(scores.shape[0])
        stop = n if last_start is None else last_start(n, block_size)
        for start in range(0, stop, block_size):
            block = scores[:, block_slice(start, block_size)]
            if block.shape[1] == 0:  # a block of block_size - 1 = 0 scores
                continue
            m_new = torch.maximum(m, block.max(dim=1).values)
            l = rescale(l, m, m_new) + torch.exp(block - m_new[:, None]).sum(dim=1)
            m = m_new
        return torch.exp(scores - m[:, None]) / l[:, None]

    return softmax


def _right(l, m, m_new):
    return l * torch.exp(m - m_new)


def _per_block(scores, block_size):
    return torch.cat([torch.softmax(b, dim=1) for b in scores.split(block_size, dim=1)], dim=1)


def _softmax_properties(args: tuple, got) -> str | None:
    """Each row of weights sums to one."""
    scores, _ = args
    if not isinstance(got, torch.Tensor) or got.shape != scores.shape or not got.is_floating_point():
        return None
    sums = got.sum(dim=1)
    if not bool(torch.isfinite(sums).all()) or torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        return None
    listed = ", ".join(f"{x:.4g}" for x in sums.tolist())
    return f"each row of weights must sum to one; yours sum to {listed}."


ONLINE_SOFTMAX = Exercise(
    name="online_softmax",
    lesson=LESSON,
    params=("scores", "block_size"),
    returns=(("rows", "n"),),
    reference=online_softmax,
    make_cases=_online_softmax_cases,
    properties=_softmax_properties,
    variants=(
        Variant(
            "the running sum was not rescaled when the maximum grew: the terms already in l were computed against "
            "the old maximum, so they are too large by exp(m_new - m_old). Multiply l by exp(m_old - m_new) before "
            "adding the new block's terms: `l = l * torch.exp(m - m_new) + ...`.",
            _blockwise(lambda l, m, m_new: l),
        ),
        Variant(
            "the running sum was rescaled the wrong way round, by exp(m_new - m_old), which is at least 1: the old "
            "terms must shrink when the maximum grows. Multiply by `torch.exp(m - m_new)` (old minus new).",
            _blockwise(lambda l, m, m_new: torch.where(l > 0, l * torch.exp(m_new - m), l)),  # l = 0 at first
        ),
        Variant(
            "each block was normalised on its own: the weights of every block sum to one, instead of the whole "
            "row. The blocks only build up the row's maximum and sum; divide the whole row by the final sum at the "
            "end.",
            _per_block,
        ),
        Variant(
            "each block stops one score short: `scores[:, start : start + block_size - 1]` leaves the last score "
            "of every block out of the maximum and the sum. A block is `scores[:, start : start + block_size]`.",
            _blockwise(_right, lambda start, size: slice(start, start + size - 1)),
        ),
        Variant(
            "each block reaches one score too far: `scores[:, start : start + block_size + 1]` overlaps the next "
            "block, so a score on every border is counted twice in the sum. A block is "
            "`scores[:, start : start + block_size]`.",
            _blockwise(_right, lambda start, size: slice(start, start + size + 1)),
        ),
        Variant(
            "the last, partial block was never read: a loop such as `range(0, n - block_size + 1, block_size)` "
            "stops before a block with fewer than block_size scores, so its scores are missing from the maximum "
            "and the sum. Loop with `range(0, n, block_size)`; slicing past the end just gives a shorter block.",
            _blockwise(_right, last_start=lambda n, size: n - size + 1),
        ),
    ),
    hint="Keep, per row, a running maximum `m` (start at -inf) and a running sum `l` (start at 0). For each block "
    "`b = scores[:, start : start + block_size]`: `m_new = torch.maximum(m, b.max(dim=1).values)`, then "
    "`l = l * torch.exp(m - m_new) + torch.exp(b - m_new[:, None]).sum(dim=1)`, then `m = m_new`. At the end, "
    "`torch.exp(scores - m[:, None]) / l[:, None]`.",
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
    lesson=LESSON,
    params=("n", "block_q", "block_k"),
    returns=(("query_blocks", "key_blocks"), ("query_blocks", "key_blocks")),
    output_names=("compute", "masked"),
    reference=causal_tiles,
    make_cases=_causal_tiles_cases,
    variants=(
        Variant(
            "the tiles were chosen by comparing block numbers (key block j <= query block i, and j == i for the "
            "mask), which is right only when block_q equals block_k. Compare positions instead: the tile's first "
            "key `j * block_k` with its last query, and its last key with its first query `i * block_q`.",
            _tiles_by_index,
        ),
        Variant(
            "one tile too many: a tile whose first key comes right after the block's last query is computed "
            "(`k_first <= q_last + 1`), though every key in it is in the future of every query. Compute a tile "
            "when `k_first <= q_last`.",
            _tiles_with(compute_rule=lambda kf, ql: kf <= ql + 1),
        ),
        Variant(
            "one tile too few: a tile whose first key is exactly the block's last query is skipped "
            "(`k_first < q_last`), but that query may attend to that key (j <= i includes j == i). Compute a tile "
            "when `k_first <= q_last`.",
            _tiles_with(compute_rule=lambda kf, ql: kf < ql),
        ),
        Variant(
            "every computed tile is marked for the mask. Only a tile the diagonal crosses (its last key after its "
            "first query) holds pairs to mask; the tiles below the diagonal need no mask at all.",
            _tiles_with(mask_rule=lambda kl, qf: torch.ones_like(kl > qf)),
        ),
        Variant(
            "a tile whose last key is exactly its first query is marked for the mask (`k_last >= q_first`), but "
            "key i and query i may attend to each other: nothing in it needs masking. Mask when `k_last > q_first`.",
            _tiles_with(mask_rule=lambda kl, qf: kl >= qf),
        ),
        Variant(
            "the ends of the last, partial blocks were not clamped to n: a block's last position is "
            "`min((i + 1) * block, n) - 1`, not `(i + 1) * block - 1`, so a partial key block was marked for the "
            "mask because of keys that do not exist.",
            _tiles_with(clamp=False),
        ),
    ),
    hint="Block i of queries starts at `i * block_q` and ends at `min((i + 1) * block_q, n) - 1`; the same for "
    "keys with block_k. `torch.arange(0, n, block_q)` gives every first position at once. A tile is computed when "
    "its first key is not after its last query, and masked when, in addition, its last key is after its first "
    "query. Build both (query_blocks, key_blocks) tables by broadcasting `[:, None]` against `[None, :]`.",
)


# --------------------------------------------------------------------------------------------
# block_update
# --------------------------------------------------------------------------------------------


def _block_update_cases() -> list[Case]:
    g = generator(18)

    def case(description, tags, block_q, block_k, head_dim, value_dim, real=None, first=False, scale=1.0) -> Case:
        q = scale * randn(g, block_q, head_dim)
        k, v = scale * randn(g, block_k, head_dim), randn(g, block_k, value_dim)
        valid = torch.arange(block_k) < (block_k if real is None else real)
        k, v = k * valid[:, None], v * valid[:, None]  # keys past the end of the sequence: zero rows (padding)
        m, l = torch.full((block_q,), float("-inf")), torch.zeros(block_q)
        acc = torch.zeros(block_q, value_dim)
        if not first:  # the state after an earlier tile of 3 keys
            earlier = scale * randn(g, 3, head_dim)
            m, l, acc = block_update(m, l, acc, q, earlier, randn(g, 3, value_dim), torch.ones(3, dtype=torch.bool))
        return Case(description, (m, l, acc, q, k, v, valid), tags)

    return [
        case("block_q 3, block_k 4, head_dim 5, value_dim 2, after an earlier tile", kinds(UNPADDED), 3, 4, 5, 2),
        case("the first tile (m = -inf, l = 0, acc = 0), block_q 4, block_k 3, head_dim 4, value_dim 3",
             kinds(UNPADDED), 4, 3, 4, 3, first=True),
        case("block_q 3, block_k 5, head_dim 4, value_dim 2; the last 2 keys are past the end (valid False)",
             kinds(PADDED), 3, 5, 4, 2, real=3),
        case("one query, block_k 4, head_dim 3, value_dim 2", kinds(ONE, UNPADDED), 1, 4, 3, 2),
        case("one query, block_k 3, head_dim 4, value_dim 3; the last key is past the end", kinds(ONE, PADDED),
             1, 3, 4, 3, real=2),
        case("the first tile, block_q 2, block_k 4, head_dim 2, value_dim 2; 3 keys past the end", kinds(PADDED),
             2, 4, 2, 2, real=1, first=True),
        case("block_q 2, block_k 3, head_dim 4, value_dim 2, scores in the hundreds, where exp overflows",
             kinds(LARGE, UNPADDED), 2, 3, 4, 2, scale=12.0),
    ]  # fmt: skip


def _update_with(rescale_l=True, rescale_acc=True, inverted=False, scale=True, use_valid=True, normalise=False,
                 p_against_old=False, return_old_m=False):  # fmt: skip
    """block_update with one known mistake switched on."""

    def update(m, l, acc, q_block, k_block, v_block, valid):
        scores = q_block @ k_block.T / (math.sqrt(q_block.shape[1]) if scale else 1.0)
        if use_valid:
            scores = scores.masked_fill(~valid[None, :], float("-inf"))
        m_new = torch.maximum(m, scores.max(dim=1).values)
        p = torch.exp(scores - (m if p_against_old else m_new)[:, None])
        alpha = torch.exp(m - m_new)
        if inverted:
            alpha = torch.where(torch.isfinite(m), torch.exp(m_new - m), torch.zeros_like(m))
        l_new = (alpha * l if rescale_l else l) + p.sum(dim=1)
        tile = torch.softmax(scores, dim=1) if normalise else p
        acc_new = (alpha[:, None] * acc if rescale_acc else acc) + tile @ v_block
        return (m if return_old_m else m_new), l_new, acc_new

    return update


BLOCK_UPDATE = Exercise(
    name="block_update",
    lesson=LESSON,
    params=("m", "l", "acc", "q_block", "k_block", "v_block", "valid"),
    returns=(("block_q",), ("block_q",), ("block_q", "value_dim")),
    output_names=("m", "l", "acc"),
    reference=block_update,
    make_cases=_block_update_cases,
    variants=(
        Variant(
            "the running output acc was not rescaled when the maximum grew: like l, it was summed against the old "
            "maximum. Multiply it by the same factor: `alpha[:, None] * acc + p @ v_block`, with "
            "`alpha = torch.exp(m - m_new)`.",
            _update_with(rescale_acc=False),
        ),
        Variant(
            "the running sum l was not rescaled when the maximum grew (the output acc was): "
            "`l_new = alpha * l + p.sum(dim=1)`, with `alpha = torch.exp(m - m_new)`.",
            _update_with(rescale_l=False),
        ),
        Variant(
            "neither the running sum l nor the running output acc was rescaled when the maximum grew: both were "
            "summed against the old maximum. Multiply both by `alpha = torch.exp(m - m_new)` before adding the tile.",
            _update_with(rescale_l=False, rescale_acc=False),
        ),
        Variant(
            "the rescale is the wrong way round, exp(m_new - m), which is at least 1: the old terms must shrink "
            "when the maximum grows. Use `alpha = torch.exp(m - m_new)` (old minus new).",
            _update_with(inverted=True),
        ),
        Variant(
            "the scores were not divided by sqrt(head_dim): `q_block @ k_block.T / math.sqrt(q_block.shape[1])`.",
            _update_with(scale=False),
        ),
        Variant(
            "keys marked invalid (past the end of the sequence) got weight. Set their scores to -inf (0 is not "
            "enough: exp(0 - m) is not 0) before the exponential: `scores.masked_fill(~valid[None, :], "
            "float('-inf'))`.",
            _update_with(use_valid=False),
        ),
        Variant(
            "the tile's weights were normalised within the tile (a softmax over its keys) before multiplying the "
            "values. The tile adds unnormalised exp(s - m_new) to acc; the one division by l happens at the very "
            "end, after the last tile.",
            _update_with(normalise=True),
        ),
        Variant(
            "the tile's weights were computed against the old maximum, one step late: "
            "`torch.exp(scores - m[:, None])`. Use the new one, `m_new`, for the tile as for the rescale.",
            _update_with(p_against_old=True),
        ),
        Variant(
            "the m you returned is the maximum from before this tile, one step early: return `m_new`, the larger "
            "of the old maximum and this tile's.",
            _update_with(return_old_m=True),
        ),
    ),
    hint="scores = `q_block @ k_block.T / math.sqrt(q_block.shape[1])`, with the invalid keys set to -inf; "
    "`m_new = torch.maximum(m, scores.max(dim=1).values)`; `p = torch.exp(scores - m_new[:, None])`; "
    "`alpha = torch.exp(m - m_new)` (0 on the first tile, where m is -inf); return `m_new`, "
    "`alpha * l + p.sum(dim=1)` and `alpha[:, None] * acc + p @ v_block`.",
)

EXERCISES = (ONLINE_SOFTMAX, BLOCK_UPDATE, CAUSAL_TILES)
