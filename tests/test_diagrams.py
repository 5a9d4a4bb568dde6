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
    from attnedu.diagrams import lookup_diagram, luong_diagram, multihead_diagram, tiling_diagram

    ax = luong_diagram(SOURCE, TARGET, [0.2, 0.3, 0.5], step=2, input_feeding=True)
    texts = _texts(ax)
    assert "$c_{2}$" in texts and texts.count("chat") == 2  # s_2 writes `rouge` after reading y_1 = `chat`
    assert [t for t in texts if t.startswith("$s")] == ["$s_{0}$", "$s_{1}$", "$s_{2}$"]
    assert "<s>" in _texts(luong_diagram(SOURCE, TARGET, [0.2, 0.3, 0.5], step=0))  # s_0 reads the start
    with pytest.raises(ValueError, match=r"0\.\.2"):
        luong_diagram(SOURCE, TARGET, [0.2, 0.3, 0.5], step=3)
    assert sum("k_" in t for t in _texts(lookup_diagram(["cat", "dog"], [0.9, 0.1]))) == 2
    heads = [t for t in _texts(multihead_diagram(3)) if t.startswith("head")]
    assert heads == ["head 0", "head 1", "head 2"]
    plt.close("all")
    ax = tiling_diagram(3, 3, (2, 2), causal=True)
    assert "$S_{22}$" in _texts(ax)
    with pytest.raises(ValueError, match="within 1..3 x 1..3"):
        tiling_diagram(3, 3, (4, 1))
    with pytest.raises(ValueError, match="one value per key"):
        lookup_diagram(["a"], [0.5, 0.5])
    with pytest.raises(ValueError, match="1..8"):
        multihead_diagram(9)
    plt.close("all")
