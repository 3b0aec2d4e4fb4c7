"""The lines a plan prints under "assumptions" pinned word for word: how the pipelines were
priced (the pricer's source and names), a measured profile's line in place of the closed
form's second one, and a LoRA fine-tune's line (its base in NF4 or in its stored dtype).
Every expected line is written out by hand from the pieces the search hands them."""

from __future__ import annotations

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import LoraShape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import PlanSetup
from tensorledger.plan.layouts import ASSUMPTIONS, _assumptions, _fine_tune, _pipelines
from tensorledger.plan.profile import ModelProfile
from tests.plan.made_up import made_up_profile


def _profile() -> ModelProfile:
    return made_up_profile(seq_len=512, precision="bf16-master", notes=("note one", "note two"))


def test_the_pipelines_line_names_the_pricer_and_its_schedules() -> None:
    setup = PlanSetup(get_preset("tiny"), get_hardware("h100"), 2, 16, 4,
                      resolve_precision("fp32"), resolve_optimizer("adamw"), 1e12)
    # SchedulePricer's source and its names ("gpipe", "1f1b") joined by ", "
    assert _pipelines(setup) == (
        "pipeline bubble and micro-batches in flight per stage: closed form (equal to "
        "torch's action lists) (gpipe, 1f1b; a forward, an input-gradient and a "
        "weight-gradient action the same time); the slowest rank sets the pace: its blocks, "
        "and on the last the head's FLOPs")


def test_a_profile_replaces_the_second_assumption_and_adds_its_notes() -> None:
    measured = ("parameters, FLOPs, saved activations, the loss's temporaries and "
                "tensor-parallel bytes: made-up's profile, by hand")
    # four closed-form lines, the second (activations) swapped for the profile's, then its
    # two notes: 4 + 2 = 6 lines
    assert _assumptions(_profile()) == (ASSUMPTIONS[0], measured, ASSUMPTIONS[2],
                                        ASSUMPTIONS[3], "note one", "note two")
    assert _assumptions(get_preset("tiny")) == ASSUMPTIONS


_ADAPTERS = ("fp32 adapters alone get gradients and optimizer state (reduced over data "
             "parallelism), split over TP as their linears; no frozen weight's gradient "
             "(base 4·N FLOPs a token, adapters 6·n); no context parallelism searched")


def test_a_lora_line_says_the_base_stays_in_its_stored_dtype() -> None:
    lora = LoraShape(8, ("query", "value"))
    assert _fine_tune(lora) == (
        "LoRA r=8 on query, value: the base frozen, in its stored dtype; " + _ADAPTERS,)
    assert _fine_tune(None) == ()


def test_a_qlora_line_says_the_base_is_nf4_but_the_head() -> None:
    lora = LoraShape(4, ("query",), nf4=True)
    assert _fine_tune(lora) == (
        "QLoRA r=4 on query over a 4-bit NF4 base: the base frozen, its linears (but the "
        "head) in 4-bit NF4 with block scales, dequantised at each use; " + _ADAPTERS,)
