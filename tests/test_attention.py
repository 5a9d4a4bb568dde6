import pytest
import torch

from attnedu.attention import AdditiveAttention, additive_score, context_vector, masked_softmax
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
