"""Lesson 11's head statistics (attnedu.head_scores, attnedu.induction) on attention patterns built by hand, where
the right number is known; the repeated-token task; a short induction training run (the lesson asserts the trained
effect itself)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnedu import head_scores, induction
from attnedu.tasks import repeated_tokens


def shifted(seq_len: int, offset: int, batch: int = 2, num_heads: int = 3) -> torch.Tensor:
    """Weights where query i puts everything on key i + offset (or on key 0 / itself where that does not exist)."""
    w = torch.zeros(batch, num_heads, seq_len, seq_len)
    for i in range(seq_len):
        j = i + offset
        w[:, :, i, j if 0 <= j < seq_len else i] = 1.0
    return w


def test_offset_attention_and_previous_token():
    assert torch.equal(head_scores.previous_token_score(shifted(6, -1)), torch.ones(2, 3))
    assert torch.equal(head_scores.offset_attention(shifted(6, 1), 1), torch.ones(2, 3))
    assert torch.equal(head_scores.offset_attention(shifted(6, 1), -1), torch.zeros(2, 3))
    # padding: the last two positions of sentence 1 are padding; their rows hold garbage that must not count
    w = shifted(6, -1)
    w[1, :, 4:] = 0.0
    w[1, :, 4:, 0] = 1.0
    real = torch.ones(2, 6, dtype=torch.bool)
    real[1, 4:] = False
    assert torch.equal(head_scores.previous_token_score(w, real), torch.ones(2, 3))
    assert head_scores.previous_token_score(w)[1, 0] < 1.0  # without the mask the garbage counts


def test_attention_to_targets():
    w = torch.full((1, 2, 4, 4), 0.25)
    targets = torch.tensor([[True, False, False, True]])
    torch.testing.assert_close(head_scores.attention_to(w, targets), torch.full((1, 2), 0.5))
    with pytest.raises(ValueError, match="targets should be \\(batch, key_len\\)"):
        head_scores.attention_to(w, targets[:, :3])


def test_entropy():
    uniform = torch.full((1, 1, 5, 5), 0.2)
    torch.testing.assert_close(head_scores.attention_entropy(uniform), torch.full((1, 1), math.log(5)))
    assert torch.equal(head_scores.attention_entropy(shifted(5, 0, 1, 1)), torch.zeros(1, 1))
    # padding keys carry weight 0 and add nothing; padding queries are left out
    padded = torch.zeros(1, 1, 5, 5)
    padded[..., :3] = 1 / 3
    real = torch.tensor([[True, True, True, False, False]])
    torch.testing.assert_close(head_scores.attention_entropy(padded, real), torch.full((1, 1), math.log(3)))
    assert head_scores.max_entropy(5) == math.log(5)


def test_per_head_weights_queries_alike():
    scores = torch.tensor([[1.0], [0.0]])
    real = torch.tensor([[True] * 6, [True] * 2 + [False] * 4])
    torch.testing.assert_close(head_scores.per_head(scores, real), torch.tensor([0.75]))
    torch.testing.assert_close(head_scores.per_head(scores), torch.tensor([0.5]))


def test_induction_targets_by_hand():
    """Key j is a target of query i when token j - 1 equals token i and j - 1 < i: every earlier copy counts."""
    tokens = torch.tensor([[5, 6, 5, 7, 5, 5]])
    targets = head_scores.induction_targets(tokens)[0]
    expected = {2: [1], 4: [1, 3], 5: [1, 3, 5]}  # query 5: copies at 0, 2, 4; 4's follower is 5 itself
    for i in range(6):
        assert targets[i].nonzero().flatten().tolist() == expected.get(i, []), i
    # padding: the padding tokens (id 0) repeat each other but are never queries, copies or keys
    padded = torch.tensor([[5, 6, 5, 0, 0, 0]])
    real = torch.tensor([[True, True, True, False, False, False]])
    assert head_scores.induction_targets(padded, real)[0].nonzero().tolist() == [[2, 1]]
    assert head_scores.induction_targets(padded)[0, 5].nonzero().flatten().tolist() == [4, 5]  # without real they count


def _pattern(batch: int, seq_len: int, fill) -> torch.Tensor:
    """(batch, 1, seq_len, seq_len) weights, row i of sequence b from fill(b, i) -> {key: weight}."""
    w = torch.zeros(batch, 1, seq_len, seq_len)
    for b in range(batch):
        for i in range(seq_len):
            for j, v in fill(b, i).items():
                w[b, 0, i, j] += v
    return w


def test_prefix_matching_on_heads_built_by_hand():
    """An induction head scores 1 however it spreads over the earlier copies; heads that look by position alone, a
    uniform head and a previous-token head score low on sequences whose blocks differ in length, and never above
    best_positional_score; a fixed offset scores 1 when every block has the same length."""
    tokens, periods = induction.held_out_varied(64, seed=3)
    batch, length = tokens.shape
    targets = head_scores.induction_targets(tokens)

    def spread(b, i):  # evenly over the keys after every earlier copy (the first block's own queries: on itself)
        keys = targets[b, i].nonzero().flatten().tolist()
        return {j: 1 / len(keys) for j in keys} if keys else {i: 1.0}

    def latest(b, i):  # everything on the key after the copy one block back
        p = int(periods[b])
        return {i - p + 1: 1.0} if i >= p else {i: 1.0}

    def offset(d):
        return lambda b, i: {max(i - d, 0): 1.0}

    uniform = lambda b, i: {j: 1 / (i + 1) for j in range(i + 1)}  # noqa: E731
    spread_head, latest_head = _pattern(batch, length, spread), _pattern(batch, length, latest)
    assert torch.allclose(head_scores.prefix_matching(spread_head, tokens), torch.ones(batch, 1))
    # a head on the most recent block's copy only is an induction head too: all its weight is on a target, but the
    # spreading head puts less than half of its weight there once a query has two or more earlier blocks
    latest_score = head_scores.prefix_matching(latest_head, tokens)
    assert latest_score.min() > 0.75 and latest_score.mean() > 0.9  # below 1 only where a block holds a token twice
    on_latest = spread_head[:, 0].gather(-1, (torch.arange(length) - periods[:, None] + 1).clamp(min=0)[..., None])
    assert on_latest[..., 0][(torch.arange(length) >= 2 * periods[:, None])].mean() < 0.5
    bound = head_scores.best_positional_score(tokens)
    assert bound < 0.35
    blind = {f"offset {d}": offset(d) for d in (1, 3, 7, 15)} | {"uniform": uniform}
    for name, fill in blind.items():
        score = head_scores.prefix_matching(_pattern(batch, length, fill), tokens).mean().item()
        assert score <= bound + 1e-6 and score < 0.3, (name, score)
    previous = head_scores.prefix_matching(_pattern(batch, length, offset(1)), tokens).mean().item()
    assert previous < 0.1
    # every block of 8: looking 7 back scores 1 on the queries of the repeats, by position alone, and the bound says so
    fixed, _ = repeated_tokens(32, 8, 32, 32, torch.Generator().manual_seed(4))
    assert head_scores.best_positional_score(fixed) > 0.8
    seven_back = head_scores.prefix_matching(_pattern(32, 32, offset(7)), fixed)
    in_repeats = head_scores.induction_targets(fixed)[:, 8:].any(-1).float().mean().item()
    assert seven_back.mean().item() >= 0.8 * in_repeats


def test_best_positional_score_is_the_best_head_by_position():
    """The bound is reached by the head that puts each row on its best key, and no offset head beats it."""
    tokens, _ = induction.held_out_varied(40, periods=(2, 5), length=12, vocab=6, seed=8)
    targets = head_scores.induction_targets(tokens).double()
    counted = targets.amax(-1).sum(-1)
    share = (targets / counted[:, None, None]).mean(0)
    best = torch.zeros(1, 1, 12, 12, dtype=torch.float64)
    best[0, 0, torch.arange(12), share.argmax(-1)] = 1.0
    reached = head_scores.prefix_matching(best.expand(40, 1, 12, 12), tokens).mean().item()
    assert math.isclose(reached, head_scores.best_positional_score(tokens), rel_tol=1e-9)
    for d in range(12):
        w = torch.zeros(40, 1, 12, 12, dtype=torch.float64)
        w[:, 0, torch.arange(12), (torch.arange(12) - d).clamp(min=0)] = 1.0
        assert head_scores.prefix_matching(w, tokens).mean().item() <= reached + 1e-12


def test_prefix_matching_padding_and_bad_inputs():
    tokens = torch.tensor([[3, 4, 3, 4, 0, 0], [5, 6, 7, 5, 6, 7]])
    real = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    w = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0)).masked_fill(~causal, -math.inf).softmax(-1)
    score = head_scores.prefix_matching(w, tokens, real)
    by_hand = torch.stack([(w[0, :, 2, 1] + w[0, :, 3, 2]) / 2, (w[1, :, 3, 1] + w[1, :, 4, 2] + w[1, :, 5, 3]) / 3])
    torch.testing.assert_close(score, by_hand)
    with pytest.raises(ValueError, match="row 0 has no token that occurred before"):
        head_scores.prefix_matching(w, torch.tensor([[1, 2, 3, 4, 5, 6], [1, 1, 1, 1, 1, 1]]))
    with pytest.raises(TypeError, match="integer token ids"):
        head_scores.prefix_matching(w, tokens.float())
    with pytest.raises(ValueError, match="weights should be self-attention weights"):
        head_scores.prefix_matching(w[:, :, :5, :5], tokens)
    with pytest.raises(ValueError, match="real should be"):
        head_scores.prefix_matching(w, tokens, real[:, :5])


def test_crossing_steps():
    steps = [0, 10, 20, 30, 40]
    assert induction.crossing_steps(steps, [4.0, 3.9, 2.0, 1.0, 0.0], (0.1, 0.5, 0.9)) == [20, 20, 40]  # a fall
    assert induction.crossing_steps(steps, [0.1, 0.2, 0.5, 0.6, 0.9], (0.25, 0.5)) == [20, 20]  # a rise
    with pytest.raises(ValueError, match="should change"):
        induction.crossing_steps(steps, [1.0] * 5)
    with pytest.raises(ValueError, match="equal length"):
        induction.crossing_steps(steps, [1.0, 2.0])
    with pytest.raises(ValueError, match="fractions"):
        induction.crossing_steps(steps, [0.0, 1, 2, 3, 4], (0.0,))


def test_in_context_losses():
    period, vocab = 3, 5
    tokens = torch.tensor([[0, 1, 2, 0, 1, 2]])
    logits = torch.zeros(1, 6, vocab)
    logits[0, 3:, :] = -100.0  # from position 3 on, certain of the right next token
    for t in range(3, 5):
        logits[0, t, tokens[0, t + 1]] = 100.0
    first, second = induction.in_context_losses(logits, tokens, period)
    assert first == pytest.approx(math.log(vocab))
    assert second == pytest.approx(0.0, abs=1e-6)


def test_repeated_tokens():
    tokens, periods = repeated_tokens(64, (3, 7), 20, 11, torch.Generator().manual_seed(0))
    assert tokens.shape == (64, 20) and periods.min() >= 3 and periods.max() <= 7 and len(set(periods.tolist())) > 1
    for row, p in zip(tokens, periods.tolist()):
        assert torch.equal(row[p:], row[:-p])
    assert tokens.max() < 11
    with pytest.raises(TypeError, match="torch.Generator"):
        repeated_tokens(2, 3, 8, 5, 0)
    with pytest.raises(ValueError, match="periods"):
        repeated_tokens(2, (5, 3), 8, 5, torch.Generator())


def test_head_gates_and_strongest():
    gates = head_scores.head_gates(2, 3, [(1, 2)])
    assert gates.sum() == 5 and gates[1, 2] == 0
    assert head_scores.strongest(torch.tensor([[0.1, 0.9], [0.5, 0.2]]), 2) == [(0, 1), (1, 0)]
    with pytest.raises(ValueError, match="head"):
        head_scores.head_gates(2, 3, [(0, 3)])


def test_train_induction_short_run_is_reproducible():
    torch.set_num_threads(1)
    held_out = induction.held_out_repeats(16)
    runs = [induction.train_induction(2, held_out, seed=3, steps=20, every=10) for _ in range(2)]
    assert runs[0].steps == [0, 10, 20]
    assert runs[0].second == runs[1].second
    prefix, previous = induction.induction_scores(runs[0].model, held_out)
    assert prefix.shape == previous.shape == (2, 2)
    with pytest.raises(TypeError, match="unknown recipe keys"):
        induction.train_induction(1, held_out, step=3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: head_scores.previous_token_score(torch.ones(2, 3, 4)), "weights should be"),
        (lambda: head_scores.attention_entropy(torch.ones(1, 1, 3, 3, dtype=torch.long)), "weights"),
        (lambda: head_scores.previous_token_score(torch.ones(1, 1, 3, 3), torch.ones(1, 4, dtype=torch.bool)), "real"),
        (lambda: head_scores.prefix_matching(torch.ones(1, 1, 6, 6), torch.zeros(1, 5, dtype=torch.long)), "weights"),
        (
            lambda: induction.in_context_losses(torch.ones(1, 6, 4), torch.zeros(1, 5, dtype=torch.long), 3),
            "2 \\* period",
        ),
    ],
)
def test_bad_inputs(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_calibration_ranges_reads_the_file():
    ranges = induction.calibration_ranges()
    low, high = ranges[2, "prefix"]
    assert 0 < low <= high <= 1 and (1, "prefix") in ranges and (2, "rate_gap") in ranges
    first_file = Path(induction.__file__).resolve().parents[1] / "benchmarks" / induction.CALIBRATION_FILES[0]
    one = induction.calibration_ranges(first_file)
    assert one[2, "prefix"][0] >= low and one[2, "prefix"][1] <= high  # the union over the files holds each file's


def test_the_removal_prediction_margin_separates_what_it_says():
    """Exercise 5's margin (full credit within it, half within twice it), by what it separates on every calibration
    run: (a) both layer-1 heads removed: ln 32 gets full credit, the one-layer model's repeat loss none by the margin
    (the check gives it half as a reasoned route, tests/galleries/lesson11.py), the intact model's first-block loss
    half; (b) one removed: the intact loss, the one-layer model's and "both removed" none."""
    from attnedu.checks.lesson11 import REMOVAL_MARGIN as m

    ranges = induction.calibration_ranges()
    low, high = ranges[2, "layer1_minus_uniform"]  # (a) minus ln 32, per run
    assert -m <= low and high <= m, (low, high)
    assert ranges[2, "layer1_minus_one_layer"][0] > 2 * m  # (a) minus the one-layer model's loss, per run
    first_low, first_high = ranges[2, "first_minus_layer1"]  # the first-block loss minus (a), per run
    assert m < first_low and first_high <= 2 * m, (first_low, first_high)
    one_low, one_high = ranges[2, "one_layer1_mean"]  # (b)
    assert one_low - ranges[2, "second"][1] > 2 * m and ranges[2, "cut_layer1"][0] - one_high > 2 * m
    assert ranges[2, "one_layer_minus_one_layer1_mean"][0] > 2 * m  # the one-layer model's loss minus (b), per run


def _induction_model(layers=2, heads_per_layer=2, seed=0):
    from attnedu.attention_only import AttentionOnlyTransformer

    return AttentionOnlyTransformer(12, 8, heads_per_layer, layers, 16, seed=seed).eval()


def test_attention_only_head_gates_remove_exactly_one_heads_output():
    """Gates of ones change nothing; a gate of 0 equals zeroing that head's columns of W_O (an independent route:
    the weights edited, no gates); a half gate halves the head's contribution; bad gates are refused by name."""
    model = _induction_model(layers=2, heads_per_layer=2, seed=1)
    tokens = induction.held_out_repeats(3, 6, 12)
    with torch.no_grad():
        plain, plain_weights = model(tokens)
        ones, ones_weights = model(tokens, head_scores.head_gates(2, 2))
        assert torch.equal(ones, plain) and all(torch.equal(a, b) for a, b in zip(ones_weights, plain_weights))
        gated, _ = model(tokens, head_scores.head_gates(2, 2, [(0, 1)]))
        edited = _induction_model(layers=2, heads_per_layer=2, seed=1)
        edited.layers[0].W_o.weight[:, 4:8] = 0.0  # head 1 of layer 0: columns 4 .. 7 of W_O (head_dim 4)
        by_weights, _ = edited(tokens)
    assert torch.allclose(gated, by_weights, atol=1e-6)
    assert (gated - plain).abs().max() > 1e-3
    with pytest.raises(ValueError, match="head_gates should be \\(num_layers, num_heads\\) = \\(2, 2\\)"):
        model(tokens, torch.ones(2, 3))
    with pytest.raises((TypeError, ValueError), match="head_gates"):
        model(tokens, torch.ones(2, 2, dtype=torch.long))
    with pytest.raises((TypeError, ValueError), match="head_gates"):
        model(tokens, torch.ones(2))


def test_repeat_losses_and_induction_ablation():
    model = _induction_model(layers=2, heads_per_layer=2, seed=2)
    tokens = induction.held_out_repeats(5, 6, 12)
    with torch.no_grad():
        _, second = induction.in_context_losses(model(tokens)[0], tokens, 6)
    per_sequence = induction.repeat_losses(model, tokens)
    assert per_sequence.shape == (5,) and math.isclose(per_sequence.mean().item(), second, rel_tol=1e-6)
    # by hand, for one sequence and one removed head: -ln p(token t + 1) at t = 6 .. 10
    with torch.no_grad():
        logits, _ = model(tokens, head_scores.head_gates(2, 2, [(1, 0)]))
    log_p = logits[0].log_softmax(-1)
    by_hand = -sum(log_p[t, tokens[0, t + 1]].item() for t in range(6, 11)) / 5
    assert math.isclose(induction.repeat_losses(model, tokens, [(1, 0)])[0].item(), by_hand, rel_tol=1e-5)
    varied, _ = induction.held_out_varied(8, length=12, periods=(2, 5), vocab=12)
    loss, prefix = induction.induction_ablation(model, tokens, varied, [(1, 0)])
    assert math.isclose(loss, induction.repeat_losses(model, tokens, [(1, 0)]).mean().item(), rel_tol=1e-6)
    gates = head_scores.head_gates(2, 2, [(1, 0)])
    assert torch.equal(prefix, induction.induction_scores(model, varied, head_gates=gates)[0])
    with pytest.raises(ValueError, match="tokens should be \\(n, 2 \\* period\\)"):
        induction.repeat_losses(model, tokens[:, :11])
    with pytest.raises(ValueError, match="head"):
        induction.repeat_losses(model, tokens, [(1, 2)])
    with pytest.raises(TypeError, match="AttentionOnlyTransformer"):
        induction.repeat_losses(torch.nn.Linear(2, 2), tokens)


def test_induction_rule_loss():
    """0 when every block's tokens are distinct; ln 2 at a token that occurred twice with two different followers."""
    distinct = torch.stack([torch.randperm(12, generator=torch.Generator().manual_seed(s))[:6] for s in range(3)])
    assert induction.induction_rule_loss(torch.cat([distinct, distinct], 1), 6) == 0.0
    block = torch.tensor([[1, 2, 1, 3]])  # token 1 twice, followed by 2 and by 3
    tokens = torch.cat([block, block], 1)  # positions 4 .. 6 predict 2, 1, 3: at 4 and 6 the current token is 1
    # t = 4 (token 1, followers so far 2 and 3: the right one is 2) -> ln 2; t = 5 (token 2, follower 1) -> 0;
    # t = 6 (token 1, earlier at 0, 2, 4: followers 2, 3, 2; the right one is 3) -> ln 3
    assert math.isclose(induction.induction_rule_loss(tokens, 4), (math.log(2) + math.log(3)) / 3)
    # two tokens matched (nothing before position 0, so s = 0 matches on its own token): t = 4 (tokens 3, 1) matches
    # s = 0 only, not s = 2 (2, 1) -> 0; t = 5 (1, 2) at s = 1 -> 0; t = 6 (2, 1) at s = 0 and s = 2, followed by 2
    # and 3 -> ln 2
    assert math.isclose(induction.induction_rule_loss(tokens, 4, context=2), math.log(2) / 3)
    assert induction.induction_rule_loss(tokens, 4, context=2) == induction.induction_rule_loss(tokens, 4, context=4)
    with pytest.raises(ValueError, match="tokens should be \\(n, 2 \\* period\\)"):
        induction.induction_rule_loss(tokens, 3)
    with pytest.raises(TypeError, match="integer token ids"):
        induction.induction_rule_loss(tokens.float(), 4)
    with pytest.raises(ValueError, match="repeated once"):
        induction.induction_rule_loss(torch.tensor([[1, 2, 3, 4]]), 2)


def test_statistics_refuse_nan_in_real_rows_and_ignore_it_in_padding_rows():
    """A NaN in a real query's row is refused (it would be scored as 0 or spread NaN); a NaN row of a padding query,
    which the statistics leave out, changes nothing."""
    w = shifted(5, -1, batch=1, num_heads=1)
    real = torch.tensor([[True, True, True, False, False]])
    clean = head_scores.attention_entropy(w, real), head_scores.previous_token_score(w, real)
    padded_nan = w.clone()
    padded_nan[0, 0, 4] = float("nan")
    assert torch.equal(head_scores.attention_entropy(padded_nan, real), clean[0])
    assert torch.equal(head_scores.previous_token_score(padded_nan, real), clean[1])
    real_nan = w.clone()
    real_nan[0, 0, 1] = float("nan")
    for statistic in (head_scores.attention_entropy, head_scores.previous_token_score):
        with pytest.raises(ValueError, match="finite in the rows of real queries, got NaN or infinity at sentence 0"):
            statistic(real_nan, real)
    tokens = torch.tensor([[1, 2, 1, 2, 1]])
    with pytest.raises(ValueError, match="finite in the rows of real queries"):
        head_scores.prefix_matching(torch.full((1, 1, 5, 5), float("nan")), tokens)


def test_per_head_refuses_what_it_cannot_average():
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="real should be \\(batch, seq_len\\) with batch = 2"):
        head_scores.per_head(scores, torch.ones(1, 4, dtype=torch.bool))  # one sentence's mask for two: was a sum
    with pytest.raises(ValueError, match="no sentence has a query to count"):
        head_scores.per_head(scores, torch.ones(2, 1, dtype=torch.bool), -1)
    with pytest.raises(TypeError, match="offset"):
        head_scores.per_head(scores, torch.ones(2, 4, dtype=torch.bool), 0.5)


def test_induction_functions_refuse_the_old_pair_and_other_models():
    held_out = induction.held_out_repeats(4)
    varied = induction.held_out_varied(4)
    with pytest.raises(TypeError, match="scored"):
        induction.train_induction(
            1, held_out, scored=varied, steps=1
        )  # the (tokens, periods) pair of the first edition
    with pytest.raises(TypeError, match="AttentionOnlyTransformer"):
        induction.induction_scores(torch.nn.Linear(2, 2), varied[0])
    with pytest.raises(ValueError, match="context"):
        induction.induction_rule_loss(torch.cat([held_out[:, :16]] * 2, 1), 16, context=0)


def test_statistics_refuse_what_is_not_attention_weights():
    """Each real query's row must be a distribution over the keys: log-weights, raw scores, scaled weights and
    weights stored (key, query) are refused with their likely cause; a padding query's row may hold anything."""
    scores = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    weights = scores.masked_fill(~causal, -math.inf).softmax(-1)
    real = torch.ones(2, 5, dtype=torch.bool)
    for wrong, cause in (
        (scores.masked_fill(~causal, -math.inf).log_softmax(-1), "log-weights"),
        (scores, "a weight is negative"),
        (2 * weights, "do not sum to 1"),
        (weights.mT, "stored \\(key, query\\)"),
    ):
        for statistic in (head_scores.attention_entropy, head_scores.previous_token_score):
            with pytest.raises(ValueError, match=f"weights should be attention weights.*{cause}"):
                statistic(wrong, real)
    with pytest.raises(ValueError, match="log-weights"):
        head_scores.prefix_matching(weights.log(), torch.tensor([[1, 2, 1, 2, 1], [3, 3, 3, 3, 3]]))
    with pytest.raises(ValueError, match="do not sum to 1"):
        head_scores.attention_to(2 * weights, torch.ones(2, 5, dtype=torch.bool), real)
    garbage = weights.clone()
    garbage[1, :, 3:] = 5.0  # the rows of sentence 1's padding queries: left out, whatever they hold
    real[1, 3:] = False
    torch.testing.assert_close(
        head_scores.attention_entropy(garbage, real), head_scores.attention_entropy(weights, real)
    )
    assert head_scores.previous_token_score(weights.double(), real).dtype == torch.float64  # any float dtype


def test_best_positional_score_leaves_padding_out():
    """Padding that repeats one id is no copy: with real, the bound on padded rows is the bound on the rows alone."""
    padded = torch.tensor([[3, 5, 3, 0, 0], [4, 7, 4, 7, 0]])
    real = padded != 0
    assert head_scores.best_positional_score(padded) == pytest.approx(1.0)  # padding 0 after 0: a "copy" at every query
    alone = head_scores.best_positional_score(torch.tensor([[3, 5, 3, 0, 0], [4, 7, 4, 7, 0]]), real)
    # by hand: sequence 0 has one query with a copy (2: target key 1); sequence 1 two (2: key 1; 3: key 2); the best
    # pattern puts query 2 on key 1 (score 1/1 + 1/2, halved) and query 3 on key 2 (1/2, halved)
    assert alone == pytest.approx((1.0 + 0.5) / 2 + 0.5 / 2)


def test_bad_calls_of_the_induction_helpers_are_refused_by_name():
    with pytest.raises(ValueError, match="steps should increase"):
        induction.crossing_steps([50, 0, 25, 75], [0.5, 0.0, 0.2, 1.0])
    with pytest.raises(ValueError, match="values should be finite"):
        induction.crossing_steps([0, 25, 50, 75], [0.0, float("nan"), 0.2, 1.0])
    with pytest.raises(ValueError, match="no NaN"):
        head_scores.strongest(torch.tensor([[0.1, float("nan")], [0.5, 0.2]]))
    with pytest.raises(ValueError, match="a list of \\(layer, head\\) pairs"):
        head_scores.head_gates(2, 2, (0, 1))  # one pair, not a list of pairs
    model = _induction_model()
    with pytest.raises(ValueError, match="a list of \\(layer, head\\) pairs"):
        induction.repeat_losses(model, induction.held_out_repeats(2, 6, 12), (1, 0))
    varied, _ = induction.held_out_varied(4, length=12, periods=(2, 5), vocab=12)
    with pytest.raises(ValueError, match="blocks repeated once"):
        induction.repeat_losses(model, varied)  # blocks of several lengths: no "repeat" to measure


def test_induction_rule_losses_per_position():
    """The per-position losses average to induction_rule_loss, and are exactly 0 where the rule is certain."""
    block = torch.tensor([[1, 2, 1, 3]])
    tokens = torch.cat([block, block], 1)
    losses = induction.induction_rule_losses(tokens, 4)
    torch.testing.assert_close(losses, torch.tensor([[math.log(2), 0.0, math.log(3)]], dtype=torch.float64))
    held_out = induction.held_out_repeats(16)
    losses = induction.induction_rule_losses(held_out, induction.EVAL_PERIOD)
    assert losses.shape == (16, induction.EVAL_PERIOD - 1)
    assert math.isclose(losses.mean().item(), induction.induction_rule_loss(held_out, induction.EVAL_PERIOD))
    certain = torch.tensor([[len({row[s + 1] for s in range(t) if row[s] == row[t]}) == 1 for t in range(16, 31)]
                            for row in held_out.tolist()])  # fmt: skip
    assert torch.equal(losses == 0, certain)


def test_rate_while_by_hand():
    """The reference rises by 3 of its 4 between steps 20 and 30, where the curve makes 25 % .. 75 % of its change:
    0.75 of its rise in 10 steps, 7.5 per 100; a curve changing evenly sees the reference's average rate."""
    steps = [0, 10, 20, 30, 40]
    reference = [0.0, 0.5, 0.5, 3.5, 4.0]
    sharp = [0.0, 0.0, 0.3, 1.0, 1.0]  # 25 % at step 20, 75 % at step 30
    assert induction.rate_while(steps, reference, sharp) == pytest.approx(0.75 / 0.1)
    even = [0.0, 1.0, 2.0, 3.0, 4.0]  # 25 % at 10, 75 % at 30: the reference makes 3 of 4 in 20 steps
    assert induction.rate_while(steps, reference, even) == pytest.approx(0.75 / 0.2)
    jump = [0.0, 0.0, 1.0, 1.0, 1.0]  # 25 % and 75 % both at step 20: a window of one interval, 10 steps
    assert induction.rate_while(steps, reference, jump) == pytest.approx(0.0 / 0.1)
    with pytest.raises(ValueError, match="fractions"):
        induction.rate_while(steps, reference, sharp, fractions=(0.75, 0.25))
    with pytest.raises(ValueError, match="should change"):
        induction.rate_while(steps, [1.0] * 5, sharp)


def test_target_weight_by_distance_by_hand():
    """Tokens 1 2 1 2 1: query 4 (token 1) has targets 1 and 3 (after the copies at 0 and 2), at distances 3 and 1;
    query 3 (token 2) has one target, key 2, at distance 1; with min_targets 2 only query 4 counts."""
    tokens = torch.tensor([[1, 2, 1, 2, 1]])
    w = torch.zeros(1, 2, 5, 5)
    w[0, :, torch.arange(5), 0] = 1.0  # every query on key 0, except:
    w[0, :, 4] = torch.tensor([0.0, 0.6, 0.0, 0.4, 0.0])  # query 4: 0.6 on key 1 (3 back), 0.4 on key 3 (1 back)
    w[0, :, 3] = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])
    by_distance = head_scores.target_weight_by_distance(w, tokens, [(1, 1), (2, 3), (4, 4)])
    torch.testing.assert_close(by_distance[:, :2], torch.tensor([[0.4, 0.6]] * 2))
    assert by_distance[:, 2].isnan().all()  # no target 4 back
    every = head_scores.target_weight_by_distance(w, tokens, [(1, 1)], min_targets=1)  # queries 2 (key 1), 3, 4 at 1
    torch.testing.assert_close(every, torch.full((2, 1), (0.0 + 1.0 + 0.4) / 3))
    with pytest.raises(ValueError, match="lo <= hi"):
        head_scores.target_weight_by_distance(w, tokens, [(3, 1)])


def test_ablated_forward_zero_mean_and_paths():
    """All paths with zeros: the gated model; no path: the intact model; the mean over one sequence is that
    sequence's own output (no change); a path the layer above does not read (its W_K zeroed) changes nothing; keys
    only, by hand."""
    model = _induction_model(layers=2, heads_per_layer=2, seed=4)
    tokens = induction.held_out_repeats(3, 6, 12)
    with torch.no_grad():
        plain, _ = model(tokens)
        gated, _ = model(tokens, head_scores.head_gates(2, 2, [(0, 1)]))
    assert torch.equal(induction.ablated_forward(model, tokens, [(0, 1)])[0], gated)
    assert torch.equal(induction.ablated_forward(model, tokens, [(0, 1)], paths=())[0], plain)
    one = tokens[:1]
    own_means = induction.head_means(model, one)
    torch.testing.assert_close(induction.ablated_forward(model, one, [(0, 1)], own_means)[0], plain[:1])
    blind = _induction_model(layers=2, heads_per_layer=2, seed=4)
    with torch.no_grad():
        blind.layers[1].W_k.weight.zero_()  # layer 1's keys no longer read the residual stream
        blind_plain, _ = blind(tokens)
    torch.testing.assert_close(induction.ablated_forward(blind, tokens, [(0, 0)], paths=("keys",))[0], blind_plain)
    # keys only, by hand: layer 1 reads its keys from the stream without head 0 of layer 0, the rest from the intact one
    from attnedu.multihead import merge_heads, split_heads

    with torch.no_grad():
        x = model.embedding(tokens) + model.positions(12)
        causal = torch.ones(12, 12, dtype=torch.bool).tril()
        layer0, layer1 = model.layers
        q, k, v = (split_heads(p(x), 2) for p in (layer0.W_q, layer0.W_k, layer0.W_v))
        h0 = ((q @ k.mT) / 2.0).masked_fill(~causal, -math.inf).softmax(-1) @ v  # head_dim 4: sqrt 2
        kept = h0.clone()
        kept[:, 0] = 0.0
        full, cut = x + layer0.W_o(merge_heads(h0)), x + layer0.W_o(merge_heads(kept))
        q, k, v = split_heads(layer1.W_q(full), 2), split_heads(layer1.W_k(cut), 2), split_heads(layer1.W_v(full), 2)
        h1 = ((q @ k.mT) / 2.0).masked_fill(~causal, -math.inf).softmax(-1) @ v
        by_hand = model.unembedding(full + layer1.W_o(merge_heads(h1)))
    torch.testing.assert_close(induction.ablated_forward(model, tokens, [(0, 0)], paths=("keys",))[0], by_hand)
    with pytest.raises(ValueError, match="one layer"):
        induction.ablated_forward(model, tokens, [(0, 0), (1, 0)], paths=("keys",))
    with pytest.raises(ValueError, match="paths should name"):
        induction.ablated_forward(model, tokens, [(0, 0)], paths=("key",))
    varied, _ = induction.held_out_varied(8, length=12, periods=(2, 5), vocab=12)
    loss, prefix = induction.induction_ablation(model, tokens, varied, [(0, 0)], mean=True)
    means = induction.head_means(model, varied)
    with torch.no_grad():
        expected = (
            induction._repeat_loss(induction.ablated_forward(model, tokens, [(0, 0)], means)[0], tokens).mean().item()
        )
    assert math.isclose(loss, expected, rel_tol=1e-6) and prefix.shape == (2, 2)
