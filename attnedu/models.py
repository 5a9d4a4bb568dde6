"""GRU encoder-decoders: one fixed context vector (Cho et al. 2014) or additive attention
(Bahdanau et al. 2015). Both use the same encoder and decoder; only the context differs:

    fixed:      c_t = c = summary of the whole source, the same at every step
    attention:  c_t = sum_j alpha_tj h_j, rebuilt from s_{t-1} at every step

Decoder update, for both:  s_t = GRU([E y_{t-1}; c_t], s_{t-1})
Output, for both:          p(y_t) = softmax(W_o [s_t; c_t; E y_{t-1}])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._validate import check_size, check_tensor
from .attention import AdditiveAttention
from .data import BOS_ID, EOS_ID, PAD_ID
from .masks import padding_mask


@dataclass
class EncoderOutput:
    """annotations (batch, src_len, enc_dim): h_j for every source position
    summary     (batch, enc_dim): the fixed vector (last state; both directions' last if bidirectional)
    mask        (batch, src_len): True at real source tokens
    """

    annotations: torch.Tensor
    summary: torch.Tensor
    mask: torch.Tensor


class Encoder(nn.Module):
    """Embedding + GRU over the source. Padding never reaches the summary (packed sequences)."""

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, bidirectional: bool):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.rnn = nn.GRU(emb_dim, hidden_dim, batch_first=True, bidirectional=bidirectional)
        self.output_dim = hidden_dim * (2 if bidirectional else 1)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        """src: (batch, src_len) ids, src_lengths: (batch,) -> EncoderOutput."""
        check_tensor("src", src, 2, "(batch, src_len) of token ids")
        check_tensor("src_lengths", src_lengths, 1, "(batch,)")
        check_size("src_lengths", src_lengths, 0, src.shape[0], "one length per source sentence")
        mask = padding_mask(src_lengths, src.shape[1])  # also rejects empty or too-long lengths
        embedded = self.embedding(src)
        if bool(mask.all()):  # no padding: run the GRU directly (packing costs time)
            annotations, h_n = self.rnn(embedded)
        else:
            packed = pack_padded_sequence(embedded, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, h_n = self.rnn(packed)
            annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        # h_n: (directions, batch, hidden); forward's last real step, and backward's (at position 0)
        summary = torch.cat(list(h_n), dim=-1)
        return EncoderOutput(annotations, summary, mask)


class Decoder(nn.Module):
    """GRU decoder. With ``attention=False`` its context is the encoder summary at every step."""

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, enc_dim: int, attention: bool):
        super().__init__()
        self.enc_dim, self.hidden_dim = enc_dim, hidden_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.init_state = nn.Linear(enc_dim, hidden_dim)  # s_0 = tanh(W_s summary)
        self.attention = AdditiveAttention(hidden_dim, enc_dim, attn_dim=hidden_dim) if attention else None
        self.cell = nn.GRUCell(emb_dim + enc_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim + enc_dim + emb_dim, vocab_size)

    def start(self, memory: EncoderOutput) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Initial state s_0 (batch, hidden_dim), and U_a h_j precomputed once (or None)."""
        state = torch.tanh(self.init_state(memory.summary))
        keys = self.attention.project_keys(memory.annotations) if self.attention is not None else None
        return state, keys

    def advance(
        self,
        embedded: torch.Tensor,
        state: torch.Tensor,
        memory: EncoderOutput,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """c_t from s_{t-1}, then s_t = GRU([E y_{t-1}; c_t], s_{t-1}).

        embedded: (batch, emb_dim) E y_{t-1};  state: (batch, hidden_dim) s_{t-1}
        returns s_t (batch, hidden_dim), c_t (batch, enc_dim), alpha_t (batch, src_len) or None
        """
        if self.attention is None:
            context, weights = memory.summary, None
        else:
            context, weights = self.attention(state, memory.annotations, memory.mask, projected_keys)
        new_state = self.cell(torch.cat([embedded, context], dim=-1), state)
        return new_state, context, weights

    def readout(self, state: torch.Tensor, context: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """Logits over the target vocabulary from [s_t; c_t; E y_{t-1}] (any leading dims)."""
        return self.out(torch.cat([state, context, embedded], dim=-1))

    def step(
        self,
        prev_tokens: torch.Tensor,
        state: torch.Tensor,
        memory: EncoderOutput,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One whole decoder step.

        prev_tokens: (batch,) y_{t-1};  state: (batch, hidden_dim) s_{t-1}
        returns logits (batch, vocab), s_t (batch, hidden_dim), alpha_t (batch, src_len) or None
        """
        embedded = self.embedding(prev_tokens)
        new_state, context, weights = self.advance(embedded, state, memory, projected_keys)
        return self.readout(new_state, context, embedded), new_state, weights


class Seq2Seq(nn.Module):
    """Encoder + decoder. ``Seq2Seq.build(attention=...)`` makes the models of lessons 01 and 02."""

    def __init__(self, encoder: Encoder, decoder: Decoder):
        super().__init__()
        if decoder.enc_dim != encoder.output_dim:
            raise ValueError(
                f"the decoder expects encoder vectors of size {decoder.enc_dim} but the encoder produces "
                f"{encoder.output_dim} (hidden_dim x directions); build the decoder with "
                f"enc_dim={encoder.output_dim}"
            )
        self.encoder, self.decoder = encoder, decoder

    @classmethod
    def build(
        cls,
        src_vocab_size: int,
        tgt_vocab_size: int,
        attention: bool,
        bidirectional: bool,
        emb_dim: int = 32,
        hidden_dim: int = 64,
    ) -> Seq2Seq:
        encoder = Encoder(src_vocab_size, emb_dim, hidden_dim, bidirectional)
        decoder = Decoder(tgt_vocab_size, emb_dim, hidden_dim, encoder.output_dim, attention)
        return cls(encoder, decoder)

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing. src (batch, src_len), tgt_in (batch, tgt_len)
        -> logits (batch, tgt_len, vocab), attention weights (batch, tgt_len, src_len) or None."""
        check_tensor("src", src, 2, "(batch, src_len) of token ids")
        check_tensor("tgt_in", tgt_in, 2, "(batch, tgt_len) of token ids")
        check_size("tgt_in", tgt_in, 0, src.shape[0], "the batch size of src")
        memory = self.encoder(src, src_lengths)
        state, keys = self.decoder.start(memory)
        embedded = self.decoder.embedding(tgt_in)  # (batch, tgt_len, emb_dim), all steps at once
        states, contexts, all_weights = [], [], []
        for t in range(tgt_in.shape[1]):
            state, context, weights = self.decoder.advance(embedded[:, t], state, memory, keys)
            states.append(state)
            contexts.append(context)
            all_weights.append(weights)
        # The readout needs no recurrence, so it runs once over all steps (same as step() per step).
        logits = self.decoder.readout(torch.stack(states, 1), torch.stack(contexts, 1), embedded)
        weights = torch.stack(all_weights, dim=1) if self.decoder.attention is not None else None
        return logits, weights

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed back the most likely word each step.
        -> tokens (batch, steps), weights (batch, steps, src_len) or None; steps <= max_len."""
        memory = self.encoder(src, src_lengths)
        state, keys = self.decoder.start(memory)
        prev = torch.full((src.shape[0],), BOS_ID, dtype=torch.long)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        tokens, all_weights = [], []
        for _ in range(max_len):
            logits, state, weights = self.decoder.step(prev, state, memory, keys)
            prev = logits.argmax(dim=-1).masked_fill(done, PAD_ID)
            tokens.append(prev)
            all_weights.append(weights)
            done |= prev == EOS_ID
            if bool(done.all()):
                break
        weights = torch.stack(all_weights, dim=1) if self.decoder.attention is not None else None
        return torch.stack(tokens, dim=1), weights


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
