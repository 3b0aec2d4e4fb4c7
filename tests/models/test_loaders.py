"""config.json loader, user factories, the --model resolver, and the CLI paths that use them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.errors import ConfigError, ModelError, UnknownNameError
from tensorledger.napkin import get_preset, parameter_count
from tensorledger.workload import model_params, placement, resolve_source, resolve_workload
from tensorledger.workload.hf_config import load_hf_config
from tensorledger.workload.step import build_module
from tests.conftest import assert_one_line_error

# Field values of the published Hugging Face configs (gpt2, meta-llama/Meta-Llama-3-8B).
GPT2_JSON: dict[str, Any] = {
    "model_type": "gpt2", "activation_function": "gelu_new", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_inner": None, "n_layer": 12, "n_positions": 1024,
    "layer_norm_epsilon": 1e-05, "vocab_size": 50257, "architectures": ["GPT2LMHeadModel"]}
LLAMA3_JSON: dict[str, Any] = {
    "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256,
    "attention_bias": False}


def write_json(folder: Path, data: Any, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_gpt2_config_json_matches_preset(tmp_path: Path) -> None:
    config = load_hf_config(write_json(tmp_path / "gpt2", GPT2_JSON))
    assert config.name == "gpt2"
    assert parameter_count(config) == parameter_count(get_preset("gpt2"))


def test_llama_config_json_from_folder_matches_preset(tmp_path: Path) -> None:
    write_json(tmp_path / "Meta-Llama-3-8B", LLAMA3_JSON)
    config = load_hf_config(tmp_path / "Meta-Llama-3-8B")
    assert config.n_kv_heads == 8 and config.rope_theta == 500000.0
    assert parameter_count(config).total_params == 8_030_261_248


@pytest.mark.parametrize(("data", "fragment"), [
    ({**LLAMA3_JSON, "model_type": "mamba"}, "unsupported model_type 'mamba'"),
    ({k: v for k, v in LLAMA3_JSON.items() if k != "model_type"}, "missing field 'model_type'"),
    ({k: v for k, v in LLAMA3_JSON.items() if k != "hidden_size"}, "missing field 'hidden_size'"),
    ({k: v for k, v in GPT2_JSON.items() if k != "n_layer"}, "missing field 'n_layer'"),
    ({**LLAMA3_JSON, "num_hidden_layers": "32"}, "'num_hidden_layers' must be a whole number"),
    ({**LLAMA3_JSON, "hidden_act": "gelu"}, "field 'hidden_act'"),
    ({**LLAMA3_JSON, "attention_bias": True}, "attention_bias"),
    ({**LLAMA3_JSON, "num_key_value_heads": 5}, "multiple of n_kv_heads"),
    ([1, 2], "JSON object"),
    ("{not json", "not valid JSON"),
])
def test_bad_config_json(tmp_path: Path, data: Any, fragment: str) -> None:
    path = write_json(tmp_path, data)
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        load_hf_config(path)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent\.json does not exist"):
        load_hf_config(tmp_path / "absent.json")


FACTORIES = '''
import torch
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3, bias=False))


def make_broken():
    raise ValueError("hidden size must be even\\nsecond line of detail")


def make_nothing():
    return 42


def where_are_my_weights():
    return nn.Linear(4, 4).weight.device.type
'''


@pytest.fixture
def factory_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_models.py"
    path.write_text(FACTORIES)
    return path


def _build(text: str, device: str = "fake", precision: str = "fp32") -> torch.nn.Module:
    work = resolve_workload(text, step="forward", precision=precision, device=device, seq=4)
    with placement(work.device) as target:
        return build_module(work, target)[0]


def test_factory_builds_on_meta_and_in_the_recipe_dtype(factory_file: Path) -> None:
    source = resolve_source(f"{factory_file}:make_model")
    assert source.kind == "factory" and source.config is None and source.name == "make_model"
    model = _build(f"{factory_file}:make_model", "meta")
    assert all(p.is_meta for p in model.parameters())
    # 10·20 + 20 + 20·3 = 280
    assert model_params(f"{factory_file}:make_model").params == 280
    real = _build(f"{factory_file}:make_model", "cpu", "bf16")
    assert {p.dtype for p in real.parameters()} == {torch.bfloat16}


def test_factory_errors_name_the_factory(factory_file: Path) -> None:
    with pytest.raises(ModelError) as raised:
        _build(f"{factory_file}:make_broken")
    assert str(raised.value).startswith(f"the factory {factory_file}:make_broken failed: "
                                        "ValueError: hidden size must be even (at my_models.py:")
    with pytest.raises(ModelError, match=r"returned int, not a torch\.nn\.Module"):
        _build(f"{factory_file}:make_nothing")
    with pytest.raises(ModelError, match=r"defines no function 'make_it'.*make_broken"):
        _build(f"{factory_file}:make_it")


def test_factory_import_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ModelError, match=r"importing .*broken\.py failed: ModuleNotFoundError"):
        _build(f"{path}:f")
    with pytest.raises(ConfigError, match="not found"):
        resolve_source(f"{tmp_path / 'absent.py'}:f")


def test_resolver_kinds(tmp_path: Path) -> None:
    path = write_json(tmp_path / "gpt2", GPT2_JSON)
    assert resolve_source(str(path)).kind == "config"
    assert resolve_source(str(tmp_path / "gpt2")).kind == "config"
    assert resolve_source(str(path)).config == load_hf_config(path)  # closed forms kept
    assert resolve_source("GPT2").kind == "preset"
    with pytest.raises(UnknownNameError, match="llama-3-8b"):
        resolve_source("llama-7")


# --------------------------------------------------------------------------------- CLI

def test_models_lists_presets(cli: Any) -> None:
    result = cli("models")
    assert result.code == 0
    assert "llama-3-405b" in result.stdout and "124.4M" in result.stdout
    document = cli("models", "--json").json()
    totals = {row["name"]: row["params"]["total_params"] for row in document["presets"]}
    assert totals["gpt2"] == 124_439_808
    assert totals["llama-3-70b"] == 70_553_706_496
    assert len(totals) == 15  # 10 dense, 4 mixtures of experts (DeepSeek-V3 twice), tiny-moe


def test_models_detail(cli: Any, tmp_path: Path) -> None:
    document = cli("models", "gpt2", "--seq-len", "1024", "--json").json()
    assert document["params"]["total_params"] == 124_439_808
    # 12 · 2 · 1024 · 768 = 18,874,368 (full); halved 9,437,184
    assert document["forward_full"]["attention_scores_flops"] == 18_874_368
    assert document["forward_causal_halved"]["attention_scores_flops"] == 9_437_184
    text = cli("models", "llama-3-8b").stdout
    assert "8,030,261,248" in text and "causal-halved" in text
    path = write_json(tmp_path / "llama", LLAMA3_JSON)
    assert cli("models", str(path), "--json").json()["params"]["total_params"] == 8_030_261_248


def test_time_with_model_uses_preset_count(cli: Any) -> None:
    args = ("time", "--model", "llama-3-70b", "--tokens", "15T", "--hardware", "h100",
            "--count", "1024")
    document = cli(*args, "--json").json()
    assert document["params"] == 70_553_706_496
    assert document["flops"] == pytest.approx(6 * 70_553_706_496 * 15e12)  # 6.35e24
    # 6.3497e24 / (989.5e12 · 0.5 · 1024 · 86400) ≈ 145.05 days
    assert document["time_days"] == pytest.approx(6 * 70_553_706_496 * 15e12
                                                  / (989.5e12 * 0.5 * 1024 * 86400))
    text = cli(*args).stdout
    assert "params of llama-3-70b: 70,553,706,496" in text and "closed-form" in text


def test_time_with_factory_model(cli: Any, factory_file: Path) -> None:
    result = cli("time", "--model", f"{factory_file}:make_model", "--tokens", "1M", "--json")
    assert result.json()["params"] == 280


@pytest.mark.parametrize(("args", "fragments"), [
    (("time", "--model", "llama-9", "--tokens", "1T"), ("unknown model", "llama-3-8b")),
    (("time", "--model", "gpt2", "--params", "1B", "--tokens", "1T"), ("not both",)),
    (("models", "nope"), ("unknown model", "'nope'")),
])
def test_cli_model_errors(cli: Any, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    assert_one_line_error(cli(*args), *fragments)


def test_cli_bad_config_json_and_factory(cli: Any, tmp_path: Path, factory_file: Path) -> None:
    bad = write_json(tmp_path / "bad", {**LLAMA3_JSON, "model_type": "no-such-model"})
    assert_one_line_error(cli("models", str(bad)), "model_type 'no-such-model' is not known")
    assert_one_line_error(cli("time", "--model", f"{factory_file}:make_broken", "--tokens",
                              "1T"), f"the factory {factory_file}:make_broken failed: "
                          "ValueError: hidden size must be even")


def test_without_the_hf_extra_only_the_reference_families_are_read(
        cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.source as source

    monkeypatch.setattr(source, "hf_available", lambda: False)
    qwen = write_json(tmp_path / "qwen", {**LLAMA3_JSON, "model_type": "qwen2"})
    assert_one_line_error(cli("models", str(qwen)), "model_type 'qwen2' needs the Hugging Face "
                          "extra", "pip install 'tensorledger[hf]'")
    missing = write_json(tmp_path / "missing",
                         {k: v for k, v in GPT2_JSON.items() if k != "n_embd"})
    assert_one_line_error(cli("time", "--model", str(missing), "--tokens", "1T"),
                          "missing field 'n_embd'")
    assert resolve_source(str(write_json(tmp_path / "g", GPT2_JSON))).builder == "reference"
