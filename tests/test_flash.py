"""attnedu.flash: naive, online softmax and tiled attention against PyTorch's SDPA."""

import itertools

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

from attnedu import checks
from attnedu.flash import (
    attention_flops,
    block_update,
    causal_block_update,
    causal_tiles,
    merge_softmax_states,
    naive_attention,
    online_softmax,
    online_softmax_blocks,
    scores_bytes,
    tile_backward,
    tiled_attention,
    tiled_attention_backward,
    tiled_attention_forward,
)
from attnedu.masks import causal_block, causal_mask

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 1e-2, torch.float64: 1e-10}


def qkv(batch, heads, n_q, n_k, head_dim, value_dim=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n_q, head_dim, generator=g)
    k = torch.randn(batch, heads, n_k, head_dim, generator=g)
    v = torch.randn(batch, heads, n_k, value_dim or head_dim, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def reference(q, k, v, causal):
    """SDPA in float64: the exact answer the low-precision versions are compared with."""
    return sdpa(q.double(), k.double(), v.double(), is_causal=causal)


@pytest.mark.parametrize("block", [1, 3, 4, 7, 100])
def test_online_softmax_equals_softmax(block):
    scores = 30 * torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(block))  # large: exp would overflow
    torch.testing.assert_close(online_softmax(scores, block), torch.softmax(scores, dim=-1))


def test_online_softmax_keeps_minus_infinity_as_zero_weight():
    scores = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")]])
    torch.testing.assert_close(online_softmax(scores, 2), torch.softmax(scores, dim=-1))


@pytest.mark.parametrize("causal", [False, True])
def test_naive_equals_sdpa(causal):
    q, k, v = qkv(2, 3, 9, 9, 8)
    torch.testing.assert_close(naive_attention(q, k, v, is_causal=causal), sdpa(q, k, v, is_causal=causal))


# Random shapes: lengths that are and are not multiples of the blocks, query_len != key_len, value_dim != head_dim.
SHAPES = [
    (1, 1, 1, 1, 4, 4, 4, 4),
    (2, 3, 17, 17, 8, 8, 4, 4),
    (1, 2, 33, 20, 16, 12, 8, 16),
    (2, 1, 20, 33, 16, 16, 16, 8),
    (1, 2, 64, 64, 32, 32, 16, 16),
    (1, 1, 50, 50, 8, 8, 64, 64),  # one block bigger than the sequence
]


@pytest.mark.parametrize(("shape", "causal", "dtype"), list(itertools.product(SHAPES, [False, True], TOLERANCE)))
def test_tiled_equals_sdpa(shape, causal, dtype):
    batch, heads, n_q, n_k, head_dim, value_dim, block_q, block_k = shape
    q, k, v = qkv(batch, heads, n_q, n_k, head_dim, value_dim, dtype=dtype, seed=n_q * n_k)
    out = tiled_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    assert out.dtype == dtype and out.shape == (batch, heads, n_q, value_dim)
    expected = reference(q, k, v, causal)
    assert (out.double() - expected).abs().max().item() <= TOLERANCE[dtype]


@pytest.mark.parametrize("seed", range(8))
def test_tiled_equals_sdpa_over_random_shapes(seed):
    g = torch.Generator().manual_seed(seed)
    n_q, n_k, head_dim, block_q, block_k = (int(torch.randint(1, hi, (1,), generator=g)) for hi in (70, 70, 33, 40, 40))
    causal = bool(seed % 2)
    q, k, v = qkv(2, 2, n_q, n_k, head_dim, seed=seed)
    out = tiled_attention(q, k, v, is_causal=causal, block_q=block_q, block_k=block_k)
    torch.testing.assert_close(out, sdpa(q, k, v, is_causal=causal), atol=1e-5, rtol=1e-5)


def test_tiled_works_at_default_blocks_and_returns_the_log_sum_exp():
    q, k, v = qkv(1, 2, 300, 700, 16)
    out, lse = tiled_attention_forward(q, k, v)
    torch.testing.assert_close(out, sdpa(q, k, v), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.transpose(-1, -2) / 4, dim=-1), atol=1e-5, rtol=1e-5)


def test_tiled_accepts_three_dimensional_inputs():
    q, k, v = (t[0] for t in qkv(1, 3, 10, 12, 8))
    torch.testing.assert_close(tiled_attention(q, k, v, block_q=4, block_k=5), sdpa(q, k, v))


@pytest.mark.parametrize("causal", [False, True])
def test_backward_by_recomputation_matches_autograd(causal):
    q, k, v = qkv(2, 2, 19, 19 if causal else 23, 8, 6, dtype=torch.float64)
    for t in (q, k, v):
        t.requires_grad_(True)
    grad_out = torch.randn(2, 2, 19, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ours = torch.autograd.grad(tiled_attention(q, k, v, is_causal=causal, block_q=4, block_k=8), (q, k, v), grad_out)
    theirs = torch.autograd.grad(sdpa(q, k, v, is_causal=causal), (q, k, v), grad_out)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_gradcheck():
    q, k, v = (t.requires_grad_(True) for t in qkv(1, 1, 5, 6, 3, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda a, b, c: tiled_attention(a, b, c, block_q=2, block_k=4), (q, k, v))


def test_causal_rows_never_see_the_future():
    q, k, v = qkv(1, 1, 12, 12, 4)
    v2 = v.clone()
    v2[..., 7:, :] += 100  # change only keys after position 6
    before = tiled_attention(q, k, v, is_causal=True, block_q=3, block_k=5)
    after = tiled_attention(q, k, v2, is_causal=True, block_q=3, block_k=5)
    torch.testing.assert_close(before[..., :7, :], after[..., :7, :])


def test_bad_inputs_raise_errors_that_say_the_fix():
    q, k, v = qkv(1, 2, 4, 5, 8)
    with pytest.raises(ValueError, match="same head_dim"):
        tiled_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="same key_len"):
        tiled_attention(q, k, v[..., :3, :])
    with pytest.raises(ValueError, match="leading dimensions"):
        tiled_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(TypeError, match="share one dtype"):
        tiled_attention(q, k.double(), v)
    with pytest.raises(TypeError, match="floating-point"):
        tiled_attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="torch.Tensor"):
        tiled_attention(q.tolist(), k, v)
    with pytest.raises(ValueError, match="block_q"):
        tiled_attention(q, k, v, block_q=0)
    with pytest.raises(TypeError, match="block_k.*should be an int"):  # a float where a count belongs
        tiled_attention(q, k, v, block_k=2.5)
    with pytest.raises(TypeError, match="is_causal"):
        tiled_attention(q, k, v, is_causal="yes")
    with pytest.raises(ValueError, match="block_size"):
        online_softmax(torch.zeros(3), 0)
    with pytest.raises(TypeError, match="is_causal"):  # any truthy value used to count as True
        naive_attention(q, k, v, is_causal=1)
    with pytest.raises(TypeError, match="causal"):
        attention_flops(1, 2, 4, 4, 8, causal="no")
    out, lse = tiled_attention_forward(q, k, v)
    with pytest.raises(ValueError, match=r"lse should be a float tensor of shape \(1, 2, 4\)"):
        tiled_attention_backward(q, k, v, out, lse[..., :3], out)
    with pytest.raises(ValueError, match=r"grad_out should be a float tensor of shape \(1, 2, 4, 8\)"):
        tiled_attention_backward(q, k, v, out, lse, out.transpose(-1, -2))
    with pytest.raises(ValueError, match="order.*'key', 'query'"):
        tiled_attention_backward(q, k, v, out, lse, out, order="keys")
    with pytest.raises(ValueError, match="key_len"):
        causal_tiles(8, 2, 2, key_len=0)


def test_flops_and_bytes_conventions():
    assert attention_flops(1, 1, 2, 3, 4) == 4 * 2 * 3 * 4
    assert attention_flops(16, 8, 4096, 4096, 64) == 4 * 16 * 8 * 4096**2 * 64
    assert attention_flops(2, 2, 8, 8, 8, causal=True) * 2 == attention_flops(2, 2, 8, 8, 8)
    assert scores_bytes(1, 8, 4096, 4096, 4) == 512 * 2**20  # one N x N score matrix, B=1, H=8, N=4096, fp32: 512 MiB
    with pytest.raises(ValueError, match="head_dim"):
        attention_flops(1, 1, 2, 2, 0)


@pytest.mark.parametrize("n_q, n_k, block_q, block_k", [(8, 8, 2, 2), (12, 12, 4, 3), (10, 10, 3, 4), (5, 5, 8, 2),
                                                        (13, 13, 2, 5), (7, 11, 3, 4), (11, 7, 4, 3)])  # fmt: skip
def test_causal_tiles_agree_with_the_pairs_they_hold(n_q, n_k, block_q, block_k):
    """A tile is computed exactly when one of its (query, key) pairs is allowed, and masked exactly when it holds
    both an allowed and a blocked pair (brute force over the full causal mask)."""
    compute, masked = causal_tiles(n_q, block_q, block_k, n_k)
    full = causal_mask(n_q, n_k, align="top-left")
    for i, q_start in enumerate(range(0, n_q, block_q)):
        for j, k_start in enumerate(range(0, n_k, block_k)):
            tile = full[q_start : q_start + block_q, k_start : k_start + block_k]
            assert bool(compute[i, j]) == bool(tile.any()), (i, j)
            assert bool(masked[i, j]) == bool(tile.any() and not tile.all()), (i, j)
            assert torch.equal(tile, causal_block(q_start, q_start + tile.shape[0], k_start, k_start + tile.shape[1]))
    assert checks.EXERCISES["causal_tiles"].reference is causal_tiles


def test_block_update_carries_the_softmax_across_tiles():
    """block_update over the key blocks of one query block, then acc / l, equals softmax attention; with keys
    marked invalid it equals attention over the valid keys only; the inputs are left unchanged."""
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(5, 4, generator=g), torch.randn(11, 4, generator=g), torch.randn(11, 3, generator=g)
    m, l, acc = torch.full((5,), float("-inf")), torch.zeros(5), torch.zeros(5, 3)
    valid = torch.arange(11) < 9
    for start in range(0, 11, 4):
        before = (m.clone(), l.clone(), acc.clone(), q.clone())
        state = block_update(m, l, acc, q, k[start : start + 4], v[start : start + 4], valid[start : start + 4])
        assert all(torch.equal(a, b) for a, b in zip(before, (m, l, acc, q), strict=True))  # inputs unchanged
        m, l, acc = state
    expected = torch.softmax(q @ k[:9].T / 2.0, dim=-1) @ v[:9]
    torch.testing.assert_close(acc / l[:, None], expected)
    torch.testing.assert_close(m + torch.log(l), torch.logsumexp(q @ k[:9].T / 2.0, dim=-1))
    with pytest.raises(ValueError, match="allowed should broadcast"):
        block_update(m, l, acc, q, k[:4], v[:4], torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="m and l should be"):
        block_update(m[:2], l, acc, q, k[:4], v[:4])


def test_online_softmax_blocks_show_the_rescale():
    """After each block: the running maximum of what was read, and the sum of exp(s - m) over it."""
    row = torch.tensor([[1.0, 3.0, 0.5, 2.0, 6.0, 1.5, 0.0]], dtype=torch.float64)
    states = list(online_softmax_blocks(row, 3))
    assert [end for end, _, _ in states] == [3, 6, 7]
    for end, m, l in states:
        assert m.item() == row[0, :end].max().item()
        assert abs(l.item() - torch.exp(row[0, :end] - m).sum().item()) < 1e-12


def _state(scores: torch.Tensor, v: torch.Tensor, keys: torch.Tensor):
    """The softmax state (m, l, o) of each query over the keys ``keys`` (a bool (n_k,) selection), computed directly."""
    s = scores[:, keys]
    m = s.amax(dim=1) if s.shape[1] else torch.full((scores.shape[0],), float("-inf"), dtype=scores.dtype)
    p = torch.exp(s - m[:, None]) if s.shape[1] else s
    return m, p.sum(dim=1), p @ v[keys]


def test_merge_softmax_states_gives_the_state_over_all_keys():
    """Two states over disjoint sets of keys (not contiguous) merge into the state over their union: o / l is the
    softmax attention over all keys and m + log l their log-sum-exp; the merge is symmetric, chains, and leaves its
    inputs alone."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(n, dim, generator=g, dtype=torch.float64) for n, dim in ((6, 4), (11, 4), (11, 3)))
    scores = q @ k.T / 2.0 + torch.linspace(0, 6, 11, dtype=torch.float64)  # later keys raise the maximum
    first = torch.rand(11, generator=g) < 0.5
    a, b = _state(scores, v, first), _state(scores, v, ~first)
    before = [x.clone() for x in (*a, *b)]
    m, l, o = merge_softmax_states(*a, *b)
    assert all(torch.equal(x, y) for x, y in zip(before, (*a, *b), strict=True))
    torch.testing.assert_close(o / l[:, None], torch.softmax(scores, dim=1) @ v)
    torch.testing.assert_close(m + torch.log(l), torch.logsumexp(scores, dim=1))
    for x, y in zip(merge_softmax_states(*b, *a), (m, l, o), strict=True):
        torch.testing.assert_close(x, y)
    thirds = [torch.arange(11) % 3 == r for r in range(3)]
    chained = merge_softmax_states(*merge_softmax_states(*_state(scores, v, thirds[0]), *_state(scores, v, thirds[1])),
                                   *_state(scores, v, thirds[2]))  # fmt: skip
    for x, y in zip(chained, (m, l, o), strict=True):
        torch.testing.assert_close(x, y)


def test_merging_an_empty_state():
    """A state over no keys (m = -inf, l = 0, o = 0) adds nothing; two of them give another, not NaN."""
    g = torch.Generator().manual_seed(6)
    full = (torch.randn(3, generator=g), torch.rand(3, generator=g) + 1, torch.randn(3, 2, generator=g))
    empty = (torch.full((3,), float("-inf")), torch.zeros(3), torch.zeros(3, 2))
    for merged in (merge_softmax_states(*full, *empty), merge_softmax_states(*empty, *full)):
        assert all(torch.equal(x, y) for x, y in zip(merged, full, strict=True))
    m, l, o = merge_softmax_states(*empty, *empty)
    assert torch.equal(m, empty[0]) and torch.equal(l, empty[1]) and torch.equal(o, empty[2])
    with pytest.raises(ValueError, match="same queries"):
        merge_softmax_states(*full, empty[0][:2], empty[1][:2], empty[2][:2])
    with pytest.raises(ValueError, match="a softmax state is m"):
        merge_softmax_states(full[0], full[1][:2], full[2], *empty)


@pytest.mark.parametrize("block_q, block_k", [(3, 4), (4, 4), (5, 2)])
def test_causal_block_update_over_every_tile_is_causal_attention(block_q, block_k):
    """Every tile of a causal pass through causal_block_update (those above the diagonal too: fully masked, they
    change nothing), then acc / l, equals causal attention; a split that starts in the middle of the sequence,
    merged with the one before it, too, though its first tile has rows that see no key (they stay empty, not NaN)."""
    g = torch.Generator().manual_seed(7)
    n, d = 11, 4
    q, k, v = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g), torch.randn(n, 3, generator=g)
    expected = naive_attention(q, k, v, is_causal=True)

    def state_over(q_start, q_end, key_starts):
        m, l, acc = (
            torch.full((q_end - q_start,), float("-inf")),
            torch.zeros(q_end - q_start),
            torch.zeros(q_end - q_start, 3),
        )
        for k_start in key_starts:
            k_end = min(k_start + block_k, n)
            m, l, acc = causal_block_update(m, l, acc, q[q_start:q_end], k[k_start:k_end], v[k_start:k_end],
                                            q_start, k_start)  # fmt: skip
        return m, l, acc

    split = block_k * 1  # the second split starts at key block 1
    for q_start in range(0, n, block_q):
        q_end = min(q_start + block_q, n)
        m, l, acc = state_over(q_start, q_end, range(0, n, block_k))
        torch.testing.assert_close(acc / l[:, None], expected[q_start:q_end])
        late = state_over(q_start, q_end, range(split, n, block_k))
        empty = torch.arange(q_start, q_end) < split  # rows before the split's first key: nothing to attend
        assert torch.isinf(late[0][empty]).all() and (late[1][empty] == 0).all() and (late[2][empty] == 0).all()
        assert not any(torch.isnan(x).any() for x in late)
        m, l, acc = merge_softmax_states(*state_over(q_start, q_end, range(0, split, block_k)), *late)
        torch.testing.assert_close(acc / l[:, None], expected[q_start:q_end])


def test_the_exercises_references_are_these_functions():
    for name, fn in (("merge_softmax_states", merge_softmax_states), ("causal_block_update", causal_block_update),
                     ("tile_backward", tile_backward)):  # fmt: skip
        assert checks.EXERCISES[name].reference is fn


def test_causal_block_update_checks_its_positions():
    m, l, acc = torch.zeros(2), torch.ones(2), torch.zeros(2, 3)
    q, k, v = torch.zeros(2, 4), torch.zeros(3, 4), torch.zeros(3, 3)
    with pytest.raises(ValueError, match="q_start"):
        causal_block_update(m, l, acc, q, k, v, -1, 0)
    with pytest.raises(TypeError, match="k_start"):
        causal_block_update(m, l, acc, q, k, v, 0, 1.5)
    with pytest.raises(ValueError, match="v_block"):
        causal_block_update(m, l, acc, q, k, v[:2], 0, 0)


def test_tile_backward_summed_over_the_tiles_is_autograd():
    """The contributions of every tile, rebuilt from the forward's log-sum-exp and D = rowsum(dO * O), sum to the
    gradients PyTorch autograd gives for naive attention (float64, partial last blocks both ways)."""
    g = torch.Generator().manual_seed(8)
    n_q, n_k, d, dv_dim, block_q, block_k = 7, 10, 4, 3, 3, 4
    q, k = torch.randn(n_q, d, generator=g, dtype=torch.float64), torch.randn(n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(n_k, dv_dim, generator=g, dtype=torch.float64)
    grad_out = torch.randn(n_q, dv_dim, generator=g, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = naive_attention(*leaves)
    out.backward(grad_out)
    lse = torch.logsumexp(q @ k.T / 2.0, dim=1)
    d_row = (grad_out * out.detach()).sum(dim=1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for qs in range(0, n_q, block_q):
        for ks in range(0, n_k, block_k):
            rows, keys = slice(qs, qs + block_q), slice(ks, ks + block_k)
            tq, tk, tv = tile_backward(q[rows], k[keys], v[keys], grad_out[rows], lse[rows], d_row[rows])
            dq[qs : qs + block_q] += tq
            dk[ks : ks + block_k] += tk
            dv[ks : ks + block_k] += tv
    for ours, leaf in zip((dq, dk, dv), leaves, strict=True):
        torch.testing.assert_close(ours, leaf.grad)
    with pytest.raises(ValueError, match="lse should be one number per query"):
        tile_backward(q[:3], k[:4], v[:4], grad_out[:3], lse[:2], d_row[:3])
    with pytest.raises(ValueError, match="do_block should be the gradient"):
        tile_backward(q[:3], k[:4], v[:4], grad_out[:2], lse[:3], d_row[:3])
