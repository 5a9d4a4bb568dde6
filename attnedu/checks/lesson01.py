"""Checks for the exercises of lesson 01 (the RNN bottleneck)."""

from __future__ import annotations

import torch

from ..masks import padding_mask
from .engine import Case, Exercise, Variant, _generator, _randn, _tokens

LESSON = "01_rnn_bottleneck"


def _padding_mask_cases() -> list[Case]:
    return [
        Case("lengths [3, 5, 1], max_len 5", (torch.tensor([3, 5, 1]), 5)),
        Case("lengths [2, 2] padded to max_len 4, longer than any sentence", (torch.tensor([2, 2]), 4)),
        Case("one sentence of length 4, no padding", (torch.tensor([4]), 4)),
    ]


PADDING_MASK = Exercise(
    name="padding_mask",
    lesson=LESSON,
    params=("lengths", "max_len"),
    returns=(("batch", "max_len"),),
    reference=padding_mask,
    make_cases=_padding_mask_cases,
    variants=(
        Variant(
            "the mask is inverted: it is True at padding and False at real tokens. In this course True means "
            "'a real token, may attend'.",
            lambda lengths, max_len: torch.arange(max_len)[None, :] >= lengths[:, None],
        ),
        Variant(
            "off by one: each row has one True too many. Position j is real when j < length (positions count "
            "from 0), so use `<`, not `<=`.",
            lambda lengths, max_len: torch.arange(max_len)[None, :] <= lengths[:, None],
        ),
        Variant(
            "the mask is transposed: it has one row per position and one column per sentence. Put the batch "
            "first: `positions[None, :] < lengths[:, None]`.",
            lambda lengths, max_len: torch.arange(max_len)[:, None] < lengths[None, :],
        ),
        Variant(
            "max_len is ignored: the mask is only as long as the longest sentence, but a padded batch can be "
            "longer. Use `torch.arange(max_len)`.",
            lambda lengths, max_len: torch.arange(int(lengths.max()))[None, :] < lengths[:, None],
        ),
    ),
    hint="Compare a row of positions `torch.arange(max_len)` with a column of lengths: broadcasting a "
    "(1, max_len) tensor against a (batch, 1) tensor gives (batch, max_len), and `<` gives bools.",
)


def _last_real_state(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """states (batch, src_len, hidden), lengths (batch,) -> (batch, hidden): h at position length - 1."""
    return states[torch.arange(states.shape[0]), lengths - 1]


def _last_real_state_cases() -> list[Case]:
    g = _generator(1)
    return [
        Case("4 sentences of lengths [3, 1, 4, 2] padded to 5", (_randn(g, 4, 5, 3), torch.tensor([3, 1, 4, 2]))),
        Case("2 sentences of lengths [4, 2] padded to 4", (_randn(g, 2, 4, 6), torch.tensor([4, 2]))),
        Case("one sentence of length 1 padded to 3", (_randn(g, 1, 3, 2), torch.tensor([1]))),
    ]


LAST_REAL_STATE = Exercise(
    name="last_real_state",
    lesson=LESSON,
    params=("states", "lengths"),
    returns=(("batch", "hidden"),),
    reference=_last_real_state,
    make_cases=_last_real_state_cases,
    variants=(
        Variant(
            "you took the state at the last position of the padded batch (`states[:, -1]`). For a sentence "
            "shorter than the batch that state has read padding: use each sentence's own last position, "
            "`lengths - 1`.",
            lambda states, lengths: states[:, -1],
        ),
        Variant(
            "off by one: you took the state at position `lengths`, one after the last real word. Positions "
            "count from 0, so the last real word is at `lengths - 1`.",
            lambda states, lengths: states[torch.arange(states.shape[0]), lengths],
        ),
        Variant(
            "you indexed the axes in the wrong order, as if states were (src_len, batch, hidden) "
            "(time-major, nn.GRU's default). Here states is batch-first: (batch, src_len, hidden).",
            lambda states, lengths: states[lengths - 1, torch.arange(states.shape[0])],
        ),
        Variant(
            "`states[:, lengths - 1]` picks every sentence's state at every sentence's last position "
            "(batch x batch of them). Pair sentence b with its own position: "
            "`states[torch.arange(batch), lengths - 1]`.",
            lambda states, lengths: states[:, lengths - 1],
        ),
    ),
    hint="Advanced indexing with two index tensors pairs them up: `x[rows, cols]` picks x[rows[0], cols[0]], "
    "x[rows[1], cols[1]], ... One index tensor runs over the batch, the other says which position.",
)


def _reverse_padded(src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """src (batch, src_len) ids, lengths (batch,) -> (batch, src_len): real tokens reversed, padding kept at the end."""
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, :n].flip(0)
    return out


def _reverse_padded_cases() -> list[Case]:
    g = _generator(2)
    return [
        Case("3 sentences of lengths [4, 5, 2] padded to 6", (_tokens(g, [4, 5, 2], 6), torch.tensor([4, 5, 2]))),
        Case("2 sentences of lengths [3, 1] padded to 3", (_tokens(g, [3, 1], 3), torch.tensor([3, 1]))),
        Case("one sentence of length 2 padded to 4", (_tokens(g, [2], 4), torch.tensor([2]))),
    ]


def _reverse_all_but_last(src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, : n - 1] = src[b, : n - 1].flip(0)
    return out


def _reverse_from_length(src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, n - torch.arange(n)]
    return out


REVERSE_PADDED = Exercise(
    name="reverse_padded",
    lesson=LESSON,
    params=("src", "lengths"),
    returns=(("batch", "src_len"),),
    reference=_reverse_padded,
    make_cases=_reverse_padded_cases,
    variants=(
        Variant(
            "you reversed whole rows, padding included, so the padding moved to the front. Reverse only the "
            "first `lengths[b]` tokens of row b and leave the padding at the end.",
            lambda src, lengths: src.flip(1),
        ),
        Variant(
            "you reversed the order of the sentences in the batch (dim 0). Reverse the words within each "
            "sentence (dim 1), up to its length.",
            lambda src, lengths: src.flip(0),
        ),
        Variant(
            "off by one: the last real word stayed where it was. Reverse all `lengths[b]` real tokens, "
            "`row[:n]`, not `row[:n - 1]`.",
            _reverse_all_but_last,
        ),
        Variant(
            "off by one: position j should get token `n - 1 - j` (positions count from 0), but you took "
            "`n - j`, which starts with the first padding token.",
            _reverse_from_length,
        ),
    ),
    hint="A loop over the batch is fine here: for row b with n = lengths[b] real tokens, the reversed row is "
    "`src[b, :n].flip(0)` followed by the row's padding. Start from a copy, `out = src.clone()`.",
)
