"""Synthetic sequence tasks for the Transformer lessons (05-07), generated in code: nothing to download.

recall_task      lesson 04: key-value pairs and a question: which value goes with this key?
neighbour_task   lesson 05: read the tokens at several fixed offsets from every position
one_offset_accuracy  lesson 05: the accuracy on it of a reader that gets one offset right and guesses the rest
CharCorpus       lessons 06, 07, 09: characters of the help texts that ship with CPython, with a bigram baseline
repeated_tokens  lesson 11: a block of random tokens, repeated (where induction heads pay off)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._validate import check_choice, check_instance, check_int, check_number, check_positive_int, describe


def recall_task(
    batch: int, num_pairs: int, vocab: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Associative recall: ``num_pairs`` (key, value) pairs of tokens and a question key; the answer is the value
    paired with it. Keys are distinct within a row, values may repeat.

    -> keys (batch, num_pairs), values (batch, num_pairs), question (batch,), answer (batch,): ids in 0..vocab-1.
    """
    for name, value, meaning in (("batch", batch, "questions"), ("num_pairs", num_pairs, "pairs per question"),
                                 ("vocab", vocab, "distinct tokens")):  # fmt: skip
        check_positive_int(name, value, meaning)
    if num_pairs > vocab:
        raise ValueError(f"num_pairs should be at most vocab={vocab} (the keys of a row are distinct), got {num_pairs}")
    check_instance("generator", generator, torch.Generator, "a torch.Generator",
                   "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
    keys = torch.stack([torch.randperm(vocab, generator=generator)[:num_pairs] for _ in range(batch)])
    values = torch.randint(0, vocab, (batch, num_pairs), generator=generator)
    asked = torch.randint(0, num_pairs, (batch,), generator=generator)
    rows = torch.arange(batch)
    return keys, values, keys[rows, asked], values[rows, asked]


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
    if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Sequence):
        raise TypeError(f"offsets should be a list of non-zero ints such as [-1, 1], got {describe(offsets)}")
    offsets = [check_int(f"offsets[{n}]", o, "a position relative to each token") for n, o in enumerate(offsets)]
    if not offsets or 0 in offsets:
        raise ValueError(
            f"offsets should be non-zero positions relative to each token, such as [-1, 1], got {offsets}; "
            "offsets must be non-zero (offset 0 is the token itself)"
        )
    check_instance("generator", generator, torch.Generator, "a torch.Generator",
                   "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
    reach = max(abs(o) for o in offsets)
    tokens = torch.randint(0, vocab, (batch, length), generator=generator)
    edge = torch.full((batch, reach), vocab)
    padded = torch.cat([edge, tokens, edge], dim=1)
    targets = torch.stack([padded[:, reach + o : reach + o + length] for o in offsets], dim=-1)
    return tokens, targets


def one_offset_accuracy(lengths: torch.Tensor, vocab: int, offsets: Sequence[int], read: int) -> torch.Tensor:
    """The accuracy on ``neighbour_task`` of a reader that gets one offset right everywhere and knows nothing else
    about the neighbours (lesson 05's prediction exercise: one head that reads its most-weighted neighbour).

    For a sequence of L tokens, each of the L len(offsets) answers is one of three kinds:
      beyond the edge (i + o outside 0..L-1): min(|o|, L) positions per offset o, always right (the position alone
        says so);
      the offset read, inside the sequence: L - min(|read|, L) answers, always right;
      any other offset, inside: right with probability 1 / vocab (tokens are independent and uniform, so a guess
        is right one time in vocab).
    accuracy = (edge + read inside + other inside / vocab) / (L len(offsets))

    lengths: (batch,) sequence lengths L >= 1; vocab >= 1; offsets: non-zero ints; read: one of them.
    Returns (batch,) floats, the expected accuracy for each length.
    """
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1:
        raise TypeError(f"lengths should be a (batch,) tensor of sequence lengths, got {describe(lengths)}")
    if lengths.is_floating_point() or lengths.dtype == torch.bool or bool((lengths < 1).any()):
        raise ValueError(f"lengths should be whole numbers >= 1 (tokens per sequence), got {lengths.tolist()}")
    vocab = check_positive_int("vocab", vocab, "distinct tokens")
    if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Sequence):
        raise TypeError(f"offsets should be a list of non-zero ints such as [-1, 1], got {describe(offsets)}")
    offsets = [check_int(f"offsets[{n}]", o, "a position relative to each token") for n, o in enumerate(offsets)]
    if not offsets or 0 in offsets:
        raise ValueError(f"offsets should be non-zero positions relative to each token, such as [-1, 1], got {offsets}")
    read = check_int("read", read, "the offset the reader gets right")
    if read not in offsets:
        raise ValueError(f"read should be one of offsets {offsets}, got {read}")
    lengths = lengths.to(torch.get_default_dtype())
    beyond = {o: torch.clamp(lengths, max=abs(o)) for o in offsets}  # positions whose offset o falls outside
    edge = sum(beyond.values())
    read_inside = lengths - beyond[read]
    others_inside = sum(lengths - beyond[o] for o in offsets) - read_inside
    return (edge + read_inside + others_inside / vocab) / (lengths * len(offsets))


def repeated_tokens(
    batch: int, periods, length: int, vocab: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences made of a block of random tokens repeated (Olsson et al. 2022): each sequence draws its period p,
    then p uniformly random tokens from 0..vocab-1, repeated and cut to ``length``.

    periods: an int (every sequence), or (lowest, highest), inclusive: each sequence draws its own, so that no
    fixed distance, nothing a position alone could point at, finds the previous repeat.
    -> tokens (batch, length), periods (batch,). Nothing in a sequence's first block can be predicted (about
    ln vocab nats per token); every token after it can, by finding the previous occurrence of the token before it
    and copying what followed.
    """
    for name, value, meaning in (("batch", batch, "sequences"), ("length", length, "tokens per sequence"),
                                 ("vocab", vocab, "distinct tokens")):  # fmt: skip
        check_positive_int(name, value, meaning)
    check_instance("generator", generator, torch.Generator, "a torch.Generator",
                   "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
    lowest, highest = (periods, periods) if isinstance(periods, int) and not isinstance(periods, bool) else (
        tuple(periods) if isinstance(periods, (tuple, list)) and len(periods) == 2 else (None, None))  # fmt: skip
    if lowest is None:
        raise TypeError(f"periods should be an int or a pair (lowest, highest), got {describe(periods)}")
    check_int("periods[0]", lowest, "the shortest block", 1, length - 1)
    check_int("periods[1]", highest, "the longest block", lowest, length - 1)
    drawn = torch.randint(lowest, highest + 1, (batch,), generator=generator)
    blocks = torch.randint(0, vocab, (batch, highest), generator=generator)
    position = torch.arange(length)[None, :] % drawn[:, None]  # (batch, length): where in its block each token is
    return blocks.gather(1, position), drawn


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
        check_choice("split", split, ("train", "valid"))
        data = {"train": self.train, "valid": self.valid}[split]
        size = check_positive_int("size", size, "windows per batch")
        length = check_positive_int("length", length, "characters per window")
        if length > len(data) - 2:
            raise ValueError(
                f"length should be at most {len(data) - 2} for the {split} split, got {length}; use shorter windows"
            )
        check_instance("generator", generator, torch.Generator, "a torch.Generator",
                       "pass torch.Generator().manual_seed(seed), not the seed itself")  # fmt: skip
        starts = torch.randint(0, len(data) - length - 1, (size,), generator=generator)
        windows = torch.stack([data[s : s + length + 1] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]

    def windows(self, length: int, split: str = "valid") -> tuple[torch.Tensor, torch.Tensor]:
        """Every non-overlapping window of ``length`` characters of a split, in order: inputs (n, length) and targets
        (n, length), the next character of each; the tail too short for a whole window is left out. For scoring a
        model on all of the held-out text, the same way every time."""
        check_choice("split", split, ("train", "valid"))
        data = {"train": self.train, "valid": self.valid}[split]
        length = check_positive_int("length", length, "characters per window")
        count = (len(data) - 1) // length
        if count == 0:
            raise ValueError(
                f"length should be at most {len(data) - 1} for the {split} split, got {length}; use shorter windows"
            )
        return data[: count * length].view(count, length), data[1 : count * length + 1].view(count, length)

    def bigram_log_probs(self, smoothing: float = 1.0) -> torch.Tensor:
        """(V, V): log P(next = j | current = i), counted on the training split with ``smoothing`` added to every count
        (add-one by default), so a pair never seen in training still gets some probability. The baseline a language
        model must beat: it knows the previous character and nothing else."""
        smoothing = check_number("smoothing", smoothing, "the count added to every pair", 0.0, strict=True)
        size = len(self.chars)
        counts = torch.zeros(size, size, dtype=torch.float64)
        counts.index_put_((self.train[:-1], self.train[1:]), torch.ones(len(self.train) - 1, dtype=torch.float64),
                          accumulate=True)  # fmt: skip
        counts += smoothing
        return (counts / counts.sum(dim=1, keepdim=True)).log().float()

    def encode(self, text: str) -> torch.Tensor:
        check_instance("text", text, str, "a str")
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ValueError(
                f"text should use only characters of the corpus, got characters {unknown}, which do not occur in "
                "the corpus; remove or replace them"
            )
        return torch.tensor([index[c] for c in text])

    def decode(self, ids) -> str:
        """A 1-D tensor or list of ids in 0..len(chars)-1 -> text (a negative id is an error, not counted from the
        end)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.dtype == torch.bool or ids.is_floating_point():
                raise TypeError(f"ids should be a 1-D integer tensor, got {describe(ids)}; decode one row at a time")
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise TypeError(f"ids should be a list of character ids, got {describe(ids)}")
        ids = [check_int(f"ids[{n}]", i, "a character id") for n, i in enumerate(ids)]
        bad = [i for i in ids if not 0 <= i < len(self.chars)]
        if bad:
            raise ValueError(
                f"ids should be in 0..{len(self.chars) - 1} (the corpus has {len(self.chars)} characters), got "
                f"{bad[:5]}; a negative id is not counted from the end"
            )
        return "".join(self.chars[i] for i in ids)
