"""Lesson 12's measurements and models: per-rank timing (its structure and counts, never its times), what
oversubscription costs (structure), the alpha-beta model of scaling and the memory per device on hand-computed cases,
and PyTorch's context_parallel still refusing the CPU (so the lesson's claim breaks CI when PyTorch changes).

Launches are few and small: one at P = 2 whose ranks call time_ring_rank (forward and backward, both layouts) and
time_transfer_rank, as lesson 12's worker does; oversubscription_cost at P = 1 and 2 (time_ring's own launches);
try_torch_context_parallel once at P = 2.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

import attnedu.context_parallel as cp
from attnedu.cache_sizes import MODEL_CONFIGS


def _timing_ranks(rank, world_size):
    # what a launch made elsewhere (lesson 12's) runs in each rank: the package's per-rank timings
    ring = cp.time_ring_rank(rank, world_size, 16, heads=2, head_dim=4, is_causal=True, repeats=3, warmup=1,
                             backward=True)  # fmt: skip
    return (
        ring,
        cp.time_transfer_rank(rank, world_size, numbers=64, repeats=2, warmup=1),
        cp.time_transfer_rank(rank, world_size, numbers=16, tensors=2, repeats=2, warmup=1),
    )  # one block; a ring step's K and V


@pytest.fixture(scope="module")
def launched():
    return cp.run_ranks(_timing_ranks, 2, timeout=120)


@pytest.fixture(scope="module")
def timing(launched):
    return cp.RingTiming.from_ranks([ring for ring, *_ in launched])


def test_time_ring_rank_measures_every_rank_of_every_layout(timing):
    assert (timing.world_size, timing.seq_len, timing.repeats, timing.warmup) == (2, 16, 3, 1)
    assert list(timing.layouts) == list(cp.LAYOUTS) and timing.backward and timing.is_causal
    assert timing.launch_s is None and timing.total_s is None  # the launch was not RingTiming's
    for layout, times in timing.layouts.items():
        assert times.layout == layout
        for kind in ("wall", "compute", "compute_cpu"):
            per_rank = times._times(kind)
            assert len(per_rank) == 2 and all(len(t) == 3 for t in per_rank)  # warm-up repeats dropped
            assert all(math.isfinite(x) and x >= 0 for t in per_rank for x in t)
            medians, quartiles = times.median(kind), times.quartiles(kind)
            assert all(low <= m <= high for m, (low, high) in zip(medians, quartiles))
        # time inside the tiles is part of the ring call's time, on every rank and repeat
        for wall, compute in zip(times.wall_s, times.compute_s):
            assert all(c <= w for c, w in zip(compute, wall))
        # the tile calls recorded one by one add up to the repeat's totals, and count what the hook counted
        for rank in range(2):
            assert len(times.tile_calls[rank]) == 3
            for repeat, calls in enumerate(times.tile_calls[rank]):
                assert sum(c[3] for c in calls) == pytest.approx(times.compute_s[rank][repeat])
                assert sum(c[4] for c in calls) == pytest.approx(times.compute_cpu_s[rank][repeat])
                forward = [c for c in calls if c[0] == "forward"]
                assert sum(not c[2] for c in forward) == times.tiles[rank]["full"]
                assert sum(c[2] for c in forward) == times.tiles[rank]["diagonal"]


def test_block_seconds_picks_the_tile_calls_of_one_block_size(timing):
    # P = 2, N = 16: contiguous chunks of 8, zigzag chunks of 4. Contiguous: rank 0 one diagonal 8 x 8 block, rank 1
    # one full and one diagonal; 3 timed repeats each
    assert len(timing.block_seconds("compute", rows=8)) == 1 * 3
    assert len(timing.block_seconds("compute_cpu", rows=8, diagonal=True)) == 2 * 3
    assert len(timing.block_seconds(rows=8, diagonal=True, backward=True)) == 2 * 3
    # zigzag: each rank 3 full 4 x 4 pairs and 2 diagonal ones
    assert len(timing.block_seconds(rows=4)) == 2 * 3 * 3
    assert timing.block_seconds(rows=5) == []
    assert all(t >= 0 for t in timing.block_seconds("compute", rows=4, diagonal=True))
    with pytest.raises(ValueError, match="kind"):
        timing.block_seconds("wall", rows=8)


def test_ring_timing_from_ranks_refuses_what_is_not_one_ring(launched):
    records = [ring for ring, *_ in launched]
    with pytest.raises(ValueError, match="rank order"):
        cp.RingTiming.from_ranks(records[::-1])
    with pytest.raises(ValueError, match="rank order"):
        cp.RingTiming.from_ranks(records[:1])
    with pytest.raises(ValueError, match="time_ring_rank"):
        cp.RingTiming.from_ranks([launched[0][1], records[1]])
    with pytest.raises(TypeError, match="records"):
        cp.RingTiming.from_ranks(records[0])
    other = dict(records[1], config=dict(records[1]["config"], seed=1))
    with pytest.raises(ValueError, match="one ring"):
        cp.RingTiming.from_ranks([records[0], other])


def test_time_transfer_rank_times_one_block_per_repeat(launched):
    for _, transfer, pair in launched:
        assert transfer["bytes"] == 64 * 4 and len(transfer["seconds"]) == 2  # the warm-up dropped
        assert pair["bytes"] == 2 * 16 * 4 and len(pair["seconds"]) == 2  # both blocks counted
        for t in (transfer, pair):
            assert all(s > 0 for s in t["seconds"]) and t["median_s"] == np.median(t["seconds"])


def test_per_rank_timings_refuse_bad_arguments_before_timing():
    with pytest.raises(ValueError, match="world_size"):
        cp.time_transfer_rank(0, 1)
    with pytest.raises(ValueError, match="rank"):
        cp.time_transfer_rank(2, 2)
    with pytest.raises(ValueError, match="numbers"):
        cp.time_transfer_rank(0, 2, numbers=0)
    with pytest.raises(ValueError, match="tensors"):
        cp.time_transfer_rank(0, 2, tensors=0)
    with pytest.raises(ValueError, match="rank"):
        cp.time_ring_rank(4, 4, 64)
    with pytest.raises(ValueError, match="seq_len should be a multiple of 4"):
        cp.time_ring_rank(0, 2, 6)


def test_time_ring_rank_counts_the_blocks_score_blocks_counts(timing):
    for layout, times in timing.layouts.items():
        expected = cp.score_blocks(2, layout, is_causal=True)
        assert times.blocks == expected
        assert times.tiles == expected, f"{layout}: the timing hook counted other tiles than the ring's rule"
        assert times.backward_tiles == expected  # the backward computes the same pairs
        assert times.work == cp.score_entries(2, 16, layout, is_causal=True)


def test_score_entries_by_hand():
    # P = 2 contiguous, N = 8: chunks of 4; rank 0 one diagonal block (4 * 5 / 2 = 10 scores), rank 1 a full block
    # (16) and a diagonal (10); the causal triangle holds 8 * 9 / 2 = 36
    assert cp.score_entries(2, 8, "contiguous") == [10 / 64, 26 / 64]
    # zigzag, chunks of 2: each rank 3 full pairs (4 each) and 2 diagonals (3 each)
    assert cp.score_entries(2, 8, "zigzag") == [18 / 64, 18 / 64]
    assert sum(cp.score_entries(2, 8, "zigzag", is_causal=False)) == 1.0
    with pytest.raises(ValueError, match="seq_len should be a multiple of 4"):
        cp.score_entries(2, 6, "zigzag")


def test_plot_rank_timing_draws_work_and_time_per_rank(timing):
    fig = Figure()
    axes = cp.plot_rank_timing(fig, timing, kinds=("compute", "compute_cpu", "wall"))
    assert axes.shape == (2, 2)
    for column in range(2):
        assert len(axes[0, column].patches) == 2 * 2  # full and diagonal bars, one of each per rank
        assert len(axes[1, column].patches) == 3 * 2  # three kinds of time per rank
    with pytest.raises(TypeError, match="timing"):
        cp.plot_rank_timing(Figure(), {"contiguous": None})
    with pytest.raises(ValueError, match="kinds"):
        cp.plot_rank_timing(Figure(), timing, kinds=("cpu",))


def test_time_ring_refuses_bad_arguments():
    with pytest.raises(ValueError, match="seq_len should be a multiple of 4"):
        cp.time_ring(2, 6)
    with pytest.raises(ValueError, match="layouts"):
        cp.time_ring(2, 8, layouts=("zigzag", "zigzag"))
    with pytest.raises(ValueError, match="striped"):
        cp.time_ring(2, 8, layouts=("striped",))
    with pytest.raises(TypeError, match="layouts"):
        cp.time_ring(2, 8, layouts="zigzag")
    with pytest.raises(ValueError, match="repeats"):
        cp.time_ring(2, 8, repeats=0)
    with pytest.raises(TypeError, match="backward"):
        cp.time_ring(2, 8, backward="yes")


def test_oversubscription_cost_reports_each_world_size():
    cost = cp.oversubscription_cost(4, world_sizes=(1, 2), heads=1, head_dim=4, repeats=2, warmup=0)
    assert cost["cpu_count"] >= 1 and 1 <= cost["usable_cpus"] <= cost["cpu_count"]
    assert set(cost["world_sizes"]) == {1, 2} == set(cost["timings"])
    for p, row in cost["world_sizes"].items():
        timing = cost["timings"][p]  # time_ring's own launch: its times are RingTiming's too
        assert 0 < timing.launch_s < timing.total_s
        times = timing.layouts["contiguous"]
        assert times.tiles == [{"full": p, "diagonal": 0}] * p  # P blocks of chunk x chunk on every rank
        assert row["ring_block_s"] == row["ring_s"] / p
        assert row["cores_s"] == pytest.approx(p * p * row["block_cpu_s"] / min(p, cost["usable_cpus"]))
        assert all(row[k] > 0 for k in ("ring_s", "launch_s"))
    with pytest.raises(ValueError, match="world_sizes"):
        cp.oversubscription_cost(4, world_sizes=(0,))


# ------------------------------------------------------------------------------------------------------------
# The alpha-beta model
# ------------------------------------------------------------------------------------------------------------

FREE = cp.Link("no latency", bandwidth=100e9, latency=0.0)


def test_transfer_time_is_alpha_plus_bytes_over_beta():
    link = cp.Link("test", bandwidth=1e9, latency=2e-6)
    assert cp.transfer_time(1e6, link) == pytest.approx(2e-6 + 1e-3)
    assert np.allclose(cp.transfer_time([0, 1e9], link), [2e-6, 1 + 2e-6])
    with pytest.raises(TypeError, match="link"):
        cp.transfer_time(1.0, 100e9)
    with pytest.raises(ValueError, match="nbytes"):
        cp.transfer_time(-1, link)


def test_ring_model_by_hand():
    # b = 1, H = H_kv = 2, d = 4, s = 2 bytes, F = 1e12, N = 1000, P = 4: c = 250
    config = dict(heads=2, kv_heads=2, head_dim=4, bytes_per_number=2, flops=1e12, nvlink=FREE, network=FREE)
    full = 4 * 2 * 250**2 * 4 / 1e12  # one block pair: 2e-6 s
    comm = 2 * 2 * 250 * 4 * 2 / 100e9  # K and V of one block: 8000 bytes, 8e-8 s
    m = cp.ring_model(1000, 4, is_causal=False, **config)
    assert m["chunk"] == 250 and m["compute_step"] == pytest.approx(full) and m["comm_step"] == pytest.approx(comm)
    assert m["ring"] == pytest.approx(4 * full) and m["compute"] == pytest.approx(4 * full) and m["hidden"]
    # its transfer is the ring's own block: ring_bytes' forward over its P - 1 transfers
    assert comm * 100e9 == cp.ring_bytes(1, 2, 1000, 4, 4, 2)["forward"] / 3
    # causal zigzag: half a block at every step; causal contiguous: half at step 0, then whole blocks
    assert cp.ring_model(1000, 4, layout="zigzag", **config)["ring"] == pytest.approx(2 * full)
    assert cp.ring_model(1000, 4, layout="contiguous", **config)["ring"] == pytest.approx(3.5 * full)
    # slow link: every step but the last waits for the transfer
    slow = dict(config, nvlink=cp.Link("slow", bandwidth=1e9, latency=1e-6))
    m = cp.ring_model(1000, 4, is_causal=False, **slow)
    step = 1e-6 + 8000 / 1e9
    assert m["comm_step"] == pytest.approx(step) and m["ring"] == pytest.approx(3 * step + full) and not m["hidden"]
    # one GPU: no transfer; beyond a node the network's link carries the ring
    assert cp.ring_model(1000, 1, is_causal=False, **slow)["ring"] == pytest.approx(4 * 4 * full)
    m = cp.ring_model(2**20, np.array([8, 16]))
    assert m["link_bandwidth"].tolist() == [cp.NVLINK4.bandwidth, cp.INFINIBAND_NDR.bandwidth]


def test_overlap_chunk_is_where_compute_meets_communication():
    # Liu et al. 2023, section 3.2: c >= F / B for multi-head attention in bfloat16; their Table 2's A100 with NVLink
    # (312 TFLOPS, 300 GB/s) needs blocks of about 1.0e3 tokens
    a100_nvlink = cp.Link("A100 NVLink", bandwidth=300e9, latency=0.0)
    mha = dict(heads=32, kv_heads=32, head_dim=128, bytes_per_number=2, is_causal=False, flops=312e12)
    assert cp.ring_overlap_chunk(link=a100_nvlink, **mha) == pytest.approx(312e12 / 300e9)
    # GQA-8 of 32 heads sends a quarter of the K/V; causal zigzag computes half a block per step
    gqa = dict(mha, kv_heads=8, is_causal=True, layout="zigzag")
    assert cp.ring_overlap_chunk(link=a100_nvlink, **gqa) == pytest.approx(312e12 / 300e9 / 4 * 2)
    # with a latency the two terms still meet at c*: a ring of N = P c* tokens is exactly balanced
    for layout in cp.LAYOUTS:
        c = cp.ring_overlap_chunk(layout=layout)  # H100, InfiniBand, Llama-3-8B's heads
        m = cp.ring_model(64 * c, 64, layout=layout)
        assert m["compute_step"] == pytest.approx(m["comm_step"], rel=1e-12)
        assert cp.ring_model(64 * c * 1.01, 64, layout=layout)["hidden"]
        assert not cp.ring_model(64 * c * 0.99, 64, layout=layout)["hidden"]


def test_ulysses_model_by_hand():
    config = dict(heads=4, kv_heads=4, head_dim=8, bytes_per_number=2, is_causal=False, flops=1e12)
    m = cp.ulysses_model(64, 4, nvlink=FREE, **config)
    # what it sends is ulysses_bytes' forward; both all-to-alls over the free link; compute H / P heads over all N
    assert m["bytes"] == cp.ulysses_bytes(1, 4, 64, 8, 4, 2)["forward"]
    assert m["comm"] == pytest.approx(m["bytes"] / 100e9)
    assert m["compute"] == pytest.approx(4 * 1 * 64**2 * 8 / 1e12)
    assert m["ulysses"] == pytest.approx(m["comm"] + m["compute"])
    # heads that P does not divide: no Ulysses
    assert np.isnan(cp.ulysses_model(64, 8, **config)["ulysses"])
    # GQA: K/V go with H_kv heads when P divides them, repeated up to P heads when H_kv < P
    gqa = dict(config, heads=8, kv_heads=2, nvlink=FREE)
    shard = 64 / 4 * 8 * 2  # one head of one tensor on one rank, P = 4
    assert cp.ulysses_model(64, 2, **gqa)["bytes"] == pytest.approx((8 + 2 * 2 + 8) * 64 / 2 * 8 * 2 / 2)
    assert cp.ulysses_model(64, 4, **gqa)["bytes"] == pytest.approx((8 + 2 * 4 + 8) * shard * 3 / 4)
    # across nodes: the InfiniBand share of the all-to-all sets its time
    slow = cp.Link("slow", bandwidth=1e9, latency=0.0)
    m = cp.ulysses_model(1024, 16, heads=16, kv_heads=16, nvlink=FREE, network=slow, gpus_per_node=8)
    shard = 16 * 1024 / 16 * 128 * 2
    assert m["comm"] == pytest.approx(3 * shard * 8 / 16 / 1e9 + shard * 8 / 16 / 1e9)  # (P - 8) / P of q, k, v; of out


def test_scaling_model_finds_where_the_ring_stops_hiding_its_transfers():
    m = cp.scaling_model(2**20)
    assert m["world_size"].tolist() == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert np.all(m["ring"] >= m["compute"] - 1e-15)  # transfers never make the ring faster than its compute
    assert np.allclose(m["ring"][m["ring_hidden"]], m["compute"][m["ring_hidden"]])
    # Llama-3-8B's heads over H100s: hidden up to P = N / c* (InfiniBand), not beyond
    crossover = 2**20 / cp.ring_overlap_chunk()
    assert m["crossover"] == pytest.approx(crossover)
    assert np.array_equal(m["ring_hidden"], m["world_size"] < crossover)
    # Ulysses: only where P divides the 32 heads
    assert np.isnan(m["ulysses"]).tolist() == [p > 32 for p in m["world_size"]]
    assert cp.scaling_model(2**30, [8, 16])["crossover"] > 16  # long enough to stay hidden over the whole range
    # where the link changes: hidden on NVLink at 8 GPUs, not over InfiniBand at any P > 8
    c_nvlink, c_network = cp.ring_overlap_chunk(link=cp.NVLINK4), cp.ring_overlap_chunk()
    n = 4 * c_network  # N / c*_InfiniBand = 4 < 8 < N / c*_NVLink
    assert n / c_nvlink > 8 and cp.scaling_model(n, [4, 8, 16])["crossover"] == 8
    assert cp.scaling_model(n, [4, 8, 16])["ring_hidden"].tolist() == [True, True, False]
    n = 4 * c_nvlink  # hidden only up to 4 GPUs
    assert cp.scaling_model(n, [2, 4, 8])["crossover"] == pytest.approx(4)
    assert np.array_equal(cp.scaling_model(2**20, np.array([8, 256]))["ring"], m["ring"][[0, 5]])  # arrays too
    with pytest.raises(ValueError, match="world_sizes"):
        cp.scaling_model(2**20, [8, 0])


def test_model_arguments_are_checked():
    with pytest.raises(ValueError, match="kv_heads should divide heads"):
        cp.ring_model(1024, 8, heads=32, kv_heads=6)
    with pytest.raises(ValueError, match="world_size"):
        cp.ring_model(1024, 0)
    with pytest.raises(ValueError, match="world_size should be whole"):
        cp.ulysses_model(1024, 2.5)
    with pytest.raises(ValueError, match="layout"):
        cp.ring_overlap_chunk(layout="striped")
    with pytest.raises(ValueError, match="flops"):
        cp.ring_model(1024, 8, flops=0)


# ------------------------------------------------------------------------------------------------------------
# Memory per device
# ------------------------------------------------------------------------------------------------------------


def test_memory_per_device_by_hand():
    m = cp.memory_per_device("Llama-3-8B (GQA-8)", 2**20, [1, 2, 64])
    assert m["config"] == MODEL_CONFIGS["Llama-3-8B (GQA-8)"]
    # K and V, 32 layers, 8 K/V heads of 128, 2 bytes, 2^20 tokens: 128 GiB
    assert m["kv_all_layers"] == 2 * 32 * 8 * 128 * 2 * 2**20 == 128 * 2**30
    # one layer's Q and O (32 heads) and K and V (8 heads): 80 heads of 128 numbers, 2 bytes: 20 GiB
    assert m["qkvo_one_layer"] == (64 + 16) * 128 * 2 * 2**20 == 20 * 2**30
    assert m["kv_per_device"].tolist() == [128 * 2**30, 64 * 2**30, 2 * 2**30]
    assert m["fits"].tolist() == [False, True, True]  # 148 GiB > 80 GB; 74 GiB = 79.5e9 bytes <= 80e9
    mha = cp.memory_per_device({"num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "head_dim": 4}, 10, [1],
                               bytes_per_number=4, device_bytes=100)  # fmt: skip
    assert mha["kv_all_layers"] == 2 * 2 * 4 * 4 * 10 and mha["qkvo_one_layer"] == 8 * 4 * 4 * 10
    with pytest.raises(ValueError, match="model"):
        cp.memory_per_device("Llama-3-8B")
    with pytest.raises(ValueError, match="num_kv_heads"):
        cp.memory_per_device({"num_layers": 1, "num_heads": 2, "head_dim": 4})
    with pytest.raises(ValueError, match="world_sizes"):
        cp.memory_per_device(world_sizes=[0])


# ------------------------------------------------------------------------------------------------------------
# PyTorch's own context_parallel on the CPU
# ------------------------------------------------------------------------------------------------------------


def test_torch_context_parallel_still_refuses_the_cpu():
    """The lesson shows PyTorch's context_parallel refusing the CPU. If this fails, PyTorch changed: the lesson's
    claim (and its cell) must change with it."""
    results = cp.try_torch_context_parallel(2)
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert not r["ok"], f"context_parallel ran on the CPU: {r}"
        assert r["error"] == "NotImplementedError"
        assert "_scaled_dot_product_flash_attention_for_cpu" in r["message"] and "sharding strategy" in r["message"]
