"""PlanSetup's refusals and LayoutChoice's name: an unknown attention kernel, eager attention
asked of a traced profile, an efficiency outside (0, 1], LoRA beside a float8 recipe or a
profile; and each part of a layout's name (ZeRO over the shard and the context-parallel
ranks, EP, CP, TP with SP, a pipeline's schedule, chunks but ZBV's, uneven stages)."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import lora_shape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup
from tensorledger.plan.model import SearchModel
from tests.plan.made_up import made_up_profile

TINY = get_preset("tiny")


def _setup(config: object = TINY, precision: str = "fp32", **change: object) -> PlanSetup:
    return PlanSetup(config, get_hardware("h100"), 2, 16, 4,  # type: ignore[arg-type]
                     resolve_precision(precision), resolve_optimizer("adamw"), 1e12, **change)


def test_the_setup_accepts_what_it_prices_and_builds_its_model_once() -> None:
    for attention in ("flash", "eager"):
        assert _setup(attention=attention).attention == attention
    for efficiency in (1.0, 1e-9, None):
        assert _setup(efficiency=efficiency).efficiency == efficiency
    setup = _setup(made_up_profile())  # a profile with flash attention
    assert isinstance(setup.__dict__["_model"], SearchModel)
    assert setup.tokens_per_step == 4 * 16
    lora = lora_shape(TINY, 8)
    assert _setup(precision="mixed-bf16", lora=lora).lora == lora


def test_the_setup_refuses_what_it_cannot_price() -> None:
    with pytest.raises(InputError, match="unknown attention 'FLASH'; known: flash, eager"):
        _setup(attention="FLASH")
    with pytest.raises(InputError, match="made-up is planned from its traced profile, whose "
                                         "attention is the kernel it ran; drop --attention"):
        _setup(made_up_profile(), attention="eager")
    for efficiency in (0.0, -0.5, 1.0000001):
        with pytest.raises(InputError, match=r"efficiency must be in \(0, 1\], got"):
            _setup(efficiency=efficiency)
    with pytest.raises(InputError, match="--lora trains adapters beside frozen weights; "
                                         "--precision fp8-rowwise converts the linears"):
        _setup(precision="fp8-rowwise", lora=lora_shape(TINY, 8))
    with pytest.raises(InputError, match="--lora is priced on a preset's closed form; made-up "
                                         "is planned from its traced profile"):
        _setup(made_up_profile(), lora=lora_shape(TINY, 8))


@pytest.mark.parametrize(("choice", "name"), [
    (LayoutChoice(dp=4, tp=1, pp=1), "DP 4"),
    (LayoutChoice(dp=4, tp=2, pp=1, zero=2, shard=4), "DP 4 (ZeRO-2 × 4) · TP 2"),
    (LayoutChoice(dp=4, cp=2, tp=1, pp=1, zero=3, shard=2), "DP 4 (ZeRO-3 × 2·CP) · CP 2"),
    (LayoutChoice(dp=4, tp=1, pp=1, ep=2), "DP 4 · EP 2"),
    (LayoutChoice(dp=1, tp=2, pp=1, sp=True), "DP 1 · TP 2 + SP"),
    (LayoutChoice(dp=1, tp=1, pp=2, schedule="1f1b"), "DP 1 · PP 2 1f1b"),
    (LayoutChoice(dp=1, tp=1, pp=2, schedule="looped-bfs", chunks=2),
     "DP 1 · PP 2 looped-bfs × 2"),
    (LayoutChoice(dp=1, tp=1, pp=2, schedule="zbv", chunks=2), "DP 1 · PP 2 zbv"),
    (LayoutChoice(dp=1, tp=1, pp=2, schedule="gpipe", stage_layers=(3, 3)),
     "DP 1 · PP 2 gpipe"),
    (LayoutChoice(dp=1, tp=1, pp=2, schedule="gpipe", stage_layers=(2, 4)),
     "DP 1 · PP 2 gpipe, stages 2,4"),
])
def test_a_layouts_name(choice: LayoutChoice, name: str) -> None:
    assert choice.describe() == name
