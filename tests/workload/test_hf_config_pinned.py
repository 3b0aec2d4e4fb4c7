"""The config.json reader of the reference families (issue 42's mutation run of
``tensorledger.workload.hf_config``): each field's default, type and refusal, GPT-2's and Llama's
fields onto the reference config, ``rope_theta`` at either level, and the file and folder
readers, each expectation from the file written beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorledger.errors import ConfigError
from tensorledger.workload import hf_config as hc

# every size differs from every other, so a field read under another key changes the answer
GPT2 = {"model_type": "gpt2", "vocab_size": 97, "n_positions": 64, "n_embd": 40, "n_layer": 3,
        "n_head": 5}
LLAMA = {"model_type": "llama", "vocab_size": 101, "max_position_embeddings": 96,
         "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "intermediate_size": 130}


def _fields(**raw: object) -> hc._Fields:
    return hc._Fields({"model_type": "gpt2", **raw}, "c.json")


def test_get_int_reads_the_value_or_its_default_and_refuses_the_rest() -> None:
    assert _fields(n=7).get_int("n") == 7
    assert _fields().get_int("n", 5) == 5  # absent: the default
    assert _fields(n=None).get_int("n", 5) == 5  # written as null beside a default: the default
    with pytest.raises(ConfigError, match=r"^c\.json: missing field 'n' \(model_type 'gpt2'\)$"):
        _fields().get_int("n")
    with pytest.raises(ConfigError, match="missing field 'n'"):
        _fields(n=None).get_int("n")  # null without a default is missing
    with pytest.raises(ConfigError, match=r"^c\.json: field 'n' must be a whole number, got "
                                          r"True$"):
        _fields(n=True).get_int("n")  # a bool is an int to Python, not a size
    with pytest.raises(ConfigError, match=r"must be a whole number, got 2\.0"):
        _fields(n=2.0).get_int("n")


def test_get_float_reads_ints_and_floats_as_floats_and_refuses_the_rest() -> None:
    value = _fields(x=3).get_float("x", 1.5)
    assert value == 3.0 and type(value) is float  # an int written is a float read
    assert _fields(x=2.5).get_float("x", 1.5) == 2.5
    assert _fields().get_float("x", 1.5) == 1.5  # absent: the default
    assert _fields(x=None).get_float("x", 1.5) == 1.5  # null: the default
    with pytest.raises(ConfigError, match=r"^c\.json: field 'x' must be a number, got False$"):
        _fields(x=False).get_float("x", 1.5)
    with pytest.raises(ConfigError, match="must be a number, got '1'"):
        _fields(x="1").get_float("x", 1.5)


def test_get_bool_reads_true_and_false_and_refuses_the_rest() -> None:
    assert _fields(b=True).get_bool("b", False) is True
    assert _fields(b=False).get_bool("b", True) is False
    assert _fields().get_bool("b", True) is True  # absent: the default
    assert _fields().get_bool("b", False) is False
    with pytest.raises(ConfigError, match=r"^c\.json: field 'b' must be true or false, got 1$"):
        _fields(b=1).get_bool("b", False)  # 1 is not a JSON boolean


def test_expect_takes_the_allowed_or_the_default_and_names_the_others() -> None:
    _fields(act="b").expect("act", ("a", "b"), "a")  # allowed: nothing said
    _fields().expect("act", ("a", "b"), "a")  # absent: the default, allowed
    with pytest.raises(ConfigError, match=r"^c\.json: field 'act' is 'c'; this model supports "
                                          r"'a', 'b'$"):
        _fields(act="c").expect("act", ("a", "b"), "a")
    with pytest.raises(ConfigError, match="field 'act' is 'z'"):
        _fields().expect("act", ("a", "b"), "z")  # absent, and a default that is not allowed


def test_gpt2_fields_map_onto_the_reference_config() -> None:
    config = hc.config_from_hf(GPT2, name="g")
    assert (config.name, config.vocab_size, config.context_length, config.d_model,
            config.n_layers, config.n_heads) == ("g", 97, 64, 40, 3, 5)
    assert config.d_ff == 160  # n_inner absent: 4 · n_embd = 4 · 40
    assert (config.mlp, config.norm, config.positions) == ("gelu", "layernorm", "learned")
    assert config.tied_embeddings is True and config.bias is True  # GPT-2's defaults
    assert config.norm_eps == 1e-5  # layer_norm_epsilon's default
    given = hc.config_from_hf({**GPT2, "n_inner": 70, "tie_word_embeddings": False,
                               "layer_norm_epsilon": 1e-3, "activation_function": "gelu"})
    assert (given.d_ff, given.tied_embeddings, given.norm_eps) == (70, False, 1e-3)
    assert given.name == "gpt2"  # no name: the model_type
    for act in ("gelu_new", "gelu_pytorch_tanh"):
        hc.config_from_hf({**GPT2, "activation_function": act})  # each accepted
    with pytest.raises(ConfigError, match="field 'activation_function' is 'relu'; this model "
                                          "supports 'gelu_new', 'gelu_pytorch_tanh', 'gelu'"):
        hc.config_from_hf({**GPT2, "activation_function": "relu"})


def test_llama_fields_map_onto_the_reference_config() -> None:
    config = hc.config_from_hf(LLAMA, name="l")
    assert (config.name, config.vocab_size, config.context_length, config.d_model,
            config.n_layers, config.n_heads, config.d_ff) == ("l", 101, 96, 48, 2, 6, 130)
    assert config.n_kv_heads == 6  # absent: the heads (multi-head attention)
    assert config.head_dim == 8  # absent: 48 // 6
    assert (config.mlp, config.norm, config.positions) == ("swiglu", "rmsnorm", "rope")
    assert config.tied_embeddings is False and config.bias is False
    assert config.norm_eps == 1e-6  # rms_norm_eps's default
    assert config.rope_theta == 10000.0  # rope_theta's default
    given = hc.config_from_hf({**LLAMA, "num_key_value_heads": 2, "head_dim": 12,
                               "tie_word_embeddings": True, "rms_norm_eps": 1e-4,
                               "rope_theta": 5e5, "hidden_act": "silu",
                               "attention_bias": False, "mlp_bias": False})
    assert (given.n_kv_heads, given.head_dim, given.tied_embeddings, given.norm_eps,
            given.rope_theta) == (2, 12, True, 1e-4, 5e5)
    with pytest.raises(ConfigError, match="field 'hidden_act' is 'gelu'; this model supports "
                                          "'silu'"):
        hc.config_from_hf({**LLAMA, "hidden_act": "gelu"})


@pytest.mark.parametrize("flag", ["attention_bias", "mlp_bias"])
def test_llama_with_either_bias_is_refused(flag: str) -> None:
    with pytest.raises(ConfigError, match=r"^config\.json: field 'attention_bias'/'mlp_bias' is "
                                          "true"):
        hc.config_from_hf({**LLAMA, flag: True})


def test_llama_of_zero_heads_reaches_the_models_own_refusal_not_a_division_by_zero() -> None:
    # head_dim's default is 48 // 0 guarded to 0; the config then refuses zero heads itself
    with pytest.raises(ConfigError, match=r"^config\.json: model 'llama'"):
        hc.config_from_hf({**LLAMA, "num_attention_heads": 0})


def test_rope_theta_is_read_nested_first_then_at_the_top() -> None:
    nested = {**LLAMA, "rope_theta": 7.0, "rope_parameters": {"rope_theta": 3}}
    assert hc.config_from_hf(nested).rope_theta == 3.0  # transformers 5's nesting wins
    # nested without the key: the top level
    assert hc.config_from_hf({**LLAMA, "rope_theta": 7.0,
                              "rope_parameters": {"rope_type": "default"}}).rope_theta == 7.0
    assert hc.config_from_hf({**LLAMA, "rope_parameters": {}}).rope_theta == 10000.0
    assert hc.config_from_hf({**LLAMA, "rope_parameters": None,
                              "rope_theta": 9.0}).rope_theta == 9.0
    # a null nested value: the default, not the top level
    assert hc.config_from_hf({**LLAMA, "rope_theta": 7.0,
                              "rope_parameters": {"rope_theta": None}}).rope_theta == 10000.0
    with pytest.raises(ConfigError, match=r"^x\.json: field 'rope_parameters' must be an "
                                          r"object, got \[1\]$"):
        hc.config_from_hf({**LLAMA, "rope_parameters": [1]}, "x.json")
    with pytest.raises(ConfigError, match=r"^x\.json: field 'rope_theta' must be a number"):
        hc.config_from_hf({**LLAMA, "rope_parameters": {"rope_theta": "big"}}, "x.json")


def test_config_from_hf_refusals_name_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^w: expected a JSON object at the top level$"):
        hc.config_from_hf([1], "w")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^w: missing field 'model_type'; supported: gpt2, "
                                          r"llama$"):
        hc.config_from_hf({}, "w")
    with pytest.raises(ConfigError, match=r"^w: unsupported model_type 'bert' \(field "
                                          r"'model_type'\); supported: gpt2, llama$"):
        hc.config_from_hf({"model_type": "bert"}, "w")
    # a model error (the config's own check) is told as the file's
    with pytest.raises(ConfigError, match=r"^w: model 'g': "):
        hc.config_from_hf({**GPT2, "n_head": 7}, "w", "g")  # 7 heads do not divide 40


def test_read_config_json_parses_a_file_and_refuses_one_too_large(tmp_path: Path) -> None:
    assert hc.CONFIG_MAX_BYTES == 1048576  # 1 << 20
    file = tmp_path / "c.json"
    file.write_text('{"a": [1, 2]}')
    assert hc.read_config_json(file) == {"a": [1, 2]}
    big = tmp_path / "big.json"
    big.write_text(" " * (hc.CONFIG_MAX_BYTES + 1) + "{}")  # one byte past the limit
    with pytest.raises(ConfigError, match=r"^config\.json .*big\.json has "):  # named so
        hc.read_config_json(big)
    exact = tmp_path / "exact.json"
    exact.write_text(" " * (hc.CONFIG_MAX_BYTES - 2) + "{}")  # the limit exactly: read
    assert hc.read_config_json(exact) == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):  # the file named
        hc.read_config_json(bad)


def test_load_hf_config_names_the_model_by_its_folder_or_file(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GPT2))
    assert hc.load_hf_config(folder).name == "tiny-gpt"  # a folder: its config.json
    assert hc.load_hf_config(str(folder / "config.json")).name == "tiny-gpt"
    other = tmp_path / "my-llama.json"
    other.write_text(json.dumps(LLAMA))
    assert hc.load_hf_config(other).name == "my-llama"  # another file name: its stem
    assert hc.load_hf_config(other).d_ff == 130
    with pytest.raises(ConfigError, match=r"my-bad\.json: unsupported model_type"):
        bad = tmp_path / "my-bad.json"
        bad.write_text('{"model_type": "t5"}')
        hc.load_hf_config(bad)


def test_a_config_json_at_the_root_is_named_by_its_stem(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # /config.json's folder has no name (Path("/config.json").parent.name == ""): its stem
    monkeypatch.setattr(hc, "read_config_json", lambda file: GPT2)
    assert hc.load_hf_config("/config.json").name == "config"
