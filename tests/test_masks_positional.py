"""Masks and positions (lessons 06-07): properties over random shapes, and the mask conventions shown equal
through PyTorch's own APIs."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as torch_sdpa

from attnedu import checks
from attnedu.attention import scaled_dot_product_attention
from attnedu.masks import (
    causal_mask,
    causal_padding_mask,
    document_mask,
    from_additive,
    global_window_mask,
    local_global_mask,
    moved_by,
    padding_mask,
    prefix_lm_mask,
    sliding_window_mask,
    to_additive,
    to_mha_attn_mask,
    to_mha_key_padding_mask,
)
from attnedu.positional import (
    LearnedPositions,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    interpolated_positions,
    ntk_aware_base,
    relative_spread,
    rope_angles,
    sinusoidal_encoding,
)
from attnedu.transformer import TinyTransformer


def test_causal_mask_alignments_when_lengths_differ():
    assert torch.equal(causal_mask(3), torch.ones(3, 3, dtype=torch.bool).tril())
    top_left, bottom_right = causal_mask(2, 4, align="top-left"), causal_mask(2, 4, align="bottom-right")
    assert top_left.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert bottom_right.tolist() == [[True, True, True, False], [True, True, True, True]]
    with pytest.raises(ValueError, match="say how they line up"):
        causal_mask(2, 4)
    q, k, v = torch.randn(1, 2, 2, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    ours, _ = scaled_dot_product_attention(q, k, v, top_left[None, None])
    assert torch.allclose(ours, torch_sdpa(q, k, v, is_causal=True), atol=1e-6)  # torch's is_causal is top-left


def test_sliding_window_and_global_tokens():
    window = sliding_window_mask(6, 1)
    assert window.sum(dim=1).tolist() == [2, 3, 3, 3, 3, 2]
    assert sliding_window_mask(6, 1, causal=True).sum(dim=1).tolist() == [1, 2, 2, 2, 2, 2]
    mask = global_window_mask(6, 1, [0])
    assert mask[0].all() and mask[:, 0].all() and not mask[5, 2]
    with pytest.raises(ValueError, match="outside 0..5"):
        global_window_mask(6, 1, [6])


def test_causal_padding_mask_combines_both():
    mask = causal_padding_mask(torch.tensor([3, 2]), 3)
    assert mask.shape == (2, 3, 3)
    assert mask[1].tolist() == [[True, False, False], [True, True, False], [True, True, False]]


@pytest.mark.parametrize("seed", range(6))
def test_the_three_conventions_agree_through_pytorchs_apis(seed):
    g = torch.Generator().manual_seed(seed)
    batch, length, d_model, heads = 2, int(torch.randint(3, 7, (1,), generator=g)), 8, 2
    x = torch.randn(batch, length, d_model, generator=g)
    lengths = torch.tensor([length, max(1, length - 2)])
    keep = padding_mask(lengths, length)  # True = real token
    causal = causal_mask(length)
    q = k = v = x[:, None].expand(batch, heads, length, d_model)
    both = keep[:, None, None, :] & causal
    boolean = torch_sdpa(q, k, v, attn_mask=both)  # SDPA: True = may attend
    additive = torch_sdpa(q, k, v, attn_mask=to_additive(both))  # additive: 0 / -inf
    ours, _ = scaled_dot_product_attention(q, k, v, both)
    assert torch.allclose(boolean, additive, atol=1e-6) and torch.allclose(ours, boolean, atol=1e-6)
    assert torch.equal(from_additive(to_additive(both)), both)
    mha = torch.nn.MultiheadAttention(d_model, heads, batch_first=True)
    blocked = mha(x, x, x, key_padding_mask=to_mha_key_padding_mask(keep), attn_mask=to_mha_attn_mask(causal))[0]
    floats = mha(x, x, x, key_padding_mask=to_additive(keep), attn_mask=to_additive(causal))[0]
    assert torch.allclose(blocked, floats, atol=1e-6)  # MHA: True = blocked, or the additive form


def test_wrong_masks_are_rejected_with_the_fix():
    with pytest.raises(TypeError, match="whole numbers"):
        padding_mask(torch.tensor([2.5, 1.0]), 3)
    with pytest.raises(TypeError, match="torch.tensor"):
        padding_mask([2, 1], 3)
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        from_additive(torch.tensor([0.0, float("nan")]))


@pytest.mark.parametrize("seed", range(4))
def test_causal_intervention_changes_nothing_before_the_changed_token(seed):
    g = torch.Generator().manual_seed(seed)
    model = TinyTransformer(11, 11, d_model=16, num_heads=2, num_layers=2, positions="learned", max_positions=12)
    tokens = torch.randint(0, 11, (3, 12), generator=g)
    j = int(torch.randint(1, 12, (1,), generator=g))
    changed = tokens.clone()
    changed[:, j] = (changed[:, j] + 1) % 11
    with torch.no_grad():
        before, after = model(tokens), model(changed)
        open_before, open_after = model(tokens, causal=False), model(changed, causal=False)
    assert torch.equal(before[:, :j], after[:, :j]), "with the mask, positions before j must not move at all"
    assert not torch.allclose(open_before[:, :j], open_after[:, :j], atol=1e-4), "without it, they do"


def test_sinusoidal_formulas_and_errors():
    pe = sinusoidal_encoding(50, 16)
    position, i = torch.arange(50.0)[:, None], torch.arange(0, 16, 2.0)
    div = torch.exp(i * (-torch.log(torch.tensor(10000.0)) / 16))  # the exp-log form common in code
    assert torch.allclose(pe[:, 0::2], torch.sin(position * div), atol=1e-5)
    assert torch.allclose(pe[:, 1::2], torch.cos(position * div), atol=1e-5)
    with pytest.raises(ValueError, match="odd"):
        sinusoidal_encoding(10, 7)
    with pytest.raises(ValueError, match="no vector for position 8"):
        LearnedPositions(8, 4)(9)


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
@pytest.mark.parametrize("seed", range(3))
def test_rope_scores_depend_only_on_the_offset(layout, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)

    def score(m, n):
        rq = apply_rope(q[None], torch.tensor([m]), layout)
        rk = apply_rope(k[None], torch.tensor([n]), layout)
        return (rq @ rk.T).item()

    for offset in (0, 1, 5):
        values = [score(m, m - offset) for m in range(offset, offset + 20, 3)]
        assert max(values) - min(values) < 1e-4
    x = torch.randn(5, 8, generator=g)
    assert torch.allclose(apply_rope(x, torch.arange(5), layout).norm(dim=-1), x.norm(dim=-1), atol=1e-5)


def test_rope_layouts_differ():
    x = torch.randn(4, 8)
    assert not torch.allclose(apply_rope(x, torch.arange(4), "halves"), apply_rope(x, torch.arange(4), "interleaved"))


def test_alibi_slopes_and_bias():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))
    bias = alibi_bias(2, 3)
    assert bias.shape == (2, 3, 3) and bias[0, 2, 0] == -2 * 2.0**-4 and bias[1, 2, 2] == 0


# Computed by hand from the rule of Press et al.'s reference implementation (ofirpress/attention_with_linear_biases,
# get_slopes): a power of two n gets 2^(-8/n), 2^(-16/n), ..., 2^(-8); any other number of heads H the slopes of the
# closest power of two below, n, then every other slope of 2n (the 1st, 3rd, 5th, ...), H - n of them.
ALIBI_BY_HAND = {
    1: [2.0**-8],
    4: [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8],
    8: [2.0**-1, 2.0**-2, 2.0**-3, 2.0**-4, 2.0**-5, 2.0**-6, 2.0**-7, 2.0**-8],
    6: [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3],  # the 4's, then slopes 1 and 3 of the 8's
    12: [*(2.0**-k for k in range(1, 9)), 2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5],  # the 8's, then the 16's
    3: [2.0**-4, 2.0**-8, 2.0**-2],  # the 2's, then slope 1 of the 4's
}


@pytest.mark.parametrize("num_heads", sorted(ALIBI_BY_HAND))
def test_alibi_slopes_for_any_number_of_heads(num_heads):
    assert alibi_slopes(num_heads).tolist() == pytest.approx(ALIBI_BY_HAND[num_heads], rel=1e-6)
    bias = alibi_bias(num_heads, 4)
    assert bias[:, 3, 0].tolist() == pytest.approx([-3 * m for m in ALIBI_BY_HAND[num_heads]], rel=1e-6)


def test_alibi_slopes_are_not_the_plain_formula_off_powers_of_two():
    """The old bug: 2^(-8k/H) for every H. It agrees on powers of two only."""
    for num_heads in (2, 4, 8, 16):
        plain = [2.0 ** (-8 * k / num_heads) for k in range(1, num_heads + 1)]
        assert alibi_slopes(num_heads).tolist() == pytest.approx(plain, rel=1e-6)
    plain_6 = [2.0 ** (-8 * k / 6) for k in range(1, 7)]
    assert alibi_slopes(6).tolist() != pytest.approx(plain_6, rel=1e-3)


def test_position_interpolation_and_ntk_aware_base():
    assert interpolated_positions(8, 4).tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    assert interpolated_positions(3, 4).tolist() == [0.0, 1.0, 2.0]  # within the trained length: unchanged
    base = ntk_aware_base(16, 4.0)
    assert base == pytest.approx(10000 * 4 ** (16 / 14))
    ratio = rope_angles(torch.tensor([1.0]), 16, base)[0] / rope_angles(torch.tensor([1.0]), 16)[0]
    assert ratio[0] == pytest.approx(1.0) and ratio[-1] == pytest.approx(1 / 4)  # fastest pair kept, slowest / 4
    assert bool((ratio[1:] < ratio[:-1]).all())  # the slower a pair turns, the more it is stretched
    assert ntk_aware_base(16, 1.0) == 10000.0


def test_rope_extension_reaches_the_model():
    model = TinyTransformer(11, 11, d_model=16, num_heads=2, num_layers=1, positions="rope")
    tokens = torch.randint(0, 11, (2, 8))
    with torch.no_grad():
        plain = model(tokens)
        assert torch.equal(model(tokens, rope_positions=torch.arange(8), rope_base=10000.0), plain)
        assert not torch.allclose(model(tokens, rope_positions=interpolated_positions(8, 4)), plain, atol=1e-4)
        assert not torch.allclose(model(tokens, rope_base=ntk_aware_base(8, 2.0)), plain, atol=1e-4)
    with pytest.raises(ValueError, match="positions='rope' only"):
        TinyTransformer(11, 11, d_model=16, num_heads=2, num_layers=1, positions="alibi")(tokens, rope_base=2e4)


@pytest.mark.parametrize("seed", range(4))
def test_document_mask_against_the_rule_entry_by_entry(seed):
    """Query i may attend key j when both are in the same document and j <= i; padding (-1) is one more document."""
    g = torch.Generator().manual_seed(seed)
    batch, length = 3, 9
    rows = []
    for _ in range(batch):
        cuts = sorted(torch.randint(1, length, (3,), generator=g).tolist())
        ids = torch.zeros(length, dtype=torch.long)
        for cut in cuts:
            ids[cut:] += 1
        ids[length - int(torch.randint(0, 3, (1,), generator=g)) :] = -1  # padding at the end
        rows.append(ids)
    document_ids = torch.stack(rows)
    mask = document_mask(document_ids)
    for b, i, j in itertools.product(range(batch), range(length), range(length)):
        assert bool(mask[b, i, j]) == (bool(document_ids[b, i] == document_ids[b, j]) and j <= i), (b, i, j)
    assert mask.diagonal(dim1=1, dim2=2).all()  # no empty row
    one_document = document_mask(torch.zeros(2, 5, dtype=torch.long))
    assert torch.equal(one_document, causal_mask(5)[None].expand(2, 5, 5))
    with pytest.raises(TypeError, match="whole numbers"):
        document_mask(torch.zeros(1, 3))


@pytest.mark.parametrize("seed", range(4))
def test_local_global_mask_against_the_rule_entry_by_entry(seed):
    """Query i may attend key j when |i - j| <= window or token i or token j is global, in its own sentence."""
    g = torch.Generator().manual_seed(seed)
    batch, length, window = 3, 8, int(torch.randint(0, 3, (1,), generator=g))
    is_global = torch.rand(batch, length, generator=g) < 0.2
    mask = local_global_mask(is_global, window)
    for b, i, j in itertools.product(range(batch), range(length), range(length)):
        rule = abs(i - j) <= window or bool(is_global[b, i]) or bool(is_global[b, j])
        assert bool(mask[b, i, j]) == rule, (b, i, j)
    positions = [0, 5]
    flags = torch.zeros(1, length, dtype=torch.bool)
    flags[0, positions] = True
    assert torch.equal(local_global_mask(flags, 1)[0], global_window_mask(length, 1, positions))


@pytest.mark.parametrize("seed", range(5))
def test_prefix_lm_mask_against_the_rule_entry_by_entry(seed):
    """Key j is visible to query i of sequence b when j < lengths[b] and (j <= i or j < prefix_lengths[b])."""
    g = torch.Generator().manual_seed(seed)
    batch, max_len = 3, 7
    lengths = torch.randint(1, max_len + 1, (batch,), generator=g)
    prefix = (torch.rand(batch, generator=g) * (lengths + 1)).long().clamp(max=lengths)
    mask = prefix_lm_mask(prefix, lengths, max_len)
    for b, i, j in itertools.product(range(batch), range(max_len), range(max_len)):
        assert bool(mask[b, i, j]) == (j < lengths[b] and (j <= i or j < prefix[b])), (b, i, j)
    no_prefix = prefix_lm_mask(torch.zeros_like(lengths), lengths, max_len)
    assert torch.equal(no_prefix, causal_padding_mask(lengths, max_len))
    assert checks.EXERCISES["prefix_lm_mask"].reference is prefix_lm_mask
    with pytest.raises(ValueError, match="between 0 and each sequence's length"):
        prefix_lm_mask(lengths + 1, lengths, max_len)


@pytest.mark.parametrize("seed", range(3))
def test_moved_by_is_what_the_intervention_test_moves(seed):
    """Weights in, numbers out: one attention layer with a document mask, the token at a position changed; exactly
    the outputs moved_by names change, the others stay bit for bit."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([[0, 0, 0, 1, 1, 2, 2, -1], [0, 1, 1, 1, 1, 1, 2, 2]])
    mask = document_mask(ids)
    x = torch.randn(2, 8, 6, generator=g)
    position = int(torch.randint(0, 8, (1,), generator=g))
    changed = x.clone()
    changed[:, position] += 1.0
    before = torch_sdpa(x, x, x, attn_mask=mask)
    after = torch_sdpa(changed, changed, changed, attn_mask=mask)
    moved = (before != after).any(-1)
    assert torch.equal(moved, moved_by(mask, position))
    with pytest.raises(ValueError, match="square"):
        moved_by(mask[:, :3], 1)
    with pytest.raises(ValueError, match="position should be a key position"):
        moved_by(mask, 8)


def test_relative_spread_tells_relative_encodings_from_absolute_ones():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)
    starts = range(0, 200, 17)
    for layout in ("halves", "interleaved"):
        assert relative_spread(lambda x, p, layout=layout: apply_rope(x, p, layout), q, k, 3, starts) < 1e-4
    pe = sinusoidal_encoding(300, 8)
    absolute = relative_spread(lambda x, p: x + pe[p], q, k, 3, starts)
    scores = [((q + pe[n + 3]) @ (k + pe[n])).item() for n in starts]
    assert absolute > 0.1 and abs(absolute - (max(scores) - min(scores))) < 1e-5
    assert relative_spread(lambda x, p: x, q, k, 3, [5]) == 0.0
    with pytest.raises(ValueError, match="at least one position"):
        relative_spread(lambda x, p: x, q, k, 3, [])


def test_a_causal_window_limits_how_far_back_each_query_sees():
    model = TinyTransformer(11, 11, d_model=16, num_heads=2, num_layers=1, positions="rope", seed=0)
    tokens = torch.randint(0, 11, (2, 10), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 2] = (changed[:, 2] + 1) % 11
    with torch.no_grad():
        moved = (model(tokens, window=3) - model(changed, window=3)).abs().amax(-1) > 0
        assert torch.equal(model(tokens, window=9), model(tokens))  # a window as long as the text changes nothing
    assert moved[:, 2:6].all() and not moved[:, :2].any() and not moved[:, 6:].any()  # keys 3 back at most
    with pytest.raises(ValueError, match="causal model only"):
        model(tokens, causal=False, window=3)
