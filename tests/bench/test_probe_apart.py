"""The probe in a process of its own (``bench.probe_apart``): its result and its progress come
back, its error is raised here, and this process's thread count is never touched, so steps timed
here afterwards run attention as a fresh process does."""

from __future__ import annotations

import pytest
import torch

from tensorledger.bench import ProbeResult, probe_apart
from tensorledger.bench.probe_kernels import KernelPlan
from tensorledger.errors import TensorLedgerError

#: the smallest probe that still measures: two matmul sizes, one attention length
OPTIONS = {"dtypes": ("fp32",), "sizes": (16, 32), "budget_s": 0.01,
           "attention_seqs": (16,), "bandwidth_sweep": False, "buffer_bytes": 2**16,
           "kernels": KernelPlan.none(), "max_spread": 100.0}


def test_the_probe_runs_apart_and_reports_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(count: int) -> None:
        raise AssertionError(f"this process's thread count changed to {count}")

    monkeypatch.setattr(torch, "set_num_threads", refused)
    said: list[str] = []
    result = probe_apart(device="cpu", progress=said.append, **OPTIONS)
    assert isinstance(result, ProbeResult)
    # the fp32 matmul at both sizes (2·16³ and 2·32³ FLOPs) and the attention at 16 tokens
    assert sorted(p.flops for p in result.matmul) == [2 * 16**3, 2 * 32**3]
    assert [p.n for p in result.attention] == [16]
    # its progress, line by line, in the order the probe said it: attention before the matmuls
    assert "attention fp32, sequence 16" in said and "per-op overhead" in said
    assert said.index("attention fp32, sequence 16") < min(
        i for i, line in enumerate(said) if line.startswith("matmul"))


def test_the_probes_error_is_raised_here() -> None:
    with pytest.raises(TensorLedgerError, match="tpu"):
        probe_apart(device="tpu", **OPTIONS)
