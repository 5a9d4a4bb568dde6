"""GRU encoder-decoders: one fixed context vector (Cho et al. 2014a), Bahdanau's additive attention
(Bahdanau et al. 2015), and Luong's global attention (Luong et al. 2015). All share the encoder.

FixedContextDecoder (lesson 01) and BahdanauDecoder (lesson 02) differ only in the context c_t:

    FixedContextDecoder:  c_t = c = summary of the whole source, the same at every step
    BahdanauDecoder:      c_t = sum_j alpha_tj h_j, rebuilt from s_{t-1} at every step
    update (both):        s_t = GRU([E y_{t-1}; c_t], s_{t-1})
    output (both):        p(y_t) = softmax(W_o [s_t; c_t; E y_{t-1}])

The fixed decoder's input [E y_{t-1}; c] never depends on its own state, so with teacher forcing
(the gold y_{t-1} known in advance) every step runs in one nn.GRU call. The Bahdanau decoder needs
s_{t-1} to compute c_t, so it steps one nn.GRUCell at a time.

LuongDecoder (lesson 03): attention is computed from the state *after* the update (Luong et al. write
the decoder state h_t and the encoder's h-bar_s; the course keeps s_t for the decoder and h_j for the encoder),

    update:     s_t = GRU([E y_{t-1}; s~_{t-1} if input feeding], s_{t-1})
    attention:  a_t = softmax(score(s_t, h_j)),  c_t = sum_j a_tj h_j
    attentional hidden state:  s~_t = tanh(W_c [c_t; s_t])
    output:     p(y_t) = softmax(W_s s~_t)

Without input feeding the recurrence never sees the attention, so teacher forcing runs the GRU over
the whole target in one call and attends for every step in one batched product. Lesson 03's ablation,
``attend_from="previous"``, asks with s_{t-1} instead (the state before it reads y_{t-1}, as Bahdanau's
decoder asks) and changes nothing else.

Every decoder offers the same three methods to ``Seq2Seq``: ``forward(tgt_in, memory)`` (teacher
forcing, all steps), ``start(memory)`` and ``next_step(prev_tokens, cache, memory)`` (greedy decoding),
where the cache is what one step hands the next: s_{t-1} for the fixed decoder, (s_{t-1}, U_a h_j) for
Bahdanau's, (s_{t-1}, s~_{t-1}) for Luong's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._validate import (
    check_bool,
    check_choice,
    check_ids,
    check_instance,
    check_positive_int,
    check_size,
    check_tensor,
    describe,
)
from .attention import LUONG_SCORES, AdditiveAttention, LuongAttention
from .data import BOS_ID, EOS_ID, PAD_ID
from .masks import _check_padding_mask, _padding_mask
from .runtime import seeded


@dataclass
class EncoderOutput:
    """annotations (batch, src_len, enc_dim): h_j for every source position
    summary     (batch, enc_dim): the fixed vector (last state; both directions' last if bidirectional)
    mask        (batch, src_len): True at real source tokens; None when no sentence is padded
                (attention then needs no masking, which saves time in training, where batches are unpadded)
    """

    annotations: torch.Tensor
    summary: torch.Tensor
    mask: torch.Tensor | None


class Encoder(nn.Module):
    """Embedding + GRU over the source. Padding never reaches the summary (packed sequences)."""

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, bidirectional: bool):
        super().__init__()
        _check_sizes(vocab_size=vocab_size, emb_dim=emb_dim, hidden_dim=hidden_dim)
        check_bool("bidirectional", bidirectional, "whether a second GRU reads the source backwards")
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.rnn = nn.GRU(emb_dim, hidden_dim, batch_first=True, bidirectional=bidirectional)
        self.output_dim = hidden_dim * (2 if bidirectional else 1)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        """src: (batch, src_len) ids, src_lengths: (batch,) -> EncoderOutput."""
        _check_source(self, src, src_lengths)
        mask = _padding_mask(src_lengths, src.shape[1])
        embedded = self.embedding(src)
        if bool(mask.all()):  # no padding: run the GRU directly (packing costs time)
            annotations, h_n = self.rnn(embedded)
        else:
            packed = pack_padded_sequence(embedded, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, h_n = self.rnn(packed)
            annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        # h_n: (directions, batch, hidden); forward's last real step, and backward's (at position 0)
        summary = torch.cat(list(h_n), dim=-1)
        return EncoderOutput(annotations, summary, None if bool(mask.all()) else mask)


class FixedContextDecoder(nn.Module):
    """Cho et al.'s GRU decoder (lesson 01): the context is the encoder summary c at every step.

    s_{-1} = tanh(W_s c);  s_t = GRU([E y_{t-1}; c], s_{t-1});  p(y_t) = softmax(W_o [s_t; c; E y_{t-1}])
    (steps count from 0: s_{-1} is the state before step 0, y_{-1} the start token)

    Its input [E y_{t-1}; c] never depends on its own state, so with teacher forcing (the gold y_{t-1}
    known in advance) one ``nn.GRU`` call (``self.rnn``) runs every step at once.
    """

    attention = None  # no attention: Seq2Seq.forward and greedy_decode return no weights

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, enc_dim: int):
        super().__init__()
        _check_sizes(vocab_size=vocab_size, emb_dim=emb_dim, hidden_dim=hidden_dim, enc_dim=enc_dim)
        self.enc_dim, self.hidden_dim = enc_dim, hidden_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.init_state = nn.Linear(enc_dim, hidden_dim)  # s_{-1} = tanh(W_s c)
        self.rnn = nn.GRU(emb_dim + enc_dim, hidden_dim, batch_first=True)
        self.out = nn.Linear(hidden_dim + enc_dim + emb_dim, vocab_size)  # W_o

    def forward(self, tgt_in: torch.Tensor, memory: EncoderOutput) -> tuple[torch.Tensor, None]:
        """Teacher forcing over the whole target: tgt_in (batch, tgt_len) ids
        -> logits (batch, tgt_len, vocab), None (no attention weights)."""
        _check_tgt_in(tgt_in, self.embedding.num_embeddings, memory)
        return self._forward(tgt_in, memory)

    def _forward(self, tgt_in: torch.Tensor, memory: EncoderOutput) -> tuple[torch.Tensor, None]:
        state = torch.tanh(self.init_state(memory.summary))  # start(memory)
        embedded = self.embedding(tgt_in)  # (batch, tgt_len, emb_dim), all steps at once
        context = memory.summary[:, None, :].expand(-1, tgt_in.shape[1], -1)  # the same c at every step
        states, _ = self.rnn(torch.cat([embedded, context], dim=-1), state[None])  # every s_t, one call
        return self.out(torch.cat([states, context, embedded], dim=-1)), None

    def start(self, memory: EncoderOutput) -> torch.Tensor:
        """s_{-1} = tanh(W_s c): (batch, hidden_dim), the state greedy decoding starts from."""
        _check_memory(memory)
        return torch.tanh(self.init_state(memory.summary))

    def next_step(
        self, prev_tokens: torch.Tensor, state: torch.Tensor, memory: EncoderOutput
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        """One step of greedy decoding. prev_tokens: (batch,) y_{t-1}; state: (batch, hidden_dim) s_{t-1},
        from start() or the last call -> logits (batch, vocab), s_t (batch, hidden_dim), None."""
        check_ids("prev_tokens", prev_tokens, self.embedding.num_embeddings, 1, "(batch,) of token ids")
        _check_memory(memory)
        _check_state("state", state, memory)
        check_size("prev_tokens", prev_tokens, 0, state.shape[0], "the batch size of state")
        embedded, context = self.embedding(prev_tokens), memory.summary  # E y_{t-1}, c
        _, new_state = self.rnn(torch.cat([embedded, context], dim=-1)[:, None], state[None])  # one GRU step
        new_state = new_state[0]
        return self.out(torch.cat([new_state, context, embedded], dim=-1)), new_state, None


class BahdanauDecoder(nn.Module):
    """Bahdanau et al.'s GRU decoder with additive attention (lesson 02), in their order: the context
    for step t comes from the previous state s_{t-1}, before the update.

    s_{-1} = tanh(W_s c);  c_t, alpha_t = attention(s_{t-1}, h);  s_t = GRU([E y_{t-1}; c_t], s_{t-1});
    p(y_t) = softmax(W_o [s_t; c_t; E y_{t-1}])

    c_t needs s_{t-1} and s_t needs c_t, so even with teacher forcing it steps one ``nn.GRUCell``
    (``self.cell``) at a time. A step is ``advance`` (attend, then update) and ``readout``; ``forward``
    runs the readout once over all steps, ``next_step`` once per step.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, enc_dim: int, attn_dim: int = 64):
        super().__init__()
        _check_sizes(vocab_size=vocab_size, emb_dim=emb_dim, hidden_dim=hidden_dim, enc_dim=enc_dim,
                     attn_dim=attn_dim)  # fmt: skip
        self.enc_dim, self.hidden_dim = enc_dim, hidden_dim
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.init_state = nn.Linear(enc_dim, hidden_dim)  # s_{-1} = tanh(W_s c)
        self.attention = AdditiveAttention(hidden_dim, enc_dim, attn_dim=attn_dim)  # W_a, U_a, v_a
        self.cell = nn.GRUCell(emb_dim + enc_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim + enc_dim + emb_dim, vocab_size)  # W_o

    def forward(self, tgt_in: torch.Tensor, memory: EncoderOutput) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing over the whole target: tgt_in (batch, tgt_len) ids
        -> logits (batch, tgt_len, vocab), weights (batch, tgt_len, src_len)."""
        _check_tgt_in(tgt_in, self.embedding.num_embeddings, memory)
        return self._forward(tgt_in, memory, self.advance)  # a caller's memory: every step checked

    def _forward(self, tgt_in: torch.Tensor, memory: EncoderOutput, advance=None):
        """forward with ``advance`` (by default unchecked: Seq2Seq's memory comes from its encoder). ``start`` checks
        the annotations once."""
        state, keys = self.start(memory)
        embedded = self.embedding(tgt_in)  # (batch, tgt_len, emb_dim), all steps at once
        states, contexts, all_weights = [], [], []
        for t in range(tgt_in.shape[1]):
            state, context, weights = (advance or self._advance)(embedded[:, t], state, memory, keys)
            states.append(state)
            contexts.append(context)
            all_weights.append(weights)
        # The readout needs no recurrence, so it runs once over all steps (as next_step does per step).
        logits = self.readout(torch.stack(states, 1), torch.stack(contexts, 1), embedded)
        return logits, torch.stack(all_weights, dim=1)

    def start(self, memory: EncoderOutput) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache greedy decoding starts from: s_{-1} (batch, hidden_dim), and U_a h_j (batch, src_len,
        attn_dim), which does not depend on the step, so it is computed once per sentence."""
        _check_memory(memory)
        state = torch.tanh(self.init_state(memory.summary))
        return state, self.attention.project_keys(memory.annotations)

    def next_step(
        self, prev_tokens: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor], memory: EncoderOutput
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """One step of greedy decoding. prev_tokens: (batch,) y_{t-1}; cache: (s_{t-1}, U_a h_j), from
        start() or the last call -> logits (batch, vocab), (s_t, U_a h_j), alpha_t (batch, src_len)."""
        _check_bahdanau_step(self, prev_tokens, cache)
        state, keys = cache
        embedded = self.embedding(prev_tokens)
        new_state, context, weights = self.advance(embedded, state, memory, keys)
        return self.readout(new_state, context, embedded), (new_state, keys), weights

    def advance(
        self,
        embedded: torch.Tensor,
        state: torch.Tensor,
        memory: EncoderOutput,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """c_t, alpha_t = attention(s_{t-1}, h), then s_t = GRU([E y_{t-1}; c_t], s_{t-1}).

        embedded: (batch, emb_dim) E y_{t-1};  state: (batch, hidden_dim) s_{t-1};
        projected_keys: U_a h_j from start() (None: computed here)
        returns s_t (batch, hidden_dim), c_t (batch, enc_dim), alpha_t (batch, src_len)
        """
        _check_advance(embedded, state, memory)
        # self may be any object with attention and cell (lesson 02's check passes the learner's): the public forward
        context, weights = self.attention(state, memory.annotations, memory.mask, projected_keys)
        new_state = self.cell(torch.cat([embedded, context], dim=-1), state)
        return new_state, context, weights

    def _advance(self, embedded, state, memory, projected_keys):
        """advance on inputs already checked, with this decoder's own AdditiveAttention."""
        context, weights = self.attention._attend(state, memory.annotations, memory.mask, projected_keys)
        new_state = self.cell(torch.cat([embedded, context], dim=-1), state)
        return new_state, context, weights

    def readout(self, state: torch.Tensor, context: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """Logits W_o [s_t; c_t; E y_{t-1}] over the target vocabulary (any leading dims: one step or all)."""
        return self.out(torch.cat([state, context, embedded], dim=-1))


LUONG_QUERIES = ("updated", "previous")


class LuongDecoder(nn.Module):
    """Luong et al.'s decoder with global attention (score ``dot``, ``general``, ``concat`` or ``location``).

    s_t = GRU(input, s_{t-1}) with input [E y_{t-1}] or, with input feeding, [E y_{t-1}; s~_{t-1}];
    c_t from a_t = softmax(score(q_t, h_j)); s~_t = tanh(W_c [c_t; s_t]); p(y_t) = softmax(W_s s~_t).
    The query q_t is the updated state s_t (``attend_from="updated"``, Luong's order), or, for lesson 03's
    ablation, the previous state s_{t-1} (``attend_from="previous"``: the state that has not read y_{t-1} yet,
    the one Bahdanau's decoder asks with); everything else is the same.
    The state before step 0 is s_{-1} = tanh(W_s0 c), from the encoder summary, as in lessons 01-02.
    """

    def __init__(
        self,
        vocab_size: int,
        emb_dim: int,
        hidden_dim: int,
        enc_dim: int,
        score: str,
        input_feeding: bool = False,
        attn_dim: int = 64,
        max_src_len: int = 20,
        attend_from: str = "updated",
    ):
        super().__init__()
        check_choice("score", score, LUONG_SCORES)
        check_choice("attend_from", attend_from, LUONG_QUERIES)
        _check_sizes(vocab_size=vocab_size, emb_dim=emb_dim, hidden_dim=hidden_dim, enc_dim=enc_dim)
        check_bool("input_feeding", input_feeding, "whether s~_{t-1} is fed back")
        self.enc_dim, self.hidden_dim, self.input_feeding = enc_dim, hidden_dim, input_feeding
        self.attend_from = attend_from
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.init_state = nn.Linear(enc_dim, hidden_dim)
        self.rnn = nn.GRU(emb_dim + (hidden_dim if input_feeding else 0), hidden_dim, batch_first=True)
        self.attention = LuongAttention(score, hidden_dim, enc_dim, attn_dim, max_src_len)
        self.combine = nn.Linear(enc_dim + hidden_dim, hidden_dim, bias=False)  # W_c
        self.out = nn.Linear(hidden_dim, vocab_size)  # W_s

    def attend(
        self, states: torch.Tensor, memory: EncoderOutput, queries: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """states s_t (batch, steps, hidden) -> logits (batch, steps, vocab), s~_t (batch, steps, hidden),
        weights (batch, steps, src_len): attention for all the given steps in one batched product. ``queries``
        (the same shape as ``states``) ask in place of the states if given (the ablation's s_{t-1})."""
        context, weights = self.attention(states if queries is None else queries, memory.annotations, memory.mask)
        attentional = torch.tanh(self.combine(torch.cat([context, states], dim=-1)))
        return self.out(attentional), attentional, weights

    def forward(
        self, tgt_in: torch.Tensor, memory: EncoderOutput, stepwise: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: tgt_in (batch, tgt_len) -> logits (batch, tgt_len, vocab), weights (batch, tgt_len,
        src_len).

        Without input feeding (and unless ``stepwise``), the GRU runs over the whole target in one call and
        attention for every step is one batched product; otherwise one step at a time. Both compute the same.
        """
        _check_tgt_in(tgt_in, self.embedding.num_embeddings, memory)
        check_bool("stepwise", stepwise, "whether to step one word at a time")
        return self._forward(tgt_in, memory, stepwise)

    def _forward(self, tgt_in: torch.Tensor, memory: EncoderOutput, stepwise: bool = False):
        embedded = self.embedding(tgt_in)
        state = torch.tanh(self.init_state(memory.summary))
        if not (self.input_feeding or stepwise):
            states, _ = self.rnn(embedded, state[None])  # (batch, tgt_len, hidden): every s_t, one call
            queries = None
            if self.attend_from == "previous":  # s_{-1}, s_0, ..., s_{T-2}: every state one step earlier
                queries = torch.cat([state[:, None], states[:, :-1]], dim=1)
            logits, _, weights = self.attend(states, memory, queries)
            return logits, weights
        cache = (state, torch.zeros_like(state))  # s~_{-1} = 0: nothing attended yet
        all_logits, all_weights = [], []
        for t in range(tgt_in.shape[1]):
            logits, cache, weights = self._step(embedded[:, t], cache, memory)
            all_logits.append(logits)
            all_weights.append(weights)
        return torch.stack(all_logits, dim=1), torch.stack(all_weights, dim=1)

    def _step(self, embedded: torch.Tensor, cache, memory: EncoderOutput):
        state, attentional = cache
        rnn_input = torch.cat([embedded, attentional], dim=-1) if self.input_feeding else embedded
        _, new_state = self.rnn(rnn_input[:, None], state[None])
        query = state[:, None] if self.attend_from == "previous" else None
        logits, new_attentional, weights = self.attend(new_state[0][:, None], memory, query)
        return logits[:, 0], (new_state[0], new_attentional[:, 0]), weights[:, 0]

    def start(self, memory: EncoderOutput):
        """(s_{-1}, s~_{-1} = 0) for greedy decoding."""
        _check_memory(memory)
        state = torch.tanh(self.init_state(memory.summary))
        return state, torch.zeros_like(state)

    def next_step(self, prev_tokens: torch.Tensor, cache, memory: EncoderOutput):
        """One step of greedy decoding: cache is (s_{t-1}, s~_{t-1})."""
        check_ids("prev_tokens", prev_tokens, self.embedding.num_embeddings, 1, "(batch,) of token ids")
        _check_memory(memory)
        return self._step(self.embedding(prev_tokens), cache, memory)


class Seq2Seq(nn.Module):
    """Encoder + decoder. ``Seq2Seq.build(attention=...)`` makes the models of lessons 01-03:
    ``False`` (a FixedContextDecoder), ``True`` or ``"bahdanau"`` (a BahdanauDecoder: additive attention),
    or a Luong score (``"dot"``, ``"general"``, ``"concat"``, ``"location"``: a LuongDecoder)."""

    def __init__(self, encoder: Encoder, decoder: nn.Module):
        super().__init__()
        check_instance("encoder", encoder, Encoder, "an Encoder")
        check_instance(
            "decoder", decoder, (FixedContextDecoder, BahdanauDecoder, LuongDecoder),
            "a FixedContextDecoder, BahdanauDecoder or LuongDecoder",
        )  # fmt: skip
        if decoder.enc_dim != encoder.output_dim:
            raise ValueError(
                f"decoder.enc_dim should be the encoder's output size {encoder.output_dim}, got {decoder.enc_dim}: "
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
        attention: bool | str,
        bidirectional: bool,
        emb_dim: int = 32,
        hidden_dim: int = 64,
        attn_dim: int = 64,
        input_feeding: bool = False,
        max_src_len: int = 20,
        seed: int = 0,
        attend_from: str = "updated",
    ) -> Seq2Seq:
        """A new model whose initial weights come from ``seed`` alone (see ``attnedu.runtime.seeded``).
        ``attend_from`` applies to a Luong score only: ``"previous"`` builds lesson 03's ablation."""
        check_choice("attention", attention, (False, True, "bahdanau", *LUONG_SCORES))
        check_bool("bidirectional", bidirectional, "whether a second GRU reads the source backwards")
        check_bool("input_feeding", input_feeding, "whether s~_{t-1} is fed back")
        check_choice("attend_from", attend_from, LUONG_QUERIES)
        _check_sizes(attn_dim=attn_dim)
        with seeded(seed):
            encoder = Encoder(src_vocab_size, emb_dim, hidden_dim, bidirectional)
            if attention in LUONG_SCORES:
                decoder = LuongDecoder(
                    tgt_vocab_size, emb_dim, hidden_dim, encoder.output_dim, attention, input_feeding, attn_dim,
                    max_src_len, attend_from,
                )  # fmt: skip
            else:
                if attend_from != "updated":
                    raise ValueError(
                        f"attention should be a Luong score {LUONG_SCORES} with attend_from={attend_from!r}, got "
                        f"{attention!r}: the choice of query state is part of Luong's decoder (Bahdanau's always "
                        "asks with s_{t-1}); use a Luong score for attention"
                    )
                if input_feeding:
                    raise ValueError(
                        f"attention should be a Luong score {LUONG_SCORES} with input_feeding=True, got "
                        f"{attention!r}: input feeding is part of Luong's decoder: use a Luong score for attention"
                    )
                if attention is False:
                    decoder = FixedContextDecoder(tgt_vocab_size, emb_dim, hidden_dim, encoder.output_dim)
                else:  # True or "bahdanau"
                    decoder = BahdanauDecoder(tgt_vocab_size, emb_dim, hidden_dim, encoder.output_dim, attn_dim)
        return cls(encoder, decoder)

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing. src (batch, src_len), tgt_in (batch, tgt_len)
        -> logits (batch, tgt_len, vocab), attention weights (batch, tgt_len, src_len) or None."""
        _check_forward(self, src, tgt_in)
        memory = self.encoder(src, src_lengths)  # checks src and src_lengths
        return self.decoder._forward(tgt_in, memory)  # tgt_in checked above, memory made by the encoder

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed back the most likely word each step.
        -> tokens (batch, steps), weights (batch, steps, src_len) or None; steps <= max_len."""
        max_len = check_positive_int("max_len", max_len, "the most words to write")
        memory = self.encoder(src, src_lengths)
        cache = self.decoder.start(memory)
        prev = torch.full((src.shape[0],), BOS_ID, dtype=torch.long)
        done = torch.zeros(src.shape[0], dtype=torch.bool)
        tokens, all_weights = [], []
        for _ in range(max_len):
            logits, cache, weights = self.decoder.next_step(prev, cache, memory)
            prev = logits.argmax(dim=-1).masked_fill(done, PAD_ID)
            tokens.append(prev)
            all_weights.append(weights)
            done |= prev == EOS_ID
            if bool(done.all()):
                break
        weights = torch.stack(all_weights, dim=1) if all_weights[0] is not None else None
        return torch.stack(tokens, dim=1), weights


def count_parameters(model: nn.Module) -> int:
    check_instance("model", model, nn.Module, "a torch.nn.Module")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------------------
# Input checks (each public method above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        check_positive_int(name, value, "a size")


def _check_memory(memory) -> None:
    check_instance("memory", memory, EncoderOutput, "an EncoderOutput", "pass model.encoder(src, src_lengths)")


def _check_state(name: str, state, memory: EncoderOutput) -> None:
    check_tensor(name, state, 2, "(batch, hidden_dim)")
    check_size(name, state, 0, memory.annotations.shape[0], "the batch size of memory")


def _check_source(encoder: Encoder, src, src_lengths) -> None:
    check_ids("src", src, encoder.embedding.num_embeddings, 2, "(batch, src_len) of token ids")
    check_tensor("src_lengths", src_lengths, 1, "(batch,)")
    check_size("src_lengths", src_lengths, 0, src.shape[0], "one length per source sentence")
    _check_padding_mask(src_lengths, src.shape[1])  # rejects empty or too-long lengths


def _check_bahdanau_step(decoder: BahdanauDecoder, prev_tokens, cache) -> None:
    check_ids("prev_tokens", prev_tokens, decoder.embedding.num_embeddings, 1, "(batch,) of token ids")
    if not (isinstance(cache, tuple) and len(cache) == 2):
        raise TypeError(
            f"cache should be the pair (s_{{t-1}}, U_a h_j), got {describe(cache)}: pass what start(memory) "
            "or the last next_step returned"
        )


def _check_advance(embedded, state, memory) -> None:
    _check_memory(memory)
    _check_state("state", state, memory)
    check_tensor("embedded", embedded, 2, "(batch, emb_dim)")
    check_size("embedded", embedded, 0, state.shape[0], "the batch size of state")


def _check_forward(model: Seq2Seq, src, tgt_in) -> None:
    check_tensor("src", src, 2, "(batch, src_len) of token ids")
    check_tensor("tgt_in", tgt_in, 2, "(batch, tgt_len) of token ids")
    check_size("tgt_in", tgt_in, 0, src.shape[0], "the batch size of src")
    check_ids("tgt_in", tgt_in, model.decoder.embedding.num_embeddings, 2, "(batch, tgt_len) of token ids")


def _check_tgt_in(tgt_in, vocab_size: int, memory) -> None:
    check_ids("tgt_in", tgt_in, vocab_size, 2, "(batch, tgt_len) of token ids")
    _check_memory(memory)
    check_size("tgt_in", tgt_in, 0, memory.summary.shape[0], "the batch size of memory")
