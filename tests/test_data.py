import random

import pytest
import torch

from attnedu.data import (
    ADJECTIVES,
    BOS_ID,
    CONJUNCTIONS,
    DETERMINERS,
    EOS_ID,
    NOUNS,
    PAD_ID,
    SOURCE_VOCAB,
    TARGET_VOCAB,
    BatchSampler,
    ToyTranslation,
    make_batch,
    make_pairs,
    reverse_source,
    sample_source,
    translate,
)

DICTIONARY = {**DETERMINERS, **ADJECTIVES, **NOUNS, **CONJUNCTIONS}


def test_translate_moves_adjectives_after_the_noun():
    target, alignment = translate("the red fast cat and a dog or this bird".split())
    assert target == tuple("le chat rouge rapide et un chien ou ce oiseau".split())
    assert alignment == (0, 3, 1, 2, 4, 5, 6, 7, 8, 9)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        ["the"],
        ["cat"],
        ["the", "red"],
        ["the", "cat", "and"],
        ["and", "the", "cat"],
        ["the", "cat", "and", "and", "a", "dog"],
        ["the", "zebra"],
    ],
)
def test_translate_rejects_ungrammatical_input(bad):
    with pytest.raises(ValueError):
        translate(bad)


def test_gold_alignment_points_at_the_translated_word():
    for pair in make_pairs(300, 2, 30, seed=3):
        assert sorted(pair.alignment) == list(range(len(pair.source)))  # every word used once
        for i, j in enumerate(pair.alignment):
            assert DICTIONARY[pair.source[j]] == pair.target[i]


def test_sample_source_has_exactly_the_requested_length():
    rng = random.Random(0)
    for length in range(2, 45):
        for _ in range(5):
            assert len(sample_source(length, rng)) == length


def test_make_pairs_is_distinct_in_range_and_respects_exclude():
    first = make_pairs(200, 5, 9, seed=0)
    assert len({p.source for p in first}) == 200
    assert all(5 <= len(p) <= 9 for p in first)
    second = make_pairs(200, 5, 9, seed=1, exclude={p.source for p in first})
    assert not {p.source for p in first} & {p.source for p in second}


def test_make_pairs_reports_impossible_requests():
    with pytest.raises(ValueError, match="min_len"):
        make_pairs(10, 1, 5, seed=0)
    with pytest.raises(ValueError, match="distinct"):
        make_pairs(10_000, 2, 2, seed=0)  # only 3 x 12 two-word sentences exist


def test_reverse_source_keeps_the_alignment_true():
    for pair in make_pairs(50, 5, 20, seed=2):
        rev = reverse_source(pair)
        assert rev.source == pair.source[::-1]
        for i, j in enumerate(rev.alignment):
            assert rev.source[j] == pair.source[pair.alignment[i]]


def test_toy_translation_test_sets_are_disjoint_from_training():
    data = ToyTranslation.generate(n_train=2000, n_test_per_bucket=50, seed=0)
    train_sources = {p.source for p in data.train}
    for (lo, hi), pairs in data.test.items():
        assert all(lo <= len(p) <= hi for p in pairs)
        assert not train_sources & {p.source for p in pairs}


def test_vocab_round_trip_and_unknown_words():
    ids = SOURCE_VOCAB.encode(["the", "cat"])
    assert SOURCE_VOCAB.decode(ids) == ["the", "cat"]
    assert TARGET_VOCAB.decode([BOS_ID, *TARGET_VOCAB.encode(["le", "chat"]), EOS_ID, 5]) == ["le", "chat"]
    with pytest.raises(ValueError, match="zebra"):
        SOURCE_VOCAB.encode(["zebra"])


def test_make_batch_pads_and_shifts_the_target():
    pairs = make_pairs(2, 2, 2, seed=0) + make_pairs(1, 6, 6, seed=1)
    batch = make_batch(pairs)
    assert batch.src.shape == (3, 6)
    assert batch.src_lengths.tolist() == [2, 2, 6]
    assert (batch.src[0, 2:] == PAD_ID).all()
    assert (batch.tgt_in[:, 0] == BOS_ID).all()
    assert torch.equal(batch.tgt_in[:, 1:3], batch.tgt_out[:, 0:2])  # teacher forcing: shifted by one
    assert batch.tgt_out[0, 2] == EOS_ID


def test_make_batch_rejects_empty_input():
    with pytest.raises(ValueError, match="zero pairs"):
        make_batch([])


def test_batch_sampler_batches_have_one_source_length():
    sampler = BatchSampler(make_pairs(500, 5, 12, seed=0), batch_size=32, seed=0)
    for _ in range(20):
        batch = sampler.next()
        assert (batch.src_lengths == batch.src.shape[1]).all()
        assert (batch.src != PAD_ID).all()


def test_batch_sampler_encodes_a_training_set_once_and_notices_a_changed_list():
    from attnedu.data import _encoded

    pairs = make_pairs(30, 5, 8, seed=4)
    assert _encoded(pairs) is _encoded(pairs)  # the same list: encoded once
    assert _encoded(list(pairs)) is not _encoded(pairs)  # an equal but different list: its own encoding
    first = _encoded(pairs)
    pairs.append(make_pairs(1, 9, 9, seed=5)[0])
    assert _encoded(pairs) is not first and len(_encoded(pairs)) == 31  # grown in place: encoded again
