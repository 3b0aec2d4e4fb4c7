"""The memory rules pinned on hand-made traces and small steps: a tie keeps the first peak,
the allocator's peak is a maximum, a storage keeps its first tag, saved views count their
storage, sharding divides the state, the fit test includes equality, and saved activations
are taken at their high point."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from tensorledger.hardware import Hardware, get_hardware
from tensorledger.ledger.memory import memory_report
from tensorledger.memory.ledger import MemoryLedger
from tensorledger.memory.timeline import build_timeline
from tensorledger.trace.records import OpRecord, Trace
from tensorledger.workload import resolve_workload
from tensorledger.workload.run import TaggingRecorder
from tensorledger.workload.saved import saved_activations


def record(i: int, created: tuple[tuple[int, int], ...] = (), freed: tuple[int, ...] = (),
           module: str | None = None) -> OpRecord:
    return OpRecord(i, f"aten.op{i}", f"m{i}" if module is None else module, "forward",
                    "elementwise", (), (), (), (), 0, 0, 0, True, 0, created, freed)


def trace_of(*records: OpRecord, before: tuple[tuple[int, int], ...] = ((0, 1000),)) -> Trace:
    return Trace(records=records, uncovered={}, device="meta", storages_preexisting=before)


def test_a_tie_keeps_the_first_peak() -> None:
    # 1000 before; op 0 makes storage 1 (100): 1100; op 1 frees it and makes 2 (100): 1100
    # again, a tie; op 2 frees 2: 1000.  The peak is op 0's, with storage 1 live, not 2.
    timeline = build_timeline(trace_of(record(0, ((1, 100),)), record(1, ((2, 100),), (1,)),
                                       record(2, (), (2,))), {1: "saved_activation"})
    assert [p.total_bytes for p in timeline.points] == [1100, 1100, 1000]
    assert (timeline.peak.index, timeline.peak.op, timeline.peak.module) == (0, "aten.op0", "m0")
    assert timeline.peak.saved_activation_bytes == 100  # storage 1 is the tagged one
    assert {s.storage_id for s in timeline.live_at_peak} == {0, 1}
    assert timeline.start.total_bytes == 1000 and timeline.start.index == -1


def test_the_allocator_peak_is_the_highest_point_in_blocks_not_the_last() -> None:
    # in 512-byte blocks: 1000 → 1024 before; op 0 makes 600 (1024): 2048; op 1 frees it and
    # makes 700 (1024) and 10 (512): 2560, the byte peak (1710); op 2 frees both: 1024;
    # op 3 makes five 1-byte storages: 1005 bytes but 1024 + 5·512 = 3584 in blocks; op 4
    # frees them: 1024 again, the last value
    small = tuple((10 + i, 1) for i in range(5))
    timeline = build_timeline(trace_of(
        record(0, ((1, 600),)), record(1, ((2, 700), (3, 10)), (1,)), record(2, (), (2, 3)),
        record(3, small), record(4, (), tuple(s for s, _ in small))), {})
    assert [p.total_bytes for p in timeline.points] == [1600, 1710, 1000, 1005, 1000]
    assert timeline.peak.index == 1 and timeline.peak_bytes == 1710
    assert timeline.allocator_peak_bytes == 1024 + 5 * 512 == 3584
    assert timeline.storages == 1 + 3 + 5  # every storage seen once


def test_freed_storages_leave_their_own_category() -> None:
    timeline = build_timeline(trace_of(
        record(0, ((1, 64), (2, 32))), record(1, (), (1, 99))),  # 99 was never live
        {0: "parameter", 1: "gradient", 2: "optimizer_state"})
    first, second = timeline.points
    assert first.by_category() == {"parameter": 1000, "gradient": 64, "optimizer_state": 32,
                                   "saved_activation": 0, "kv_cache": 0, "temporary": 0}
    assert second.by_category()["gradient"] == 0
    assert second.total_bytes == 1000 + 32


def test_unknown_tags_are_refused() -> None:
    from tensorledger.errors import InputError

    with pytest.raises(InputError, match="unknown memory categories"):
        build_timeline(trace_of(), {0: "activations"})


def test_a_storage_keeps_its_first_tag() -> None:
    # the step tags parameters before anything else, so a parameter later seen again (saved by
    # an op, listed by the optimizer) stays a parameter; views share their storage's tag
    recorder = TaggingRecorder()
    outsider = torch.empty(5, device="meta")  # made before the trace: not one of its storages
    with recorder:
        weight = torch.ones(4, 8, device="meta")
        other = torch.ones(3, device="meta")
        recorder.tag([weight], "parameter")
        recorder.tag([weight[1:]], "gradient")
        recorder.tag([weight], "optimizer_state")
        recorder.tag([other], "gradient")
        recorder.tag([outsider], "gradient")
    made = [r.storages_created[0][0] for r in recorder.trace.records
            if r.op == "aten.ones.default"]
    weight_id, other_id = made
    assert recorder.tags == {weight_id: "parameter", other_id: "gradient"}


class _TwoSlices(nn.Module):
    """Saves two column views of one (4, 8) fp32 buffer: one storage of 128 bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(2, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buffer = x * 2.0
        left, right = buffer[:, :2], buffer[:, 2:4]
        return (left * self.scale).sum() + (right * self.scale).sum()


def test_saved_views_count_their_whole_storage_once() -> None:
    model = _TwoSlices()
    saved, _ = saved_activations(model, lambda: model(torch.ones(4, 8, device="meta")))
    # two saved views of 4·2 values each share one 4·8 fp32 storage: 128 bytes, not 2·32
    assert saved.total_bytes == 4 * 8 * 4 == 128
    assert saved.storages == 1
    (tensor,) = saved.tensors
    assert (tensor.nbytes, tensor.saves, tensor.shape, tensor.dtype) == (128, 2, (4, 2),
                                                                         "float32")
    assert saved.saves == 2
    (module,) = saved.by_module
    assert (module.module, module.saved_bytes, module.storages) == ("", 128, 1)
    # the scale is needed only for the input's gradient, which x does not require
    assert saved.params_saved_bytes == 0


# ---- the ledger: sharding, the fit boundary, saved activations at their high point

def memory_ledger(optimizer: str, precision: str, hardware: Hardware | None = None,
                  count: int = 1) -> MemoryLedger:
    """The memory ledger of tiny's steady-state step, batch 1 × seq 8 (meta; fake under
    autocast)."""
    work = resolve_workload("tiny", batch=1, seq=8, optimizer=optimizer, precision=precision)
    return memory_report(work, hardware, count)


def test_sharding_divides_the_state_over_count() -> None:
    ledger = memory_ledger("adamw", "fp32", get_hardware("h100"), count=7)
    peak = ledger.timeline.peak
    state = peak.parameter_bytes + peak.gradient_bytes + peak.optimizer_state_bytes
    assert state % 7 != 0  # so that the rounding up shows
    assert ledger.fit is not None
    assert ledger.fit.replica_peak_bytes == peak.total_bytes
    # activations and temporaries stay whole; the state is split seven ways (rounded up)
    assert ledger.fit.sharded_peak_bytes == peak.total_bytes - state + -(-state // 7)
    assert ledger.fit.sharded_peak_bytes < peak.total_bytes
    assert ledger.fit.count == 7
    one = memory_ledger("adamw", "fp32", get_hardware("h100"), count=1)
    assert one.fit is not None and one.fit.sharded_peak_bytes == one.fit.replica_peak_bytes


def test_the_fit_boundary_includes_equality() -> None:
    peak = memory_ledger("sgd", "fp32").peak_bytes
    h100 = get_hardware("h100")
    work = resolve_workload("tiny", batch=1, seq=8, optimizer="sgd", precision="fp32")
    # a budget given: the peak fits a budget of exactly its bytes, not one byte less
    for budget, fits in ((peak, True), (peak - 1, False)):
        fit = memory_report(work, h100, budget_bytes=float(budget)).fit
        assert fit is not None and fit.replica_peak_bytes == peak
        assert (fit.fits_replicated, fit.fits_sharded) == (fits, fits)  # count 1: the same
    # no budget: the device keeps 723 MiB of CUDA context and 5% of the peak beside it, so the
    # smallest memory the step fits is 758,120,448 + 1.05 · peak bytes
    smallest = 758_120_448 + 1.05 * peak
    for memory, fits in ((smallest + 1, True), (smallest - 1, False)):
        chip = dataclasses.replace(h100, memory_bytes=float(memory))
        fit = memory_ledger("sgd", "fp32", chip).fit
        assert fit is not None and fit.fits_replicated == fits


def test_saved_activations_are_taken_at_their_high_point() -> None:
    ledger = memory_ledger("sgd", "fp32")
    points = ledger.timeline.points
    high = max(p.saved_activation_bytes for p in points)
    assert ledger.saved_activation_bytes == high > 0
    assert points[-1].saved_activation_bytes < high  # backward has freed them by the end
    assert ledger.peak_bytes == ledger.timeline.peak.total_bytes


@pytest.mark.parametrize(("precision", "width"), [("fp32", 4), ("bf16", 2), ("lecture", 2)])
def test_the_closed_form_uses_the_parameter_width(precision: str, width: int) -> None:
    closed = memory_ledger("sgd", precision).activations_closed_form
    assert closed is not None and closed.dtype_bytes == width


def test_autocast_has_its_own_closed_form() -> None:
    closed = memory_ledger("sgd", "mixed-bf16").activations_closed_form
    # bf16 compute over fp32 weights: 2-byte activations, and the weights' bf16 copies
    assert closed is not None and closed.autocast and closed.dtype_bytes == 2
    assert closed.weight_copies_bytes > 0
