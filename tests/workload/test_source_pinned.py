"""``--model`` resolved (issue 42's mutation run of ``tensorledger.workload.source``): which kind
and builder each form gets, the name taken from a config's folder or file, the longest
sequence, the phrase that says who built the model, and the reference path taken when the
Hugging Face extra is missing (monkeypatched here, so both paths run in one environment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tensorledger.errors import ConfigError, ModelError, UnknownNameError
from tensorledger.workload import source as source_module
from tensorledger.workload.source import ModelSource, resolve_source
from tests.workload.hf_configs import TINY


def _write(path: Path, fields: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields))
    return path


def _need_hf() -> None:
    # found, not imported: resolving a source never imports transformers
    if not source_module.hf_available():
        pytest.skip("the Hugging Face extra is not installed")


def _no_hf(monkeypatch: Any) -> None:
    monkeypatch.setattr(source_module, "hf_available", lambda: False)


# ---- presets ----------------------------------------------------------------------------------
def test_a_preset_is_matched_stripped_and_in_any_case() -> None:
    s = resolve_source("  GPT2 ")
    assert (s.label, s.kind, s.builder, s.name) == ("GPT2", "preset", "reference", "gpt2")
    assert s.config is not None and s.config.name == "gpt2" and s.path is None
    assert repr(s) == "ModelSource('GPT2', preset, built by reference)"
    assert s.built_by == "tensorledger's reference Transformer"  # nothing filled


def test_the_longest_sequence_is_learned_positions_or_none() -> None:
    assert resolve_source("gpt2").max_seq == 1024  # GPT-2's table of 1,024 positions
    assert resolve_source("llama-3-8b").max_seq is None  # RoPE: computed positions
    # a config.json's own table wins over the reference config's
    table = ModelSource(label="x", kind="config", builder="reference", name="x",
                        config=resolve_source("gpt2").config, learned_positions=64)
    assert table.max_seq == 64
    assert ModelSource(label="x", kind="factory", builder="factory", name="x").max_seq is None


# ---- config.json ------------------------------------------------------------------------------
def test_a_folder_is_named_by_the_folder_and_reads_its_config_json(tmp_path: Path) -> None:
    _need_hf()
    file = _write(tmp_path / "tiny-llama" / "config.json", TINY["llama"])
    s = resolve_source(str(file.parent))
    assert (s.kind, s.builder, s.name, s.path, s.head) == (
        "config", "transformers", "tiny-llama", file, "causal-lm")
    assert s.config is not None and s.config.d_model == 40  # the closed forms' config too
    assert s.hf_config is not None and s.hf_config["hidden_size"] == 40
    assert s.built_by == ("Hugging Face transformers (from the config, no weights, causal LM "
                          "head)")
    assert resolve_source(str(file)).name == "tiny-llama"  # the file itself: its folder's name


def test_another_json_file_is_named_by_its_stem(tmp_path: Path) -> None:
    _need_hf()
    file = _write(tmp_path / "my-model.json", TINY["llama"])
    assert resolve_source(str(file)).name == "my-model"


def test_a_family_without_closed_forms_has_no_reference_config(tmp_path: Path) -> None:
    _need_hf()
    s = resolve_source(str(_write(tmp_path / "q" / "config.json", TINY["qwen2"])))
    assert s.builder == "transformers" and s.config is None


def test_learned_positions_of_a_gpt2_config(tmp_path: Path) -> None:
    _need_hf()
    s = resolve_source(str(_write(tmp_path / "g" / "config.json", TINY["gpt2"])))
    assert s.learned_positions == 64 and s.max_seq == 64  # n_positions


def test_filled_defaults_are_named_in_the_phrase(tmp_path: Path) -> None:
    _need_hf()
    fields = {k: v for k, v in TINY["llama"].items() if k != "intermediate_size"}
    file = _write(tmp_path / "f" / "config.json", fields)
    with pytest.raises(ConfigError):  # refused unless defaults are asked for
        resolve_source(str(file))
    s = resolve_source(str(file), fill_defaults=True)
    assert s.filled == ("intermediate_size",)
    # transformers' LlamaConfig default intermediate_size is 11,008
    assert s.built_by == ("Hugging Face transformers (from the config, no weights, causal LM "
                          "head; transformers' defaults taken: intermediate_size = 11008)")


def test_another_head_is_named_and_has_no_reference_config(tmp_path: Path) -> None:
    _need_hf()
    fields = {**TINY["llama"], "architectures": ["LlamaForSequenceClassification"]}
    s = resolve_source(str(_write(tmp_path / "c" / "config.json", fields)))
    assert s.head == "sequence-classification" and s.config is None
    assert s.built_by == ("Hugging Face transformers (from the config, no weights, sequence "
                          "classification head)")


def test_without_the_extra_a_llama_config_is_built_by_the_reference(tmp_path: Path,
                                                                     monkeypatch: Any) -> None:
    _no_hf(monkeypatch)
    fields = {k: v for k, v in TINY["llama"].items() if k != "intermediate_size"}
    file = _write(tmp_path / "r" / "config.json", fields)
    s = resolve_source(str(file), fill_defaults=True)
    assert (s.kind, s.builder, s.name, s.path, s.head, s.filled) == (
        "config", "reference", "r", file, "causal-lm", ("intermediate_size",))
    assert s.config is not None and s.config.d_ff == 11_008 and s.hf_config is not None
    assert s.built_by == ("tensorledger's reference Transformer (from the config; "
                          "transformers' defaults taken: intermediate_size = 11008)")


def test_without_the_extra_learned_positions_are_kept(tmp_path: Path, monkeypatch: Any) -> None:
    _no_hf(monkeypatch)
    s = resolve_source(str(_write(tmp_path / "g" / "config.json", TINY["gpt2"])))
    assert s.builder == "reference" and s.learned_positions == 64


def test_without_the_extra_another_family_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    _no_hf(monkeypatch)
    file = _write(tmp_path / "q" / "config.json", TINY["qwen2"])
    with pytest.raises(ConfigError) as caught:
        resolve_source(str(file))
    assert str(caught.value) == (f"{file}: model_type 'qwen2' needs the Hugging Face extra "
                                 "(pip install 'tensorledger[hf]'); without it only gpt2, llama "
                                 "configs are read")


def test_without_the_extra_another_head_needs_the_extra(tmp_path: Path, monkeypatch: Any) -> None:
    # no reference config is made for another head, so the refusal is the extra's
    _no_hf(monkeypatch)
    fields = {**TINY["llama"], "architectures": ["LlamaForSequenceClassification"]}
    file = _write(tmp_path / "c" / "config.json", fields)
    with pytest.raises(ConfigError, match=r"model_type 'llama' needs the Hugging Face extra"):
        resolve_source(str(file))


def test_a_config_that_is_no_object_or_has_no_type_is_refused(tmp_path: Path) -> None:
    listed = tmp_path / "a.json"
    listed.write_text("[1]")
    with pytest.raises(ConfigError, match=r"a\.json: expected a JSON object at the top level$"):
        resolve_source(str(listed))
    for bad in ({}, {"model_type": ""}, {"model_type": 3}):
        with pytest.raises(ConfigError, match=r"field 'model_type' must be a name"):
            resolve_source(str(_write(tmp_path / "b.json", bad)))


# ---- factories and paths ----------------------------------------------------------------------
def test_a_factory_is_a_py_file_and_a_function(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text("")
    s = resolve_source(f"{file}:make_model")
    assert (s.kind, s.builder, s.name, s.path, s.function, s.config) == (
        "factory", "factory", "make_model", file, "make_model", None)
    assert s.built_by == f"the factory make_model() in {file}"
    assert s.max_seq is None


def test_a_factory_file_whose_name_holds_a_colon(tmp_path: Path) -> None:
    file = tmp_path / "a:b.py"  # the function is what follows the last colon
    file.write_text("")
    s = resolve_source(f"{file}:make")
    assert s.path == file and s.function == "make"


def test_a_factory_of_no_function_name_or_no_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "m.py"
    file.write_text("")
    with pytest.raises(ModelError, match=r"is not of the form path/to/file\.py:function$"):
        resolve_source(f"{file}:2x")
    with pytest.raises(ConfigError, match=r"^model factory file not found: .*gone\.py$"):
        resolve_source(f"{tmp_path / 'gone.py'}:make")


@pytest.mark.parametrize("text", ["./cfg/pythia", "~/models/x", "C:\\m", "a/b", ".hidden",
                                  "~mine"])
def test_a_missing_path_says_the_path_is_missing(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^model path .* does not exist"):
        resolve_source(text)


def test_a_missing_json_file_is_read_as_a_config(tmp_path: Path) -> None:
    # ends in .json: read (and refused by the reader), not looked up as a preset
    with pytest.raises(ConfigError):
        resolve_source("nosuch.json")


def test_an_unknown_name_is_an_unknown_name() -> None:
    with pytest.raises(UnknownNameError):
        resolve_source("llama-7")


def test_hf_available_follows_the_installed_package(monkeypatch: Any) -> None:
    import importlib.util

    expected = importlib.util.find_spec("transformers") is not None
    assert source_module.hf_available() is expected
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert source_module.hf_available() is False


def test_a_config_the_reference_cannot_build_is_transformers_alone(tmp_path: Path) -> None:
    _need_hf()
    # GELU: the reference Llama supports SiLU only; transformers builds it, no closed forms
    file = _write(tmp_path / "g" / "config.json", {**TINY["llama"], "hidden_act": "gelu"})
    s = resolve_source(str(file))
    assert s.builder == "transformers" and s.config is None and s.label == str(file)


def test_without_the_extra_the_reference_refusal_names_the_file(tmp_path: Path,
                                                                 monkeypatch: Any) -> None:
    _no_hf(monkeypatch)
    file = _write(tmp_path / "g" / "config.json", {**TINY["llama"], "hidden_act": "gelu"})
    with pytest.raises(ConfigError) as caught:
        resolve_source(str(file))
    assert str(caught.value) == (f"{file}: field 'hidden_act' is 'gelu'; this model supports "
                                 "'silu'")


def test_a_missing_size_is_refused_naming_the_file(tmp_path: Path) -> None:
    fields = {k: v for k, v in TINY["llama"].items() if k != "intermediate_size"}
    file = _write(tmp_path / "m" / "config.json", fields)
    with pytest.raises(ConfigError) as caught:
        resolve_source(str(file))
    assert str(caught.value).startswith(f"{file}: missing field 'intermediate_size'")


def test_the_reference_config_is_named_after_the_folder(tmp_path: Path, monkeypatch: Any) -> None:
    file = _write(tmp_path / "my-llama" / "config.json", TINY["llama"])
    s = resolve_source(f" {file} ")
    assert s.config is not None and s.config.name == "my-llama"
    assert s.label == str(file)  # stripped
    _no_hf(monkeypatch)
    s = resolve_source(str(file))
    assert s.builder == "reference" and s.label == str(file)
    assert s.config is not None and s.config.name == "my-llama"
