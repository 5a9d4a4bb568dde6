"""Measure, once, what lesson 11 states about MiniLM's heads but cannot afford to measure in its minute: the drift of
every single-head removal on the lesson's 300 sentences, and attention to [SEP] on pairs of sentences, the input
Clark et al. (2019) gave BERT.

    PYTHONPATH=. python benchmarks/minilm_heads.py        # writes benchmarks/minilm_heads.json (about 2 minutes)

* **Drift.** The lesson removes each of the 72 heads alone on its 12 sentences (``MiniLM.embed_without_each_head``)
  and measures how far each sentence embedding moves, 1 - cos(e, e_ablated), averaged over the sentences. Here the
  same on the 300 sentences of its statistics (``pretrained.text_sentences(300)``), in chunks of similar length
  (a sentence's embedding does not depend on the others in its batch).
* **[SEP] on pairs.** Clark et al. fed BERT two segments, [CLS] A [SEP] B [SEP], with token types 0 and 1; the lesson
  feeds single sentences, [CLS] A [SEP]. Here: 150 pairs of consecutive sentences of the same 300, as pairs
  (``pretrained.encode`` takes (a, b)), and each head's attention to the two [SEP] tokens (``head_scores.attention_to``,
  ``head_scores.per_head``), with the uniform baseline (weights spread evenly over each pair's real tokens).

The lesson reads the file with ``pretrained.head_record()``; ``tests/test_pretrained.py`` measures parts of it again
and compares. Re-run it when the model, the sentences (they vary a little with the Python version) or the encoder
change.
"""

from __future__ import annotations

import datetime
import json
import platform

import torch

from attnedu import head_scores, pretrained, setup_notebook

sentences_digest = pretrained.sentences_digest  # the sha256 of the sentences, one per line (the lesson compares it)


def drift_per_head(minilm, sentences, chunk: int = 50) -> torch.Tensor:
    """(layers, heads): the mean over ``sentences`` of 1 - cos(e, e without that head), as the lesson computes it."""
    order = sorted(range(len(sentences)), key=lambda i: len(minilm.tokenizer.encode(sentences[i]).ids))
    moved = torch.zeros(minilm.config.num_layers, minilm.config.num_heads)
    for start in range(0, len(order), chunk):
        part = [sentences[i] for i in order[start : start + chunk]]
        intact = minilm.embed(part)
        alone = minilm.embed_without_each_head(part)  # (layers, heads, n, d_model)
        moved += (1 - (alone * intact).sum(-1)).sum(-1)
    return moved / len(sentences)


def sep_on_pairs(minilm, pairs) -> tuple[torch.Tensor, float]:
    """(layers, heads) attention to the two [SEP] tokens, over every real query of the pairs; the uniform baseline."""
    encoded, attention = minilm.attention(pairs)
    real = encoded.real
    sep = encoded.ids == minilm.tokenizer.token_to_id("[SEP]")
    grid = torch.stack([head_scores.per_head(head_scores.attention_to(w, sep, real), real) for w in attention])
    length = real.shape[1]
    uniform = (real[:, None, None, :] / real.sum(1)[:, None, None, None]).expand(-1, 1, length, length)
    return grid, head_scores.per_head(head_scores.attention_to(uniform, sep, real), real).item()


def main() -> None:
    setup_notebook(seed=0)  # one thread here; MiniLM's own calls run two batches at once
    minilm = pretrained.load_minilm()
    sentences = pretrained.text_sentences(300)
    drift = drift_per_head(minilm, sentences)
    pairs = [(sentences[2 * k], sentences[2 * k + 1]) for k in range(len(sentences) // 2)]
    sep, uniform = sep_on_pairs(minilm, pairs)
    record = {
        "made_by": "benchmarks/minilm_heads.py",
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "package": f"{pretrained.DISTRIBUTION} {pretrained.VERSION}",
        "sentences": len(sentences),
        "sentences_sha256": sentences_digest(sentences),
        "first_sentence": sentences[0],
        "drift": [[round(v, 7) for v in row] for row in drift.tolist()],
        "pairs": len(pairs),
        "sep_on_pairs": [[round(v, 6) for v in row] for row in sep.tolist()],
        "sep_on_pairs_uniform": round(uniform, 6),
    }
    pretrained.HEAD_RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    layer, head = divmod(int(drift.argmax()), drift.shape[1])
    best = divmod(int(sep.argmax()), sep.shape[1])
    print(f"drift: median {drift.median():.4f}, largest {drift.max():.4f} (layer {layer}, head {head}); [SEP] on "
          f"pairs: best layer {best[0]} head {best[1]} {sep.max():.3f}, uniform {uniform:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
