"""Lesson 13's sparse selection (attnedu/sparse_attention.py): MoBA's block top-k, DeepSeek's indexer top-k and the
sliding window, each equal to dense causal attention (torch's SDPA, float64) when it covers every block, token or
position; each equal to a loop written from the papers' definitions; causal by the selection (a future key is never
read, however well it matches) and by the gradient (none reaches a future key or value); the counts on cases
computed by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnedu.masks import document_mask, sliding_window_mask
from attnedu.sparse_attention import (
    block_mean_keys,
    dsa_attention,
    indexer_scores,
    moba_attention,
    sliding_window_attention,
)


def qkv(batch=2, heads=3, n=10, d=4, d_v=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, dim, generator=g, dtype=dtype) for dim in (d, d, d_v)]


def indexer(batch=2, n=10, index_heads=2, index_dim=3, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, n, index_heads, index_dim, generator=g, dtype=dtype),
            torch.randn(batch, n, index_dim, generator=g, dtype=dtype),
            torch.rand(batch, n, index_heads, generator=g, dtype=dtype))  # fmt: skip


def dense_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# ---- equal to dense attention when the selection covers everything ---------------------------------------------


@pytest.mark.parametrize("block_size, top_k", [(2, 5), (3, 4), (3, 50), (4, 3), (10, 1), (16, 1)])
def test_moba_equals_dense_causal_attention_when_top_k_covers_every_block(block_size, top_k):
    q, k, v = qkv(n=10)  # 10 keys in blocks of 3: the last block holds one key
    result = moba_attention(q, k, v, block_size, top_k)
    assert torch.allclose(result.output, dense_causal(q, k, v), atol=1e-12)
    assert result.counts.scores == result.counts.dense_scores


@pytest.mark.parametrize("top_k", [10, 64])
def test_dsa_equals_dense_causal_attention_when_top_k_covers_every_token(top_k):
    q, k, v = qkv(n=10)
    result = dsa_attention(q, k, v, *indexer(n=10), top_k=top_k)
    assert torch.allclose(result.output, dense_causal(q, k, v), atol=1e-12)
    assert result.counts.scores == result.counts.dense_scores


def test_sliding_window_equals_dense_when_it_covers_every_position_and_the_masked_sdpa_otherwise():
    q, k, v = qkv(n=10)
    assert torch.allclose(sliding_window_attention(q, k, v, 9).output, dense_causal(q, k, v), atol=1e-12)
    mask = sliding_window_mask(10, 3, causal=True)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(sliding_window_attention(q, k, v, 3).output, expected, atol=1e-12)


def test_moba_with_top_k_one_reads_its_own_block_only_as_a_document_mask():
    q, k, v = qkv(n=10)
    own_block = (torch.arange(10) // 4)[None]  # blocks of 4 as documents: causal inside each, nothing across
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(own_block)[:, None])
    assert torch.allclose(moba_attention(q, k, v, 4, 1).output, expected, atol=1e-12)


# ---- equal to loops written from the papers' definitions ---------------------------------------------------------


def moba_loop(q, k, v, block_size, top_k):
    """MoBA for one query at a time: mean key per block, the own block plus the top_k - 1 best earlier blocks."""
    batch, heads, n, d = q.shape
    out = torch.zeros(batch, heads, n, v.shape[-1], dtype=q.dtype)
    chosen = {}
    for b in range(batch):
        for h in range(heads):
            means = [k[b, h, s : s + block_size].mean(dim=0) for s in range(0, n, block_size)]
            for i in range(n):
                own = i // block_size
                earlier = sorted(range(own), key=lambda c: -float(q[b, h, i] @ means[c]))
                blocks = {own, *earlier[: top_k - 1]}
                keys = [j for j in range(i + 1) if j // block_size in blocks]
                w = torch.softmax(torch.stack([q[b, h, i] @ k[b, h, j] for j in keys]) / math.sqrt(d), dim=0)
                out[b, h, i] = sum(w_j * v[b, h, j] for w_j, j in zip(w, keys))
                chosen[b, h, i] = blocks
    return out, chosen


def test_moba_equals_a_loop_over_queries():
    q, k, v = qkv(batch=1, heads=2, n=11, seed=3)
    result = moba_attention(q, k, v, 3, 2)
    expected, chosen = moba_loop(q, k, v, 3, 2)
    assert torch.allclose(result.output, expected, atol=1e-12)
    for (b, h, i), blocks in chosen.items():
        assert set(torch.nonzero(result.selected[b, h, i]).flatten().tolist()) == blocks, (b, h, i)
    assert result.counts.scores < result.counts.dense_scores  # the case is sparse: some earlier blocks left out


def test_dsa_equals_a_loop_over_queries():
    q, k, v = qkv(batch=1, heads=2, n=9, seed=4)
    q_index, k_index, weights = indexer(batch=1, n=9, index_heads=3, seed=5)
    result = dsa_attention(q, k, v, q_index, k_index, weights, top_k=4)
    d, clipped = q.shape[-1], 0
    for t in range(9):
        score = {s: sum(float(weights[0, t, j]) * max(0.0, float(q_index[0, t, j] @ k_index[0, s])) for j in range(3))
                 for s in range(t + 1)}  # fmt: skip
        keys = torch.nonzero(result.selected[0, t]).flatten().tolist()
        left_out = [score[s] for s in score if s not in keys]
        # the top min(4, t + 1) earlier tokens: ReLU makes ties at 0 likely, and a tie may go either way
        assert len(keys) == min(4, t + 1) and min(score[s] for s in keys) >= max(left_out, default=-math.inf), t
        clipped += sum(value == 0 for value in score.values())
        for h in range(2):
            w = torch.softmax(torch.stack([q[0, h, t] @ k[0, h, s] for s in keys]) / math.sqrt(d), dim=0)
            expected = sum(w_s * v[0, h, s] for w_s, s in zip(w, keys))
            assert torch.allclose(result.output[0, h, t], expected, atol=1e-12), (t, h)
    assert clipped > 0  # the case exercises the ReLU: some pairs score exactly 0


def test_indexer_scores_and_block_means_on_a_case_by_hand():
    q_index = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [-1.0, 0.0]]]])  # (1, 2 tokens, 2 heads, 2)
    k_index = torch.tensor([[[2.0, -1.0], [0.0, 3.0]]])
    weights = torch.tensor([[[0.5, 2.0], [1.0, 1.0]]])
    # t=0: head 0 reads k.x, head 1 k.y: s=0: 0.5*relu(2) + 2*relu(-1) = 1;    s=1: 0.5*relu(0) + 2*relu(3) = 6
    # t=1: head 0 reads x+y, head 1 -x:   s=0: relu(1) + relu(-2) = 1;         s=1: relu(3) + relu(0) = 3
    assert torch.equal(indexer_scores(q_index, k_index, weights), torch.tensor([[[1.0, 6.0], [1.0, 3.0]]]))
    k = torch.arange(5.0).reshape(1, 1, 5, 1)  # keys 0..4 in blocks of 2: means 0.5, 2.5 and 4 (a block of one)
    assert torch.equal(block_mean_keys(k, 2).flatten(), torch.tensor([0.5, 2.5, 4.0]))


# ---- causal: by the selection, and by the gradient ----------------------------------------------------------------


def test_moba_picks_the_block_that_matches_and_never_a_future_one():
    n, d = 8, 2
    k = torch.zeros(1, 1, n, d, dtype=torch.float64)
    k[..., 2:4, :] = torch.tensor([5.0, 0.0], dtype=torch.float64)  # block 1 matches the queries
    k[..., 4:6, :] = torch.tensor([50.0, 0.0], dtype=torch.float64)  # block 2 matches them ten times better
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 1, n, d)
    result = moba_attention(q, k, torch.randn(1, 1, n, 3, dtype=torch.float64), 2, 2)
    picks = [set(torch.nonzero(result.selected[0, 0, i]).flatten().tolist()) for i in range(n)]
    # queries 0-1: block 0 only; 2-3: their block and block 0 (nothing else before); 4-5: their block 2 and block 1
    # (block 0's mean key scores 0); 6-7: block 3 and block 2. Block 2 is never picked by queries before it.
    assert picks == [{0}, {0}, {1, 0}, {1, 0}, {2, 1}, {2, 1}, {3, 2}, {3, 2}]
    assert not result.keys_read.triu(1).any()


def test_dsa_picks_the_best_earlier_tokens_and_never_a_future_one():
    n = 6
    q_index = torch.ones(1, n, 1, 1)
    k_index = torch.tensor([1.0, 4.0, 2.0, 9.0, 3.0, 100.0]).reshape(1, n, 1)  # I_{t,s} = k_s: the largest earlier
    weights = torch.ones(1, n, 1)
    q, k, v = qkv(batch=1, heads=1, n=n, dtype=torch.float32)
    result = dsa_attention(q, k, v, q_index, k_index, weights, top_k=2)
    picks = [set(torch.nonzero(result.selected[0, t]).flatten().tolist()) for t in range(n)]
    assert picks == [{0}, {0, 1}, {1, 2}, {1, 3}, {1, 3}, {3, 5}]  # token 5 (score 100) only for itself


@pytest.mark.parametrize("method", ["moba", "dsa", "window"])
def test_no_gradient_reaches_a_future_key_or_value(method):
    q, k, v = (x.requires_grad_() for x in qkv(batch=1, heads=2, n=12, seed=7))
    call = {"moba": lambda: moba_attention(q, k, v, 3, 2),
            "dsa": lambda: dsa_attention(q, k, v, *indexer(batch=1, n=12), top_k=4),
            "window": lambda: sliding_window_attention(q, k, v, 3)}[method]  # fmt: skip
    result = call()
    i = 6
    result.output[..., i, :].sum().backward()
    assert torch.all(k.grad[..., i + 1 :, :] == 0) and torch.all(v.grad[..., i + 1 :, :] == 0)
    read = result.keys_read[:, :, i]  # (B, H, N): the keys query i read get gradient, the others none
    assert torch.all(v.grad.abs().sum(-1)[~read] == 0) and torch.all(v.grad.abs().sum(-1)[read] > 0)
    assert not result.keys_read.triu(1).any()


# ---- counts, by hand -----------------------------------------------------------------------------------------------


def test_counts_on_cases_by_hand():
    # N = 8, d = d_v = 4, float64 (8 bytes): one key and one value read = (4 + 4) * 8 = 64 bytes.
    # Dense causal: 1 + 2 + ... + 8 = 36 scores, 36 * 64 = 2304 bytes.
    q, k, v = qkv(batch=1, heads=1, n=8, d=4, d_v=4)

    # MoBA, blocks of 2, top_k 2: query i reads the causal part of its own block (i % 2 + 1 keys) and one earlier
    # block (2 keys) if there is one: 1 + 2 | 3 + 4 | 3 + 4 | 3 + 4 = 24 scores. Gates: one per earlier block,
    # 0 + 0 + 1 + 1 + 2 + 2 + 3 + 3 = 12, each reading a mean key of 4 * 8 = 32 bytes: 24 * 64 + 12 * 32 = 1920.
    moba = moba_attention(q, k, v, 2, 2).counts
    assert (moba.scores, moba.dense_scores, moba.selection_scores) == (24, 36, 12)
    assert (moba.kv_bytes, moba.dense_kv_bytes) == (1920, 2304)
    assert moba.scores_fraction == pytest.approx(24 / 36) and moba.kv_bytes_fraction == pytest.approx(1920 / 2304)

    # DSA, top_k 3, 2 indexer heads of 2: query t reads min(3, t + 1) keys: 1 + 2 + 3 * 6 = 21 scores. The indexer
    # scores all 36 (query, earlier token) pairs with 2 heads: 72, reading a 2-number key each: 36 * 2 * 8 = 576.
    dsa = dsa_attention(q, k, v, *indexer(batch=1, n=8, index_heads=2, index_dim=2), top_k=3).counts
    assert (dsa.scores, dsa.selection_scores, dsa.kv_bytes, dsa.dense_kv_bytes) == (21, 72, 21 * 64 + 576, 2304)

    # Window 2: query i reads min(3, i + 1) keys, the same 21 scores; choosing costs nothing.
    window = sliding_window_attention(q, k, v, 2).counts
    assert (window.scores, window.selection_scores, window.kv_bytes) == (21, 0, 21 * 64)

    # Over a batch of 2 and 3 heads every count is 6 times as large (the indexer's are per token, so 2 times).
    q6, k6, v6 = qkv(batch=2, heads=3, n=8, d=4, d_v=4)
    assert moba_attention(q6, k6, v6, 2, 2).counts == (24 * 6, 36 * 6, 12 * 6, 1920 * 6, 2304 * 6)
    dsa6 = dsa_attention(q6, k6, v6, *indexer(batch=2, n=8, index_heads=2, index_dim=2), top_k=3).counts
    assert dsa6 == (21 * 6, 36 * 6, 72 * 2, 21 * 64 * 6 + 576 * 2, 2304 * 6)


# ---------------------------------------------------------------------------------------------------------------------
# The retrieval task of lesson 13b
# ---------------------------------------------------------------------------------------------------------------------


def test_retrieval_task_shapes_answers_beyond_the_window_and_reproducible():
    from attnedu.sparse_attention import retrieval_task

    task = retrieval_task(300, 8, batch=3, passage=16, asked=10, window=50, index_dim=4, seed=7)
    assert task.q.shape == task.k.shape == task.v.shape == (3, 1, 300, 8)
    assert (
        task.q_index.shape == (3, 300, 1, 4) and task.k_index.shape == (3, 300, 4) and task.weights.shape == (3, 300, 1)
    )
    assert task.positions.tolist() == list(range(290, 300)) and task.targets.shape == (3, 10)
    assert bool(((task.positions[None] - task.targets) > 50).all()), "every answer lies beyond the window"
    torch.testing.assert_close(task.k.norm(dim=-1), torch.ones(3, 1, 300))
    # q . k / sqrt(d) = sharpness x cosine
    torch.testing.assert_close(task.q.norm(dim=-1), torch.full((3, 1, 300), 16.0 * math.sqrt(8)))
    again = retrieval_task(300, 8, batch=3, passage=16, asked=10, window=50, index_dim=4, seed=7)
    assert all(torch.equal(a, b) for a, b in zip(task, again))


def test_retrieval_task_topic_makes_neighbouring_keys_alike():
    from attnedu.sparse_attention import retrieval_task

    def neighbour_cosine(topic):
        k = retrieval_task(1024, 64, passage=64, topic=topic, seed=0, dtype=torch.float64).k[0, 0]
        same = (k[:-1] * k[1:]).sum(-1)[torch.arange(1023) % 64 != 63]  # neighbours in one passage
        return same.mean().item()

    assert abs(neighbour_cosine(0.6) - 0.36) < 0.05  # c^2
    assert abs(neighbour_cosine(0.0)) < 0.05


def test_retrieval_recall_counts_the_nearest_value():
    from attnedu.sparse_attention import retrieval_recall, retrieval_task

    task = retrieval_task(200, 8, batch=2, asked=10, window=20, seed=1)
    perfect = task.v.clone()
    perfect[:, 0, task.positions] = task.v[:, 0].gather(1, task.targets[..., None].expand(2, 10, 8))
    assert retrieval_recall(perfect, task).tolist() == [1.0, 1.0]
    half = perfect.clone()
    half[0, 0, task.positions[:5]] = task.v[0, 0, task.positions[:5]]  # each answers itself: not its target
    assert retrieval_recall(half, task).tolist() == [0.5, 1.0]
    task = retrieval_task(512, 64, batch=2, asked=32, window=64, seed=1)
    dense = dense_causal(task.q, task.k, task.v)
    assert retrieval_recall(dense, task).min() >= 0.9, "sharp dense attention finds the key asked for"
    window = sliding_window_attention(task.q, task.k, task.v, 64).output
    assert retrieval_recall(window, task).max() <= 0.1, "the answers lie beyond the window"


def test_retrieval_task_refuses_what_it_cannot_build():
    from attnedu.sparse_attention import retrieval_recall, retrieval_task

    with pytest.raises(ValueError, match="n"):
        retrieval_task(100, 8, asked=64, window=128)
    with pytest.raises(ValueError, match="topic"):
        retrieval_task(400, 8, topic=1.5)
    with pytest.raises(TypeError, match="head_dim"):
        retrieval_task(400, 8.0)
    task = retrieval_task(400, 8, seed=0)
    with pytest.raises(ValueError, match="output"):
        retrieval_recall(task.v[:, :, :10], task)
    with pytest.raises(TypeError, match="task"):
        retrieval_recall(task.v, tuple(task))


def test_nsa_decoding_keys_counts_every_block_by_hand_and_the_papers_sizes():
    from attnedu.sparse_attention import NSA_SIZES, nsa_decoding_keys

    for n in (1, 31, 32, 33, 47, 48, 100, 1024, 1025):
        starts = [s for s in range(0, n, 16) if s + 32 <= n]  # compressed blocks of 32 keys, one every 16 tokens
        got = nsa_decoding_keys(n, block=32, stride=16, select_block=64, n_select=2, window=40)
        assert got == (len(starts), min(128, n), min(40, n)), n
        assert got.total == sum(got)
    assert nsa_decoding_keys(4096) == nsa_decoding_keys(4096, **NSA_SIZES)
    # the paper's Table 4 (t/d compressed keys, one more than its eq. 8) and its expected speed-ups
    for n, table, speedup in ((8192, 2048, 4.0), (16384, 2560, 6.4), (32768, 3584, 9.1), (65536, 5632, 11.6)):
        reads = nsa_decoding_keys(n)
        assert reads.total == table - 1 and reads[1:] == (1024, 512) and round(n / reads.total, 1) == speedup
