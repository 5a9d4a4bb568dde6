"""attnedu.runtime: the setup call, seeds for trained models, the perturbation the test command
uses in place of another machine, and printing that reads the same on every machine."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import attnedu
from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, BatchSampler, make_pairs
from attnedu.models import Seq2Seq
from attnedu.runtime import SEED_OFFSET_ENV, in_parallel, progress, rounded, seeded, training_seed
from attnedu.train import train


def test_setup_notebook_seeds_and_uses_one_thread():
    attnedu.setup_notebook(seed=3)
    a = torch.rand(3)
    attnedu.setup_notebook(seed=3)
    assert torch.equal(a, torch.rand(3))
    assert torch.get_num_threads() == 1


def test_seeded_is_reproducible_and_leaves_the_global_generator_alone():
    torch.manual_seed(1)
    expected_next = torch.rand(2)
    torch.manual_seed(1)
    with seeded(0):
        first = torch.randn(4)
    with seeded(0):
        assert torch.equal(torch.randn(4), first)
    assert torch.equal(torch.rand(2), expected_next)  # as if nothing had been drawn


def test_training_seed_adds_the_offset(monkeypatch):
    monkeypatch.delenv(SEED_OFFSET_ENV, raising=False)
    assert training_seed(5) == 5
    monkeypatch.setenv(SEED_OFFSET_ENV, "1000")
    assert training_seed(5) == 1005
    monkeypatch.setenv(SEED_OFFSET_ENV, "many")
    with pytest.raises(ValueError, match="must be an integer"):
        training_seed(5)
    with pytest.raises(TypeError, match="seed must be an int"):
        training_seed(1.5)


def _build(seed: int = 0) -> Seq2Seq:
    return Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=True, bidirectional=False, seed=seed)


def _parameters(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_perturbation_reaches_initial_weights_and_batch_order(monkeypatch):
    """What the perturbed run relies on: the offset changes every trained model's starting point
    and the order of its batches, and nothing else (the data stays the same)."""
    pairs = make_pairs(200, 5, 8, seed=0)
    monkeypatch.delenv(SEED_OFFSET_ENV, raising=False)
    weights, batch = _parameters(_build()), BatchSampler(pairs, 8, seed=training_seed(0)).next().src
    assert torch.equal(_parameters(_build()), weights)  # seeded: the same model every time
    monkeypatch.setenv(SEED_OFFSET_ENV, "1000")
    assert not torch.equal(_parameters(_build()), weights)
    assert not torch.equal(BatchSampler(pairs, 8, seed=training_seed(0)).next().src, batch)
    assert make_pairs(200, 5, 8, seed=0) == pairs


def test_the_perturbation_changes_a_trained_model(monkeypatch):
    pairs = make_pairs(64, 5, 6, seed=0)
    trained = {}
    for offset in ("0", "1000"):
        monkeypatch.setenv(SEED_OFFSET_ENV, offset)
        model = _build()
        train(model, pairs, steps=3, batch_size=8)
        trained[offset] = _parameters(model)
    assert not torch.allclose(trained["0"], trained["1000"])


def test_rounded_hides_last_bit_differences():
    one, just_below = torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.99999994])
    assert repr(rounded(one)) == repr(rounded(just_below)) == "tensor([1., 1.])"
    assert repr(rounded(torch.tensor([-1e-9, 0.25]))) == repr(rounded(torch.tensor([1e-9, 0.25])))  # no -0.
    assert rounded(0.12345678) == 0.123 and rounded(7) == 7
    assert torch.equal(rounded(torch.tensor([3, 4])), torch.tensor([3, 4]))


def test_rounded_refuses_a_value_on_a_rounding_boundary(monkeypatch):
    with pytest.raises(ValueError, match="rounding boundary"):
        rounded(torch.tensor([0.1, 0.0005]))
    near = 0.0005 + 1e-6  # stored with a wide margin, printed anywhere with a narrow one
    assert rounded(near) == 0.001
    monkeypatch.setenv("ATTNEDU_STRICT_ROUNDING", "1")
    with pytest.raises(ValueError, match="within 2e-06"):
        rounded(near)
    with pytest.raises(TypeError, match="takes a tensor, a float or an int"):
        rounded("0.5")


def _train_small(kind: str):
    """One small model of lessons 01-03 (built inside the job, as lessons 05-07 do), a few steps."""
    pairs = make_pairs(64, 5, 8, seed=0)
    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=kind, bidirectional=False, seed=0)
    log = train(model, pairs, steps=6, batch_size=16, seed=0)
    return log.losses, {name: p.detach().clone() for name, p in model.named_parameters()}


def test_in_parallel_trains_every_model_exactly_as_one_after_another():
    attnedu.setup_notebook(seed=0)
    kinds = [False, "bahdanau", "general", "dot"]
    alone = [_train_small(kind) for kind in kinds]
    together = in_parallel(_train_small, kinds, workers=2)
    assert torch.get_num_threads() == 1
    for (losses_a, weights_a), (losses_b, weights_b) in zip(alone, together):
        assert losses_a == losses_b  # bit for bit, in the order of the items
        assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)
    assert len({tuple(losses) for losses, _ in together}) == len(kinds)  # four different models


def test_in_parallel_keeps_the_order_and_runs_jobs_at_once():
    started, release = threading.Barrier(2, timeout=10), []

    def job(item):
        started.wait()  # both jobs must be running at the same time to pass this barrier
        release.append(item)
        return item * 10

    assert in_parallel(job, [1, 2], workers=2) == [10, 20]
    assert sorted(release) == [1, 2]
    assert in_parallel(lambda x: x + 1, range(5), workers=1) == [1, 2, 3, 4, 5]
    assert in_parallel(lambda x: x, []) == []


def test_in_parallel_stops_the_other_jobs_when_one_fails(monkeypatch):
    monkeypatch.setenv("ATTNEDU_PROGRESS", "0")
    steps_done = []

    def job(name):
        if name == "bad":
            raise ValueError("this job failed")
        bar = progress(10_000, name)
        for step in range(10_000):
            time.sleep(0.001)
            bar.update()  # raises Cancelled once the failure is known
            steps_done.append(step)
        return name

    with pytest.raises(ValueError, match="this job failed"):
        in_parallel(job, ["slow", "bad"], workers=2)
    assert len(steps_done) < 10_000  # the slow job stopped early instead of running to the end


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((len, [1], 0), ValueError, "workers"),
        ((len, [1], 1.5), TypeError, "workers"),
        ((len, 3), TypeError, "items should be an iterable"),
        ((3, [1]), TypeError, "function should be callable"),
    ],
)
def test_in_parallel_rejects_bad_calls(args, error, message):
    with pytest.raises(error, match=message):
        in_parallel(*args)
