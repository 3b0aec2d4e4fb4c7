"""``--attention``: the attention kernel forced on the target, as ``sdpa_kernel`` forces it on
the chip, and ``eager``, the scores written out in the inputs' dtype (programs that predate
fused attention: Megatron-LM 2021)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tensorledger.errors import InputError, UnknownNameError
from tensorledger.hardware.target import CPU, Target, resolve_attention
from tensorledger.trace.kernels import target_program
from tensorledger.trace.recorder import Recorder
from tensorledger.workload.spec import resolve_workload

H100 = Target("h100-sxm", "cuda", (9, 0))
V100 = Target("v100-sxm", "cuda", (7, 0))
# B = 2, H = 3, S = 5, D = 8: every dimension differs
B, H, S, D = 2, 3, 5, 8


def _bmms(target: Target, dtype: torch.dtype = torch.bfloat16
          ) -> tuple[list[tuple[str, int, str]], tuple[tuple[str, str, str], ...]]:
    """The bmm records (phase, FLOPs, first input's dtype) of one causal attention forward
    and backward on fake tensors, and the kernels chosen."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k, v = (torch.randn(B, H, S, D, dtype=dtype, requires_grad=True) for _ in range(3))
        with Recorder() as recorder:
            with target_program(target):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.sum().backward()
    trace = recorder.trace
    bmms = [(r.phase, r.flops, r.input_dtypes[0] if r.input_dtypes else "")
            for r in trace.records if r.op == "aten.bmm.default"]
    return bmms, trace.attention_kernels


def test_names_and_refusals() -> None:
    assert resolve_attention(" AUTO ") == "auto" and resolve_attention("eager") == "eager"
    with pytest.raises(UnknownNameError, match="known: auto, eager, efficient, flash, math"):
        resolve_attention("sdpa")
    assert H100.forcing("math").attention == "math"
    assert H100.forcing("math").forcing("auto") == H100
    # a forced kernel the inputs do not admit is refused, as sdpa_kernel refuses it
    with pytest.raises(InputError, match="--attention flash: v100-sxm cannot run it"):
        V100.forcing("flash").attention_kernel("bf16", head_dims=(64, 64, 64), mask=False)
    with pytest.raises(InputError, match="memory-efficient attention takes fp16 and fp32"):
        V100.forcing("efficient").attention_kernel("bf16", head_dims=(64, 64, 64), mask=False)
    # where it is admitted it is taken, against PyTorch's own choice (flash here)
    assert H100.forcing("efficient").attention_kernel(
        "bf16", head_dims=(64, 64, 64), mask=False) == ("efficient",
                                                        "forced: --attention efficient")
    # a device that chooses for itself cannot be forced
    with pytest.raises(InputError, match="PyTorch chooses its own"):
        CPU.forcing("math")
    with pytest.raises(InputError, match="--device cpu"):
        resolve_workload("tiny", device="cpu", target=H100.forcing("eager"))


def test_eager_writes_the_scores_out_in_the_inputs_dtype() -> None:
    """Forward: QKᵀ and P·V, each 2·B·H·S·S·D = 2·2·3·5·5·8 = 2,400 FLOPs (the causal mask is
    applied to full scores); backward: two bmms for each, 4 × 2,400.  eager runs them on bf16
    operands; math (PyTorch's math kernel) on fp32 copies; auto on an H100 runs none (flash)."""
    per_bmm = 2 * B * H * S * S * D
    assert per_bmm == 2_400
    eager, chosen = _bmms(H100.forcing("eager"))
    assert [kernel for _, kernel, _ in chosen] == ["eager"]
    assert Counter(phase for phase, _, _ in eager) == {"forward": 2, "backward": 4}
    assert {flops for _, flops, _ in eager} == {per_bmm}
    assert {dtype for _, _, dtype in eager} == {"bf16"}
    math, chosen = _bmms(H100.forcing("math"))
    assert [kernel for _, kernel, _ in chosen] == ["math"]
    assert [flops for _, flops, _ in math] == [flops for _, flops, _ in eager]
    assert {dtype for _, _, dtype in math} == {"fp32"}
    flash, chosen = _bmms(H100)
    assert flash == [] and [kernel for _, kernel, _ in chosen] == ["flash"]
    # the global switch eager flips is left as it was found
    assert not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()


def test_the_cli_forces_the_kernel(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("trace", "--model", "tiny", "--batch", "2", "--seq", "16", "--attention",
                 "eager")
    assert result.code == 0, result.stderr
    assert "attention forced to eager (--attention)" in result.stdout
    assert "(forced: --attention eager)" in result.stdout
    bad = cli("trace", "--model", "tiny", "--attention", "sdpa")
    assert bad.code == 2 and "unknown attention kernel 'sdpa'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
