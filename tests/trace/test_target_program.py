"""The trace records the target's program: attention as PyTorch dispatches it on the chip the
step is predicted for, the optimizer as torch.optim runs it there (issue 35, item 1)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import CPU, Target, target_of
from tensorledger.trace.kernels import target_program
from tensorledger.trace.recorder import Recorder
from tensorledger.workload.run import trace_workload
from tensorledger.workload.spec import resolve_workload

H100 = Target("h100-sxm", "cuda", (9, 0))
V100 = Target("v100-sxm", "cuda", (7, 0))
L4 = Target("l4", "cuda", (8, 9))
MI300X = Target("mi300x", "rocm")


@pytest.mark.parametrize(("target", "dtype", "options", "kernel"), [
    # flash: sm80+, half types, no mask, one head size of at most 256
    (H100, "bf16", {"head_dims": (128, 128, 128), "mask": False, "causal": True,
                    "queries": 7, "keys": 7}, "flash"),
    (H100, "fp16", {"head_dims": (256, 256, 256), "mask": False}, "flash"),
    # a mask: memory-efficient attention (half types aligned to 8)
    (H100, "bf16", {"head_dims": (64, 64, 64), "mask": True}, "efficient"),
    # fp32: not flash; memory-efficient takes fp32 aligned to 4 from sm80
    (H100, "fp32", {"head_dims": (12, 12, 12), "mask": False}, "efficient"),
    # fp32 head size 6: 6 % 4 != 0, so neither: math
    (H100, "fp32", {"head_dims": (6, 6, 6), "mask": True}, "math"),
    # head sizes that differ (MLA-like 192 for q·k, 128 for v): not flash; efficient takes it
    (H100, "bf16", {"head_dims": (192, 192, 128), "mask": False}, "efficient"),
    # head size 288 > 256: not flash
    (H100, "bf16", {"head_dims": (288, 288, 288), "mask": False}, "efficient"),
    # causal with 5 queries over 9 keys: flash refuses is_causal on a non-square
    (H100, "bf16", {"head_dims": (64, 64, 64), "mask": False, "causal": True,
                    "queries": 5, "keys": 9}, "efficient"),
    # sm89 with a gradient through head size 256 > 192: not flash; without one: flash
    (L4, "bf16", {"head_dims": (256, 256, 256), "mask": False, "grad": True}, "efficient"),
    (L4, "bf16", {"head_dims": (256, 256, 256), "mask": False, "grad": False}, "flash"),
    # V100 (7.0): no flash; bf16 is not among its memory-efficient dtypes (fp16, fp32): math
    (V100, "bf16", {"head_dims": (64, 64, 64), "mask": False}, "math"),
    (V100, "fp16", {"head_dims": (64, 64, 64), "mask": False}, "efficient"),
    # fp32 before sm80: alignment 1, so head size 6 passes
    (V100, "fp32", {"head_dims": (6, 6, 6), "mask": True}, "efficient"),
    # ROCm's memory-efficient kernel takes no grouped-query attention
    (MI300X, "bf16", {"head_dims": (64, 64, 64), "mask": True, "grouped": True}, "math"),
    (MI300X, "bf16", {"head_dims": (64, 64, 64), "mask": True}, "efficient"),
])
def test_attention_kernel_follows_sdp_utils(target: Target, dtype: str, options: dict[str, Any],
                                            kernel: str) -> None:
    assert target.attention_kernel(dtype, **options)[0] == kernel


def test_catalog_chips_are_targets() -> None:
    assert target_of(get_hardware("h100")).capability == (9, 0)
    assert target_of(get_hardware("v100-sxm")).capability == (7, 0)
    assert target_of(get_hardware("mi300x")).kind == "rocm"
    tpu = target_of(get_hardware("tpu-v5p"))
    assert tpu.kind == "xla" and "XLA" in tpu.caveat
    assert CPU.native and CPU.optimizer_kernel == "for-loop"
    assert target_of(get_hardware("h100")).optimizer_kernel == "foreach"


def _attention(run_with: Target | None, *, mask: bool, dtype: torch.dtype = torch.bfloat16,
               gqa: bool = False) -> tuple[Counter[str], tuple[tuple[str, str, str], ...]]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    # B = 2, H = 4 (KV 2 with gqa), S = 6, D = 16: every dimension differs
    with FakeTensorMode():
        q = torch.randn(2, 4, 6, 16, dtype=dtype, requires_grad=True)
        k = torch.randn(2, 2 if gqa else 4, 6, 16, dtype=dtype, requires_grad=True)
        v = torch.randn(2, 2 if gqa else 4, 6, 16, dtype=dtype, requires_grad=True)
        m = torch.ones(6, 6, dtype=torch.bool).tril() if mask else None
        with Recorder() as recorder:
            if run_with is None:
                out = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=m, is_causal=not mask, enable_gqa=gqa)
            else:
                with target_program(run_with):
                    out = torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, attn_mask=m, is_causal=not mask, enable_gqa=gqa)
            out.sum().backward()
    trace = recorder.trace
    return Counter(r.op for r in trace.records if r.category == "attention"), \
        trace.attention_kernels


def test_fake_cpu_attention_is_routed_to_the_targets_kernel() -> None:
    ops, chosen = _attention(H100, mask=False)
    assert ops == {"aten._scaled_dot_product_flash_attention.default": 1,
                   "aten._scaled_dot_product_flash_attention_backward.default": 1}
    assert [kernel for _, kernel, _ in chosen] == ["flash"]
    ops, chosen = _attention(H100, mask=True)
    assert ops == {"aten._scaled_dot_product_efficient_attention.default": 1,
                   "aten._scaled_dot_product_efficient_attention_backward.default": 1}
    assert chosen[0][1:] == ("efficient", "not flash: an attention mask")
    # grouped query attention under flash: the kernel takes 2 KV heads for 4 query heads
    ops, _ = _attention(H100, mask=False, gqa=True)
    assert "aten._scaled_dot_product_flash_attention.default" in ops
    # the same call left to this CPU (no target program) is the CPU's kernel: nothing routed
    ops, chosen = _attention(None, mask=False)
    assert chosen == () and not any("_for_cpu" not in op for op in ops)


def test_the_math_fallback_computes_attention() -> None:
    """Where the target falls back to math (bf16 on a V100), the routed call is PyTorch's math
    kernel: on real CPU tensors its value equals ``F.scaled_dot_product_attention``'s."""
    from tensorledger.trace.kernels import sdpa_on

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 16, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = sdpa_on(V100, q, k, v, attn_mask=mask)
    assert got is not None
    assert torch.allclose(got.float(), expected.float(), atol=2e-2)
    # a target that chooses for itself leaves real tensors to PyTorch
    assert sdpa_on(CPU, q, k, v, attn_mask=mask) is None


def _count_param_tensors(work: Any) -> int:
    from tensorledger.workload.step import build_module, placement

    with placement(work.device) as target:
        module, _ = build_module(work, target)
        return len(list(dict.fromkeys(module.parameters())))


def test_adamw_on_a_gpu_target_runs_foreach_kernels() -> None:
    """torch's ``_multi_tensor_adamw`` (torch/optim/adam.py, one device and dtype group, step
    counters on the CPU, not capturable): ``_foreach_add_(steps, tensor(1.0))`` (a lift_fresh
    and a _foreach_add_.Tensor), ``_foreach_mul_`` (weight decay), ``_foreach_lerp_`` (m),
    ``_foreach_mul_`` and ``_foreach_addcmul_`` (v), two bias corrections of one ``.item()``
    per tensor each (2·N ``_local_scalar_dense``), ``_foreach_sqrt``, ``_foreach_div_``,
    ``_foreach_add_`` (ε) and ``_foreach_addcdiv_``: 2 + 4 + 2·N + 4 = 2·N + 10 ops."""
    work = resolve_workload("tiny", batch=2, seq=8, precision="fp32", target=H100)
    assert work.optimizer_kernel == "foreach"
    run = trace_workload(work)
    n = _count_param_tensors(work)
    optimizer = Counter(r.op.rsplit(".", 1)[0] for r in run.trace.records
                        if r.phase == "optimizer")
    assert optimizer["aten._local_scalar_dense"] == 2 * n
    assert sum(optimizer.values()) == 2 * n + 10
    assert optimizer["aten._foreach_addcdiv_"] == 1 and optimizer["aten._foreach_sqrt"] == 1
    # the per-parameter loop on the CPU target has a handful of ops per tensor instead
    loop = trace_workload(resolve_workload("tiny", batch=2, seq=8, precision="fp32",
                                           target=CPU))
    assert loop.work.optimizer_kernel == "for-loop"
    assert sum(r.phase == "optimizer" for r in loop.trace.records) > 5 * n


def test_fused_adamw_is_one_kernel_per_group() -> None:
    """``fused=True``: ``_foreach_add_`` of the step counters (on the device: fused keeps them
    there) and one ``_fused_adamw_`` per device and dtype group; on meta it is refused."""
    work = resolve_workload("tiny", batch=2, seq=8, precision="fp32", target=H100,
                            optimizer_kernel="fused")
    assert work.device == "fake"
    run = trace_workload(work)
    ops = Counter(r.op for r in run.trace.records if r.phase == "optimizer")
    assert ops == {"aten._foreach_add_.Scalar": 1, "aten._fused_adamw_.default": 1}
    from tensorledger.errors import InputError

    with pytest.raises(InputError, match="fused"):
        resolve_workload("tiny", precision="fp32", device="meta", optimizer_kernel="fused")
    with pytest.raises(InputError, match="lion"):
        resolve_workload("tiny", optimizer="lion", optimizer_kernel="fused")


def test_the_state_is_the_same_whatever_the_kernel() -> None:
    """foreach and fused keep the same parameters, gradients and moments as the loop; the
    foreach step's ``_foreach_sqrt`` makes one fp32 copy of every second moment at once: as
    many bytes as the fp32 parameters (the loop's ``sqrt`` holds one tensor's at a time)."""
    from tensorledger.ledger.memory import memory_report

    reports = {kernel: memory_report(resolve_workload(
        "tiny", batch=2, seq=8, precision="fp32", target=H100, optimizer_kernel=kernel,
        device="fake")) for kernel in ("for-loop", "foreach", "fused")}
    state = {(r.params_bytes, r.grads_bytes, r.optimizer_state_bytes) for r in reports.values()}
    assert len(state) == 1
    run = trace_workload(resolve_workload("tiny", batch=2, seq=8, precision="fp32",
                                          target=H100, device="fake"))
    (sqrt,) = [r for r in run.trace.records if r.op == "aten._foreach_sqrt.default"]
    assert sum(nbytes for _, nbytes in sqrt.storages_created) == reports["foreach"].params_bytes


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "phi3", "bert", "qwen2",
                                    "mistral"])
def test_hf_attention_is_fused_on_an_h100(tmp_path: Path, family: str) -> None:
    """Tiny HF models (head size 16, B = 2, S = 60) on the default target (an H100): every
    attention module runs flash (causal, no mask) and nothing the step saves is as large as
    the scores of one layer would be in bf16: B·H·S²·2 = 2·4·3600·2 = 57,600 bytes (the
    largest other tensor is the fp32 logits, 2·60·97·4 = 46,560)."""
    configs: dict[str, dict[str, Any]] = {
        "llama": {"model_type": "llama", "num_key_value_heads": 2, "head_dim": 16},
        "qwen2": {"model_type": "qwen2", "num_key_value_heads": 2},
        "mistral": {"model_type": "mistral", "num_key_value_heads": 2, "head_dim": 16},
        "phi3": {"model_type": "phi3", "num_key_value_heads": 2, "pad_token_id": 0},
        "gpt_neox": {"model_type": "gpt_neox"},
        "bert": {"model_type": "bert", "architectures": ["BertForMaskedLM"]},
    }
    fields = {"vocab_size": 97, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 72,
              "max_position_embeddings": 64}
    if family == "gpt2":
        raw = {"model_type": "gpt2", "vocab_size": 97, "n_embd": 64, "n_layer": 2,
               "n_head": 4, "n_positions": 64, "n_inner": 72}
    else:
        raw = {**fields, **configs[family]}
    folder = tmp_path / family
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    run = trace_workload(resolve_workload(str(folder / "config.json"), batch=2, seq=60,
                                          target=H100))
    kernels = [kernel for _, kernel, _ in run.trace.attention_kernels]
    assert kernels == ["flash", "flash"]  # one per layer, 2 layers
    scores_bytes = 2 * 4 * 60 * 60 * 2  # B·H·S² in bf16
    saved = [s for s, tag in run.tags.items() if tag == "saved_activation"]
    assert saved
    created = {sid: nbytes for r in run.trace.records for sid, nbytes in r.storages_created}
    assert all(created.get(sid, 0) < scores_bytes for sid in saved), \
        "a saved tensor as large as a layer's B·H·S² scores"
