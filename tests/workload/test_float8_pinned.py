"""torchao float8's pieces (issue 42's mutation run of ``tensorledger.workload.float8``): the
16-grid filter, the input cast under CPU autocast, the conversion's report and its summary line,
on small real CPU modules (no trace)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.napkin.recipes import resolve_precision
from tensorledger.workload import float8


@pytest.mark.parametrize(("inputs", "outputs", "eligible"), [
    (16, 32, True),  # both multiples of 16
    (16, 24, False),  # 24 = 16 + 8: out off the grid
    (24, 16, False),  # in off the grid
    (8, 8, False),
])
def test_a_linear_is_eligible_on_the_16_grid_only(inputs: int, outputs: int,
                                                  eligible: bool) -> None:
    assert float8._eligible(nn.Linear(inputs, outputs)) is eligible


def test_only_linears_are_eligible() -> None:
    assert float8._eligible(nn.Embedding(16, 16)) is False


def test_the_input_is_cast_to_the_cpu_autocast_dtype() -> None:
    x, extra = torch.ones(2, 16), object()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = float8._cast_input(nn.Linear(16, 16), (x, extra))
    assert cast is not None
    assert cast[0].dtype == torch.bfloat16 and cast[1] is extra  # the rest passes as is
    assert float8._cast_input(nn.Linear(16, 16), (x,)) is None  # no autocast: no cast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert float8._cast_input(nn.Linear(16, 16), ()) is None  # nothing to cast
        assert float8._cast_input(nn.Linear(16, 16), ("x",)) is None  # not a tensor


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16), nn.Linear(16, 8),
                         nn.Linear(8, 8), nn.Linear(8, 16), nn.Linear(16, 24))


def test_the_conversion_reports_converted_and_skipped_linears() -> None:
    module, applied = float8.apply_float8(_mlp(), resolve_precision("fp8-tensorwise"))
    assert applied.recipe == "tensorwise"
    assert applied.converted == ("0", "2")  # 16→32, 32→16 on the grid
    assert applied.skipped == ("3", "4", "5", "6")  # 8 or 24 on a side
    assert applied.fsdp_float8_all_gather is False  # not sharded
    from torchao.float8.float8_linear import Float8Linear

    assert [type(sub) is Float8Linear for sub in module] == [
        True, False, True, False, False, False, False]
    # each converted linear casts its input under CPU autocast: the pre-hook is on it
    assert all(float8._cast_input in sub._forward_pre_hooks.values() for sub in module
               if isinstance(sub, Float8Linear))


def test_fp8_all_gather_under_fsdp_for_tensorwise_only() -> None:
    _, sharded = float8.apply_float8(_mlp(), resolve_precision("fp8-tensorwise"), sharded=True)
    assert sharded.fsdp_float8_all_gather is True
    _, rowwise = float8.apply_float8(_mlp(), resolve_precision("fp8-rowwise"), sharded=True)
    assert rowwise.recipe == "rowwise" and rowwise.fsdp_float8_all_gather is False
    with pytest.raises(InputError, match="runs no fp8"):
        float8.apply_float8(_mlp(), resolve_precision("mixed-bf16"))


def test_the_summary_names_what_was_converted() -> None:
    applied = float8.AppliedFloat8("rowwise", ("a", "b"), ("c", "d", "e", "f"), True)
    assert applied.describe(lab=False) == (
        "torchao float8 (rowwise scales): 2 linear layers run _scaled_mm, FSDP2 all-gathers "
        "their weights in fp8; 4 left in bf16 (a dimension not a multiple of 16: c, d, e, ...)")
    three = float8.AppliedFloat8("tensorwise", ("a",), ("c", "d", "e"), False)
    assert three.describe(lab=False) == (  # three skipped: all shown, no ellipsis
        "torchao float8 (tensorwise scales): 1 linear layers run _scaled_mm; 3 left in bf16 "
        "(a dimension not a multiple of 16: c, d, e)")
    assert float8.AppliedFloat8("tensorwise", (), (), False).describe(lab=False) == (
        "torchao float8 (tensorwise scales): 0 linear layers run _scaled_mm")


def test_on_cuda_torchao_casts_the_input_itself() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 16, device="cuda")  # a fake CUDA tensor: no GPU needed
    torch.set_autocast_enabled("cuda", True)
    try:
        assert float8._cast_input(nn.Linear(16, 16), (x,)) is None  # left to Float8Linear
    finally:
        torch.set_autocast_enabled("cuda", False)


def test_the_converted_linears_run_the_recipes_config() -> None:
    from torchao.float8 import Float8LinearConfig

    module, _ = float8.apply_float8(_mlp(), resolve_precision("fp8-rowwise"))
    assert module[0].config == Float8LinearConfig.from_recipe_name("rowwise")
    module, _ = float8.apply_float8(_mlp(), resolve_precision("fp8-tensorwise"), sharded=True)
    # the tensorwise recipe's config with the FSDP2 fp8 all-gather switched on
    assert module[0].config.enable_fsdp_float8_all_gather is True
    assert module[0].config == replace(Float8LinearConfig.from_recipe_name("tensorwise"),
                                       enable_fsdp_float8_all_gather=True)


def test_the_summary_adds_the_precision_labs_error_by_default() -> None:
    from tensorledger.formats.training import fp8_recipe_error

    applied = float8.AppliedFloat8("rowwise", ("a",), (), False)
    assert applied.describe() == (applied.describe(lab=False) + "; "
                                  + fp8_recipe_error("rowwise").describe())
