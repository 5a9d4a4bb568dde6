"""Lesson 13's delta rule (attnedu/delta_rule.py): one step against numbers worked by hand; the additive memory
against lesson 10's linear attention; the chunked (WY / UT transform) form equal to the recurrent loop, with and
without Gated DeltaNet's decay, for chunk sizes that do and do not divide N, and with equal gradients; the recall
task on cases whose answer is known (orthonormal keys, a key written twice) and its determinism per seed; recall
key by key and by the age of the pair, against recall."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnedu.delta_rule import (
    MEMORIES,
    additive_memory,
    delta_rule,
    delta_rule_chunked,
    delta_step,
    recall,
    recall_by_age,
    recall_curve,
    recall_hits,
)
from attnedu.linear_attention import elu_feature_map, linear_attention

F64 = torch.float64


def _inputs(shape=(2, 3), n=13, d_k=5, d_v=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(*shape, n, d_k, generator=g, dtype=F64) for _ in range(2))
    v = torch.randn(*shape, n, d_v, generator=g, dtype=F64)
    beta = torch.rand(*shape, n, generator=g, dtype=F64) * 2  # the whole stable range [0, 2) for unit keys
    alpha = 0.5 + 0.5 * torch.rand(*shape, n, generator=g, dtype=F64)
    state = torch.randn(*shape, d_v, d_k, generator=g, dtype=F64)
    return q, k, v, beta, alpha, state


def test_one_delta_step_by_hand():
    # S = I, k = (0.6, 0.8) (a unit key), v = (1, 2), beta = 0.5: S k = (0.6, 0.8), the correction v - S k =
    # (0.4, 1.2), half of it written along k: S + (0.2, 0.6)^T (0.6, 0.8).
    state, k, v = torch.eye(2, dtype=F64), torch.tensor([0.6, 0.8], dtype=F64), torch.tensor([1.0, 2.0], dtype=F64)
    expected = torch.tensor([[1.12, 0.16], [0.36, 1.48]], dtype=F64)
    assert torch.allclose(delta_step(state, k, v, 0.5), expected, atol=1e-12)
    # with the decay alpha = 0.5 first: alpha S k = (0.3, 0.4), correction (0.7, 1.6), written half: (0.35, 0.8)
    gated = torch.tensor([[0.71, 0.28], [0.48, 1.14]], dtype=F64)
    assert torch.allclose(delta_step(state, k, v, 0.5, alpha=0.5), gated, atol=1e-12)
    # beta = 1 with a unit key stores v exactly: the memory now answers v for k
    assert torch.allclose(delta_step(state, k, v, 1.0) @ k, v, atol=1e-12)
    # beta = 0 writes nothing; a per-token beta tensor equals the number
    assert torch.equal(delta_step(state, k, v, 0.0), state)
    assert torch.equal(delta_step(state, k, v, torch.tensor(0.5, dtype=F64)), delta_step(state, k, v, 0.5))


def test_additive_memory_is_lesson_10s_causal_linear_attention():
    q, k, v, *_ = _inputs()
    o, state = additive_memory(elu_feature_map(q), elu_feature_map(k), v, normalize=True)
    assert torch.allclose(o, linear_attention(q, k, v, causal=True), atol=1e-12)
    # unnormalised: o_t = S_t q_t with S_t = sum_{j<=t} v_j k_j^T, i.e. causal (q K^T) V without the softmax
    o, state = additive_memory(q, k, v)
    scores = (q @ k.transpose(-1, -2)).tril()
    assert torch.allclose(o, scores @ v, atol=1e-12)
    assert torch.allclose(state, v.transpose(-1, -2) @ k, atol=1e-12)


def test_delta_rule_is_the_loop_of_steps_and_reduces_as_the_papers_say():
    q, k, v, beta, alpha, state = _inputs()
    o, final = delta_rule(q, k, v, beta, alpha, initial_state=state)
    qn, kn = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    s = state
    for t in range(k.shape[-2]):
        s = delta_step(s, kn[..., t, :], v[..., t, :], beta[..., t], alpha[..., t])
        assert torch.allclose(o[..., t, :], (s @ qn[..., t, :, None])[..., 0], atol=1e-12)
    assert torch.allclose(final, s, atol=1e-12)
    # alpha = 1 is the plain delta rule; beta = 0 never writes (the state is only decayed)
    plain = delta_rule(q, k, v, beta, initial_state=state)
    assert torch.allclose(delta_rule(q, k, v, beta, 1.0, initial_state=state)[0], plain[0], atol=1e-12)
    _, kept = delta_rule(q, k, v, 0.0, alpha, initial_state=state)
    assert torch.allclose(kept, state * alpha.prod(-1)[..., None, None], atol=1e-12)
    # with orthonormal keys, v_t k_t^T adds what the correction removes: beta = 1 and distinct keys is the
    # additive memory exactly (the two part ways only when a key comes back or keys overlap)
    keys = torch.linalg.qr(torch.randn(6, 6, dtype=F64))[0][None, :4]
    values = torch.randn(1, 4, 3, dtype=F64)
    assert torch.allclose(delta_rule(keys, keys, values, 1.0)[1], additive_memory(keys, keys, values)[1], atol=1e-12)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 5, 13, 16])  # 5 and 16 do not divide N = 13: padded
def test_chunked_form_equals_the_recurrent_loop(gated, chunk_size):
    q, k, v, beta, alpha, state = _inputs()
    alpha = alpha if gated else None
    for initial in (None, state):
        o, final = delta_rule(q, k, v, beta, alpha, initial_state=initial)
        o_c, final_c = delta_rule_chunked(q, k, v, beta, alpha, chunk_size=chunk_size, initial_state=initial)
        assert o_c.shape == o.shape and final_c.shape == final.shape
        assert torch.allclose(o_c, o, atol=1e-10, rtol=0) and torch.allclose(final_c, final, atol=1e-10, rtol=0)
    # unnormalised keys too, as long as beta ||k||^2 stays small
    small = 0.1 * F.normalize(k, dim=-1)
    o, final = delta_rule(q, small, v, beta, alpha, normalize=False)
    o_c, final_c = delta_rule_chunked(q, small, v, beta, alpha, chunk_size=chunk_size, normalize=False)
    assert torch.allclose(o_c, o, atol=1e-10, rtol=0) and torch.allclose(final_c, final, atol=1e-10, rtol=0)


def test_chunked_form_equals_the_loop_in_float32_within_the_lessons_tolerance():
    q, k, v, beta, alpha, _ = (x.float() for x in _inputs(n=64, d_k=16, d_v=16))
    for a in (None, alpha):
        o, final = delta_rule(q, k, v, beta, a)
        o_c, final_c = delta_rule_chunked(q, k, v, beta, a, chunk_size=16)
        assert (o_c - o).abs().max() <= 1e-5 and (final_c - final).abs().max() <= 1e-5


@pytest.mark.parametrize("gated", [False, True])
def test_gradients_flow_and_agree_between_the_two_forms(gated):
    q, k, v, beta, alpha, state = _inputs(n=9)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, beta, alpha, state)]
    grads = []
    for form in (delta_rule, lambda *a, **kw: delta_rule_chunked(*a, chunk_size=4, **kw)):
        q_, k_, v_, beta_, alpha_, state_ = leaves
        o, final = form(q_, k_, v_, beta_, alpha_ if gated else None, initial_state=state_)
        loss = (o**2).sum() + final.sum()
        used = leaves if gated else leaves[:4] + leaves[5:]
        grads.append(torch.autograd.grad(loss, used))
    for recurrent, chunked in zip(*grads):
        assert torch.isfinite(recurrent).all() and recurrent.abs().sum() > 0
        assert torch.allclose(recurrent, chunked, atol=1e-9, rtol=0)


def test_recall_on_a_key_written_twice_by_hand():
    # keys e1, e2, e1 with the orthonormal values a, b, c: the right answers are c for e1 and b for e2.
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=F64)
    values = torch.eye(3, dtype=F64)
    # additive: e1 reads a + c, as near to a as to c (a tie, a miss); e2 reads b
    assert recall(keys, values, "additive") == 0.5
    # delta rule, beta = 1: the second write of e1 replaces a by c
    assert recall(keys, values, "delta") == 1.0
    # softmax over the three writes gives e1's two writes equal weights: order-blind, a tie again
    assert recall(keys, values, "softmax") == 0.5
    # beta = 0.5 moves the memory half way each time: e1 reads a/2, then a/2 + (c - a/2)/2 = a/4 + c/2, nearer to
    # c than to a; e2 reads b/2, nearest to b
    assert recall(keys, values, "delta", beta=0.5) == 1.0
    # one write each: every memory recalls both keys
    assert all(recall(keys[:2], values[:2], memory) == 1.0 for memory in MEMORIES)


def test_recall_with_orthonormal_keys_is_exact_up_to_d_k_and_rewrites_break_only_the_additive_memory():
    d_k, ns = 8, [1, 2, 4, 8]
    exact = recall_curve(ns, d_k, orthonormal=True, seed=3)
    assert exact["additive"] == [1.0] * 4 and exact["delta"] == [1.0] * 4 and exact["softmax"] == [1.0] * 4
    rewritten = recall_curve([2, 4, 8], d_k, orthonormal=True, rewrites=2, seed=3)
    # each rewritten key reads old + new (a tie): exactly the n - 2 untouched keys are recalled
    assert rewritten["additive"] == [0.0, 0.5, 0.75]
    assert rewritten["delta"] == [1.0, 1.0, 1.0]
    assert all(r < 1.0 for r in rewritten["softmax"])  # order-blind: the two writes of a key weigh the same


def test_recall_falls_past_d_k_for_the_fixed_size_memories_and_not_for_softmax():
    d_k = 16
    curve = recall_curve([4, 64], d_k, trials=2, seed=0)
    # past the state's size (4 d_k pairs) the d_v x d_k memories lose most keys; softmax keeps one row per pair
    assert curve["additive"][1] < 0.6 and curve["delta"][1] < 0.6
    assert curve["softmax"][1] >= 0.9 and curve["softmax"][1] - max(curve["additive"][1], curve["delta"][1]) > 0.3
    assert curve["additive"][0] == 1.0 and curve["softmax"][0] == 1.0


def test_recall_curve_is_deterministic_per_seed():
    first = recall_curve([8, 24], 8, rewrites=2, seed=5)
    assert first == recall_curve([8, 24], 8, rewrites=2, seed=5)
    assert set(first) == set(MEMORIES) and all(len(r) == 2 for r in first.values())
    assert recall_curve([24], 8, memories=["delta"], seed=5) == {"delta": recall_curve([24], 8, seed=5)["delta"]}


def test_recall_hits_are_recall_key_by_key():
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=F64)
    values = torch.eye(3, dtype=F64)
    # distinct keys in the order of their first write: e1 (rewritten: a tie for the additive memory), e2
    assert recall_hits(keys, values, "additive").tolist() == [False, True]
    assert recall_hits(keys, values, "delta").tolist() == [True, True]
    generator = torch.Generator().manual_seed(0)
    keys = F.normalize(torch.randn(24, 8, generator=generator, dtype=F64), dim=-1)
    values = F.normalize(torch.randn(24, 8, generator=generator, dtype=F64), dim=-1)
    for memory in MEMORIES:
        hits = recall_hits(keys, values, memory, beta=0.7)
        assert hits.dtype == torch.bool and hits.shape == (24,)
        assert recall(keys, values, memory, beta=0.7) == hits.double().mean().item()


def test_recall_hits_follow_the_order_of_first_writes_and_score_the_last_value_of_interleaved_rewrites():
    e1, e2, e3 = torch.eye(3, dtype=F64)
    keys = torch.stack([e2, e1, e2, e3, e1])  # first writes: e2, e1, e3; last writes: 2, 4, 3
    values = torch.eye(5, dtype=F64)
    assert recall_hits(keys, values, "delta").tolist() == [True, True, True]  # beta 1, orthonormal: the last value
    # the additive memory returns old + new for e2 and e1 (a tie, a miss), e3's one value exactly
    assert recall_hits(keys, values, "additive").tolist() == [False, False, True]


def test_recall_by_age_averages_recall_hits_over_the_draws_of_recall_curve():
    d_k, n, trials = 8, 12, 3
    by_age = recall_by_age(n, d_k, memories=["additive", "delta"], beta=0.5, trials=trials, seed=4)
    # the same draws as recall_curve: the mean over ages is the recall at n
    curve = recall_curve([n], d_k, memories=["additive", "delta"], beta=0.5, trials=trials, seed=4)
    for memory in ("additive", "delta"):
        assert len(by_age[memory]) == n and all(x in (0, 1 / 3, 2 / 3, 1) for x in by_age[memory])
        assert abs(sum(by_age[memory]) / n - curve[memory][0]) < 1e-12
    # the draws do not depend on the memories or beta asked for
    assert recall_by_age(n, d_k, memories=["additive"], trials=trials, seed=4)["additive"] == by_age["additive"]
    # the delta rule with beta = 1 reads the newest pair exactly (S k_n = v_n after its write)
    assert recall_by_age(2, d_k, memories=["delta"], seed=0)["delta"][-1] == 1.0
