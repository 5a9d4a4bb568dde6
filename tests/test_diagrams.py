"""The model diagrams draw what they say and reject what they cannot draw."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attnedu.diagrams import seq2seq_diagram  # noqa: E402

SOURCE, TARGET = ["the", "red", "cat"], ["le", "chat", "rouge"]


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def test_fixed_context_diagram_has_one_context_for_every_step():
    ax = seq2seq_diagram(SOURCE, TARGET)
    texts = _texts(ax)
    assert [t for t in texts if t.startswith("$h")] == ["$h_{0}$", "$h_{1}$", "$h_{2}$"]  # counted from 0
    assert [t for t in texts if t.startswith("$s")] == ["$s_{0}$", "$s_{1}$", "$s_{2}$"]
    assert texts.count("$c$") == 1 and set(SOURCE + TARGET) <= set(texts)
    plt.close("all")


def test_attention_diagram_draws_one_line_per_source_word_as_thick_as_its_weight():
    ax = seq2seq_diagram(SOURCE, TARGET, weights=[0.1, 0.2, 0.7], step=2)
    assert "$c_{2}$" in _texts(ax)
    widths = [line.get_linewidth() for line in ax.lines]
    assert len(widths) == 3 and widths == sorted(widths)
    plt.close("all")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"weights": [0.5, 0.5]}, "one value per source word"),
        ({"weights": [0.2, 0.3, 0.5], "step": 3}, r"step must be a decoder step t in 0\.\.2"),
        ({"step": 1}, "pass weights too"),
    ],
)
def test_diagram_rejects_what_it_cannot_draw(kwargs, match):
    with pytest.raises(ValueError, match=match):
        seq2seq_diagram(SOURCE, TARGET, **kwargs)


def test_the_other_diagrams_draw_and_check_their_arguments():
    from attnedu.diagrams import (
        lookup_diagram,
        luong_diagram,
        memory_hierarchy_diagram,
        multihead_diagram,
        tiling_diagram,
    )

    ax = luong_diagram(SOURCE, TARGET, [0.2, 0.3, 0.5], step=2, input_feeding=True)
    texts = _texts(ax)
    assert "$c_{2}$" in texts and texts.count("chat") == 2  # s_2 writes `rouge` after reading y_1 = `chat`
    assert [t for t in texts if t.startswith("$s")] == ["$s_{0}$", "$s_{1}$", "$s_{2}$"]
    assert "<s>" in _texts(luong_diagram(SOURCE, TARGET, [0.2, 0.3, 0.5], step=0))  # s_0 reads the start
    with pytest.raises(ValueError, match=r"0\.\.2"):
        luong_diagram(SOURCE, TARGET, [0.2, 0.3, 0.5], step=3)
    assert sum("k_" in t for t in _texts(lookup_diagram(["cat", "dog"], [0.9, 0.1]))) == 2
    texts = _texts(multihead_diagram(3))
    assert [t for t in texts if t.startswith("head")] == ["head 0", "head 1", "head 2"]
    assert {"$Q$", "$K$", "$V$"} <= set(texts) and sum("d_k = d_{model}/3" in t for t in texts) == 1  # said once
    plt.close("all")
    ax = tiling_diagram(300, 100, 100, (2, 2), causal=True)
    assert "$S_{22}$" in _texts(ax)
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == 3  # the diagonal tiles, and only they, are masked
    assert len([p for p in ax.patches if p.get_facecolor()[:3] == (1.0, 1.0, 1.0)]) == 3  # skipped above it
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "skipped (all in the future)" in labels and "current tile" in labels
    with pytest.raises(ValueError, match="within 0..2 x 0..2"):
        tiling_diagram(300, 100, 100, (3, 0))
    assert "bandwidth 19 TB/s" in _texts(memory_hierarchy_diagram())
    with pytest.raises(ValueError, match="one value per key"):
        lookup_diagram(["a"], [0.5, 0.5])
    with pytest.raises(ValueError, match="1..8"):
        multihead_diagram(9)
    plt.close("all")


def test_mask_gallery_draws_the_package_masks_counted_from_0():
    from attnedu.diagrams import mask_gallery

    fig = plt.figure(figsize=(16, 3.6), layout="constrained")
    axes = mask_gallery(fig, length=8, real_tokens=6, window=1, cached_queries=3)
    titles = [ax.get_title() for ax in axes]
    assert len(axes) == 7 and titles[0].endswith("36 of 64 pairs") and titles[1].endswith("48 of 64 pairs")
    assert titles[3].endswith("21 of 24 pairs")  # 3 queries at positions 5, 6, 7 see 6 + 7 + 8 keys
    assert [t.get_text() for t in axes[0].get_xticklabels()][0] == "0"
    assert len(fig.legends) == 1
    with pytest.raises(ValueError, match="at most length=8"):
        mask_gallery(plt.figure(), length=8, real_tokens=9)
    plt.close("all")


def test_rope_rotation_diagram_shows_equal_scores_for_equal_offsets():
    from attnedu.diagrams import rope_rotation_diagram

    fig = plt.figure(figsize=(8, 4.6), layout="constrained")
    axes = rope_rotation_diagram(fig, pairs=((2, 1), (6, 5), (9, 8)))
    scores = [ax.get_title().split("= ")[-1] for ax in axes]
    assert len(set(scores)) == 1, scores
    other = rope_rotation_diagram(plt.figure(), pairs=((2, 1), (6, 3)))
    assert other[0].get_title().split("= ")[-1] != other[1].get_title().split("= ")[-1]
    with pytest.raises(ValueError, match="pairs must be"):
        rope_rotation_diagram(plt.figure(), pairs=((1, 2, 3),))
    plt.close("all")


def test_positions_diagram_names_the_three_places():
    from attnedu.diagrams import positions_diagram

    texts = " ".join(_texts(positions_diagram()))
    assert "sinusoidal, learned" in texts and "RoPE" in texts and "ALiBi" in texts


def test_the_blocks_diagram_draws_both_arrangements_with_a_legend():
    from attnedu.diagrams import transformer_blocks_diagram

    ax = transformer_blocks_diagram()
    texts = _texts(ax)
    assert texts.count("Add & LayerNorm") == 2 and texts.count("RMSNorm") == 2 and texts.count("+") == 2
    assert {"2017 encoder block (post-norm)", "today's decoder block (pre-norm)", "SwiGLU"} <= set(texts)
    assert len(ax.lines) == 4  # two residual connections per block
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["attention", "feed-forward", "normalisation", "add", "residual connection"]
    plt.close("all")
    plt.close("all")


def test_kv_sharing_diagram_draws_what_each_variant_caches():
    from attnedu.diagrams import kv_sharing_diagram

    ax = kv_sharing_diagram(4)
    texts = _texts(ax)
    assert sum(t.startswith("q") and t[1:].isdigit() for t in texts) == 16  # four query heads in each panel
    # cached K/V heads: 4 (MHA) + 2 (GQA) + 1 (MQA); MLA draws 4 computed ones (dashed) and one latent
    assert sum(t.startswith("kv") for t in texts) == 4 + 2 + 1 + 4 and texts.count("c") == 1
    assert "cached: 2 x 4 x d_k" in texts and "cached: 2 x d_k" in texts
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "latent c (cached)" in labels
    with pytest.raises(ValueError, match="2, 4 or 8"):
        kv_sharing_diagram(3)
    plt.close("all")


def test_the_induction_diagram_names_both_heads():
    from attnedu.diagrams import induction_circuit_diagram

    ax = induction_circuit_diagram()
    texts = " ".join(_texts(ax))
    assert "previous-token head" in texts and "induction head" in texts and "prediction" in texts
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["tokens", "after layer 0", "after layer 1", "next-token prediction"]
    plt.close("all")


def test_lesson_12_diagrams_draw_what_the_ranks_hold_and_compute():
    from matplotlib.colors import to_hex

    from attnedu.context_parallel import score_blocks
    from attnedu.diagrams import RANK_COLOURS, layout_diagram, layouts_diagram, ring_diagram, ulysses_diagram

    ax = ring_diagram(4)
    texts = _texts(ax)
    blocks = [t for t in texts if t.startswith("$K_")]
    assert len(blocks) == 16 and blocks[:4] == ["$K_{0}V_{0}$", "$K_{1}V_{1}$", "$K_{2}V_{2}$", "$K_{3}V_{3}$"]
    assert blocks[4:8] == ["$K_{3}V_{3}$", "$K_{0}V_{0}$", "$K_{1}V_{1}$", "$K_{2}V_{2}$"]  # step 1: (r - 1) mod 4
    assert texts.count("rank 0") == 2 and sum(t.startswith("step ") for t in texts) == 4
    plt.close("all")
    for world_size in (2, 4):
        axes = layouts_diagram(world_size)
        for ax, layout in zip(axes, ("contiguous", "zigzag")):
            chunks = world_size if layout == "contiguous" else 2 * world_size
            cells = [p for p in ax.patches if p.get_width() < 1]
            assert len(cells) == chunks * chunks
            skipped = [p for p in cells if to_hex(p.get_facecolor()) == "#ffffff"]
            diagonal = [p for p in cells if p.get_hatch()]
            assert len(skipped) == chunks * (chunks - 1) // 2 and len(diagonal) == chunks
            for rank, counted in enumerate(score_blocks(world_size, layout)):  # the colours are the counted work
                mine = [p for p in cells if to_hex(p.get_facecolor()) == to_hex(RANK_COLOURS[rank])]
                assert len(mine) == counted["full"] + counted["diagonal"], (layout, rank)
        labels = [t.get_text() for t in plt.gcf().legends[0].get_texts()]
        assert (
            labels[:world_size] == [f"rank {r}" for r in range(world_size)] and "skipped (all in the future)" in labels
        )
        plt.close("all")
    ax = ulysses_diagram(4, 8)
    colours = [to_hex(p.get_facecolor()) for p in ax.patches if isinstance(p, plt.Rectangle)]
    before, after = colours[:32], colours[32:64]
    assert before[:8] == [to_hex(RANK_COLOURS[0])] * 8  # token chunk 0, all heads: rank 0
    assert after[:8] == [to_hex(RANK_COLOURS[h // 2]) for h in range(8)]  # two heads per rank after the all-to-all
    assert sorted(before) == sorted(after)  # the same amount of data on each rank, re-partitioned
    cells = [p for p in ax.patches if isinstance(p, plt.Rectangle)][:64]
    home = [i for i, p in enumerate(cells) if p.get_hatch()]  # cell i: panel i // 32, chunk i % 32 // 8, head i % 8
    assert home == [panel * 32 + chunk * 8 + h for panel in (0, 1) for chunk in range(4) for h in range(8)
                    if h // 2 == chunk]  # fmt: skip
    assert all(before[i] == after[i] for i in home[:8])  # what stays home is held by the same rank before and after
    assert "stays home (not sent)" in [t.get_text() for t in ax.get_legend().get_texts()]
    with pytest.raises(ValueError, match="divisible by world_size=4"):
        ulysses_diagram(4, 6)
    with pytest.raises(ValueError, match="2..8"):
        ring_diagram(9)
    with pytest.raises(ValueError, match="layout"):
        layout_diagram(2, "striped")
    plt.close("all")


def test_lesson_13a_sink_and_gate_diagram_draws_the_package_softmax_rows():
    import torch

    from attnedu.diagrams import sink_and_gate_diagram
    from attnedu.diagrams.models2025 import IDLE_SCORES
    from attnedu.sinks_gates import sink_weight, softmax_with_sink

    fig = sink_and_gate_diagram(sink=3.0, first_token_score=3.0)
    axes = {ax.get_label(): ax for ax in fig.axes}

    def heights(ax, gid):
        return torch.tensor([p.get_height() for p in ax.patches if p.get_gid() == gid], dtype=torch.float64)

    plain, keys, dropped = heights(axes["plain"], "plain:keys"), heights(axes["sink"], "sink:keys"), None
    dropped = heights(axes["sink"], "sink:sink")
    idle = torch.tensor(IDLE_SCORES, dtype=torch.float64)
    raised = idle.clone()
    raised[0] = 3.0
    torch.testing.assert_close(plain, torch.softmax(raised, -1))  # the plain row sums to 1, most on the first token
    assert plain.argmax() == 0 and plain[0] > 0.5
    row, logit = idle[None, None], torch.tensor([3.0], dtype=torch.float64)
    torch.testing.assert_close(keys, softmax_with_sink(row, logit)[0, 0])
    torch.testing.assert_close(dropped, sink_weight(row, logit)[0])
    assert abs(float(keys.sum() + dropped.sum()) - 1) < 1e-12 and dropped[0] > 0.5  # the sink takes the mass
    assert len(heights(axes["plain"], "plain:sink")) == 0  # the plain softmax has no sink column
    texts = " ".join(t.get_text() for t in axes["gate"].texts)
    assert "after attention, before $W_o$" in texts and "layer input" in texts and r"\sigma(x W_g)" in texts
    with pytest.raises(TypeError, match="sink"):
        sink_and_gate_diagram(sink="3")
    plt.close("all")


def test_lesson_13b_selection_grid_shades_the_package_selection():
    from matplotlib.colors import to_hex

    from attnedu.diagrams import sparse_selection_diagram
    from attnedu.diagrams.models2025 import FUTURE, KEPT, NOT_READ, READ, selection_inputs
    from attnedu.sparse_attention import dsa_attention, moba_attention, sliding_window_attention

    READ, KEPT, NOT_READ, FUTURE = (to_hex(c) for c in (READ, KEPT, NOT_READ, FUTURE))  # noqa: N806
    n, block, needle = 16, 4, 2
    fig = sparse_selection_diagram(length=n, block_size=block, window=3, top_k_blocks=2, top_k_tokens=4, needle=needle)
    q, k, v, late = selection_inputs(n, needle, block)
    import torch

    expected = {
        "window": sliding_window_attention(q, k, v, 3).keys_read[0, 0],
        "moba": moba_attention(q, k, v, block, 2).keys_read[0, 0],
        "dsa": dsa_attention(q, k, v, q[:, 0, :, None], k[:, 0], torch.ones(1, n, 1, dtype=q.dtype), 4).keys_read[0, 0],
    }
    for ax, (rule, read) in zip(fig.axes, expected.items()):
        colour = {p.get_gid(): to_hex(p.get_facecolor()) for p in ax.patches if p.get_gid()}
        assert len(colour) == n * n
        shaded = torch.tensor([[colour[f"{rule}:{i},{j}"] in (READ, KEPT) for j in range(n)] for i in range(n)])
        assert torch.equal(shaded, read), rule  # the shaded cells are the package's selection
        assert all(colour[f"{rule}:{i},{j}"] == FUTURE for i in range(n) for j in range(i + 1, n))
        assert all(colour[f"{rule}:{i},{j}"] == NOT_READ for i in range(n) for j in range(i + 1) if not read[i, j])
        assert ax.get_title().endswith(f"{int(read.sum())} of {n * (n + 1) // 2} scores computed")
        reads_needle = all(bool(read[i, needle]) for i in late)
        assert reads_needle == (rule != "window"), rule  # what the figure says: selection finds key 2, the window not
    moba = {p.get_gid(): to_hex(p.get_facecolor()) for p in fig.axes[1].patches if p.get_gid()}
    own = [moba[f"moba:{i},{j}"] for i in range(n) for j in range(i // block * block, i + 1)]
    assert set(own) == {KEPT}  # the own block always, with the causal mask inside
    assert KEPT not in {to_hex(p.get_facecolor()) for ax in (fig.axes[0], fig.axes[2]) for p in ax.patches}
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "future key (never read)" in labels and "MoBA: the query's own block (always read)" in labels
    with pytest.raises(ValueError, match="needle"):
        sparse_selection_diagram(needle=13)
    with pytest.raises(ValueError, match="length"):
        sparse_selection_diagram(length=64)
    plt.close("all")


def test_lesson_13b_delta_rule_diagram_overwrites_where_the_additive_memory_sums():
    import torch

    from attnedu.diagrams import delta_rule_diagram
    from attnedu.diagrams.models2025 import NEW_KEY, NEW_VALUE, REWRITE_VALUE, STORED_VALUES, delta_rule_example

    def drawn(fig, gid):
        return torch.tensor([float(t.get_text()) for t in fig.axes[0].texts if t.get_gid() == gid])

    fig = delta_rule_diagram()
    v, v1, v2 = torch.tensor(NEW_VALUE), torch.tensor(STORED_VALUES[1]), torch.tensor(REWRITE_VALUE)
    torch.testing.assert_close(drawn(fig, "read_delta"), v)  # beta = 1, a unit key: read back v exactly
    assert (drawn(fig, "read_add") - v).abs().max() > 0.5  # the additive memory returns v plus what S held
    torch.testing.assert_close(drawn(fig, "read_add"), drawn(fig, "Sk") + v)
    torch.testing.assert_close(drawn(fig, "twice_add"), v1 + v2)  # the sum
    torch.testing.assert_close(drawn(fig, "twice_delta"), v2)  # the overwrite
    assert len(drawn(fig, "S")) == 3 * 4 and len(drawn(fig, "k")) == 4  # S is d_v x d_k
    ex = delta_rule_example(0.5)  # by hand: S + beta (v - S k) k^T
    S, k = ex["S"], torch.tensor(NEW_KEY, dtype=torch.float64)
    torch.testing.assert_close(ex["S_delta"], S + 0.5 * torch.outer(v.double() - S @ k, k))
    torch.testing.assert_close(ex["write"], ex["S_delta"] - S)  # the drawn write is what the step adds
    torch.testing.assert_close(ex["correction"], v.double() - S @ k)
    torch.testing.assert_close(ex["twice_delta"], v1.double() + 0.5 * (v2.double() - v1.double()))
    with pytest.raises(ValueError, match="beta"):
        delta_rule_diagram(beta=3.0)
    plt.close("all")
