"""attnedu.multihead against torch.nn.MultiheadAttention after weight transfer (weights in, numbers out)."""

import pytest
import torch

from attnedu.attention import MultiHeadAttention, merge_heads, split_heads


def test_split_and_merge_heads_are_inverse_and_slice_the_features():
    x = torch.arange(2 * 3 * 8, dtype=torch.float).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 4:6])  # head 3 holds features 4 and 5
    assert torch.equal(merge_heads(heads), x)
    with pytest.raises(ValueError, match="does not divide d_model=8"):
        split_heads(x, 3)


@pytest.mark.parametrize("seed", range(8))
def test_equals_torch_multihead_attention_after_weight_transfer(seed):
    g = torch.Generator().manual_seed(seed)
    heads = [1, 2, 4][seed % 3]
    d_model = heads * int(torch.randint(1, 5, (1,), generator=g))
    batch, q_len, k_len = (int(torch.randint(1, 6, (1,), generator=g)) for _ in range(3))
    bias = seed % 2 == 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        theirs = torch.nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True)
    ours = MultiHeadAttention(d_model, heads, bias=bias).copy_from_torch(theirs)
    query = torch.randn(batch, q_len, d_model, generator=g)
    key, value = torch.randn(batch, k_len, d_model, generator=g), torch.randn(batch, k_len, d_model, generator=g)
    keep = torch.rand(batch, k_len, generator=g) < 0.8
    keep[:, 0] = True  # torch gives NaN for a row with nothing to attend; ours gives zeros (tested apart)
    out, weights = ours(query, key, value, keep[:, None, None, :])
    expected, expected_weights = theirs(
        query, key, value, key_padding_mask=~keep, need_weights=True, average_attn_weights=False
    )  # torch's boolean masks mean True = blocked
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(weights, expected_weights, atol=1e-5)
    assert weights.shape == (batch, heads, q_len, k_len)


def test_a_query_with_nothing_to_attend_gives_zeros():
    mha = MultiHeadAttention(8, 2, bias=False)
    x = torch.randn(1, 3, 8)
    out, weights = mha(x, x, x, torch.zeros(1, 1, 1, 3, dtype=torch.bool))
    assert (weights == 0).all() and torch.allclose(out, torch.zeros_like(out))


def test_copy_from_torch_rejects_a_different_shape():
    with pytest.raises(ValueError, match="num_heads=4"):
        MultiHeadAttention(8, 2).copy_from_torch(torch.nn.MultiheadAttention(8, 4, batch_first=True))
    with pytest.raises(TypeError, match="torch.nn.MultiheadAttention"):
        MultiHeadAttention(8, 2).copy_from_torch(torch.nn.Linear(8, 8))
