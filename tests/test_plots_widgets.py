import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import attnedu  # noqa: E402
from attnedu.plots import plot_accuracy_by_length, plot_attention  # noqa: E402
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
    first = stepper.image.value
    stepper.slider.value = 2  # traitlets callbacks run in Python, no browser needed
    assert bytes(stepper.image.value) != bytes(first) and bytes(stepper.image.value).startswith(b"\x89PNG")
    assert repr(stepper) == "AttentionStepper(steps=3, step=2)"
    with pytest.raises(ValueError, match="expected \\(target_len, source_len\\)"):
        AttentionStepper(WEIGHTS, SOURCE[:2], TARGET)


def test_setup_notebook_seeds_and_uses_one_thread():
    attnedu.setup_notebook(seed=3)
    a = torch.rand(3)
    attnedu.setup_notebook(seed=3)
    assert torch.equal(a, torch.rand(3))
    assert torch.get_num_threads() == 1
