"""attnedu: the small package behind the attention course.

One concept per module:
    runtime    setup_notebook(), the first call of every notebook; progress bars
    data       the toy translation task with gold alignments, vocabularies, batches
    masks      padding masks (True = may attend)
    attention  additive (Bahdanau) score, masked softmax, context vector
    models     GRU encoder-decoder, fixed context or attention
    train      training loop, greedy translation, accuracy by length
    analysis   attention maps, alignment accuracy, crossing rate, gradient paths
    plots      attention heat maps, accuracy-by-length curves
    widgets    interactive controls for JupyterLab
    flash      online softmax and tiled (Flash) attention in PyTorch, forward and backward (lesson 08)
    triton_attention   the FlashAttention-2 forward as a Triton kernel (GPU, or CPU interpreter)
    bench      python -m attnedu.bench: time and memory of naive, tiled, SDPA and Triton attention
    checks     the graded exercises' checks (one module per lesson)
    build_exercises, grade   exercises/ from solutions/; batch grading of submissions
"""

from .runtime import setup_notebook

__all__ = ["setup_notebook"]
__version__ = "0.1.0"
