"""Lesson 13's sinks and gates (attnedu/sinks_gates.py): the softmax with a sink logit equals the softmax over the
scores with the sink's column appended and then removed (gpt-oss's reference sdpa form), by hand on small cases and
with a causal / sliding-window mask and grouped heads; the output gate equals Qiu et al.'s G1 (sigmoid of the input
projected, times SDPA's output, before W_o); the module equals MultiHeadAttention when both are off and counts its
extra parameters; gradients reach the sink logits and the gate (gradcheck in float64); the measurements (first-token
mass, largest activation) give the values worked out by hand on built maps and streams."""

from __future__ import annotations

import math

import pytest
import torch

from attnedu.blocks import DecoderLM
from attnedu.decoding import lm_forward
from attnedu.kv_cache import KVCache
from attnedu.masks import sliding_window_mask
from attnedu.multihead import MultiHeadAttention
from attnedu.sinks_gates import (
    SinkGateAttention,
    add_sinks_gates,
    first_token_mass,
    is_massive,
    largest_activations,
    output_gate,
    residual_stream,
    sink_attention,
    sink_weight,
    softmax_off_by_one,
    softmax_with_sink,
)

D = torch.float64


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=D)


def appended_column(scores, sink, mask=None):
    """The reference: gpt-oss's form (gpt_oss/torch/model.py, sdpa): the sink logit as one more column of the
    scores, the softmax over the row, the column dropped."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    column = sink[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def gpt_oss_window(n, sliding_window):
    """gpt-oss's mask: query i reads keys i - sliding_window < j <= i (sliding_window 0: causal only)."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & ((j > i - sliding_window) if sliding_window > 0 else True)


# ---- the softmax with a sink ------------------------------------------------------------------------------------


def test_sink_by_hand():
    # m equal scores and a sink logit of the same value: m + 1 equal shares, the sink takes one
    scores = torch.zeros(1, 2, 1, 4, dtype=D)
    sink = torch.tensor([0.0, math.log(3.0)], dtype=D)  # head 1: the sink counts as 3 keys
    w = softmax_with_sink(scores, sink)
    assert torch.allclose(w[0, 0], torch.full((1, 4), 1 / 5, dtype=D), atol=1e-15)
    assert torch.allclose(w[0, 1], torch.full((1, 4), 1 / 7, dtype=D), atol=1e-15)
    assert torch.allclose(sink_weight(scores, sink)[0, :, 0], torch.tensor([1 / 5, 3 / 7], dtype=D), atol=1e-15)
    # softmax off by one: exp(z) / (1 + sum exp(z))
    z = torch.tensor([1.0, 2.0, -1.0], dtype=D)
    expected = z.exp() / (1 + z.exp().sum())
    assert torch.allclose(softmax_off_by_one(z), expected, atol=1e-15)


def test_sink_equals_the_appended_column_and_rows_sum_to_one_minus_the_sink():
    scores = rand(2, 3, 5, 6) * 4
    sink = rand(3, seed=1) * 3
    mask = rand(5, 6, seed=2) > -0.5
    mask[1] = False  # a fully masked row
    w = softmax_with_sink(scores, sink, mask)
    assert torch.allclose(w, appended_column(scores, sink, mask), atol=1e-14)
    sunk = sink_weight(scores, sink, mask)
    assert torch.allclose(w.sum(-1), 1 - sunk, atol=1e-14)
    assert torch.all(w[..., 1, :] == 0) and torch.all(sunk[..., 1] == 1)  # the empty row: all mass to the sink
    assert torch.all(w.masked_select(~mask.expand_as(w)) == 0)
    # off by one is the sink at 0
    assert torch.allclose(softmax_off_by_one(scores, mask), softmax_with_sink(scores, torch.zeros(3, dtype=D), mask))


def test_sink_limits_and_stability():
    scores = rand(1, 2, 3, 4) * 3
    # a very negative sink: the plain softmax; a very positive one: everything to the sink
    assert torch.allclose(softmax_with_sink(scores, torch.full((2,), -60.0, dtype=D)), scores.softmax(-1), atol=1e-20)
    assert softmax_with_sink(scores, torch.full((2,), 60.0, dtype=D)).max() < 1e-20
    # huge scores and sinks do not overflow (the shift is max(sink, row max))
    big = softmax_with_sink(scores.float() * 1e3, torch.tensor([2e3, -2e3]))
    assert torch.isfinite(big).all()
    assert torch.allclose(big, appended_column(scores.float() * 1e3, torch.tensor([2e3, -2e3])), atol=1e-6)
    # a NaN score is not hidden
    nan = scores.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert torch.isnan(softmax_with_sink(nan, torch.zeros(2, dtype=D))[0, 0, 0]).all()


# ---- attention with a sink ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("heads, kv_heads, window", [(4, 4, None), (4, 2, 2), (4, 1, 0)])
def test_sink_attention_equals_the_reference(heads, kv_heads, window):
    n, d = 7, 5
    q, k, v = rand(2, heads, n, d), rand(2, kv_heads, n, d, seed=1), rand(2, kv_heads, n, d, seed=2)
    sink = rand(heads, seed=3)
    out, w = sink_attention(q, k, v, sink, is_causal=True, window=window)
    # the reference: gpt-oss's mask (sliding_window = window + 1 keys) and its query head grouping
    allowed = gpt_oss_window(n, 0 if window is None else window + 1)
    if window is not None:
        assert torch.equal(allowed, sliding_window_mask(n, window, causal=True))
    group = heads // kv_heads
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    ref_w = appended_column(q @ kk.transpose(-2, -1) / math.sqrt(d), sink, allowed)
    assert torch.allclose(w, ref_w, atol=1e-14)
    assert torch.allclose(out, ref_w @ vv, atol=1e-14)
    # the sink never adds a value: out = (1 - sink weight) x the plain attention's output
    plain = (q @ kk.transpose(-2, -1) / math.sqrt(d)).masked_fill(~allowed, float("-inf")).softmax(-1)
    assert torch.allclose(out, (w.sum(-1, keepdim=True)) * (plain @ vv), atol=1e-14)


def test_sink_attention_mask_and_causal_combine():
    q, k, v, sink = rand(1, 2, 4, 3), rand(1, 2, 4, 3, seed=1), rand(1, 2, 4, 3, seed=2), rand(2, seed=3)
    pad = torch.tensor([True, True, True, False])[None, None, None, :]
    _, w = sink_attention(q, k, v, sink, pad, is_causal=True)
    both = pad & torch.ones(4, 4, dtype=torch.bool).tril()
    assert torch.allclose(w, appended_column(q @ k.transpose(-2, -1) / math.sqrt(3), sink, both), atol=1e-14)


# ---- the output gate and the module -----------------------------------------------------------------------------


def _copy_weights(module: SinkGateAttention) -> MultiHeadAttention:
    plain = MultiHeadAttention(module.d_model, module.num_heads, num_kv_heads=module.num_kv_heads).double()
    plain.load_state_dict({k: v for k, v in module.state_dict().items() if k.split(".")[0] in plain._modules})
    return plain


def test_module_off_equals_multihead_and_counts_its_parameters():
    torch.manual_seed(0)
    module = SinkGateAttention(8, 2).double()
    x = rand(2, 5, 8)
    out, w = module(x, x, x)
    ref, ref_w = _copy_weights(module)(x, x, x)
    assert torch.equal(out, ref) and torch.equal(w, ref_w)
    base = sum(p.numel() for p in MultiHeadAttention(8, 2).parameters())
    for sink in (False, True):
        for gate in (None, "headwise", "elementwise"):
            for bias in (False, True):
                built = SinkGateAttention(8, 2, bias, sink=sink, gate=gate)
                base = sum(p.numel() for p in MultiHeadAttention(8, 2, bias).parameters())
                extra = SinkGateAttention.extra_parameters(8, 2, sink, gate, bias)
                assert sum(p.numel() for p in built.parameters()) == base + extra, (sink, gate, bias)
    assert SinkGateAttention.extra_parameters(8, 2, True, "elementwise") == 2 + 8 * 8 + 8
    assert SinkGateAttention.extra_parameters(8, 2, False, "headwise", bias=False) == 8 * 2


def test_headwise_gate_with_constant_scores_is_head_gate():
    # W_g = 0 and bias b: every query's gate on head h is sigmoid(b_h), MultiHeadAttention's head_gate
    torch.manual_seed(0)
    module = SinkGateAttention(8, 2, gate="headwise").double()
    with torch.no_grad():
        module.W_g.weight.zero_()
        module.W_g.bias.copy_(torch.tensor([-1.0, 2.0]))
    x = rand(2, 5, 8)
    out, _ = module(x, x, x, torch.ones(5, 5, dtype=torch.bool).tril()[None, None])
    ref, _ = _copy_weights(module)(x, x, x, torch.ones(5, 5, dtype=torch.bool).tril()[None, None],
                                   head_gate=torch.sigmoid(torch.tensor([-1.0, 2.0], dtype=D)))  # fmt: skip
    assert torch.allclose(out, ref, atol=1e-14)


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_module_equals_the_formula(gate):
    """Qiu et al.'s G1 written out: q, k, v projected, attention with the sink, heads * sigmoid(x W_g + b_g), W_o."""
    torch.manual_seed(1)
    H, d = 2, 4
    module = SinkGateAttention(8, H, num_kv_heads=1, sink=True, gate=gate).double()
    with torch.no_grad():
        module.sink_logits.copy_(torch.tensor([0.5, -1.0]))
    x = rand(3, 6, 8)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    out, w = module(x, x, x, causal[None, None])
    q = module.W_q(x).view(3, 6, H, d).transpose(1, 2)
    k = module.W_k(x).view(3, 6, 1, d).transpose(1, 2)
    v = module.W_v(x).view(3, 6, 1, d).transpose(1, 2)
    heads, ref_w = sink_attention(q, k, v, module.sink_logits, is_causal=True)
    scores = module.W_g(x).view(3, 6, H, -1).transpose(1, 2)
    gated = output_gate(heads, scores)
    assert torch.allclose(gated, heads * torch.sigmoid(scores), atol=0)
    ref = module.W_o(gated.transpose(1, 2).reshape(3, 6, H * d))
    assert torch.allclose(out, ref, atol=1e-14) and torch.allclose(w, ref_w, atol=1e-14)


def test_gradients_reach_the_sink_and_the_gate():
    scores, sink = rand(1, 2, 3, 4).requires_grad_(), rand(2, seed=1).requires_grad_()
    mask = torch.ones(3, 4, dtype=torch.bool).tril()
    assert torch.autograd.gradcheck(lambda s, t: softmax_with_sink(s, t, mask), (scores, sink))
    q, k, v = (rand(1, 2, 3, 2, seed=i).requires_grad_() for i in range(3))
    assert torch.autograd.gradcheck(lambda *a: sink_attention(*a, is_causal=True)[0], (q, k, v, sink))
    heads, gate_scores = rand(1, 2, 3, 2).requires_grad_(), rand(1, 2, 3, 1, seed=4).requires_grad_()
    assert torch.autograd.gradcheck(output_gate, (heads, gate_scores))
    torch.manual_seed(0)
    module = SinkGateAttention(4, 2, sink=True, gate="elementwise").double()
    x = rand(1, 3, 4)
    module(x, x, x)[0].square().sum().backward()
    assert module.sink_logits.grad.abs().min() > 0 and module.W_g.weight.grad.abs().max() > 0


def test_add_sinks_gates_keeps_the_weights_and_residual_stream_reads_the_model():
    tokens = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(0))
    plain = DecoderLM(11, 16, 2, 2, seed=0)
    same = add_sinks_gates(DecoderLM(11, 16, 2, 2, seed=0))
    assert torch.equal(plain(tokens), same(tokens))
    sunk = add_sinks_gates(DecoderLM(11, 16, 2, 2, seed=0), sink=True)
    with torch.no_grad():
        for block in sunk.blocks:
            block.attention.sink_logits.fill_(-60.0)  # exp(-60): no sink
    assert torch.allclose(plain(tokens), sunk(tokens), atol=1e-6)
    gated = [add_sinks_gates(DecoderLM(11, 16, 2, 2, seed=0), gate="headwise", seed=3) for _ in range(2)]
    assert torch.equal(gated[0].blocks[1].attention.W_g.weight, gated[1].blocks[1].attention.W_g.weight)
    extra = SinkGateAttention.extra_parameters(16, 2, True, "elementwise", bias=False)
    both = add_sinks_gates(DecoderLM(11, 16, 2, 2, seed=0), sink=True, gate="elementwise")
    assert sum(p.numel() for p in both.parameters()) == sum(p.numel() for p in plain.parameters()) + 2 * extra
    # the residual stream: its last state, normed and read out, is the model's logits; the weights are the model's
    hidden, weights = residual_stream(both, tokens)
    logits, model_weights = both(tokens, return_weights=True)
    assert len(hidden) == 3 and torch.allclose(both.head(both.norm(hidden[-1])), logits, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(weights, model_weights, strict=True))
    assert (weights[0].sum(-1) < 1).all()  # the sink takes its share of every row
    with pytest.raises(ValueError, match="cache should be None for an attention with a sink logit"):
        lm_forward(both, tokens, KVCache(2))


# ---- measurements ---------------------------------------------------------------------------------------------------


def test_first_token_mass_by_hand():
    n = 4
    parked = torch.zeros(n, n, dtype=D)
    parked[:, 0] = 0.9
    parked[torch.arange(n), torch.arange(n)] += 0.1  # 0.9 on key 0, 0.1 on itself (query 0: 1.0 on key 0)
    uniform = torch.ones(n, n, dtype=D).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)  # causal uniform: 1 / (i + 1) on key 0
    layer = torch.stack([parked, uniform])[None].expand(2, 2, n, n)
    mass = first_token_mass([layer, layer.flip(1)])
    expected = torch.tensor([0.9, (1 / 2 + 1 / 3 + 1 / 4) / 3], dtype=D)
    assert torch.allclose(mass, torch.stack([expected, expected.flip(0)]), atol=1e-15)
    assert torch.allclose(first_token_mass(layer, first_query=0), torch.tensor([(1 + 0.9 * 3) / 4, (1 + 1 / 2 + 1 / 3
                                                                                + 1 / 4) / 4], dtype=D))  # fmt: skip


def test_largest_activations_by_hand():
    h = torch.ones(3, 2, 4, 5)  # 3 layers, batch 2, 4 tokens, 5 features, every |h| = 1
    h[1, 1, 0, 3] = -500.0
    h[2, 0, 2, 1] = 2000.0
    h[2, 0, 3, 1] = 300.0
    stats = largest_activations(list(h), k=2)
    assert torch.equal(stats.top, torch.tensor([[1.0, 1.0], [500.0, 1.0], [2000.0, 300.0]]))
    assert torch.equal(stats.median, torch.ones(3)) and torch.equal(stats.ratio, torch.tensor([1.0, 500.0, 2000.0]))
    assert stats.where[1].tolist() == [1, 0, 3] and stats.where[2].tolist() == [0, 2, 1]
    assert is_massive(stats).tolist() == [False, False, True]  # 500 is > 100 but only 500x the median
    assert is_massive(stats, ratio=400).tolist() == [False, True, True]
    assert torch.equal(largest_activations(h).top, stats.top.new_tensor([[1, 1, 1], [500, 1, 1], [2000, 300, 1]]))


# --------------------------------------------------------------------------------------------
# The controlled setting: marker_task, marker_model, train_marker, marker_reading
# --------------------------------------------------------------------------------------------


def test_marker_task_targets_follow_the_marker():
    from attnedu.sinks_gates import marker_task

    vocab, length = 5, 12
    batch = marker_task(200, length, vocab, torch.Generator().manual_seed(0))
    tokens, targets, seen, position = batch
    assert tokens.shape == targets.shape == seen.shape == (200, length)
    assert (tokens[:, 0] == 2 * vocab).all() and (tokens[:, 1:] < 2 * vocab).all()
    marked = (tokens >= vocab) & (tokens < 2 * vocab)
    assert (marked.sum(1) == (position >= 0).long()).all(), "one marker in a sequence with one, none otherwise"
    assert 60 < int((position >= 0).sum()) < 140, "about half the sequences have a marker"
    for row in range(200):
        p = int(position[row])
        if p < 0:
            assert not seen[row].any() and torch.equal(targets[row], tokens[row]), "idle: the current token"
            continue
        value = int(tokens[row, p]) - vocab
        assert seen[row].tolist() == [t >= p for t in range(length)]
        assert targets[row].tolist() == [value if t >= p else int(tokens[row, t]) for t in range(length)]
    never = marker_task(20, length, vocab, torch.Generator().manual_seed(0), present=0.0)
    assert not never.seen.any() and (never.position == -1).all()
    always = marker_task(20, length, vocab, torch.Generator().manual_seed(0), present=1.0)
    assert (always.position >= 1).all()


def test_marker_task_refuses_bad_arguments():
    from attnedu.sinks_gates import marker_task

    with pytest.raises(ValueError, match="present"):
        marker_task(4, 8, 5, torch.Generator(), present=1.5)
    with pytest.raises(ValueError, match="length"):
        marker_task(4, 1, 5, torch.Generator())
    with pytest.raises(TypeError, match="generator"):
        marker_task(4, 8, 5, 0)


def test_marker_models_have_equal_parameters():
    from attnedu.models import count_parameters
    from attnedu.sinks_gates import MARKER, MORE_VARIANTS, VARIANTS, marker_model

    models = {v: marker_model(v) for v in VARIANTS + MORE_VARIANTS}
    counts = {v: count_parameters(m) for v, m in models.items()}
    d, layers = MARKER["d_model"], MARKER["num_layers"]
    assert all(abs(c - counts["plain"]) <= layers * 3 * d / 2 for c in counts.values()), counts
    assert models["sink"].blocks[0].attention.sink_logits is not None
    assert models["gate"].blocks[0].attention.W_g.out_features == MARKER["num_heads"]  # headwise
    assert models["gate_elementwise"].blocks[0].attention.W_g.out_features == d  # one gate per feature
    assert not models["off_by_one"].blocks[0].attention.sink_logits.requires_grad  # fixed at 0
    assert type(models["plain"].blocks[0].attention) is MultiHeadAttention
    with pytest.raises(ValueError, match="variant"):
        marker_model("gated")
    with pytest.raises(TypeError, match="recipe"):
        marker_model("plain", stepz=3)


def test_train_marker_is_seeded():
    from attnedu.sinks_gates import marker_model, train_marker

    first, log = train_marker("sink", seed=0, steps=3)
    again, _ = train_marker("sink", seed=0, steps=3)
    other, _ = train_marker("sink", seed=1, steps=3)
    assert len(log.losses) == 3
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    assert not torch.equal(first.blocks[0].attention.W_q.weight, other.blocks[0].attention.W_q.weight)
    fixed, _ = train_marker("off_by_one", seed=0, steps=3)
    assert all((block.attention.sink_logits == 0).all() for block in fixed.blocks), "off by one: s_h stays 0"
    assert not torch.equal(
        fixed.blocks[0].attention.W_q.weight, marker_model("off_by_one").blocks[0].attention.W_q.weight
    )


def test_marker_reading_on_models_built_by_hand():
    """A sink logit far above every score takes every idle row whole; with it far below, the rows are the plain
    softmax's; the readings stay in their ranges, and only a gated model has gates."""
    from attnedu.sinks_gates import MARKER, marker_model, marker_reading, marker_task

    batch = marker_task(64, MARKER["length"], MARKER["vocab"], torch.Generator().manual_seed(1))
    plain = marker_reading(marker_model("plain"), batch)
    assert plain.on_marker.shape == (MARKER["num_layers"], MARKER["num_heads"])
    assert (plain.idle_sink.abs() <= 1e-5).all() and plain.gate_idle.isnan().all()
    assert ((plain.on_marker >= 0) & (plain.on_marker <= 1)).all() and plain.loss > 0
    layer, head = plain.reader
    assert plain.on_marker[layer, head] == plain.on_marker.max()
    model = marker_model("sink")
    for block in model.blocks:
        block.attention.sink_logits.data.fill_(30.0)
    full = marker_reading(model, batch)
    assert (full.idle_sink >= 0.999).all() and (full.idle_first <= 1e-3).all()
    assert (full.sink_logits == 30.0).all() and plain.sink_logits.isnan().all()
    # every row goes to the sink: the heads read nothing, so BOS's value cannot matter
    assert full.accuracy["idle"] == full.accuracy["idle, BOS value zeroed"]
    assert full.accuracy["busy"] == full.accuracy["busy, BOS value zeroed"]
    assert set(plain.accuracy) == {"idle", "busy", "idle, BOS value zeroed", "busy, BOS value zeroed"}
    assert all(0 <= a <= 1 for a in plain.accuracy.values())
    for block in model.blocks:
        block.attention.sink_logits.data.fill_(-30.0)
    none = marker_reading(model, batch)
    assert (none.idle_sink <= 1e-6).all()
    gated = marker_reading(marker_model("gate"), batch)
    assert ((gated.gate_idle > 0) & (gated.gate_idle < 1)).all() and not gated.gate_busy.isnan().any()
    with pytest.raises(TypeError, match="batch"):
        marker_reading(marker_model("plain"), batch.tokens)


def test_bos_value_zeroed_is_that_and_nothing_else():
    """marker_reading's ablation: the last layer's attention computed with v_0 = 0 (by hand: its weights times the
    values with row 0 zeroed), the other layers untouched, and the model restored after."""
    from attnedu.sinks_gates import MARKER, _first_value_zeroed, marker_model, marker_task, residual_stream

    model = marker_model("sink", seed=3)
    for block in model.blocks:
        block.attention.sink_logits.data.normal_(generator=torch.Generator().manual_seed(0))
    tokens = marker_task(4, MARKER["length"], MARKER["vocab"], torch.Generator().manual_seed(2)).tokens
    before = model(tokens)
    hidden, maps = residual_stream(model, tokens)
    attention, n = model.blocks[-1].attention, tokens.shape[1]
    mask, positions = torch.ones(n, n, dtype=torch.bool).tril()[None, None], torch.arange(n)
    with torch.no_grad():
        x = model.blocks[-1].attention_norm(hidden[-2])
        full = attention._attend(x, x, x, mask, rope_positions=positions)[0]
        v = attention.W_v(x).view(*x.shape[:2], attention.num_heads, -1).transpose(1, 2)
        v[:, :, 0] = 0
        by_hand = attention.W_o((maps[-1] @ v).transpose(1, 2).reshape(x.shape))
        with _first_value_zeroed(attention):
            zeroed = attention._attend(x, x, x, mask, rope_positions=positions)[0]
            changed = model(tokens)
    assert torch.allclose(zeroed, by_hand, atol=1e-5) and not torch.allclose(zeroed, full, atol=1e-3)
    assert not torch.allclose(changed, before, atol=1e-4)
    assert torch.equal(model(tokens), before), "the hook is removed on leaving"
