"""attnedu.multihead against torch.nn.MultiheadAttention after weight transfer (weights in, numbers out)."""

import pytest
import torch

from attnedu import checks
from attnedu.masks import padding_mask
from attnedu.multihead import (
    MultiHeadAttention,
    grouped_query_attention,
    merge_heads,
    multi_head_attention,
    per_head_weights,
    split_heads,
)


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
        if bias:  # torch starts its biases at zero, which would not test copying them
            torch.nn.init.normal_(theirs.in_proj_bias)
            torch.nn.init.normal_(theirs.out_proj.bias)
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


def test_per_head_weights_are_slices_of_torchs_stacked_projection():
    """h heads computed one by one with their own (d_model, head_dim) matrices, concatenated and projected,
    equal torch.nn.MultiheadAttention (weights and biases random)."""
    from attnedu.attention import scaled_dot_product_attention

    d_model, heads = 12, 3
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        theirs = torch.nn.MultiheadAttention(d_model, heads, batch_first=True)
        torch.nn.init.normal_(theirs.in_proj_bias)
        x = torch.randn(2, 4, d_model)
    W_q, W_k, W_v = per_head_weights(theirs.in_proj_weight, heads)
    assert W_q.shape == (heads, d_model, d_model // heads)
    b_q, b_k, b_v = theirs.in_proj_bias.view(3, heads, d_model // heads)
    with torch.no_grad():
        one_by_one = [
            scaled_dot_product_attention(x @ W_q[i] + b_q[i], x @ W_k[i] + b_k[i], x @ W_v[i] + b_v[i])[0]
            for i in range(heads)
        ]
        ours = theirs.out_proj(torch.cat(one_by_one, dim=-1))
        expected, _ = theirs(x, x, x)
    assert torch.allclose(ours, expected, atol=1e-5)
    with pytest.raises(ValueError, match="3 d_model, d_model"):
        per_head_weights(theirs.in_proj_weight[:d_model], heads)


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


def test_functional_multi_head_and_grouped_query_equal_the_module_and_torch():
    """multi_head_attention (weights in, vectors as rows) equals attnedu's MultiHeadAttention (bias=False) on the same
    weights, and torch's nn.MultiheadAttention; grouped_query_attention equals torch's scaled_dot_product_attention
    with enable_gqa, and multi_head_attention when every query head has its own key/value head. They are the
    references of lesson 05's exercises."""
    assert checks.EXERCISES["multi_head_attention"].reference is multi_head_attention
    assert checks.EXERCISES["grouped_query_attention"].reference is grouped_query_attention
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        ours = MultiHeadAttention(12, 3, bias=False)
        theirs = torch.nn.MultiheadAttention(12, 3, bias=False, batch_first=True)
        query, key, value = torch.randn(2, 4, 12), torch.randn(2, 5, 12), torch.randn(2, 5, 12)
    mask = padding_mask(torch.tensor([5, 2]), 5)[:, None, :].expand(-1, 4, -1)
    with torch.no_grad():
        ours.copy_from_torch(theirs)
        weights = [m.weight.T for m in (ours.W_q, ours.W_k, ours.W_v, ours.W_o)]  # vectors as rows: x @ W
        out, w = multi_head_attention(query, key, value, mask, *weights, 3)
        expected, expected_w = ours(query, key, value, mask[:, None])
        torch_out, torch_w = theirs(query, key, value, key_padding_mask=~mask[:, 0], average_attn_weights=False)
        assert torch.allclose(out, expected, atol=1e-5) and torch.allclose(w, expected_w, atol=1e-6)
        assert torch.allclose(out, torch_out, atol=1e-5) and torch.allclose(w, torch_w, atol=1e-6)
        out, w = grouped_query_attention(query, key, value, mask, *weights, 3, 3)
        assert torch.allclose(out, expected, atol=1e-5) and torch.allclose(w, expected_w, atol=1e-6)
        g = torch.Generator().manual_seed(1)
        W_q, W_k, W_v = (torch.randn(12, n, generator=g) for n in (12, 4, 4))
        # head_dim 2, groups of 3 query heads per key/value head
        out, w = grouped_query_attention(query, key, value, mask, W_q, W_k, W_v, weights[3], 6, 2)
        q = (query @ W_q).view(2, 4, 6, 2).transpose(1, 2)
        k, v = ((x @ W).view(2, 5, 2, 2).transpose(1, 2) for x, W in ((key, W_k), (value, W_v)))
        heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None], enable_gqa=True)
        assert torch.allclose(out, heads.transpose(1, 2).reshape(2, 4, 12) @ weights[3], atol=1e-5)
        assert w.shape == (2, 6, 4, 5)


def test_head_gate_scales_each_head_before_w_o():
    """head_gate g: output = Concat(g_i head_i) W_o, computed here head by head from the module's own weights."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    gate = torch.tensor([1.0, 0.0, 0.5])
    out, weights = attention(x, x, x, head_gate=gate)
    q, k, v = (split_heads(proj(x), 3) for proj in (attention.W_q, attention.W_k, attention.W_v))
    by_hand = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1) @ v  # head_dim 4
    expected = attention.W_o(merge_heads(by_hand * gate[None, :, None, None]))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1))
    torch.testing.assert_close(attention(x, x, x, head_gate=torch.ones(3))[0], attention(x, x, x)[0])
    with pytest.raises(ValueError, match="head_gate"):
        attention(x, x, x, head_gate=torch.ones(2))
    with pytest.raises(ValueError, match="head_gate"):
        attention(x, x, x, head_gate=torch.tensor([1.0, float("nan"), 1.0]))


def test_heads_and_merge_are_forward_in_two_steps():
    """_heads (each head before W_o) then _merge (gate, concat, W_o): what ablation in attnedu.induction edits
    between."""
    torch.manual_seed(1)
    attention = MultiHeadAttention(8, 2, num_kv_heads=1)
    x, y = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
    heads, weights = attention._heads(x, y, y)
    assert heads.shape == (3, 2, 4, 4) and weights.shape == (3, 2, 4, 6)
    out, same_weights = attention(x, y, y)
    assert torch.equal(attention._merge(heads), out) and torch.equal(weights, same_weights)


def test_the_kv_cache_hook_equals_attention_over_the_whole_sequence():
    """_attend with a cache, fed 3 tokens then 1 at a time, gives what causal attention over the sequence gives."""
    from attnedu.kv_cache import KVCache

    torch.manual_seed(2)
    attention = MultiHeadAttention(16, 4, bias=False, num_kv_heads=2)
    x = torch.randn(2, 6, 16)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    full, _ = attention(x, x, x, causal, rope_positions=torch.arange(6))
    cache = KVCache(1)
    parts = [attention._attend(x[:, :3], x[:, :3], x[:, :3], rope_positions=torch.arange(3), cache=cache)[0]]
    for t in range(3, 6):
        step = x[:, t : t + 1]
        parts.append(attention._attend(step, step, step, rope_positions=torch.tensor([t]), cache=cache)[0])
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    assert cache.k[0].shape == (2, 2, 6, 4)  # the cache holds the 2 key/value heads, not the 4 query heads
