"""A factory with its own inputs (keyword arguments, an attention mask) and its own loss,
returning a ModelOutput-like object, in every command that takes a model: the README's
example file, run as the user would."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import default_target
from tensorledger.roofline.model import predict_op
from tensorledger.workload import placement, prepare, resolve_workload, trace_workload

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_model.py"
SOURCE = f"{EXAMPLE}:make_model"
# embed 1000·96 + qkv 96·288 + 288 + out 96·96 + 96 + mlp 96·384 + 384 + 384·96 + 96
# + norm 2·96 + head 96·1000 = 303,648
PARAMS = 1000 * 96 + 96 * 288 + 288 + 96 * 96 + 96 + 96 * 384 + 384 + 384 * 96 + 96 + 2 * 96 \
    + 96 * 1000


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("own_model_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_counts_the_factory_module(cli: Any) -> None:
    assert PARAMS == 303_648
    direct = sum(p.numel() for p in _example().make_model().parameters())
    doc = cli("models", SOURCE, "--json").json()
    assert doc["params"] == direct == PARAMS


def test_trace_uses_its_inputs_and_loss_and_matches_flop_counter(cli: Any) -> None:
    doc = cli("trace", "--model", SOURCE, "--batch", "3", "--seq", "20", "--precision", "fp32",
              "--json").json()
    # the command traces an H100's program (no --hardware named)
    work = resolve_workload(SOURCE, batch=3, seq=20, precision="fp32", target=default_target())
    run = trace_workload(work)
    assert doc["summary"]["flops"] == run.trace.flops and doc["params"] == PARAMS
    # The masked attention saw the mask: the trace's attention op has a 4th (mask) input.
    attention = [r for r in run.trace.records
                 if r.category == "attention" and r.phase == "forward"]
    assert attention and len(attention[0].input_shapes) >= 4
    # Matmuls of the same training step on real CPU tensors, counted by torch.
    with placement("cpu") as target:
        step = prepare(resolve_workload(SOURCE, batch=3, seq=20, precision="fp32",
                                        device="cpu"), target)
        with FlopCounterMode(display=False) as oracle:
            step.run()
    theirs = {str(op): n for op, n in oracle.get_flop_counts()["Global"].items()
              if "attention" not in str(op)}
    ours: Counter[str] = Counter()
    for r in run.trace.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    assert dict(ours) == theirs


def test_memory_of_the_factory_step(cli: Any) -> None:
    doc = cli("memory", "--model", SOURCE, "--batch", "2", "--seq", "16", "--precision",
              "fp32", "--json").json()
    # fp32 AdamW: 4 bytes of parameters, 4 of gradients, 2 · 4 of moments per parameter, and
    # one 4-byte step counter per tensor (12 tensors).
    assert doc["params_bytes"] == 4 * PARAMS
    assert doc["grads_bytes"] == 4 * PARAMS
    assert doc["optimizer_state_bytes"] == 8 * PARAMS + 4 * 12
    assert doc["peak_bytes"] >= 16 * PARAMS


def test_roofline_of_the_factory_step(cli: Any) -> None:
    doc = cli("roofline", "--model", SOURCE, "--batch", "2", "--seq", "16", "--hardware",
              "h100", "--json", "--per-op").json()
    run = trace_workload(resolve_workload(SOURCE, batch=2, seq=16, target=default_target()))
    chip = get_hardware("h100")
    expected = [predict_op(i, r, chip).time_s for i, r in enumerate(run.trace.records)]
    assert doc["prediction"]["time_s"] == pytest.approx(sum(expected))
    assert doc["built_by"].startswith("the factory make_model()")


def test_factory_without_companions_gets_token_ids_and_cross_entropy(tmp_path: Path) -> None:
    path = tmp_path / "plain.py"
    path.write_text("import torch\n"
                    "def make():\n"
                    "    return torch.nn.Sequential(torch.nn.Embedding(13, 5),"
                    " torch.nn.Linear(5, 13))\n")
    run = trace_workload(resolve_workload(f"{path}:make", batch=2, seq=7, precision="fp32"))
    forward = [r for r in run.trace.records if r.phase == "forward"]
    assert forward[0].op.startswith("aten.embedding") and forward[0].input_shapes[1] == (2, 7)
    assert any(r.op.startswith("aten._log_softmax") for r in forward)  # cross-entropy
    assert run.params == 13 * 5 + 5 * 13 + 13
    assert torch.Size((2, 7)).numel() == run.tokens
