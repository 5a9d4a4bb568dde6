"""Lesson 01, 01_rnn_bottleneck: the galleries of ``padding_mask``, ``last_real_state``, ``reverse_padded`` and
``bidirectional_summary`` (CORRECT, MUTANTS, OFF_BY_ONE, KIND_MUTANTS, KINDS_NOT_APPLICABLE, BUGS, as
tests/galleries/__init__.py describes them).
"""

from __future__ import annotations

import torch

from attnedu.checks.exercise import LARGE, PADDED, UNPADDED
from attnedu.masks import padding_mask

from .common import GENERIC, batch_of_one

# --------------------------------------------------------------------------------------------
# Correct versions, written as a learner would
# --------------------------------------------------------------------------------------------


def learner_padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]


def learner_last_real_state(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1]


def learner_reverse_padded(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, :n] = src[b, :n].flip(0)
    return out


def learner_bidirectional_summary(states, lengths):
    hidden = states.shape[-1] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1, :hidden]
    return torch.cat([forward, states[:, 0, hidden:]], dim=-1)


def learner_bidirectional_summary_loop(states, lengths):
    hidden = states.shape[-1] // 2
    rows = [torch.cat([states[b, n - 1, :hidden], states[b, 0, hidden:]]) for b, n in enumerate(lengths.tolist())]
    return torch.stack(rows)


CORRECT = {
    "padding_mask": [learner_padding_mask, padding_mask],
    "last_real_state": [learner_last_real_state],
    "reverse_padded": [learner_reverse_padded],
    "bidirectional_summary": [learner_bidirectional_summary, learner_bidirectional_summary_loop],
}


# --------------------------------------------------------------------------------------------
# The mutant gallery: (exercise, mutant, a substring of the expected diagnosis)
# --------------------------------------------------------------------------------------------


# padding_mask
def mask_inverted(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]


def mask_off_by_one(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]


def mask_one_short(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None] - 1


def mask_transposed(lengths, max_len):
    return torch.arange(max_len)[:, None] < lengths[None, :]


def mask_ignores_max_len(lengths, max_len):
    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]


def mask_as_float(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).float()


def mask_loop_of_ones(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return mask


def mask_unsqueeze_in_place(lengths, max_len):
    lengths.unsqueeze_(1)
    return torch.arange(max_len)[None, :] < lengths


# last_real_state
def last_takes_padding(states, lengths):
    return states[:, -1]


def last_off_by_one(states, lengths):
    return states[torch.arange(states.shape[0]), lengths]


def last_one_early(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 2]


def last_time_major(states, lengths):
    return states[lengths - 1, torch.arange(states.shape[0])]


def last_all_pairs(states, lengths):
    return states[:, lengths - 1]


def last_keeps_dim(states, lengths):
    index = (lengths - 1)[:, None, None].expand(-1, 1, states.shape[2])
    return states.gather(1, index)


def last_decrements_lengths(states, lengths):
    lengths -= 1
    return states[torch.arange(states.shape[0]), lengths]


# reverse_padded
def reverse_whole_rows(src, lengths):
    return src.flip(1)


def reverse_batch(src, lengths):
    return src.flip(0)


def reverse_all_but_last(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, : n - 1] = src[b, : n - 1].flip(0)
    return out


def reverse_one_too_many(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, : n + 1] = src[b, : n + 1].flip(0)
    return out


def reverse_index_n_minus_j(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        for j in range(n):
            out[b, j] = src[b, n - j]
    return out


def reverse_in_place(src, lengths):
    for b in range(src.shape[0]):
        n = int(lengths[b])
        src[b, :n] = src[b, :n].flip(0)
    return src


def reverse_into_floats(src, lengths):
    out = torch.zeros(src.shape)
    for b in range(src.shape[0]):
        n = int(lengths[b])
        out[b, :n] = src[b, :n].flip(0)
    return out


# bidirectional_summary
def _bi(states, forward_positions, backward_positions):
    hidden = states.shape[-1] // 2
    rows = torch.arange(states.shape[0])
    return torch.cat([states[rows, forward_positions, :hidden], states[rows, backward_positions, hidden:]], dim=-1)


def bi_last_padded(states, lengths):
    return states[:, -1]


def bi_forward_at_end(states, lengths):
    return _bi(states, states.shape[1] - 1, 0)


def bi_backward_at_end(states, lengths):
    return _bi(states, lengths - 1, states.shape[1] - 1)


def bi_one_late(states, lengths):
    return _bi(states, lengths, 0)


def bi_one_early(states, lengths):
    return _bi(states, lengths - 2, 0)


def bi_backward_at_last_word(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1]


def bi_halves_swapped(states, lengths):
    return _bi(states, lengths - 1, 0).roll(states.shape[-1] // 2, dims=-1)


def bi_positions_swapped(states, lengths):
    return _bi(states, 0, lengths - 1)


def bi_forward_only(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1, : states.shape[-1] // 2]


def lrs_detached(states, lengths):
    return learner_last_real_state(states.detach(), lengths)  # the right vectors, cut off from the encoder


def bs_through_lists(states, lengths):
    return torch.tensor(learner_bidirectional_summary(states, lengths).tolist())


MUTANTS = [
    ("padding_mask", mask_inverted, "inverted"),
    ("padding_mask", mask_off_by_one, "one True too many"),
    ("padding_mask", mask_one_short, "one True too few"),
    ("padding_mask", mask_transposed, "transposed"),
    ("padding_mask", mask_ignores_max_len, "not max_len"),
    ("padding_mask", mask_as_float, "dtype torch.float32, expected torch.bool"),
    ("padding_mask", mask_loop_of_ones, "dtype torch.int64, expected torch.bool"),
    ("padding_mask", mask_unsqueeze_in_place, "modified its input `lengths` in place"),
    ("last_real_state", last_takes_padding, "the last position of the padded batch"),
    ("last_real_state", last_off_by_one, "one after the last real word"),
    ("last_real_state", last_one_early, "one before the last real word"),
    ("last_real_state", last_time_major, "axes are used in the wrong order"),
    ("last_real_state", last_all_pairs, "every sentence's state at every sentence's last position"),
    ("last_real_state", last_keeps_dim, "extra dimension of size 1"),
    ("last_real_state", last_decrements_lengths, "modified its input `lengths` in place"),
    ("reverse_padded", reverse_whole_rows, "padding moved to the front"),
    ("reverse_padded", reverse_batch, "sentences of the batch in reverse order"),
    ("reverse_padded", reverse_all_but_last, "the last real word stayed"),
    ("reverse_padded", reverse_one_too_many, "one token too many"),
    ("reverse_padded", reverse_index_n_minus_j, "got token n - j,"),
    ("reverse_padded", reverse_in_place, "modified its input `src` in place"),
    ("reverse_padded", reverse_into_floats, "expected torch.int64"),
    ("bidirectional_summary", bi_last_padded, "both halves from the last position"),
    ("bidirectional_summary", bi_forward_at_end, "forward half comes from the last position"),
    ("bidirectional_summary", bi_backward_at_end, "backward half comes from the last position"),
    ("bidirectional_summary", bi_one_late, "one after the last real word"),
    ("bidirectional_summary", bi_one_early, "one before the last real word"),
    ("bidirectional_summary", bi_backward_at_last_word, "backward half was taken at the last real word"),
    ("bidirectional_summary", bi_halves_swapped, "two halves are swapped"),
    ("bidirectional_summary", bi_positions_swapped, "positions of the two directions are swapped"),
    ("bidirectional_summary", bi_forward_only, "only the forward half"),
    ("last_real_state", lrs_detached, "no gradient flows back from your outputs to `states`"),
    ("bidirectional_summary", bs_through_lists, "no gradient flows back from your outputs to `states`"),
]


OFF_BY_ONE = {
    "padding_mask": (mask_off_by_one, mask_one_short),
    "last_real_state": (last_off_by_one, last_one_early),
    "reverse_padded": (reverse_one_too_many, reverse_all_but_last),
    "bidirectional_summary": (bi_one_late, bi_one_early),
}


# --------------------------------------------------------------------------------------------
# Mistakes that show on one kind of test case only
# --------------------------------------------------------------------------------------------


def pm_shortcut_without_padding(lengths, max_len):
    if bool((lengths == max_len).all()):
        return torch.ones(len(lengths), max_len)  # nothing is padded: all ones (but floats)
    return torch.arange(max_len)[None, :] < lengths[:, None]


def pm_int8_positions(lengths, max_len):
    return torch.arange(max_len).to(torch.int8)[None, :] < lengths[:, None]


def lrs_slice_without_padding(states, lengths):
    if bool((lengths == states.shape[1]).all()):
        return states[:, -1:]  # nothing is padded: the last state (but a slice keeps the axis)
    return states[torch.arange(states.shape[0]), lengths - 1]


def lrs_uint8_lengths(states, lengths):
    return states[torch.arange(states.shape[0]), lengths.to(torch.uint8).long() - 1]


def rp_shortcut_without_padding(src, lengths):
    if bool((lengths == src.shape[1]).all()):
        return src.flip(0)  # nothing is padded: flip (but along the batch)
    return learner_reverse_padded(src, lengths)


def rp_int16_ids(src, lengths):
    return learner_reverse_padded(src.to(torch.int16), lengths).long()


def bs_shortcut_without_padding(states, lengths):
    if bool((lengths == states.shape[1]).all()):
        return states[:, -1]  # nothing is padded: the last state (but that is not where the backward one ends)
    return learner_bidirectional_summary(states, lengths)


def bs_uint8_lengths(states, lengths):
    return learner_bidirectional_summary(states, lengths.to(torch.uint8).long())


KIND_MUTANTS = [
    *batch_of_one(CORRECT),
    ("padding_mask", pm_shortcut_without_padding, UNPADDED, "dtype torch.float32"),
    ("padding_mask", mask_off_by_one, PADDED, "one True too many"),
    ("padding_mask", pm_int8_positions, LARGE, "large inputs"),
    ("last_real_state", lrs_slice_without_padding, UNPADDED, "extra dimension of size 1"),
    ("last_real_state", last_takes_padding, PADDED, "the last position of the padded batch"),
    ("last_real_state", lrs_uint8_lengths, LARGE, "large inputs"),
    ("reverse_padded", rp_shortcut_without_padding, UNPADDED, "no padding"),
    ("reverse_padded", reverse_whole_rows, PADDED, "padding moved to the front"),
    ("reverse_padded", rp_int16_ids, LARGE, "large inputs"),
    ("bidirectional_summary", bs_shortcut_without_padding, UNPADDED, "no padding"),
    ("bidirectional_summary", bi_forward_at_end, PADDED, "forward half comes from the last position"),
    ("bidirectional_summary", bs_uint8_lengths, LARGE, "large inputs"),
]


KINDS_NOT_APPLICABLE: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------------------------
# The independent gallery: bugs written as a learner would, none copied from the mutants above or the checks' variants
# --------------------------------------------------------------------------------------------


def pm_loop_one_short(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b in range(len(lengths)):
        mask[b, : lengths[b] - 1] = True
    return mask


def pm_positions_from_one(lengths, max_len):
    positions = torch.arange(1, max_len + 1)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)


def pm_greater_than(lengths, max_len):
    return lengths.unsqueeze(1) >= torch.arange(max_len).unsqueeze(0)


def pm_no_broadcast(lengths, max_len):
    return torch.arange(max_len) < lengths


def pm_longest(lengths, max_len):
    longest = max(lengths.tolist())
    return torch.arange(longest).expand(len(lengths), longest) < lengths.view(-1, 1)


def pm_as_int(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).int()


def pm_python_lists(lengths, max_len):
    return torch.tensor([[1 if j < n else 0 for j in range(max_len)] for n in lengths.tolist()])


def pm_transposed_at_the_end(lengths, max_len):
    return (lengths[:, None] > torch.arange(max_len)[None, :]).T


def pm_strictly_after(lengths, max_len):
    return torch.arange(max_len).expand(len(lengths), -1) > lengths[:, None]


def lrs_list_comprehension(states, lengths):
    return torch.stack([states[b, lengths[b]] for b in range(states.shape[0])])


def lrs_gather(states, lengths):
    index = lengths.view(-1, 1, 1).expand(-1, 1, states.size(2))
    return states.gather(1, index).squeeze(1)


def lrs_first_length_for_all(states, lengths):
    return states[:, lengths[0] - 1]


def lrs_minus_one_in_place(states, lengths):
    idx = lengths
    idx -= 1
    return states[torch.arange(len(idx)), idx]


def lrs_time_major_transpose(states, lengths):
    time_major = states.transpose(0, 1)  # (src_len, batch, hidden)
    return time_major[torch.arange(states.shape[0]), lengths - 1]


def lrs_masked_sum(states, lengths):
    mask = torch.arange(states.shape[1])[None, :] < lengths[:, None]
    return (states * mask[:, :, None]).sum(dim=1)


def lrs_squeeze(states, lengths):
    return states[torch.arange(states.shape[0]), lengths - 1].squeeze()


def lrs_last_column(states, lengths):
    return states[torch.arange(len(lengths)), states.shape[1] - 1, :]


def rp_cat_wrong_order(src, lengths):
    rows = []
    for row, n in zip(src, lengths.tolist()):
        rows.append(torch.cat([row[n:], row[:n].flip(0)]))
    return torch.stack(rows)


def rp_flip_dim_one(src, lengths):
    out = src.clone()
    for b in range(len(lengths)):
        n = lengths[b]
        out[b, :n] = src[b, :n].flip(1)
    return out


def rp_whole_row_loop(src, lengths):
    out = torch.zeros_like(src)
    for b in range(src.shape[0]):
        out[b] = torch.flip(src[b], dims=[0])
    return out


def rp_slice_to_zero(src, lengths):
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, n:0:-1]
    return out


def rp_index_from_length(src, lengths):
    out = src.clone()
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, torch.arange(n, 0, -1)]
    return out


def rp_no_copy(src, lengths):
    out = src
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = torch.flip(src[b, :n], dims=[0])
    return out


def rp_shortest_length(src, lengths):
    n = int(lengths.min())
    out = src.clone()
    out[:, :n] = src[:, :n].flip(1)
    return out


def rp_longest_length(src, lengths):
    n = int(lengths.max())
    out = src.clone()
    out[:, :n] = src[:, :n].flip(1)
    return out


def rp_float_buffer(src, lengths):
    out = torch.zeros(src.shape)
    for b, n in enumerate(lengths.tolist()):
        out[b, :n] = src[b, :n].flip(0)
    return out


def rp_index_loop_n_minus_two(src, lengths):
    out = src.clone()
    for b in range(src.shape[0]):
        n = int(lengths[b])
        for j in range(n):
            out[b, j] = src[b, n - 2 - j]
    return out


def bs_both_at_last_word(states, lengths):
    half = states.shape[-1] // 2
    rows = torch.arange(states.shape[0])
    return torch.cat([states[rows, lengths - 1, :half], states[rows, lengths - 1, half:]], dim=-1)


def bs_forward_at_end(states, lengths):
    h = states.size(2) // 2
    return torch.cat((states[:, -1, :h], states[:, 0, h:]), dim=1)


def bs_forward_at_length(states, lengths):
    h = states.size(2) // 2
    forward = torch.stack([states[b, lengths[b], :h] for b in range(len(lengths))])
    return torch.cat([forward, states[:, 0, h:]], dim=-1)


def bs_backward_first(states, lengths):
    h = states.shape[2] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1][:, :h]
    backward = states[:, 0][:, h:]
    return torch.cat([backward, forward], dim=-1)


def bs_cat_on_batch(states, lengths):
    h = states.shape[2] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 1, :h]
    return torch.cat([forward, states[:, 0, h:]])


def bs_interleaved_view(states, lengths):
    batch, src_len, features = states.shape
    split = states.view(batch, src_len, features // 2, 2)  # as if the directions alternated
    forward = split[torch.arange(batch), lengths - 1, :, 0]
    backward = split[:, 0, :, 1]
    return torch.cat([forward, backward], dim=-1)


def bs_forward_features_twice(states, lengths):
    h = states.shape[-1] // 2
    last = states[torch.arange(states.shape[0]), lengths - 1]
    first = states[:, 0]
    return torch.cat([last[:, :h], first[:, :h]], dim=-1)


def bs_one_before(states, lengths):
    h = states.shape[-1] // 2
    forward = states[torch.arange(states.shape[0]), lengths - 2, :h]
    return torch.cat([forward, states[:, 0, h:]], dim=-1)


def bs_decrement_in_place(states, lengths):
    lengths.sub_(1)
    h = states.shape[-1] // 2
    return torch.cat([states[torch.arange(states.shape[0]), lengths, :h], states[:, 0, h:]], dim=-1)


BUGS = [
    ("padding_mask", pm_loop_one_short, "one True too few"),
    ("padding_mask", pm_positions_from_one, "one True too few"),
    ("padding_mask", pm_greater_than, "one True too many"),
    ("padding_mask", pm_no_broadcast, "raised RuntimeError"),
    ("padding_mask", pm_longest, "only as long as the longest sentence"),
    ("padding_mask", pm_as_int, "dtype torch.int32"),
    ("padding_mask", pm_python_lists, "dtype torch.int64"),
    ("padding_mask", pm_transposed_at_the_end, "transposed"),
    ("padding_mask", pm_strictly_after, GENERIC),
    ("last_real_state", lrs_list_comprehension, "one after the last real word"),
    ("last_real_state", lrs_gather, "one after the last real word"),
    ("last_real_state", lrs_first_length_for_all, GENERIC),
    ("last_real_state", lrs_minus_one_in_place, "modified its input `lengths` in place"),
    ("last_real_state", lrs_time_major_transpose, "axes are used in the wrong order"),
    ("last_real_state", lrs_masked_sum, GENERIC),
    ("last_real_state", lrs_squeeze, "wrong shape"),
    ("last_real_state", lrs_last_column, "the last position of the padded batch"),
    ("reverse_padded", rp_cat_wrong_order, "padding moved to the front"),
    ("reverse_padded", rp_flip_dim_one, "raised IndexError"),
    ("reverse_padded", rp_whole_row_loop, "padding moved to the front"),
    ("reverse_padded", rp_slice_to_zero, "raised ValueError"),
    ("reverse_padded", rp_index_from_length, "token n - j,"),
    ("reverse_padded", rp_no_copy, "modified its input `src` in place"),
    ("reverse_padded", rp_shortest_length, GENERIC),
    ("reverse_padded", rp_longest_length, GENERIC),
    ("reverse_padded", rp_float_buffer, "expected torch.int64"),
    ("reverse_padded", rp_index_loop_n_minus_two, "token n - 2 - j,"),
    ("bidirectional_summary", bs_both_at_last_word, "backward half was taken at the last real word"),
    ("bidirectional_summary", bs_forward_at_end, "forward half comes from the last position"),
    ("bidirectional_summary", bs_forward_at_length, "one after the last real word"),
    ("bidirectional_summary", bs_backward_first, "halves are swapped"),
    ("bidirectional_summary", bs_cat_on_batch, "the same sizes in another order"),
    ("bidirectional_summary", bs_interleaved_view, GENERIC),
    ("bidirectional_summary", bs_forward_features_twice, GENERIC),
    ("bidirectional_summary", bs_one_before, "one before the last real word"),
    ("bidirectional_summary", bs_decrement_in_place, "modified its input `lengths` in place"),
]
