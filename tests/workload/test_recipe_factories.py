"""Factories, HF configs and presets under every bf16-parameter recipe (bf16, bf16-master,
lecture = bf16-fp32-states) on the default device, fake tensors: parameters built in the
recipe's dtype (Module.to would swap a fake parameter, which FakeTensorMode refuses), their
bytes counted by hand, and the memory equal to the same step on real CPU tensors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.memory import build_timeline
from tensorledger.workload import placement, resolve_workload, trace_workload
from tensorledger.workload.step import build_module
from tests.workload.hf_configs import write_config
from tests.workload.test_memory_oracle import _memtracker_peak

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_model.py"
SOURCE = f"{EXAMPLE}:make_model"
# embed 1000·96 + qkv 96·288 + 288 + out 96·96 + 96 + mlp 96·384 + 384 + 384·96 + 96
# + norm 2·96 + head 96·1000 = 303,648
EXAMPLE_PARAMS = 1000 * 96 + 96 * 288 + 288 + 96 * 96 + 96 + 96 * 384 + 384 + 384 * 96 + 96 \
    + 2 * 96 + 96 * 1000
# tests/workload/hf_configs.py's llama (vocab 97, d 40, ff 72, 2 layers, 4 heads and 2 KV
# heads of 12): embed 97·40 = 3,880; a layer: q 40·48 + k, v 2 · 40·24 + o 48·40
# + gate, up, down 3 · 40·72 + 2 norms of 40 = 14,480; final norm 40; head 97·40 = 3,880
LLAMA_PARAMS = 97 * 40 + 2 * (40 * 48 + 2 * 40 * 24 + 48 * 40 + 3 * 40 * 72 + 2 * 40) + 40 \
    + 97 * 40
BF16_RECIPES = ["bf16", "bf16-master", "lecture"]


def _peaks(source: str, precision: str, device: str) -> tuple[int, int, int]:
    """Parameter bytes, steady-state peak and first-step peak of a traced training step."""
    run = trace_workload(resolve_workload(source, batch=2, seq=16, precision=precision,
                                          device=device), first_step=True)
    assert run.first_step is not None
    steady = build_timeline(run.trace, run.tags).peak
    first = build_timeline(run.first_step, run.first_step_tags).peak
    return steady.parameter_bytes, steady.total_bytes, first.total_bytes


@pytest.mark.parametrize("precision", BF16_RECIPES)
def test_factory_on_fake_holds_bf16_parameters_and_the_memory_of_a_real_cpu_step(
        precision: str) -> None:
    assert EXAMPLE_PARAMS == 303_648
    params_bytes, peak, first_peak = _peaks(SOURCE, precision, "fake")
    assert params_bytes == 2 * EXAMPLE_PARAMS  # bf16: 2 bytes each, 607,296
    torch.manual_seed(0)
    real_params_bytes, real_peak, real_first_peak = _peaks(SOURCE, precision, "cpu")
    assert real_params_bytes == params_bytes
    assert peak == pytest.approx(real_peak, rel=1e-3)
    assert first_peak == pytest.approx(real_first_peak, rel=1e-3)


@pytest.mark.parametrize("precision", BF16_RECIPES)
def test_factory_on_fake_equals_memtracker_of_a_real_cpu_step(precision: str) -> None:
    # a third-party oracle: PyTorch's MemTracker over the second real CPU step
    work = resolve_workload(SOURCE, batch=2, seq=16, precision=precision, device="fake")
    run = trace_workload(work)
    ours = build_timeline(run.trace, run.tags).peak.total_bytes
    assert ours == pytest.approx(_memtracker_peak(work, 2)["Total"], rel=1e-3)


@pytest.mark.parametrize("precision", BF16_RECIPES)
def test_tiny_hf_llama_on_fake_holds_bf16_parameters(tmp_path: Path, precision: str) -> None:
    pytest.importorskip("transformers")
    assert LLAMA_PARAMS == 36_760
    source = str(write_config(tmp_path, "llama"))
    params_bytes, peak, first_peak = _peaks(source, precision, "fake")
    assert params_bytes == 2 * LLAMA_PARAMS  # 73,520
    _, real_peak, real_first_peak = _peaks(source, precision, "cpu")
    assert (peak, first_peak) == (pytest.approx(real_peak, rel=1e-3),
                                  pytest.approx(real_first_peak, rel=1e-3))


@pytest.mark.parametrize("precision", BF16_RECIPES)
def test_tiny_preset_on_fake_holds_bf16_parameters(precision: str) -> None:
    params_bytes, _, _ = _peaks("tiny", precision, "fake")
    assert params_bytes == 2 * 90_432  # the tiny preset's 90,432 parameters, 2 bytes each


def _build(tmp_path: Path, text: str, precision: str, device: str = "fake") -> Any:
    path = tmp_path / "factory.py"
    path.write_text(text)
    work = resolve_workload(f"{path}:make", batch=1, seq=4, precision=precision, device=device)
    with placement(device) as target:
        module, _ = build_module(work, target)
        return module, [(name, p.dtype, type(p)) for name, p in module.named_parameters()]


_TIED = """
import torch
from torch import nn

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.extra = nn.Parameter(torch.ones(3, dtype=torch.float64))
        self.extra.no_decay = True  # an attribute the user set on the parameter
        self.kept = [self.extra]  # a reference the user kept outside the module's parameters
        self.register_buffer("scale", torch.full((5,), 0.5))
        self.register_buffer("positions", torch.arange(7))
        self.register_buffer("rotation", torch.ones(2, dtype=torch.complex64))
        self.alias = nn.Module()
        self.alias.register_buffer("scale", self.scale)  # one buffer, two modules

    def forward(self, x):
        return self.head(self.embed(x))

def make():
    return M()
"""


@pytest.mark.parametrize("device", ["fake", "cpu"])
@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16),
                                                  ("bf16-master", torch.bfloat16),
                                                  ("lecture", torch.bfloat16),
                                                  ("fp32", torch.float32)])
def test_cast_keeps_ties_references_attributes_and_follows_module_to_for_buffers(
        tmp_path: Path, device: str, precision: str, dtype: torch.dtype) -> None:
    module, params = _build(tmp_path, _TIED, precision, device)
    # named_parameters gives a tied Parameter once: embed.weight (= head.weight) and extra
    assert [(name, d) for name, d, _ in params] == [("extra", dtype), ("embed.weight", dtype)]
    assert module.head.weight is module.embed.weight
    assert module.kept[0] is module.extra and module.extra.no_decay
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in module.parameters())
    # floating buffers as Module.to(dtype) casts them; integer and complex ones stay
    assert module.scale.dtype == dtype and module.alias.scale is module.scale
    assert module.positions.dtype == torch.int64
    assert module.rotation.dtype == torch.complex64
    with placement(device):
        reference = nn.Module()
        reference.register_buffer("scale", torch.full((5,), 0.5))
        reference.register_buffer("positions", torch.arange(7))
        reference.to(dtype=dtype)
        assert (reference.scale.dtype, reference.positions.dtype) == (
            module.scale.dtype, module.positions.dtype)


def test_cli_commands_of_the_example_under_bf16_recipes_exit_0(cli: Any) -> None:
    for precision in BF16_RECIPES:
        for command in ("trace", "memory", "account"):
            result = cli(command, "--model", SOURCE, "--batch", "2", "--seq", "16",
                         "--precision", precision, "--json")
            assert result.code == 0, (command, precision, result.err)
            doc = result.json()
            if command == "memory":
                assert doc["params_bytes"] == 2 * EXAMPLE_PARAMS
