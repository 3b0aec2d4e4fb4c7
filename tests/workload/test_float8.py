"""FP8 training through torchao (``--precision fp8-tensorwise`` / ``fp8-rowwise``): the
``_scaled_mm`` FLOPs equal the bf16 matmuls they replace (the same model traced as
``mixed-bf16``, a second code path, and by hand), the saved activations and parameter bytes
derived by hand, the amax / scale / cast ops recorded, FSDP2's fp8 all-gather, the precision
lab's figure, and the one-line refusals."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tensorledger.errors import InputError
from tensorledger.ledger.memory import memory_of
from tensorledger.memory import build_timeline
from tensorledger.napkin.recipes import resolve_precision
from tensorledger.trace.records import Trace
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tests.conftest import assert_one_line_error

pytest.importorskip("torchao")

RECIPES = ("fp8-tensorwise", "fp8-rowwise")

# Two linears, every dimension different: tokens T = 2 · 12 = 24, 32 → 48 → ReLU → 80.
T, D_IN, D_HID, D_OUT = 24, 32, 48, 80
MLP = """
import torch
from torch import nn


def make_model():
    return nn.Sequential(nn.Linear(32, 48, bias=False), nn.ReLU(),
                         nn.Linear(48, 80, bias=False))


def make_inputs(batch, seq):
    return torch.ones(batch, seq, 32, requires_grad=INPUT_GRAD)


def loss(output, inputs):
    return output.sum()  # its backward saves nothing
"""


def _mlp(tmp_path: Path, input_grad: bool = False) -> str:
    path = tmp_path / f"mlp_{input_grad}.py"
    path.write_text(f"INPUT_GRAD = {input_grad}\n{MLP}")
    return f"{path}:make_model"


def _matmul_flops(trace: Trace) -> Counter[str]:
    flops: Counter[str] = Counter()
    for r in trace.records:
        if r.category == "matmul":
            flops[r.op.rsplit(".", 1)[0]] += r.flops
    return flops


def test_scaled_mm_flops_equal_the_bf16_matmuls_by_hand(tmp_path: Path) -> None:
    # forward 2·T·(32·48 + 48·80) = 2·24·5,376 = 258,048; backward, with an input that needs
    # a gradient: each linear's weight and input gradients, 2 × 258,048 = 516,096
    forward = 2 * T * (D_IN * D_HID + D_HID * D_OUT)
    backward = 2 * forward
    assert (forward, backward) == (258_048, 516_096)
    model = _mlp(tmp_path, input_grad=True)
    bf16 = trace_workload(resolve_workload(model, batch=2, seq=12,
                                           precision="mixed-bf16")).trace
    assert _matmul_flops(bf16) == {"aten.mm": forward + backward}
    for recipe in RECIPES:
        fp8 = trace_workload(resolve_workload(model, batch=2, seq=12, precision=recipe)).trace
        assert _matmul_flops(fp8) == {"aten._scaled_mm": forward + backward}, recipe
        operands = {r.input_dtypes[:2] for r in fp8.records if "_scaled_mm" in r.op}
        gradients = "fp8_e5m2" if recipe == "fp8-tensorwise" else "fp8_e4m3fn"
        assert ("fp8_e4m3fn", "fp8_e4m3fn") in operands
        assert all(set(pair) <= {"fp8_e4m3fn", gradients} for pair in operands)


def test_torchao_computes_an_input_gradient_nobody_asked_for(tmp_path: Path) -> None:
    # An input without requires_grad: autograd's mm skips the first linear's input gradient
    # (2·T·32·48 = 73,728 FLOPs); torchao's backward computes it anyway and drops it
    model = _mlp(tmp_path, input_grad=False)
    bf16 = _matmul_flops(trace_workload(resolve_workload(model, batch=2, seq=12,
                                                         precision="mixed-bf16")).trace)
    fp8 = _matmul_flops(trace_workload(resolve_workload(model, batch=2, seq=12,
                                                        precision="fp8-rowwise")).trace)
    assert fp8["aten._scaled_mm"] - bf16["aten.mm"] == 2 * T * D_IN * D_HID == 73_728


@pytest.mark.parametrize("recipe", RECIPES)
def test_tiny_preset_scaled_mm_flops_equal_mixed_bf16_matmuls(recipe: str) -> None:
    # A second code path: the same model traced in mixed-bf16 runs aten.mm where the fp8
    # recipe runs _scaled_mm; every linear of tiny has dimensions that are multiples of 16,
    # so every one is converted and no aten.mm is left
    bf16 = _matmul_flops(trace_workload(resolve_workload("tiny", batch=2, seq=16,
                                                         precision="mixed-bf16")).trace)
    run = trace_workload(resolve_workload("tiny", batch=2, seq=16, precision=recipe))
    fp8 = _matmul_flops(run.trace)
    assert set(fp8) == {"aten._scaled_mm"}
    assert fp8["aten._scaled_mm"] == bf16["aten.mm"] + bf16.get("aten.addmm", 0) > 0
    # 2 blocks × (query, key, value, output, up, gate, down) + head = 15 linears
    assert any("15 linear layers run _scaled_mm" in a for a in run.assumptions)


@pytest.mark.parametrize("recipe", RECIPES)
def test_saved_activations_and_parameter_bytes_by_hand(tmp_path: Path, recipe: str) -> None:
    model = _mlp(tmp_path)
    params = D_IN * D_HID + D_HID * D_OUT  # 1,536 + 3,840 = 5,376
    # mixed-bf16: autocast saves the bf16 input of the first linear (T·32·2 = 1,536), the
    # ReLU's bf16 output (T·48·2 = 2,304, which the second linear saves too: one storage)
    # and the second linear's bf16 weight copy (48·80·2 = 7,680; the first's is not saved,
    # the input needing no gradient): 11,520
    bf16_saved = T * D_IN * 2 + T * D_HID * 2 + D_HID * D_OUT * 2
    assert bf16_saved == 11_520
    # fp8 (torchao's matmul_with_hp_or_float8_args): each linear saves its high-precision
    # input and the fp32 weight itself (a view of the parameter, no bytes), not an fp8 cast:
    # the first linear's bf16 input 1,536 + the ReLU's output 2,304 = 3,840; no weight copy
    fp8_saved = T * D_IN * 2 + T * D_HID * 2
    assert fp8_saved == 3_840
    for precision, saved in (("mixed-bf16", bf16_saved), (recipe, fp8_saved)):
        run = trace_workload(resolve_workload(model, batch=2, seq=12, precision=precision))
        points = build_timeline(run.trace, run.tags).points
        assert max(p.saved_activation_bytes for p in points) == saved, precision
        end = points[-1]
        # fp32 parameters and gradients, 4 bytes each; AdamW's two fp32 moments and a 4-byte
        # step counter per tensor: 8·5,376 + 2·4 = 43,016
        assert end.parameter_bytes == 4 * params == 21_504
        assert end.optimizer_state_bytes == 8 * params + 2 * 4 == 43_016
        assert max(p.gradient_bytes for p in points) == 4 * params
    # the napkin's bytes per parameter are mixed-bf16's: 4 + 4 + 0 + 4 per state
    p = resolve_precision(recipe)
    assert (p.param_bytes, p.grad_bytes, p.master_bytes, p.state_bytes) == (4, 4, 0, 4)


@pytest.mark.parametrize("recipe", RECIPES)
def test_amax_scale_and_cast_ops_are_recorded(tmp_path: Path, recipe: str) -> None:
    run = trace_workload(resolve_workload(_mlp(tmp_path), batch=2, seq=12,
                                          precision=recipe))
    casts = Counter(r.phase for r in run.trace.records
                    if r.op == "aten._to_copy.default" and r.output_dtypes[0].startswith("fp8"))
    # per linear: forward casts input and weight; backward casts the output gradient twice
    # (for each of its two matmuls), the weight again and the input again: 2 and 4, × 2
    assert casts == {"forward": 2 * 2, "backward": 4 * 2}
    amax = [r for r in run.trace.records
            if r.category == "reduction" and r.op.split(".")[1] in ("max", "amax")]
    assert len(amax) == 6 * 2
    if recipe == "fp8-rowwise":  # one scale per row: a reduction over one axis
        assert all(r.output_shapes[0] != () for r in amax)
    else:  # one scale per tensor
        assert all(r.output_shapes[0] == () for r in amax)
    assert not run.trace.uncovered


def test_fsdp_all_gathers_tensorwise_weights_in_fp8() -> None:
    def gathered(precision: str) -> tuple[int, set[str]]:
        work = resolve_workload("tiny", batch=2, seq=16, precision=precision,
                                layout=resolve_layout(fsdp=2))
        run = trace_workload(work)
        # the rank's fp32 shards are parameters though torchao wraps each linear's weight
        # (its fp8 all-gather): half of 4·90,432 = 180,864 bytes
        assert memory_of(run).params_bytes == 4 * 90_432 // 2 == 180_864
        records = [r for r in run.trace.records
                   if r.collective is not None and r.collective.kind == "all-gather"
                   and r.phase == "forward"]
        reduced = Counter(r.phase for r in run.trace.records
                          if r.collective is not None and r.collective.kind == "all-reduce")
        # the amax of every fp8-gathered weight in one all-reduce after the optimizer step
        # (torchao's precompute_float8_dynamic_scale_for_fsdp): none in forward or backward
        assert reduced == ({"other": 1} if precision == "fp8-tensorwise" else {}), precision
        return (sum(r.collective.size_bytes for r in records if r.collective),
                {r.input_dtypes[0] for r in records})

    bf16_bytes, bf16_dtypes = gathered("mixed-bf16")
    fp8_bytes, fp8_dtypes = gathered("fp8-tensorwise")
    assert bf16_dtypes == {"fp32"} and "uint8" in fp8_dtypes
    # tiny: 90,432 parameters; the linears' 81,920 (attention 24,576 + MLP 49,152 + head
    # 8,192) travel as 1-byte fp8 instead of 4-byte fp32, the embedding and norms (8,192 +
    # 320) stay fp32: 4·90,432 = 361,728 → 81,920 + 4·8,512 = 115,968 bytes gathered in forward
    assert bf16_bytes == 4 * 90_432
    assert fp8_bytes == 81_920 + 4 * 8_512 == 115_968


def test_precision_lab_figure_beside_the_format() -> None:
    from tensorledger.formats.training import fp8_recipe_error

    tensorwise, rowwise = fp8_recipe_error("tensorwise"), fp8_recipe_error("rowwise")
    # one scale per row fits each row's range; one per tensor loses the small rows
    assert rowwise.mean_rel_error < tensorwise.mean_rel_error
    assert tensorwise.gradient_format == "fp8_e5m2" and rowwise.gradient_format == "fp8_e4m3fn"
    run = trace_workload(resolve_workload("tiny", batch=1, seq=16, precision="fp8-rowwise"))
    assert any(rowwise.describe() in a for a in run.assumptions)


def test_refusals_in_one_line(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("trace", "-m", "tiny", "--precision", "fp8-tensorwise",
                              "--device", "meta"), "autocast", "--device fake")
    assert_one_line_error(cli("trace", "-m", "tiny", "--precision", "fp8-rowwise",
                              "--tp", "2"), "fp8-rowwise", "--tp")
    assert_one_line_error(cli("trace", "-m", "tiny", "--precision", "fp8-rowwise",
                              "--lora", "4"), "--lora", "fp8-rowwise")
    monkeypatch.setattr("tensorledger.workload.spec.torchao_available", lambda: False)
    for command in ("trace", "memory", "account"):
        assert_one_line_error(cli(command, "-m", "tiny", "--precision", "fp8-tensorwise"),
                              "torchao", "pip install 'tensorledger[ao]'")
    with pytest.raises(InputError, match=r"tensorledger\[ao\]"):
        resolve_workload("tiny", precision="fp8-rowwise")


@pytest.mark.parametrize("recipe", RECIPES)
def test_fake_step_memory_equals_memtracker_of_a_real_cpu_step(recipe: str) -> None:
    # A third party's oracle: the same fp8 step on real CPU tensors (torch has a CPU
    # _scaled_mm), measured by torch's MemTracker, category by category
    from tests.workload.test_memory_oracle import _compare, _memtracker_peak, _ours

    work = resolve_workload("tiny", batch=4, seq=32, precision=recipe, device="fake")
    _compare(_ours(work, first=False), _memtracker_peak(work, 2))


@pytest.mark.parametrize("model", ["tiny", "hf-llama"])
def test_torchao_import_noise_is_held_back(tmp_path: Path, model: str) -> None:
    # A fresh interpreter, where torchao is imported by the step (or, for a Hugging Face
    # config, by transformers while it builds the model, whatever the precision): its log
    # lines about CUDA extensions that do not load here, and torch's about its enums, never
    # reach stderr
    import os
    import subprocess
    import sys

    from tests.workload.hf_configs import write_config

    source = "tiny" if model == "tiny" else str(write_config(tmp_path, "llama"))
    precision = "fp8-tensorwise" if model == "tiny" else "mixed-bf16"
    code = (f"from tensorledger.cli import main; raise SystemExit(main(['trace', '-m', "
            f"{source!r}, '--seq', '16', '--precision', {precision!r}, '--json']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_linears_off_the_16_grid_stay_in_bf16(tmp_path: Path) -> None:
    # _scaled_mm takes dimensions that are multiples of 16: the tiny HF Llama's hidden size
    # 40 and MLP width 72 are not, so its 2 · 7 + 1 (lm_head) = 15 linears stay in bf16
    pytest.importorskip("transformers")
    from tests.workload.hf_configs import write_config

    work = resolve_workload(str(write_config(tmp_path, "llama")), batch=1, seq=16,
                            precision="fp8-rowwise")
    run = trace_workload(work)
    assert not any("_scaled_mm" in r.op for r in run.trace.records)
    assert any("0 linear layers run _scaled_mm; 15 left in bf16" in a for a in run.assumptions)


def test_scaled_mm_is_priced_at_the_fp8_peak(tmp_path: Path) -> None:
    from tensorledger.hardware import get_hardware
    from tensorledger.roofline.model import predict_op

    h100 = get_hardware("h100")
    assert h100.dense_flop_per_s["fp8"] == 2 * h100.dense_flop_per_s["bf16"] == 1979e12
    run = trace_workload(resolve_workload(_mlp(tmp_path), batch=2, seq=12,
                                          precision="fp8-tensorwise"))
    scaled = [(i, r) for i, r in enumerate(run.trace.records) if "_scaled_mm" in r.op]
    assert scaled
    for index, record in scaled:
        prediction = predict_op(index, record, h100)
        assert prediction.compute_key == "fp8"
        # the op's ridge is the fp8 peak over the bandwidth: 1,979e12 / 3.35e12 ≈ 591 FLOP/byte
        assert prediction.ridge_flop_per_byte == pytest.approx(
            1979e12 / h100.memory_bandwidth_bytes_per_s)
