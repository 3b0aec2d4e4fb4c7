"""Parameter offloading (--offload params, FSDP2's CPUOffloadPolicy) on the tiny preset: the
host's state, the device's peak and the bytes copied each way per step derived by hand, the
device's figures set against the same step traced without offloading (a second trace), the
optimizer step kept off the device's time, and bad combinations refused in one line."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.ledger.memory import memory_of
from tensorledger.memory import build_timeline
from tensorledger.roofline.model import predict
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.run import StepTrace, device_records
from tensorledger.workload.spec import resolve_offload
from tests.conftest import assert_one_line_error

F32 = 4
# The tiny preset (d_model 64, 2 blocks, 4 heads × 16, 2 kv heads, d_ff 128, vocab 128,
# untied head):
#   root unit (FSDP's last fully_shard): embedding 128·64 = 8,192, head 8,192, final norm 64
ROOT = 8_192 + 8_192 + 64  # 16,448
#   a block: 2 norms 128, query 64·64 = 4,096, key and value 32·64 = 2,048 each, output 4,096,
#   up, gate and down 128·64 = 8,192 each
BLOCK = 128 + 4_096 + 2 * 2_048 + 4_096 + 3 * 8_192  # 36,992
MODEL = ROOT + 2 * BLOCK  # 90,432
TENSORS = 21  # 2 · 9 in the blocks, the embedding, the final norm, the head


def _trace(offload: str | None, **layout: int) -> StepTrace:
    work = resolve_workload("tiny", batch=2, seq=16, precision="fp32", device="fake",
                            offload=resolve_offload(offload), layout=resolve_layout(**layout))
    return trace_workload(work)


def test_fsdp2_host_state_device_peak_and_copies_by_hand() -> None:
    assert (ROOT, BLOCK, MODEL) == (16_448, 36_992, 90_432)
    run = _trace("params", fsdp=2)
    h100 = get_hardware("h100")
    ledger = memory_of(run, h100)
    moved = ledger.param_offload
    assert moved is not None
    shard = MODEL // 2 * F32  # every row count is even: 45,216 values a rank, fp32
    assert shard == 180_864
    # on the host: the shards, their gradients, AdamW's two moments and a step counter (one
    # fp32 value) for each of the 21 tensors
    assert moved.host_parameter_bytes == ledger.params_bytes == shard
    assert moved.host_gradient_bytes == ledger.grads_bytes == shard
    assert moved.host_optimizer_state_bytes == 2 * shard + TENSORS * F32 == 361_812
    # copies each step: forward gathers every unit once (the whole shard, 180,864 bytes);
    # backward gathers the two blocks again (resharded after forward, the root is not):
    # 2 · 36,992 / 2 · 4 = 147,968
    assert moved.to_device_bytes == shard + 2 * BLOCK // 2 * F32 == 328_832
    # each gradient shard goes to the host once, after its reduce-scatter
    assert moved.to_host_bytes == shard
    # priced on the H100's host link, PCIe 5.0 x16: 64 GB/s per direction
    assert moved.host_link == "PCIe 5.0 x16 of h100-sxm"
    assert moved.to_device_s == pytest.approx(328_832 / 64e9)
    assert moved.to_host_s == pytest.approx(180_864 / 64e9)
    # on the device: no gradient and no optimizer state, ever; of the parameters, what FSDP
    # gathered: at most the root and one block at once, (16,448 + 36,992) · 4 = 213,760
    timeline = ledger.timeline
    assert max(p.gradient_bytes for p in timeline.points) == 0
    assert max(p.optimizer_state_bytes for p in timeline.points) == 0
    assert max(p.parameter_bytes for p in timeline.points) == (ROOT + BLOCK) * F32 == 213_760
    assert ledger.by_category()["parameter"] == 213_760
    # the host's most: its state and what the optimizer step makes there
    assert ledger.host_peak_bytes >= shard + shard + 361_812


def test_the_device_peak_is_the_unoffloaded_step_less_the_shards_and_state() -> None:
    """A second trace, without offloading: at the op where the offloaded step peaks (matched
    by op, module, phase and occurrence), it holds the same on the device plus the rank's
    shards (180,864 bytes) and optimizer state (361,812): no gradient shard is reduced yet."""
    offloaded, kept = _trace("params", fsdp=2), _trace(None, fsdp=2)
    moved = build_timeline(offloaded.trace, offloaded.tags)
    whole = build_timeline(kept.trace, kept.tags)

    def keys(points):  # type: ignore[no-untyped-def]
        seen: dict[tuple[str, str, str], int] = {}
        out = []
        for p in points:
            key = (p.op, p.module, p.phase)
            seen[key] = seen.get(key, 0) + 1
            out.append((key, seen[key]))
        return out

    where = {key: i for i, key in enumerate(keys(whole.points))}
    peak = moved.peak
    same = whole.points[where[keys(moved.points)[peak.index]]]
    assert peak.phase == "backward"
    assert same.gradient_bytes == 0
    assert same.parameter_bytes == peak.parameter_bytes + MODEL // 2 * F32
    assert same.optimizer_state_bytes == 361_812
    assert same.total_bytes == peak.total_bytes + 180_864 + 361_812
    assert same.saved_activation_bytes == peak.saved_activation_bytes
    assert same.temporary_bytes == peak.temporary_bytes


def test_one_device_is_a_one_rank_fsdp2_mesh() -> None:
    run = _trace("params")
    ledger = memory_of(run)
    moved = ledger.param_offload
    assert moved is not None and run.work.layout.single
    # the whole model on the host: 90,432 · 4 = 361,728 bytes of parameters and gradients
    assert moved.host_parameter_bytes == moved.host_gradient_bytes == MODEL * F32 == 361_728
    assert moved.host_optimizer_state_bytes == 2 * 361_728 + TENSORS * F32
    # forward gathers the whole model, backward the two blocks again: 361,728 + 295,936
    assert moved.to_device_bytes == MODEL * F32 + 2 * BLOCK * F32 == 657_664
    assert moved.to_host_bytes == MODEL * F32
    assert max(p.parameter_bytes for p in ledger.timeline.points) == (ROOT + BLOCK) * F32


def test_both_offloads_together() -> None:
    run = _trace("activations,params", fsdp=2)
    ledger = memory_of(run)
    assert ledger.offload is not None and ledger.param_offload is not None
    assert ledger.saved_activation_bytes == 0  # every saved tensor on the host
    assert ledger.param_offload.to_device_bytes == 328_832  # as with params alone
    timeline = ledger.timeline
    assert max(p.optimizer_state_bytes + p.gradient_bytes for p in timeline.points) == 0
    assert any("save_on_cpu" in note for note in run.assumptions)
    assert any("CPUOffloadPolicy" in note for note in run.assumptions)


def test_the_optimizer_step_is_host_work_not_device_time() -> None:
    run = _trace("params", fsdp=2)
    ledger = memory_of(run)
    moved = ledger.param_offload
    assert moved is not None
    optimizer = [r for r in run.trace.records if r.phase == "optimizer"]
    assert optimizer and moved.optimizer_ops == len(optimizer)
    assert moved.optimizer_flops == sum(r.flops for r in optimizer) > 0
    on_device = device_records(run)
    assert len(on_device) == len(run.trace.records) - len(optimizer)
    assert all(r.phase != "optimizer" for r in on_device)
    h100 = get_hardware("h100")
    assert predict(on_device, h100).time_s < predict(run.trace.records, h100).time_s
    # without offloading the device runs the optimizer step
    kept = _trace(None, fsdp=2)
    assert device_records(kept) == kept.trace.records


@pytest.mark.parametrize(("options", "message"), [
    ({"layout": {"dp": 2}}, "use --fsdp N"),
    ({"layout": {"fsdp": 2, "zero": 1}}, "use --fsdp N"),
    ({"layout": {"fsdp": 2, "tp": 2}}, "not beside --tp, --cp or --pp"),
    ({"layout": {"pp": 2, "microbatches": 2}}, "not beside --tp, --cp or --pp"),
    ({"device": "cpu"}, "drop --device cpu"),
    ({"precision": "fp8-tensorwise"}, "gathers torchao's fp8 weights"),
])
def test_combinations_not_traced_are_refused(options: dict[str, object], message: str) -> None:
    options = dict(options)  # pytest hands every run the same dict: pop from a copy
    layout = resolve_layout(**options.pop("layout", {}))  # type: ignore[arg-type]
    with pytest.raises(InputError, match=message):
        resolve_workload("tiny", batch=2, layout=layout, offload=("params",),
                         **options)  # type: ignore[arg-type]


def test_the_cli_reports_param_offload(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("memory", "-m", "tiny", "--seq", "16", "--batch", "2", "--precision", "fp32",
                 "--offload", "params", "--fsdp", "2", "--hardware", "h100")
    assert result.code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "parameters offloaded (FSDP2's CPUOffloadPolicy)" in text
    assert "runs on the host's CPU: no device time" in text
    assert_one_line_error(cli("memory", "-m", "tiny", "--offload", "params", "--tp", "2"),
                          "--offload params")


def test_a_forward_step_holds_its_shards_on_the_host() -> None:
    work = resolve_workload("tiny", batch=2, seq=12, precision="fp32", device="fake",
                            step="forward", offload=("params",),
                            layout=resolve_layout(fsdp=2))
    ledger = memory_of(trace_workload(work))
    moved = ledger.param_offload
    assert moved is not None
    assert moved.host_parameter_bytes == MODEL // 2 * F32 == 180_864
    # the blocks are gathered again (2 · 36,992 / 2 · 4); the root stays gathered from the
    # step before (FSDP2 reshards no root after forward); no gradient, no optimizer step
    assert moved.to_device_bytes == 2 * BLOCK // 2 * F32 == 73_984 * 2
    assert moved.to_host_bytes == 0 and moved.optimizer_ops == 0
    # without offloading, the same shards are the device's (held from the step's start: no
    # op of a forward reads them)
    kept = resolve_workload("tiny", batch=2, seq=12, precision="fp32", device="fake",
                            step="forward", layout=resolve_layout(fsdp=2))
    whole = memory_of(trace_workload(kept))
    assert whole.params_bytes == 180_864
    assert whole.peak_bytes == ledger.peak_bytes + 180_864
