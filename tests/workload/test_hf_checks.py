"""Issue 35 (3): a config.json is checked before anything is built.  The checker's table is held
equal to transformers' own configuration classes; every malformed config is one line, exit 2;
``architectures`` decides the head."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorledger.errors import ConfigError
from tensorledger.workload.hf_checks import FAMILIES, SIZES, check_hf_config
from tensorledger.workload.source import resolve_source
from tests.conftest import assert_one_line_error
from tests.workload.hf_configs import CHECKED, write_config

transformers = pytest.importorskip("transformers")


def _class_defaults(model_type: str) -> Any:
    return transformers.CONFIG_MAPPING[model_type]()


# ------------------------------------------------------------ the table against transformers


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_required_defaults_are_transformers_own(model_type: str) -> None:
    family = FAMILIES[model_type]
    theirs = _class_defaults(model_type)
    for standard in family.required:
        assert getattr(theirs, family.keys[standard]) == family.defaults[standard], standard


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_renamed_keys_are_transformers_attribute_map(model_type: str) -> None:
    family = FAMILIES[model_type]
    attribute_map = transformers.CONFIG_MAPPING[model_type].attribute_map
    for standard, key in family.keys.items():
        if standard in attribute_map:
            assert attribute_map[standard] == key, standard


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_fields_left_optional_are_derived_by_transformers_not_one_models(
        model_type: str) -> None:
    """A size the checker lets a config leave out is computed from the sizes written, never one
    published model's number: the tiny config without it gives hidden/heads-shaped values."""
    family = FAMILIES[model_type]
    tiny = {k: v for k, v in CHECKED[model_type].items() if k != "model_type"}
    cls = transformers.CONFIG_MAPPING[model_type]
    for standard in ("num_key_value_heads", "head_dim", "intermediate_size"):
        key = family.keys.get(standard)
        if key is None or standard in family.required:
            continue
        config = cls(**{k: v for k, v in tiny.items() if k != key})
        value = getattr(config, key, None)
        # tiny: hidden 40, heads 4 → kv = 4 heads, head_dim = 40 // 4 = 10, d_ff = 4 × 40 = 160
        assert value in (None, {"num_key_value_heads": 4, "head_dim": 10,
                                "intermediate_size": 160}[standard]), (standard, value)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_tiny_config_passes_and_transformers_reads_the_same_sizes(
        model_type: str) -> None:
    checked = check_hf_config(CHECKED[model_type])
    assert checked.filled == ()
    config = transformers.AutoConfig.for_model(**CHECKED[model_type])
    for standard, key in FAMILIES[model_type].keys.items():
        if key in CHECKED[model_type]:
            # by the standard name where transformers maps it (falcon has no intermediate_size)
            theirs = getattr(config, standard) if hasattr(config, standard) else getattr(
                config, key)
            assert theirs == CHECKED[model_type][key], standard


# ------------------------------------------------- malformed fields, by property (torch-free)

BAD_VALUES: list[Any] = [0, -1, -(2**63), True, 1.5, "32", [32], {"n": 1}]


@st.composite
def malformed(draw: st.DrawFn) -> tuple[str, str, dict[str, Any], str]:
    """A tiny config of a supported model_type with one size field broken: left out (a
    required one), written as zero, negative, past its bound, or not a whole number."""
    model_type = draw(st.sampled_from(sorted(FAMILIES)))
    family = FAMILIES[model_type]
    raw = dict(CHECKED[model_type])
    present = [s for s, k in family.keys.items() if k in raw]
    standard = draw(st.sampled_from(present))
    key = family.keys[standard]
    how = draw(st.sampled_from(["missing", "bad", "too big"]))
    if how == "missing" and standard not in family.required:
        how = "bad"
    if how == "missing":
        del raw[key]
    elif how == "too big":
        raw[key] = SIZES[standard].largest + draw(st.integers(1, 10**40))
    else:
        raw[key] = draw(st.sampled_from(BAD_VALUES))
    return model_type, key, raw, how


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(case=malformed())
def test_a_missing_negative_zero_or_huge_size_names_its_field(
        case: tuple[str, str, dict[str, Any], str]) -> None:
    model_type, key, raw, how = case
    with pytest.raises(ConfigError) as error:
        check_hf_config(raw, "c.json")
    message = str(error.value)
    assert "\n" not in message and message.startswith("c.json: ")
    assert repr(key) in message, message
    if how == "missing":
        # the same config with --fill-defaults takes transformers' default and names it (and
        # checks it: bert's 12 default heads do not divide the tiny hidden size of 40)
        try:
            checked = check_hf_config(raw, "c.json", fill_defaults=True)
        except ConfigError as filled_error:
            assert "\n" not in str(filled_error)
            return
        standard = next(s for s, k in FAMILIES[model_type].keys.items() if k == key)
        assert checked.filled == (key,)
        assert checked.raw[key] == getattr(_class_defaults(model_type), key) == \
            FAMILIES[model_type].defaults[standard]


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_each_model_type_refuses_missing_negative_and_zero_sizes_on_the_cli(
        model_type: str, tmp_path: Path, cli: Any) -> None:
    family = FAMILIES[model_type]
    layers = family.keys["num_hidden_layers"]
    vocab = family.keys["vocab_size"]
    for name, changes in (("negative", {layers: -1}), ("zero", {vocab: 0})):
        path = write_config(tmp_path / name, model_type, **changes)
        assert_one_line_error(cli("trace", "--model", str(path), "--seq", "8"), repr(
            next(iter(changes))), "must be between 1 and")
    raw = {k: v for k, v in CHECKED[model_type].items() if k != layers}
    (tmp_path / "missing.json").write_text(json.dumps(raw))
    assert_one_line_error(cli("models", str(tmp_path / "missing.json")),
                          f"missing field {layers!r}", "--fill-defaults")


# ------------------------------------------------------------------ the cases of the issue


def test_a_llama_of_one_field_is_refused_not_built_as_llama_2_7b(tmp_path: Path,
                                                                 cli: Any) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    assert_one_line_error(cli("models", str(path)), "'num_hidden_layers'",
                          "'num_attention_heads'", "'vocab_size'", "'intermediate_size'")
    source = resolve_source(str(path), fill_defaults=True)
    # LlamaConfig's own defaults: 32 layers, 32 heads, 32,000 tokens, d_ff 11,008
    theirs = transformers.LlamaConfig()
    assert source.filled == ("num_hidden_layers", "num_attention_heads", "vocab_size",
                             "intermediate_size")
    assert source.hf_config is not None
    assert [source.hf_config[k] for k in source.filled] == [
        theirs.num_hidden_layers, theirs.num_attention_heads, theirs.vocab_size,
        theirs.intermediate_size]
    assert "transformers' defaults taken: num_hidden_layers = 32" in source.built_by


@pytest.mark.parametrize(("changes", "fragments"), [
    ({"n_layer": -1}, ("'n_layer'", "got -1")),
    ({"n_layer": 1_000_000}, ("'n_layer'", "1,024", "got 1,000,000")),
    ({"vocab_size": 0}, ("'vocab_size'", "got 0")),
    ({"n_embd": 42}, ("'n_head' (4) must divide 'n_embd' (42)",)),
])
def test_malformed_gpt2_configs_are_one_line(tmp_path: Path, cli: Any,
                                             changes: dict[str, Any],
                                             fragments: tuple[str, ...]) -> None:
    path = write_config(tmp_path, "gpt2", **changes)
    assert_one_line_error(cli("trace", "--model", str(path), "--seq", "8"), *fragments)


def test_a_million_labels_are_refused_before_transformers_names_each(tmp_path: Path,
                                                                     cli: Any) -> None:
    path = write_config(tmp_path, "bert", architectures=["BertForSequenceClassification"],
                        num_labels=1_000_000)
    assert_one_line_error(cli("models", str(path)), "'num_labels'", "65,536")


def test_five_kv_heads_beside_thirty_two_heads_are_refused(tmp_path: Path, cli: Any) -> None:
    path = write_config(tmp_path, "llama", hidden_size=64, head_dim=2, num_attention_heads=32,
                        num_key_value_heads=5)
    assert_one_line_error(cli("models", str(path)),
                          "'num_key_value_heads' (5) must divide 'num_attention_heads' (32)")


def test_a_pad_token_outside_the_vocabulary_is_refused_with_phi3s_default(
        tmp_path: Path, cli: Any) -> None:
    raw = {k: v for k, v in CHECKED["phi3"].items() if k != "pad_token_id"}
    (tmp_path / "c.json").write_text(json.dumps(raw))
    # Phi3Config's pad_token_id is 32,000, outside a vocabulary of 97
    assert transformers.Phi3Config().pad_token_id == 32000
    assert_one_line_error(cli("models", str(tmp_path / "c.json")),
                          "'pad_token_id' is 32000 (transformers' default)")


def _fake_tensor_records() -> tuple[logging.Logger, list[logging.LogRecord]]:
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Keep())
    return logger, records


def test_seq_past_berts_positions_is_one_line_before_anything_is_built(
        tmp_path: Path, cli: Any) -> None:
    path = write_config(tmp_path, "bert", max_position_embeddings=48)
    assert_one_line_error(cli("trace", "--model", str(path), "--seq", "49"),
                          "--seq 49 is longer", "context of 48", "use --seq 48 or less")
    assert cli("trace", "--model", str(path), "--seq", "48", "--batch", "1",
               "--json").code == 0


@pytest.mark.parametrize("model_type", ["gpt_neox", "falcon"])
def test_rotary_models_take_a_seq_past_max_positions(tmp_path: Path, cli: Any,
                                                     model_type: str) -> None:
    # rotary positions are computed for any length: 80 > 64 runs
    path = write_config(tmp_path, model_type)
    assert cli("trace", "--model", str(path), "--seq", "80", "--batch", "1", "--precision",
               "fp32", "--json").code == 0


def test_torchs_fake_tensor_log_and_warnings_stay_off_a_refusal(tmp_path: Path,
                                                                cli: Any) -> None:
    factory = tmp_path / "fails.py"
    factory.write_text(
        "import torch, warnings\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.e = torch.nn.Embedding(10, 4)\n"
        "    def forward(self, x):\n"
        "        warnings.warn('said on the way to failing', DeprecationWarning)\n"
        "        return self.e(x) + torch.ones(1, 64, 4).expand(1, x.shape[1], 4)\n"
        "def make():\n"
        "    return M()\n")
    logger, records = _fake_tensor_records()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # the CLI's filters, not the tests' "error"
            result = cli("trace", "--model", f"{factory}:make", "--seq", "8", "--device",
                         "fake", "--precision", "fp32")
    finally:
        logger.handlers.pop()
    assert_one_line_error(result, "expanded size of the tensor (8)")
    assert records == []


# --------------------------------------------------------------- architectures → the head


def _built(path: Path) -> Any:
    from tensorledger.workload import placement, resolve_workload
    from tensorledger.workload.step import build_module

    work = resolve_workload(str(path), batch=2, seq=12, step="forward", precision="fp32",
                            device="fake")
    with placement(work.device) as target:
        module, _ = build_module(work, target)
    return work, module


@pytest.mark.parametrize(("architectures", "head", "cls"), [
    (None, "masked-lm", "BertForMaskedLM"),
    (["BertForMaskedLM"], "masked-lm", "BertForMaskedLM"),
    (["BertLMHeadModel"], "causal-lm", "BertLMHeadModel"),
    (["BertForSequenceClassification"], "sequence-classification",
     "BertForSequenceClassification"),
])
def test_berts_architectures_decide_its_head(tmp_path: Path, architectures: Any, head: str,
                                             cls: str) -> None:
    changes = {} if architectures is None else {"architectures": architectures}
    work, module = _built(write_config(tmp_path, "bert", **changes))
    assert work.source.head == head
    assert type(module).__name__ == cls
    # parameters: transformers' own class on real tensors, counted independently
    theirs = getattr(transformers, cls)(transformers.BertConfig(**CHECKED["bert"]))
    assert sum(p.numel() for p in module.parameters()) == sum(
        p.numel() for p in theirs.parameters())


@pytest.mark.parametrize("architectures", [["BertModel"], ["BertForPreTraining"],
                                           "BertForMaskedLM", [7]])
def test_an_architecture_without_a_head_here_is_one_line(tmp_path: Path, cli: Any,
                                                         architectures: Any) -> None:
    path = write_config(tmp_path, "bert", architectures=architectures)
    assert_one_line_error(cli("models", str(path)), "'architectures'")


def test_a_decoder_has_no_masked_lm_head(tmp_path: Path, cli: Any) -> None:
    path = write_config(tmp_path, "llama", architectures=["LlamaForMaskedLM"])
    assert_one_line_error(cli("models", str(path)), "LlamaForMaskedLM", "…ForCausalLM")


@pytest.mark.parametrize("model_type", ["llama", "bert"])
def test_a_sequence_classifier_trains_on_one_label_per_sequence(tmp_path: Path,
                                                                model_type: str) -> None:
    from tensorledger.workload import resolve_workload, trace_workload

    name = {"llama": "LlamaForSequenceClassification",
            "bert": "BertForSequenceClassification"}[model_type]
    path = write_config(tmp_path, model_type, architectures=[name], num_labels=3)
    train = trace_workload(resolve_workload(str(path), batch=2, seq=12, step="train",
                                            precision="fp32", device="fake"))
    forward = trace_workload(resolve_workload(str(path), batch=2, seq=12, step="forward",
                                              precision="fp32", device="fake"))
    assert train.work.source.config is None  # the closed forms are a causal LM's
    assert "sequence classification head" in train.work.source.built_by

    def losses(run: Any) -> list[Any]:
        return [r for r in run.trace.records if "nll_loss" in r.op and r.phase == "forward"]

    # the loss scores 2 sequences of 3 labels, not 2 × 12 tokens: its input is (2, 3)
    assert losses(train)
    log_softmax = [r for r in train.trace.records if "log_softmax" in r.op
                   and r.phase == "forward"]
    assert [r.output_shapes for r in log_softmax] == [((2, 3),)]
    assert losses(forward) == []  # a forward-only step computes no loss
