"""Fake and real agree for issue 40's layouts: two real gloo ranks on the CPU
(``offload_lora_torchrun.py``, laid out by torch's and peft's own calls) hold and move what rank
0 of the fake process group predicts.

- ``--offload params`` (FSDP2's CPUOffloadPolicy) on the tiny preset, ``--fsdp 2``: the
  parameter shards, gradients and optimizer state every real rank holds (on the CPU) equal the
  fake rank's host figures; the bytes the fake rank copies to the device equal the real
  all-gathers' inputs (each a rank's shard, copied in before it is gathered), and the bytes it
  copies to the host the real reduce-scatters' outputs (each a rank's gradient shard).
- ``--lora 8 --lora-targets q_proj,v_proj --fsdp 2`` on a tiny Llama: rank 0's parameter
  shards, adapter gradients and optimizer state, and the collectives, phase by phase.

One launch, about 45 seconds on two shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tensorledger.ledger.memory import memory_of
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.spec import resolve_lora, resolve_offload
from tests.distributed.offload_lora_torchrun import BATCH, LORA_BATCH, LORA_SEQ, SEQ
from tests.workload.hf_configs import write_config

SCRIPT = Path(__file__).with_name("offload_lora_torchrun.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("offload_lora")
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(SCRIPT), str(out)], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: [json.loads((out / f"{name}.rank{r}.json").read_text()) for r in range(2)]
            for name in ("offload", "lora")}


def _per_rank(collectives: list[list[Any]]) -> dict[tuple[str, str], int]:
    """Bytes a rank puts into its all-gathers (its shard: S / N) and takes out of its
    reduce-scatters (its gradient shard: S / N), by phase."""
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for phase, kind, group, size in collectives:
        totals[(phase, kind)] += size // group
    return dict(totals)


def test_param_offload_matches_real_ranks(real: dict[str, list[dict[str, Any]]]) -> None:
    work = resolve_workload("tiny", batch=BATCH, seq=SEQ, precision="fp32", device="fake",
                            offload=resolve_offload("params"), layout=resolve_layout(fsdp=2))
    ledger = memory_of(trace_workload(work))
    moved = ledger.param_offload
    assert moved is not None
    for rank in real["offload"]:
        assert rank["param_devices"] == rank["grad_devices"] == ["cpu"]
        assert rank["param_bytes"] == moved.host_parameter_bytes == 180_864
        assert rank["grad_bytes"] == moved.host_gradient_bytes
        assert rank["optimizer_state_bytes"] == moved.host_optimizer_state_bytes
        sent = _per_rank(rank["collectives"])
        # forward gathers the whole shard, backward the two blocks again
        assert sent[("forward", "all-gather")] + sent[("backward", "all-gather")] == (
            moved.to_device_bytes) == 328_832
        assert sent[("backward", "reduce-scatter")] == moved.to_host_bytes == 180_864


def test_lora_under_fsdp_matches_real_ranks(real: dict[str, list[dict[str, Any]]],
                                            tmp_path: Path) -> None:
    path = write_config(tmp_path, "llama")
    work = resolve_workload(str(path), batch=LORA_BATCH, seq=LORA_SEQ, precision="fp32",
                            device="fake", lora=resolve_lora(8, "q_proj,v_proj"),
                            layout=resolve_layout(fsdp=2))
    run = trace_workload(work)
    ledger = memory_of(run)
    first = real["lora"][0]
    assert first["param_bytes"] == ledger.params_bytes == 78_544
    assert first["grad_bytes"] == ledger.grads_bytes == 4_864
    assert first["optimizer_state_bytes"] == ledger.optimizer_state_bytes == 9_760
    # rank 1 holds the smaller half of the 97-row embedding and head: 2 · 40 · 4 bytes fewer
    assert real["lora"][1]["param_bytes"] == 78_544 - 2 * 40 * 4
    fake = _per_rank([[r.phase, r.collective.kind, r.collective.group_size,
                       r.collective.size_bytes]
                      for r in run.trace.records if r.collective is not None])
    for rank in real["lora"]:
        assert _per_rank(rank["collectives"]) == fake
