"""Cache sizes (lesson 10, "The KV cache", "Sharing keys and values: MQA and GQA", "Multi-head latent attention",
"What MLA costs in compute"): the bytes a cache holds and what a decoding step reads and computes, by formula.

    kv_cache_bytes       2 (K and V) * layers * H_kv * d * bytes per number, per token (and per sequence)
    mla_cache_bytes      the same for a latent cache: layers * (d_c + d_r) * bytes per number, per token
    decode_step_costs    numbers read and multiply-adds per cached token of one decoding step: MHA, MLA absorbed,
                         MLA with its keys and values recomputed
    MODEL_CONFIGS, LLAMA2_7B_PARAMETERS, DEEPSEEK_V2   published configurations to put in them

Each function checks its arguments in one call (the checks are at the end of this module), then computes.
"""

from __future__ import annotations

from ._validate import check_int, check_positive_int

# Published configurations (layers, query heads, key/value heads, head_dim; the context length the model was released
# with and, for Mistral-7B v0.1, its sliding window); MLA: latent d_c and decoupled RoPE key
MODEL_CONFIGS = {
    "Llama-2-7B (MHA)": dict(num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, context=4096),
    "Llama-3-8B (GQA-8)": dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, context=8192),
    "Mistral-7B (GQA-8)": dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, context=8192, window=4096),
    "Llama-3-70B (GQA-8)": dict(num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128, context=8192),
    "Falcon-7B (MQA)": dict(num_layers=32, num_heads=71, num_kv_heads=1, head_dim=64, context=2048),
}
LLAMA2_7B_PARAMETERS = 6_738_415_616  # the released checkpoint's parameter count (for the weights read per step)
DEEPSEEK_V2 = dict(num_layers=60, num_heads=128, head_dim=128, latent_dim=512, rope_dim=64)


def kv_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, bytes_per_number: int = 2, tokens: int = 1, batch: int = 1,
    window: int | None = None,
) -> int:  # fmt: skip
    """2 (K and V) * layers * H_kv * head_dim * bytes per number * tokens * batch. Per token of Llama-2-7B in fp16:
    2 * 32 * 32 * 128 * 2 = 524,288 bytes (512 KiB). With a sliding ``window`` (a rolling buffer), at most
    ``window`` tokens are kept: tokens is replaced by min(tokens, window)."""
    bytes_per_number, window = _check_kv_cache_bytes(num_layers, num_kv_heads, head_dim, bytes_per_number, tokens,
                                                     batch, window)  # fmt: skip
    if window is not None:
        tokens = min(tokens, window)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * tokens * batch


def mla_cache_bytes(
    num_layers: int, latent_dim: int, rope_dim: int = 0, bytes_per_number: int = 2, tokens: int = 1, batch: int = 1
) -> int:
    """Multi-head latent attention caches one latent c (d_c numbers) and one shared RoPE key (rope_dim) per token and
    layer, whatever the number of heads: layers * (d_c + rope_dim) * bytes * tokens * batch."""
    bytes_per_number, rope_dim = _check_mla_cache_bytes(num_layers, latent_dim, rope_dim, bytes_per_number, tokens,
                                                        batch)  # fmt: skip
    return num_layers * (latent_dim + rope_dim) * bytes_per_number * tokens * batch


def decode_step_costs(num_heads: int, head_dim: int, latent_dim: int, rope_dim: int = 0) -> dict[str, dict[str, int]]:
    """What one decoding step of one layer costs **per cached token**: numbers read from the cache, and
    multiply-adds of the attention over it (the new token's own projections cost the same whatever the length, and
    are left out). H heads of d, latent d_c, RoPE key d_r:

                              numbers read   multiply-adds
        MHA                       2 H d          H d (scores) + H d (weighted sum)
        MLA, absorbed             d_c + d_r      H (d_c + d_r) + H d_c
        MLA, keys recomputed      d_c + d_r      2 d_c H d (k = c W_uk, v = c W_uv) + H (d + d_r) + H d

    The absorbed form compares each head's query with the latents in the latent space (d_c numbers, not d), so it
    reads less and computes more per token than MHA when d_c > d; recomputing the keys and values keeps the cache
    small and pays 2 d_c H d multiply-adds per cached token at every step. -> {name: {"numbers read", "multiply-adds"}}.
    """
    _check_decode_step_costs(num_heads, head_dim, latent_dim, rope_dim)
    H, d, c, r = num_heads, head_dim, latent_dim, rope_dim
    return {
        "MHA": {"numbers read": 2 * H * d, "multiply-adds": 2 * H * d},
        "MLA, absorbed": {"numbers read": c + r, "multiply-adds": H * (c + r) + H * c},
        "MLA, keys recomputed": {"numbers read": c + r, "multiply-adds": 2 * c * H * d + H * (d + r) + H * d},
    }


# --------------------------------------------------------------------------------------------
# Input checks (each public function above calls its own first; one form of message: attnedu._validate)
# --------------------------------------------------------------------------------------------


def _check_bytes_per_number(value) -> int:
    value = check_positive_int("bytes_per_number", value, "bytes of one stored number")
    if value not in (1, 2, 4, 8):
        raise ValueError(f"bytes_per_number should be 1 (8-bit), 2 (fp16/bf16), 4 (fp32) or 8 (fp64), got {value}"
                         + ("; that counts bits: fp16 is 2 bytes" if value in (16, 32, 64) else ""))  # fmt: skip
    return value


def _check_kv_cache_bytes(num_layers, num_kv_heads, head_dim, bytes_per_number, tokens, batch, window) -> tuple:
    """-> bytes_per_number, window."""
    for name, value, meaning in (("num_layers", num_layers, "layers"), ("num_kv_heads", num_kv_heads, "K/V heads"),
                                 ("head_dim", head_dim, "features per head"), ("tokens", tokens, "cached tokens"),
                                 ("batch", batch, "sequences")):  # fmt: skip
        check_positive_int(name, value, meaning)
    bytes_per_number = _check_bytes_per_number(bytes_per_number)
    if window is not None:
        window = check_positive_int("window", window, "tokens a rolling buffer keeps")
    return bytes_per_number, window


def _check_mla_cache_bytes(num_layers, latent_dim, rope_dim, bytes_per_number, tokens, batch) -> tuple[int, int]:
    for name, value in (("num_layers", num_layers), ("latent_dim", latent_dim), ("tokens", tokens),
                        ("batch", batch)):  # fmt: skip
        check_positive_int(name, value, "a size")
    bytes_per_number = _check_bytes_per_number(bytes_per_number)
    rope_dim = check_int("rope_dim", rope_dim, "features of the decoupled RoPE key", minimum=0)
    if rope_dim % 2:
        raise ValueError(f"rope_dim should be even (RoPE turns pairs of features), got {rope_dim}")
    return bytes_per_number, rope_dim


def _check_decode_step_costs(num_heads, head_dim, latent_dim, rope_dim) -> None:
    for name, value in (("num_heads", num_heads), ("head_dim", head_dim), ("latent_dim", latent_dim)):
        check_positive_int(name, value, "a size")
    check_int("rope_dim", rope_dim, "features of the decoupled RoPE key", minimum=0)
