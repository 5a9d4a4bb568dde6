"""Lesson 09's blocks against independent references, weights in, numbers out: PyTorch's own layers where it has them
(nn.RMSNorm, nn.TransformerEncoderLayer in both arrangements, nn.TransformerDecoderLayer), and otherwise a forward
written here from PyTorch's functions (F.scaled_dot_product_attention, F.rms_norm, F.silu) with RoPE written the way
Hugging Face's Llama writes it (rotate_half). Then the properties: causality, the parameter formulas against
counted modules, the corpus's windows and bigram baseline, the language model's training and sampling."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnedu.block_parts import (
    RMSNorm,
    SwiGLU,
    clamped_swiglu,
    group_rms_norm,
    qk_norm_scores,
    qk_score_bound,
    rms_norm,
    swiglu,
    swiglu_hidden,
)
from attnedu.blocks import (
    CrossAttentionDecoderBlock,
    DecoderLM,
    PostNormEncoderBlock,
    PreNormDecoderBlock,
    cross_attention_block_parameters,
    decoder_lm_parameters,
    pre_norm_block,
    pre_norm_block_parameters,
)
from attnedu.init_gradients import BlockStack, ffn_gradient_norms
from attnedu.masks import padding_mask, to_mha_key_padding_mask
from attnedu.models import count_parameters
from attnedu.multihead import MultiHeadAttention, grouped_query_attention
from attnedu.positional import sinusoidal_encoding
from attnedu.tasks import CharCorpus
from attnedu.train import lm_loss, train_lm
from attnedu.transformer import Block, block_parameters


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the notebooks use: with two, tiny models crawl when other work shares the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randomise(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter drawn afresh (norm gains and shifts included, so that a copy that forgot one shows)."""
    g = gen(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]) + (1.0 if p.dim() == 1 else 0.0))
    return module


# --------------------------------------------------------------------------------------------
# RMSNorm, SwiGLU
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, eps", [((2, 5, 8), 1e-6), ((3, 16), 1e-5), ((1, 1, 4, 32), 0.1), ((7,), 0.0)])
def test_rms_norm_equals_torch_rms_norm(shape, eps):
    g = gen(len(shape))
    x = 3 * torch.randn(shape, generator=g)
    theirs = nn.RMSNorm(shape[-1], eps=eps)
    with torch.no_grad():
        theirs.weight.copy_(torch.rand(shape[-1], generator=g) + 0.5)
    ours = RMSNorm(shape[-1], eps=eps)
    ours.load_state_dict(theirs.state_dict())
    assert torch.allclose(ours(x), theirs(x), atol=1e-6)
    assert torch.allclose(rms_norm(x, theirs.weight, eps), theirs(x), atol=1e-6)


def test_rms_norm_rescales_without_centring():
    x = torch.randn(4, 6, 16, generator=gen(1)) + 5.0  # a large mean, which RMSNorm keeps
    y = rms_norm(x, torch.ones(16), 0.0)
    assert torch.allclose(y.pow(2).mean(-1), torch.ones(4, 6), atol=1e-5)
    assert (y.mean(-1) > 0.9).all()  # LayerNorm would have made it 0
    assert torch.equal(rms_norm(torch.zeros(2, 3), torch.ones(3), 1e-6), torch.zeros(2, 3))  # eps: no 0/0


def test_swiglu_equals_the_formula_written_with_torch_functions():
    g = gen(2)
    x = torch.randn(2, 5, 12, generator=g)
    module = randomise(SwiGLU(12, 20), 3)
    expected = F.linear(F.silu(F.linear(x, module.gate.weight)) * F.linear(x, module.up.weight), module.down.weight)
    assert torch.allclose(module(x), expected, atol=1e-6)
    W_gate, W_up, W_down = module.gate.weight.T, module.up.weight.T, module.down.weight.T
    assert torch.allclose(swiglu(x, W_gate, W_up, W_down), expected, atol=1e-6)
    assert not torch.allclose(swiglu(x, W_up, W_gate, W_down), expected, atol=1e-3)  # the gate is not the up


@pytest.mark.parametrize("d_model, expected", [(128, 344), (512, 1368), (2048, 5464), (3, 8)])
def test_swiglu_hidden_keeps_the_parameter_count(d_model, expected):
    assert swiglu_hidden(d_model) == expected
    assert 3 * d_model * expected >= 2 * d_model * 4 * d_model > 3 * d_model * (expected - 8)


# --------------------------------------------------------------------------------------------
# The 2017 blocks against PyTorch's layers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_post_norm_encoder_block_equals_torch_encoder_layer(seed):
    d_model, num_heads, d_ff = [(16, 4, 40), (12, 3, 24), (8, 1, 32), (24, 6, 48)][seed]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        theirs = randomise(nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True), seed)
    ours = PostNormEncoderBlock(d_model, num_heads, d_ff).copy_from_torch(theirs)
    g = gen(seed)
    x = torch.randn(3, 6, d_model, generator=g)
    keep = padding_mask(torch.tensor([6, 2, 4]), 6)
    out, weights = ours(x, keep[:, None, None, :])
    expected = theirs(x, src_key_padding_mask=to_mha_key_padding_mask(keep))
    assert torch.allclose(out[keep], expected[keep], atol=1e-5)
    assert weights.shape == (3, num_heads, 6, 6) and (weights[1, :, :, 2:] == 0).all()


def test_the_pre_norm_block_is_the_same_parameters_in_torch_norm_first_arrangement():
    """Block (pre-norm) loads PostNormEncoderBlock's weights and equals torch's norm_first=True layer; the two
    arrangements differ, so only where the norms sit tells them apart."""
    theirs = randomise(nn.TransformerEncoderLayer(16, 4, 40, dropout=0.0, batch_first=True, norm_first=True), 7)
    post = PostNormEncoderBlock(16, 4, 40)
    for ours, src in ((post.attention, theirs.self_attn),):
        ours.copy_from_torch(src)
    with torch.no_grad():
        for mine, other in ((post.feed_forward[0], theirs.linear1), (post.feed_forward[2], theirs.linear2),
                            (post.norm1, theirs.norm1), (post.norm2, theirs.norm2)):  # fmt: skip
            mine.weight.copy_(other.weight)
            mine.bias.copy_(other.bias)
    pre = Block(16, 4, 40)
    pre.load_state_dict(post.state_dict())
    x = torch.randn(2, 5, 16, generator=gen(8))
    assert torch.allclose(pre(x)[0], theirs(x), atol=1e-5)
    assert not torch.allclose(post(x)[0], theirs(x), atol=1e-2)


def test_cross_attention_decoder_block_equals_torch_decoder_layer():
    theirs = randomise(nn.TransformerDecoderLayer(16, 4, 40, dropout=0.0, batch_first=True), 9)
    ours = CrossAttentionDecoderBlock(16, 4, 40).copy_from_torch(theirs)
    g = gen(9)
    target, memory = torch.randn(3, 5, 16, generator=g), torch.randn(3, 7, 16, generator=g)
    keep = padding_mask(torch.tensor([7, 3, 5]), 7)
    out, self_weights, cross_weights = ours(target, memory, keep)
    expected = theirs(target, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), tgt_is_causal=True,
                      memory_key_padding_mask=to_mha_key_padding_mask(keep))  # fmt: skip
    assert torch.allclose(out, expected, atol=1e-5)
    assert self_weights.shape == (3, 4, 5, 5) and (self_weights.triu(1) == 0).all()
    assert cross_weights.shape == (3, 4, 5, 7) and (cross_weights[1, :, :, 3:] == 0).all()


def test_cross_attention_reads_the_source_and_not_the_future():
    block = randomise(CrossAttentionDecoderBlock(8, 2, 16), 10)
    g = gen(10)
    target, memory = torch.randn(1, 6, 8, generator=g), torch.randn(1, 4, 8, generator=g)
    changed_target, changed_memory = target.clone(), memory.clone()
    changed_target[:, 3] += 1.0
    changed_memory[:, 2] += 1.0
    with torch.no_grad():
        out = block(target, memory)[0]
        assert torch.equal(block(changed_target, memory)[0][:, :3], out[:, :3])  # causal
        assert (block(target, changed_memory)[0] - out).abs().amax(-1).min() > 0  # every position reads the source


# --------------------------------------------------------------------------------------------
# Today's block against a forward written from PyTorch's functions
# --------------------------------------------------------------------------------------------


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _llama_rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Hugging Face's Llama: inv_freq = 1 / 10000^(2i/d), emb = cat(freqs, freqs), x cos + rotate_half(x) sin."""
    dim = x.shape[-1]
    inv_freq = 1.0 / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    emb = torch.cat([torch.outer(positions.double(), inv_freq)] * 2, dim=-1)
    return x * emb.cos().float() + _rotate_half(x) * emb.sin().float()


def _reference_pre_norm_block(block: PreNormDecoderBlock, x: torch.Tensor, positions: torch.Tensor | None):
    att, ffn = block.attention, block.feed_forward
    batch, seq_len, d_model = x.shape
    h = F.rms_norm(x, (d_model,), block.attention_norm.weight, eps=block.attention_norm.eps)

    def heads(W, n):
        return F.linear(h, W.weight).view(batch, seq_len, n, att.head_dim).transpose(1, 2)

    q, k, v = heads(att.W_q, att.num_heads), heads(att.W_k, att.num_kv_heads), heads(att.W_v, att.num_kv_heads)
    if positions is not None:
        q, k = _llama_rope(q, positions), _llama_rope(k, positions)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=att.num_kv_heads != att.num_heads)
    x = x + F.linear(out.transpose(1, 2).reshape(batch, seq_len, d_model), att.W_o.weight)
    h = F.rms_norm(x, (d_model,), block.ffn_norm.weight, eps=block.ffn_norm.eps)
    return x + F.linear(F.silu(F.linear(h, ffn.gate.weight)) * F.linear(h, ffn.up.weight), ffn.down.weight)


@pytest.mark.parametrize("num_kv_heads, rope", [(None, True), (2, True), (1, True), (None, False)])
def test_pre_norm_decoder_block_equals_a_forward_from_torch_functions(num_kv_heads, rope):
    block = randomise(PreNormDecoderBlock(32, 4, 48, num_kv_heads=num_kv_heads), 11)
    x = torch.randn(2, 9, 32, generator=gen(11))
    positions = torch.arange(9) if rope else None
    out, weights = block(x, positions)
    assert torch.allclose(out, _reference_pre_norm_block(block, x, positions), atol=1e-5)
    assert weights.shape == (2, 4, 9, 9) and (weights.triu(1) == 0).all()
    assert not any(name.endswith("bias") for name, _ in block.named_parameters())


def test_pre_norm_block_from_weights_equals_the_module_without_rope():
    block = randomise(PreNormDecoderBlock(24, 3, 40), 12)
    x = torch.randn(3, 7, 24, generator=gen(12))
    att, ffn = block.attention, block.feed_forward
    weights = (block.attention_norm.weight, att.W_q.weight.T, att.W_k.weight.T, att.W_v.weight.T, att.W_o.weight.T,
               block.ffn_norm.weight, ffn.gate.weight.T, ffn.up.weight.T, ffn.down.weight.T)  # fmt: skip
    assert torch.allclose(pre_norm_block(x, *weights, 3), block(x)[0], atol=1e-5)


def test_grouped_query_module_equals_the_function_and_torch_sdpa():
    module = MultiHeadAttention(24, 6, bias=False, num_kv_heads=2)
    g = gen(13)
    query, memory = torch.randn(2, 4, 24, generator=g), torch.randn(2, 5, 24, generator=g)
    out, weights = module(query, memory, memory)
    W = [m.weight.T for m in (module.W_q, module.W_k, module.W_v, module.W_o)]
    expected, expected_weights = grouped_query_attention(query, memory, memory, None, *W, 6, 2)
    assert torch.allclose(out, expected, atol=1e-6) and torch.allclose(weights, expected_weights, atol=1e-6)
    q = (query @ W[0]).view(2, 4, 6, 4).transpose(1, 2)
    k, v = ((memory @ w).view(2, 5, 2, 4).transpose(1, 2) for w in W[1:3])
    heads = F.scaled_dot_product_attention(q, k, v, enable_gqa=True).transpose(1, 2).reshape(2, 4, 24)
    assert torch.allclose(out, heads @ W[3], atol=1e-5)
    assert count_parameters(module) == 2 * 24 * 24 + 2 * 24 * 8


def test_qk_norm_scores_equal_normalised_dot_products():
    g = gen(14)
    q, k = 5 * torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g)
    g_q, g_k = torch.rand(8, generator=g) + 0.5, torch.rand(8, generator=g) + 0.5
    expected = torch.einsum("bhqd,bhkd->bhqk", F.rms_norm(q, (8,), g_q, 1e-6), F.rms_norm(k, (8,), g_k, 1e-6))
    scores = qk_norm_scores(q, k, g_q, g_k)
    assert torch.allclose(scores, expected / math.sqrt(8), atol=1e-5)
    assert torch.allclose(qk_norm_scores(1000 * q, k, g_q, g_k), scores, atol=1e-4)  # the scale of q is gone


def test_qk_score_bound_holds_and_is_reached():
    """No score exceeds sqrt(head_dim) max_i |g_q,i g_k,i|; vectors with all their size on the arg-max feature reach
    it (up to eps); the largest product, not the product of the largest gains, and its magnitude count."""
    g = gen(15)
    g_q = torch.tensor([0.5, -3.0, 1.0, 2.0])
    g_k = torch.tensor([4.0, 1.0, 0.1, 1.0])  # |g_q g_k|: 2, 3, 0.1, 2 -> 3 at feature 1 (a negative product)
    bound = qk_score_bound(g_q, g_k)
    assert torch.allclose(bound, torch.tensor(2.0 * 3.0))  # sqrt(4) * 3, not sqrt(4) * 3 * 4
    q, k = 100 * torch.randn(2, 3, 50, 4, generator=g), torch.randn(2, 3, 50, 4, generator=g)
    assert qk_norm_scores(q, k, g_q, g_k).abs().max() <= bound
    one_hot = torch.zeros(1, 1, 1, 4)
    one_hot[..., 1] = 1000.0
    reached = qk_norm_scores(one_hot, -one_hot, g_q, g_k)  # the product is negative: a negative key reaches +bound
    assert torch.allclose(reached, bound.reshape(1, 1, 1, 1), rtol=1e-5)
    per_layer = qk_score_bound(torch.stack([g_q, 2 * g_q]), torch.stack([g_k, g_k]))
    assert torch.allclose(per_layer, torch.tensor([6.0, 12.0]))


def test_lm_loss_with_a_cut_context_equals_scoring_each_window_alone():
    lm = DecoderLM(12, 16, 2, 2, seed=3)
    g = gen(16)
    inputs, targets = torch.randint(0, 12, (3, 9), generator=g), torch.randint(0, 12, (3, 9), generator=g)
    with torch.no_grad():
        for k in (1, 3):
            total = 0.0
            for t in range(9):
                logits = lm(inputs[:, max(0, t - k + 1) : t + 1])[:, -1]
                total += F.cross_entropy(logits, targets[:, t], reduction="sum").item()
            assert math.isclose(lm_loss(lm, inputs, targets, batch_size=2, context=k), total / 27, rel_tol=1e-5)
    assert lm_loss(lm, inputs, targets, context=9) == lm_loss(lm, inputs, targets)
    assert lm_loss(lm, inputs, targets, context=1) != lm_loss(lm, inputs, targets)


# --------------------------------------------------------------------------------------------
# Parameter counts: formula == counted
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model, num_heads, d_ff, num_kv_heads", [(16, 4, 40, None), (32, 8, 88, 2), (24, 6, 64, 1)])
def test_the_formulas_count_what_the_modules_hold(d_model, num_heads, d_ff, num_kv_heads):
    assert count_parameters(PostNormEncoderBlock(d_model, num_heads, d_ff)) == block_parameters(d_model, d_ff)
    decoder = CrossAttentionDecoderBlock(d_model, num_heads, d_ff)
    torch_decoder = nn.TransformerDecoderLayer(d_model, num_heads, d_ff, batch_first=True)
    assert (
        count_parameters(decoder) == count_parameters(torch_decoder) == cross_attention_block_parameters(d_model, d_ff)
    )
    block = PreNormDecoderBlock(d_model, num_heads, d_ff, num_kv_heads)
    assert count_parameters(block) == pre_norm_block_parameters(d_model, d_ff, num_heads, num_kv_heads)
    for tied in (False, True):
        lm = DecoderLM(50, d_model, num_heads, 3, d_ff, num_kv_heads, tie_embeddings=tied)
        assert count_parameters(lm) == decoder_lm_parameters(50, d_model, 3, d_ff, num_heads, num_kv_heads, tied)


def test_llama_3_2_1b_counts_its_published_size_on_the_meta_device():
    with torch.device("meta"):
        model = DecoderLM(128_256, 2048, 32, 16, 8192, num_kv_heads=8, tie_embeddings=True)
    assert model.embedding.weight.is_meta
    assert count_parameters(model) == decoder_lm_parameters(128_256, 2048, 16, 8192, 32, 8, True) == 1_235_814_400


# --------------------------------------------------------------------------------------------
# The stacks and the language model
# --------------------------------------------------------------------------------------------


def test_block_stacks_of_both_arrangements_start_from_the_same_weights():
    post, pre = BlockStack(20, 16, 2, 32, 3, norm_first=False, seed=4), BlockStack(20, 16, 2, 32, 3, True, seed=4)
    shared = {k: v for k, v in pre.state_dict().items() if not k.startswith("norm.")}
    assert shared.keys() == post.state_dict().keys()
    assert all(torch.equal(v, post.state_dict()[k]) for k, v in shared.items())
    tokens = torch.randint(0, 20, (2, 7), generator=gen(4))
    assert not torch.allclose(post(tokens), pre(tokens))
    logits, stream = pre(tokens, return_stream=True)
    assert torch.equal(logits, pre(tokens)) and stream.shape == (2, 7, 16)
    assert torch.allclose(pre.head(F.layer_norm(stream, (16,))), logits, atol=1e-5)  # what the final norm reads


def test_decoder_lm_is_causal_and_returns_every_blocks_weights():
    lm = DecoderLM(30, 16, 2, 3, seed=1)
    tokens = torch.randint(0, 30, (2, 10), generator=gen(5))
    changed = tokens.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 30
    with torch.no_grad():
        logits, weights = lm(tokens, return_weights=True)
        assert torch.equal(lm(changed)[:, :6], logits[:, :6])
        assert not torch.allclose(lm(changed)[:, 6:], logits[:, 6:])
    assert logits.shape == (2, 10, 30) and len(weights) == 3 and weights[0].shape == (2, 2, 10, 10)


def test_generate_samples_reproducibly_and_a_cold_temperature_is_greedy():
    lm = DecoderLM(30, 16, 2, 2, seed=2)
    prompt = torch.tensor([3, 1, 4])
    first = lm.generate(prompt, 12, 1.0, gen(0), context=5)
    assert first.shape == (15,) and torch.equal(first[:3], prompt)
    assert torch.equal(first, lm.generate(prompt, 12, 1.0, gen(0), context=5))
    cold, ids = lm.generate(prompt, 6, 1e-4, gen(1), context=5), prompt
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, lm(ids[None, -5:])[0, -1].argmax()[None]])
    assert torch.equal(cold, ids)


def test_corpus_windows_and_the_bigram_baseline():
    corpus = CharCorpus(torch.tensor([0, 1, 0, 1, 0, 2, 0, 1]), torch.tensor([0, 1, 2, 0, 1, 0, 1]), ["a", "b", "c"])
    inputs, targets = corpus.windows(3)
    assert torch.equal(inputs, torch.tensor([[0, 1, 2], [0, 1, 0]]))
    assert torch.equal(targets, torch.tensor([[1, 2, 0], [1, 0, 1]]))
    table = corpus.bigram_log_probs(smoothing=1.0)  # after a: b three times, c once, a never (+1 each)
    assert torch.allclose(table.exp().sum(1), torch.ones(3))
    assert torch.allclose(table[0].exp(), torch.tensor([1 / 7, 4 / 7, 2 / 7]))
    assert torch.allclose(table[2].exp(), torch.tensor([2 / 4, 1 / 4, 1 / 4]))


def test_training_a_language_model_lowers_its_held_out_loss():
    text = "the cat sat on the mat. " * 40
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    corpus = CharCorpus(ids[:800], ids[800:], chars)
    lm = DecoderLM(len(chars), 16, 2, 2, seed=0)
    inputs, targets = corpus.windows(16)
    before = lm_loss(lm, inputs, targets, batch_size=2)
    manual = F.cross_entropy(lm(inputs).flatten(0, 1), targets.flatten()).item()
    assert before == pytest.approx(manual, rel=1e-5)
    log = train_lm(lm, corpus, 60, 8, 16, 1e-2, warmup=5, seed=0)
    assert len(log.losses) == 60 and not lm.training
    assert log.lrs[:5] == pytest.approx([2e-3, 4e-3, 6e-3, 8e-3, 1e-2])  # warm-up, then half a cosine down to 0
    assert log.lrs[5] == pytest.approx(1e-2)
    assert log.lrs[-1] == pytest.approx(1e-2 * (1 + math.cos(math.pi * 54 / 55)) / 2)
    assert lm_loss(lm, inputs, targets) < 0.5 * before
    again = DecoderLM(len(chars), 16, 2, 2, seed=0)
    assert train_lm(again, corpus, 60, 8, 16, 1e-2, warmup=5, seed=0).losses == log.losses


# --------------------------------------------------------------------------------------------
# The exercises' references that the lesson does not show: grouped RMSNorm, gpt-oss's gated layer, GQA in the block
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("groups", [1, 2, 4, 8])
def test_group_rms_norm_is_rms_norm_on_each_group(groups):
    """Against torch's F.rms_norm run on each group's slice alone; one group is the lesson's RMSNorm."""
    g = gen(30)
    x, weight = torch.randn(2, 5, 8, generator=g), torch.rand(8, generator=g) + 0.5
    size = 8 // groups
    expected = torch.cat([F.rms_norm(x[..., j * size : (j + 1) * size], (size,), eps=1e-6) for j in range(groups)], -1)
    assert torch.allclose(group_rms_norm(x, weight, groups), expected * weight, atol=1e-6)
    if groups == 1:
        assert torch.allclose(group_rms_norm(x, weight, 1), rms_norm(x, weight), atol=1e-7)


def test_group_rms_norm_with_one_feature_per_group_keeps_only_signs():
    x = torch.tensor([[3.0, -0.5, 2.0, -4.0]])
    assert torch.allclose(group_rms_norm(x, torch.ones(4), 4, eps=0.0), torch.sign(x))


def test_clamped_swiglu_equals_gpt_oss_written_as_its_code_writes_it():
    """gpt-oss (gpt_oss/torch/model.py): x_glu, x_linear = x[..., ::2], x[..., 1::2]; clamp; x_glu * sigmoid(alpha
    x_glu) * (x_linear + 1), here with the weights as rows; with large inputs both clamps act."""
    g = gen(31)
    x = 5 * torch.randn(2, 3, 8, generator=g)
    W_in, W_down = torch.randn(8, 24, generator=g), torch.randn(12, 8, generator=g)
    h = x @ W_in
    x_glu, x_linear = h[..., ::2].clamp(min=None, max=7.0), h[..., 1::2].clamp(min=-7.0, max=7.0)
    expected = (x_glu * torch.sigmoid(1.702 * x_glu) * (x_linear + 1)) @ W_down
    assert (h.abs() > 7).any()
    assert torch.allclose(clamped_swiglu(x, W_in, W_down), expected, atol=1e-5)
    # alpha 1 and a limit beyond every pre-activation: SwiGLU of the two interleaved halves, plus the gate alone
    wide = clamped_swiglu(x, W_in, W_down, alpha=1.0, limit=1e6)
    assert torch.allclose(
        wide, swiglu(x, W_in[:, ::2], W_in[:, 1::2], W_down) + F.silu(h[..., ::2]) @ W_down, atol=1e-4
    )


def test_pre_norm_block_with_grouped_query_attention_equals_the_module():
    block = randomise(PreNormDecoderBlock(24, 6, 40, num_kv_heads=2), 32)
    x = torch.randn(3, 7, 24, generator=gen(32))
    att, ffn = block.attention, block.feed_forward
    weights = (block.attention_norm.weight, att.W_q.weight.T, att.W_k.weight.T, att.W_v.weight.T, att.W_o.weight.T,
               block.ffn_norm.weight, ffn.gate.weight.T, ffn.up.weight.T, ffn.down.weight.T)  # fmt: skip
    assert weights[2].shape == (24, 8)
    assert torch.allclose(pre_norm_block(x, *weights, 6), block(x)[0], atol=1e-5)


# --------------------------------------------------------------------------------------------
# The gradients at initialisation (lesson 09's experiment)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_identity_path_computes_the_same_values_and_only_cuts_the_sublayers_gradients(norm_first):
    corpus = CharCorpus.load()
    inputs, targets = corpus.batch(2, 16, gen(33))
    stack = BlockStack(len(corpus.chars), 16, 2, 32, 3, norm_first, seed=3)
    assert torch.equal(stack(inputs), stack(inputs, branch_gradients=False))
    every = ffn_gradient_norms(stack, inputs, targets).w2
    stream_only = ffn_gradient_norms(stack, inputs, targets, branch_gradients=False).w2
    assert torch.allclose(every[-1], stream_only[-1])  # nothing lies above the last block's W_2 but the readout
    assert not torch.allclose(every[0], stream_only[0])  # the blocks above the first add paths back to it
    if norm_first:  # along the identity path the gradient reaching every block's output is the same
        stack.zero_grad()
        F.cross_entropy(stack(inputs, branch_gradients=False).flatten(0, 1), targets.flatten()).backward()
        biases = [block.feed_forward[2].bias.grad for block in stack.blocks]
        assert all(torch.allclose(bias, biases[-1], atol=1e-6) for bias in biases)


@pytest.mark.parametrize("norm_first", [False, True])
def test_ffn_gradient_norms_are_what_autograd_gives(norm_first):
    """Every measurement against its definition, computed here from autograd's gradients and a forward hook."""
    corpus = CharCorpus.load()
    inputs, targets = corpus.batch(2, 16, gen(34))
    stack = BlockStack(len(corpus.chars), 16, 2, 32, 2, norm_first, seed=4)
    measured = ffn_gradient_norms(stack, inputs, targets)
    again = BlockStack(len(corpus.chars), 16, 2, 32, 2, norm_first, seed=4)
    seen = {}
    again.blocks[-1].feed_forward[2].register_forward_hook(lambda m, a, out: seen.update(h=a[0], out=out))
    logits, stream = again(inputs, return_stream=True)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    W2s = [b.feed_forward[2].weight for b in again.blocks]
    *expected, to_stream, to_out = torch.autograd.grad(loss, [*W2s, stream, seen["out"]])
    assert torch.allclose(measured.w2, torch.stack([e.norm() for e in expected]))
    assert measured.stream_rms == pytest.approx(stream.pow(2).mean().sqrt().item())
    sigma = (stream - stream.mean(-1, keepdim=True)).pow(2).mean(-1)  # each position's variance
    assert measured.stream_sigma == pytest.approx(sigma.mean().sqrt().item(), rel=1e-5)
    assert measured.stream_gradient == pytest.approx(to_stream.norm().item(), rel=1e-5)
    terms = torch.einsum("bto,bti->btoi", to_out, seen["h"])  # g_t h_t^T: W_2's gradient is their sum
    assert torch.allclose(terms.sum((0, 1)), expected[-1], atol=1e-6)
    scattered = terms.flatten(2).norm(dim=-1).pow(2).sum().sqrt()
    assert measured.coherence == pytest.approx((expected[-1].norm() / scattered).item(), rel=1e-5)
    assert 0 < measured.coherence <= math.sqrt(terms.shape[0] * terms.shape[1])  # Cauchy-Schwarz


def test_the_final_layer_norm_divides_the_gradient_by_sigma():
    """Xiong et al.'s Lemma 3, the lesson's step 1, on one vector: the gradient LayerNorm passes back is the one it
    receives, times the gain, projected off the two directions LayerNorm ignores (the all-ones vector and the
    normalised input itself) and divided by sigma (with LayerNorm's eps, sqrt(sigma^2 + eps)). Scaling x scales
    the gradient down by the same factor."""
    g = gen(35)
    x, gain, upstream = torch.randn(16, generator=g) * 3 + 1, torch.rand(16, generator=g) + 0.5, torch.randn(16)
    norm = nn.LayerNorm(16)
    with torch.no_grad():
        norm.weight.copy_(gain)
    for scale in (1.0, 5.0):
        leaf = (scale * x).requires_grad_()
        (norm(leaf) * upstream).sum().backward()
        centred = leaf.detach() - leaf.detach().mean()
        sigma = (centred.pow(2).mean() + norm.eps).sqrt()
        y_hat = centred / sigma
        v = gain * upstream
        projected = v - v.mean() - y_hat * (y_hat @ v) / 16
        assert torch.allclose(leaf.grad, projected / sigma, atol=1e-5)
    big = (5.0 * x).requires_grad_()
    (norm(big) * upstream).sum().backward()
    small = x.clone().requires_grad_()
    (norm(small) * upstream).sum().backward()
    assert torch.allclose(big.grad, small.grad / 5.0, atol=1e-5)


def test_xavier_init_and_the_embedding_scale():
    stack = BlockStack(20, 64, 4, 256, 2, True, seed=5, init="xavier", embedding_scale=0.1)
    W = stack.blocks[0].feed_forward[2].weight  # (64, 256): Xavier's variance 2 / (256 + 64)
    assert W.var().item() == pytest.approx(2 / 320, rel=0.1) and (stack.blocks[0].feed_forward[2].bias == 0).all()
    plain = BlockStack(20, 64, 4, 256, 2, True, seed=5)
    assert torch.equal(plain.embedding.weight, stack.embedding.weight)
    assert torch.equal(plain.head.weight, stack.head.weight)
    # stacks of every depth share the readout: it is drawn before the blocks
    assert torch.equal(BlockStack(20, 64, 4, 256, 5, True, seed=5).head.weight, plain.head.weight)
    seen = []
    stack.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    tokens = torch.arange(10)[None]
    stack(tokens)
    assert torch.allclose(seen[0], 0.1 * (plain.embedding(tokens) + sinusoidal_encoding(10, 64)))
