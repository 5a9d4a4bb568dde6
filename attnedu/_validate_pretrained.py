"""The input checks of ``attnedu.pretrained``: one ``check_<function>`` per public function there that takes more than
one plain argument, called in the function's first line before its computation, so that a caller's mistake is refused
with a message that names the argument (in the one form of ``attnedu._validate``).
"""

from __future__ import annotations

import torch

from ._validate import check_float, check_int, check_items, check_min_dims, check_tensor, describe


def check_gpt2_attention_weights(c_attn_weight, c_proj_weight) -> None:
    check_min_dims("c_attn_weight", c_attn_weight, 2, "(..., d_model, 3 * d_model)")
    check_float("c_attn_weight", c_attn_weight)
    check_min_dims("c_proj_weight", c_proj_weight, 2, "(..., d_model, d_model)")
    check_float("c_proj_weight", c_proj_weight)
    d_model = c_proj_weight.shape[-1]
    lead = tuple(c_proj_weight.shape[:-2])
    if tuple(c_proj_weight.shape) != (*lead, d_model, d_model) or tuple(c_attn_weight.shape) != (
        *lead, d_model, 3 * d_model,
    ):  # fmt: skip
        raise ValueError(
            f"c_attn_weight should be (..., d_model, 3 * d_model) and c_proj_weight (..., d_model, d_model), with the "
            f"same leading axes, got {describe(c_attn_weight)} and {describe(c_proj_weight)}; GPT-2's Conv1D stores "
            "(in, out)"
        )


def check_encode(sentences) -> list:
    if isinstance(sentences, (list, tuple)) and sentences and all(isinstance(s, tuple) for s in sentences):
        for n, pair in enumerate(sentences):
            if len(pair) != 2 or not all(isinstance(s, str) for s in pair):
                raise TypeError(f"sentences[{n}] should be a sentence (str) or a pair of them (str, str), got {pair!r}")
        return list(sentences)
    return check_items("sentences", sentences, str, "sentences (str), or of pairs of them")


def check_mean_pool(hidden, real) -> None:
    check_tensor("hidden", hidden, 3, "(batch, seq_len, d_model)")
    check_float("hidden", hidden)
    check_tensor("real", real, 2, "(batch, seq_len), True at real tokens")
    if tuple(real.shape) != tuple(hidden.shape[:2]) or real.dtype != torch.bool:
        raise ValueError(f"real should be a bool tensor of shape (batch, seq_len) = {tuple(hidden.shape[:2])}, got "
                         f"{describe(real)}")  # fmt: skip
    empty = ~real.any(dim=1)
    if bool(empty.any()):
        raise ValueError(f"real should mark at least one real token in every sentence, got none in sentence "
                         f"{int(empty.nonzero()[0])}: a sentence of padding only has no mean (the encoding always "
                         "holds [CLS] and [SEP])")  # fmt: skip


def check_text_sentences(count, min_words, max_words) -> tuple[int, int, int]:
    count = check_int("count", count, "sentences", minimum=1)
    min_words = check_int("min_words", min_words, "the fewest words a sentence may have", minimum=1)
    max_words = check_int("max_words", max_words, "the most words a sentence may have", minimum=min_words)
    return count, min_words, max_words


def check_paraphrase_similarity(embeddings, pairs) -> list[tuple]:
    check_tensor("embeddings", embeddings, 2, "(n, d_model), one sentence embedding per row")
    check_float("embeddings", embeddings)
    n = embeddings.shape[0]
    bad = ~torch.isfinite(embeddings).all(-1) | (embeddings.norm(dim=-1) == 0)
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise ValueError(f"embeddings should be finite and not zero in every row (a cosine needs a direction), got "
                         f"{embeddings[row, :4].tolist()}... in row {row}")  # fmt: skip
    try:
        pairs = [tuple(p) for p in pairs]
    except TypeError:
        raise ValueError(f"pairs should be a non-empty list of (i, j) index pairs, got {pairs!r}") from None
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"pairs should be a non-empty list of (i, j) index pairs, got {pairs!r}")
    seen = set()
    for i, j in pairs:
        check_int("pairs", i, f"a sentence index in 0 .. {n - 1}", 0, n - 1)
        check_int("pairs", j, f"a sentence index in 0 .. {n - 1}", 0, n - 1)
        if i == j:
            raise ValueError(f"pairs should join two different sentences, got ({i}, {j})")
        if {i, j} & seen:
            raise ValueError(f"pairs should hold each sentence once (a sentence has one paraphrase here), got "
                             f"{sorted({i, j} & seen)} in two pairs of {pairs}")  # fmt: skip
        seen |= {i, j}
    if len({(min(i, j), max(i, j)) for i, j in pairs}) == n * (n - 1) // 2:  # no pair left that is not one
        raise ValueError(f"paraphrase_gap needs at least one pair that is not a paraphrase; {n} sentences, all paired")
    return pairs
