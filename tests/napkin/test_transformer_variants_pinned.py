"""A Transformer config's refusals at each rule's edge, the mixture-of-experts and latent
attention options among them, and a preset's parameter record (mutation, issue 42)."""

from __future__ import annotations

import pytest

from tensorledger.errors import ModelError
from tensorledger.napkin.moe import MLAConfig, MoEConfig
from tensorledger.napkin.params import parameter_count
from tensorledger.napkin.transformer import (
    PRESETS,
    ModelParams,
    TransformerConfig,
    preset_params,
)

MOE = MoEConfig(n_experts=3, top_k=2, d_expert=5)
MLA = MLAConfig(kv_lora_rank=4, qk_nope_dim=3, qk_rope_dim=2, v_head_dim=5)
SPARSE = {"mlp": "swiglu", "norm": "rmsnorm", "positions": "rope", "bias": False}


def _config(**change: object) -> TransformerConfig:
    fields: dict[str, object] = {"name": "probe", "vocab_size": 11, "context_length": 13,
                                 "d_model": 24, "n_layers": 2, "n_heads": 3, **change}
    return TransformerConfig(**fields)  # type: ignore[arg-type]


def test_the_edges_that_are_accepted() -> None:
    # learned positions take an odd head (15 / 5 = 3); dropout just under 1
    assert _config(d_model=15, n_heads=5).head_dim == 3
    assert _config(dropout=0.99).dropout == 0.99
    # experts may leave every layer dense (first_dense_layers = n_layers)
    moe = MoEConfig(n_experts=3, top_k=2, d_expert=5, first_dense_layers=2)
    assert _config(moe=moe, **SPARSE).moe == moe
    assert _config(mla=MLA, **SPARSE).mla == MLA
    assert _config(qk_norm=True, **SPARSE).qk_norm  # a q/k norm without latent attention
    assert _config(mtp_depth=0, mtp_loss_weight=0).mtp_loss_weight == 0


def _refused(message: str, **change: object) -> None:
    with pytest.raises(ModelError, match=f"^model 'probe': {message}"):
        _config(**change)


@pytest.mark.parametrize(("change", "message"), [
    # 24 / 3 = 8 is even; a head of 5 is not
    ({"head_dim": 5, **SPARSE}, "rotary positions need an even head_dim, got 5"),
    ({"norm": "rmsnorm", "bias": True}, "RMSNorm has no bias"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
    ({"dropout": 1.5}, r"dropout must be in \[0, 1\), got 1.5"),
    ({"moe": "experts"}, "moe must be a MoEConfig, got str"),
    ({"mla": 4}, "mla must be an MLAConfig, got int"),
    ({"moe": MoEConfig(n_experts=3, top_k=2, d_expert=5, first_dense_layers=3), **SPARSE},
     "3 dense layers first, but only 2 layers"),
    ({"moe": MOE}, "experts and latent attention are written for SwiGLU"),  # GELU, LayerNorm
    ({"moe": MOE, **{**SPARSE, "mlp": "gelu"}}, "experts and latent attention"),
    ({"moe": MOE, **{**SPARSE, "norm": "layernorm"}}, "experts and latent attention"),
    ({"moe": MOE, **{**SPARSE, "positions": "learned"}}, "experts and latent attention"),
    ({"mla": MLA, **{**SPARSE, "positions": "learned"}}, "experts and latent attention"),
    ({"mla": MLA, "qk_norm": True, **SPARSE}, "qk_norm is for Q/K/V attention"),
    ({"mtp_depth": -1}, r"mtp_depth must be a whole number >= 0 \(0 derives it\), got -1"),
    ({"mtp_loss_weight": -1.0}, "mtp_loss_weight must be a finite number >= 0, got -1.0"),
    ({"mtp_loss_weight": float("inf")}, "mtp_loss_weight must be a finite number >= 0, got inf"),
])
def test_a_refused_config_names_the_rule(change: dict[str, object], message: str) -> None:
    _refused(message, **change)


def test_a_presets_parameter_record() -> None:
    mixtral = parameter_count(PRESETS["mixtral-8x7b"])
    assert preset_params("mixtral-8x7b") == ModelParams(
        model="mixtral-8x7b", params=mixtral.total_params,
        source="closed-form total (embeddings and head included)",
        active_params=mixtral.active_params,
        routing="2 of 8 routed experts per token, shared ones always")
    assert mixtral.active_params is not None  # k of E: fewer than the total
    gpt2 = preset_params("gpt2")
    assert (gpt2.active_params, gpt2.routing) == (None, "")
