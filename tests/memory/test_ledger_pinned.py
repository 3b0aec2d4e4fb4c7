"""The memory ledger and timeline pinned on one hand-made step whose every figure is worked
out below: which storages are live at the peak (largest first, at most ``top``) and who made
them, the phase spans, and every field the ledger carries over from the step or the recipe.

The step (bytes; storage 0, 1000 B of parameters, exists before it):

====  ==================  =======  =========  ===========================================  =====
 op    name                module   phase      storages                                     total
====  ==================  =======  =========  ===========================================  =====
 0     aten.mm             layer.a  forward    +1 (300, saved), +2 (50, temporary)           1350
 1     aten.relu           layer.b  forward    −2; +3 (400, saved), +6 (20), +10…20 (1 each)  1731
 2     aten.mm_backward    layer.b  backward   −1, −3, −6, −10…20; +4 (400, gradient)        1400
 3     aten.add_           optim    optimizer  +5 (80, optimizer state)                      1480
====  ==================  =======  =========  ===========================================  =====

1731 = 1000 + 300 + 400 + 20 + 11; the peak is op 1's.  Saved activations peak at 700 (op 1),
gradients at 400, and the step ends with 80 B of optimizer state.
"""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.memory.ledger import MemoryPart, StepFacts, memory_ledger
from tensorledger.memory.timeline import (
    LiveStorage,
    PhaseSpan,
    build_timeline,
    phase_spans,
)
from tensorledger.napkin.activations import activation_memory
from tensorledger.napkin.recipes import recipe_bytes, resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig
from tensorledger.trace.records import OpRecord, Trace

SMALL = tuple((s, 1) for s in range(10, 21))  # eleven 1-byte temporaries


def _record(i: int, op: str, module: str, phase: str, created: tuple[tuple[int, int], ...],
            freed: tuple[int, ...] = ()) -> OpRecord:
    return OpRecord(i, op, module, phase, "elementwise", (), (), (), (), 0, 0, 0, True, 0,
                    created, freed)


STEP = Trace(records=(
    _record(0, "aten.mm", "layer.a", "forward", ((1, 300), (2, 50))),
    _record(1, "aten.relu", "layer.b", "forward", ((3, 400), (6, 20), *SMALL), (2,)),
    _record(2, "aten.mm_backward", "layer.b", "backward", ((4, 400),),
            (1, 3, 6, *(s for s, _ in SMALL))),
    _record(3, "aten.add_", "optim", "optimizer", ((5, 80),)),
), uncovered={}, device="meta", storages_preexisting=((0, 1000),))
TAGS = {0: "parameter", 1: "saved_activation", 3: "saved_activation", 4: "gradient",
        5: "optimizer_state"}


def test_the_storages_live_at_the_peak_largest_first_with_their_makers() -> None:
    timeline = build_timeline(STEP, TAGS)
    assert [p.total_bytes for p in timeline.points] == [1350, 1731, 1400, 1480]
    assert timeline.start == dataclasses.replace(timeline.start, index=-1, op="", phase="",
                                                 module="")
    assert (timeline.peak.index, timeline.peak.phase) == (1, "forward")
    assert timeline.storages == 1 + 2 + 13 + 1 + 1  # every storage seen once
    # 15 live at the peak; the 12 largest, ties by id: 0, 3, 1, 6, then 10…17
    assert timeline.live_at_peak == (
        LiveStorage(0, 1000, "parameter", "", "", ""),
        LiveStorage(3, 400, "saved_activation", "aten.relu", "layer.b", "forward"),
        LiveStorage(1, 300, "saved_activation", "aten.mm", "layer.a", "forward"),
        LiveStorage(6, 20, "temporary", "aten.relu", "layer.b", "forward"),
        *(LiveStorage(s, 1, "temporary", "aten.relu", "layer.b", "forward")
          for s in range(10, 18)))
    assert len(build_timeline(STEP, TAGS, top=13).live_at_peak) == 13


def test_phase_spans_count_their_ops() -> None:
    spans = phase_spans(build_timeline(STEP, TAGS).points)
    assert spans == (PhaseSpan("forward", 0, 1, 2), PhaseSpan("backward", 2, 2, 1),
                     PhaseSpan("optimizer", 3, 3, 1))


def _facts(config: TransformerConfig | None, precision: str) -> StepFacts:
    return StepFacts(model="handmade", step="train", batch=3, seq_len=5,
                     precision=resolve_precision(precision), optimizer=resolve_optimizer("adam"),
                     device="meta", checkpointed=True, param_numels=[250], config=config)


def test_the_ledger_carries_the_step_and_the_peak() -> None:
    h100 = get_hardware("h100")
    first = Trace(records=(_record(0, "aten.mm", "m", "forward", ((1, 5000),)),), uncovered={},
                  device="meta", storages_preexisting=((0, 1000),))
    ledger = memory_ledger(STEP, TAGS, _facts(None, "bf16-master"), hardware=h100,
                           first_step=(first, {0: "parameter"}), measured_peak_bytes=1800)
    assert (ledger.model, ledger.step, ledger.batch, ledger.seq_len, ledger.device,
            ledger.checkpointed) == ("handmade", "train", 3, 5, "meta", True)
    assert (ledger.precision, ledger.optimizer) == ("bf16-master", "adam")
    assert (ledger.peak_bytes, ledger.peak_op, ledger.peak_phase, ledger.peak_module) == (
        1731, "aten.relu", "forward", "layer.b")
    # parameters and optimizer state as the step ends; gradients and saved at their high point
    assert (ledger.params_bytes, ledger.optimizer_state_bytes) == (1000, 80)
    assert (ledger.grads_bytes, ledger.saved_activation_bytes) == (400, 700)
    assert ledger.first_step_peak_bytes == 1000 + 5000
    assert ledger.timeline.measured_peak_bytes == 1800
    # the default is one device
    assert ledger.fit is not None and (ledger.fit.hardware, ledger.fit.count) == (h100.name, 1)
    # bf16-master on 250 params: 2·250 = 500 B parameters and gradients, master 4·250 = 1000
    # and Adam's two fp32 moments 8·250 = 2000 with a 4-byte step counter for the one tensor:
    # 2004; the optimizer-state row holds the master copy too, 1000 + 2004 = 3004
    recipe = recipe_bytes("bf16-master", "adam", [250])
    assert (recipe.params_bytes, recipe.master_bytes, recipe.optimizer_bytes) == (500, 1000, 2004)
    assert ledger.parts() == (MemoryPart("parameter", 1000, 500),
                              MemoryPart("gradient", 400, 500),
                              MemoryPart("optimizer_state", 80, 3004),
                              MemoryPart("saved_activation", 700, None))
    without = memory_ledger(STEP, TAGS, _facts(None, "bf16-master"))
    assert (without.first_step_peak_bytes, without.fit) == (None, None)


def test_the_closed_form_is_for_the_checkpointed_step() -> None:
    config = TransformerConfig(vocab_size=11, context_length=13, d_model=24, n_layers=2,
                               n_heads=3)
    ledger = memory_ledger(STEP, TAGS, _facts(config, "fp32"))
    closed = activation_memory(config, 3, 5, 4, True)  # fp32: 4-byte activations
    assert closed != activation_memory(config, 3, 5, 4, False)
    assert ledger.activations_closed_form == closed
    assert ledger.parts()[-1] == MemoryPart("saved_activation", 700, closed.total_bytes)


def test_an_empty_step_is_its_start() -> None:
    empty = Trace(records=(), uncovered={}, device="meta", storages_preexisting=((0, 1000),))
    ledger = memory_ledger(empty, {0: "parameter"}, _facts(None, "fp32"))
    assert (ledger.params_bytes, ledger.grads_bytes, ledger.saved_activation_bytes) == (1000, 0, 0)
    assert ledger.peak_bytes == 1000


def test_a_rank_of_a_layout_says_so() -> None:
    facts = dataclasses.replace(_facts(None, "fp32"), ranks=8, layout="FSDP ZeRO-3 × 8")
    ledger = memory_ledger(STEP, TAGS, facts)
    assert (ledger.ranks, ledger.layout) == (8, "FSDP ZeRO-3 × 8")


@pytest.mark.parametrize("count", [0, True])
def test_the_device_count_is_a_whole_number(count: int) -> None:
    with pytest.raises(InputError, match=r"^count must be a whole number"):
        memory_ledger(STEP, TAGS, _facts(None, "fp32"), count=count)
