import pytest
import torch

from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, make_batch, make_pairs
from attnedu.models import BahdanauDecoder, Encoder, FixedContextDecoder, Seq2Seq


def build(attention=True, bidirectional=False):
    torch.manual_seed(0)
    return Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention, bidirectional, emb_dim=8, hidden_dim=12)


def trained_like(model):
    """Random non-zero v_a, so attention is not uniform (as after training)."""
    with torch.no_grad():
        if model.decoder.attention is not None:
            model.decoder.attention.v_a.normal_()
    return model


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_a_sentence_translates_the_same_alone_or_padded_in_a_batch(attention, bidirectional):
    """Padding must not leak into the summary, the annotations or the attention."""
    model = trained_like(build(attention, bidirectional)).eval()
    short, long = make_pairs(1, 4, 4, seed=0)[0], make_pairs(1, 11, 11, seed=1)[0]
    alone, together = make_batch([short]), make_batch([short, long])
    with torch.no_grad():
        logits_alone, _ = model(alone.src, alone.src_lengths, alone.tgt_in)
        logits_together, _ = model(together.src, together.src_lengths, together.tgt_in)
    steps = alone.tgt_in.shape[1]
    assert torch.allclose(logits_alone[0], logits_together[0, :steps], atol=1e-5)


def test_padded_source_positions_get_exactly_zero_weight():
    model = trained_like(build()).eval()
    batch = make_batch(make_pairs(3, 3, 12, seed=4))
    with torch.no_grad():
        _, weights = model(batch.src, batch.src_lengths, batch.tgt_in)
    for b, n in enumerate(batch.src_lengths.tolist()):
        assert (weights[b, :, n:] == 0).all()
        assert torch.allclose(weights[b].sum(-1), torch.ones(weights.shape[1]))


def test_encoder_summary_is_the_last_real_state():
    encoder = Encoder(len(SOURCE_VOCAB), 8, 12, bidirectional=False)
    batch = make_batch(make_pairs(4, 3, 10, seed=5))
    out = encoder(batch.src, batch.src_lengths)
    for b, n in enumerate(batch.src_lengths.tolist()):
        assert torch.allclose(out.summary[b], out.annotations[b, n - 1], atol=1e-6)
        assert (out.annotations[b, n:] == 0).all()


@pytest.mark.parametrize("attention", [False, True])
def test_forward_equals_stepping_the_decoder_by_hand(attention):
    """Teacher forcing over all steps at once gives what next_step (greedy decoding's step) gives per step."""
    model = trained_like(build(attention)).eval()
    batch = make_batch(make_pairs(2, 5, 8, seed=6))
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
        memory = model.encoder(batch.src, batch.src_lengths)
        cache = model.decoder.start(memory)
        for t in range(batch.tgt_in.shape[1]):
            step_logits, cache, _ = model.decoder.next_step(batch.tgt_in[:, t], cache, memory)
            assert torch.allclose(step_logits, logits[:, t], atol=1e-5)


@pytest.mark.parametrize(
    ("attention", "decoder"), [(False, FixedContextDecoder), (True, BahdanauDecoder), ("bahdanau", BahdanauDecoder)]
)
def test_build_picks_the_decoder(attention, decoder):
    assert type(build(attention).decoder) is decoder


def test_greedy_decode_shapes():
    model = build().eval()
    batch = make_batch(make_pairs(3, 5, 8, seed=7))
    tokens, weights = model.greedy_decode(batch.src, batch.src_lengths, max_len=6)
    assert tokens.shape[0] == 3 and tokens.shape[1] <= 6
    assert weights.shape == (3, tokens.shape[1], batch.src.shape[1])
    assert build(attention=False).greedy_decode(batch.src, batch.src_lengths, max_len=4)[1] is None


def test_mismatched_hidden_sizes_are_named():
    encoder = Encoder(10, 8, 12, bidirectional=True)  # produces 24-dimensional states
    for decoder in (FixedContextDecoder(10, 8, 12, enc_dim=12), BahdanauDecoder(10, 8, 12, enc_dim=12)):
        with pytest.raises(ValueError, match="enc_dim=24"):
            Seq2Seq(encoder, decoder)


def test_bad_batches_get_clear_errors():
    model = build()
    src = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\(batch, src_len\)"):
        model(src[0], torch.tensor([5]), src)
    with pytest.raises(ValueError, match="padded batch is only 5"):
        model(src, torch.tensor([5, 7]), src)
    with pytest.raises(ValueError, match="empty"):
        model(src, torch.tensor([5, 0]), src)
    with pytest.raises(ValueError, match="one length per source sentence"):
        model(src, torch.tensor([5]), src)
