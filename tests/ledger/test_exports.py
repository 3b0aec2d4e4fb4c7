"""Exports of ``account``: the Chrome/Perfetto trace and the PyTorch memory snapshot, read back
by their own readers (json; torch.cuda._memory_viz)."""

from __future__ import annotations

import itertools
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from torch.cuda import _memory_viz

from tests.conftest import assert_one_line_error

ARGS = ("account", "--model", "tiny", "--batch", "2", "--seq", "16", "--hardware", "a100")


def test_chrome_trace_is_well_formed_and_sums_to_the_step(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    doc = cli(*ARGS, "--chrome-trace", str(path), "--json").json()
    events = json.loads(path.read_text())["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    assert len(ops) == doc["trace"]["ops"]
    for event in ops:
        assert {"name", "cat", "ts", "dur", "pid", "tid", "args"} <= set(event)
        assert event["dur"] >= 0 and event["ts"] >= 0
    # back to back: each op starts where the one before ended
    for before, after in itertools.pairwise(ops):
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"])
    assert sum(e["dur"] for e in ops) == pytest.approx(doc["step_time_s"] * 1e6)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"forward", "backward", "optimizer"} <= names


def _replayed_peak(snapshot: dict[str, Any]) -> int:
    live = peak = 0
    for event in snapshot["device_traces"][0]:
        if event["action"] == "alloc":
            live += event["size"]
        elif event["action"] == "free_completed":
            live -= event["size"]
        peak = max(peak, live)
    return peak


def test_memory_snapshot_renders_in_torch_and_peaks_with_the_ledger(cli: Any,
                                                                     tmp_path: Path) -> None:
    path = tmp_path / "step.pickle"
    doc = cli(*ARGS, "--memory-snapshot", str(path), "--json").json()
    snapshot = pickle.loads(path.read_bytes())
    text = _memory_viz.trace(snapshot)  # torch's own reader replays every event
    assert text.startswith("Device 0") and "TOTAL MEM" in text
    assert "Summary of segments" in _memory_viz.segsum(snapshot)
    assert "<html>" in _memory_viz.trace_plot(snapshot)
    assert _replayed_peak(snapshot) == doc["memory"]["peak_bytes"]
    categories = {e.get("category") for e in snapshot["device_traces"][0]
                  if e["action"] == "alloc"}
    assert {"parameter", "optimizer_state", "saved_activation", "temporary"} <= categories


@pytest.mark.parametrize(("option", "name"), [("--chrome-trace", "trace.txt"),
                                              ("--memory-snapshot", "missing/x.pickle")])
def test_bad_output_paths_are_refused_before_work(cli: Any, tmp_path: Path, option: str,
                                                   name: str) -> None:
    assert_one_line_error(cli(*ARGS, option, str(tmp_path / name)), "cannot write")
    assert list(tmp_path.iterdir()) == []
