import pytest
import torch

from attnedu.attention import (
    AdditiveAttention,
    additive_score,
    concat_score,
    context_vector,
    dot_score,
    general_score,
    local_p_uniform_sum,
    local_p_weights,
    location_score,
    masked_softmax,
    scaled_dot_product_attention,
)
from attnedu.masks import padding_mask


def random_inputs(batch=3, src_len=5, enc_dim=6, dec_dim=4, attn_dim=7):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(batch, dec_dim, generator=g),
        torch.randn(batch, src_len, enc_dim, generator=g),
        torch.randn(attn_dim, dec_dim, generator=g),
        torch.randn(attn_dim, enc_dim, generator=g),
        torch.randn(attn_dim, generator=g),
    )


def test_additive_score_matches_the_formula_term_by_term():
    s, h, W, U, v = random_inputs()
    scores = additive_score(s, h, W, U, v)
    assert scores.shape == (3, 5)
    for b in range(3):
        for j in range(5):
            expected = v @ torch.tanh(W @ s[b] + U @ h[b, j])
            assert torch.allclose(scores[b, j], expected, atol=1e-6)


def test_additive_score_names_mismatched_sizes():
    s, h, W, U, v = random_inputs()
    with pytest.raises(ValueError, match="dec_dim"):
        additive_score(s[:, :3], h, W, U, v)
    with pytest.raises(ValueError, match="enc_dim"):
        additive_score(s, h[:, :, :2], W, U, v)
    with pytest.raises(ValueError, match=r"\(batch, src_len, enc_dim\)"):
        additive_score(s, h[0], W, U, v)
    with pytest.raises(TypeError, match="torch.Tensor"):
        additive_score(s.tolist(), h, W, U, v)


def test_masked_softmax_rows_sum_to_one_and_masked_weights_are_exactly_zero():
    scores = torch.randn(4, 6) * 10
    mask = padding_mask(torch.tensor([6, 3, 1, 5]), 6)
    weights = masked_softmax(scores, mask)
    assert torch.allclose(weights.sum(-1), torch.ones(4))
    assert (weights[~mask] == 0).all()


def test_masked_softmax_fully_masked_row_gives_zeros_not_nan():
    weights = masked_softmax(torch.randn(2, 3), torch.tensor([[True, False, False], [False, False, False]]))
    assert not weights.isnan().any()
    assert (weights[1] == 0).all() and weights[0, 0] == 1


def test_masked_softmax_rejects_silent_broadcasts_and_wrong_dtypes():
    with pytest.raises(ValueError, match="no broadcasting"):
        masked_softmax(torch.randn(2, 3), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3))


def test_context_vector_is_the_weighted_sum():
    weights = torch.softmax(torch.randn(2, 4), -1)
    values = torch.randn(2, 4, 3)
    expected = torch.stack([sum(weights[b, j] * values[b, j] for j in range(4)) for b in range(2)])
    assert torch.allclose(context_vector(weights, values), expected, atol=1e-6)
    with pytest.raises(ValueError, match="one weight per source position"):
        context_vector(weights[:, :3], values)


def test_attention_starts_uniform_over_real_words():
    attention = AdditiveAttention(dec_dim=4, enc_dim=6, attn_dim=5)  # v_a = 0 at initialisation
    _, h, *_ = random_inputs()
    mask = padding_mask(torch.tensor([5, 2, 4]), 5)
    _, weights = attention(torch.randn(3, 4), h, mask)
    assert torch.allclose(weights[1], torch.tensor([0.5, 0.5, 0, 0, 0]))


def test_attention_module_equals_the_functions_with_the_same_weights():
    s, h, W, U, v = random_inputs()
    attention = AdditiveAttention(4, 6, 7)
    with torch.no_grad():
        attention.W_a.copy_(W), attention.U_a.copy_(U), attention.v_a.copy_(v)
    mask = padding_mask(torch.tensor([5, 2, 4]), 5)
    context, weights = attention(s, h, mask)
    expected_weights = masked_softmax(additive_score(s, h, W, U, v), mask)
    assert torch.allclose(weights, expected_weights, atol=1e-6)
    assert torch.allclose(context, context_vector(expected_weights, h), atol=1e-6)


@pytest.mark.parametrize(
    "lengths, match", [(torch.tensor([3, 0]), "empty"), (torch.tensor([3, 9]), "padded batch is only 5")]
)
def test_padding_mask_rejects_impossible_lengths(lengths, match):
    with pytest.raises(ValueError, match=match):
        padding_mask(lengths, 5)


# --------------------------------------------------------------------------------------------
# Luong's scores beside Bahdanau's, and what the package no longer hides
# --------------------------------------------------------------------------------------------


def test_masked_softmax_does_not_hide_nan_or_inf_at_an_allowed_position():
    mask = torch.tensor([[True, True, False], [False, False, False]])
    weights = masked_softmax(torch.tensor([[float("nan"), 1.0, 0.0], [1.0, 2.0, 3.0]]), mask)
    assert weights[0].isnan().all(), "a NaN score must show, not turn into a fully masked row"
    assert (weights[1] == 0).all()
    inf = masked_softmax(torch.tensor([[float("inf"), 1.0, 0.0]]), torch.tensor([[True, True, True]]))
    assert inf.isnan().any()


def test_masked_softmax_works_over_leading_dims():
    scores = torch.randn(2, 4, 5)
    mask = padding_mask(torch.tensor([5, 2]), 5)[:, None, :].expand_as(scores)
    weights = masked_softmax(scores, mask)
    assert torch.allclose(weights[1, :, :2].sum(-1), torch.ones(4)) and (weights[1, :, 2:] == 0).all()


def test_luong_scores_match_their_formulas():
    g = torch.Generator().manual_seed(1)
    s, h = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)  # every step at once
    W_gen, W_cat, v = torch.randn(4, 4, generator=g), torch.randn(6, 8, generator=g), torch.randn(6, generator=g)
    W_loc = torch.randn(7, 4, generator=g)
    dot, general = dot_score(s, h), general_score(s, h, W_gen)
    concat, location = concat_score(s, h, W_cat, v), location_score(s, W_loc, 5)
    for b in range(2):
        for t in range(3):
            assert torch.allclose(location[b, t], (W_loc @ s[b, t])[:5], atol=1e-6)
            for j in range(5):
                assert torch.allclose(dot[b, t, j], s[b, t] @ h[b, j], atol=1e-6)
                assert torch.allclose(general[b, t, j], s[b, t] @ W_gen @ h[b, j], atol=1e-6)
                expected = v @ torch.tanh(W_cat @ torch.cat([s[b, t], h[b, j]]))
                assert torch.allclose(concat[b, t, j], expected, atol=1e-5)
    assert torch.allclose(dot_score(s[:, 0], h), dot[:, 0])  # one step: (batch, dec_dim) -> (batch, src_len)
    assert torch.allclose(concat, additive_score(s, h, W_cat[:, :4], W_cat[:, 4:], v))  # concat is additive


def _local_p_by_hand(scores: torch.Tensor, p: float, D: int) -> torch.Tensor:
    """Luong et al.'s Eq. 10 for one row, written out: the softmax over the positions j with |j - round(p)| <= D
    (halves round up), times exp(-(j - p)^2 / (2 (D/2)^2)); zero elsewhere."""
    import math

    centre = math.floor(p + 0.5)
    window = [j for j in range(len(scores)) if abs(j - centre) <= D]
    total = sum(math.exp(float(scores[j])) for j in window)
    row = torch.zeros(len(scores))
    for j in window:
        row[j] = math.exp(float(scores[j])) / total * math.exp(-((j - p) ** 2) / (2 * (D / 2) ** 2))
    return row


@pytest.mark.parametrize("p", [6.3, 6.5, 6.7, 5.0, 0.4, 8.9, 1.2])
@pytest.mark.parametrize("D", [1, 2, 3])
def test_local_p_window_holds_2D_plus_1_positions_around_round_p(p, D):
    g = torch.Generator().manual_seed(D)
    scores = torch.randn(2, 10, generator=g)
    weights = local_p_weights(scores, torch.tensor([p, 4.0]), D)
    for row, centre in zip(range(2), (p, 4.0)):
        assert torch.allclose(weights[row], _local_p_by_hand(scores[row], centre, D), atol=1e-6)
    inside = (weights[0] > 0).nonzero().flatten().tolist()
    nearest = int(p + 0.5)
    assert inside == [j for j in range(nearest - D, nearest + D + 1) if 0 <= j < 10]  # clipped at the ends only
    if D <= nearest <= 9 - D:
        assert len(inside) == 2 * D + 1  # not 2D + 2, as floor(p - D)..ceil(p + D) would give
    assert int((weights[1] > 0).sum()) == 2 * D + 1


def test_local_p_uniform_sum_is_what_local_p_weights_leaves_for_equal_scores():
    """Weights in, numbers out: local_p_weights on a row of equal scores, summed, sentence by sentence (each source
    its own length, windows cut at either end, p_t on a half), against the closed form."""
    centers = torch.tensor([6.3, 0.4, 7.6, 3.0, 0.5, 1.2, 2.0])
    lengths = torch.tensor([10, 10, 9, 4, 6, 3, 10])
    for D in (1, 2, 3):
        expected = torch.stack(
            [local_p_weights(torch.zeros(1, int(n)), c[None], D).sum() for c, n in zip(centers, lengths)]
        )
        assert torch.allclose(local_p_uniform_sum(centers, D, lengths), expected, atol=1e-6)
    with pytest.raises(ValueError, match="center should lie inside each source"):
        local_p_uniform_sum(torch.tensor([9.5]), 2, torch.tensor([10]))
    with pytest.raises(ValueError, match="src_lengths should be whole numbers"):
        local_p_uniform_sum(torch.tensor([1.0]), 2, torch.tensor([0]))


def test_scores_name_what_does_not_fit():
    s, h = torch.randn(2, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match="use the general score"):
        dot_score(s, h)
    with pytest.raises(ValueError, match="batch size of query"):
        dot_score(torch.randn(1, 6), h)  # a batch of one is not stretched over two sentences
    with pytest.raises(ValueError, match="max_src_len"):
        location_score(s, torch.randn(3, 4), 5)
    with pytest.raises(TypeError, match="floating-point"):
        dot_score(torch.ones(2, 6, dtype=torch.long), h)


# --------------------------------------------------------------------------------------------
# Scaled dot-product attention against torch's, over random shapes
# --------------------------------------------------------------------------------------------


def _random_case(seed: int):
    g = torch.Generator().manual_seed(seed)
    shape = [int(torch.randint(1, 4, (1,), generator=g)) for _ in range(2)]  # (batch, heads)
    q_len, k_len, head_dim, v_dim = (int(torch.randint(1, 9, (1,), generator=g)) for _ in range(4))
    q = torch.randn(*shape, q_len, head_dim, generator=g)
    k, v = torch.randn(*shape, k_len, head_dim, generator=g), torch.randn(*shape, k_len, v_dim, generator=g)
    mask = torch.rand(shape[0], 1, q_len, k_len, generator=g) < 0.7
    mask[0, 0, 0] = False  # a fully masked row, always
    return q, k, v, mask


@pytest.mark.parametrize("seed", range(12))
def test_sdpa_equals_torch_over_random_shapes(seed):
    from torch.nn.functional import scaled_dot_product_attention as torch_sdpa

    q, k, v, mask = _random_case(seed)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert torch.allclose(out, torch_sdpa(q, k, v), atol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    reference = torch_sdpa(q, k, v, attn_mask=mask)  # NaN on rows with nothing to attend
    rows = mask.expand(weights.shape).any(-1)
    assert torch.allclose(out[rows], reference[rows], atol=1e-5)
    assert (out[~rows] == 0).all() and (weights[~rows] == 0).all() and not out.isnan().any()
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)  # top-left: every row sees key 0
    assert torch.allclose(out, torch_sdpa(q, k, v, is_causal=True), atol=1e-5)


def test_sdpa_rejects_masks_that_would_broadcast_silently():
    q = k = v = torch.randn(2, 4, 5, 8)  # (batch, heads, len, head_dim)
    padding = torch.ones(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"mask\[:, None, None, :\]"):
        scaled_dot_product_attention(q, k, v, padding)
    with pytest.raises(ValueError, match="size 3 in dim 1"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 3, 5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool tensor"):
        scaled_dot_product_attention(q, k, v, torch.zeros(2, 1, 1, 5))
    with pytest.raises(ValueError, match="head_dim"):
        scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="leading"):
        scaled_dot_product_attention(q, k[:1], v[:1])


# --------------------------------------------------------------------------------------------
# Luong's decoder: one call equals step by step on the same weights
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attend_from", ["updated", "previous"])
@pytest.mark.parametrize("score", ["dot", "general", "concat", "location"])
def test_luong_decoder_one_call_equals_stepwise(score, attend_from):
    from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, make_batch, make_pairs
    from attnedu.models import Seq2Seq

    model = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=score, bidirectional=False, seed=1,
                          attend_from=attend_from)  # fmt: skip
    batch = make_batch(make_pairs(4, 5, 9, seed=2))  # padded: the mask matters
    memory = model.encoder(batch.src, batch.src_lengths)
    fast, fast_weights = model.decoder(batch.tgt_in, memory)
    slow, slow_weights = model.decoder(batch.tgt_in, memory, stepwise=True)
    assert torch.allclose(fast, slow, atol=1e-5) and torch.allclose(fast_weights, slow_weights, atol=1e-6)
    assert (fast_weights[1][:, batch.src_lengths[1] :] == 0).all()
    tokens, weights = model.greedy_decode(batch.src, batch.src_lengths, max_len=6)
    assert tokens.shape[0] == 4 and weights.shape[:2] == tokens.shape


def test_the_ablation_asks_with_the_state_one_step_earlier():
    """Lesson 03's ablation (attend_from="previous") asks at step t with s_{t-1}: with the same weights, its
    attention at step t + 1 is Luong's at step t, and at step 0 it asks with the initial state s_{-1}."""
    from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, make_batch, make_pairs
    from attnedu.models import Seq2Seq

    batch = make_batch(make_pairs(3, 5, 9, seed=4))
    for score in ("general", "location"):
        luong, ablation = (
            Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), score, False, seed=2, attend_from=which)
            for which in ("updated", "previous")
        )
        assert all(torch.equal(a, b) for a, b in zip(luong.parameters(), ablation.parameters()))  # same weights
        with torch.no_grad():
            memory = luong.encoder(batch.src, batch.src_lengths)
            _, weights = luong.decoder(batch.tgt_in, memory)
            logits, shifted = ablation.decoder(batch.tgt_in, memory)
            initial = luong.decoder.start(memory)[0][:, None]
            first = luong.decoder.attention(initial, memory.annotations, memory.mask)[1]
        assert torch.allclose(shifted[:, 1:], weights[:, :-1], atol=1e-6)
        assert torch.allclose(shifted[:, :1], first, atol=1e-6)
        assert not torch.allclose(shifted, weights, atol=1e-3)
    with pytest.raises(ValueError, match="attend_from"):
        Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), True, False, attend_from="previous")


def test_input_feeding_runs_step_by_step_and_changes_the_model():
    from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, make_batch, make_pairs
    from attnedu.models import Seq2Seq

    fed = Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), "general", False, input_feeding=True, seed=1)
    assert fed.decoder.rnn.input_size == 32 + 64  # [E y_{t-1}; h~_{t-1}]
    batch = make_batch(make_pairs(2, 5, 6, seed=3))
    logits, weights = fed(batch.src, batch.src_lengths, batch.tgt_in)
    assert logits.shape[:2] == batch.tgt_in.shape and not logits.isnan().any()
    with pytest.raises(ValueError, match="input feeding is part of Luong"):
        Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), True, False, input_feeding=True)


# --------------------------------------------------------------------------------------------
# Lesson 04: the spread of the scores, the previous-token head, the recall experiment
# --------------------------------------------------------------------------------------------


def test_initial_score_std_matches_a_measurement_over_many_initialisations():
    from attnedu.attention import initial_score_std

    g = torch.Generator().manual_seed(3)
    d_model, head_dim, input_std, weight_std = 24, 8, 1.7, 0.3
    draws = []
    for _ in range(300):  # fresh weights each time: the formula averages over initialisations
        W_Q, W_K = (weight_std * torch.randn(d_model, head_dim, generator=g) for _ in range(2))
        x = input_std * torch.randn(2, 16, d_model, generator=g)
        draws.append(((x[0] @ W_Q) * (x[1] @ W_K)).sum(-1))
    measured = torch.cat(draws).std().item()
    predicted = initial_score_std(input_std, weight_std, d_model, head_dim).item()
    assert abs(measured / predicted - 1) < 0.05, (measured, predicted)
    huge = initial_score_std(torch.tensor([1e5]), torch.tensor([1e4]), 16, 8)  # the variance would overflow float32
    assert torch.isfinite(huge).all() and huge.item() == pytest.approx(8**0.5 * 16 * 1e10 * 1e8, rel=1e-5)
    with pytest.raises(ValueError, match="standard deviations"):
        initial_score_std(-1.0, 0.1, 4, 2)


@pytest.mark.parametrize("weight, competitors, head_dim", [(0.95, 11, 16), (0.5, 3, 4), (0.999, 40, 1024)])
def test_query_scale_for_weight_gives_exactly_that_weight(weight, competitors, head_dim):
    from attnedu.attention import query_scale_for_weight

    c = query_scale_for_weight(weight, torch.tensor([competitors]), head_dim).double()
    scores = torch.zeros(competitors + 1, dtype=torch.float64)
    scores[0] = c / head_dim**0.5  # the key the query points at; the others score 0
    assert torch.softmax(scores, 0)[0].item() == pytest.approx(weight, rel=1e-6)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        query_scale_for_weight(1.0, torch.tensor([3]), 4)
    with pytest.raises(ValueError, match="competitors"):
        query_scale_for_weight(0.9, torch.tensor([0]), 4)


def test_recall_task_answers_with_the_value_of_the_asked_key_and_the_head_scales_its_scores():
    from attnedu.tasks import recall_task
    from attnedu.transformer import RecallHead

    keys, values, question, answer = recall_task(50, 8, 16, torch.Generator().manual_seed(0))
    assert keys.shape == values.shape == (50, 8) and question.shape == answer.shape == (50,)
    assert all(len(set(row.tolist())) == 8 for row in keys)  # distinct keys: one right answer
    position = (keys == question[:, None]).float().argmax(-1)
    assert torch.equal(values[torch.arange(50), position], answer)
    scaled, raw = (RecallHead(16, 32, 64, scaled=flag, seed=1) for flag in (True, False))
    with torch.no_grad():
        logits, scaled_scores = scaled(keys, values, question)
        _, raw_scores = raw(keys, values, question)
    assert logits.shape == (50, 16) and torch.allclose(raw_scores, 8 * scaled_scores, atol=1e-4)  # sqrt(64) = 8
    small = RecallHead(16, 32, 64, scaled=False, seed=1, qk_init_scale=64**-0.25)  # lesson 04's control arm
    with torch.no_grad():
        _, small_scores = small(keys, values, question)
    assert torch.allclose(small_scores, scaled_scores, atol=1e-5)  # the same draws: the divided arm's spread
    assert torch.equal(small.W_V, raw.W_V) and torch.equal(small.W_Q, raw.W_Q * 64**-0.25)
    with pytest.raises(ValueError, match="num_pairs should be at most"):
        recall_task(2, 20, 16, torch.Generator())


def test_one_offset_accuracy_is_what_a_one_offset_reader_scores_on_the_neighbour_task():
    """The formula against a reader run on the task itself: it answers the offset read and every edge answer right,
    and guesses token 0 elsewhere (right one time in vocab, on average over many sequences)."""
    from attnedu.tasks import neighbour_task, one_offset_accuracy

    for length, vocab, offsets, read in ((12, 8, (-2, -1, 1, 2), -1), (3, 5, (-3, -1, 2), 2), (9, 4, (1,), 1)):
        _, targets = neighbour_task(20000, length, vocab, offsets, torch.Generator().manual_seed(length))
        guess = torch.zeros_like(targets)
        k = offsets.index(read)
        guess[..., k] = targets[..., k]
        guess[targets == vocab] = vocab  # "beyond the edge": the position alone says so
        measured = (guess == targets).float().mean().item()
        predicted = one_offset_accuracy(torch.tensor([length]), vocab, offsets, read)[0].item()
        assert abs(measured - predicted) < 0.005, (length, measured, predicted)
