import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnedu.plots import plot_accuracy_by_length, plot_attention, plot_attention_step  # noqa: E402
from attnedu.widgets import AttentionStepper  # noqa: E402

SOURCE, TARGET = ["the", "red", "cat"], ["le", "chat", "rouge"]
WEIGHTS = torch.tensor([[0.9, 0.05, 0.05], [0.1, 0.1, 0.8], [0.0, 1.0, 0.0]])


def test_attention_map_uses_the_shared_scale_and_draws_the_gold_alignment():
    fig, ax = plt.subplots()
    image = plot_attention(WEIGHTS, SOURCE, TARGET, gold=[0, 2, 1], ax=ax)
    assert image.get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == SOURCE
    assert len(ax.patches) == 3  # one square per gold link
    plt.close(fig)


def test_attention_map_rejects_labels_that_do_not_fit():
    with pytest.raises(ValueError, match="one label per row and per column"):
        plot_attention(WEIGHTS, SOURCE[:2], TARGET)
    with pytest.raises(ValueError, match="one per target word"):
        plot_attention(WEIGHTS, SOURCE, TARGET, gold=[0, 1])


def test_accuracy_plot_has_one_line_per_model():
    fig, ax = plt.subplots()
    plot_accuracy_by_length({"a": {(5, 9): 1.0, (10, 14): 0.5}, "b": {(5, 9): 0.2, (10, 14): 0.1}}, ax=ax)
    assert len(ax.lines) == 2
    plt.close(fig)


def test_stepper_redraws_when_the_slider_moves():
    stepper = AttentionStepper(WEIGHTS, SOURCE, TARGET, gold=[0, 2, 1])
    assert (stepper.slider.min, stepper.slider.max) == (0, 2)  # steps count from 0, as t in the lessons
    first = stepper.image.value
    stepper.slider.value = 2  # traitlets callbacks run in Python, no browser needed
    assert bytes(stepper.image.value) != bytes(first) and bytes(stepper.image.value).startswith(b"\x89PNG")
    assert repr(stepper) == "AttentionStepper(steps=3, step=2)"


def test_step_bars_count_from_zero_and_mark_the_gold_word():
    fig, ax = plt.subplots()
    plot_attention_step(WEIGHTS, SOURCE, TARGET, step=1, ax=ax, gold=[0, 2, 1])
    assert ax.get_title() == "step t = 1: writing 'chat'"
    bars = ax.patches
    assert [b.get_height() for b in bars] == pytest.approx(WEIGHTS[1].tolist())
    assert bars[2].get_facecolor() != bars[0].get_facecolor()  # the gold source word, 'cat'
    with pytest.raises(ValueError, match="count from 0"):
        plot_attention_step(WEIGHTS, SOURCE, TARGET, step=3, ax=ax)
    with pytest.raises(ValueError, match="expected \\(target_len, source_len\\)"):
        AttentionStepper(WEIGHTS, SOURCE[:2], TARGET)


def test_mask_explorer_redraws_for_every_control():
    from attnedu.widgets import MASK_KINDS, MaskExplorer

    explorer = MaskExplorer(length=8)
    pictures = {bytes(explorer.image.value)}
    for kind in MASK_KINDS[1:]:
        explorer.controls[0].value = kind
        pictures.add(bytes(explorer.image.value))
    explorer.controls[3].value = 4  # the window
    pictures.add(bytes(explorer.image.value))
    assert len(pictures) == len(MASK_KINDS) + 1
    assert repr(explorer).startswith("MaskExplorer(mask='sliding window + global'")


def test_online_softmax_steps_match_torch_and_rescale():
    from attnedu.plots import online_softmax_steps

    row = torch.tensor([1.0, 3.0, 0.5, 4.0, 2.0, 0.0, 6.0, 1.0])
    steps = online_softmax_steps(row, 3)
    assert [s["end"] for s in steps] == [3, 6, 8] and steps[-1]["m"] == 6.0
    assert steps[1]["carried"] == pytest.approx(steps[0]["l"] * torch.exp(torch.tensor(3.0 - 4.0)).item())
    softmax = torch.exp(row.double() - steps[-1]["m"]) / steps[-1]["l"]
    assert torch.allclose(softmax.float(), torch.softmax(row, 0))


def test_online_softmax_blocks_and_positions_count_from_0():
    from matplotlib.figure import Figure

    from attnedu.plots import plot_online_softmax
    from attnedu.widgets import OnlineSoftmaxStepper

    axes = plot_online_softmax(Figure(), torch.arange(7.0), 3)
    assert [ax.get_title().split(":")[0] for ax in axes] == [
        "block 0 (scores 0..2)", "block 1 (scores 3..5)", "block 2 (scores 6..6)"
    ]
    assert [round(p.get_x() + p.get_width() / 2) for p in axes[0].patches] == list(range(7))  # positions 0..6
    stepper = OnlineSoftmaxStepper(torch.arange(7.0), 3)
    assert (stepper.slider.min, stepper.slider.value, stepper.slider.max) == (0, 0, 2)


def test_stepper_and_explorer_widgets_draw():
    from attnedu.widgets import EncodingExplorer, OnlineSoftmaxStepper, ScalingExplorer

    for widget, control, value in (
        (OnlineSoftmaxStepper(torch.arange(7.0), 3), "slider", 2),
        (EncodingExplorer(d_model=16), "slider", 7),
        (ScalingExplorer([8, 64]), "slider", 64),
    ):
        before = bytes(widget.image.value)
        getattr(widget, control).value = value
        assert bytes(widget.image.value) != before and bytes(widget.image.value).startswith(b"\x89PNG")


def test_plot_mask_and_matrix_reject_what_they_cannot_draw():
    from attnedu.plots import plot_mask, plot_matrix

    fig, ax = plt.subplots()
    plot_mask(torch.ones(3, 3, dtype=torch.bool).tril(), ax)
    with pytest.raises(TypeError, match="bool mask"):
        plot_mask(torch.ones(3, 3), ax)
    image = plot_matrix(torch.tensor([[1.0, -2.0], [0.0, 0.5]]), ax)
    assert image.get_clim() == (-2.0, 2.0)  # centred on 0
    with pytest.raises(ValueError, match="2-D"):
        plot_matrix(torch.ones(2, 2, 2), ax)
    plt.close("all")


def test_gpu_throughput_plot_marks_out_of_memory():
    from pathlib import Path

    from matplotlib.figure import Figure

    from attnedu.bench import Benchmark
    from attnedu.bench_gpu import plot_throughput

    gpu = Benchmark.load(Path(__file__).parent.parent / "benchmarks" / "attention_cuda.json")
    axes = plot_throughput(Figure(figsize=(14, 6)), gpu, dtype="bfloat16")
    marked = [(ax.get_title(), t.get_text()) for row in axes for ax in row for t in ax.texts]
    # the one stored OOM, with the longest N that ran (from the stored errors: out of memory at 16384)
    assert marked == [("forward+backward, head_dim 64, causal", "naive: out of memory, ran to N=8192")]
