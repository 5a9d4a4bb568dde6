"""The package rejects bad input instead of guessing (issue 8).

BAD_CALLS is a table of calls a careless learner plausibly makes (wrong rank, mismatched batch, wrong dtype,
NumPy or lists, empty, NaN/inf, lengths out of range, bool where numbers are expected), each with the
exception it must raise and a regex its message must match: the regex names what was expected, not just
the kind of error. DOCUMENTED lists the odd inputs that have a correct answer instead (a fully masked row
gives zeros; a NaN score is not hidden). The property test then draws random wrong ranks and mismatched
batches for the tensor functions and checks that each raises ValueError naming the expected shape.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from attnedu import (
    analysis,
    data,
    masks,
    models,
    multihead,
    plots,
    positional,
    runtime,
    tasks,
    train,
    transformer,
    widgets,
)
from attnedu.attention import (
    AdditiveAttention,
    LuongAttention,
    additive_score,
    additive_score_projected,
    concat_score,
    context_vector,
    dot_score,
    general_score,
    local_p_weights,
    location_score,
    masked_softmax,
    scaled_dot_product_attention,
)
from attnedu.data import SOURCE_VOCAB, TARGET_VOCAB, Vocab

g = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


# Small shared inputs: batch 2, dec_dim 4, src_len 5, enc_dim 6, attn_dim 3.
S, H = rand(2, 4), rand(2, 5, 6)
W, U, V = rand(3, 4), rand(3, 6), rand(3)
SCORES = rand(2, 5)
MASK = torch.ones(2, 5, dtype=torch.bool)
Q4 = rand(2, 2, 3, 8)  # (batch, heads, len, head_dim)
PAIRS = data.make_pairs(4, 5, 7, seed=0)
PAIR = PAIRS[0]
MODEL = models.Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=True, bidirectional=False,
                             emb_dim=4, hidden_dim=4, attn_dim=4)  # fmt: skip
FIXED = models.Seq2Seq.build(len(SOURCE_VOCAB), len(TARGET_VOCAB), attention=False, bidirectional=False,
                             emb_dim=4, hidden_dim=4)  # fmt: skip
BATCH = data.make_batch(PAIRS)
MEMORY = MODEL.encoder(BATCH.src, BATCH.src_lengths)
MAPS = analysis.attention_maps(MODEL, PAIRS)
ATTN = AdditiveAttention(4, 6, 3)
LUONG = LuongAttention("general", 4, 6)
MHA = multihead.MultiHeadAttention(8, 2)
X8 = rand(2, 3, 8)
CORPUS = tasks.CharCorpus(torch.arange(30) % 3, torch.arange(10) % 3, ["a", "b", "c"])
CLASSIFIER = transformer.AttentionClassifier(10, 6, 8, 2, 2, 3)
TINY = transformer.TinyTransformer(10, 10, d_model=8, num_heads=2, num_layers=1, max_positions=8)
TOKENS = torch.randint(0, 10, (2, 6), generator=g)
LOGITS, TARGETS = rand(2, 3, 7), torch.tensor([[3, 4, 2], [5, 2, 0]])
WEIGHTS = torch.softmax(rand(2, 3), dim=-1)


def ax():
    return Figure().subplots()


def rng():
    return random.Random(0)


def gen():
    return torch.Generator().manual_seed(0)


def in_seeded(seed):
    with runtime.seeded(seed):
        pass


# (id, the bad call, exception, regex the message must match: it names what was expected)
BAD_CALLS = [
    # ---- attention: encoder-decoder scores --------------------------------------------------------------
    ("additive/query-1d", lambda: additive_score(S[0], H, W, U, V), ValueError,
     r"query should be of shape \(batch, dec_dim\) or \(batch, tgt_len, dec_dim\).*\[None\]"),
    ("additive/query-4d", lambda: additive_score(rand(2, 1, 1, 4), H, W, U, V), ValueError,
     r"query should be of shape \(batch, dec_dim\) or \(batch, tgt_len, dec_dim\) \(2 or 3 dimensions\)"),
    ("additive/keys-2d", lambda: additive_score(S, H[0], W, U, V), ValueError,
     r"keys should be of shape \(batch, src_len, enc_dim\) \(3 dimensions\)"),
    ("additive/batch-of-one-keys", lambda: additive_score(S, H[:1], W, U, V), ValueError,
     r"keys should be of size 2 in dimension 0 \(the batch size of query\)"),
    ("additive/keys-numpy", lambda: additive_score(S, H.numpy(), W, U, V), TypeError,
     r"keys should be a torch\.Tensor of shape \(batch, src_len, enc_dim\).*torch\.as_tensor"),
    ("additive/keys-list", lambda: additive_score(S, H.tolist(), W, U, V), TypeError,
     r"keys should be a torch\.Tensor .*torch\.tensor"),
    ("additive/query-long", lambda: additive_score(S.long(), H, W, U, V), TypeError,
     r"query should be a floating-point tensor, got dtype torch\.int64"),
    ("additive/query-bool", lambda: additive_score(S > 0, H, W, U, V), TypeError,
     r"query should be a floating-point tensor.*mask"),
    ("additive/W_a-dec_dim", lambda: additive_score(S, H, rand(3, 5), U, V), ValueError,
     r"W_a should be of size 4 in dimension 1 \(dec_dim"),
    ("additive/U_a-enc_dim", lambda: additive_score(S, H, W, rand(3, 5), V), ValueError,
     r"U_a should be of size 6 in dimension 1 \(enc_dim"),
    ("additive/U_a-attn_dim", lambda: additive_score(S, H, W, rand(2, 6), V), ValueError,
     r"U_a should be of size 3 in dimension 0 \(attn_dim"),
    ("additive/v_a-size", lambda: additive_score(S, H, W, U, rand(4)), ValueError,
     r"v_a should be of size 3 in dimension 0 \(attn_dim"),
    ("additive/v_a-list", lambda: additive_score(S, H, W, U, V.tolist()), TypeError,
     r"v_a should be a torch\.Tensor of shape \(attn_dim,\)"),
    ("additive/v_a-matrix", lambda: additive_score(S, H, W, U, rand(3, 3)), ValueError,
     r"v_a should be of size 1 in dimension 0"),
    ("additive/W_a-float64", lambda: additive_score(S, H, W.double(), U, V), TypeError,
     r"query, W_a should share one dtype.*float64"),
    ("additive/keys-float64", lambda: additive_score(S, H.double(), W, U, V), TypeError,
     r"query, keys should share one dtype"),
    ("additive/keys-empty", lambda: additive_score(S, rand(2, 0, 6), W, U, V), ValueError,
     r"keys should be of shape \(batch, src_len, enc_dim\) with no dimension of size 0"),
    ("projected/batch-of-one", lambda: additive_score_projected(rand(2, 3), rand(1, 5, 3), V), ValueError,
     r"projected_keys should be of size 2 in dimension 0 \(the batch size of the query\).*not stretched"),
    ("projected/attn_dim", lambda: additive_score_projected(rand(2, 1), rand(2, 5, 3), V), ValueError,
     r"projected_keys should be of size 1 in dimension 2 \(attn_dim of projected_query\)"),
    ("projected/v_a", lambda: additive_score_projected(rand(2, 3), rand(2, 5, 3), rand(5)), ValueError,
     r"v_a should be of size 3 in dimension 0"),
    ("projected/query-4d", lambda: additive_score_projected(rand(2, 1, 1, 3), rand(2, 5, 3), V), ValueError,
     r"projected_query should be of shape \(batch, attn_dim\) or \(batch, tgt_len, attn_dim\)"),
    ("dot/sizes-differ", lambda: dot_score(S, H), ValueError,
     r"keys should be of size 4 in dimension 2 \(dec_dim.*general score"),
    ("dot/keys-int", lambda: dot_score(S, H.long()[..., :4]), TypeError, r"keys should be a floating-point tensor"),
    ("general/W_a-1d", lambda: general_score(S, H, rand(4)), ValueError,
     r"W_a should be of shape \(dec_dim, enc_dim\) \(2 dimensions\)"),
    ("general/W_a-transposed", lambda: general_score(S, H, rand(6, 4)), ValueError,
     r"W_a should be of size 4 in dimension 0 \(dec_dim\).*\(dec_dim, enc_dim\)"),
    ("concat/W_a-columns", lambda: concat_score(S, H, rand(3, 9), V), ValueError,
     r"W_a should be of size 10 in dimension 1 \(dec_dim \+ enc_dim"),
    ("location/src_len-too-long", lambda: location_score(S, rand(5, 4), 6), ValueError,
     r"src_len should be at most max_src_len=5"),
    ("location/src_len-float", lambda: location_score(S, rand(5, 4), 3.0), TypeError,
     r"src_len \(the source length\) should be an int, got 3\.0 \(a float\); pass int\(3\.0\)"),
    ("location/src_len-zero", lambda: location_score(S, rand(5, 4), 0), ValueError,
     r"src_len \(the source length\) should be an int with 1 <= src_len"),
    ("location/src_len-bool", lambda: location_score(S, rand(5, 4), True), TypeError,
     r"src_len \(the source length\) should be an int, got the bool True"),
    ("location/query-int", lambda: location_score(S.long(), rand(5, 4), 3), TypeError,
     r"query should be a floating-point tensor"),
    ("local_p/center-nan", lambda: local_p_weights(SCORES, torch.tensor([1.0, float("nan")]), 1), ValueError,
     r"center should be finite numbers, got 1 NaN or infinite entries"),
    ("local_p/center-bool", lambda: local_p_weights(SCORES, torch.tensor([True, False]), 1), TypeError,
     r"center should be positions p_t \(numbers\)"),
    ("local_p/half_width-negative", lambda: local_p_weights(SCORES, torch.tensor([1.0, 2.0]), -1), ValueError,
     r"half_width \(D, the window's half width\) should be an int with 0 <= half_width"),
    ("local_p/half_width-float", lambda: local_p_weights(SCORES, torch.tensor([1.0, 2.0]), 1.5), TypeError,
     r"half_width \(D, the window's half width\) should be an int"),
    ("local_p/center-batch", lambda: local_p_weights(SCORES, torch.tensor([1.0]), 1), ValueError,
     r"center should be of size 2 in dimension 0 \(one predicted position p_t per sentence\)"),
    # ---- attention: softmax, context, scaled dot-product ---------------------------------------------------
    ("masked_softmax/mask-numpy", lambda: masked_softmax(SCORES, MASK.numpy()), TypeError,
     r"mask should be a bool torch\.Tensor \(True = may attend\), got a NumPy array.*torch\.from_numpy"),
    ("masked_softmax/mask-float", lambda: masked_softmax(SCORES, MASK.float()), TypeError,
     r"mask should be a bool tensor \(True = may attend\), got dtype torch\.float32.*from_additive"),
    ("masked_softmax/mask-int", lambda: masked_softmax(SCORES, MASK.long()), TypeError,
     r"mask should be a bool tensor.*mask\.bool\(\)"),
    ("masked_softmax/mask-shape", lambda: masked_softmax(SCORES, MASK[:, None, :]), ValueError,
     r"mask should have the shape of the scores, \(2, 5\), got shape \(2, 1, 5\)"),
    ("masked_softmax/mask-list", lambda: masked_softmax(SCORES, MASK.tolist()), TypeError,
     r"mask should be a bool torch\.Tensor.*torch\.as_tensor\(mask, dtype=torch\.bool\)"),
    ("masked_softmax/scores-int", lambda: masked_softmax(SCORES.long(), MASK), TypeError,
     r"scores should be a floating-point tensor"),
    ("masked_softmax/scores-list", lambda: masked_softmax(SCORES.tolist(), MASK), TypeError,
     r"scores should be a torch\.Tensor of shape \(\.\.\., src_len\)"),
    ("masked_softmax/scores-0d", lambda: masked_softmax(torch.tensor(1.0), None), ValueError,
     r"scores should be of shape \(\.\.\., src_len\) \(at least 1 dimensions\)"),
    ("masked_softmax/scores-empty", lambda: masked_softmax(rand(2, 0), None), ValueError,
     r"scores should be of shape \(\.\.\., src_len\) with no dimension of size 0"),
    ("context/weights-bool", lambda: context_vector(MASK, H), TypeError,
     r"weights should be a floating-point tensor, got dtype torch\.bool"),
    ("context/batch-of-one", lambda: context_vector(SCORES[:1], H), ValueError,
     r"weights should be \(batch, src_len\) or \(batch, tgt_len, src_len\) with \(batch, src_len\) = \(2, 5\)"),
    ("context/src_len", lambda: context_vector(rand(2, 4), H), ValueError,
     r"weights should be .*= \(2, 5\) as in values, got shape \(2, 4\)"),
    ("context/values-2d", lambda: context_vector(SCORES, H[0]), ValueError,
     r"values should be of shape \(batch, src_len, enc_dim\)"),
    ("context/dtype", lambda: context_vector(SCORES.double(), H), TypeError,
     r"weights, values should share one dtype"),
    ("context/weights-4d", lambda: context_vector(rand(2, 1, 1, 5), H), ValueError,
     r"weights should be of shape \(batch, src_len\) or \(batch, tgt_len, src_len\)"),
    ("sdpa/mask-2d", lambda: scaled_dot_product_attention(Q4, Q4, Q4, torch.ones(2, 3, dtype=torch.bool)),
     ValueError, r"expected \(\.\.\., query_len, key_len\) = \(2, 2, 3, 3\).*mask\[:, None, None, :\]"),
    ("sdpa/mask-size", lambda: scaled_dot_product_attention(Q4, Q4, Q4, torch.ones(2, 1, 1, 4, dtype=torch.bool)),
     ValueError, r"mask has size 4 in dim 3, where the scores have 3: expected"),
    ("sdpa/mask-int", lambda: scaled_dot_product_attention(Q4, Q4, Q4, torch.ones(2, 1, 1, 3).long()),
     TypeError, r"mask should be a bool tensor"),
    ("sdpa/head_dim", lambda: scaled_dot_product_attention(Q4, rand(2, 2, 3, 4), rand(2, 2, 3, 4)), ValueError,
     r"key should be of size 8 in dimension -1 \(head_dim of query"),
    ("sdpa/leading", lambda: scaled_dot_product_attention(Q4, Q4[:1], Q4[:1]), ValueError,
     r"query, key and value should share their leading \(batch, heads, \.\.\.\) dims.*not stretched"),
    ("sdpa/value-len", lambda: scaled_dot_product_attention(Q4, Q4, rand(2, 2, 4, 8)), ValueError,
     r"value should be of size 3 in dimension -2 \(key_len: one value per key\)"),
    ("sdpa/is_causal-str", lambda: scaled_dot_product_attention(Q4, Q4, Q4, is_causal="yes"), TypeError,
     r"is_causal \(.*\) should be True or False, got 'yes'"),
    ("sdpa/bias-dtype", lambda: scaled_dot_product_attention(Q4, Q4, Q4, bias=rand(1, 2, 3, 3).double()),
     TypeError, r"query, bias should share one dtype"),
    ("sdpa/bias-dims", lambda: scaled_dot_product_attention(Q4, Q4, Q4, bias=rand(2, 3, 3)), ValueError,
     r"bias has 3 dims but the scores have 4: expected \(\.\.\., query_len, key_len\)"),
    ("sdpa/query-1d", lambda: scaled_dot_product_attention(rand(8), Q4, Q4), ValueError,
     r"query should be of shape \(\.\.\., query_len, head_dim\) \(at least 2 dimensions\)"),
    ("sdpa/value-int", lambda: scaled_dot_product_attention(Q4, Q4, Q4.long()), TypeError,
     r"value should be a floating-point tensor"),
    # ---- attention modules ---------------------------------------------------------------------------------
    ("AdditiveAttention/attn_dim-0", lambda: AdditiveAttention(4, 6, 0), ValueError,
     r"attn_dim \(a vector size\) should be an int with 1 <= attn_dim"),
    ("AdditiveAttention/dec_dim-float", lambda: AdditiveAttention(4.0, 6, 3), TypeError,
     r"dec_dim \(a vector size\) should be an int, got 4\.0"),
    ("AdditiveAttention/batch-of-one", lambda: ATTN(S, H[:1]), ValueError,
     r"keys should be of size 2 in dimension 0 \(the batch size of query\)"),
    ("AdditiveAttention/query-size", lambda: ATTN(rand(2, 5), H), ValueError,
     r"query should be of size 4 in dimension 1 \(dec_dim this attention was built with\)"),
    ("AdditiveAttention/projected-keys", lambda: ATTN(S, H, None, rand(1, 5, 3)), ValueError,
     r"projected_keys should have shape \(batch, src_len, attn_dim\) = \(2, 5, 3\)"),
    ("AdditiveAttention/projected-keys-list", lambda: ATTN(S, H, None, [[0.0]]), TypeError,
     r"projected_keys should be a torch\.Tensor of shape \(batch, src_len, attn_dim\)"),
    ("AdditiveAttention/keys-enc_dim", lambda: ATTN(S, rand(2, 5, 7), None, rand(2, 5, 3)), ValueError,
     r"keys should be of size 6 in dimension 2 \(enc_dim this attention was built with\)"),
    ("AdditiveAttention/mask-shape", lambda: ATTN(S, H, torch.ones(2, 4, dtype=torch.bool)), ValueError,
     r"mask should have the shape of the scores, \(2, 5\)"),
    ("AdditiveAttention/query-float64", lambda: ATTN(S.double(), H), TypeError,
     r"query, W_a should share one dtype"),
    ("project_keys/enc_dim", lambda: ATTN.project_keys(rand(2, 5, 4)), ValueError,
     r"keys should be of size 6 in dimension 2 \(enc_dim"),
    ("LuongAttention/score-typo", lambda: LuongAttention("dott", 4, 4), ValueError,
     r"score should be one of \('dot', 'general', 'concat', 'location'\), got 'dott'.*did you mean 'dot'"),
    ("LuongAttention/dot-sizes", lambda: LuongAttention("dot", 4, 6), ValueError,
     r"enc_dim should equal dec_dim=4 for the dot score, got 6.*'general'"),
    ("LuongAttention/max_src_len-0", lambda: LuongAttention("location", 4, 6, max_src_len=0), ValueError,
     r"max_src_len \(a size\) should be an int with 1 <= max_src_len"),
    ("LuongAttention/mask-float", lambda: LUONG(rand(2, 3, 4), H, MASK.float()), TypeError,
     r"mask should be a bool tensor \(True = may attend\)"),
    ("LuongAttention/mask-shape", lambda: LUONG(rand(2, 3, 4), H, MASK[:, :4]), ValueError,
     r"mask should have shape \(batch, src_len\) = \(2, 5\) as the keys, got shape \(2, 4\)"),
    ("LuongAttention/query-2d", lambda: LUONG(S, H), ValueError,
     r"query should be of shape \(batch, tgt_len, dec_dim\) \(3 dimensions\)"),
    ("LuongAttention/keys-enc_dim", lambda: LuongAttention("location", 4, 6)(rand(2, 3, 4), rand(2, 5, 3)),
     ValueError, r"keys should be of size 6 in dimension 2 \(enc_dim this attention was built with\)"),
    # ---- masks ---------------------------------------------------------------------------------------------
    ("padding_mask/list", lambda: masks.padding_mask([3, 1], 4), TypeError,
     r"lengths should be a 1-D integer torch\.Tensor of shape \(batch,\).*torch\.tensor\(lengths\)"),
    ("padding_mask/numpy", lambda: masks.padding_mask(np.array([3, 1]), 4), TypeError,
     r"lengths should be a 1-D integer torch\.Tensor.*NumPy"),
    ("padding_mask/fractional", lambda: masks.padding_mask(torch.tensor([2.5, 1.0]), 4), TypeError,
     r"lengths should hold whole numbers \(an integer dtype such as torch\.long\), got dtype torch\.float32"),
    ("padding_mask/bool", lambda: masks.padding_mask(torch.tensor([True, False]), 4), TypeError,
     r"lengths should hold whole numbers.*torch\.bool"),
    ("padding_mask/zero-length", lambda: masks.padding_mask(torch.tensor([3, 0]), 4), ValueError,
     r"lengths should be at least 1, got length 0 for sequence 1"),
    ("padding_mask/too-long", lambda: masks.padding_mask(torch.tensor([3, 9]), 5), ValueError,
     r"lengths should be at most max_len=5, got length 9"),
    ("padding_mask/max_len-0", lambda: masks.padding_mask(torch.tensor([1]), 0), ValueError,
     r"max_len \(the padded length\) should be an int with 1 <= max_len"),
    ("padding_mask/max_len-float", lambda: masks.padding_mask(torch.tensor([1]), 4.0), TypeError,
     r"max_len \(the padded length\) should be an int, got 4\.0"),
    ("padding_mask/max_len-bool", lambda: masks.padding_mask(torch.tensor([1]), True), TypeError,
     r"max_len \(the padded length\) should be an int, got the bool True"),
    ("padding_mask/2d", lambda: masks.padding_mask(torch.tensor([[3, 1]]), 4), ValueError,
     r"lengths should be of shape \(batch,\) \(1 dimensions\)"),
    ("padding_mask/empty", lambda: masks.padding_mask(torch.tensor([], dtype=torch.long), 4), ValueError,
     r"lengths should be of shape \(batch,\) with no dimension of size 0"),
    ("causal_mask/zero", lambda: masks.causal_mask(0), ValueError,
     r"query_len \(the number of queries\) should be an int with 1 <= query_len"),
    ("causal_mask/no-align", lambda: masks.causal_mask(2, 5), ValueError,
     r"say how they line up\. align='top-left' .* or align='bottom-right'"),
    ("causal_mask/align-typo", lambda: masks.causal_mask(2, 5, align="top_left"), ValueError,
     r"align should be one of \('top-left', 'bottom-right'\), got 'top_left'.*did you mean 'top-left'"),
    ("causal_mask/float", lambda: masks.causal_mask(2.0), TypeError,
     r"query_len \(the number of queries\) should be an int, got 2\.0.*int\(2\.0\)"),
    ("causal_padding_mask/fractional", lambda: masks.causal_padding_mask(torch.tensor([1.5]), 3), TypeError,
     r"lengths should hold whole numbers"),
    ("sliding_window/window-negative", lambda: masks.sliding_window_mask(5, -1), ValueError,
     r"window \(how many neighbours on each side\) should be an int with 0 <= window"),
    ("sliding_window/window-float", lambda: masks.sliding_window_mask(5, 1.5), TypeError,
     r"window \(how many neighbours on each side\) should be an int"),
    ("sliding_window/causal-str", lambda: masks.sliding_window_mask(5, 1, causal="no"), TypeError,
     r"causal \(.*\) should be True or False, got 'no'"),
    ("global_window/fractional", lambda: masks.global_window_mask(6, 1, [1.5]), TypeError,
     r"global position \(a position counted from 0\) should be an int, got 1\.5"),
    ("global_window/outside", lambda: masks.global_window_mask(6, 1, [6]), ValueError,
     r"global positions should be in 0\.\.5, got \[6\]"),
    ("global_window/negative", lambda: masks.global_window_mask(6, 1, [-1]), ValueError,
     r"global positions should be in 0\.\.5, got \[-1\].*not read from the end"),
    ("global_window/single-int", lambda: masks.global_window_mask(6, 1, 0), TypeError,
     r"global_positions should be a list of positions such as \[0\].*wrap a single position in a list"),
    ("to_mha_key_padding/3d", lambda: masks.to_mha_key_padding_mask(torch.ones(2, 1, 4, dtype=torch.bool)),
     ValueError, r"mask should be of shape \(batch, key_len\) \(2 dimensions\)"),
    ("to_mha_key_padding/float", lambda: masks.to_mha_key_padding_mask(torch.ones(2, 4)), TypeError,
     r"mask should be a bool tensor \(True = may attend\)"),
    ("to_mha_attn_mask/1d", lambda: masks.to_mha_attn_mask(torch.ones(4, dtype=torch.bool)), ValueError,
     r"mask should be of shape \(query_len, key_len\) or \(batch \* heads, query_len, key_len\)"),
    ("to_additive/dtype-long", lambda: masks.to_additive(MASK, torch.long), TypeError,
     r"dtype should be a floating-point torch\.dtype.*torch\.float32"),
    ("to_additive/list", lambda: masks.to_additive([[True]]), TypeError, r"mask should be a bool torch\.Tensor"),
    ("from_additive/zero-one", lambda: masks.from_additive(torch.tensor([1.0, 0.0])), ValueError,
     r"mask should hold only 0 \(allowed\) and -inf \(blocked\), got 1 other values such as 1\.0.*mask\.bool\(\)"),
    ("from_additive/minus-1e9", lambda: masks.from_additive(torch.tensor([0.0, -1e9])), ValueError,
     r"mask should hold only 0 \(allowed\) and -inf \(blocked\).*mask > -1e4"),
    ("from_additive/nan", lambda: masks.from_additive(torch.tensor([0.0, float("nan")])), ValueError,
     r"mask should hold 0 \(allowed\) and -inf \(blocked\), got a mask with NaN or \+inf"),
    ("from_additive/bool", lambda: masks.from_additive(MASK), TypeError,
     r"mask should be a floating-point tensor, got dtype torch\.bool"),
    ("from_additive/list", lambda: masks.from_additive([0.0]), TypeError,
     r"mask should be a float torch\.Tensor of 0 and -inf"),
    # ---- positional ----------------------------------------------------------------------------------------
    ("sinusoidal/odd", lambda: positional.sinusoidal_encoding(8, 5), ValueError,
     r"d_model should be even, got d_model=5"),
    ("sinusoidal/zero-positions", lambda: positional.sinusoidal_encoding(0, 4), ValueError,
     r"num_positions \(how many positions to encode\) should be an int with 1 <= num_positions"),
    ("sinusoidal/float-d_model", lambda: positional.sinusoidal_encoding(8, 8.0), TypeError,
     r"d_model \(the embedding width\) should be an int, got 8\.0"),
    ("sinusoidal/base-0", lambda: positional.sinusoidal_encoding(8, 4, base=0), ValueError,
     r"base \(the wavelength base\) should be a number > 1\.0"),
    ("sinusoidal/base-str", lambda: positional.sinusoidal_encoding(8, 4, base="10000"), TypeError,
     r"base \(the wavelength base\) should be a number, got '10000'"),
    ("LearnedPositions/zero", lambda: positional.LearnedPositions(0, 8), ValueError,
     r"max_positions \(the length of the table\) should be an int with 1 <= max_positions"),
    ("LearnedPositions/d_model-0", lambda: positional.LearnedPositions(8, 0), ValueError,
     r"d_model \(the embedding width\) should be an int with 1 <= d_model"),
    ("LearnedPositions/too-long", lambda: positional.LearnedPositions(8, 4)(9), ValueError,
     r"a learned position table of 8 rows has no vector for position 8 or later \(asked for 9\)"),
    ("LearnedPositions/seq_len-0", lambda: positional.LearnedPositions(8, 4)(0), ValueError,
     r"seq_len \(the sequence length\) should be an int with 1 <= seq_len"),
    ("rope_angles/2d", lambda: positional.rope_angles(torch.arange(4)[None], 8), ValueError,
     r"positions should be of shape \(seq_len,\) \(1 dimensions\)"),
    ("rope_angles/odd", lambda: positional.rope_angles(torch.arange(4), 5), ValueError,
     r"head_dim should be even .*got 5"),
    ("rope_angles/bool", lambda: positional.rope_angles(torch.ones(4, dtype=torch.bool), 8), TypeError,
     r"positions should be numbers \(counted from 0\), got dtype torch\.bool"),
    ("rope_angles/nan", lambda: positional.rope_angles(torch.tensor([0.0, float("nan")]), 8), ValueError,
     r"positions should be finite numbers"),
    ("apply_rope/positions-length", lambda: positional.apply_rope(rand(2, 5, 8), torch.arange(4)), ValueError,
     r"positions should give one position per row of x, shape \(5,\), got .*shape \(4,\)"),
    ("apply_rope/positions-list", lambda: positional.apply_rope(rand(2, 5, 8), [0, 1, 2, 3, 4]), TypeError,
     r"positions should be a torch\.Tensor of shape \(seq_len,\)"),
    ("apply_rope/layout", lambda: positional.apply_rope(rand(2, 5, 8), torch.arange(5), "interleave"), ValueError,
     r"layout should be one of \('halves', 'interleaved'\).*did you mean 'interleaved'"),
    ("apply_rope/x-int", lambda: positional.apply_rope(torch.ones(2, 5, 8, dtype=torch.long), torch.arange(5)),
     TypeError, r"x should be a floating-point tensor"),
    ("apply_rope/x-1d", lambda: positional.apply_rope(rand(8), torch.arange(1)), ValueError,
     r"x should be of shape \(\.\.\., seq_len, head_dim\) \(at least 2 dimensions\)"),
    ("alibi_slopes/zero", lambda: positional.alibi_slopes(0), ValueError,
     r"num_heads \(the number of heads\) should be an int with 1 <= num_heads"),
    ("alibi_bias/more-queries", lambda: positional.alibi_bias(2, 5, 3), ValueError,
     r"query_len should be at most key_len=3.*got 5"),
    ("alibi_bias/float-heads", lambda: positional.alibi_bias(2.5, 3), TypeError,
     r"num_heads \(the number of heads\) should be an int, got 2\.5"),
    ("encoding_similarity/3d", lambda: positional.encoding_similarity(rand(1, 4, 8)), ValueError,
     r"encoding should be of shape \(num_positions, d_model\).*encoding\[0\]"),
    ("encoding_similarity/int", lambda: positional.encoding_similarity(torch.ones(4, 8, dtype=torch.long)),
     TypeError, r"encoding should be a floating-point tensor"),
    # ---- multihead -----------------------------------------------------------------------------------------
    ("split_heads/2d", lambda: multihead.split_heads(rand(3, 8), 2), ValueError,
     r"x should be of shape \(batch, seq_len, d_model\) \(3 dimensions\).*x\[None\]"),
    ("split_heads/not-dividing", lambda: multihead.split_heads(X8, 3), ValueError,
     r"num_heads should divide d_model, got num_heads=3"),
    ("split_heads/zero-heads", lambda: multihead.split_heads(X8, 0), ValueError,
     r"num_heads \(the number of heads\) should be an int with 1 <= num_heads"),
    ("merge_heads/3d", lambda: multihead.merge_heads(X8), ValueError,
     r"x should be of shape \(batch, num_heads, seq_len, head_dim\) \(4 dimensions\)"),
    ("MultiHeadAttention/not-dividing", lambda: multihead.MultiHeadAttention(8, 3), ValueError,
     r"num_heads should divide d_model, got num_heads=3, which does not divide d_model=8"),
    ("MultiHeadAttention/bias-str", lambda: multihead.MultiHeadAttention(8, 2, bias="no"), TypeError,
     r"bias \(whether the projections have biases\) should be True or False, got 'no'"),
    ("MultiHeadAttention/token-ids", lambda: MHA(X8.long(), X8.long(), X8.long()), TypeError,
     r"query should be a floating-point tensor, got dtype torch\.int64.*token ids"),
    ("MultiHeadAttention/batch-of-one", lambda: MHA(X8, X8[:1], X8[:1]), ValueError,
     r"query, key and value should hold the same batch.*not stretched"),
    ("MultiHeadAttention/d_model", lambda: MHA(rand(2, 3, 6), X8, X8), ValueError,
     r"query should be of size 8 in dimension 2 \(d_model of this attention\)"),
    ("MultiHeadAttention/float64", lambda: MHA(X8.double(), X8.double(), X8.double()), TypeError,
     r"query, key, value, weights should share one dtype"),
    ("MultiHeadAttention/value-len", lambda: MHA(X8, X8, rand(2, 4, 8)), ValueError,
     r"value should be of size 3 in dimension 1 \(key_len: one value per key\)"),
    ("MultiHeadAttention/rope-cross", lambda: MHA(X8, rand(2, 4, 8), rand(2, 4, 8), rope_positions=torch.arange(3)),
     ValueError, r"rope_positions should be used with self-attention \(query_len == key_len\)"),
    ("MultiHeadAttention/mask-2d", lambda: MHA(X8, X8, X8, torch.ones(2, 3, dtype=torch.bool)), ValueError,
     r"mask has 2 dims but the scores have 4: expected \(\.\.\., query_len, key_len\)"),
    ("MultiHeadAttention/copy-wrong-type", lambda: MHA.copy_from_torch(nn.Linear(8, 8)), TypeError,
     r"mha should be a torch\.nn\.MultiheadAttention, got a Linear"),
    ("MultiHeadAttention/copy-wrong-size", lambda: MHA.copy_from_torch(nn.MultiheadAttention(8, 4)), ValueError,
     r"num_heads=4.*num_heads=2"),
    # ---- models --------------------------------------------------------------------------------------------
    ("Encoder/vocab-0", lambda: models.Encoder(0, 4, 4, False), ValueError,
     r"vocab_size \(a size\) should be an int with 1 <= vocab_size"),
    ("Encoder/bidirectional-str", lambda: models.Encoder(10, 4, 4, "yes"), TypeError,
     r"bidirectional \(.*\) should be True or False, got 'yes'"),
    ("Encoder/float-ids", lambda: MODEL.encoder(BATCH.src.float(), BATCH.src_lengths), TypeError,
     r"src should be token ids \(an integer dtype such as torch\.long\), got dtype torch\.float32"),
    ("Encoder/ids-out-of-vocab", lambda: MODEL.encoder(BATCH.src + 100, BATCH.src_lengths), ValueError,
     rf"src should be token ids in 0\.\.{len(SOURCE_VOCAB) - 1} \(a vocabulary of {len(SOURCE_VOCAB)} words\)"),
    ("Encoder/negative-id", lambda: MODEL.encoder(BATCH.src - 1, BATCH.src_lengths), ValueError,
     r"src should be token ids in 0\.\..*got ids from -1"),
    ("Encoder/lengths-batch", lambda: MODEL.encoder(BATCH.src, BATCH.src_lengths[:1]), ValueError,
     r"src_lengths should be of size 4 in dimension 0 \(one length per source sentence\)"),
    ("Encoder/lengths-float", lambda: MODEL.encoder(BATCH.src, BATCH.src_lengths.float()), TypeError,
     r"lengths should hold whole numbers"),
    ("FixedContextDecoder/enc_dim-0", lambda: models.FixedContextDecoder(10, 4, 4, 0), ValueError,
     r"enc_dim \(a size\) should be an int with 1 <= enc_dim"),
    ("BahdanauDecoder/attn_dim-float", lambda: models.BahdanauDecoder(10, 4, 4, 4, attn_dim=4.0), TypeError,
     r"attn_dim \(a size\) should be an int"),
    ("LuongDecoder/score-typo", lambda: models.LuongDecoder(10, 4, 4, 4, "generall"), ValueError,
     r"score should be one of .*did you mean 'general'"),
    ("LuongDecoder/input_feeding-int", lambda: models.LuongDecoder(10, 4, 4, 4, "dot", input_feeding=1),
     TypeError, r"input_feeding \(.*\) should be True or False, got 1"),
    ("Seq2Seq/decoder-str", lambda: models.Seq2Seq(MODEL.encoder, "decoder"), TypeError,
     r"decoder should be a FixedContextDecoder, BahdanauDecoder or LuongDecoder, got 'decoder'"),
    ("Seq2Seq/enc_dim", lambda: models.Seq2Seq(models.Encoder(10, 4, 4, True), models.BahdanauDecoder(10, 4, 4, 4)),
     ValueError, r"decoder\.enc_dim should be the encoder's output size 8, got 4.*enc_dim=8"),
    ("build/attention-typo", lambda: models.Seq2Seq.build(10, 10, attention="additive", bidirectional=False),
     ValueError, r"attention should be one of \(False, True, 'bahdanau', 'dot', 'general', 'concat', 'location'\)"),
    ("build/attention-1", lambda: models.Seq2Seq.build(10, 10, attention=1, bidirectional=False), ValueError,
     r"attention should be one of \(False, True, .*got 1 \(an int\)"),
    ("build/bidirectional-str", lambda: models.Seq2Seq.build(10, 10, attention=True, bidirectional="False"),
     TypeError, r"bidirectional \(.*\) should be True or False, got 'False'"),
    ("build/input-feeding-bahdanau", lambda: models.Seq2Seq.build(10, 10, True, False, input_feeding=True),
     ValueError, r"attention should be a Luong score .* with input_feeding=True.*input feeding is part of Luong"),
    ("build/hidden_dim-0", lambda: models.Seq2Seq.build(10, 10, True, False, hidden_dim=0), ValueError,
     r"hidden_dim \(a size\) should be an int with 1 <= hidden_dim"),
    ("build/attn_dim-0-fixed", lambda: models.Seq2Seq.build(10, 10, False, False, attn_dim=0), ValueError,
     r"attn_dim \(a size\) should be an int with 1 <= attn_dim"),
    ("build/seed-float", lambda: models.Seq2Seq.build(10, 10, True, False, seed=1.5), TypeError,
     r"seed should be an int, got float"),
    ("Seq2Seq/tgt-batch", lambda: MODEL(BATCH.src, BATCH.src_lengths, BATCH.tgt_in[:1]), ValueError,
     r"tgt_in should be of size 4 in dimension 0 \(the batch size of src\)"),
    ("Seq2Seq/tgt-out-of-vocab", lambda: MODEL(BATCH.src, BATCH.src_lengths, BATCH.tgt_in + 100), ValueError,
     rf"tgt_in should be token ids in 0\.\.{len(TARGET_VOCAB) - 1}"),
    ("Seq2Seq/src-1d", lambda: MODEL(BATCH.src[0], BATCH.src_lengths, BATCH.tgt_in), ValueError,
     r"src should be of shape \(batch, src_len\) of token ids \(2 dimensions\).*src\[None\]"),
    ("greedy_decode/max_len-0", lambda: MODEL.greedy_decode(BATCH.src, BATCH.src_lengths, 0), ValueError,
     r"max_len \(the most words to write\) should be an int with 1 <= max_len"),
    ("greedy_decode/max_len-negative", lambda: MODEL.greedy_decode(BATCH.src, BATCH.src_lengths, -1), ValueError,
     r"max_len \(the most words to write\) should be an int with 1 <= max_len"),
    ("greedy_decode/max_len-float", lambda: MODEL.greedy_decode(BATCH.src, BATCH.src_lengths, 5.0), TypeError,
     r"max_len \(the most words to write\) should be an int, got 5\.0"),
    ("BahdanauDecoder.next_step/prev-2d", lambda: MODEL.decoder.next_step(BATCH.tgt_in, MODEL.decoder.start(MEMORY),
     MEMORY), ValueError, r"prev_tokens should be of shape \(batch,\) of token ids \(1 dimensions\)"),
    ("BahdanauDecoder.next_step/cache-state", lambda: MODEL.decoder.next_step(BATCH.tgt_in[:, 0],
     MODEL.decoder.start(MEMORY)[0], MEMORY), TypeError, r"cache should be the pair \(s_\{t-1\}, U_a h_j\)"),
    ("FixedContextDecoder.next_step/state-batch", lambda: FIXED.decoder.next_step(BATCH.tgt_in[:, 0],
     FIXED.decoder.start(MEMORY)[:1], MEMORY), ValueError, r"state should be of size 4 in dimension 0"),
    ("BahdanauDecoder.start/memory-tensor", lambda: MODEL.decoder.start(MEMORY.annotations), TypeError,
     r"memory should be an EncoderOutput.*model\.encoder\(src, src_lengths\)"),
    ("BahdanauDecoder.forward/batch", lambda: MODEL.decoder(BATCH.tgt_in[:1], MEMORY), ValueError,
     r"tgt_in should be of size 4 in dimension 0 \(the batch size of memory\)"),
    ("count_parameters/str", lambda: models.count_parameters("model"), TypeError,
     r"model should be a torch\.nn\.Module, got 'model'"),
    # ---- data ----------------------------------------------------------------------------------------------
    ("Vocab.decode/negative", lambda: SOURCE_VOCAB.decode([-1]), ValueError,
     rf"ids should be token ids in 0\.\.{len(SOURCE_VOCAB) - 1} .*got -1 at position 0.*not counted from the end"),
    ("Vocab.decode/too-large", lambda: SOURCE_VOCAB.decode([5, 999]), ValueError,
     r"ids should be token ids in 0\.\.\d+ .*got 999 at position 1"),
    ("Vocab.decode/float", lambda: SOURCE_VOCAB.decode([2.7]), TypeError,
     r"ids\[0\] \(a token id\) should be an int, got 2\.7"),
    ("Vocab.decode/bool", lambda: SOURCE_VOCAB.decode([True]), TypeError,
     r"ids\[0\] \(a token id\) should be an int, got the bool True"),
    ("Vocab.decode/batch", lambda: TARGET_VOCAB.decode(BATCH.tgt_out), TypeError,
     r"ids should be a 1-D integer tensor \(one sentence\).*row by row"),
    ("Vocab.decode/str", lambda: SOURCE_VOCAB.decode("5 6"), TypeError, r"ids should be a list of token ids"),
    ("Vocab.decode/stop_at_eos-str", lambda: SOURCE_VOCAB.decode([5], stop_at_eos="no"), TypeError,
     r"stop_at_eos should be True or False"),
    ("Vocab.encode/str", lambda: SOURCE_VOCAB.encode("the cat"), TypeError,
     r"words should be a list of words such as \['the', 'cat'\].*words\.split\(\)"),
    ("Vocab.encode/unknown", lambda: SOURCE_VOCAB.encode(["the", "zebra"]), ValueError,
     r"words should be in the vocabulary, got word 'zebra'"),
    ("Vocab/str", lambda: Vocab("abc"), TypeError, r"words should be a list of words.*split"),
    ("Vocab/repeated", lambda: Vocab(["a", "b", "a"]), ValueError,
     r"vocabulary words should be distinct .*got \['a'\] more than once"),
    ("translate/str", lambda: data.translate("the cat"), TypeError,
     r"source should be a list of words such as \['the', 'cat'\].*source\.split\(\)"),
    ("translate/ids", lambda: data.translate(["the", 7]), TypeError, r"source should hold words \(str\), got 7"),
    ("translate/empty", lambda: data.translate([]), ValueError,
     r"source should hold at least one phrase such as \['the', 'cat'\], got an empty sentence"),
    ("translate/no-determiner", lambda: data.translate(["cat"]), ValueError,
     r"noun 'cat' at position 0 has no determiner before it"),
    ("sample_source/short", lambda: data.sample_source(1, rng()), ValueError,
     r"length should be at least 2 \(a determiner and a noun\), got 1"),
    ("sample_source/seed-for-rng", lambda: data.sample_source(5, 0), TypeError,
     r"rng should be a random\.Random, got 0 \(an int\); pass random\.Random\(seed\)"),
    ("sample_source/float", lambda: data.sample_source(5.0, rng()), TypeError,
     r"length \(words in the sentence\) should be an int, got 5\.0"),
    ("make_pairs/negative", lambda: data.make_pairs(-1, 5, 7, seed=0), ValueError,
     r"n \(how many pairs\) should be an int with 0 <= n"),
    ("make_pairs/fractional", lambda: data.make_pairs(2.5, 5, 7, seed=0), TypeError,
     r"n \(how many pairs\) should be an int, got 2\.5"),
    ("make_pairs/min-above-max", lambda: data.make_pairs(2, 7, 5, seed=0), ValueError,
     r"min_len and max_len should satisfy 2 <= min_len <= max_len, got min_len=7, max_len=5"),
    ("make_pairs/min_len-1", lambda: data.make_pairs(2, 1, 5, seed=0), ValueError,
     r"min_len and max_len should satisfy 2 <= min_len <= max_len"),
    ("make_pairs/too-many", lambda: data.make_pairs(500, 2, 2, seed=0), ValueError,
     r"n should be at most the number of distinct sentences with lengths 2\.\.2, got 500"),
    ("reverse_source/list", lambda: data.reverse_source(PAIRS), TypeError,
     r"pair should be a Pair, got a list of 4 items.*\[reverse_source\(p\) for p in pairs\]"),
    ("make_batch/empty", lambda: data.make_batch([]), ValueError,
     r"pairs should hold at least one Pair, got an empty list"),
    ("make_batch/one-pair", lambda: data.make_batch(PAIR), TypeError,
     r"pairs should be a list of Pairs \(from make_pairs\), got a Pair; wrap a single one in a list"),
    ("make_batch/strings", lambda: data.make_batch(["the cat"]), TypeError,
     r"pairs\[0\] should be one of Pairs \(from make_pairs\), got 'the cat'"),
    ("make_batch/vocab", lambda: data.make_batch(PAIRS, src_vocab="source"), TypeError,
     r"src_vocab should be a Vocab, got 'source'"),
    ("BatchSampler/zero", lambda: data.BatchSampler(PAIRS, 0), ValueError,
     r"batch_size \(pairs per batch\) should be an int with 1 <= batch_size"),
    ("BatchSampler/float", lambda: data.BatchSampler(PAIRS, 2.5), TypeError,
     r"batch_size \(pairs per batch\) should be an int, got 2\.5"),
    ("BatchSampler/empty", lambda: data.BatchSampler([], 4), ValueError, r"pairs should hold at least one Pair"),
    ("ToyTranslation/n_train-0", lambda: data.ToyTranslation.generate(n_train=0), ValueError,
     r"n_train \(training pairs\) should be an int with 1 <= n_train"),
    ("ToyTranslation/buckets-flat", lambda: data.ToyTranslation.generate(10, 2, buckets=[5, 7]), TypeError,
     r"buckets should be a non-empty list of \(shortest, longest\) pairs such as \[\(5, 7\), \(8, 10\)\]"),
    # ---- train ---------------------------------------------------------------------------------------------
    ("accuracy_table/empty", lambda: train.accuracy_table({}), ValueError,
     r"curves should be a non-empty dict \{model name: \{\(lo, hi\): accuracy\}\}, got a dict of 0 items"),
    ("accuracy_table/buckets-differ", lambda: train.accuracy_table({"a": {(5, 7): 0.5}, "b": {(8, 10): 0.5}}),
     ValueError, r"curves should all have the same buckets, got \[\(8, 10\)\] for 'b'"),
    ("accuracy_table/empty-curve", lambda: train.accuracy_table({"a": {}}), TypeError,
     r"curves should map a model name \(str\) to a non-empty dict"),
    ("accuracy_table/nan", lambda: train.accuracy_table({"a": {(5, 7): float("nan")}}), ValueError,
     r"curves\['a'\]\[\(5, 7\)\] \(an accuracy\) should be a finite number, got nan"),
    ("accuracy_table/list", lambda: train.accuracy_table([0.5]), ValueError,
     r"curves should be a non-empty dict"),
    ("sequence_loss/all-padding", lambda: train.sequence_loss(LOGITS, torch.zeros(2, 3, dtype=torch.long)),
     ValueError, r"targets should hold at least one word that is not padding \(id 0\), got only padding"),
    ("sequence_loss/float-targets", lambda: train.sequence_loss(LOGITS, TARGETS.float()), TypeError,
     r"targets should be token ids \(an integer dtype such as torch\.long\), got dtype torch\.float32"),
    ("sequence_loss/shape", lambda: train.sequence_loss(LOGITS, TARGETS[:, :2]), ValueError,
     r"logits should have \(batch, tgt_len\) = \(2, 2\) as the targets, got shape \(2, 3, 7\)"),
    ("sequence_loss/logits-2d", lambda: train.sequence_loss(LOGITS[0], TARGETS), ValueError,
     r"logits should be of shape \(batch, tgt_len, vocab\) \(3 dimensions\)"),
    ("sequence_loss/target-range", lambda: train.sequence_loss(LOGITS, TARGETS + 10), ValueError,
     r"targets should be ids in 0\.\.6 \(the logits' vocabulary\), got ids from 10 to 15"),
    ("translate_pairs/batch_size-negative", lambda: train.translate_pairs(MODEL, PAIRS, batch_size=-1), ValueError,
     r"batch_size \(sentences decoded at once\) should be an int with 1 <= batch_size, got -1"),
    ("translate_pairs/batch_size-0", lambda: train.translate_pairs(MODEL, PAIRS, batch_size=0), ValueError,
     r"batch_size \(sentences decoded at once\) should be an int with 1 <= batch_size"),
    ("translate_pairs/batch_size-float", lambda: train.translate_pairs(MODEL, PAIRS, batch_size=2.5), TypeError,
     r"batch_size \(sentences decoded at once\) should be an int, got 2\.5"),
    ("translate_pairs/empty", lambda: train.translate_pairs(MODEL, []), ValueError,
     r"pairs should be a non-empty list of Pairs"),
    ("translate_pairs/one-pair", lambda: train.translate_pairs(MODEL, PAIR), TypeError,
     r"pairs should be a list of Pairs.*wrap a single one in a list"),
    ("train/steps-0", lambda: train.train(MODEL, PAIRS, steps=0), ValueError,
     r"steps \(training steps\) should be an int with 1 <= steps"),
    ("train/lr-0", lambda: train.train(MODEL, PAIRS, steps=1, lr=0), ValueError,
     r"lr \(the learning rate\) should be a number > 0\.0, got 0"),
    ("train/lr-nan", lambda: train.train(MODEL, PAIRS, steps=1, lr=float("nan")), ValueError,
     r"lr \(the learning rate\) should be a finite number, got nan"),
    ("train/clip-negative", lambda: train.train(MODEL, PAIRS, steps=1, clip=-1.0), ValueError,
     r"clip \(the largest gradient norm\) should be a number > 0\.0"),
    ("train/model-str", lambda: train.train("model", PAIRS), TypeError,
     r"model should be a model \(an nn\.Module such as Seq2Seq\.build\(\.\.\.\)\), got 'model'"),
    ("train/cosine-str", lambda: train.train(MODEL, PAIRS, steps=1, cosine="no"), TypeError,
     r"cosine \(whether the learning rate decays\) should be True or False"),
    ("Translations/empty", lambda: train.Translations([], []).exact_match, ValueError,
     r"pairs should hold at least one pair, got none"),
    ("TrainLog/empty", lambda: train.TrainLog().final_loss, ValueError,
     r"losses should hold at least one step, got none"),
    ("accuracy_by_length/list", lambda: train.accuracy_by_length(MODEL, PAIRS), TypeError,
     r"test should be a dict \{\(lo, hi\): list of Pairs\}.*translate_pairs\(model, pairs\)"),
    # ---- analysis ------------------------------------------------------------------------------------------
    ("word_correct/model-str", lambda: analysis.word_correct("model", PAIRS), TypeError,
     r"model should be a Seq2Seq model, got 'model'"),
    ("word_correct/empty", lambda: analysis.word_correct(MODEL, []), ValueError,
     r"pairs should be a non-empty list of Pairs"),
    ("word_accuracy_by_length/empty-bucket", lambda: analysis.word_accuracy_by_length(MODEL, {(5, 7): []}),
     ValueError, r"test\[\(5, 7\)\] should be a non-empty list of Pairs"),
    ("attention_maps/no-attention", lambda: analysis.attention_maps(FIXED, PAIRS), ValueError,
     r"model should have attention, got a model built with attention=False"),
    ("alignment_accuracy/count", lambda: analysis.alignment_accuracy(MAPS[:2], PAIRS), ValueError,
     r"maps should hold one attention map per pair \(4\), got 2"),
    ("alignment_accuracy/shape", lambda: analysis.alignment_accuracy([m[:, :-1] for m in MAPS], PAIRS), ValueError,
     r"map 0 should have shape \(\d+, \d+\), expected \(target_len, source_len\)"),
    ("alignment_accuracy/numpy", lambda: analysis.alignment_accuracy([m.numpy() for m in MAPS], PAIRS),
     TypeError, r"maps\[0\] should be one of attention maps \(tensors, from attention_maps\), got a NumPy array"),
    ("crossing_rate/empty", lambda: analysis.crossing_rate([], []), ValueError,
     r"pairs should be a non-empty list of Pairs"),
    ("crossing_pairs/str", lambda: analysis.crossing_pairs("0 2 1"), TypeError,
     r"alignment should be a list of source positions \(pair\.alignment\)"),
    ("crossing_pairs/float", lambda: analysis.crossing_pairs([0.5, 1]), TypeError,
     r"alignment\[0\] \(a source position\) should be an int, got 0\.5"),
    ("source_gradient_norms/range", lambda: analysis.source_gradient_norms(MODEL, PAIR, 99), ValueError,
     r"target_step should be in 0\.\.\d+ for this pair, got 99"),
    ("source_gradient_norms/float", lambda: analysis.source_gradient_norms(MODEL, PAIR, 1.0), TypeError,
     r"target_step \(a target position counted from 0\) should be an int, got 1\.0"),
    ("source_gradient_norms/pairs", lambda: analysis.source_gradient_norms(MODEL, PAIRS, 0), TypeError,
     r"pair should be one Pair, got a list"),
    ("alignment_by_word_class/shape", lambda: analysis.alignment_by_word_class(MAPS[1:] + MAPS[:1], PAIRS),
     ValueError, r"map \d should have shape .*expected \(target_len, source_len\)"),
    # ---- tasks ---------------------------------------------------------------------------------------------
    ("neighbour_task/offset-0", lambda: tasks.neighbour_task(2, 8, 5, [0, 1], gen()), ValueError,
     r"offsets should be non-zero positions relative to each token, such as \[-1, 1\], got \[0, 1\]"),
    ("neighbour_task/offset-float", lambda: tasks.neighbour_task(2, 8, 5, [1.5], gen()), TypeError,
     r"offsets\[0\] \(a position relative to each token\) should be an int, got 1\.5"),
    ("neighbour_task/offset-int", lambda: tasks.neighbour_task(2, 8, 5, 1, gen()), TypeError,
     r"offsets should be a list of non-zero ints such as \[-1, 1\], got 1"),
    ("neighbour_task/seed-for-generator", lambda: tasks.neighbour_task(2, 8, 5, [1], 0), TypeError,
     r"generator should be a torch\.Generator, got 0 \(an int\); pass torch\.Generator\(\)\.manual_seed\(seed\)"),
    ("neighbour_task/batch-0", lambda: tasks.neighbour_task(0, 8, 5, [1], gen()), ValueError,
     r"batch \(sequences\) should be an int with 1 <= batch"),
    ("CharCorpus.decode/negative", lambda: CORPUS.decode([-1]), ValueError,
     r"ids should be in 0\.\.2 \(the corpus has 3 characters\), got \[-1\]; a negative id is not counted"),
    ("CharCorpus.decode/too-large", lambda: CORPUS.decode([5]), ValueError, r"ids should be in 0\.\.2"),
    ("CharCorpus.decode/float", lambda: CORPUS.decode([1.5]), TypeError,
     r"ids\[0\] \(a character id\) should be an int, got 1\.5"),
    ("CharCorpus.encode/unknown", lambda: CORPUS.encode("abz"), ValueError,
     r"text should use only characters of the corpus, got characters \['z'\]"),
    ("CharCorpus.encode/ids", lambda: CORPUS.encode([0, 1]), TypeError, r"text should be a str, got a list"),
    ("CharCorpus.batch/too-long", lambda: CORPUS.batch(2, 100, gen()), ValueError,
     r"length should be at most 28 for the train split, got 100"),
    ("CharCorpus.batch/split", lambda: CORPUS.batch(2, 3, gen(), split="test"), ValueError,
     r"split should be one of \('train', 'valid'\), got 'test'"),
    ("CharCorpus.batch/seed", lambda: CORPUS.batch(2, 3, 0), TypeError, r"generator should be a torch\.Generator"),
    # ---- transformer ---------------------------------------------------------------------------------------
    ("attention_parameters/zero", lambda: transformer.attention_parameters(0), ValueError,
     r"d_model \(the model width\) should be an int with 1 <= d_model"),
    ("block_parameters/float", lambda: transformer.block_parameters(8, 32.0), TypeError,
     r"d_ff \(the feed-forward width\) should be an int, got 32\.0"),
    ("AttentionClassifier/seq_len", lambda: CLASSIFIER(TOKENS[:, :5]), ValueError,
     r"tokens should be sequences of seq_len=6, got sequences of 5"),
    ("AttentionClassifier/float", lambda: CLASSIFIER(TOKENS.float()), TypeError,
     r"tokens should be token ids \(an integer dtype such as torch\.long\)"),
    ("AttentionClassifier/out-of-vocab", lambda: CLASSIFIER(TOKENS + 10), ValueError,
     r"tokens should be token ids in 0\.\.9 \(a vocabulary of 10 words\)"),
    ("AttentionClassifier/vocab-0", lambda: transformer.AttentionClassifier(0, 6, 8, 2, 2, 3), ValueError,
     r"vocab_size \(a size\) should be an int with 1 <= vocab_size"),
    ("Block/d_ff-0", lambda: transformer.Block(8, 2, 0), ValueError,
     r"d_ff \(the feed-forward width\) should be an int with 1 <= d_ff"),
    ("TinyTransformer/positions-typo", lambda: transformer.TinyTransformer(10, 10, positions="sinusoid"),
     ValueError, r"positions should be one of \('none', 'sinusoidal', .*did you mean 'sinusoidal'"),
    ("TinyTransformer/causal-str", lambda: transformer.TinyTransformer(10, 10, causal="no"), TypeError,
     r"causal \(.*\) should be True or False, got 'no'"),
    ("TinyTransformer/num_layers-negative", lambda: transformer.TinyTransformer(10, 10, num_layers=-1), ValueError,
     r"num_layers \(Transformer blocks\) should be an int with 0 <= num_layers"),
    ("TinyTransformer/too-long", lambda: TINY(torch.zeros(1, 9, dtype=torch.long)), ValueError,
     r"a learned position table of 8 rows has no vector for position 8 or later"),
    ("TinyTransformer/out-of-vocab", lambda: TINY(TOKENS + 10), ValueError,
     r"tokens should be token ids in 0\.\.9"),
    ("TinyTransformer/causal-override-str", lambda: TINY(TOKENS, causal="no"), TypeError,
     r"causal \(whether to mask the future\) should be True or False"),
    ("TinyTransformer/tokens-1d", lambda: TINY(TOKENS[0]), ValueError,
     r"tokens should be of shape \(batch, seq_len\) of token ids \(2 dimensions\).*tokens\[None\]"),
    # ---- runtime -------------------------------------------------------------------------------------------
    ("setup_notebook/negative-seed", lambda: runtime.setup_notebook(-1), ValueError,
     r"seed \(the random seed\) should be an int with 0 <= seed <= 4294967295"),
    ("setup_notebook/float-seed", lambda: runtime.setup_notebook(1.5), TypeError,
     r"seed \(the random seed\) should be an int, got 1\.5"),
    ("setup_notebook/threads-0", lambda: runtime.setup_notebook(0, threads=0), ValueError,
     r"threads \(torch threads\) should be an int with 1 <= threads"),
    ("training_seed/str", lambda: runtime.training_seed("0"), TypeError, r"seed should be an int, got str"),
    ("seeded/float", lambda: in_seeded(0.5), TypeError, r"seed should be an int, got float"),
    ("rounded/numpy-float32", lambda: runtime.rounded(np.float32(0.25)), TypeError,
     r"x should be a tensor, a float or an int, got float32.*float\(x\)"),
    ("rounded/decimals-float", lambda: runtime.rounded(0.25, decimals=1.5), TypeError,
     r"decimals \(decimal places\) should be an int, got 1\.5"),
    ("progress/negative", lambda: runtime.progress(-1, "x"), ValueError,
     r"total \(the number of steps\) should be an int with 0 <= total"),
    # ---- plots ---------------------------------------------------------------------------------------------
    ("plot_attention/scores", lambda: plots.plot_attention(rand(2, 3) * 5, "abc", "xy", ax=ax()), ValueError,
     r"weights should be attention weights in \[0, 1\].*apply the softmax first, or draw scores with plot_matrix"),
    ("plot_attention/nan", lambda: plots.plot_attention(torch.full((2, 3), float("nan")), "abc", "xy", ax=ax()),
     ValueError, r"weights should be finite numbers, got 6 NaN or infinite entries"),
    ("plot_attention/3d", lambda: plots.plot_attention(WEIGHTS[None], "abc", "xy", ax=ax()), ValueError,
     r"weights should be \(target_len, source_len\), got shape \(1, 2, 3\)"),
    ("plot_attention/labels", lambda: plots.plot_attention(WEIGHTS, "ab", "xy", ax=ax()), ValueError,
     r"weights should have shape \(len\(target\), len\(source\)\) = \(2, 2\), got shape \(2, 3\)"),
    ("plot_attention/gold-range", lambda: plots.plot_attention(WEIGHTS, "abc", "xy", gold=[0, 3], ax=ax()),
     ValueError, r"gold\[1\] \(a source position counted from 0\) should be an int with 0 <= gold\[1\] <= 2"),
    ("plot_attention/gold-length", lambda: plots.plot_attention(WEIGHTS, "abc", "xy", gold=[0], ax=ax()),
     ValueError, r"gold should have one entry per target word \(2\), got 1"),
    ("plot_attention/highlight", lambda: plots.plot_attention(WEIGHTS, "abc", "xy", ax=ax(), highlight_row=2),
     ValueError, r"highlight_row \(a row counted from 0\) should be an int with 0 <= highlight_row <= 1"),
    ("plot_attention/bool", lambda: plots.plot_attention(WEIGHTS > 0.3, "abc", "xy", ax=ax()), TypeError,
     r"weights should be numbers in \[0, 1\], got a bool tensor; a mask is drawn with plot_mask"),
    ("plot_attention_step/step-2", lambda: plots.plot_attention_step(WEIGHTS, "abc", "xy", 2, ax()), ValueError,
     r"step should be in 0\.\.1, got 2: steps count from 0"),
    ("plot_attention_step/float", lambda: plots.plot_attention_step(WEIGHTS, "abc", "xy", 1.0, ax()), TypeError,
     r"step \(a decoder step counted from 0\) should be an int, got 1\.0"),
    ("plot_accuracy_by_length/empty", lambda: plots.plot_accuracy_by_length({}, ax()), ValueError,
     r"curves should be a non-empty dict \{label: \{\(lo, hi\): accuracy\}\}"),
    ("plot_accuracy_by_length/percent", lambda: plots.plot_accuracy_by_length({"a": {(5, 7): 87.5}}, ax()),
     ValueError, r"curves\['a'\]\[\(5, 7\)\] should be an accuracy in \[0, 1\], got 87\.5.*divide percentages"),
    ("plot_softmax_scaling/dims-0", lambda: plots.plot_softmax_scaling(Figure(), [0]), ValueError,
     r"dims\[0\] \(head sizes d_k\) should be an int with 1 <= dims\[0\]"),
    ("plot_mask/float", lambda: plots.plot_mask(torch.ones(3, 3), ax()), TypeError,
     r"mask should be a \(query_len, key_len\) bool mask \(True = may attend\), got dtype torch\.float32"),
    ("plot_mask/3d", lambda: plots.plot_mask(torch.ones(1, 3, 3, dtype=torch.bool), ax()), ValueError,
     r"mask should be a \(query_len, key_len\) bool mask, got shape \(1, 3, 3\)"),
    ("plot_matrix/nan", lambda: plots.plot_matrix(torch.tensor([[1.0, float("nan")]]), ax()), ValueError,
     r"matrix should be finite numbers, got 1 NaN or infinite entries"),
    ("plot_matrix/3d", lambda: plots.plot_matrix(torch.ones(2, 2, 2), ax()), ValueError,
     r"matrix should be 2-D, got shape \(2, 2, 2\)"),
    ("plot_encoding_waves/pair", lambda: plots.plot_encoding_waves(Figure(), 8, [4]), ValueError,
     r"pairs should be in 0\.\.3 for d_model=8, got pair 4"),
    ("online_softmax_steps/empty", lambda: plots.online_softmax_steps(torch.tensor([]), 2), ValueError,
     r"row should be a non-empty 1-D tensor of scores, got shape \(0,\)"),
    ("online_softmax_steps/block-0", lambda: plots.online_softmax_steps(torch.arange(4.0), 0), ValueError,
     r"block_size \(scores per block\) should be an int with 1 <= block_size"),
    ("plot_online_softmax/step", lambda: plots.plot_online_softmax(Figure(), torch.arange(4.0), 2, [3]),
     ValueError, r"steps should be in 1\.\.2 \(one per block\), got step 3"),
    # ---- widgets -------------------------------------------------------------------------------------------
    ("ScalingExplorer/empty", lambda: widgets.ScalingExplorer([]), TypeError,
     r"dims should be a non-empty list, got a list of 0 items"),
    ("ScalingExplorer/float", lambda: widgets.ScalingExplorer([2.5]), TypeError,
     r"dims\[0\] \(a head size d_k\) should be an int, got 2\.5"),
    ("MaskExplorer/length", lambda: widgets.MaskExplorer(30), ValueError,
     r"length \(the starting sequence length\) should be an int with 2 <= length <= 24"),
    ("draw_mask/kind", lambda: widgets.draw_mask(Figure(), "diagonal", 5, 3, 1), ValueError,
     r"kind should be one of \('causal', 'padding',"),
    ("EncodingExplorer/odd", lambda: widgets.EncodingExplorer(d_model=7), ValueError, r"d_model should be even"),
    ("OnlineSoftmaxStepper/empty", lambda: widgets.OnlineSoftmaxStepper([], 2), ValueError,
     r"row should be a non-empty 1-D tensor of scores"),
    ("AttentionStepper/scores", lambda: widgets.AttentionStepper(rand(2, 3) * 5, "abc", "xy"), ValueError,
     r"weights should be attention weights in \[0, 1\]"),
    ("AttentionStepper/gold", lambda: widgets.AttentionStepper(WEIGHTS, "abc", "xy", gold=[0, 5]), ValueError,
     r"gold\[1\] \(a source position counted from 0\) should be an int with 0 <= gold\[1\] <= 2"),
    ("FigureSlider/draw", lambda: widgets.FigureSlider(widgets.widgets.IntSlider(), "draw", (2, 2)), TypeError,
     r"draw should be a function draw\(fig, \*values\)"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, pattern", [row[1:] for row in BAD_CALLS], ids=[row[0] for row in BAD_CALLS])
def test_bad_call_raises_a_clear_error(call, error, pattern):
    with pytest.raises(error) as caught:
        call()
    assert type(caught.value) is error, f"raised {type(caught.value).__name__}: {caught.value}"
    assert re.search(pattern, str(caught.value)), f"message does not name what was expected: {caught.value}"


def test_the_table_is_large_and_its_ids_unique():
    ids = [row[0] for row in BAD_CALLS]
    assert len(ids) >= 150 and len(set(ids)) == len(ids)
    # Every regex checks the words that say what was expected; the few messages of another form (kept
    # because a lesson prints them) still name it.
    other_forms = ("expected", "line up", "no determiner", "no vector", "num_heads=4")
    assert all("should" in pattern or any(f in pattern for f in other_forms) for *_, pattern in BAD_CALLS)


# ---- documented behaviours: odd inputs with a correct answer -----------------------------------------------

NAN, INF = float("nan"), float("inf")
ONE_ROW_MASKED = torch.tensor([[True, True, False], [False, False, False]])


def _rope_fractional():
    return positional.apply_rope(rand(1, 3, 4), torch.tensor([0.0, 0.5, 1.0]))


DOCUMENTED = [
    ("masked_softmax/fully-masked-row-is-zeros",
     lambda: masked_softmax(rand(2, 3), ONE_ROW_MASKED)[1], lambda r: torch.equal(r, torch.zeros(3))),
    ("masked_softmax/nan-at-allowed-position-is-not-hidden",
     lambda: masked_softmax(torch.tensor([[0.0, NAN, 1.0]]), torch.ones(1, 3, dtype=torch.bool)),
     lambda r: bool(torch.isnan(r).all())),
    ("masked_softmax/inf-at-allowed-position-is-not-hidden",
     lambda: masked_softmax(torch.tensor([[0.0, INF, 1.0]]), torch.ones(1, 3, dtype=torch.bool)),
     lambda r: bool(torch.isnan(r).any())),
    ("masked_softmax/nan-without-mask-is-not-hidden",
     lambda: masked_softmax(torch.tensor([[0.0, NAN]]), None), lambda r: bool(torch.isnan(r).all())),
    ("masked_softmax/masked-position-value-never-matters",
     lambda: masked_softmax(torch.tensor([[0.0, 0.0, NAN]]), torch.tensor([[True, True, False]])),
     lambda r: torch.allclose(r, torch.tensor([[0.5, 0.5, 0.0]]))),
    ("sdpa/fully-masked-query-gives-zero-output",
     lambda: scaled_dot_product_attention(Q4, Q4, Q4, torch.zeros(1, 1, 3, 3, dtype=torch.bool))[0],
     lambda r: torch.equal(r, torch.zeros_like(Q4))),
    ("sdpa/nan-query-is-not-hidden",
     lambda: scaled_dot_product_attention(torch.full((1, 2, 4), NAN), rand(1, 2, 4), rand(1, 2, 4))[0],
     lambda r: bool(torch.isnan(r).all())),
    ("sdpa/causal-and-mask-both-apply",
     lambda: scaled_dot_product_attention(Q4, Q4, Q4, torch.tensor([False, True, True]).expand(1, 1, 3, 3),
                                          is_causal=True)[1][0, 0],  # fmt: skip
     lambda r: torch.equal(r[0], torch.zeros(3)) and float(r[1, 1]) == 1.0),
    ("context/tgt-steps-at-once", lambda: context_vector(rand(2, 3, 5), H).shape,
     lambda r: r == (2, 3, 6)),
    ("additive/v_a-as-linear-weight", lambda: (additive_score(S, H, W, U, V[None]), additive_score(S, H, W, U, V)),
     lambda r: torch.equal(*r)),
    ("local_p/integer-centres-accepted", lambda: local_p_weights(SCORES, torch.tensor([1, 2]), 1).shape,
     lambda r: r == (2, 5)),
    ("padding_mask/full-lengths-all-true", lambda: masks.padding_mask(torch.tensor([4, 4]), 4),
     lambda r: bool(r.all())),
    ("causal_mask/numpy-int-accepted", lambda: masks.causal_mask(np.int64(3)), lambda r: r.shape == (3, 3)),
    ("causal_mask/int-tensor-accepted", lambda: masks.causal_mask(torch.tensor(3)), lambda r: r.shape == (3, 3)),
    ("from_additive/round-trip", lambda: masks.from_additive(masks.to_additive(ONE_ROW_MASKED)),
     lambda r: torch.equal(r, ONE_ROW_MASKED)),
    ("apply_rope/fractional-positions-accepted", _rope_fractional, lambda r: bool(torch.isfinite(r).all())),
    ("Vocab.decode/tensor-row-stops-at-eos", lambda: TARGET_VOCAB.decode(BATCH.tgt_out[0]),
     lambda r: r == list(PAIR.target)),
    ("Vocab.decode/numpy-ints-accepted", lambda: SOURCE_VOCAB.decode(list(np.array([5, 6]))),
     lambda r: len(r) == 2),
    ("make_pairs/zero-pairs-is-empty", lambda: data.make_pairs(0, 5, 7, seed=0), lambda r: r == []),
    ("sequence_loss/nan-logits-are-not-hidden",
     lambda: train.sequence_loss(torch.full((2, 3, 7), NAN), TARGETS), lambda r: bool(torch.isnan(r))),
    ("sequence_loss/partial-padding-is-ignored",
     lambda: (train.sequence_loss(LOGITS, TARGETS), train.sequence_loss(LOGITS[:1], TARGETS[:1]),
              train.sequence_loss(LOGITS[1:, :2], TARGETS[1:, :2])),  # fmt: skip
     lambda r: torch.allclose(r[0], (3 * r[1] + 2 * r[2]) / 5)),
    ("TinyTransformer/zero-layers-allowed",
     lambda: transformer.TinyTransformer(10, 10, d_model=8, num_heads=2, num_layers=0)(TOKENS).shape,
     lambda r: r == (2, 6, 10)),
    ("draw_mask/more-real-tokens-than-length-means-no-padding",
     lambda: widgets.draw_mask(Figure(), "padding", 4, 10, 1), lambda r: r is None),
    ("plot_attention/numpy-weights-accepted",
     lambda: plots.plot_attention(WEIGHTS.numpy(), "abc", "xy", ax=ax()), lambda r: r is not None),
    ("translate_pairs/batch-larger-than-pairs", lambda: len(train.translate_pairs(MODEL, PAIRS, 10_000).predictions),
     lambda r: r == len(PAIRS)),
]  # fmt: skip


@pytest.mark.parametrize("call, holds", [row[1:] for row in DOCUMENTED], ids=[row[0] for row in DOCUMENTED])
def test_documented_behaviour(call, holds):
    assert holds(call())


# ---- property: random wrong ranks and mismatched batches ------------------------------------------------

# Each spec: a function of named tensors, how to make valid ones for a batch, and for every argument its
# allowed ranks and the shape its message must name; ``batch`` lists the arguments whose size in dimension
# 0 must agree with the first argument's, with the words the message must then use.
SPECS = {
    "additive_score": dict(
        call=lambda a: additive_score(a["query"], a["keys"], W, U, V),
        make=lambda b, n: {"query": rand(b, 4), "keys": rand(b, n, 6)},
        ranks={"query": ((2, 3), r"\(batch, dec_dim\) or \(batch, tgt_len, dec_dim\)"),
               "keys": ((3,), r"\(batch, src_len, enc_dim\)")},
        batch={"keys": r"the batch size of query"}),
    "dot_score": dict(
        call=lambda a: dot_score(a["query"], a["keys"]),
        make=lambda b, n: {"query": rand(b, n, 4), "keys": rand(b, n + 1, 4)},
        ranks={"query": ((2, 3), r"\(batch, dec_dim\) or \(batch, tgt_len, dec_dim\)"),
               "keys": ((3,), r"\(batch, src_len, enc_dim\)")},
        batch={"keys": r"the batch size of query"}),
    "additive_score_projected": dict(
        call=lambda a: additive_score_projected(a["projected_query"], a["projected_keys"], V),
        make=lambda b, n: {"projected_query": rand(b, 3), "projected_keys": rand(b, n, 3)},
        ranks={"projected_query": ((2, 3), r"\(batch, attn_dim\) or \(batch, tgt_len, attn_dim\)"),
               "projected_keys": ((3,), r"\(batch, src_len, attn_dim\)")},
        batch={"projected_keys": r"the batch size of the query"}),
    "context_vector": dict(
        call=lambda a: context_vector(a["weights"], a["values"]),
        make=lambda b, n: {"weights": rand(b, n), "values": rand(b, n, 6)},
        ranks={"weights": ((2, 3), r"\(batch, src_len\) or \(batch, tgt_len, src_len\)"),
               "values": ((3,), r"\(batch, src_len, enc_dim\)")},
        batch={"values": r"\(batch, src_len\) = "}),
    "AdditiveAttention": dict(
        call=lambda a: ATTN(a["query"], a["keys"], a["mask"]),
        make=lambda b, n: {"query": rand(b, 4), "keys": rand(b, n, 6), "mask": torch.ones(b, n, dtype=torch.bool)},
        ranks={"query": ((2,), r"\(batch, dec_dim\)"), "keys": ((3,), r"\(batch, src_len, enc_dim\)")},
        batch={"keys": r"the batch size of query", "mask": r"the shape of the scores"}),
    "LuongAttention": dict(
        call=lambda a: LUONG(a["query"], a["keys"], a["mask"]),
        make=lambda b, n: {"query": rand(b, 2, 4), "keys": rand(b, n, 6), "mask": torch.ones(b, n, dtype=torch.bool)},
        ranks={"query": ((3,), r"\(batch, tgt_len, dec_dim\)"), "keys": ((3,), r"\(batch, src_len, enc_dim\)"),
               "mask": ((2,), r"\(batch, src_len\)")},
        batch={"keys": r"the batch size of query", "mask": r"\(batch, src_len\) = "}),
    "scaled_dot_product_attention": dict(
        call=lambda a: scaled_dot_product_attention(a["query"], a["key"], a["value"]),
        make=lambda b, n: {"query": rand(b, 2, n, 8), "key": rand(b, 2, n + 1, 8), "value": rand(b, 2, n + 1, 8)},
        ranks={"query": ((2, 3, 4, 5), r"\(\.\.\., query_len, head_dim\)")},
        batch={"key": r"leading \(batch, heads, \.\.\.\) dims", "value": r"leading \(batch, heads, \.\.\.\) dims"}),
    "MultiHeadAttention": dict(
        call=lambda a: MHA(a["query"], a["key"], a["value"]),
        make=lambda b, n: {"query": rand(b, n, 8), "key": rand(b, n + 1, 8), "value": rand(b, n + 1, 8)},
        ranks={"query": ((3,), r"\(batch, query_len, d_model\)"), "key": ((3,), r"\(batch, key_len, d_model\)"),
               "value": ((3,), r"\(batch, key_len, d_model\)")},
        batch={"key": r"the same batch", "value": r"the same batch"}),
    "sequence_loss": dict(
        call=lambda a: train.sequence_loss(a["logits"], a["targets"]),
        make=lambda b, n: {"logits": rand(b, n, 7), "targets": torch.randint(1, 7, (b, n), generator=g)},
        ranks={"logits": ((3,), r"\(batch, tgt_len, vocab\)"), "targets": ((2,), r"\(batch, tgt_len\)")},
        batch={"targets": r"\(batch, tgt_len\) = "}),
    "split_heads": dict(
        call=lambda a: multihead.split_heads(a["x"], 2),
        make=lambda b, n: {"x": rand(b, n, 8)},
        ranks={"x": ((3,), r"\(batch, seq_len, d_model\)")}, batch={}),
    "padding_mask": dict(
        call=lambda a: masks.padding_mask(a["lengths"], 8),
        make=lambda b, n: {"lengths": torch.randint(1, 9, (b,), generator=g)},
        ranks={"lengths": ((1,), r"\(batch,\)")}, batch={}),
}  # fmt: skip


def _wrong_rank_tensor(like: torch.Tensor, allowed: tuple[int, ...], draw: random.Random) -> torch.Tensor:
    rank = draw.choice([r for r in range(0, 6) if r not in allowed])
    shape = [draw.randint(1, 4) for _ in range(rank)]
    return torch.randn(shape, generator=g).to(like.dtype) if like.is_floating_point() else torch.ones(
        shape, dtype=like.dtype
    )


def test_random_wrong_ranks_and_batches_raise_value_error_naming_the_shape():
    draw = random.Random(20240608)
    tried = {"rank": 0, "batch": 0}
    for _ in range(400):
        name = draw.choice(sorted(SPECS))
        spec = SPECS[name]
        batch, length = draw.randint(1, 4), draw.randint(1, 5)
        args = spec["make"](batch, length)
        spec["call"](args)  # the valid call works
        kind = draw.choice(["rank", "batch"] if spec["batch"] else ["rank"])
        if kind == "rank":
            arg = draw.choice(sorted(spec["ranks"]))
            allowed, shape_doc = spec["ranks"][arg]
            args[arg] = _wrong_rank_tensor(args[arg], allowed, draw)
            pattern = rf"{arg} should (be of|have) shape {shape_doc}"
        else:
            arg = draw.choice(sorted(spec["batch"]))
            other = draw.choice([b for b in range(1, 6) if b != batch])
            args[arg] = args[arg][:1].expand(other, *args[arg].shape[1:]).contiguous()
            pattern = spec["batch"][arg]
        with pytest.raises(ValueError) as caught:
            spec["call"](args)
        message = str(caught.value)
        assert type(caught.value) is ValueError and re.search(pattern, message), (name, kind, arg, message)
        assert "should" in message or "expected" in message, message
        tried[kind] += 1
    assert tried["rank"] > 100 and tried["batch"] > 50
