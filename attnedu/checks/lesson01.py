"""Checks for the exercises of lesson 01 (the RNN bottleneck).

Every exercise has test cases with a batch of one, with and without padding, and with large inputs; the
known-wrong variants include an off-by-one in both directions. Inputs are chosen so that different mistakes
give different outputs: token ids are all different within a sentence and never equal the padding id 0,
states at padded positions are random numbers unlike any real state, and the sizes (batch, length, hidden)
differ from each other so that a transpose shows.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..masks import padding_mask
from .exercise import (
    LARGE,
    ONE,
    PADDED,
    UNPADDED,
    Case,
    Exercise,
    Layout,
    Variant,
    explicit_weights,
    generator,
    kinds,
    randn,
    tokens,
)

LESSON = "01_rnn_bottleneck"

# --------------------------------------------------------------------------------------------
# padding_mask
# --------------------------------------------------------------------------------------------


def _padding_mask_cases() -> list[Case]:
    return [
        Case("lengths [3, 5, 1], max_len 5", (torch.tensor([3, 5, 1]), 5), kinds(PADDED)),
        Case("lengths [2, 4] padded to max_len 6, longer than any sentence", (torch.tensor([2, 4]), 6), kinds(PADDED)),
        Case("one sentence of length 4, no padding", (torch.tensor([4]), 4), kinds(ONE, UNPADDED)),
        Case("one sentence of length 2 padded to max_len 5", (torch.tensor([2]), 5), kinds(ONE, PADDED)),
        Case("4 sentences of length 3, no padding", (torch.tensor([3, 3, 3, 3]), 3), kinds(UNPADDED)),
        Case(
            "long sentences: lengths [1000, 613, 1], max_len 1000",
            (torch.tensor([1000, 613, 1]), 1000),
            kinds(LARGE, PADDED),
        ),
    ]


def _mask_layout(args: tuple) -> tuple[Layout]:
    lengths, max_len = args
    return (Layout(positions=1, real=padding_mask(lengths, max_len)),)


PADDING_MASK = Exercise(
    name="padding_mask",
    lesson=LESSON,
    params=("lengths", "max_len"),
    returns=(("batch", "max_len"),),
    reference=padding_mask,
    make_cases=_padding_mask_cases,
    layout=_mask_layout,
    variants=(
        Variant(
            "the mask is inverted: it is True at the padding positions and False at the real tokens, in every row. In "
            "this course True means 'a real token, may attend'.",
            lambda lengths, max_len: torch.arange(max_len)[None, :] >= lengths[:, None],
        ),
        Variant(
            "off by one: each padded row has one True too many: position n, the first padding position of a sentence "
            "of length n, is marked real (a row without padding is right). Positions count from 0, so the real tokens "
            "of a sentence of length n are at positions 0 to n - 1.",
            lambda lengths, max_len: torch.arange(max_len)[None, :] <= lengths[:, None],
        ),
        Variant(
            "off by one: each row has one True too few: the last real word, at position n - 1 of a sentence of length "
            "n, is marked padding (a sentence of length 1 gets no True at all). Positions count from 0, so the real "
            "tokens of a sentence of length n are at positions 0 to n - 1, all n of them.",
            lambda lengths, max_len: torch.arange(max_len)[None, :] < lengths[:, None] - 1,
        ),
        Variant(
            "the mask is transposed: it has one row per position and one column per sentence, (max_len, batch). Row b "
            "of the mask is sentence b, and its column j is position j: the batch comes first.",
            lambda lengths, max_len: torch.arange(max_len)[:, None] < lengths[None, :],
        ),
        Variant(
            "the mask is only as long as the longest sentence, not max_len: the columns from the longest length up to "
            "max_len are missing (the case with lengths [2, 4] padded to max_len 6 shows it). A padded batch can be "
            "longer than its longest sentence: the mask has max_len columns whatever the lengths.",
            lambda lengths, max_len: torch.arange(int(lengths.max()))[None, :] < lengths[:, None],
        ),
    ),
    hint=(
        "Position j of sentence b is real when j < lengths[b]. Compare every position with every sentence's length "
        "at once, without a loop: broadcasting does it.",
        "A row of positions `torch.arange(max_len)`, shaped (1, max_len), against a column of lengths, (batch, 1): "
        "`<` between them broadcasts to (batch, max_len) and gives bools.",
        "`return torch.arange(max_len)[None, :] < lengths[:, None]`.",
    ),
)

# --------------------------------------------------------------------------------------------
# last_real_state
# --------------------------------------------------------------------------------------------


def _last_real_state(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """states (batch, src_len, hidden), lengths (batch,) -> (batch, hidden): h at position length - 1."""
    return states[torch.arange(states.shape[0]), lengths - 1]


def _last_real_state_cases() -> list[Case]:
    g = generator(1)
    return [
        Case(
            "4 sentences of lengths [3, 1, 4, 2] padded to 5",
            (randn(g, 4, 5, 3), torch.tensor([3, 1, 4, 2])),
            kinds(PADDED),
        ),
        Case("2 sentences of length 4, no padding", (randn(g, 2, 4, 6), torch.tensor([4, 4])), kinds(UNPADDED)),
        Case("one sentence of length 2 padded to 3", (randn(g, 1, 3, 2), torch.tensor([2])), kinds(ONE, PADDED)),
        Case("one sentence of length 5, no padding", (randn(g, 1, 5, 4), torch.tensor([5])), kinds(ONE, UNPADDED)),
        Case(
            "3 sentences of lengths [300, 17, 256] padded to 300, states around ±1000",
            (1000 * randn(g, 3, 300, 4), torch.tensor([300, 17, 256])),
            kinds(LARGE, PADDED),
        ),
    ]


LAST_REAL_STATE = Exercise(
    name="last_real_state",
    lesson=LESSON,
    params=("states", "lengths"),
    returns=(("batch", "hidden"),),
    reference=_last_real_state,
    make_cases=_last_real_state_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    variants=(
        Variant(
            "your output is the state at the last position of the padded batch, the same position for every sentence. "
            "For a sentence shorter than the batch that state has read padding, so the rows of the padded sentences "
            "are wrong; a sentence's context is its state after its own last real word.",
            lambda states, lengths: states[:, -1],
        ),
        Variant(
            "off by one: your output is the state one after the last real word, at the first padding position (for a "
            "sentence as long as the batch, a position that does not exist). Positions count from 0: a sentence of n "
            "words ends at position n - 1.",
            lambda states, lengths: states[torch.arange(states.shape[0]), lengths],
        ),
        Variant(
            "off by one: your output is the state one before the last real word, which has not read that word yet "
            "(and for a sentence of one word, position -1: the last padded position). Positions count from 0: a "
            "sentence of n words ends at position n - 1.",
            lambda states, lengths: states[torch.arange(states.shape[0]), lengths - 2],
        ),
        Variant(
            "your output is the state at position 0, after the first word only, for every sentence. The context "
            "vector of a forward encoder is its state after the last real word, the only one that has read the whole "
            "sentence.",
            lambda states, lengths: states[:, 0],
        ),
        Variant(
            "the axes are used in the wrong order: your output indexes the batch axis with the positions and the "
            "position axis with the batch index, as if states were (src_len, batch, hidden) (time-major, nn.GRU's "
            "default). Here states is batch-first, (batch, src_len, hidden): the first index picks the sentence, the "
            "second its position.",
            lambda states, lengths: states[lengths - 1, torch.arange(states.shape[0])],
        ),
        Variant(
            "your output has every sentence's state at every sentence's last position, (batch, batch, hidden): the "
            "batch indices and the positions were not paired. Only the pairs (sentence b, its own last position) are "
            "wanted, one state per sentence, (batch, hidden).",
            lambda states, lengths: states[:, lengths - 1],
        ),
    ),
    hint=(
        "Sentence b's last real word is at position lengths[b] - 1 (positions count from 0), a different position "
        "for each sentence: `states[:, lengths - 1]` would take every listed position for every sentence.",
        "Advanced indexing with two index tensors pairs them up: `x[rows, cols]` picks x[rows[0], cols[0]], "
        "x[rows[1], cols[1]], ... One index tensor runs over the batch, the other says which position.",
        "`return states[torch.arange(states.shape[0]), lengths - 1]`.",
    ),
)

# --------------------------------------------------------------------------------------------
# reverse_padded
# --------------------------------------------------------------------------------------------


def _reverse_padded(src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """src (batch, src_len) ids, lengths (batch,) -> (batch, src_len): real tokens reversed, padding kept at the end."""
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, :n].flip(0)
    return out


def _reverse_padded_cases() -> list[Case]:
    g = generator(2)

    def case(description: str, lengths: list[int], src_len: int, tags, vocab: int = 30) -> Case:
        return Case(description, (tokens(g, lengths, src_len, vocab), torch.tensor(lengths)), tags)

    return [
        case("3 sentences of lengths [4, 5, 2] padded to 6", [4, 5, 2], 6, kinds(PADDED)),
        case("2 sentences of lengths [3, 1] padded to 3", [3, 1], 3, kinds(PADDED)),
        case("one sentence of length 2 padded to 4", [2], 4, kinds(ONE, PADDED)),
        case("2 sentences of length 5, no padding", [5, 5], 5, kinds(UNPADDED)),
        case("one sentence of length 3, no padding", [3], 3, kinds(ONE, UNPADDED)),
        case(
            "2 sentences of lengths [300, 129] padded to 300, token ids up to 50 000",
            [300, 129],
            300,
            kinds(LARGE, PADDED),
            vocab=50_000,
        ),
    ]


def _reverse_span(src: torch.Tensor, lengths: torch.Tensor, extra: int) -> torch.Tensor:
    """Reverse the first ``lengths + extra`` tokens of each row."""
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, : n + extra] = src[b, : n + extra].flip(0)
    return out


def _reverse_shifted(src: torch.Tensor, lengths: torch.Tensor, shift: int) -> torch.Tensor:
    """Position j < n gets token ``n - 1 - j + shift`` (raises where that leaves the row, as a learner's loop would)."""
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        index = n - 1 - torch.arange(n) + shift
        if int(index.max()) >= src.shape[1]:
            raise IndexError("index out of range")
        out[b, :n] = src[b, index]
    return out


def _reverse_layout(args: tuple) -> tuple[Layout]:
    src, lengths = args
    return (Layout(positions=1, real=padding_mask(lengths, src.shape[1]), words=("real tokens", "padding positions")),)


REVERSE_PADDED = Exercise(
    name="reverse_padded",
    lesson=LESSON,
    params=("src", "lengths"),
    returns=(("batch", "src_len"),),
    reference=_reverse_padded,
    make_cases=_reverse_padded_cases,
    layout=_reverse_layout,
    variants=(
        Variant(
            "the padding moved to the front: your output is each whole row reversed, padding included, so a padded "
            "row starts with its padding ids and its words are shifted right by as many places (rows without padding "
            "are right). Only the real tokens are reversed; the padding stays at the end of the row.",
            lambda src, lengths: src.flip(1),
        ),
        Variant(
            "your output has the sentences of the batch in reverse order (the batch axis, dim 0, was reversed), each "
            "sentence's words unchanged. The words are reversed within each sentence, along the positions, up to its "
            "length.",
            lambda src, lengths: src.flip(0),
        ),
        Variant(
            "off by one: the last real word stayed where it was and only the words before it were reversed, in every "
            "sentence longer than one word. All n real tokens of a sentence of length n take part: its first position "
            "gets its last real word.",
            lambda src, lengths: _reverse_span(src, lengths, -1),
        ),
        Variant(
            "off by one: one token too many was reversed, so the first padding token moved to the front of each "
            "padded sentence and its words moved one place to the right (a sentence without padding has no token "
            "after it, and is right). Exactly the n real tokens of a sentence of length n are reversed.",
            lambda src, lengths: _reverse_span(src, lengths, +1),
        ),
        Variant(
            "off by one: position j got token n - j, one place too far along: the first real position got the first "
            "padding token, and every word is one place off. Counting positions from 0, position j of a sentence of n "
            "words gets token n - 1 - j.",
            lambda src, lengths: _reverse_shifted(src, lengths, +1),
        ),
        Variant(
            "off by one: position j got token n - 2 - j, one place too early: the last real position got the token at "
            "index -1, the end of the row, and every word is one place off. Counting positions from 0, position j of "
            "a sentence of n words gets token n - 1 - j.",
            lambda src, lengths: _reverse_shifted(src, lengths, -1),
        ),
    ),
    hint=(
        "Only the real tokens move; the padding stays at the end of each row. Each sentence has its own length, so "
        "a loop over the batch is fine here.",
        "For row b with n = lengths[b] real tokens, the reversed row is `src[b, :n].flip(0)` followed by the row's "
        "padding, which is already in place in a copy of `src`.",
        "`out = src.clone()`; `for b, n in enumerate(lengths.tolist()): out[b, :n] = src[b, :n].flip(0)`; `return "
        "out`.",
    ),
)

# --------------------------------------------------------------------------------------------
# bidirectional_summary: the fixed vector of a bidirectional encoder (a case the lesson did not show)
# --------------------------------------------------------------------------------------------


def _bidirectional_summary(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """states (batch, src_len, 2 * hidden), forward features first; lengths (batch,) -> (batch, 2 * hidden):
    [forward state at position length - 1 ; backward state at position 0], what a bidirectional nn.GRU's h_n holds
    (``attnedu.models.Encoder``'s summary)."""
    hidden = states.shape[-1] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1, :hidden]
    backward = states[:, 0, hidden:]
    return torch.cat([forward, backward], dim=-1)


def _gru_outputs(g: torch.Generator, lengths: list[int], src_len: int, emb: int, hidden: int) -> torch.Tensor:
    """What a bidirectional GRU returns for a padded batch: pack, run, pad back (zeros at padding)."""
    with torch.random.fork_rng(devices=[]):  # the constructor draws from the global RNG: leave it as it was
        rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
    explicit_weights(g, rnn)
    with torch.no_grad():
        embedded = randn(g, len(lengths), src_len, emb)
        packed = pack_padded_sequence(embedded, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
        out, _ = rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src_len)
    return states


def _bidirectional_summary_cases() -> list[Case]:
    g = generator(7)

    def case(description: str, lengths: list[int], src_len: int, hidden: int, tags, scale: float = 1.0) -> Case:
        return Case(description, (scale * randn(g, len(lengths), src_len, 2 * hidden), torch.tensor(lengths)), tags)

    lengths = [3, 5, 1, 4]
    real = Case(
        "the outputs of a bidirectional nn.GRU (packed, then padded back) for lengths [3, 5, 1, 4], hidden 3: "
        "zeros at the padded positions",
        (_gru_outputs(g, lengths, 5, emb=2, hidden=3), torch.tensor(lengths)),
        kinds(PADDED),
    )
    return [
        case("3 sentences of lengths [4, 2, 3] padded to 5, hidden 3", [4, 2, 3], 5, 3, kinds(PADDED)),
        real,
        case("2 sentences of length 4, no padding, hidden 2", [4, 4], 4, 2, kinds(UNPADDED)),
        case("one sentence of length 3 padded to 6, hidden 4", [3], 6, 4, kinds(ONE, PADDED)),
        case("one sentence of length 3, no padding, hidden 2", [3], 3, 2, kinds(ONE, UNPADDED)),
        case(
            "2 sentences of lengths [300, 77] padded to 300, hidden 2, states around ±1000",
            [300, 77],
            300,
            2,
            kinds(LARGE, PADDED),
            scale=1000.0,
        ),
    ]


def _halves(states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    hidden = states.shape[-1] // 2
    return states[..., :hidden], states[..., hidden:]


def _at(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(batch, src_len, features), (batch,) positions -> (batch, features)."""
    return states[torch.arange(states.shape[0]), positions]


def _summary_from(forward_at, backward_at, swap: bool = False):
    """A summary that takes the forward half at ``forward_at(states, lengths)`` and the backward half at
    ``backward_at(...)`` (positions, (batch,)); ``swap`` puts the backward half first."""

    def summary(states, lengths):
        forward, backward = _halves(states)
        parts = [_at(forward, forward_at(states, lengths)), _at(backward, backward_at(states, lengths))]
        return torch.cat(parts[::-1] if swap else parts, dim=-1)

    return summary


def _last_real(states, lengths):
    return lengths - 1


def _first(states, lengths):
    return torch.zeros_like(lengths)


def _last_padded(states, lengths):
    return torch.full_like(lengths, states.shape[1] - 1)


def _bidirectional_layout(args: tuple) -> tuple[Layout]:
    return (Layout(halves=("the forward direction", "the backward direction")),)


BIDIRECTIONAL_SUMMARY = Exercise(
    name="bidirectional_summary",
    lesson=LESSON,
    params=("states", "lengths"),
    returns=(("batch", "2 * hidden"),),
    reference=_bidirectional_summary,
    make_cases=_bidirectional_summary_cases,
    gradients=True,  # it takes part in training: gradients must flow through it
    layout=_bidirectional_layout,
    variants=(
        Variant(
            "your output takes both halves from the last position of the padded batch, the same for every sentence. "
            "For a shorter sentence the forward state there has read padding, and the backward direction ends at "
            "position 0, not at the end, so the backward half is wrong for every sentence. Each direction's final "
            "state is where it finished reading: the forward one at the last real word, the backward one at the first "
            "word.",
            _summary_from(_last_padded, _last_padded),
        ),
        Variant(
            "the forward half comes from the last position of the padded batch, which for a shorter sentence has read "
            "padding (the forward halves of the padded sentences are wrong). The forward direction finishes at each "
            "sentence's own last real word.",
            _summary_from(_last_padded, _first),
        ),
        Variant(
            "the backward half comes from the last position of the padded batch, where the backward direction has "
            "only begun reading (the second half is wrong for every sentence). It reads the sentence from its end to "
            "its start, so it has read the whole sentence only at position 0.",
            _summary_from(_last_real, _last_padded),
        ),
        Variant(
            "off by one: the forward half is the state one after the last real word, at a padding position (for a "
            "sentence as long as the batch, a position that does not exist). Positions count from 0: a sentence of n "
            "words ends at position n - 1.",
            _summary_from(lambda s, n: n, _first),
        ),
        Variant(
            "off by one: the forward half is the state one before the last real word, which has not read that word "
            "yet (for a sentence of one word, position -1: the last padded position). Positions count from 0: a "
            "sentence of n words ends at position n - 1.",
            _summary_from(lambda s, n: n - 2, _first),
        ),
        Variant(
            "the backward half was taken at the last real word, as for a forward encoder: both halves of your output "
            "come from each sentence's last real word, where the backward direction has read that word only. The "
            "backward direction has read the whole sentence only when it reaches position 0.",
            _summary_from(_last_real, _last_real),
        ),
        Variant(
            "the two halves are swapped: the backward state comes first. The forward direction's features are the "
            "first half of the last axis of states, and the summary keeps that order: forward, then backward.",
            _summary_from(_last_real, _first, swap=True),
        ),
        Variant(
            "the positions of the two directions are swapped: your forward half is from position 0 and your backward "
            "half from the last real word. The forward direction reads left to right and finishes at the last real "
            "word; the backward one finishes at position 0.",
            _summary_from(_first, _last_real),
        ),
        Variant(
            "your output is only the forward half, (batch, hidden): the backward direction's final state is missing. "
            "The summary of a bidirectional encoder has both directions side by side, forward then backward: (batch, "
            "2 * hidden).",
            lambda states, lengths: _at(_halves(states)[0], lengths - 1),
        ),
    ),
    hint=(
        "Each direction's final state sits where that direction finished reading: the forward one at the last real "
        "word, the backward one at the first word. Which half of the features belongs to which direction?",
        "Split the features: `hidden = states.shape[-1] // 2`; the first half is the forward direction. The forward "
        "half of sentence b is at position lengths[b] - 1 (pair a batch index with each position, as in exercise "
        "2); the backward half is at position 0 for every sentence.",
        "`forward = states[torch.arange(states.shape[0]), lengths - 1, :hidden]`; `backward = states[:, 0, "
        "hidden:]`; `return torch.cat([forward, backward], dim=-1)`.",
    ),
)

EXERCISES = (PADDING_MASK, LAST_REAL_STATE, REVERSE_PADDED, BIDIRECTIONAL_SUMMARY)
