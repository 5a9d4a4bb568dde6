import pytest
import torch

from attnedu.analysis import (
    alignment_accuracy,
    crossing_pairs,
    crossing_rate,
    gold_gradient_shares,
    source_gradient_norms,
)
from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, make_pairs
from attnedu.models import Seq2Seq
from attnedu.train import Translations, accuracy_table, train


def one_hot_maps(pairs, positions):
    return [torch.eye(len(p.source))[list(pos)] for p, pos in zip(pairs, positions)]


def test_gold_maps_score_one_and_diagonal_maps_never_cross():
    pairs = make_pairs(50, 5, 15, seed=0)
    gold = one_hot_maps(pairs, [p.alignment for p in pairs])
    assert alignment_accuracy(gold, pairs) == 1.0
    assert crossing_rate(gold, pairs)[0] == 1.0
    diagonal = one_hot_maps(pairs, [range(len(p.target)) for p in pairs])
    assert crossing_rate(diagonal, pairs)[0] == 0.0


def test_crossing_pairs_finds_swaps():
    assert crossing_pairs((0, 3, 1, 2)) == [(1, 2), (1, 3)]
    assert crossing_pairs((0, 1, 2)) == []


def test_alignment_checks_shapes():
    pairs = make_pairs(2, 5, 5, seed=0)
    with pytest.raises(ValueError, match="expected \\(target_len, source_len\\)"):
        alignment_accuracy([torch.zeros(3, 3), torch.zeros(3, 3)], pairs)


def test_training_lowers_the_loss_and_shows_progress(monkeypatch, capsys):
    monkeypatch.setenv("ATTNEDU_PROGRESS", "1")
    torch.manual_seed(0)
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), True, False, emb_dim=8, hidden_dim=16)
    log = train(model, make_pairs(200, 3, 6, seed=0), steps=40, batch_size=32, lr=1e-2, desc="tiny run")
    assert sum(log.losses[-5:]) < sum(log.losses[:5])
    assert "tiny run" in capsys.readouterr().err  # tqdm writes the bar to stderr outside notebooks


def test_progress_bar_is_silent_when_switched_off(monkeypatch, capsys):
    monkeypatch.setenv("ATTNEDU_PROGRESS", "0")
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), False, False, emb_dim=8, hidden_dim=8)
    train(model, make_pairs(50, 3, 5, seed=0), steps=3, batch_size=8)
    assert capsys.readouterr().err == ""


def test_exact_match_counts_whole_sentences():
    pairs = make_pairs(2, 3, 3, seed=1)
    t = Translations(pairs, [list(pairs[0].target), list(pairs[1].target)[:-1]])
    assert t.exact_match == 0.5


def test_accuracy_table_layout():
    table = accuracy_table({"model": {(5, 9): 1.0, (10, 14): 0.25}})
    assert table.splitlines()[0].split() == ["5-9", "10-14"]
    assert table.splitlines()[1].split() == ["model", "1.000", "0.250"]


def test_gradient_norms_cover_every_source_word():
    torch.manual_seed(0)
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), True, False, emb_dim=8, hidden_dim=16)
    pair = make_pairs(1, 9, 9, seed=2)[0]
    norms = source_gradient_norms(model, pair, target_step=0)
    assert norms.shape == (9,) and (norms > 0).all()
    with pytest.raises(ValueError, match="target_step"):
        source_gradient_norms(model, pair, target_step=20)


@pytest.mark.parametrize("attention", [False, True])
def test_gold_gradient_shares_of_a_padded_batch_equal_each_sentence_alone(attention):
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention, False, emb_dim=8, hidden_dim=16, seed=3)
    pairs = make_pairs(5, 5, 12, seed=4)  # different lengths: padded together
    shares = gold_gradient_shares(model, pairs)
    of_largest = gold_gradient_shares(model, pairs, relative_to="largest")
    alone, alone_largest = [], []
    for pair in pairs:
        for t, gold in enumerate(pair.alignment):
            norms = source_gradient_norms(model, pair, target_step=t)
            alone.append((norms[gold] / norms.sum()).item())
            alone_largest.append((norms[gold] / norms.max()).item())
    assert shares.shape == of_largest.shape == (sum(len(p.target) for p in pairs),)
    assert torch.allclose(shares, torch.tensor(alone), atol=1e-5)
    assert torch.allclose(of_largest, torch.tensor(alone_largest), atol=1e-5)
    assert (of_largest >= shares).all() and (of_largest <= 1).all() and not torch.allclose(of_largest, shares)
    with pytest.raises(ValueError, match="relative_to should be 'total' or 'largest'"):
        gold_gradient_shares(model, pairs, relative_to="max")


def test_word_correct_reproduces_greedy_exact_match():
    """Greedy decoding gets a sentence exactly right iff every teacher-forced prediction is right."""
    from attnedu.analysis import word_correct
    from attnedu.train import translate_pairs

    pairs = make_pairs(40, 5, 8, seed=3)
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=True, bidirectional=False, seed=0)
    train(model, pairs, steps=60, batch_size=16)
    rows = word_correct(model, pairs)
    assert [len(r) for r in rows] == [len(p.target) + 1 for p in pairs]
    greedy = translate_pairs(model, pairs)
    assert [bool(r.all()) for r in rows] == [list(p.target) == pred for p, pred in zip(pairs, greedy.predictions)]


def test_word_accuracy_by_length():
    from attnedu.analysis import word_accuracy_by_length

    test = {(5, 6): make_pairs(10, 5, 6, seed=1), (9, 10): make_pairs(10, 9, 10, seed=2)}
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=False, bidirectional=False, seed=0)
    table = word_accuracy_by_length(model, test)
    assert list(table) == list(test)
    for bucket, result in table.items():
        assert 0 <= result.exact <= result.per_word <= 1
        assert result.mean_steps == pytest.approx(sum(len(p.target) + 1 for p in test[bucket]) / 10)


def test_alignment_by_word_class_counts_hits_and_where_misses_land():
    from attnedu.analysis import alignment_by_word_class

    pairs = [make_pairs(1, 6, 6, seed=5)[0]]
    gold = list(pairs[0].alignment)
    shifted = [min(j + 1, len(pairs[0].source) - 1) for j in gold]  # every argmax one word to the right
    result = alignment_by_word_class(one_hot_maps(pairs, [shifted]), pairs)
    assert sum(c.words for c in result.values()) == len(gold)
    misses = sum(c.words - c.hits for c in result.values())
    assert misses == sum(1 for g, s in zip(gold, shifted) if g != s)
    assert all(set(c.offsets) <= {1} for c in result.values())
    perfect = alignment_by_word_class(one_hot_maps(pairs, [gold]), pairs)
    assert all(c.hits == c.words for c in perfect.values())
