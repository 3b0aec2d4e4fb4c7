"""The examples run as the README shows them: the tiny preset with the meter, and the HF
Trainer with the meter's callback, whose logs carry MFU and tokens/s at every logging step."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

EXAMPLES = Path(__file__).parents[2] / "examples"
CHIP = '[test-cpu]\nname = "made-up CPU"\nmemory = "8GB"\nmemory_bandwidth = "20GB/s"\n' \
       '[test-cpu.dense]\nfp32 = "100GFLOP/s"\nbf16 = "300GFLOP/s"\n'


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _example(name: str) -> ModuleType:
    return importlib.import_module(name)


def test_tiny_example(examples: None, tmp_path: Path,  # type: ignore[no-untyped-def]
                      capsys) -> None:
    chip = tmp_path / "chip.toml"
    chip.write_text(CHIP)
    jsonl = tmp_path / "meter.jsonl"
    summary = _example("train_tiny_meter").main(
        ["--steps", "40", "--every", "20", "--accumulate", "2", "--hardware", str(chip),
         "--jsonl", str(jsonl)])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines[0].startswith("meter step 20 | ") and lines[1].startswith("meter step 40 | ")
    assert lines[2].startswith("meter summary: 37 of 40 steps measured on test-cpu")
    assert "final loss" in captured.out
    assert summary.measured_steps == 37 and summary.tokens == 37 * 2 * 4 * 31
    assert summary.peak is not None and summary.peak.label == "fp32"
    assert summary.mfu is not None and 0 < summary.mfu < 1
    kinds = [json.loads(line)["kind"] for line in jsonl.read_text().splitlines()]
    assert kinds.count("step") == 40 and kinds[-1] == "summary"


def test_hf_trainer_example_logs_the_meter(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="the HF Trainer needs accelerate")
    chip = tmp_path / "chip.toml"
    chip.write_text(CHIP)
    # its own process, as the README runs it (and transformers stays out of this one)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_hf_trainer.py"), "--steps", "10",
         "--logging-steps", "5", "--hardware", str(chip)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    logs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"')]
    assert [entry["step"] for entry in logs] == [5, 10]  # every logging step
    for entry in logs:
        assert 0 < entry["meter_mfu"] < 1
        assert entry["meter_tokens_per_s"] > 0
        assert entry["meter_flops_per_step"] > 0 and "loss" in entry
        # tokens per optimizer step, counted from input_ids: 2 micro-batches × 4 × 32
        assert entry["meter_tokens_per_s"] * entry["meter_step_time_s"] == pytest.approx(256)
