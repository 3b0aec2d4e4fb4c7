"""Tiny Hugging Face configs, written by the tests (no hub, no weights): every dimension differs
(vocab ≠ d_model ≠ d_ff, heads × head_dim ≠ d_model where the family allows, GQA)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: model_type → config.json fields.  B = 2, S = 12 in the tests.
TINY: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", "vocab_size": 97, "hidden_size": 40,
              "intermediate_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 64,
              "tie_word_embeddings": False},
    "gpt2": {"model_type": "gpt2", "vocab_size": 97, "n_embd": 40, "n_layer": 2, "n_head": 4,
             "n_positions": 64, "bos_token_id": 0, "eos_token_id": 0},
    "qwen2": {"model_type": "qwen2", "vocab_size": 97, "hidden_size": 40,
              "intermediate_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64,
              "tie_word_embeddings": False},
    "mistral": {"model_type": "mistral", "vocab_size": 97, "hidden_size": 40,
                "intermediate_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 64,
                "sliding_window": None},
    "gemma": {"model_type": "gemma", "vocab_size": 97, "hidden_size": 40,
              "intermediate_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 64},
}

#: The other model_types the config checker knows (tensorledger.workload.hf_checks.FAMILIES),
#: kept apart from TINY so the op-by-op tests of test_hf_models.py stay as they are.
MORE: dict[str, dict[str, Any]] = {
    "gemma2": {"model_type": "gemma2", "vocab_size": 97, "hidden_size": 40,
               "intermediate_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 64},
    "phi3": {"model_type": "phi3", "vocab_size": 97, "hidden_size": 40, "intermediate_size": 72,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 64, "pad_token_id": 0},
    "gpt_neox": {"model_type": "gpt_neox", "vocab_size": 97, "hidden_size": 40,
                 "intermediate_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "max_position_embeddings": 64},
    "falcon": {"model_type": "falcon", "vocab_size": 97, "hidden_size": 40,
               "ffn_hidden_size": 72, "num_hidden_layers": 2, "num_attention_heads": 4,
               "new_decoder_architecture": True, "num_kv_heads": 2,
               "max_position_embeddings": 64},
    "bert": {"model_type": "bert", "vocab_size": 97, "hidden_size": 40, "intermediate_size": 72,
             "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 64},
}

#: Every model_type the config checker knows, tiny.
CHECKED: dict[str, dict[str, Any]] = {
    **{k: v for k, v in TINY.items() if k != "gemma"}, **MORE}


def write_config(folder: Path, family: str, **changes: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps({**(TINY | MORE)[family], **changes}))
    return path
