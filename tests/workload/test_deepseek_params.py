"""DeepSeek-V3's total and active parameters (issue 38), built by transformers on fake tensors
from its config.json's values (written here; nothing is downloaded), against a count by hand.

Published: 671B total, 37B activated per token.  The total agrees to 0.004%; the active count
here is 37.55B, 1.5% above the published "37B": the same convention that gives Mixtral-8x7B's
published 12.9B exactly (embeddings and head counted; k of E routed experts, shared ones
always) — DeepSeek's 37B is the figure rounded down to the billion (DeepSeek-V2's "21B"
likewise counts 21.38B this way)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorledger.workload.params import model_params

pytest.importorskip("transformers")

#: DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3), its sizes and routing.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8,
    "moe_layer_freq": 1, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "max_position_embeddings": 163840,
    "tie_word_embeddings": False, "rope_theta": 10000, "rms_norm_eps": 1e-6,
}


def test_deepseek_v3_total_and_active_by_hand(tmp_path: Path) -> None:
    """Per layer, MLA attention: q down 7168·1536 = 11,010,048, its norm 1,536, q up
    1536·128·(128 + 64) = 37,748,736; kv down with the shared rope key 7168·(512 + 64) =
    4,128,768, its norm 512, kv up 512·128·(128 + 128) = 16,777,216; out 128·128·7168 =
    117,440,512 → 187,107,328; two norms 2·7168.  Layers 0-2 dense: 3·7168·18,432 =
    396,361,728.  Layers 3-60 (58): 256 routed experts and 1 shared of 3·7168·2048 =
    44,040,192 each, the router 256·7168 = 1,835,008 (its score-correction bias is a
    buffer).  Embeddings and head 2·129,280·7168, the final norm 7168.  A token runs 8 of the
    256 routed experts."""
    attention = 11_010_048 + 1_536 + 37_748_736 + 4_128_768 + 512 + 16_777_216 + 117_440_512
    assert attention == 187_107_328
    dense_layers = 3 * (attention + 2 * 7168 + 3 * 7168 * 18_432)
    expert = 3 * 7168 * 2048
    moe_layer = attention + 2 * 7168 + 256 * 7168 + expert  # the shared expert always runs
    outside = 2 * 129_280 * 7168 + 7168
    total = dense_layers + 58 * (moe_layer + 256 * expert) + outside
    active = dense_layers + 58 * (moe_layer + 8 * expert) + outside
    assert (total, active) == (671_026_404_352, 37_552_282_624)
    assert total == pytest.approx(671e9, rel=0.005)  # the published 671B: +0.004%
    assert int(active / 1e9) == 37  # the published 37B, rounded down (+1.5%)

    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V3))
    counted = model_params(str(path))
    assert (counted.params, counted.active_params) == (total, active)
    assert "8 of 256 routed experts" in counted.routing
