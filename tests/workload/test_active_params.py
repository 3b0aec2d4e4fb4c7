"""Total and active parameters of a mixture of experts (issue 38, item 4), by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tensorledger.workload.params import model_params

MIXTRAL_8X7B = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                "num_local_experts": 8, "num_experts_per_tok": 2,
                "max_position_embeddings": 32768, "tie_word_embeddings": False}


def _config(tmp_path: Path, raw: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_mixtral_8x7b_total_and_active_by_hand(tmp_path: Path) -> None:
    """Per layer: attention 4096·(4096 + 1024 + 1024 + 4096) = 41,943,040; router 8·4096 =
    32,768; two norms 8,192; 8 experts of 3·4096·14,336 = 176,160,768 each.  Embeddings and
    head 2·32,000·4096, final norm 4096.  A token runs 2 of the 8 experts."""
    per_layer_dense = 41_943_040 + 32_768 + 8_192
    expert = 3 * 4096 * 14_336
    outside = 2 * 32_000 * 4096 + 4096
    total = 32 * (per_layer_dense + 8 * expert) + outside
    active = 32 * (per_layer_dense + 2 * expert) + outside
    assert (total, active) == (46_702_792_704, 12_879_925_248)  # the published figures
    counted = model_params(_config(tmp_path, MIXTRAL_8X7B))
    assert (counted.params, counted.active_params) == (total, active)
    assert "2 of 8 routed experts" in counted.routing


def test_shared_experts_are_always_active(tmp_path: Path) -> None:
    """A tiny Qwen2-MoE (hidden 40, 2 layers, 4 routed experts of width 16, top 2, a shared
    expert of width 24): the routed experts hold 2 · 4 · 3·40·16 = 15,360 parameters, of which
    a token runs half; the shared expert and its gate run always."""
    raw = {"model_type": "qwen2_moe", "vocab_size": 97, "hidden_size": 40,
           "intermediate_size": 72, "moe_intermediate_size": 16,
           "shared_expert_intermediate_size": 24, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
           "num_experts_per_tok": 2, "max_position_embeddings": 64,
           "tie_word_embeddings": False}
    counted = model_params(_config(tmp_path, raw))
    routed = 2 * 4 * 3 * 40 * 16
    assert counted.active_params == counted.params - routed // 2


def test_a_dense_model_has_no_active_count(tmp_path: Path) -> None:
    raw = {k: v for k, v in MIXTRAL_8X7B.items() if k not in ("num_local_experts",
                                                                "num_experts_per_tok")}
    raw.update(model_type="llama", architectures=["LlamaForCausalLM"], num_hidden_layers=2,
               hidden_size=64, intermediate_size=96, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=97)
    assert model_params(_config(tmp_path, raw)).active_params is None


def test_the_trace_sets_6_n_active_d_beside_6_n_d(tmp_path: Path, cli: Any) -> None:
    """A tiny Mixtral traced for one training step: the step's summary holds N_active from the
    built module, equal to ``model_params``' (a second path), and counted / 6·N_active·D
    beside counted / 6·N·D (larger: a token runs 2 of the 4 experts)."""
    from tensorledger.ledger.trace import trace_report
    from tensorledger.workload import resolve_workload

    raw = {"model_type": "mixtral", "vocab_size": 97, "hidden_size": 40,
           "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "max_position_embeddings": 64, "tie_word_embeddings": False}
    path = _config(tmp_path, raw)
    report = trace_report(resolve_workload(path, batch=2, seq=12, precision="fp32"))
    six = report.summary.six_n_d
    assert six is not None and six.active_params == model_params(path).active_params
    assert six.active_ratio is not None and six.active_ratio > six.ratio
    assert six.active_ratio == six.counted_flops / (6 * six.active_params * 24)
    text = " ".join(cli("trace", "--model", path, "--batch", "2", "--seq", "12").stdout.split())
    assert f"N_active = {six.active_params:,}" in text
