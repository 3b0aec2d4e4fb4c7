"""The workload's checks, each refusal and each choice by hand (issue 42's mutation run of
``tensorledger.workload.spec``): steps, adapters, offload, the device ``auto`` picks, the
target and optimizer kernel, the decode step's context, and the summary line.  Torch-free and
fast: nothing is built or traced."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tensorledger.errors import InputError, UnknownNameError
from tensorledger.hardware.target import CPU, Target
from tensorledger.napkin.recipes import resolve_precision
from tensorledger.workload import spec
from tensorledger.workload.layout import SINGLE, Layout
from tensorledger.workload.routing import BALANCED, Routing
from tensorledger.workload.source import ModelSource, resolve_source
from tensorledger.workload.spec import (
    Lora,
    Step,
    check_float8,
    check_lora_layout,
    check_param_offload,
    resolve_lora,
    resolve_offload,
    resolve_step,
    resolve_workload,
)

H100 = Target("h100-sxm", "cuda", (9, 0))
FP32 = resolve_precision("fp32")
MIXED = resolve_precision("mixed-bf16")
FP8 = resolve_precision("fp8-tensorwise")


def refused(call, *words: str) -> str:  # type: ignore[no-untyped-def]
    """Run ``call``; it must raise InputError whose message holds every word."""
    with pytest.raises(InputError) as caught:
        call()
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))
    return str(caught.value)


# ---- steps ---------------------------------------------------------------------------------

def test_only_a_cached_step_named_decode_decodes() -> None:
    assert spec.STEPS["decode"].decodes  # cached, named decode
    assert not spec.STEPS["prefill"].decodes  # cached, but fills the cache
    assert not spec.STEPS["train"].decodes  # not cached
    assert not Step("decode", False, False, "", cached=False).decodes  # the name alone is not


def test_steps_say_what_runs() -> None:
    # (backward, optimizer, cached) of each step, as its description says
    flags = {name: (s.backward, s.optimizer, s.cached) for name, s in spec.STEPS.items()}
    assert flags == {"forward": (False, False, False), "forward-backward": (True, False, False),
                     "train": (True, True, False), "prefill": (False, False, True),
                     "decode": (False, False, True)}


def test_a_step_is_found_by_its_name_in_any_case_and_spacing() -> None:
    assert resolve_step(" Forward-Backward ") is spec.STEPS["forward-backward"]
    with pytest.raises(UnknownNameError, match="unknown step 'sprint'"):
        resolve_step("sprint")


# ---- adapters ------------------------------------------------------------------------------

def test_lora_describes_its_rank_targets_and_base() -> None:
    assert Lora(8, 8, ("q_proj", "v_proj")).describe() == "LoRA r=8 on q_proj, v_proj"
    assert Lora(4, 4, (), nf4=True).describe() == (
        "LoRA r=4 on the model's default targets over a 4-bit NF4 base (QLoRA)")


def test_peft_and_torchao_are_found_without_importing_them() -> None:
    # both are installed beside the tests (the lora and ao extras)
    assert spec.peft_available() is True
    assert spec.torchao_available() is True


def test_lora_targets_are_trimmed_kept_in_order_once_and_rank_is_alpha() -> None:
    got = resolve_lora(16, " q_proj , layers.0.v_proj,q_proj", qlora=True)
    assert got == Lora(rank=16, alpha=16, targets=("q_proj", "layers.0.v_proj"), nf4=True)
    assert got is not None and got.nf4 is True
    plain = resolve_lora(65536)  # the largest rank, 1 << 16
    assert plain == Lora(rank=65536, alpha=65536, targets=(), nf4=False)
    assert plain is not None and plain.nf4 is False and plain.dropout == 0.0
    assert resolve_lora(None) is None


@pytest.mark.parametrize("bad", ["q-proj", "0q", "", "q_proj.", "a b"])
def test_a_lora_target_that_is_no_module_name_is_refused(bad: str) -> None:
    refused(lambda: resolve_lora(8, f"q_proj,{bad}"), repr(bad), "module names")


def test_lora_options_without_a_rank_are_refused() -> None:
    refused(lambda: resolve_lora(None, "q_proj"), "--lora-targets")
    refused(lambda: resolve_lora(None, qlora=True), "--qlora")
    assert resolve_lora(None, None, False) is None


@pytest.mark.parametrize("rank", [0, 65537, True, 2.0])
def test_a_lora_rank_out_of_range_or_no_whole_number_is_refused(rank: int) -> None:
    refused(lambda: resolve_lora(rank), "--lora must be")


def test_lora_without_peft_and_qlora_without_torchao_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec, "torchao_available", lambda: False)
    refused(lambda: resolve_lora(8, qlora=True), "torchao")
    assert resolve_lora(8) == Lora(8, 8)  # no --qlora: torchao is not needed
    monkeypatch.setattr(spec, "peft_available", lambda: False)
    refused(lambda: resolve_lora(8), "peft")


def test_lora_is_traced_under_fsdp_and_ddp_only() -> None:
    lora = Lora(8, 8)
    check_lora_layout(lora, Layout(fsdp=2))  # allowed: nothing raised
    check_lora_layout(lora, Layout(dp=2))
    for layout in (Layout(tp=2), Layout(cp=2), Layout(pp=2, microbatches=2)):
        refused(lambda layout=layout: check_lora_layout(lora, layout), "--tp, --cp or --pp")
    refused(lambda: check_lora_layout(Lora(8, 8, nf4=True), Layout(fsdp=2)), "--qlora")
    refused(lambda: check_lora_layout(lora, Layout(fsdp=2, zero=1)), "--zero 1")


# ---- offload -------------------------------------------------------------------------------

def test_offload_names_are_lowered_trimmed_and_kept_once_in_order() -> None:
    assert resolve_offload(None) == ()
    assert resolve_offload(" Params, activations ,params") == ("params", "activations")


def test_an_unknown_offload_is_named() -> None:
    with pytest.raises(UnknownNameError, match="unknown offload 'disk'"):
        resolve_offload("activations,disk")
    # an empty piece names the whole text given
    with pytest.raises(UnknownNameError, match="unknown offload 'params,'"):
        resolve_offload("params,")


def test_param_offload_is_fsdp2_on_a_fake_group_only() -> None:
    check_param_offload(SINGLE, "auto", MIXED)  # one device: a 1-rank mesh
    check_param_offload(Layout(fsdp=2), "fake", MIXED)
    check_param_offload(Layout(dp=2, fsdp=2), "auto", FP32)  # HSDP
    refused(lambda: check_param_offload(SINGLE, "meta", MIXED), "--device meta")
    refused(lambda: check_param_offload(SINGLE, "cpu", MIXED), "--device cpu")
    for layout in (Layout(fsdp=2, tp=2), Layout(fsdp=2, cp=2),
                   Layout(fsdp=2, pp=2, microbatches=2)):
        refused(lambda layout=layout: check_param_offload(layout, "fake", MIXED),
                "not beside --tp, --cp or --pp")
    refused(lambda: check_param_offload(Layout(dp=2), "fake", MIXED), "DDP × 2 has none")
    refused(lambda: check_param_offload(Layout(fsdp=2, zero=1), "fake", MIXED), "ZeRO-1")
    refused(lambda: check_param_offload(Layout(fsdp=2), "fake", FP8), "fp8-tensorwise")


# ---- fp8 -----------------------------------------------------------------------------------

def test_float8_is_traced_on_one_device_or_data_parallel_without_adapters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    check_float8(FP8, Layout(fsdp=2), None)  # allowed
    check_float8(FP8, Layout(dp=2), None)
    refused(lambda: check_float8(FP8, Layout(tp=2), None), "drop --tp/--pp")
    refused(lambda: check_float8(FP8, Layout(pp=2, microbatches=2), None), "drop --tp/--pp")
    refused(lambda: check_float8(FP8, SINGLE, Lora(8, 8)), "--lora")
    monkeypatch.setattr(spec, "torchao_available", lambda: False)
    refused(lambda: check_float8(FP8, SINGLE, None), "torchao")


# ---- the whole workload --------------------------------------------------------------------

def test_defaults_are_the_documented_ones() -> None:
    # the CLI's help and README: one sequence of 1,024 tokens, a training step in mixed bf16
    # with AdamW, the device and kernel chosen, no checkpointing; inference serves bf16
    documented = spec.WorkloadDefaults(
        batch=1, seq=1024, step="train", precision="mixed-bf16", optimizer="adamw",
        device="auto", checkpoint=False, optimizer_kernel="auto", inference_precision="bf16")
    assert documented == spec.DEFAULTS
    w = resolve_workload("tiny")
    assert (w.batch, w.seq, w.step.name, w.precision.name, w.optimizer.name, w.checkpoint) == (
        1, 1024, "train", "mixed-bf16", "adamw", False)
    assert resolve_workload("tiny", step="prefill").precision.name == "bf16"
    assert w.layout is SINGLE and w.lora is None and w.offload == () and w.context is None
    assert w.routing is BALANCED


@pytest.mark.parametrize(("name", "value", "largest"), [("batch", 1 << 20, 1 << 20),
                                                        ("seq", 1 << 24, 1 << 24)])
def test_batch_and_seq_run_from_one_to_their_largest(name: str, value: int,
                                                     largest: int) -> None:
    assert getattr(resolve_workload("tiny", **{name: value}), name) == value
    assert getattr(resolve_workload("tiny", **{name: 1}), name) == 1
    refused(lambda: resolve_workload("tiny", **{name: largest + 1}),
            f"--{name} must be between 1 and {largest:,}, got {largest + 1:,}")
    refused(lambda: resolve_workload("tiny", **{name: 0}), f"--{name} must be between")
    refused(lambda: resolve_workload("tiny", **{name: True}), f"--{name} must be a whole")
    refused(lambda: resolve_workload("tiny", **{name: "8"}), f"--{name} must be a whole")


def test_a_source_may_be_given_resolved() -> None:
    source = resolve_source("tiny")
    assert resolve_workload(source).source is source


def test_auto_is_meta_only_for_an_exact_preset_step_else_fake() -> None:
    assert resolve_workload("tiny", precision="fp32").device == "meta"
    assert resolve_workload("tiny", precision="bf16").device == "meta"
    assert resolve_workload("tiny").device == "fake"  # mixed-bf16 autocasts
    assert resolve_workload("tiny", precision="fp32", checkpoint=True).device == "fake"
    assert resolve_workload("tiny", precision="fp32", layout=Layout(fsdp=2)).device == "fake"
    assert resolve_workload("tiny", precision="fp32", optimizer_kernel="fused",
                            target=H100).device == "fake"
    assert resolve_workload("tiny", precision="fp32",
                            offload=("activations",)).device == "fake"
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    assert resolve_workload(factory, precision="fp32").device == "fake"
    # a device named is kept, in any case
    assert resolve_workload("tiny", precision="fp32", device=" FAKE ").device == "fake"
    assert resolve_workload("tiny", precision="fp32", device="meta").device == "meta"


def test_meta_refuses_the_fused_kernel_and_autocast() -> None:
    refused(lambda: resolve_workload("tiny", precision="fp32", device="meta", target=H100,
                                     optimizer_kernel="fused"), "fused optimizer")
    refused(lambda: resolve_workload("tiny", device="meta"), "mixed-bf16 runs the forward")
    refused(lambda: resolve_workload("tiny", device="gpu"), "unknown device 'gpu'")


def test_a_layout_runs_on_fake_tensors_only() -> None:
    refused(lambda: resolve_workload("tiny", layout=Layout(fsdp=2), device="cpu"),
            "a layout of 2 devices", "--device cpu")
    refused(lambda: resolve_workload("tiny", layout=Layout(fsdp=2), device="meta"),
            "--device meta")
    assert resolve_workload("tiny", layout=Layout(fsdp=2), device="fake").layout == Layout(
        fsdp=2)


def test_context_is_a_decode_steps_only() -> None:
    refused(lambda: resolve_workload("tiny", context=8), "the train step has none")
    refused(lambda: resolve_workload("tiny", step="forward", context=8),
            "the forward step has none")
    refused(lambda: resolve_workload("tiny", step="prefill", context=8), "a prefill step")
    refused(lambda: resolve_workload("tiny", step="decode"), "needs --context N")
    decode = resolve_workload("tiny", step="decode", seq=64, context=100, batch=3)
    # a decode step runs one token per sequence: seq 1, 3 × 1 = 3 tokens
    assert (decode.seq, decode.context, decode.tokens) == (1, 100, 3)
    prefill = resolve_workload("tiny", step="prefill", seq=64, batch=3)
    assert (prefill.seq, prefill.context, prefill.tokens) == (64, None, 192)  # 3 × 64
    refused(lambda: resolve_workload("tiny", step="decode", context=0), "--context must be")
    assert resolve_workload("tiny", step="decode", context=1 << 24).context == 1 << 24


def test_decode_within_learned_positions() -> None:
    # gpt2 learns 1,024 positions: a context of 1,023 and the token decoded fill them
    assert resolve_workload("gpt2", step="decode", context=1023).context == 1023
    refused(lambda: resolve_workload("gpt2", step="decode", context=1024),
            "--context 1,024 and the token decoded need 1,025 positions",
            "gpt2 has 1,024", "use --context 1,023 or less")


def test_inference_refusals() -> None:
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    refused(lambda: resolve_workload(factory, step="prefill"), "is a factory")
    masked = ModelSource("c.json", "config", "transformers", "bert", head="masked-lm")
    refused(lambda: resolve_workload(masked, step="decode", context=4), "masked-lm model")
    refused(lambda: resolve_workload("tiny", step="prefill", layout=Layout(fsdp=2)),
            "--step prefill is traced on one device", "FSDP ZeRO-3 × 2")
    refused(lambda: resolve_workload("tiny", step="decode", context=4, checkpoint=True),
            "--step decode has no backward")
    refused(lambda: resolve_workload("tiny", step="prefill", lora=Lora(8, 8)),
            "--step prefill trains nothing")


def test_a_causal_lm_config_has_a_cache_path() -> None:
    # a transformers model with no head named is a causal LM; prefill reaches its checks
    plain = ModelSource("c.json", "config", "transformers", "m")
    assert resolve_workload(plain, step="prefill", seq=8).seq == 8
    causal = ModelSource("c.json", "config", "transformers", "m", head="causal-lm")
    assert resolve_workload(causal, step="prefill", seq=8).seq == 8


def test_offload_refusals() -> None:
    refused(lambda: resolve_workload("tiny", step="forward", offload=("activations",)),
            "a forward step saves nothing")
    refused(lambda: resolve_workload("tiny", layout=Layout(pp=2, microbatches=2),
                                     offload=("activations",)), "drop --pp or --offload")
    refused(lambda: resolve_workload("tiny", offload=("params",), lora=Lora(8, 8, nf4=True)),
            "--offload params copies", "--qlora")
    refused(lambda: resolve_workload("tiny", offload=("activations",),
                                     lora=Lora(8, 8, nf4=True)), "--offload activations copies")
    refused(lambda: resolve_workload("tiny", offload=("activations",), device="meta"),
            "meta tensor")
    refused(lambda: resolve_workload("tiny", offload=("params",), device="meta"),
            "--offload params runs FSDP2")
    fine = resolve_workload("tiny", offload=("params", "activations"), lora=Lora(8, 8))
    assert fine.offload == ("params", "activations") and fine.device == "fake"
    # activations on a step with a backward, no layout: allowed, lora plain too
    assert resolve_workload("tiny", step="forward-backward",
                            offload=("activations",)).offload == ("activations",)


def test_float8_and_checkpoint_and_positions() -> None:
    refused(lambda: resolve_workload("tiny", precision="fp8-rowwise", layout=Layout(tp=2)),
            "--precision fp8-rowwise is traced on one device")
    assert resolve_workload("tiny", precision="fp8-rowwise").precision.float8 == "rowwise"
    refused(lambda: resolve_workload("tiny", precision="fp8-rowwise", lora=Lora(8, 8)),
            "--lora trains adapters beside frozen weights")
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    refused(lambda: resolve_workload(factory, checkpoint=True), "'f.py:make' is not one")
    assert resolve_workload("gpt2", seq=1024).seq == 1024  # all 1,024 learned positions
    refused(lambda: resolve_workload("gpt2", seq=1025),
            "--seq 1025 is longer than gpt2's context of 1024", "use --seq 1024 or less")


def test_lora_under_a_layout_is_checked() -> None:
    refused(lambda: resolve_workload("tiny", lora=Lora(8, 8), layout=Layout(tp=2)),
            "--lora is traced on one device")
    assert resolve_workload("tiny", lora=Lora(8, 8), layout=Layout(fsdp=2)).lora == Lora(8, 8)


def test_layout_checks_reach_the_model() -> None:
    # tiny has 4 heads: --tp 3 does not divide them
    refused(lambda: resolve_workload("tiny", layout=Layout(tp=3)), "--tp 3 does not divide")
    # --cp 2 cuts each sequence into 2 × 2 chunks: 6 tokens do not divide by 4
    refused(lambda: resolve_workload("tiny", layout=Layout(cp=2), seq=6), "--cp 2 splits")
    # tiny has no routed experts
    refused(lambda: resolve_workload("tiny", layout=Layout(ep=2)), "'tiny' has none")
    # tiny-moe with experts 33 wide: --tp 2 divides the heads, --etp 2 not the 33
    moe = resolve_source("tiny-moe")
    assert moe.config is not None and moe.config.moe is not None
    odd = replace(moe, config=replace(moe.config, moe=replace(moe.config.moe, d_expert=33)))
    refused(lambda: resolve_workload(odd, layout=Layout(ep=2, tp=2, etp=2)),
            "--etp 2 does not divide tiny-moe's expert width 33")
    assert resolve_workload(odd, layout=Layout(ep=2, tp=2)).layout.etp == 1  # etp 1: whole
    both = resolve_workload("tiny-moe", layout=Layout(ep=2, tp=2, etp=2))
    assert both.layout.ep == 2 and both.layout.etp == 2


def test_expert_and_tensor_parallel_together_need_a_reference_model() -> None:
    hf = ModelSource("c.json", "config", "transformers", "mixtral", hf_config={
        "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2})
    refused(lambda: resolve_workload(hf, layout=Layout(ep=2, tp=2)),
            "--ep 2 beside --tp 2", "'c.json' is not one")
    assert resolve_workload(hf, layout=Layout(ep=2)).layout.ep == 2  # no --tp: allowed
    assert resolve_workload(hf, layout=Layout(tp=2)).layout.tp == 2  # no --ep: allowed


def test_expert_width_is_checked_for_a_model_with_experts_only() -> None:
    # a layout made by hand with --etp beside --tp and no --ep, on a factory (no config, no
    # experts): there is no expert width to divide, and nothing is refused
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    assert resolve_workload(factory, layout=Layout(tp=2, etp=2)).layout.etp == 2


def test_a_pipeline_needs_a_reference_model_and_a_training_step() -> None:
    pp = Layout(pp=2, microbatches=2)
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    refused(lambda: resolve_workload(factory, layout=pp, batch=2), "--pp cuts a reference model")
    refused(lambda: resolve_workload("tiny", layout=pp, batch=2, step="forward-backward"),
            "a pipeline is traced as a whole training step")
    assert resolve_workload("tiny", layout=pp, batch=2).layout.pp == 2


@pytest.mark.parametrize("precision", ["bf16-master", "bf16-fp32-states"])
def test_zero1_refuses_fp32_copies_beside_the_parameters(precision: str) -> None:
    refused(lambda: resolve_workload("tiny", precision=precision,
                                     layout=Layout(fsdp=2, zero=1)), f"{precision} keeps fp32")
    # ZeRO-2 shards them: allowed
    assert resolve_workload("tiny", precision=precision,
                            layout=Layout(fsdp=2, zero=2)).precision.name == precision
    assert resolve_workload("tiny", precision="bf16",
                            layout=Layout(fsdp=2, zero=1)).layout.zero == 1


def test_routing_is_checked_against_the_models_experts() -> None:
    skew = Routing(kind="skew", skew=0.5)
    refused(lambda: resolve_workload("tiny", routing=skew), "'tiny' has no routed experts")
    # tiny-moe: top-2 of 6; skew 2 gives expert 0 (1 + 2) · 2 / 6 = 100%: allowed
    ok = resolve_workload("tiny-moe", routing=Routing(kind="skew", skew=2.0), batch=2, seq=8)
    assert ok.routing.skew == 2.0
    # skew 2.5: (1 + 2.5) · 2 / 6 = 117% > 100%: refused, with the 16 tokens' check
    refused(lambda: resolve_workload("tiny-moe", routing=Routing(kind="skew", skew=2.5)),
            "skew=2.5")
    # a histogram of the 2 · 8 = 16 tokens × top-2 = 32 slots over 6 experts
    given = Routing(kind="histogram", histogram=(7, 5, 5, 5, 5, 5), source="h.json")
    assert resolve_workload("tiny-moe", routing=given, batch=2, seq=8).routing is given
    refused(lambda: resolve_workload("tiny-moe", routing=given, batch=2, seq=4),
            "sums to 32 token-slots; 8 tokens")  # 2 · 4 = 8 tokens: 16 slots


# ---- the target and the optimizer kernel --------------------------------------------------

def test_the_target_is_the_ones_named_on_fake_tensors_and_the_devices_own_on_real_ones() -> None:
    assert resolve_workload("tiny", target=H100).target is H100
    assert resolve_workload("tiny").target is CPU  # none named: this machine's CPU
    assert resolve_workload("tiny", device="cpu", target=H100).target is CPU
    cuda = resolve_workload("tiny", device="cuda", target=H100).target
    assert cuda == Target("cuda", "cuda", native=True)
    refused(lambda: resolve_workload("tiny", device="cpu", target=H100.forcing("math")),
            "--attention math", "--device cpu")
    refused(lambda: resolve_workload("tiny", device="cuda", target=H100.forcing("flash")),
            "--device cuda")
    # forcing a kernel on fake tensors is allowed, and auto on a real device too
    assert resolve_workload("tiny", target=H100.forcing("math")).target.attention == "math"
    assert resolve_workload("tiny", device="cpu", target=H100.forcing("auto")).target is CPU


def test_the_optimizer_kernel_is_the_targets_for_torchs_own_optimizers() -> None:
    # auto: foreach on a GPU, the loop on a CPU; lion is always a loop
    assert resolve_workload("tiny", target=H100).optimizer_kernel == "foreach"
    assert resolve_workload("tiny").optimizer_kernel == "for-loop"
    assert resolve_workload("tiny", target=H100, optimizer="lion").optimizer_kernel == "for-loop"
    assert resolve_workload("tiny", target=H100,
                            optimizer_kernel=" Fused ").optimizer_kernel == "fused"
    assert resolve_workload("tiny", optimizer_kernel="foreach").optimizer_kernel == "foreach"
    assert resolve_workload("tiny", target=H100, optimizer="rmsprop",
                            optimizer_kernel="for-loop").optimizer_kernel == "for-loop"
    # the fused kernel runs on the CPU and on ROCm too
    assert resolve_workload("tiny", optimizer_kernel="fused").optimizer_kernel == "fused"
    mi300 = Target("mi300x", "rocm")
    assert resolve_workload("tiny", target=mi300, optimizer_kernel="fused").target is mi300


def test_optimizer_kernel_refusals() -> None:
    with pytest.raises(UnknownNameError, match="unknown optimizer kernel 'vector'"):
        resolve_workload("tiny", optimizer_kernel="vector")
    refused(lambda: resolve_workload("tiny", optimizer="lion", optimizer_kernel="foreach"),
            "lion is written here as a per-parameter loop")
    refused(lambda: resolve_workload("tiny", optimizer="rmsprop", optimizer_kernel="fused"),
            "no fused kernel for rmsprop", "fused: sgd, momentum, adam, adamw")
    tpu = Target("tpu-v5p", "xla")
    refused(lambda: resolve_workload("tiny", target=tpu, optimizer_kernel="fused"),
            "not on tpu-v5p")
    for name in ("sgd", "momentum", "adam", "adamw"):
        assert resolve_workload("tiny", optimizer=name, target=H100,
                                optimizer_kernel="fused").optimizer_kernel == "fused"
    for name in ("sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"):
        assert resolve_workload("tiny", optimizer=name, target=H100).optimizer_kernel == "foreach"


# ---- the resolved workload ----------------------------------------------------------------

def test_a_workload_reports_tokens_experts_routing_model_and_autocast() -> None:
    w = resolve_workload("tiny-moe", batch=3, seq=5)
    assert w.tokens == 15  # 3 × 5
    assert w.experts == (6, 2)  # tiny-moe: top-2 of 6 routed experts
    assert w.model == "tiny-moe"
    assert w.autocast is True  # mixed-bf16
    assert resolve_workload("tiny", precision="fp32").autocast is False
    # 15 tokens × 2 = 30 slots over 6 experts: 5 each
    assert w.routing_note == ("routing: balanced (tokens · k / E each): token-slots per expert "
                              "5, 5, 5, 5, 5, 5 (15 tokens × top-2 of 6)")
    assert resolve_workload("tiny").routing_note == ""
    assert resolve_workload("tiny").experts is None


def test_on_device_runs_the_devices_own_program() -> None:
    w = resolve_workload("tiny", target=H100)
    assert w.on_device("fake") is w  # the same device: unchanged
    cpu = w.on_device("cpu")
    assert (cpu.device, cpu.target, cpu.optimizer_kernel) == ("cpu", CPU, "for-loop")
    cuda = w.on_device("cuda")
    assert (cuda.device, cuda.optimizer_kernel) == ("cuda", "foreach")
    assert cuda.target == Target("cuda", "cuda", native=True)
    fused = resolve_workload("tiny", target=H100, optimizer_kernel="fused").on_device("cpu")
    assert fused.optimizer_kernel == "fused"  # asked for: kept
    lion = resolve_workload("tiny", target=H100, optimizer="lion").on_device("cuda")
    assert lion.optimizer_kernel == "for-loop"


def test_the_summary_line_names_what_was_chosen() -> None:
    w = resolve_workload("tiny", batch=2, seq=16)
    assert repr(w) == ("Workload(tiny: train, batch 2 × seq 16, mixed-bf16, adamw (for-loop), "
                       "on fake)")
    rich = resolve_workload("tiny", batch=2, seq=16, checkpoint=True, lora=Lora(8, 8),
                            offload=("params", "activations"), layout=Layout(fsdp=2))
    assert repr(rich) == ("Workload(tiny: train, batch 2 × seq 16, mixed-bf16, adamw (for-loop),"
                          " checkpointed, LoRA r=8 on the model's default targets, "
                          "params, activations offloaded, on fake, one rank of FSDP ZeRO-3 × 2)")
    decode = resolve_workload("tiny", step="decode", context=4096)
    assert repr(decode) == "Workload(tiny: decode, batch 1 × seq 1, context 4,096, bf16, on meta)"
