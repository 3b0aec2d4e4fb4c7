"""A config.json's KV cache pinned field by field (mutation, issue 42): every alternative
field name, each field's refusal naming the file it came from, the edges of the whole-number
range, latent attention's parts, multi-query, and each way of stating sliding windows."""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.errors import ConfigError
from tensorledger.napkin.kvcache import KvLayout, kv_layout_from_hf

LARGEST = 1 << 24  # the largest field the parser takes


def test_gpt_style_field_names() -> None:
    # n_layer, n_head, n_embd 32 / 4 heads = head 8; multi_query: one kv head
    raw = {"n_layer": 2, "n_head": 4, "n_embd": 32, "multi_query": True}
    assert kv_layout_from_hf(raw, "g") == KvLayout(name="g", n_layers=2, n_heads=4,
                                                   n_kv_heads=1, head_dim=8)
    # Falcon's new decoder architecture reads its kv heads even with multi_query set
    falcon = {"num_layers": 3, "num_attention_heads": 4, "hidden_size": 32,
              "multi_query": True, "new_decoder_architecture": True, "num_kv_heads": 2}
    assert kv_layout_from_hf(falcon, "f") == KvLayout(name="f", n_layers=3, n_heads=4,
                                                      n_kv_heads=2, head_dim=8)


def test_the_head_defaults_to_hidden_over_heads_even_at_one() -> None:
    raw = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 4}
    assert kv_layout_from_hf(raw, "h").head_dim == 1  # 4 / 4
    assert kv_layout_from_hf({**raw, "head_dim": LARGEST}, "h").head_dim == LARGEST


def test_latent_attention_parts() -> None:
    raw = {"num_hidden_layers": 3, "num_attention_heads": 4, "kv_lora_rank": 16,
           "qk_rope_head_dim": 4, "qk_nope_head_dim": 2, "sliding_window": 5}
    # no v_head_dim: nope + rope = 6; the window applies to every layer
    assert kv_layout_from_hf(raw, "ds") == KvLayout(
        name="ds", n_layers=3, n_heads=4, n_kv_heads=4, head_dim=6, v_head_dim=6,
        kv_lora_rank=16, qk_rope_head_dim=4, windows=(5, 5, 5))
    # a rope part of 0 and a no-position part of 1 are a head of 1
    one = kv_layout_from_hf({**raw, "qk_rope_head_dim": 0, "qk_nope_head_dim": 1,
                             "v_head_dim": 3}, "ds")
    assert (one.head_dim, one.v_head_dim, one.qk_rope_head_dim) == (1, 3, 0)
    assert kv_layout_from_hf({**raw, "qk_nope_head_dim": 0}, "ds").head_dim == 4


def _refused(raw: dict[str, Any], message: str, where: str = "m.json") -> None:
    with pytest.raises(ConfigError, match=f"^{where}: {message}"):
        kv_layout_from_hf(raw, "x", where)


DENSE = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32}
MLA = {**DENSE, "kv_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 2}


@pytest.mark.parametrize(("raw", "message"), [
    ({"num_attention_heads": 4}, "missing field 'num_hidden_layers', which the KV cache needs"),
    ({"num_hidden_layers": 2}, "missing field 'num_attention_heads'"),
    ({**DENSE, "num_hidden_layers": 0}, "field 'num_hidden_layers' must be a whole number from "
                                        f"1 to {LARGEST}, got '0'"),
    ({**DENSE, "num_hidden_layers": True}, "field 'num_hidden_layers' must be a whole number"),
    ({**DENSE, "num_hidden_layers": 2.5}, "field 'num_hidden_layers' must be a whole number"),
    ({**DENSE, "num_hidden_layers": LARGEST + 1}, "field 'num_hidden_layers' must be"),
    ({**DENSE, "num_attention_heads": 0}, "field 'num_attention_heads' must be"),
    ({**DENSE, "num_key_value_heads": 0}, "field 'num_key_value_heads' must be"),
    ({**DENSE, "head_dim": 0}, "field 'head_dim' must be"),
    ({**DENSE, "hidden_size": 3}, "missing field 'head_dim'"),  # 3 < 4 heads: no default
    ({**DENSE, "sliding_window": 0}, "field 'sliding_window' must be"),
    ({**DENSE, "sliding_window": 4, "model_type": "gemma3", "sliding_window_pattern": 0},
     "field 'sliding_window_pattern' must be"),
    ({**DENSE, "sliding_window": 4, "layer_types": "sliding_attention"},
     "field 'layer_types' must list"),
    ({**DENSE, "sliding_window": 4, "layer_types": ["full_attention"]},
     "field 'layer_types' must list 'sliding_attention' or 'full_attention' for each of the 2 "
     "layers"),
    ({**DENSE, "sliding_window": 4, "layer_types": ["full_attention", "local"]},
     "field 'layer_types' must list"),
    ({**MLA, "qk_rope_head_dim": -1}, "field 'qk_rope_head_dim' must be a whole number from 0"),
    ({**MLA, "qk_nope_head_dim": -1}, "field 'qk_nope_head_dim' must be a whole number from 0"),
    ({**MLA, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0},
     r"fields 'qk_nope_head_dim' \+ 'qk_rope_head_dim' must be at least 1"),
    ({**MLA, "v_head_dim": 0}, "field 'v_head_dim' must be"),
    ({**MLA, "kv_lora_rank": 0}, "field 'kv_lora_rank' must be"),
    ({**MLA, "sliding_window": 0}, "field 'sliding_window' must be"),
    ({**MLA, "num_hidden_layers": 0}, "field 'num_hidden_layers' must be"),
    ({**MLA, "sliding_window": 4, "layer_types": ["full_attention"]},
     "field 'layer_types' must list"),
])
def test_a_refused_field_names_its_file(raw: dict[str, Any], message: str) -> None:
    _refused(raw, message)


def test_the_file_is_config_json_unless_named() -> None:
    with pytest.raises(ConfigError, match=r"^config\.json: missing field 'num_hidden_layers'"):
        kv_layout_from_hf({}, "x")


def test_a_refused_layout_names_its_file() -> None:
    # 4 heads over 3 kv heads: the layout's own rule, prefixed with the file
    _refused({**DENSE, "num_key_value_heads": 3}, "model 'x': n_heads")


@pytest.mark.parametrize(("extra", "windows"), [
    ({"sliding_window": 4, "use_sliding_window": False}, ()),
    ({"sliding_window": None}, ()),
    ({"sliding_window": 4}, (4,) * 7),
    ({"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"] * 3
      + ["sliding_attention"]}, (4, None, 4, None, 4, None, 4)),
    ({"sliding_window": 4, "model_type": "gemma2"}, (4, None, 4, None, 4, None, 4)),
    # Gemma 3: every 6th layer global unless the pattern says otherwise
    ({"sliding_window": 4, "model_type": "gemma3"}, (4, 4, 4, 4, 4, None, 4)),
    ({"sliding_window": 4, "model_type": "gemma3_text"}, (4, 4, 4, 4, 4, None, 4)),
    ({"sliding_window": 4, "model_type": "gemma3_text", "sliding_window_pattern": 3},
     (4, 4, None, 4, 4, None, 4)),
])
def test_each_way_of_stating_windows(extra: dict[str, Any], windows: tuple[int | None, ...]
                                     ) -> None:
    raw = {**DENSE, "num_hidden_layers": 7, **extra}
    assert kv_layout_from_hf(raw, "w").windows == windows
