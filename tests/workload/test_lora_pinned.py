"""LoRA's pieces around peft (issue 42's mutation run of ``tensorledger.workload.lora``): the
summary line, which parameters train, the linears' names, where the targets come from, how
they are checked, and the in-place cast used on fake tensors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.workload import lora as lora_module
from tensorledger.workload.lora import AppliedLora, linear_names, trainable
from tensorledger.workload.spec import Lora


class _Base:
    """A stand-in for qlora's NF4Base: only its one line is read."""

    def describe(self) -> str:
        return "BASE"


# ---- the summary ------------------------------------------------------------------------------
def test_the_lora_line_says_targets_counts_and_share() -> None:
    applied = AppliedLora(targets=("q", "v"), targets_from="--lora-targets",
                          trainable_params=1_234, all_params=50_000, peft_version="9.9")
    # 1,234 / 50,000 = 0.02468 → 2.47%
    assert applied.describe() == (
        "LoRA through peft 9.9 on q, v (--lora-targets): 1,234 trainable parameters of 50,000 "
        "(2.47%); the rest frozen in their stored dtype")


def test_the_qlora_line_names_the_base() -> None:
    applied = AppliedLora(targets=("q",), targets_from="x", trainable_params=1,
                          all_params=4, peft_version="1", base=_Base())  # type: ignore[arg-type]
    # 1 / 4 = 25.00%
    assert applied.describe() == ("QLoRA through peft 1 on q (x): 1 trainable parameters of 4 "
                                  "(25.00%); the rest frozen: BASE")


def test_no_parameters_is_a_share_of_zero() -> None:
    applied = AppliedLora(targets=("q",), targets_from="x", trainable_params=0, all_params=0,
                          peft_version="1")
    assert "0 trainable parameters of 0 (0.00%)" in applied.describe()


# ---- trainable, linear_names ------------------------------------------------------------------
def test_trainable_keeps_the_parameters_with_gradients_in_order() -> None:
    a, b, c = (nn.Parameter(torch.zeros(1)) for _ in range(3))
    b.requires_grad_(False)
    assert trainable([a, b, c]) == [a, c]


def test_linear_names_are_last_names_once_each_in_model_order() -> None:
    model = nn.Sequential()
    model.add_module("block0", nn.ModuleDict({"v": nn.Linear(1, 1), "norm": nn.LayerNorm(1),
                                              "q": nn.Linear(1, 1)}))
    model.add_module("block1", nn.ModuleDict({"v": nn.Linear(1, 1), "k": nn.Linear(1, 1)}))
    assert linear_names(model) == ["v", "q", "k"]  # block1's v already named; no norm


def test_a_linear_model_itself_has_no_named_linears() -> None:
    # the root's name is "": it is no target peft could match
    assert linear_names(nn.Linear(1, 1)) == []


# ---- the targets ------------------------------------------------------------------------------
def _work(builder: str, hf_config: dict[str, Any] | None = None, label: str = "m") -> Any:
    return SimpleNamespace(source=SimpleNamespace(builder=builder, hf_config=hf_config,
                                                  label=label))


def _model() -> nn.Module:
    model = nn.Module()
    model.attn = nn.ModuleDict({"q_proj": nn.Linear(1, 1), "v_proj": nn.Linear(1, 1)})
    model.norm = nn.LayerNorm(1)
    return model


def test_named_targets_are_taken_as_named() -> None:
    assert lora_module._targets(_work("reference"), _model(), Lora(rank=2, alpha=2,
                                                                    targets=("x", "y"))) == (
        ("x", "y"), "--lora-targets")


def test_the_reference_model_takes_query_and_value() -> None:
    assert lora_module._targets(_work("reference"), _model(), Lora(rank=2, alpha=2)) == (
        ("query", "value"), "the reference attention's query and value: peft's q_proj, v_proj")


def test_a_transformers_model_takes_peft_s_defaults_for_its_type() -> None:
    pytest.importorskip("peft")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    expected = tuple(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["llama"])
    assert expected == ("q_proj", "v_proj")  # peft's table, the usual pair
    assert lora_module._targets(_work("transformers", {"model_type": "llama"}), _model(),
                                Lora(rank=2, alpha=2)) == (expected,
                                                           "peft's defaults for llama")


def test_a_type_peft_has_no_defaults_for_lists_the_linears() -> None:
    pytest.importorskip("peft")
    with pytest.raises(InputError) as caught:
        lora_module._targets(_work("transformers", {"model_type": "nosuch"}), _model(),
                             Lora(rank=2, alpha=2))
    assert str(caught.value) == ("peft has no default LoRA targets for nosuch; name them with "
                                 "--lora-targets (its linear modules: q_proj, v_proj)")


@pytest.mark.parametrize("builder, hf_config", [("factory", None), ("transformers", None)])
def test_a_model_without_defaults_needs_named_targets(builder: str,
                                                       hf_config: dict[str, Any] | None) -> None:
    # a factory, or transformers without a config: no model_type to look up
    with pytest.raises(InputError) as caught:
        lora_module._targets(_work(builder, hf_config, label="f.py:make"), _model(),
                             Lora(rank=2, alpha=2))
    assert str(caught.value) == ("--lora on f.py:make needs --lora-targets (its linear modules: "
                                 "q_proj, v_proj)")


def test_a_target_is_a_whole_name_or_a_dotted_tail() -> None:
    model = _model()
    lora_module._check_targets(model, ("attn.q_proj", "v_proj"))  # whole name; tail
    with pytest.raises(InputError) as caught:
        lora_module._check_targets(model, ("proj",))  # "attn.q_proj" ends "proj", not ".proj"
    assert str(caught.value) == ("--lora-targets: Module has no module 'proj'; its linear "
                                 "modules: q_proj, v_proj")


def test_a_target_that_is_no_linear_is_refused() -> None:
    with pytest.raises(InputError) as caught:
        lora_module._check_targets(_model(), ("norm",))
    assert str(caught.value) == ("--lora-targets: 'norm' names a LayerNorm, not a linear "
                                 "layer; its linear modules: q_proj, v_proj")


def test_one_linear_among_the_matches_is_enough() -> None:
    model = nn.Module()
    model.a = nn.ModuleDict({"x": nn.LayerNorm(1)})
    model.b = nn.ModuleDict({"x": nn.Linear(1, 1)})
    lora_module._check_targets(model, ("x",))  # a.x is a norm, b.x a linear: accepted


# ---- the in-place cast ------------------------------------------------------------------------
class _Buffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2))
        self.register_buffer("count", torch.zeros(2, dtype=torch.long))
        self.register_buffer("empty", None)


def test_to_casts_floating_parameters_and_buffers_in_place() -> None:
    outer = nn.Module()
    outer.inner = _Buffers()
    outer.top = nn.Parameter(torch.ones(1, dtype=torch.float64))
    outer.flag = nn.Parameter(torch.ones(1, dtype=torch.long), requires_grad=False)
    weight = outer.inner.lin.weight
    assert lora_module._to_in_place(outer, torch.float16) is outer
    assert outer.inner.lin.weight is weight  # the same Parameter, its data cast
    assert weight.dtype == torch.float16 and outer.top.dtype == torch.float16
    assert outer.flag.dtype == torch.long  # an integer parameter is left alone
    assert outer.inner.scale.dtype == torch.float16  # a submodule's floating buffer
    assert outer.inner.count.dtype == torch.long and outer.inner.empty is None


def test_to_with_a_device_or_an_integer_type_casts_nothing() -> None:
    for args, kwargs in (((), {"device": "cpu"}), ((torch.long,), {}), (("cpu",), {})):
        model = _Buffers()
        assert lora_module._to_in_place(model, *args, **kwargs) is model
        assert model.lin.weight.dtype == torch.float32 and model.scale.dtype == torch.float32


def test_to_by_keyword_casts_too() -> None:
    model = _Buffers()
    lora_module._to_in_place(model, dtype=torch.bfloat16)
    assert model.lin.weight.dtype == torch.bfloat16 and model.scale.dtype == torch.bfloat16


def test_to_of_the_same_type_keeps_the_tensors() -> None:
    model = _Buffers()
    data, scale = model.lin.weight.data, model.scale
    lora_module._to_in_place(model, torch.float32)
    assert model.lin.weight.data.data_ptr() == data.data_ptr() and model.scale is scale


def test_the_fake_safe_moves_swap_to_and_put_it_back() -> None:
    own = nn.Module.to
    with lora_module._fake_safe_moves():
        assert nn.Module.to is lora_module._to_in_place
    assert nn.Module.to is own


# ---- apply_lora on a small module -------------------------------------------------------------
class _Attention(nn.Module):
    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.q = nn.Linear(4, 6, device=device)
        self.v = nn.Linear(4, 5, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x).sum() + self.v(x).sum()


def _lora_work(device: str, **lora: Any) -> Any:
    return SimpleNamespace(lora=Lora(**{"rank": 2, "alpha": 5, "targets": ("q",)} | lora),
                           device=device, source=SimpleNamespace(builder="factory", label="m"))


def test_apply_lora_passes_rank_alpha_and_dropout_to_peft() -> None:
    pytest.importorskip("peft")
    import peft

    model, applied = lora_module.apply_lora(_lora_work("cpu", dropout=0.25), _Attention())
    assert applied.peft_version == peft.__version__
    q = model.base_model.model.q
    # A (r × d_in) = 2 × 4, B (d_out × r) = 6 × 2: 8 + 12 = 20 trainable
    assert tuple(q.lora_A["default"].weight.shape) == (2, 4)
    assert applied.trainable_params == 20 and applied.targets == ("q",)
    # all = 20 + the frozen q (4·6 + 6) and v (4·5 + 5) = 20 + 30 + 25 = 75
    assert applied.all_params == 75 and applied.targets_from == "--lora-targets"
    # alpha 5 over rank 2 (peft's own default alpha is 8: 5 tells them apart)
    assert q.scaling["default"] == 5 / 2
    assert q.lora_dropout["default"].p == 0.25 and applied.base is None
    assert not hasattr(model.base_model.model.v, "lora_A")  # v was not named


def test_apply_lora_off_fake_moves_the_adapters_with_torch_s_own_to() -> None:
    pytest.importorskip("peft")
    # on meta, the adapters are made on the CPU and moved to the base's device by Module.to;
    # the in-place cast kept for fake tensors would leave them on the CPU
    model, _ = lora_module.apply_lora(_lora_work("meta"), _Attention("meta"))
    assert model.base_model.model.q.lora_A["default"].weight.device.type == "meta"


def test_apply_lora_with_nf4_quantizes_the_base_first(monkeypatch: Any) -> None:
    pytest.importorskip("peft")
    seen: list[nn.Module] = []

    def quantize(module: nn.Module) -> str:
        seen.append(module)
        return "the NF4 base"

    monkeypatch.setattr(lora_module, "quantize_base", quantize)
    module = _Attention()
    _, applied = lora_module.apply_lora(_lora_work("cpu", nf4=True), module)
    assert seen == [module] and applied.base == "the NF4 base"
