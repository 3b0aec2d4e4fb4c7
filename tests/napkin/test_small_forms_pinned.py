"""Two small closed forms by hand (mutation, issue 42): causal (query, key) pairs with and
without a sliding window, and a norm's saved bytes under autocast."""

from __future__ import annotations

from tensorledger.napkin.activations import _autocast_norm_bytes
from tensorledger.napkin.serving import _causal_pairs
from tensorledger.napkin.transformer import TransformerConfig


def test_causal_pairs_halve_the_square_and_a_window_caps_the_keys() -> None:
    assert _causal_pairs(10, None) == 50.0  # 10² / 2
    assert _causal_pairs(10, 10) == 50.0  # a window as long as the context changes nothing
    assert _causal_pairs(10, 11) == 50.0
    assert _causal_pairs(10, 4) == 32.0  # 4² / 2 for the first 4, then 6 queries · 4 keys


def test_a_norm_under_autocast_keeps_fp32_input_and_statistics() -> None:
    base = {"name": "n", "vocab_size": 11, "context_length": 13, "d_model": 24,
            "n_layers": 2, "n_heads": 3}
    layer = TransformerConfig(**base)  # type: ignore[arg-type]
    rms = TransformerConfig(**base, norm="rmsnorm", bias=False)  # type: ignore[arg-type]
    # 5 tokens of 24: LayerNorm's fp32 input 4·5·24 and mean and rstd, 2·4·5
    assert _autocast_norm_bytes(layer, 5) == 520
    # RMSNorm's fp32 input, its rstd 4·5, and its fp32 normalised input 4·5·24
    assert _autocast_norm_bytes(rms, 5) == 980
