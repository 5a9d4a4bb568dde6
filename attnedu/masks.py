"""Masks. One convention everywhere: a boolean mask is True where attention *may* look, as in
``torch.nn.functional.scaled_dot_product_attention``. Rows are queries, columns are keys.

Builders (lesson 06):

    padding_mask(lengths, max_len)                  (batch, max_len): real tokens
    causal_mask(query_len, key_len, align=...)      (query_len, key_len): no looking ahead
    causal_block(q_start, q_end, k_start, k_end)    one tile of the causal mask, for a tiled kernel (lesson 08)
    causal_padding_mask(lengths, max_len)           (batch, max_len, max_len): both at once
    sliding_window_mask(length, window)             (length, length): |i - j| <= window
    global_window_mask(length, window, global_positions)   Longformer: a window, plus global tokens
    prefix_lm_mask(prefix_lengths, lengths, max_len)        a prefix read both ways, the rest causal
    document_mask(document_ids)                     (batch, length, length): packed sequences, causal within each
    local_global_mask(is_global, window)            (batch, length, length): a window, plus each sentence's own
                                                    global tokens (Longformer with a global flag per token)

Converters to the other conventions, named after the PyTorch API they feed:

    to_mha_key_padding_mask(mask)   nn.MultiheadAttention's key_padding_mask: True = *blocked*
    to_mha_attn_mask(mask)          nn.MultiheadAttention's boolean attn_mask: True = *blocked*
    to_additive(mask)               a float mask added to the scores: 0 where allowed, -inf where blocked
    from_additive(mask)             back to the course's convention

Each function checks its arguments in one call at its top (the checks are at the end of this module), then builds the
mask; the package's own callers that already hold checked sizes use the unchecked ``_causal_block`` and
``_sliding_window_mask``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validate import (
    check_bool,
    check_bool_mask,
    check_choice,
    check_float,
    check_int,
    check_positive_int,
    check_tensor,
    describe,
)


def padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch,) lengths -> (batch, max_len) bool mask, True at real tokens, False at padding.

    >>> padding_mask(torch.tensor([3, 1]), 4)
    tensor([[ True,  True,  True, False],
            [ True, False, False, False]])
    """
    _check_padding_mask(lengths, max_len)
    return _padding_mask(lengths, max_len)


def _padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """padding_mask for lengths already checked."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def causal_mask(
    query_len: int, key_len: int | None = None, *, align: str | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """(query_len, key_len) bool: query i may attend key j only if j is not after it.

    With as many queries as keys (the usual case), query i sees keys 0..i. When the lengths differ the
    queries must be placed against the keys, and two placements are in use, so you must say which:

    * ``align="top-left"``: query i sees keys 0..i, as torch's ``is_causal=True`` (and this package's).
    * ``align="bottom-right"``: the queries are the *last* query_len positions, so query i sees keys
      0..i + (key_len - query_len). This is what decoding with a cache of earlier keys needs.
    """
    key_len = query_len if key_len is None else key_len
    _check_causal_mask(query_len, key_len, align)
    shift = key_len - query_len if align == "bottom-right" else 0
    return _causal_block(shift, shift + query_len, 0, key_len, device=device)


def causal_block(
    query_start: int, query_end: int, key_start: int, key_end: int, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """The causal rule for queries at positions query_start..query_end - 1 and keys at key_start..key_end - 1:
    (query_end - query_start, key_end - key_start) bool, True where key j is not after query i (j <= i).

    ``causal_mask`` is the block that starts at (0, 0); a tiled kernel (lesson 08) builds only the tiles the
    diagonal crosses, never the whole (query_len, key_len) mask.
    """
    _check_causal_block(query_start, query_end, key_start, key_end)
    return _causal_block(query_start, query_end, key_start, key_end, device=device)


def _causal_block(query_start: int, query_end: int, key_start: int, key_end: int, *, device=None) -> torch.Tensor:
    """causal_block for positions already checked."""
    queries = torch.arange(query_start, query_end, device=device)
    keys = torch.arange(key_start, key_end, device=device)
    return keys[None, :] <= queries[:, None]


def causal_padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch, max_len, max_len): query i of sentence b may attend key j if j <= i and j is a real token.

    Queries at padded positions keep at least key 0 (the first real token), so no row is empty; their
    outputs are padding and should be ignored by the loss.
    """
    return causal_mask(max_len)[None, :, :] & padding_mask(lengths, max_len)[:, None, :]


def sliding_window_mask(length: int, window: int, causal: bool = False) -> torch.Tensor:
    """(length, length): query i may attend key j if |i - j| <= window (and j <= i if ``causal``).

    Each query sees at most 2 * window + 1 keys, so the cost grows like length * window, not length^2.
    """
    length, window, causal = _check_sliding_window_mask(length, window, causal)
    return _sliding_window_mask(length, window, causal)


def _sliding_window_mask(length: int, window: int, causal: bool) -> torch.Tensor:
    """sliding_window_mask for arguments already checked."""
    positions = torch.arange(length)
    offset = positions[None, :] - positions[:, None]  # j - i
    allowed = offset.abs() <= window
    return allowed & (offset <= 0) if causal else allowed


def global_window_mask(length: int, window: int, global_positions: Sequence[int]) -> torch.Tensor:
    """Longformer-style (Beltagy et al. 2020): a sliding window for everyone, plus global tokens that attend
    to every position and that every position attends to (e.g. a classification token at position 0)."""
    length, window, positions = _check_global_window_mask(length, window, global_positions)
    mask = _sliding_window_mask(length, window, False)
    mask[positions, :] = True
    mask[:, positions] = True
    return mask


def prefix_lm_mask(prefix_lengths: torch.Tensor, lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(batch, max_len, max_len) bool, the mask of a prefix language model (Raffel et al. 2020; Dong et al. 2019's
    UniLM): the first prefix_lengths[b] tokens of sequence b are read both ways, the rest is written left to right.

    Query i may attend key j when key j is a real token (j < lengths[b]) and either j <= i (causal) or j is in the
    prefix (j < prefix_lengths[b]). A prefix of 0 gives ``causal_padding_mask``; a prefix as long as the sequence
    lets every real token see every other.
    """
    _check_prefix_lm_mask(prefix_lengths, lengths, max_len)
    real = _padding_mask(lengths, max_len)  # (batch, max_len)
    keys = torch.arange(max_len, device=lengths.device)
    in_prefix = keys[None, :] < prefix_lengths[:, None]  # (batch, key)
    visible = _causal_block(0, max_len, 0, max_len, device=lengths.device)[None] | in_prefix[:, None, :]
    return visible & real[:, None, :]


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """(batch, length) document ids -> (batch, length, length) bool: query i may attend key j if both belong to
    the same document and j <= i.

    Several short documents *packed* into one row of a batch (so that no compute is spent on padding) must not
    see each other: the mask is block-diagonal, causal inside each block (FlexAttention's "document masking";
    Krell et al. 2021). ``document_ids[b, t]`` names the document of token t; padding at the end of a row is
    simply one more document (give it its own id, e.g. -1): it sees only itself, and no real token sees it. No
    row is ever empty, since every token may attend to itself.

    >>> document_mask(torch.tensor([[0, 0, 1]])).int()
    tensor([[[1, 0, 0],
             [1, 1, 0],
             [0, 0, 1]]], dtype=torch.int32)
    """
    _check_document_mask(document_ids)
    length = document_ids.shape[1]
    same = document_ids[:, :, None] == document_ids[:, None, :]  # (batch, query, key)
    return same & _causal_block(0, length, 0, length, device=document_ids.device)[None]


def moved_by(mask: torch.Tensor, position: int) -> torch.Tensor:
    """(batch, query_len, key_len) bool mask, True = may attend, and a key position -> (batch, query_len) bool: the
    outputs of one attention layer with this mask that change when the input at ``position`` changes.

    Query i's output sum_j w_ij v_j depends on the input at ``position`` through its key and value when
    mask[b, i, position] is True, and through its own query when i == position (positions count from 0; the mask
    is square, queries and keys at the same positions). Every other output cannot move: lesson 06's intervention
    test. For a document mask (``document_mask``) that is the token itself and the later tokens of its document.

    >>> moved_by(document_mask(torch.tensor([[0, 0, 0, 1, 1]])), 1).int()
    tensor([[0, 1, 1, 0, 0]], dtype=torch.int32)
    """
    position = _check_moved_by(mask, position)
    itself = torch.arange(mask.shape[1], device=mask.device) == position  # (query_len,)
    return mask[:, :, position] | itself[None, :]


def local_global_mask(is_global: torch.Tensor, window: int) -> torch.Tensor:
    """(batch, length) bool, True at each sentence's global tokens -> (batch, length, length) bool: query i may
    attend key j if |i - j| <= window, or i is a global token, or j is one.

    ``global_window_mask`` with a different set of global tokens in every sentence, as Longformer uses for
    question answering (the question's tokens are global, Beltagy et al. 2020, Sec. 3.1) and as Hugging Face's
    ``global_attention_mask`` gives them: one flag per token.
    """
    window = _check_local_global_mask(is_global, window)
    local = _sliding_window_mask(is_global.shape[1], window, False).to(is_global.device)[None]
    return local | is_global[:, :, None] | is_global[:, None, :]


# --------------------------------------------------------------------------------------------
# Converters
# --------------------------------------------------------------------------------------------


def to_mha_key_padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """(batch, key_len) True = real token -> nn.MultiheadAttention's key_padding_mask, True = *ignore this key*."""
    _check_mask_dims(mask, 2, "(batch, key_len)")
    return ~mask


def to_mha_attn_mask(mask: torch.Tensor) -> torch.Tensor:
    """(query_len, key_len) True = may attend -> nn.MultiheadAttention's boolean attn_mask, True = *blocked*."""
    _check_mask_dims(mask, (2, 3), "(query_len, key_len) or (batch * heads, query_len, key_len), as "
                     "nn.MultiheadAttention takes")  # fmt: skip
    return ~mask


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """True = may attend -> a float mask to add to the scores: 0 where allowed, -inf where blocked."""
    _check_to_additive(mask, dtype)
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


def from_additive(mask: torch.Tensor) -> torch.Tensor:
    """A float mask added to the scores -> True = may attend. It must hold only 0 (allowed) and -inf (blocked).

    Anything else is refused rather than guessed at: a 0/1 float mask (1 = keep) would otherwise read as
    all allowed. A very negative finite value such as -1e9 or torch.finfo(dtype).min blocks a key as long as
    another key of its row is allowed (its weight underflows to exactly 0), but not always: a row with nothing
    allowed gets uniform weights instead of none, and two such masks added together (padding and causal, or a
    bias such as ALiBi's) can overflow finfo.min + finfo.min to -inf or shift the blocked scores. Use -inf, or
    build the mask as bools.
    """
    _check_from_additive(mask)
    return mask > float("-inf")


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _whole_numbers(name: str, x, dims: int, shape_doc: str, example: str) -> None:
    """Raise unless ``x`` is an integer tensor of ``dims`` dimensions (lengths, document ids)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} should be a {dims}-D integer torch.Tensor of shape {shape_doc}, got {describe(x)}; convert with "
            f"torch.tensor({name})"
        )
    check_tensor(name, x, dims, shape_doc)
    if x.dtype == torch.bool or x.is_floating_point() or x.is_complex():
        raise TypeError(
            f"{name} should hold whole numbers (an integer dtype such as torch.long), got dtype {x.dtype}; {example}"
        )


def _check_padding_mask(lengths, max_len) -> None:
    _whole_numbers(
        "lengths", lengths, 1, "(batch,)", "count the real tokens of each sentence, e.g. torch.tensor([3, 5])"
    )
    max_len = check_positive_int("max_len", max_len, "the padded length")
    if int(lengths.min()) < 1:
        bad = int(lengths.argmin())
        raise ValueError(
            f"lengths should be at least 1, got length {int(lengths[bad])} for sequence {bad}; empty sequences "
            "cannot be attended over (drop them from the batch)"
        )
    if int(lengths.max()) > max_len:
        bad = int(lengths.argmax())
        raise ValueError(
            f"lengths should be at most max_len={max_len}, got length {int(lengths[bad])} for sequence {bad}: "
            f"the padded batch is only {max_len} long; lengths must not exceed the padded length"
        )


def _check_causal_mask(query_len, key_len, align) -> None:
    check_positive_int("query_len", query_len, "the number of queries")
    check_positive_int("key_len", key_len, "the number of keys")
    if align is not None:
        check_choice("align", align, ("top-left", "bottom-right"))
    if align is None and query_len != key_len:
        raise ValueError(
            f"{query_len} queries against {key_len} keys: say how they line up. align='top-left' (query i sees "
            "keys 0..i, as torch's is_causal) or align='bottom-right' (the queries are the last positions, as "
            "when decoding with a cache)"
        )
    shift = key_len - query_len if align == "bottom-right" else 0
    _check_causal_block(shift, shift + query_len, 0, key_len)  # more queries than keys, bottom-right: refused


def _check_causal_block(query_start, query_end, key_start, key_end) -> None:
    for name, value in (("query_start", query_start), ("key_start", key_start)):
        check_int(name, value, "a position counted from 0", minimum=0)
    check_int("query_end", query_end, "one past the last query position", minimum=query_start + 1)
    check_int("key_end", key_end, "one past the last key position", minimum=key_start + 1)


def _check_sliding_window_mask(length, window, causal) -> tuple[int, int, bool]:
    length = check_positive_int("length", length, "the sequence length")
    window = check_int("window", window, "how many neighbours on each side", minimum=0)
    causal = check_bool("causal", causal, "whether query i may only attend keys j <= i")
    return length, window, causal


def _check_global_window_mask(length, window, global_positions) -> tuple[int, int, list[int]]:
    length, window, _ = _check_sliding_window_mask(length, window, False)
    if isinstance(global_positions, torch.Tensor):
        global_positions = global_positions.tolist()
    if isinstance(global_positions, (str, bytes)) or not isinstance(global_positions, Sequence):
        raise TypeError(
            f"global_positions should be a list of positions such as [0], got {describe(global_positions)}; "
            "wrap a single position in a list"
        )
    positions = [check_int("global position", p, "a position counted from 0") for p in global_positions]
    bad = [p for p in positions if not 0 <= p < length]
    if bad:
        raise ValueError(
            f"global positions should be in 0..{length - 1}, got {bad}, which are outside 0..{length - 1}; "
            "positions count from 0 (negative indices are not read from the end)"
        )
    return length, window, positions


def _check_prefix_lm_mask(prefix_lengths, lengths, max_len) -> None:
    _check_padding_mask(lengths, max_len)
    _whole_numbers(
        "prefix_lengths", prefix_lengths, 1, "(batch,)", "count each prefix's tokens, e.g. torch.tensor([2, 0])"
    )
    if prefix_lengths.shape != lengths.shape:
        raise ValueError(f"prefix_lengths should have one entry per sequence, shape {tuple(lengths.shape)} as "
                         f"lengths, got {describe(prefix_lengths)}")  # fmt: skip
    if bool((prefix_lengths < 0).any()) or bool((prefix_lengths > lengths).any()):
        raise ValueError(f"prefix_lengths should be between 0 and each sequence's length, got prefix_lengths "
                         f"{prefix_lengths.tolist()} for lengths {lengths.tolist()}")  # fmt: skip


def _check_document_mask(document_ids) -> None:
    example = "number the documents of each row, e.g. torch.tensor([[0, 0, 1, 1, 1]])"
    _whole_numbers("document_ids", document_ids, 2, "(batch, length)", example)


def _check_moved_by(mask, position) -> int:
    check_bool_mask("mask", mask)
    check_tensor("mask", mask, 3, "(batch, query_len, key_len), queries and keys at the same positions")
    if mask.shape[1] != mask.shape[2]:
        raise ValueError(
            f"mask should be square, (batch, length, length) with queries and keys at the same positions, got shape "
            f"{tuple(mask.shape)}; moved_by needs to know which query sits at the changed position"
        )
    position = check_int("position", position, "the position whose input changes", minimum=0)
    if position >= mask.shape[2]:
        raise ValueError(
            f"position should be a key position 0..{mask.shape[2] - 1}, got {position}; positions count from 0"
        )
    return position


def _check_local_global_mask(is_global, window) -> int:
    if not isinstance(is_global, torch.Tensor):
        raise TypeError(
            f"is_global should be a (batch, length) bool torch.Tensor, got {describe(is_global)}; convert with "
            "torch.tensor(is_global, dtype=torch.bool)"
        )
    check_tensor("is_global", is_global, 2, "(batch, length)")
    if is_global.dtype != torch.bool:
        raise TypeError(
            f"is_global should be a bool tensor (True at a global token), got dtype {is_global.dtype}; a 0/1 "
            "mask such as Hugging Face's global_attention_mask converts with is_global.bool()"
        )
    return check_int("window", window, "how many neighbours on each side", minimum=0)


def _check_mask_dims(mask, dims, shape_doc: str) -> None:
    check_bool_mask("mask", mask)
    check_tensor("mask", mask, dims, shape_doc)


def _check_to_additive(mask, dtype) -> None:
    check_bool_mask("mask", mask)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"dtype should be a floating-point torch.dtype (the scores'), got {dtype!r}; -inf needs floats, e.g. "
            "torch.float32"
        )


def _check_from_additive(mask) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask should be a float torch.Tensor of 0 and -inf, got {describe(mask)}; convert with "
            "torch.as_tensor(mask, dtype=torch.float32)"
        )
    check_float("mask", mask)
    if bool(torch.isnan(mask).any()) or bool((mask == float("inf")).any()):
        raise ValueError(
            "mask should hold 0 (allowed) and -inf (blocked), got a mask with NaN or +inf; "
            "an additive mask holds 0 (allowed) and -inf (blocked)"
        )
    other = mask[(mask != 0) & (mask != float("-inf"))]
    if other.numel():
        raise ValueError(
            f"mask should hold only 0 (allowed) and -inf (blocked), got {other.numel()} other values such as "
            f"{other[0].item()}; a 0/1 mask (1 = keep) converts with mask.bool(), a -1e9 mask with mask > -1e4"
        )
