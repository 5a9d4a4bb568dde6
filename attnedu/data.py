"""A toy English -> French-like translation task, generated in code.

Sentences are noun phrases joined by "and", "or" or "with":

    the red cat and a dog          ->  le chat rouge et un chien
    this fast young car            ->  ce voiture rapide jeune

What makes it translation rather than word-for-word copying is **reordering**: adjectives
come before the noun in the source and after it in the target, so the alignment crosses
(the adjective-noun swap of Bahdanau et al. 2015, Fig. 3). Grammatical gender is left out on
purpose: it would make a determiner's translation depend on a later noun, and then the most
useful word to look at while writing "la" is the noun, not "the" (see lesson 02). For the same
reason there are three conjunctions, not one: a word whose translation is predictable from
context ("et" after every phrase) gives the model no reason to look at it.

Every target word comes from exactly one source word, so the generator knows the gold
alignment: ``pair.alignment[i]`` is the source position of target word ``i``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._validate import check_instance, check_int, check_items, check_positive_int, describe

# Source word -> target word.
NOUNS = {
    "cat": "chat",
    "dog": "chien",
    "bird": "oiseau",
    "horse": "cheval",
    "book": "livre",
    "boat": "bateau",
    "car": "voiture",
    "house": "maison",
    "table": "table",
    "flower": "fleur",
    "city": "ville",
    "chair": "chaise",
}
ADJECTIVES = {
    "red": "rouge",
    "yellow": "jaune",
    "fast": "rapide",
    "calm": "calme",
    "sad": "triste",
    "shy": "timide",
    "rich": "riche",
    "young": "jeune",
    "modern": "moderne",
    "empty": "vide",
}
DETERMINERS = {"the": "le", "a": "un", "this": "ce"}
CONJUNCTIONS = {"and": "et", "or": "ou", "with": "avec"}

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
MIN_PHRASE, MAX_PHRASE = 2, 4  # determiner + 0..2 adjectives + noun


@dataclass(frozen=True)
class Pair:
    """One sentence pair with its gold alignment.

    ``alignment[i]`` is the position in ``source`` that ``target[i]`` translates.
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    alignment: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.source)


def translate(source: Sequence[str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Translate a source sentence and return ``(target, alignment)``.

    Raises ``ValueError`` for a sentence the grammar cannot produce.
    """
    source = _words("source", source)
    target: list[str] = []
    alignment: list[int] = []
    phrase: list[int] = []  # source positions of the current phrase: det, adj*, noun
    for j, word in enumerate(source):
        if word in CONJUNCTIONS:
            if phrase or not target or target[-1] in CONJUNCTIONS.values():
                raise ValueError(f"{word!r} at position {j} must join two phrases: {' '.join(source)!r}")
            target.append(CONJUNCTIONS[word])
            alignment.append(j)
        elif word in DETERMINERS:
            if phrase:
                raise ValueError(f"determiner {word!r} at position {j} inside a phrase")
            phrase = [j]
        elif word in ADJECTIVES:
            if not phrase:
                raise ValueError(f"adjective {word!r} at position {j} has no determiner before it")
            phrase.append(j)
        elif word in NOUNS:
            if not phrase:
                raise ValueError(f"noun {word!r} at position {j} has no determiner before it")
            det, *adjectives = phrase
            target += [DETERMINERS[source[det]], NOUNS[word]]
            alignment += [det, j]
            target += [ADJECTIVES[source[a]] for a in adjectives]  # adjectives move after the noun
            alignment += adjectives
            phrase = []
        else:
            raise ValueError(f"unknown source word {word!r}; known words: see attnedu.data.source_words()")
    if phrase or (target and target[-1] in CONJUNCTIONS.values()):
        raise ValueError(f"sentence ends inside a phrase or after a conjunction: {' '.join(source)!r}")
    if not target:
        raise ValueError(
            "source should hold at least one phrase such as ['the', 'cat'], got an empty sentence; cannot translate "
            "an empty sentence"
        )
    return tuple(target), tuple(alignment)


def _words(name: str, words) -> list[str]:
    """A sentence as a list of words; a string (a likely slip for its .split()) is refused."""
    if isinstance(words, str):
        raise TypeError(f"{name} should be a list of words such as ['the', 'cat'], got {describe(words)}; "
                        f"split it with {name}.split()")  # fmt: skip
    if not isinstance(words, Sequence):
        raise TypeError(f"{name} should be a list of words such as ['the', 'cat'], got {describe(words)}")
    bad = [w for w in words if not isinstance(w, str)]
    if bad:
        raise TypeError(f"{name} should hold words (str), got {describe(bad[0])} among them; use Vocab.decode for ids")
    return list(words)


def sample_source(length: int, rng: random.Random) -> list[str]:
    """A random grammatical source sentence of exactly ``length`` words (``length >= 2``)."""
    length = check_int("length", length, "words in the sentence")
    if length < MIN_PHRASE:
        raise ValueError(f"length should be at least {MIN_PHRASE} (a determiner and a noun), got {length}")
    check_instance("rng", rng, random.Random, "a random.Random", "pass random.Random(seed), not the seed itself")
    words: list[str] = []
    remaining = length
    while remaining:
        if words:
            words.append(rng.choice(sorted(CONJUNCTIONS)))
            remaining -= 1
        # Phrase sizes that leave either nothing or room for a conjunction plus a whole phrase.
        sizes = [
            s
            for s in range(MIN_PHRASE, MAX_PHRASE + 1)
            if s <= remaining and (remaining - s == 0 or remaining - s >= MIN_PHRASE + 1)
        ]
        size = rng.choice(sizes)
        words.append(rng.choice(sorted(DETERMINERS)))
        words += rng.sample(sorted(ADJECTIVES), size - 2)
        words.append(rng.choice(sorted(NOUNS)))
        remaining -= size
    return words


def make_pairs(
    n: int,
    min_len: int,
    max_len: int,
    seed: int,
    exclude: set[tuple[str, ...]] | None = None,
) -> list[Pair]:
    """``n`` distinct pairs with source lengths drawn uniformly from ``[min_len, max_len]``.

    ``exclude`` holds source sentences that must not appear (e.g. the test set).
    """
    n, min_len, max_len = _check_make_pairs(n, min_len, max_len, seed)
    rng = random.Random(seed)
    seen = set(exclude or ())
    pairs: list[Pair] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(
                f"n should be at most the number of distinct sentences with lengths {min_len}..{max_len}, got {n}: "
                f"could not find {n} distinct sentences with lengths {min_len}..{max_len}; ask for fewer"
            )
        source = tuple(sample_source(rng.randint(min_len, max_len), rng))
        if source in seen:
            continue
        seen.add(source)
        pairs.append(Pair(source, *translate(source)))
    return pairs


def reverse_source(pair: Pair) -> Pair:
    """The same pair with the source read backwards (Sutskever et al. 2014's trick)."""
    check_instance("pair", pair, Pair, "a Pair", "for a list of pairs use [reverse_source(p) for p in pairs]")
    last = len(pair.source) - 1
    return Pair(pair.source[::-1], pair.target, tuple(last - j for j in pair.alignment))


def source_words() -> list[str]:
    return sorted([*DETERMINERS, *ADJECTIVES, *NOUNS, *CONJUNCTIONS])


def target_words() -> list[str]:
    return sorted([*DETERMINERS.values(), *ADJECTIVES.values(), *NOUNS.values(), *CONJUNCTIONS.values()])


class Vocab:
    """Token <-> id. Ids 0, 1, 2 are ``<pad>``, ``<bos>``, ``<eos>`` in every vocabulary."""

    def __init__(self, words: Sequence[str]):
        self.itos = [PAD, BOS, EOS, *_words("words", words)]
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            repeated = sorted({w for w in self.itos if self.itos.count(w) > 1})
            raise ValueError(
                f"vocabulary words should be distinct (and not {PAD}, {BOS}, {EOS}, which every vocabulary has), "
                f"got {repeated} more than once; remove the repeats"
            )

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, words: Sequence[str]) -> list[int]:
        words = _words("words", words)
        try:
            return [self.stoi[w] for w in words]
        except KeyError as err:
            raise ValueError(
                f"words should be in the vocabulary, got word {err.args[0]!r}, which is not in the vocabulary; "
                "see attnedu.data.source_words() and target_words()"
            ) from None

    def decode(self, ids: Sequence[int], stop_at_eos: bool = True) -> list[str]:
        """Ids -> words, dropping padding and ``<bos>``, stopping at ``<eos>``.

        ``ids``: a list or a 1-D integer tensor of ids in 0..len(vocab)-1; a negative id is an error, not a
        word counted from the end."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.dtype == torch.bool or ids.is_floating_point():
                raise TypeError(
                    f"ids should be a 1-D integer tensor (one sentence), got {describe(ids)}; decode a batch "
                    "row by row: [vocab.decode(row) for row in tokens]"
                )
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise TypeError(f"ids should be a list of token ids, got {describe(ids)}")
        if not isinstance(stop_at_eos, bool):
            raise TypeError(f"stop_at_eos should be True or False, got {describe(stop_at_eos)}")
        words = []
        for position, i in enumerate(ids):
            i = check_int(f"ids[{position}]", i, "a token id")
            if not 0 <= i < len(self.itos):
                raise ValueError(
                    f"ids should be token ids in 0..{len(self.itos) - 1} (this vocabulary has {len(self.itos)} "
                    f"words), got {i} at position {position}; a negative id is not counted from the end"
                )
            if i == EOS_ID and stop_at_eos:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            words.append(self.itos[i])
        return words


SOURCE_VOCAB = Vocab(source_words())
TARGET_VOCAB = Vocab(target_words())


@dataclass
class Batch:
    """Padded tensors for a batch of pairs.

    src:         (batch, src_len)  source ids, padded with 0
    src_lengths: (batch,)          true source lengths
    tgt_in:      (batch, tgt_len)  <bos> y_1 ... y_{T-1}  (decoder input, teacher forcing)
    tgt_out:     (batch, tgt_len)  y_1 ... y_T <eos>      (what the decoder must predict)
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def __len__(self) -> int:
        return self.src.shape[0]


def make_batch(pairs: Sequence[Pair], src_vocab: Vocab = SOURCE_VOCAB, tgt_vocab: Vocab = TARGET_VOCAB) -> Batch:
    """Pad ``pairs`` into one :class:`Batch` (padded to the longest pair in it)."""
    pairs = _check_make_batch(pairs, src_vocab, tgt_vocab)
    src_len = max(len(p.source) for p in pairs)
    tgt_len = max(len(p.target) for p in pairs) + 1
    pad = [PAD_ID] * max(src_len, tgt_len)
    src, tgt_in, tgt_out = [], [], []
    for p in pairs:  # lists first, one tensor at the end: far faster than filling a tensor row by row
        s, t = src_vocab.encode(p.source), tgt_vocab.encode(p.target)
        src.append(s + pad[: src_len - len(s)])
        tgt_in.append([BOS_ID, *t] + pad[: tgt_len - len(t) - 1])
        tgt_out.append([*t, EOS_ID] + pad[: tgt_len - len(t) - 1])
    lengths = torch.tensor([len(p.source) for p in pairs])
    return Batch(torch.tensor(src), lengths, torch.tensor(tgt_in), torch.tensor(tgt_out))


_ENCODED: dict[int, tuple[Sequence[Pair], int, Batch]] = {}  # id(pairs) -> (pairs, len(pairs), batch)


def _encoded(pairs: Sequence[Pair]) -> Batch:
    """make_batch(pairs), remembered for the last two lists, so that training several models on the same
    training set encodes it once (0.5 s for 12,000 pairs). The list itself is kept, so its id cannot be
    reused while remembered; a list whose length changed is encoded again."""
    key = id(pairs)
    if key in _ENCODED and _ENCODED[key][0] is pairs and _ENCODED[key][1] == len(pairs):
        return _ENCODED[key][2]
    batch = make_batch(pairs)
    if len(_ENCODED) >= 2:
        _ENCODED.pop(next(iter(_ENCODED)))
    _ENCODED[key] = (pairs, len(pairs), batch)
    return batch


class BatchSampler:
    """Random training batches in which every source has the same length.

    Equal lengths mean no padding, so no time is spent on padded positions (length
    bucketing). A length is drawn in proportion to the number of *target words* of that length
    (pairs of that length x the length), so every target word, not every sentence, is equally
    likely to be trained on: a 30-word sentence carries six times the words of a 5-word one, so
    it is drawn six times as often. (Measured on lesson 02's attention model: at the same number
    of steps this sampling translated long sentences markedly better than drawing every sentence
    equally often.) Pairs are encoded once.

    >>> sampler = BatchSampler(pairs, batch_size=128, seed=0)
    >>> batch = sampler.next()
    """

    def __init__(self, pairs: Sequence[Pair], batch_size: int, seed: int = 0):
        batch_size = check_positive_int("batch_size", batch_size, "pairs per batch")
        check_int("seed", seed, "the random seed")
        self.all = _encoded(pairs)
        self.batch_size = batch_size
        self.tgt_lengths = (self.all.tgt_out != PAD_ID).sum(dim=1)
        lengths = self.all.src_lengths
        sizes = lengths.unique().tolist()
        self.groups = [torch.nonzero(lengths == n).flatten() for n in sizes]
        self.group_weights = torch.tensor([len(g) * n for g, n in zip(self.groups, sizes)], dtype=torch.float)
        self.generator = torch.Generator().manual_seed(seed)

    def next(self) -> Batch:
        group = self.groups[int(torch.multinomial(self.group_weights, 1, generator=self.generator))]
        idx = group[torch.randperm(len(group), generator=self.generator)[: self.batch_size]]
        src_len = int(self.all.src_lengths[idx].max())
        tgt_len = int(self.tgt_lengths[idx].max())
        return Batch(
            self.all.src[idx, :src_len],
            self.all.src_lengths[idx],
            self.all.tgt_in[idx, :tgt_len],
            self.all.tgt_out[idx, :tgt_len],
        )


# Length buckets used by every lesson that measures accuracy against source length. Sources of up
# to 20 words: long enough that the fixed-context model fails on the longer half, short enough that
# lesson 03 can train five models in a minute on a slow laptop (measured: benchmarks/calibration.md).
LENGTH_BUCKETS = ((5, 7), (8, 10), (11, 13), (14, 16), (17, 20))


@dataclass
class ToyTranslation:
    """Train pairs plus a test set per length bucket, disjoint from training."""

    train: list[Pair]
    test: dict[tuple[int, int], list[Pair]]

    @classmethod
    def generate(
        cls,
        n_train: int = 12_000,
        n_test_per_bucket: int = 200,
        buckets: Sequence[tuple[int, int]] = LENGTH_BUCKETS,
        seed: int = 0,
    ) -> ToyTranslation:
        _check_generate(n_train, n_test_per_bucket, buckets)
        test: dict[tuple[int, int], list[Pair]] = {}
        taken: set[tuple[str, ...]] = set()
        for k, (lo, hi) in enumerate(buckets):
            test[(lo, hi)] = make_pairs(n_test_per_bucket, lo, hi, seed=10_000 * (seed + 1) + k, exclude=taken)
            taken |= {p.source for p in test[(lo, hi)]}
        lo, hi = min(b[0] for b in buckets), max(b[1] for b in buckets)
        train = make_pairs(n_train, lo, hi, seed=seed, exclude=taken)
        return cls(train, test)

    def reversed_source(self) -> ToyTranslation:
        return ToyTranslation(
            [reverse_source(p) for p in self.train],
            {b: [reverse_source(p) for p in ps] for b, ps in self.test.items()},
        )


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_make_pairs(n, min_len, max_len, seed) -> tuple[int, int, int]:
    n = check_int("n", n, "how many pairs", minimum=0)
    min_len = check_int("min_len", min_len, "the shortest source")
    max_len = check_int("max_len", max_len, "the longest source")
    check_int("seed", seed, "the random seed")
    if not MIN_PHRASE <= min_len <= max_len:
        raise ValueError(
            f"min_len and max_len should satisfy {MIN_PHRASE} <= min_len <= max_len, got min_len={min_len}, "
            f"max_len={max_len}; a sentence needs at least a determiner and a noun"
        )
    return n, min_len, max_len


def _check_make_batch(pairs, src_vocab, tgt_vocab) -> list[Pair]:
    if isinstance(pairs, Sequence) and len(pairs) == 0:
        raise ValueError("pairs should hold at least one Pair, got an empty list: cannot make a batch from zero pairs")
    pairs = check_items("pairs", pairs, Pair, "Pairs (from make_pairs)")
    check_instance("src_vocab", src_vocab, Vocab, "a Vocab")
    check_instance("tgt_vocab", tgt_vocab, Vocab, "a Vocab")
    empty = [i for i, p in enumerate(pairs) if len(p.source) == 0 or len(p.target) == 0]
    if empty:
        raise ValueError(f"pairs {empty[:5]} have an empty source or target; every sentence needs a word")
    return pairs


def _check_generate(n_train, n_test_per_bucket, buckets) -> None:
    check_int("n_train", n_train, "training pairs", minimum=1)
    check_int("n_test_per_bucket", n_test_per_bucket, "test pairs per length bucket", minimum=1)
    if (
        isinstance(buckets, (str, bytes))
        or not isinstance(buckets, Sequence)
        or not buckets
        or not all(isinstance(b, Sequence) and len(b) == 2 for b in buckets)
    ):
        raise TypeError(
            "buckets should be a non-empty list of (shortest, longest) pairs such as [(5, 7), (8, 10)], "
            f"got {describe(buckets)}"
        )
