"""Diagnoses that several lessons' exercises share, written once. A lesson's own diagnoses stay in its module."""

TRANSPOSED_SCORES = "the output is transposed: (src_len, batch) instead of (batch, src_len). Keep the batch first."
MASKED_WITH_ZERO = (
    "the masked scores became 0 instead of -inf before the softmax. exp(0) = 1 is not small: a masked position "
    "must get score -inf so that exp(-inf) = 0."
)
MASKED_AFTER_SOFTMAX = (
    "your weights are the unmasked softmax with the masked weights set to 0 afterwards, without renormalising, "
    "so they do not sum to one. Mask the scores with -inf before the softmax instead."
)
