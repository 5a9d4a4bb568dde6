"""Lesson 10's library (attnedu/kv_cache.py, decoding.py, kv_sharing.py, cache_sizes.py, flex_masks.py,
linear_attention.py) against PyTorch and the package's own references (weights in, numbers out): a cached forward equals
the full one (plain, preallocated and paged caches), generation with a cache gives the same tokens, GQA equals SDPA's
enable_gqa, the absorbed MLA equals the explicit one and its costs equal torch's own count, a rolling buffer equals the
sliding-window mask, FlexAttention's mask_mods equal lesson 06's masks and its block map the masks' blocks, linear
attention equals its quadratic form; and every public function refuses bad input with an error that names the argument
(BAD_CALLS)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnedu.attention import scaled_dot_product_attention
from attnedu.blocks import DecoderLM
from attnedu.cache_sizes import (
    DEEPSEEK_V2,
    LLAMA2_7B_PARAMETERS,
    MODEL_CONFIGS,
    decode_step_costs,
    kv_cache_bytes,
    mla_cache_bytes,
)
from attnedu.decoding import generate_greedy, lm_forward, streaming_losses, window_recompute_losses
from attnedu.flex_masks import (
    EMPTY_BLOCK,
    FULL_BLOCK,
    PARTIAL_BLOCK,
    alibi_score_mod,
    block_map,
    causal_mod,
    document_mod,
    flex_attention_cpu,
    mask_from_mod,
    prefix_lm_mod,
    sliding_window_mod,
)
from attnedu.kv_cache import (
    KVCache,
    PagedKVCache,
    PreallocatedKVCache,
    RollingKVCache,
    SinkCache,
    cache_chunk,
    paged_attention,
    rolling_cache_step,
)
from attnedu.kv_sharing import grouped_attention, mean_pool_kv_heads, mla_attention, to_grouped_query
from attnedu.linear_attention import elu_feature_map, linear_attention
from attnedu.masks import causal_mask, document_mask, prefix_lm_mask, sliding_window_mask
from attnedu.positional import alibi_bias, alibi_slopes, apply_rope


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    lm = DecoderLM(40, d_model=32, num_heads=4, num_layers=2, seed=3).eval()
    with torch.no_grad():  # larger weights than at initialisation, so that attention is far from uniform
        for p in lm.parameters():
            p.mul_(2.0)
    return lm


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 40, (2, 23), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def test_forward_without_cache_is_the_models(model, tokens):
    assert torch.allclose(lm_forward(model, tokens), model(tokens), atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("chunks", [(23,), (1,) * 23, (5, 1, 1, 16), (10, 13)])
def test_cached_forward_in_chunks_equals_the_full_forward(model, tokens, chunks):
    cache, outs, start = KVCache(2), [], 0
    for n in chunks:
        outs.append(lm_forward(model, tokens[:, start : start + n], cache))
        start += n
    assert cache.seen == 23
    assert torch.allclose(torch.cat(outs, 1), model(tokens), atol=1e-5)
    assert cache.nbytes() == kv_cache_bytes(2, 4, 8, bytes_per_number=4, tokens=23, batch=2)


@torch.no_grad()
def test_cached_generation_gives_the_tokens_of_recomputation(model):
    prompt = torch.tensor([3, 1, 4, 1, 5])
    slow = generate_greedy(model, prompt, 40)
    fast = generate_greedy(model, prompt, 40, KVCache(2))
    assert torch.equal(slow, fast) and len(fast) == 45


@torch.no_grad()
def test_cached_generation_with_grouped_query_heads(model):
    gqa = to_grouped_query(model, 2)
    prompt = torch.tensor([7, 2])
    cache = KVCache(2)
    assert torch.equal(generate_greedy(gqa, prompt, 20), generate_greedy(gqa, prompt, 20, cache))
    assert cache.nbytes() == kv_cache_bytes(2, 2, 8, 4, tokens=21)  # the last token's K/V: never needed, never made


def test_the_cache_must_start_empty(model):
    cache = KVCache(2)
    generate_greedy(model, torch.tensor([1, 2]), 1, cache)
    with pytest.raises(ValueError, match="cache should be empty"):
        generate_greedy(model, torch.tensor([1, 2]), 1, cache)


@torch.no_grad()
@pytest.mark.parametrize("window", [1, 4, 7, 30])
def test_rolling_buffer_equals_the_sliding_window_mask(model, tokens, window):
    cache = RollingKVCache(2, window)
    outs = [lm_forward(model, tokens[:, :9], cache)] + [lm_forward(model, tokens[:, t : t + 1], cache)
                                                        for t in range(9, 23)]  # fmt: skip
    expected = lm_forward(model, tokens, mask=sliding_window_mask(23, window - 1, causal=True))
    assert torch.allclose(torch.cat(outs, 1), expected, atol=1e-5)
    assert cache.nbytes() == kv_cache_bytes(2, 4, 8, 4, tokens=window, batch=2)  # fixed, however long the text


@torch.no_grad()
def test_sink_cache_keeps_the_first_tokens_and_the_window(model, tokens):
    ids = tokens[0]
    cache = SinkCache(2, window=6, sinks=2)
    losses = streaming_losses(model, ids, cache)
    assert losses.shape == (22,) and cache.k[0].shape[2] == 8
    # while everything fits, it is the plain causal model
    full = F.cross_entropy(model(ids[None, :8])[0], ids[1:9], reduction="none")
    assert torch.allclose(losses[:8], full, atol=1e-5)
    # one layer (where a cached key depends on its own token only): each prediction reads tokens 0..1 and the last
    # six, at cache positions 0..7, exactly what the model computes on those eight tokens alone
    one = DecoderLM(40, d_model=32, num_heads=4, num_layers=1, seed=5).eval()
    losses = streaming_losses(one, ids, SinkCache(1, window=6, sinks=2))
    for t in (8, 15, 21):
        kept = torch.cat([ids[:2], ids[t - 5 : t + 1]])
        assert torch.allclose(losses[t], F.cross_entropy(one(kept[None])[0, -1], ids[t + 1]), atol=1e-5)


@torch.no_grad()
def test_window_recompute_reads_the_last_tokens_only(model, tokens):
    ids = tokens[0]
    losses = window_recompute_losses(model, ids, 5)
    assert torch.allclose(losses[3], F.cross_entropy(model(ids[None, 3:8])[0, -1], ids[8]), atol=1e-6)
    sink_free = streaming_losses(model, ids, SinkCache(2, window=5))
    assert torch.allclose(sink_free[:5], F.cross_entropy(model(ids[None, :5])[0], ids[1:6], reduction="none"),
                          atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("heads, kv_heads", [(8, 2), (8, 1), (4, 4), (6, 3)])
def test_grouped_attention_equals_sdpa_enable_gqa(heads, kv_heads):
    g = torch.Generator().manual_seed(heads + kv_heads)
    q = torch.randn(2, heads, 5, 16, generator=g)
    k, v = torch.randn(2, kv_heads, 9, 16, generator=g), torch.randn(2, kv_heads, 9, 16, generator=g)
    mask = causal_mask(5, 9, align="bottom-right")
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert (grouped_attention(q, k, v, mask) - expected).abs().max() <= 1e-6


def test_grouped_attention_is_not_repeat():
    """The pairing matters: head h reads K/V head h // group (repeat_interleave), not h % H_kv (repeat)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 4, 3, 8, generator=g),
        torch.randn(1, 2, 3, 8, generator=g),
        torch.randn(1, 2, 3, 8, generator=g),
    )
    wrong = F.scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))
    assert not torch.allclose(grouped_attention(q, k, v), wrong, atol=1e-3)


def test_grouped_attention_validates():
    with pytest.raises(ValueError, match="divides q's 4"):
        grouped_attention(torch.randn(1, 4, 2, 8), torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8))
    with pytest.raises(TypeError):
        grouped_attention(torch.ones(1, 4, 2, 8, dtype=torch.long), torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8))


def test_cache_bytes_of_real_configs():
    per_token = {
        name: kv_cache_bytes(c["num_layers"], c["num_kv_heads"], c["head_dim"]) for name, c in MODEL_CONFIGS.items()
    }
    assert per_token["Llama-2-7B (MHA)"] == 512 * 1024
    assert per_token["Llama-3-8B (GQA-8)"] == 128 * 1024
    mla = mla_cache_bytes(DEEPSEEK_V2["num_layers"], DEEPSEEK_V2["latent_dim"], DEEPSEEK_V2["rope_dim"])
    assert mla == 60 * 576 * 2
    with pytest.raises(TypeError):
        kv_cache_bytes(32.0, 8, 128)
    # Llama-2-7B's parameters from its published shapes: vocabulary 32000, width 4096, SwiGLU 11008, 32 layers of
    # four attention matrices, three feed-forward ones and two RMSNorm gains; embeddings and output head not tied
    d, layers = 4096, 32
    assert LLAMA2_7B_PARAMETERS == 2 * 32000 * d + layers * (4 * d * d + 3 * d * 11008 + 2 * d) + d
    assert MODEL_CONFIGS["Mistral-7B (GQA-8)"]["window"] == 4096


def test_mean_pooling_averages_each_group():
    W = torch.arange(2 * 8, dtype=torch.float32).view(2, 8)  # d_model 2, 4 heads of 2
    pooled = mean_pool_kv_heads(W, 4, 2)
    assert torch.equal(pooled, torch.tensor([[1.0, 2.0, 5.0, 6.0], [9.0, 10.0, 13.0, 14.0]]))
    assert torch.equal(mean_pool_kv_heads(W, 4, 4), W)


@torch.no_grad()
def test_to_grouped_query_with_identical_heads_changes_nothing(model, tokens):
    same = DecoderLM(40, d_model=32, num_heads=4, num_layers=2, seed=3).eval()
    same.load_state_dict(model.state_dict())
    for block in same.blocks:  # make every K/V head of a pair equal: pooling then loses nothing
        for W in (block.attention.W_k, block.attention.W_v):
            rows = W.weight.view(2, 2, 8, 32)
            rows[:, 1] = rows[:, 0]
    assert torch.allclose(to_grouped_query(same, 2)(tokens), same(tokens), atol=1e-5)
    assert not torch.allclose(to_grouped_query(model, 2)(tokens), model(tokens), atol=1e-3)


@pytest.mark.parametrize("masked", [False, True])
def test_mla_absorbed_equals_explicit(masked):
    g = torch.Generator().manual_seed(2)
    d_model, heads, head_dim, latent = 24, 4, 6, 5
    x = torch.randn(2, 7, d_model, generator=g)
    weights = [torch.randn(*s, generator=g) / s[0] ** 0.5 for s in
               ((d_model, heads * head_dim), (d_model, latent), (latent, heads * head_dim),
                (latent, heads * head_dim), (heads * head_dim, d_model))]  # fmt: skip
    mask = causal_mask(7) if masked else None
    explicit, c, no_rope = mla_attention(x, *weights, heads, mask)
    absorbed, c2, _ = mla_attention(x, *weights, heads, mask, absorbed=True)
    assert (explicit - absorbed).abs().max() <= 1e-5 and torch.equal(c, c2) and c.shape == (2, 7, latent)
    assert no_rope is None
    # the explicit form is ordinary multi-head attention on k = c W_uk, v = c W_uv
    W_q, W_dkv, W_uk, W_uv, W_o = weights
    split = lambda t: t.view(2, 7, heads, head_dim).transpose(1, 2)  # noqa: E731
    ref = F.scaled_dot_product_attention(split(x @ W_q), split(c @ W_uk), split(c @ W_uv), is_causal=masked)
    assert torch.allclose(explicit, ref.transpose(1, 2).reshape(2, 7, -1) @ W_o, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_mla_decoupled_rope(masked):
    """DeepSeek-V2's decoupled RoPE: the absorbed form (content scores in the latent space plus a position part from
    one shared rotated key) equals multi-head attention on the concatenated [content; rope] queries and keys."""
    g = torch.Generator().manual_seed(3)
    d_model, heads, head_dim, latent, rope_dim, n = 24, 4, 6, 5, 4, 9
    x = torch.randn(2, n, d_model, generator=g)
    weights = [torch.randn(*s, generator=g) / s[0] ** 0.5 for s in
               ((d_model, heads * head_dim), (d_model, latent), (latent, heads * head_dim),
                (latent, heads * head_dim), (heads * head_dim, d_model))]  # fmt: skip
    W_qr = torch.randn(d_model, heads * rope_dim, generator=g) / d_model**0.5
    W_kr = torch.randn(d_model, rope_dim, generator=g) / d_model**0.5
    mask = causal_mask(n) if masked else None
    explicit, c, k_rope = mla_attention(x, *weights, heads, mask, W_qr=W_qr, W_kr=W_kr)
    absorbed, c2, k_rope2 = mla_attention(x, *weights, heads, mask, absorbed=True, W_qr=W_qr, W_kr=W_kr)
    assert (explicit - absorbed).abs().max() <= 1e-5 and torch.equal(c, c2) and torch.equal(k_rope, k_rope2)
    # the cache: d_c + d_r numbers per token, the count mla_cache_bytes uses
    assert c.shape[-1] + k_rope.shape[-1] == latent + rope_dim
    assert mla_cache_bytes(1, latent, rope_dim, 4, tokens=n, batch=2) == (c.numel() + k_rope.numel()) * 4
    # against torch on the concatenated queries and keys, the rotation written out (halves layout, base 10000)
    W_q, W_dkv, W_uk, W_uv, W_o = weights
    angles = torch.arange(n, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(0, rope_dim, 2) / rope_dim)
    cos, sin = angles.cos().float(), angles.sin().float()

    def rotate(t):
        a, b = t[..., : rope_dim // 2], t[..., rope_dim // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    split = lambda t, d: t.view(len(t), n, heads, d).transpose(1, 2)  # noqa: E731
    q = torch.cat([split(x @ W_q, head_dim), rotate(split(x @ W_qr, rope_dim))], dim=-1)
    k_r = rotate(x @ W_kr)[:, None].expand(-1, heads, -1, -1)
    k = torch.cat([split(c @ W_uk, head_dim), k_r], dim=-1)
    ref = F.scaled_dot_product_attention(q, k, split(c @ W_uv, head_dim), is_causal=masked)
    assert torch.allclose(explicit, ref.transpose(1, 2).reshape(2, n, -1) @ W_o, atol=1e-5)
    assert torch.allclose(k_rope, rotate(x @ W_kr), atol=1e-6)
    # the position part is relative: with the same input at every position, its scores depend on i - j only
    same = x[:1, :1].expand(1, n, d_model)
    _, _, k_same = mla_attention(same, *weights, heads, W_qr=W_qr, W_kr=W_kr)
    q_same = rotate(split(same @ W_qr, rope_dim))
    part = q_same @ k_same[:, None].transpose(-2, -1)  # (1, heads, n, n)
    assert torch.allclose(part[0, :, 5, 2], part[0, :, 4, 1], atol=1e-5)
    assert not torch.allclose(part[0, :, 5, 2], part[0, :, 5, 1], atol=1e-3)
    # and it matters: dropping it changes the output
    assert not torch.allclose(explicit, mla_attention(x, *weights, heads, mask)[0], atol=1e-3)


def _flex_inputs():
    g = torch.Generator().manual_seed(4)
    return tuple(torch.randn(2, 4, 16, 8, generator=g) for _ in range(3))


@pytest.mark.parametrize("name", ["causal", "window", "document", "prefix"])
def test_flex_mask_mods_equal_the_masks_of_lesson_06(name):
    q, k, v = _flex_inputs()
    ids = torch.tensor([[0] * 5 + [1] * 6 + [2] * 5, [0] * 10 + [1] * 6])
    prefix = torch.tensor([3, 7])
    mod, explicit = {
        "causal": (causal_mod, causal_mask(16)[None, None]),
        "window": (sliding_window_mod(3), sliding_window_mask(16, 3, causal=True)[None, None]),
        "document": (document_mod(ids), document_mask(ids)[:, None]),
        "prefix": (prefix_lm_mod(prefix), prefix_lm_mask(prefix, torch.tensor([16, 16]), 16)[:, None]),
    }[name]
    assert torch.equal(mask_from_mod(mod, 2, 4, 16), explicit.expand(2, 4, 16, 16))
    expected, _ = scaled_dot_product_attention(q, k, v, explicit)
    assert (flex_attention_cpu(q, k, v, mod) - expected).abs().max() <= 1e-5


def test_flex_alibi_score_mod_equals_the_bias():
    q, k, v = _flex_inputs()
    out = flex_attention_cpu(q, k, v, causal_mod, alibi_score_mod(alibi_slopes(4)))
    expected, _ = scaled_dot_product_attention(q, k, v, causal_mask(16)[None, None], bias=alibi_bias(4, 16)[None])
    assert (out - expected).abs().max() <= 1e-5


def test_flex_backward_on_the_cpu_is_refused_with_a_message():
    q, k, v = _flex_inputs()
    with pytest.raises(NotImplementedError, match="no backward on the CPU"):
        flex_attention_cpu(q.requires_grad_(), k, v, causal_mod)
    from torch.nn.attention.flex_attention import flex_attention

    with pytest.raises(NotImplementedError):  # what torch itself does: the reason for the message above
        flex_attention(q, k, v)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_equals_its_quadratic_form(causal):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 10, 4, generator=g) for _ in range(3))
    weights = elu_feature_map(q) @ elu_feature_map(k).mT
    if causal:
        weights = weights.tril()
    expected = weights / weights.sum(-1, keepdim=True) @ v
    assert torch.allclose(linear_attention(q, k, v, causal=causal), expected, atol=1e-5)


def test_bad_inputs_name_argument_and_shape(model):
    with pytest.raises(ValueError, match="tokens should be"):
        lm_forward(model, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="cache should have one layer per block"):
        lm_forward(model, torch.tensor([[1]]), KVCache(3))
    with pytest.raises(ValueError, match="SinkCache"):
        lm_forward(model, torch.tensor([[1, 2]]), SinkCache(2, 4))
    with pytest.raises(ValueError, match="W_uk should be"):
        mla_attention(torch.randn(1, 3, 8), torch.randn(8, 8), torch.randn(8, 2), torch.randn(3, 8),
                      torch.randn(2, 8), torch.randn(8, 8), 2)  # fmt: skip
    mla_args = (torch.randn(1, 3, 8), torch.randn(8, 8), torch.randn(8, 2), torch.randn(2, 8), torch.randn(2, 8),
                torch.randn(8, 8), 2)  # fmt: skip
    with pytest.raises(ValueError, match="W_qr and W_kr should be given together"):
        mla_attention(*mla_args, W_kr=torch.randn(8, 4))
    with pytest.raises(ValueError, match="even number of columns"):
        mla_attention(*mla_args, W_qr=torch.randn(8, 6), W_kr=torch.randn(8, 3))
    with pytest.raises(ValueError, match=r"W_qr should be \(8, 8\)"):
        mla_attention(*mla_args, W_qr=torch.randn(8, 4), W_kr=torch.randn(8, 4))
    with pytest.raises(ValueError, match="causal linear attention"):
        linear_attention(torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4), causal=True)
    with pytest.raises(ValueError, match="empty"):
        grouped_attention(torch.randn(1, 2, 0, 4), torch.randn(1, 2, 0, 4), torch.randn(1, 2, 0, 4))


@pytest.mark.parametrize("window", [1, 3, 8])
def test_rolling_cache_step_is_sliding_window_attention(window):
    """A stream fed one token at a time through a rolling buffer of W slots reads what a sliding-window causal mask
    of W keys allows (keys rotated by RoPE at their positions), and what RollingKVCache gives; the slots it has not
    reached yet are never read, whatever they hold."""
    g = torch.Generator().manual_seed(4)
    batch, heads, n, d = 2, 3, 11, 8
    q, k, v = (torch.randn(batch, heads, n, d, generator=g) for _ in range(3))
    pos = torch.arange(n)
    reference = F.scaled_dot_product_attention(
        apply_rope(q, pos), apply_rope(k, pos), v, attn_mask=sliding_window_mask(n, window - 1, causal=True)
    )
    k_buffer = torch.full((batch, heads, window, d), 1e4)  # garbage in the slots not yet written
    v_buffer = torch.full((batch, heads, window, d), float("nan"))
    cache, rows = RollingKVCache(1, window), []
    for t in range(n):
        given = k_buffer.clone()
        out, k_buffer, v_buffer = rolling_cache_step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1],
                                                     k_buffer, v_buffer, t)  # fmt: skip
        assert not torch.equal(given, k_buffer)  # the new key went in ...
        assert torch.equal(k_buffer[:, :, t % window], apply_rope(k[:, :, t : t + 1], pos[t : t + 1])[:, :, 0])
        rows.append(out)
        same = cache.attend(0, q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], pos[t : t + 1])
        assert torch.allclose(out, same, atol=1e-6)
    assert torch.allclose(torch.cat(rows, dim=2), reference, atol=1e-5)
    with pytest.raises(ValueError, match="position"):
        rolling_cache_step(q[:, :, :1], k[:, :, :1], v[:, :, :1], k_buffer, v_buffer, -1)
    with pytest.raises(ValueError, match="v_buffer should be"):
        rolling_cache_step(q[:, :, :1], k[:, :, :1], v[:, :, :1], k_buffer, v_buffer[:, :1], 0)


# --------------------------------------------------------------------------------------------
# The cache itself: preallocated, paged, and a chunk of new tokens
# --------------------------------------------------------------------------------------------


@torch.no_grad()
@pytest.mark.parametrize("chunks", [(23,), (1,) * 23, (5, 1, 1, 16)])
def test_preallocated_cache_equals_the_full_forward_and_never_moves(model, tokens, chunks):
    cache, outs, start = PreallocatedKVCache(2, 30), [], 0
    for n in chunks:
        outs.append(lm_forward(model, tokens[:, start : start + n], cache))
        if start == 0:
            buffers = [t.data_ptr() for t in (*cache.k, *cache.v)]
        start += n
    assert torch.allclose(torch.cat(outs, 1), model(tokens), atol=1e-5)
    assert [t.data_ptr() for t in (*cache.k, *cache.v)] == buffers  # written in place: no new tensor, no copy
    assert cache.seen == 23 and cache.nbytes() == kv_cache_bytes(2, 4, 8, 4, tokens=30, batch=2)  # all 30 reserved


@torch.no_grad()
def test_preallocated_generation_and_its_limit(model):
    prompt = torch.tensor([3, 1, 4, 1, 5])
    assert torch.equal(
        generate_greedy(model, prompt, 20), generate_greedy(model, prompt, 20, PreallocatedKVCache(2, 24))
    )
    with pytest.raises(ValueError, match="max_length"):
        generate_greedy(model, prompt, 21, PreallocatedKVCache(2, 24))


@torch.no_grad()
def test_paged_sequences_share_one_pool_and_equal_their_own_caches(model):
    """Three sequences decoded in turn through one pool of blocks of 4: each gives the logits of its own KVCache; the
    blocks come from the free list as tokens start new blocks, never two sequences in one block; a freed sequence's
    blocks serve the next one, out of order."""
    g = torch.Generator().manual_seed(7)
    texts = [torch.randint(0, 40, (1, n), generator=g) for n in (9, 14, 6)]
    pool = PagedKVCache(2, num_blocks=10, block_size=4)
    sequences = [pool.sequence() for _ in texts]
    outs = [[] for _ in texts]
    for t in range(14):  # one token of each sequence in turn, while it has tokens
        for i, text in enumerate(texts):
            if t < text.shape[1]:
                outs[i].append(lm_forward(model, text[:, t : t + 1], sequences[i]))
    for i, text in enumerate(texts):
        assert torch.allclose(torch.cat(outs[i], 1), model(text), atol=1e-5)
        assert len(sequences[i].block_table) == -(-text.shape[1] // 4)
    tables = [set(s.block_table) for s in sequences]
    assert not (tables[0] & tables[1]) and not (tables[0] & tables[2]) and not (tables[1] & tables[2])
    assert pool.blocks_in_use() == 3 + 4 + 2 and sequences[1].nbytes() == 4 * kv_cache_bytes(2, 4, 8, 4, tokens=4)
    assert sequences[0].block_table == [0, 3, 6]  # interleaved: blocks as the sequences reached them
    sequences[0].free()
    fresh = pool.sequence()
    long_text = torch.randint(0, 40, (1, 12), generator=g)
    assert torch.allclose(lm_forward(model, long_text, fresh), model(long_text), atol=1e-5)
    assert fresh.block_table[:1] == [9] and set(fresh.block_table[1:]) == {0, 3}  # the free list, then freed blocks
    with pytest.raises(RuntimeError, match="pool is full"):
        lm_forward(model, torch.randint(0, 40, (1, 5), generator=g), pool.sequence())


@torch.no_grad()
def test_paged_generation_gives_the_tokens_of_recomputation(model):
    prompt = torch.tensor([3, 1, 4, 1, 5])
    pool = PagedKVCache(2, num_blocks=8, block_size=4)
    assert torch.equal(generate_greedy(model, prompt, 20), generate_greedy(model, prompt, 20, pool.sequence()))


def test_paged_attention_reads_through_the_table():
    """Each sequence's keys gathered by hand from its blocks (in the table's order, not the pool's), the padding of
    its last block and the unused blocks holding large numbers, against grouped attention on the gathered keys."""
    g = torch.Generator().manual_seed(8)
    k_pool, v_pool = 1e4 * torch.randn(7, 2, 3, 8, generator=g), 1e4 * torch.randn(7, 2, 3, 8, generator=g)
    table = torch.tensor([[5, 1, 3], [2, 6, 0]])
    lengths = torch.tensor([8, 4])
    for blocks, n in zip(table.tolist(), lengths.tolist(), strict=True):
        for i, block in enumerate(blocks):
            for offset in range(3):
                if i * 3 + offset < n:
                    k_pool[block, :, offset] = torch.randn(2, 8, generator=g)
                    v_pool[block, :, offset] = torch.randn(2, 8, generator=g)
    q = torch.randn(2, 4, 2, 8, generator=g)  # two queries per sequence: its last two positions
    out = paged_attention(q, k_pool, v_pool, table, lengths)
    for b in range(2):
        n = int(lengths[b])
        keys = torch.cat([k_pool[block] for block in table[b].tolist()], dim=1)[:, :n]  # (H_kv, n, d), by hand
        values = torch.cat([v_pool[block] for block in table[b].tolist()], dim=1)[:, :n]
        mask = torch.arange(n)[None, :] <= torch.arange(n - 2, n)[:, None]
        expected = F.scaled_dot_product_attention(q[b : b + 1], keys[None], values[None], attn_mask=mask,
                                                  enable_gqa=True)  # fmt: skip
        assert torch.allclose(out[b : b + 1], expected, atol=1e-5)


def test_paged_attention_lets_sequences_share_a_block():
    """Two sequences with a common prefix may hold the same block (vLLM's prefix sharing): each reads it once."""
    g = torch.Generator().manual_seed(9)
    pool_k, pool_v = torch.randn(4, 2, 2, 8, generator=g), torch.randn(4, 2, 2, 8, generator=g)
    q = torch.randn(2, 4, 1, 8, generator=g)
    shared = paged_attention(q, pool_k, pool_v, torch.tensor([[0, 1], [0, 3]]), torch.tensor([4, 3]))
    for b, (blocks, n) in enumerate((([0, 1], 4), ([0, 3], 3))):
        alone = paged_attention(q[b : b + 1], pool_k, pool_v, torch.tensor([blocks]), torch.tensor([n]))
        assert torch.equal(shared[b : b + 1], alone)


@pytest.mark.parametrize("cached, new, heads, kv_heads", [(0, 5, 4, 2), (6, 1, 4, 4), (6, 4, 8, 2), (3, 7, 2, 1)])
def test_cache_chunk_is_causal_attention_at_the_new_positions(cached, new, heads, kv_heads):
    g = torch.Generator().manual_seed(cached + new)
    n = cached + new
    q = torch.randn(2, heads, n, 8, generator=g)
    k, v = torch.randn(2, kv_heads, n, 8, generator=g), torch.randn(2, kv_heads, n, 8, generator=g)
    pos = torch.arange(n)
    full = F.scaled_dot_product_attention(apply_rope(q, pos), apply_rope(k, pos), v, is_causal=True, enable_gqa=True)
    k_cache = apply_rope(k[:, :, :cached], pos[:cached]) if cached else k[:, :, :0]
    out, keys, values = cache_chunk(q[:, :, cached:], k[:, :, cached:], v[:, :, cached:], k_cache, v[:, :, :cached])
    assert torch.allclose(out, full[:, :, cached:], atol=1e-5)
    assert torch.allclose(keys, apply_rope(k, pos), atol=1e-6) and torch.equal(values, v)


# --------------------------------------------------------------------------------------------
# MLA's compute, counted by torch; FlexAttention's blocks
# --------------------------------------------------------------------------------------------


def _mla_decode_flops(t: int, form: str, heads=4, head_dim=8, latent=12, rope=4, d_model=16) -> int:
    """Floating-point operations of one decoding step over t cached tokens, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, d_model, generator=g)
    W_q, W_qr = torch.randn(d_model, heads * head_dim, generator=g), torch.randn(d_model, heads * rope, generator=g)
    W_uk, W_uv = torch.randn(latent, heads * head_dim, generator=g), torch.randn(latent, heads * head_dim, generator=g)
    c, k_r = torch.randn(t, latent, generator=g), torch.randn(t, rope, generator=g)
    k, v = torch.randn(heads, t, head_dim, generator=g), torch.randn(heads, t, head_dim, generator=g)
    with FlopCounterMode(display=False) as counter:
        q = (x @ W_q).view(heads, 1, head_dim)
        if form == "MHA":
            w = torch.softmax(q @ k.transpose(1, 2), -1)
            w @ v
        elif form == "MLA, absorbed":
            q_r = (x @ W_qr).view(heads, 1, rope)
            q_latent = torch.bmm(q, W_uk.view(latent, heads, head_dim).permute(1, 2, 0))  # (H, 1, d_c)
            w = torch.softmax(q_latent @ c.T + q_r @ k_r.T, -1)  # (H, 1, t)
            w @ c
        else:
            q_r = (x @ W_qr).view(heads, 1, rope)
            keys = (c @ W_uk).view(t, heads, head_dim).transpose(0, 1)
            values = (c @ W_uv).view(t, heads, head_dim).transpose(0, 1)
            w = torch.softmax(q @ keys.transpose(1, 2) + q_r @ k_r.T, -1)
            w @ values
    return counter.get_total_flops()


@pytest.mark.parametrize("form", ["MHA", "MLA, absorbed", "MLA, keys recomputed"])
def test_decode_step_costs_equal_torchs_count(form):
    per_token = (_mla_decode_flops(40, form) - _mla_decode_flops(24, form)) / 16 / 2  # multiply-adds per cached token
    assert per_token == decode_step_costs(4, 8, 12, 4 if form != "MHA" else 0)[form]["multiply-adds"]
    costs = decode_step_costs(128, 128, 512, 64)  # DeepSeek-V2
    assert costs["MHA"]["numbers read"] == 2 * 128 * 128 and costs["MLA, absorbed"]["numbers read"] == 576


@pytest.mark.parametrize("name", ["causal", "window", "document", "prefix"])
def test_block_map_matches_the_blocks_of_the_dense_mask(name):
    ids = torch.tensor([[0] * 20 + [1] * 30 + [2] * 14])
    mod = {"causal": causal_mod, "window": sliding_window_mod(10), "document": document_mod(ids),
           "prefix": prefix_lm_mod(torch.tensor([24]))}[name]  # fmt: skip
    dense = mask_from_mod(mod, 1, 1, 64)[0, 0]
    blocks = dense.view(4, 16, 4, 16).transpose(1, 2).reshape(4, 4, 256)
    expected = torch.where(blocks.all(-1), FULL_BLOCK, torch.where(blocks.any(-1), PARTIAL_BLOCK, EMPTY_BLOCK))
    assert torch.equal(block_map(mod, 64, 16), expected)
    from torch.nn.attention.flex_attention import create_block_mask

    sparsity = create_block_mask(mod, 1, 1, 64, 64, device="cpu", BLOCK_SIZE=16).sparsity()
    assert abs(sparsity / 100 - float((expected == EMPTY_BLOCK).float().mean())) < 1e-6


@pytest.mark.parametrize("length", [1000, 130])
def test_block_map_follows_torchs_blocks_when_the_length_is_no_multiple_of_the_block(length):
    """block_map's rows are torch's kv_num_blocks (partial) and full_kv_num_blocks (full), whatever the length; its
    share of empty blocks equals sparsity() / 100 only for a length that is a multiple of the block size (its
    docstring): torch weighs each computed block as a whole block against length^2 scores."""
    from torch.nn.attention.flex_attention import create_block_mask

    torchs = create_block_mask(causal_mod, 1, 1, length, length, device="cpu", BLOCK_SIZE=128)
    blocks = block_map(causal_mod, length, 128)
    assert torch.equal((blocks == PARTIAL_BLOCK).sum(1), torchs.kv_num_blocks[0, 0])
    assert torch.equal((blocks == FULL_BLOCK).sum(1), torchs.full_kv_num_blocks[0, 0])
    empty = float((blocks == EMPTY_BLOCK).float().mean())
    assert torchs.sparsity() / 100 < empty - 0.01  # the docstring's caveat, measured


# --------------------------------------------------------------------------------------------
# Bad input: every public function refuses with an error that names the argument
# --------------------------------------------------------------------------------------------


def _lm():
    return DecoderLM(40, d_model=32, num_heads=4, num_layers=2, seed=3).eval()


def _used(cache_factory, n=3):
    """A cache that has seen n tokens of one sequence (through lm_forward, as a model fills it)."""
    cache, model = cache_factory(), _lm()
    with torch.no_grad():
        for t in range(1, n + 1):  # one token at a time: a SinkCache takes no more
            lm_forward(model, torch.tensor([[t]]), cache)
    return cache


def _attend(cache, positions, batch=1, kv_heads=4, head_dim=8, n=None):
    n = len(positions) if n is None else n
    q, k = torch.randn(batch, 4, n, head_dim), torch.randn(batch, kv_heads, n, head_dim)
    return cache.attend(0, q, k, k.clone(), torch.tensor(positions))


CACHES = {
    "KVCache": lambda: KVCache(2),
    "PreallocatedKVCache": lambda: PreallocatedKVCache(2, 16),
    "PagedSequence": lambda: PagedKVCache(2, 8, 4).sequence(),
    "RollingKVCache": lambda: RollingKVCache(2, 4),
    "SinkCache": lambda: SinkCache(2, 4, 1),
}
Q1, K1 = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 1, 8)
POOL = torch.randn(4, 2, 2, 8)

BAD_CALLS = [
    # positions that do not continue what the cache holds (issue 30: a second sequence restarted at 0 read the first
    # one's keys, a negative position returned zeros, a query at 5 on an empty cache read keys 6-9)
    *[
        (
            f"{name}: a second sequence restarted at 0",
            lambda f=f: _attend(_used(f), [0]),
            ValueError,
            r"positions should continue what layer 0 .* holds: it holds positions 0\.\.2, so the new tokens are "
            r"at \[3\], got \[0\]",
        )
        for name, f in CACHES.items()
    ],  # fmt: skip
    *[
        (
            f"{name}: a negative position",
            lambda f=f: _attend(f(), [-1]),
            ValueError,
            r"it is empty, so the new tokens "
            r"are at \[0\], got \[-1\]",
        )
        for name, f in CACHES.items()
    ],  # fmt: skip
    ("KVCache: a query at 5 on an empty cache", lambda: _attend(KVCache(2), [5]), ValueError, r"got \[5\]"),
    (
        "KVCache: positions with a gap",
        lambda: _attend(_used(CACHES["KVCache"]), [4]),
        ValueError,
        r"at \[3\], got \[4\]",
    ),
    ("KVCache: the same position twice", lambda: _attend(KVCache(2), [0, 0]), ValueError, r"at \[0, 1\], got \[0, 0\]"),
    (
        "KVCache: float positions",
        lambda: KVCache(2).attend(0, Q1, K1, K1, torch.tensor([0.0])),
        TypeError,
        "positions should be whole numbers",
    ),  # fmt: skip
    (
        "KVCache: another batch",
        lambda: _attend(_used(CACHES["KVCache"]), [3], batch=2),
        ValueError,
        r"k should be \(batch 1, 4 K/V heads",
    ),  # fmt: skip
    (
        "KVCache: other heads (was a raw torch.cat error)",
        lambda: _attend(_used(CACHES["KVCache"]), [3], kv_heads=2),
        ValueError,
        "like the keys layer 0 of the cache already holds",
    ),  # fmt: skip
    (
        "RollingKVCache: two sequences mixed",
        lambda: _attend(_used(CACHES["RollingKVCache"], 6), [0]),
        ValueError,
        r"holds positions 0\.\.5",
    ),  # fmt: skip
    (
        "RollingKVCache: another batch (was a raw torch.cat error)",
        lambda: _attend(_used(CACHES["RollingKVCache"]), [3], batch=2),
        ValueError,
        "k should be",
    ),  # fmt: skip
    ("SinkCache: two tokens at once", lambda: _attend(SinkCache(2, 4), [0, 1]), ValueError, "one new token"),
    (
        "PreallocatedKVCache: past max_length",
        lambda: _attend(PreallocatedKVCache(2, 2), [0, 1, 2]),
        ValueError,
        "max_length=2",
    ),  # fmt: skip
    (
        "PagedSequence: a batch of two",
        lambda: _attend(PagedKVCache(2, 8, 4).sequence(), [0], batch=2),
        ValueError,
        r"one sequence \(batch 1\)",
    ),  # fmt: skip
    ("PagedKVCache: block_size 0", lambda: PagedKVCache(2, 8, 0), ValueError, "block_size"),
    ("KVCache.next_position: a layer past the last", lambda: KVCache(2).next_position(2), ValueError, "layer"),
    (
        "lm_forward: a used cache given another batch",
        lambda: lm_forward(_lm(), torch.tensor([[1], [2]]), _used(CACHES["KVCache"])),
        ValueError,
        "tokens should continue the 1 sequence",
    ),  # fmt: skip
    (
        "lm_forward: a cache of another model",
        lambda: lm_forward(to_grouped_query(_lm(), 2), torch.tensor([[1]]), _used(CACHES["KVCache"])),
        ValueError,
        "cache should hold 2 K/V heads",
    ),  # fmt: skip
    (
        "lm_forward: a cache fed outside lm_forward",
        lambda: lm_forward(_lm(), torch.tensor([[1]]), (lambda c: (_attend(c, [0]), c)[1])(KVCache(2))),
        ValueError,
        "same tokens in every layer",
    ),  # fmt: skip
    (
        "lm_forward: not a cache",
        lambda: lm_forward(_lm(), torch.tensor([[1]]), "cache"),
        TypeError,
        "cache should be a KVCache",
    ),  # fmt: skip
    (
        "streaming_losses: a used cache",
        lambda: streaming_losses(_lm(), torch.tensor([1, 2, 3]), _used(CACHES["KVCache"])),
        ValueError,
        "cache should be empty",
    ),  # fmt: skip
    (
        "streaming_losses: an id past the vocabulary (was an IndexError)",
        lambda: streaming_losses(_lm(), torch.tensor([1, 2, 40]), KVCache(2)),
        ValueError,
        r"ids should be token ids in 0\.\.39",
    ),  # fmt: skip
    (
        "window_recompute_losses: an id past the vocabulary (was an IndexError)",
        lambda: window_recompute_losses(_lm(), torch.tensor([1, 2, 40]), 1),
        ValueError,
        r"ids should be token ids in 0\.\.39",
    ),  # fmt: skip
    (
        "generate_greedy: not a cache (was an AttributeError)",
        lambda: generate_greedy(_lm(), torch.tensor([1]), 2, "cache"),
        TypeError,
        "cache should be a KVCache",
    ),  # fmt: skip
    (
        "generate_greedy: a used cache",
        lambda: generate_greedy(_lm(), torch.tensor([1]), 2, _used(CACHES["KVCache"])),
        ValueError,
        "cache should be empty",
    ),  # fmt: skip
    (
        "cache_chunk: v_new of other length (was a raw torch.cat error)",
        lambda: cache_chunk(
            torch.randn(1, 4, 2, 8),
            torch.randn(1, 2, 2, 8),
            torch.randn(1, 2, 1, 8),
            torch.randn(1, 2, 3, 8),
            torch.randn(1, 2, 3, 8),
        ),
        ValueError,
        "k_new and v_new should have the same shape",
    ),  # fmt: skip
    (
        "cache_chunk: a cache of other heads",
        lambda: cache_chunk(torch.randn(1, 4, 1, 8), K1, K1, torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8)),
        ValueError,
        "k_cache and v_cache should be",
    ),  # fmt: skip
    (
        "cache_chunk: a float64 cache",
        lambda: cache_chunk(
            torch.randn(1, 4, 1, 8), K1, K1, torch.randn(1, 2, 3, 8).double(), torch.randn(1, 2, 3, 8).double()
        ),
        TypeError,
        "k_cache",
    ),  # fmt: skip
    (
        "rolling_cache_step: v_new of other head_dim (was a raw expand error)",
        lambda: rolling_cache_step(
            Q1, K1, torch.randn(1, 2, 1, 6), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8), 0
        ),
        ValueError,
        "v_new",
    ),  # fmt: skip
    (
        "rolling_cache_step: k_buffer in float64, named",
        lambda: rolling_cache_step(Q1, K1, K1, torch.randn(1, 2, 4, 8).double(), torch.randn(1, 2, 4, 8).double(), 0),
        TypeError,
        "k_buffer torch.float64",
    ),  # fmt: skip
    (
        "paged_attention: a table naming a block the pool lacks",
        lambda: paged_attention(Q1, POOL, POOL, torch.tensor([[0, 9]]), torch.tensor([3])),
        ValueError,
        "block_table should name blocks 0..3",
    ),  # fmt: skip
    (
        "paged_attention: one block named twice in a sequence's row (its keys would count twice)",
        lambda: paged_attention(Q1, POOL, POOL, torch.tensor([[2, 2]]), torch.tensor([3])),
        ValueError,
        "at most once in one sequence's row",
    ),  # fmt: skip
    (
        "paged_attention: lengths past the table",
        lambda: paged_attention(Q1, POOL, POOL, torch.tensor([[0, 1]]), torch.tensor([5])),
        ValueError,
        "lengths should be between",
    ),  # fmt: skip
    (
        "paged_attention: a float table",
        lambda: paged_attention(Q1, POOL, POOL, torch.tensor([[0.0, 1.0]]), torch.tensor([3])),
        TypeError,
        "block_table should hold integers",
    ),  # fmt: skip
    (
        "kv_cache_bytes: bits, not bytes",
        lambda: kv_cache_bytes(32, 8, 128, 16),
        ValueError,
        "that counts bits",
    ),  # fmt: skip
    ("mla_cache_bytes: an odd RoPE key", lambda: mla_cache_bytes(60, 512, 63), ValueError, "rope_dim should be even"),
    (
        "document_mod: float ids",
        lambda: document_mod(torch.zeros(1, 4)),
        TypeError,
        "document_ids should hold integers",
    ),  # fmt: skip
    (
        "prefix_lm_mod: a negative prefix",
        lambda: prefix_lm_mod(torch.tensor([-1])),
        ValueError,
        "prefix_lengths should be at least 0",
    ),  # fmt: skip
    (
        "flex_attention_cpu: documents of another batch (was an IndexError)",
        lambda: flex_attention_cpu(*_flex_inputs(), document_mod(torch.zeros(1, 16, dtype=torch.long))),
        ValueError,
        "mask_mod should serve inputs of batch 2",
    ),  # fmt: skip
    (
        "flex_attention_cpu: ALiBi slopes for other heads (was an IndexError)",
        lambda: flex_attention_cpu(*_flex_inputs(), causal_mod, alibi_score_mod(torch.ones(2))),
        ValueError,
        "score_mod should serve inputs of heads 4",
    ),  # fmt: skip
    (
        "flex_attention_cpu: a mask_mod of two arguments (was an AssertionError)",
        lambda: flex_attention_cpu(*_flex_inputs(), lambda b, h: True),
        TypeError,
        "mask_mod should take 4 arguments",
    ),  # fmt: skip
    (
        "flex_attention_cpu: a learner's mod that reads past its tensor (was an IndexError)",
        lambda: flex_attention_cpu(*_flex_inputs(), lambda b, h, i, j: torch.zeros(3, dtype=torch.bool)[i]),
        ValueError,
        "should index only within the tensors",
    ),  # fmt: skip
    (
        "mask_from_mod: documents shorter than the length (was an IndexError)",
        lambda: mask_from_mod(document_mod(torch.zeros(2, 10, dtype=torch.long)), 2, 1, 16),
        ValueError,
        "should serve inputs of length 16",
    ),  # fmt: skip
    ("block_map: block_size 0", lambda: block_map(causal_mod, 16, 0), ValueError, "block_size"),
    (
        "elu_feature_map: a list (was torch's TypeError)",
        lambda: elu_feature_map([1.0]),
        TypeError,
        r"x should be a torch\.Tensor",
    ),  # fmt: skip
    (
        "elu_feature_map: integers (was a NotImplementedError)",
        lambda: elu_feature_map(torch.tensor([1])),
        TypeError,
        "x should be a floating-point tensor",
    ),  # fmt: skip
    ("decode_step_costs: no heads", lambda: decode_step_costs(0, 8, 16), ValueError, "num_heads"),
]


@pytest.mark.parametrize("call, error, pattern", [row[1:] for row in BAD_CALLS], ids=[row[0] for row in BAD_CALLS])
def test_bad_call_raises_an_error_naming_the_argument(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()
