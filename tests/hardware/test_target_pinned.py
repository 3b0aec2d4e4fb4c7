"""The kernel PyTorch picks on a target chip, pinned rule by rule at each bound of
``sdp_utils.cpp``'s ``select_sdp_backend`` (flash, then memory-efficient, then math), with the
reason each refusal gives word for word; and the target of a chip as its file states it."""

from __future__ import annotations

import pytest

from tensorledger.errors import InputError, UnknownNameError
from tensorledger.hardware.chip import Hardware
from tensorledger.hardware.target import (
    CPU,
    Target,
    default_target,
    resolve_attention,
    target_of,
)

H100 = Target("h100-sxm", "cuda", (9, 0))
A100 = Target("a100", "cuda", (8, 0))
V100 = Target("v100", "cuda", (7, 0))
MI300X = Target("mi300x", "rocm")
TPU = Target("tpu", "xla")
UNKNOWN = Target("gpu", "cuda")  # no capability stated
SQUARE = (64, 64, 64)


def kernel(target: Target, dtype: str = "bf16", head_dims: tuple[int, int, int] = SQUARE,
           mask: bool = False, **options: object) -> tuple[str, str]:
    return target.attention_kernel(dtype, head_dims=head_dims, mask=mask,
                                   **options)  # type: ignore[arg-type]


# ---- flash ----

@pytest.mark.parametrize("target", [A100, H100, Target("b200", "cuda", (10, 0)), MI300X, TPU])
def test_flash_from_compute_capability_8_0_and_on_rocm_and_xla(target: Target) -> None:
    assert kernel(target) == ("flash", "bf16, no mask, head size 64")


def test_flash_takes_both_half_types_causal_square_and_any_rectangle_unmasked() -> None:
    assert kernel(H100, "fp16", causal=True, queries=5, keys=5) == (
        "flash", "fp16, causal, head size 64")
    # causal with no counts given: one query over one key, square
    assert kernel(H100, causal=True) == ("flash", "bf16, causal, head size 64")
    # without is_causal, queries and keys may differ
    assert kernel(H100, queries=5, keys=9)[0] == "flash"
    # a head size of 256 is the largest flash takes
    assert kernel(H100, head_dims=(256, 256, 256)) == ("flash", "bf16, no mask, head size 256")


@pytest.mark.parametrize("capability", [(8, 6), (8, 9), (12, 0), (12, 1)])
def test_small_sms_take_no_gradient_through_a_head_above_192(
        capability: tuple[int, int]) -> None:
    small = Target("small", "cuda", capability)
    text = f"{capability[0]}.{capability[1]}"
    assert kernel(small, head_dims=(256, 256, 256)) == (
        "efficient", f"not flash: a gradient through head size 256 on compute capability {text} "
                     "(at most 192)")
    assert kernel(small, head_dims=(200, 200, 200), grad=True)[0] == "efficient"
    assert kernel(small, head_dims=(192, 192, 192))[0] == "flash"  # 192 itself is taken
    assert kernel(small, head_dims=(256, 256, 256), grad=False)[0] == "flash"


@pytest.mark.parametrize("capability", [(8, 0), (8, 7), (9, 0), (10, 0), (11, 9), (13, 0)])
def test_other_sms_take_a_gradient_through_any_head_flash_takes(
        capability: tuple[int, int]) -> None:
    assert kernel(Target("big", "cuda", capability), head_dims=(256, 256, 256))[0] == "flash"


def test_rocm_takes_a_gradient_through_any_head_flash_takes() -> None:
    assert kernel(MI300X, head_dims=(256, 256, 256))[0] == "flash"


@pytest.mark.parametrize(("target", "dtype", "head_dims", "options", "why"), [
    (V100, "fp16", SQUARE, {}, "flash needs compute capability 8.0 (this is 7.0)"),
    (Target("a", "cuda", (7, 9)), "fp16", SQUARE, {},
     "flash needs compute capability 8.0 (this is 7.9)"),
    (H100, "bf16", SQUARE, {"mask": True}, "an attention mask"),
    (H100, "fp32", SQUARE, {}, "fp32 (flash takes fp16 and bf16)"),
    (H100, "bf16", (64, 64, 32), {}, "head sizes 64, 64, 32 (flash: one size, at most 256)"),
    (H100, "bf16", (64, 32, 64), {}, "head sizes 64, 32, 64 (flash: one size, at most 256)"),
    (H100, "bf16", (32, 64, 64), {}, "head sizes 32, 64, 64 (flash: one size, at most 256)"),
    (H100, "bf16", (264, 264, 264), {},
     "head sizes 264, 264, 264 (flash: one size, at most 256)"),
    (H100, "bf16", SQUARE, {"causal": True, "queries": 5, "keys": 9},
     "causal with 5 queries and 9 keys"),
])
def test_what_flash_refuses(target: Target, dtype: str, head_dims: tuple[int, int, int],
                            options: dict[str, object], why: str) -> None:
    chosen, reason = kernel(target, dtype, head_dims, **options)  # type: ignore[arg-type]
    assert chosen == "efficient" and reason == f"not flash: {why}"


def test_a_chip_of_no_stated_capability_runs_neither_fused_kernel() -> None:
    assert kernel(UNKNOWN) == (
        "math", "flash needs compute capability 8.0 (this is ?); memory-efficient attention "
                "needs compute capability 5.0 (?)")


# ---- memory-efficient ----

@pytest.mark.parametrize(("target", "dtype", "head_dims", "options", "why"), [
    (Target("k", "cuda", (3, 7)), "fp16", SQUARE, {},
     "memory-efficient attention needs compute capability 5.0 (3.7)"),
    (Target("k", "cuda", (4, 9)), "fp16", SQUARE, {},
     "memory-efficient attention needs compute capability 5.0 (4.9)"),
    (V100, "bf16", SQUARE, {}, "memory-efficient attention takes fp16 and fp32 on compute "
                               "capability 7.0, not bf16"),
    (H100, "fp8", SQUARE, {}, "memory-efficient attention takes fp16 and fp32 and bf16 on "
                              "compute capability 9.0, not fp8"),
    (MI300X, "bf16", SQUARE, {"mask": True, "grouped": True},
     "grouped-query attention (ROCm's memory-efficient kernel takes none)"),
    # half types align to 8; fp32 to 4 from 8.0
    (H100, "bf16", (12, 12, 12), {"mask": True},
     "head sizes 12 and 12 (memory-efficient attention: multiples of 8 in bf16)"),
    (H100, "fp16", (16, 16, 12), {}, "head sizes 16 and 12 (memory-efficient attention: "
                                     "multiples of 8 in fp16)"),
    (H100, "fp16", (12, 12, 16), {}, "head sizes 12 and 16 (memory-efficient attention: "
                                     "multiples of 8 in fp16)"),
    (V100, "fp16", (12, 12, 12), {}, "head sizes 12 and 12 (memory-efficient attention: "
                                     "multiples of 8 in fp16)"),
    (A100, "fp32", (6, 6, 6), {}, "head sizes 6 and 6 (memory-efficient attention: multiples "
                                  "of 4 in fp32)"),
])
def test_what_memory_efficient_attention_refuses(
        target: Target, dtype: str, head_dims: tuple[int, int, int],
        options: dict[str, object], why: str) -> None:
    chosen, reason = kernel(target, dtype, head_dims, **options)  # type: ignore[arg-type]
    assert chosen == "math" and reason.endswith(f"; {why}")


def test_what_memory_efficient_attention_takes() -> None:
    # compute capability 5.0 is the oldest it runs on; fp16 head sizes of 16, a multiple of 8
    assert kernel(Target("m", "cuda", (5, 0)), "fp16", (16, 16, 16))[0] == "efficient"
    # the key's head size (k) is not checked, nor grouped queries on CUDA
    assert kernel(H100, "fp16", (16, 8, 24), mask=True, grouped=True)[0] == "efficient"
    # fp32: a multiple of 4 from 8.0 (12, 4), any size before (5)
    assert kernel(H100, "fp32", (12, 12, 4))[0] == "efficient"
    assert kernel(V100, "fp32", (5, 5, 5)) == (
        "efficient", "not flash: flash needs compute capability 8.0 (this is 7.0)")
    # bf16 from 8.0 on, on ROCm without grouped queries
    assert kernel(A100, "bf16", mask=True)[0] == "efficient"
    assert kernel(MI300X, "bf16", mask=True) == ("efficient", "not flash: an attention mask")


def test_math_names_both_refusals() -> None:
    assert kernel(H100, "fp32", (6, 6, 6), mask=True) == (
        "math", "an attention mask; head sizes 6 and 6 (memory-efficient attention: multiples "
                "of 4 in fp32)")


# ---- forced kernels, native targets ----

def test_a_forced_kernel_runs_where_the_inputs_admit_it() -> None:
    for forced in ("flash", "efficient", "math", "eager"):
        assert kernel(H100.forcing(forced)) == (forced, f"forced: --attention {forced}")
    # math and eager take any inputs
    assert kernel(V100.forcing("eager"), "fp8", (3, 5, 7), mask=True) == (
        "eager", "forced: --attention eager")
    assert kernel(V100.forcing("math"), "fp8", (3, 5, 7), mask=True)[0] == "math"
    assert H100.forcing(" Flash ").forcing("auto") == H100


def test_rocm_refuses_grouped_queries_forced_onto_memory_efficient_attention() -> None:
    with pytest.raises(InputError) as error:
        kernel(MI300X.forcing("efficient"), grouped=True)
    assert str(error.value) == (
        "--attention efficient: mi300x cannot run it on these inputs (grouped-query attention "
        "(ROCm's memory-efficient kernel takes none)); drop --attention or force another "
        "kernel")
    assert kernel(H100.forcing("efficient"), grouped=True)[0] == "efficient"  # CUDA's takes it


@pytest.mark.parametrize(("forced", "why"), [
    ("flash", "an attention mask"),
    ("efficient", "head sizes 12 and 12 (memory-efficient attention: multiples of 8 in bf16)"),
])
def test_a_forced_kernel_the_inputs_refuse_is_an_error(forced: str, why: str) -> None:
    with pytest.raises(InputError) as error:
        kernel(H100.forcing(forced), head_dims=(12, 12, 12), mask=True)
    assert str(error.value) == (f"--attention {forced}: h100-sxm cannot run it on these inputs "
                                f"({why}); drop --attention or force another kernel")


def test_a_native_target_chooses_for_itself() -> None:
    assert kernel(CPU, "fp32", (3, 5, 7), mask=True) == ("native",
                                                         "PyTorch chooses on this device")
    assert CPU.forcing("auto") == CPU
    with pytest.raises(InputError) as error:
        CPU.forcing("math")
    assert str(error.value) == ("--attention math forces the kernel a target chip runs, traced "
                                "on fake tensors; on cpu PyTorch chooses its own: drop "
                                "--attention, or trace on fake tensors")


def test_attention_choices_are_read_loosely_and_checked() -> None:
    assert [resolve_attention(n) for n in (" Auto", "FLASH ", "efficient", "math", "Eager")] == [
        "auto", "flash", "efficient", "math", "eager"]
    with pytest.raises(UnknownNameError) as error:
        resolve_attention("fused")
    assert error.value.kind == "attention kernel"
    assert error.value.known == ("auto", "eager", "efficient", "flash", "math")


# ---- what a target is ----

def test_a_targets_optimizer_caveat_and_description() -> None:
    assert [t.optimizer_kernel for t in (H100, MI300X, TPU, CPU, Target("c", "cpu"))] == [
        "foreach", "foreach", "foreach", "for-loop", "for-loop"]
    assert TPU.caveat == ("tpu runs the step as one XLA program that PyTorch does not dispatch "
                          "op by op: the trace records a CUDA GPU's program in its place (flash "
                          "attention, foreach optimizer)")
    assert [t.caveat for t in (H100, MI300X, CPU)] == ["", "", ""]
    assert [t.describe() for t in (H100, MI300X, TPU, Target("c", "cpu"), UNKNOWN, CPU)] == [
        "h100-sxm (CUDA, compute capability 9.0)", "mi300x (ROCm)", "tpu (XLA)", "c (CPU)",
        "gpu (CUDA)", "cpu (PyTorch chooses its kernels)"]
    assert Target("b", "cuda", (12, 1)).describe() == "b (CUDA, compute capability 12.1)"


def chip(chip_id: str = "x", name: str = "X", vendor: str = "", capability: str | None = None,
         source: str = "") -> Hardware:
    return Hardware(id=chip_id, name=name, memory_bytes=1.0, memory_bandwidth_bytes_per_s=1.0,
                    dense_flop_per_s={"fp32": 1.0}, vendor=vendor,
                    compute_capability=capability, sources={"*": source})


def test_the_target_of_a_chip() -> None:
    assert target_of(chip("h", vendor="NVIDIA", capability="12.1")) == Target("h", "cuda",
                                                                            (12, 1))
    # no capability stated, whatever the vendor: 8.0, the oldest that runs flash in bf16
    assert target_of(chip("n", vendor="NVIDIA")) == Target("n", "cuda", (8, 0))
    assert target_of(chip("i", vendor="Intel")) == Target("i", "cuda", (8, 0))
    assert target_of(chip("a", vendor=" AMD ")) == Target("a", "rocm")
    assert target_of(chip("t", vendor="Google")) == Target("t", "xla")


def test_the_target_of_a_probed_profile() -> None:
    # a profile probed on a CUDA GPU: a CUDA target of 8.0; on the CPU: the CPU itself
    on_gpu = "measured by tensorledger probe on cuda: best median of a matmul sweep"
    assert target_of(chip("local", source=on_gpu)) == Target("local", "cuda", (8, 0))
    assert target_of(chip("local", vendor="AMD", source="probe on cpu")) is CPU
    assert target_of(chip("local")) is CPU
    # a profile that states no source of its own: probed on no GPU, so the CPU
    bare = Hardware(id="local", name="X", memory_bytes=1.0, memory_bandwidth_bytes_per_s=1.0,
                    dense_flop_per_s={"fp32": 1.0})
    assert target_of(bare) is CPU
    # a profile saved under another id is known by its name
    assert target_of(chip("box", name="Xeon (probed)", vendor="Google",
                          source=on_gpu)) == Target("box", "cuda", (8, 0))
    assert target_of(chip("box", name="Xeon (probed)", capability="9.0")) is CPU
    assert target_of(chip("box", name="(probed) Xeon", capability="9.0")) == Target(
        "box", "cuda", (9, 0))


def test_the_default_target_is_an_h100() -> None:
    assert default_target() == Target("h100-sxm", "cuda", (9, 0))
