"""Under ``torchrun --nproc-per-node 2`` (gloo, CPU) the cluster's figures are the sum
(tokens/s) and the FLOP-weighted mean (MFU) of the ranks' own figures, interval by interval and
in the summary; each rank's own figures are derived again here from its per-step lines."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("meter_torchrun.py")


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cluster_figures_under_torchrun(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [_lines(tmp_path / f"meter.rank{r}.jsonl") for r in (0, 1)]
    intervals = [[line for line in lines if line["kind"] == "interval"] for lines in ranks]
    assert [len(i) for i in intervals] == [3, 3]  # 12 steps, every 4
    for rank, lines in enumerate(ranks):
        steps = [line for line in lines if line["kind"] == "step"]
        assert [s["tokens"] for s in steps] == [(2 + rank) * 16] * 12
        for k, interval in enumerate(intervals[rank]):
            timed = [s for s in steps[4 * k:4 * k + 4] if not s["recorded"]]
            time_s = math.fsum(s["time_s"] for s in timed)  # type: ignore[misc]
            tokens = sum(s["tokens"] for s in timed)  # type: ignore[misc]
            flops = math.fsum(s["flops"] for s in timed)  # type: ignore[misc]
            assert interval["tokens_per_s"] == pytest.approx(tokens / time_s, rel=1e-12)
            assert interval["flops"] == pytest.approx(flops, rel=1e-12)
            assert interval["mfu"] == pytest.approx(flops / time_s / 100e9, rel=1e-12)
    for zero, one in zip(*intervals, strict=True):
        assert zero["world_size"] == one["world_size"] == 2
        rate = zero["tokens_per_s"] + one["tokens_per_s"]  # type: ignore[operator]
        mfu = (zero["mfu"] * zero["flops"] + one["mfu"] * one["flops"]) / (  # type: ignore[operator]
            zero["flops"] + one["flops"])  # type: ignore[operator]
        for interval in (zero, one):  # every rank holds the cluster's figures
            assert interval["cluster_tokens_per_s"] == pytest.approx(rate, rel=1e-12)
            assert interval["cluster_mfu"] == pytest.approx(mfu, rel=1e-12)
        assert zero["flops"] != one["flops"] and zero["mfu"] != one["mfu"]
    zero, one = (lines[-1] for lines in ranks)
    assert zero["kind"] == one["kind"] == "summary"
    rate = zero["tokens_per_s"] + one["tokens_per_s"]  # type: ignore[operator]
    mfu = (zero["mfu"] * zero["flops"] + one["mfu"] * one["flops"]) / (  # type: ignore[operator]
        zero["flops"] + one["flops"])  # type: ignore[operator]
    assert zero["cluster_tokens_per_s"] == pytest.approx(rate, rel=1e-12)
    assert one["cluster_mfu"] == pytest.approx(mfu, rel=1e-12)
