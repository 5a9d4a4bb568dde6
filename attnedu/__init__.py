"""attnedu: the small package behind the attention course.

One concept per module; a lesson's library code lives in the module its concept names (CONTRIBUTING.md):
    runtime            setup_notebook(), the first call of every notebook; seeds, threads, progress bars
    data               the toy translation task with gold alignments, vocabularies, batches (lessons 01-03)
    tasks              synthetic sequence tasks (05-07, 11); a character corpus with a bigram baseline (06-09)
    masks              every mask (True = may attend): padding, causal, windows, prefix LM; converters (06)
    attention          scores (additive, dot, general, concat, location), masked softmax, scaled dot-product (02-04)
    multihead          split and merge heads, multi-head and grouped-query attention; MultiHeadAttention, which
                       every model attends through (05)
    positional         sinusoidal, learned, RoPE, ALiBi (07)
    models             GRU encoder-decoders: fixed context, Bahdanau, Luong (01-03)
    transformer        small attention models of lessons 04-07 and their training experiments; parameter counts
    block_parts        the parts of today's block: RMSNorm, SwiGLU, QK-norm (09)
    blocks             the Transformer blocks (post-norm, cross-attention, pre-norm), a decoder-only LM (09, 10)
    init_gradients     post-norm against pre-norm stacks: the gradients at initialisation (09)
    bert, attention_only   BERT's encoder; an attention-only LM, where induction heads form (11)
    kv_cache           KV caches: full, preallocated, paged, rolling window, sinks; a chunk and a rolling step (10)
    decoding           a DecoderLM run through a cache: cached forward, greedy generation, streaming losses (10)
    kv_sharing         GQA on heads, MHA -> GQA pooling, multi-head latent attention (MLA) (10)
    cache_sizes        a cache's bytes and a decoding step's reads and multiply-adds; published configurations (10)
    flex_masks         the mask ladder as FlexAttention mask_mods, eager FlexAttention on the CPU, block maps (10)
    linear_attention   linear attention, its feature map, the causal running sums (10)
    train              training loop, greedy translation, accuracy by length; training and scoring a language model
    analysis           attention maps, alignment accuracy, crossing rate, gradient paths
    head_scores        what heads do, measured: Clark et al.'s statistics, prefix matching, head gates (11)
    induction          induction heads trained live: the phase change, head scores over training, ablation (11)
    pretrained         a pretrained BERT (all-MiniLM-L6-v2) read offline from its package into BertEncoder (11)
    flash              online softmax, tiles, tiled (Flash) attention in PyTorch, forward and backward (08a, 08b)
    triton_attention   FlashAttention-2, forward and backward, as Triton kernels (GPU, or CPU interpreter) (08a, 08b)
    triton_inspect     those kernels read without a GPU: compiled for an H100 on the CPU (registers, spills, wgmma,
                       TMA), their matrix products per tile counted, their lines as the lessons print them (08a, 08b)
    triton_basics      small Triton kernels run on the CPU under the interpreter, memory-checked: lesson 08's practice
    context_parallel   attention across processes (torch.distributed, gloo): a launcher, ring attention and
                       all-to-all (Ulysses) attention, forward and backward, contiguous and zigzag layouts, score
                       blocks per rank, bytes sent by formula and counted, time per rank, memory per device, an
                       alpha-beta model of scaling, PyTorch's own context_parallel tried (12)
    sinks_gates        softmax with a sink logit per head (gpt-oss), the output gate (Qiu et al.), SinkGateAttention;
                       first-token attention mass, largest activations; the marker task (13a)
    sparse_attention   sparse selection: MoBA block top-k, DeepSeek's indexer top-k, a sliding window, with the
                       scores and K/V bytes counted; the retrieval task (13b)
    delta_rule         the additive memory, the (gated) delta rule recurrent and chunked, the recall task (13b)
    bench, bench_gpu   python -m attnedu.bench: time and memory of naive, tiled, SDPA and Triton attention;
                       bench_gpu holds the GPU suite of make gpu-bench (08); measurements, below both, the
                       methods compared and the records they produce; bench_report, their tables, figure and files
    plots, diagrams    attention heat maps and other figures; the diagram of each lesson's model (diagrams/: one
                       module per group of lessons)
    widgets            interactive controls for JupyterLab
    checks             the graded exercises: one module per lesson (lessonNN.py) and the machinery that checks them
    build_exercises    exercises/ generated from solutions/
    grade, grading     python -m attnedu.grade: batch grading of submissions in a sandbox
    _validate          the input checks every public function uses, one form of error message;
                       _validate_attention, _validate_flash, _validate_pretrained, _validate_kv_cache,
                       _validate_induction: those modules' own checks
    _triton_memory     triton_basics' memory check: every address a learner's kernel touches, checked
"""

from .runtime import setup_notebook

__all__ = ["setup_notebook"]
__version__ = "0.1.0"
