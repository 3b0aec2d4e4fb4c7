"""The config.json checker's rules (issue 42's mutation run of
``tensorledger.workload.hf_checks``), called directly and torch-free: the heads
``architectures`` asks for, each size's bounds, missing fields and their defaults, the
divisibility of heads, the padding token, and the learned positions' longest sequence."""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.errors import ConfigError
from tensorledger.workload import hf_checks as hk

# every size differs: hidden 40, heads 4 (40 / 4 = 10), kv 2, vocab 97, inner 72, 3 layers
LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_size": 40, "num_hidden_layers": 3,
                         "num_attention_heads": 4, "vocab_size": 97, "intermediate_size": 72}
GPT2: dict[str, Any] = {"model_type": "gpt2", "n_embd": 40, "n_layer": 3, "n_head": 4,
                        "vocab_size": 97, "n_positions": 64}


def test_heads_by_class_name_ending() -> None:
    assert hk.HEADS == {"ForCausalLM": "causal-lm", "LMHeadModel": "causal-lm",
                        "ForMaskedLM": "masked-lm",
                        "ForSequenceClassification": "sequence-classification"}
    bert = hk.FAMILIES["bert"]
    assert hk._head({}, bert, "bert", "w") == "masked-lm"  # none written: the family's first
    assert hk._head({"architectures": None}, bert, "bert", "w") == "masked-lm"
    assert hk._head({"architectures": []}, bert, "bert", "w") == "masked-lm"
    # the first entry decides
    assert hk._head({"architectures": ["BertForSequenceClassification", "BertForMaskedLM"]},
                    bert, "bert", "w") == "sequence-classification"
    assert hk._head({"architectures": ["GPT2LMHeadModel"]}, hk.FAMILIES["gpt2"], "gpt2",
                    "w") == "causal-lm"
    assert hk._head({"architectures": ["LlamaForCausalLM"]}, hk.FAMILIES["llama"], "llama",
                    "w") == "causal-lm"


def test_heads_not_in_the_family_or_not_class_names_are_refused() -> None:
    llama = hk.FAMILIES["llama"]
    # a decoder's heads are causal-lm and sequence-classification: the known endings of those
    with pytest.raises(ConfigError, match=r"^w: field 'architectures' asks for "
                                          r"'LlamaForMaskedLM'; a llama model is built here "
                                          r"with one of the heads …ForCausalLM, …LMHeadModel, "
                                          r"…ForSequenceClassification$"):
        hk._head({"architectures": ["LlamaForMaskedLM"]}, llama, "llama", "w")
    with pytest.raises(ConfigError, match="asks for 'LlamaModel'"):  # no head at all
        hk._head({"architectures": ["LlamaModel"]}, llama, "llama", "w")
    with pytest.raises(ConfigError, match=r"^w: field 'architectures' must be a list of class "
                                          r"names such as \[\"LlamaForCausalLM\"\], got "
                                          r"LlamaForCausalLM$"):
        hk._head({"architectures": "LlamaForCausalLM"}, llama, "llama", "w")
    with pytest.raises(ConfigError, match=r"must be a list of class names.*got \['A', 3\]$"):
        hk._head({"architectures": ["A", 3]}, llama, "llama", "w")  # one entry not a name


def test_family_tables_head_defaults() -> None:
    family = hk.Family({}, (), {})
    assert family.heads == ("causal-lm", "sequence-classification")  # a decoder's two
    assert family.nullable == frozenset({"num_key_value_heads", "head_dim",
                                         "intermediate_size"})
    assert (family.learned_positions, family.heads_divide_hidden, family.kv_only_if,
            family.pad_token_default) == (False, False, None, None)
    # any other model_type may ask for any of the three heads
    assert hk._OTHER.heads == ("causal-lm", "masked-lm", "sequence-classification")
    assert hk._OTHER.required == ()


@pytest.mark.parametrize("standard", sorted(hk.SIZES))
def test_each_size_is_whole_and_between_one_and_its_largest(standard: str) -> None:
    size = hk.SIZES[standard]
    assert size.standard == standard
    assert hk._whole({"k": size.largest}, "k", size, "w") == size.largest  # the bound: kept
    assert hk._whole({"k": 1}, "k", size, "w") == 1
    assert hk._whole({}, "k", size, "w") is None  # absent
    assert hk._whole({"k": None}, "k", size, "w") is None  # null
    with pytest.raises(ConfigError, match=rf"^w: field 'k' \({size.what}\) must be between 1 "
                                          rf"and {size.largest:,}, got {size.largest + 1:,}$"):
        hk._whole({"k": size.largest + 1}, "k", size, "w")
    with pytest.raises(ConfigError, match=r"must be between 1 and .*, got 0$"):
        hk._whole({"k": 0}, "k", size, "w")
    with pytest.raises(ConfigError, match=rf"^w: field 'k' \({size.what}\) must be a whole "
                                          r"number, got True$"):
        hk._whole({"k": True}, "k", size, "w")
    with pytest.raises(ConfigError, match=r"must be a whole number, got 2\.0$"):
        hk._whole({"k": 2.0}, "k", size, "w")


def test_the_bounds_sit_past_the_largest_published_models() -> None:
    # the module's docstring: 126 layers, hidden up to 18,432, 256k vocabularies, 10M positions
    largest = {s: f.largest for s, f in hk.SIZES.items()}
    assert largest == {"hidden_size": 2**17, "num_hidden_layers": 2**10,
                       "num_attention_heads": 2**12, "num_key_value_heads": 2**12,
                       "vocab_size": 2**22, "intermediate_size": 2**20,
                       "max_position_embeddings": 2**24, "head_dim": 2**12}
    assert largest["num_hidden_layers"] > 126 and largest["hidden_size"] > 18432
    assert largest["vocab_size"] > 256000 and largest["max_position_embeddings"] > 10**7
    assert (hk.LABELS.standard, hk.LABELS.largest) == ("num_labels", 2**16)


def test_a_huge_number_is_told_by_its_digits_not_written_out() -> None:
    size = hk.SIZES["vocab_size"]
    with pytest.raises(ConfigError, match=r"got a number of 31 digits$"):
        hk._whole({"k": 10**30}, "k", size, "w")  # 10^30 has 31 digits
    with pytest.raises(ConfigError, match=r"got a number of 32 digits$"):
        hk._whole({"k": -(10**30)}, "k", size, "w")  # |-10^30| ≥ 10^30: its 32 characters
    # just below 10^30: written out with thousands separators
    with pytest.raises(ConfigError, match=r"got 999,999,999,999,999,999,999,999,999,999$"):
        hk._whole({"k": 10**30 - 1}, "k", size, "w")
    with pytest.raises(ConfigError, match=r"got -5$"):
        hk._whole({"k": -5}, "k", size, "w")


def test_a_complete_config_passes_unchanged() -> None:
    checked = hk.check_hf_config(LLAMA)
    assert checked.raw == LLAMA and checked.raw is not LLAMA  # a copy
    assert (checked.filled, checked.head, checked.max_seq) == ((), "causal-lm", None)
    # learned positions: the longest sequence is the table's
    assert hk.check_hf_config(GPT2).max_seq == 64
    # bert: its own first head
    bert = {"model_type": "bert", "hidden_size": 40, "num_hidden_layers": 3,
            "num_attention_heads": 4, "vocab_size": 97, "intermediate_size": 72,
            "max_position_embeddings": 50}
    assert (hk.check_hf_config(bert).head, hk.check_hf_config(bert).max_seq) == (
        "masked-lm", 50)


def test_missing_fields_are_named_with_their_defaults_or_filled() -> None:
    one = {k: v for k, v in LLAMA.items() if k != "vocab_size"}
    with pytest.raises(ConfigError, match=r"^c: missing field 'vocab_size' \(model_type "
                                          r"'llama'\); write it, or fill transformers' default "
                                          r"\(32000\) with --fill-defaults$"):
        hk.check_hf_config(one, "c")
    two = {k: v for k, v in one.items() if k != "num_hidden_layers"}
    with pytest.raises(ConfigError, match=r"^c: missing fields 'num_hidden_layers', "
                                          r"'vocab_size' \(model_type 'llama'\); write them, or "
                                          r"fill transformers' defaults \(32, 32000\) with "
                                          r"--fill-defaults$"):
        hk.check_hf_config(two, "c")
    filled = hk.check_hf_config(two, fill_defaults=True)
    assert filled.filled == ("num_hidden_layers", "vocab_size")  # in the family's order
    assert (filled.raw["num_hidden_layers"], filled.raw["vocab_size"]) == (32, 32000)
    # gpt2 names its own keys: n_layer missing, its default 12
    gpt = {k: v for k, v in GPT2.items() if k != "n_layer"}
    filled = hk.check_hf_config(gpt, fill_defaults=True)
    assert (filled.filled, filled.raw["n_layer"]) == (("n_layer",), 12)


def test_a_null_nullable_field_is_derived_not_missing() -> None:
    # llama's intermediate_size written as null: transformers derives it, nothing filled
    checked = hk.check_hf_config({**LLAMA, "intermediate_size": None})
    assert checked.filled == ()
    # bert has no nullable fields: null is missing
    bert = {"model_type": "bert", "hidden_size": 40, "num_hidden_layers": 3,
            "num_attention_heads": 4, "vocab_size": 97, "intermediate_size": None,
            "max_position_embeddings": 50}
    with pytest.raises(ConfigError, match="missing field 'intermediate_size'"):
        hk.check_hf_config(bert)
    # null num_key_value_heads beside 4 heads: not read, so no divisibility to refuse
    assert hk.check_hf_config({**LLAMA, "num_key_value_heads": None}).filled == ()


def test_every_size_written_is_bounded_and_the_labels_too() -> None:
    with pytest.raises(ConfigError, match="'head_dim' \\(the size of one head\\)"):
        hk.check_hf_config({**LLAMA, "head_dim": 0})
    # any other model_type: nothing required, a written size still bounded
    assert hk.check_hf_config({"model_type": "t5"}).filled == ()
    with pytest.raises(ConfigError, match="'hidden_size'"):
        hk.check_hf_config({"model_type": "t5", "hidden_size": -1})
    with pytest.raises(ConfigError, match=r"^c: field 'num_labels' \(the number of labels\) "
                                          r"must be between 1 and 65,536, got 65,537$"):
        hk.check_hf_config({**LLAMA, "num_labels": 65537}, "c")  # 2^16 + 1
    assert hk.check_hf_config({**LLAMA, "num_labels": 65536}).filled == ()


def test_heads_divide_the_hidden_size_where_the_attention_splits_it() -> None:
    with pytest.raises(ConfigError, match=r"^c: field 'n_head' \(3\) must divide 'n_embd' "
                                          r"\(40\): the attention splits"):
        hk.check_hf_config({**GPT2, "n_head": 3}, "c")  # 40 % 3 = 1
    # llama sizes heads by head_dim: 3 heads beside hidden 40 are fine
    assert hk.check_hf_config({**LLAMA, "num_attention_heads": 3}).filled == ()


def test_key_value_heads_divide_the_heads() -> None:
    with pytest.raises(ConfigError, match=r"^c: field 'num_key_value_heads' \(3\) must divide "
                                          r"'num_attention_heads' \(4\): each key/value head"):
        hk.check_hf_config({**LLAMA, "num_key_value_heads": 3}, "c")  # 4 % 3 = 1
    assert hk.check_hf_config({**LLAMA, "num_key_value_heads": 2}).filled == ()  # 4 % 2 = 0
    falcon = {"model_type": "falcon", "hidden_size": 40, "num_hidden_layers": 3,
              "num_attention_heads": 4, "vocab_size": 97, "num_kv_heads": 3}
    # falcon reads num_kv_heads only with new_decoder_architecture
    assert hk.check_hf_config(falcon).filled == ()
    assert hk.check_hf_config({**falcon, "new_decoder_architecture": False}).filled == ()
    with pytest.raises(ConfigError, match=r"field 'num_kv_heads' \(3\) must divide "
                                          r"'num_attention_heads' \(4\)"):
        hk.check_hf_config({**falcon, "new_decoder_architecture": True})


def test_the_padding_token_is_inside_the_vocabulary() -> None:
    assert hk.check_hf_config({**LLAMA, "pad_token_id": 96}).filled == ()  # the last of 97
    assert hk.check_hf_config({**LLAMA, "pad_token_id": 0}).filled == ()
    with pytest.raises(ConfigError, match=r"^c: field 'pad_token_id' is 97, outside the "
                                          r"vocabulary of 97; write a pad_token_id below 97$"):
        hk.check_hf_config({**LLAMA, "pad_token_id": 97}, "c")
    with pytest.raises(ConfigError, match="'pad_token_id' is -1, outside"):
        hk.check_hf_config({**LLAMA, "pad_token_id": -1})
    # a bool or text is not a token id here: transformers' business
    assert hk.check_hf_config({**LLAMA, "pad_token_id": True, "vocab_size": 1}).filled == ()
    assert hk.check_hf_config({**LLAMA, "pad_token_id": "9"}).filled == ()
    # phi3's default pad token 32000 needs a vocabulary past it, and says it was the default
    phi3 = {**LLAMA, "model_type": "phi3"}
    with pytest.raises(ConfigError, match=r"'pad_token_id' is 32000 \(transformers' default\), "
                                          r"outside the vocabulary of 97"):
        hk.check_hf_config(phi3)
    assert hk.check_hf_config({**phi3, "vocab_size": 32001}).filled == ()
    assert hk.check_hf_config({**phi3, "pad_token_id": None}).filled == ()  # null: no token


def test_the_head_is_checked_on_the_filled_fields() -> None:
    checked = hk.check_hf_config({**LLAMA, "architectures": ["LlamaForSequenceClassification"]})
    assert checked.head == "sequence-classification"
    with pytest.raises(ConfigError, match=r"^c: field 'architectures' asks for "
                                          r"'LlamaForMaskedLM'; a llama model is built here"):
        hk.check_hf_config({**LLAMA, "architectures": ["LlamaForMaskedLM"]}, "c")


def test_computed_positions_have_no_longest_sequence() -> None:
    # llama's rotary positions: max_position_embeddings is no table, so no bound on the step
    assert hk.check_hf_config({**LLAMA, "max_position_embeddings": 64}).max_seq is None


def test_defaults_pair_each_name_with_its_value() -> None:
    assert hk._defaults(1, 2, 3, 4, 5) == {"hidden_size": 1, "num_hidden_layers": 2,
                                           "num_attention_heads": 3, "vocab_size": 4,
                                           "intermediate_size": 5}
    assert hk._defaults(7, 8, names=("a", "b")) == {"a": 7, "b": 8}
    with pytest.raises(ValueError, match="zip"):
        hk._defaults(1, 2)  # two values for five names: refused, not cut short
