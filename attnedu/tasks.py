"""Synthetic sequence tasks for the Transformer lessons (05-07), generated in code: nothing to download.

neighbour_task   lesson 05: read the tokens at several fixed offsets from every position
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._validate import check_positive_int


def neighbour_task(
    batch: int, length: int, vocab: int, offsets: Sequence[int], generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token sequences and, for every position, the tokens at ``offsets`` from it.

    tokens:  (batch, length) ids in 0..vocab-1
    targets: (batch, length, len(offsets)) ids in 0..vocab; ``vocab`` itself marks "beyond the sequence"
    Reading the token at offset -1 and the one at +1 needs two different attention patterns at once.
    """
    for name, value, meaning in (("batch", batch, "sequences"), ("length", length, "tokens per sequence"),
                                 ("vocab", vocab, "distinct tokens")):  # fmt: skip
        check_positive_int(name, value, meaning)
    offsets = [int(o) for o in offsets]
    if not offsets or 0 in offsets:
        raise ValueError(f"offsets must be non-zero positions relative to each token, got {offsets}")
    reach = max(abs(o) for o in offsets)
    tokens = torch.randint(0, vocab, (batch, length), generator=generator)
    edge = torch.full((batch, reach), vocab)
    padded = torch.cat([edge, tokens, edge], dim=1)
    targets = torch.stack([padded[:, reach + o : reach + o + length] for o in offsets], dim=-1)
    return tokens, targets


@dataclass
class CharCorpus:
    """Character-level text for a small language model: the help texts that ship with CPython
    (``pydoc_data.topics``), so nothing is downloaded. Their exact content depends on the Python version.

    train, valid: 1-D tensors of character ids (the first 90% and the last 10%); chars: id -> character.
    """

    train: torch.Tensor
    valid: torch.Tensor
    chars: list[str]

    @classmethod
    def load(cls) -> CharCorpus:
        from pydoc_data.topics import topics

        text = "".join(topics[name] for name in sorted(topics))
        chars = sorted(set(text))
        index = {c: i for i, c in enumerate(chars)}
        ids = torch.tensor([index[c] for c in text])
        split = int(0.9 * len(ids))
        return cls(ids[:split], ids[split:], chars)

    def batch(self, size: int, length: int, generator: torch.Generator, split: str = "train"):
        """``size`` random windows: inputs (size, length) and targets (size, length), the next character of each."""
        data = {"train": self.train, "valid": self.valid}.get(split)
        if data is None:
            raise ValueError(f"split must be 'train' or 'valid', got {split!r}")
        starts = torch.randint(0, len(data) - length - 1, (size,), generator=generator)
        windows = torch.stack([data[s : s + length + 1] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]

    def encode(self, text: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ValueError(f"characters {unknown} do not occur in the corpus")
        return torch.tensor([index[c] for c in text])

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)
