"""plan_setup pinned: each option checked in one line (count, sequence, a profile's own
sequence and recipe, global batch, budget), the budget the device's reserve leaves, and
every option carried into the setup as given."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import LoraShape
from tensorledger.napkin.headroom import device_headroom
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.layouts import plan_setup
from tensorledger.plan.pipeline import SchedulePricer
from tests.plan.made_up import made_up_profile

H100 = get_hardware("h100")  # 80 GB
TINY = get_preset("tiny")  # context 32


def _refusal(config: object = TINY, count: int = 2, **kwargs: object) -> str:
    options = {"seq_len": 16, "global_batch_seqs": 2, **kwargs}
    with pytest.raises(InputError) as caught:
        plan_setup(config, H100, count, **options)  # type: ignore[arg-type]
    return str(caught.value)


def test_counts_are_whole_numbers_in_range() -> None:
    assert _refusal(count=0) == "count must be a whole number from 1 to 1,048,576, got 0"
    assert _refusal(seq_len=33) == "seq_len must be a whole number from 1 to 32, got 33"
    plan_setup(TINY, H100, 2, seq_len=32, global_batch_seqs=2)  # the whole context
    assert _refusal(global_batch_seqs=0) == (
        "global batch (sequences) must be a whole number from 1 to 4,294,967,296, got 0")
    plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=1 << 32)



def test_a_profile_is_planned_at_its_own_sequence_and_recipe() -> None:
    assert _refusal(made_up_profile(), seq_len=32, precision="fp32") == (
        "made-up's profile was measured at seq 16 under fp32; measure it at seq 32 under "
        "fp32 to plan those")
    assert _refusal(made_up_profile(), precision="bf16-master") == (
        "made-up's profile was measured at seq 16 under fp32; measure it at seq 16 under "
        "bf16-master to plan those")
    # the recipe is compared by its resolved name: "FP32" is fp32
    setup = plan_setup(made_up_profile(), H100, 2, seq_len=16, global_batch_seqs=2,
                       precision="FP32")
    assert setup.precision == resolve_precision("fp32")


def test_the_budget_is_above_zero_and_at_most_the_device() -> None:
    assert _refusal(budget_bytes=0.0) == (
        "the memory budget must be above 0 and at most h100-sxm's 80 GB, got 0 GB")
    assert _refusal(budget_bytes=81e9) == (
        "the memory budget must be above 0 and at most h100-sxm's 80 GB, got 81 GB")
    whole = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=2,
                       budget_bytes=H100.memory_bytes)
    assert whole.budget_bytes == H100.memory_bytes
    # none given: the device less its reserve for a job of 2 (a communicator's buffers too)
    default = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=2)
    assert default.budget_bytes == device_headroom(2).largest_peak(H100.memory_bytes)
    assert default.budget_bytes < device_headroom(1).largest_peak(H100.memory_bytes)


def test_every_option_is_carried_into_the_setup() -> None:
    pricer = SchedulePricer()
    lora = LoraShape(8, ("query", "value"))
    setup = plan_setup(TINY, H100, 4, seq_len=16, global_batch_seqs=8, precision="fp32",
                       optimizer="sgd", budget_bytes=1e10, efficiency=0.5, attention="eager",
                       max_pp=2, schedules=pricer, lora=lora)
    assert (setup.config, setup.hardware, setup.count, setup.seq_len) == (TINY, H100, 4, 16)
    assert setup.global_batch_seqs == 8
    assert (setup.precision, setup.optimizer) == (resolve_precision("fp32"),
                                                  resolve_optimizer("sgd"))
    assert (setup.budget_bytes, setup.efficiency, setup.attention) == (1e10, 0.5, "eager")
    assert setup.max_pp == 2 and setup.schedules is pricer and setup.lora == lora
    # the defaults: bf16 master weights, AdamW, flash, the closed-form pricer
    default = plan_setup(TINY, H100, 4, seq_len=16, global_batch_seqs=8)
    assert (default.precision, default.optimizer) == (resolve_precision("bf16-master"),
                                                      resolve_optimizer("adamw"))
    assert (default.efficiency, default.attention, default.max_pp, default.lora) == (
        None, "flash", None, None)
    assert type(default.schedules) is SchedulePricer


def test_any_budget_above_zero_is_taken() -> None:
    # half a byte: nothing fits in it, but it is a budget (the search reports what does not fit)
    setup = plan_setup(TINY, H100, 2, seq_len=16, global_batch_seqs=2, budget_bytes=0.5)
    assert setup.budget_bytes == 0.5
