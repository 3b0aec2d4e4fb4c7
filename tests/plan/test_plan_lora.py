"""``plan --lora`` / ``--qlora`` (issue 40): a LoRA fine-tune's state, activations, FLOPs and
data-parallel traffic in closed form, each figure by hand, and a second code path: the planner's
single-device rank against a traced LoRA step of the same shape (peft's adapters on fake
tensors), within the tolerances tests/plan/test_verify.py holds a full fine-tune to."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import (
    DEFAULT_TARGETS,
    adapter_counts,
    lora_activation_memory,
    lora_shape,
    nf4_bytes,
)
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import TransformerConfig, get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory, step_time
from tests.conftest import assert_one_line_error

TINY = get_preset("tiny")  # d 64, q 64, kv 32, d_ff 128 (SwiGLU), 2 blocks, vocabulary 128
#: tiny's shape with every matrix a whole number of NF4 blocks (64 · 256 = 16,384 elements):
#: d 128, q = kv = 128 (4 heads of 32), d_ff 384, vocabulary 256
NF4_READY = dataclasses.replace(TINY, name="nf4-ready", d_model=128, n_heads=4, n_kv_heads=4,
                                head_dim=32,
                                d_ff=384, vocab_size=256)


def _setup(precision: str, count: int = 1, config: TransformerConfig = TINY, rank: int = 8,
           targets: tuple[str, ...] = ("query", "value"), nf4: bool = False) -> PlanSetup:
    return PlanSetup(config, get_hardware("h100"), count, 16, 8, resolve_precision(precision),
                     resolve_optimizer("adamw"), 80e9,
                     lora=lora_shape(config, rank, targets, nf4))


def test_adapter_counts_of_tiny_by_hand() -> None:
    counts = adapter_counts(TINY, lora_shape(TINY, 8, ("value", "query")))
    # query 8·(64 + 64) = 1,024 and value 8·(64 + 32) = 768 a block; 2 blocks
    assert counts.layer_params == 1_792
    assert counts.params == 3_584
    # a block's matrices: q 4,096 + k 2,048 + v 2,048 + out 4,096 + gate, up, down 3·8,192
    assert counts.layer_matrices == 36_864
    assert counts.layer_quantized == 0  # no NF4 without --qlora
    assert lora_shape(TINY, 8).targets == DEFAULT_TARGETS == ("query", "value")


def test_default_targets_are_the_workloads() -> None:
    from tensorledger.workload.lora import REFERENCE_TARGETS

    assert DEFAULT_TARGETS == REFERENCE_TARGETS


def test_state_under_ddp_and_fsdp_by_hand() -> None:
    setup = _setup("bf16-master", count=2)
    # tiny's base: 2 blocks of 36,864 + 128 norm values, embedding and head 128·64 = 8,192
    # each, the final norm 64: 90,432 parameters, frozen in bf16: 180,864 bytes.  The
    # adapters, 3,584 in fp32: 4 (param) + 4 (grad) + 2·4 (AdamW) = 16 bytes each, 57,344
    ddp = rank_memory(setup, LayoutChoice(dp=2, tp=1, pp=1))
    assert ddp.frozen_bytes == 180_864
    assert ddp.adapter_params == 3_584
    assert ddp.states_bytes == 180_864 + 57_344 == 238_208
    assert ddp.buffers_bytes == 4 * 3_584  # DDP's bucket: the adapters' fp32 gradients alone
    assert ddp.gathered_bytes == 0
    # FSDP over 2: the base's half 90,432 and the adapters' half 16·1,792 = 28,672
    fsdp = rank_memory(setup, LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2))
    assert fsdp.states_bytes == 90_432 + 28_672 == 119_104
    assert fsdp.buffers_bytes == 0
    # two blocks gathered: 2 · (36,992 · 2 bytes of base + 1,792 · 4 of adapters)
    assert fsdp.gathered_bytes == 2 * (73_984 + 7_168) == 162_304
    # a full fine-tune of the same layout holds far more: 16 bytes for each of the 90,432
    full = dataclasses.replace(setup, lora=None)
    assert rank_memory(full, LayoutChoice(dp=2, tp=1, pp=1)).states_bytes == 16 * 90_432


def test_lora_step_flops_against_a_full_step_by_hand() -> None:
    setup = _setup("bf16-master")
    full = dataclasses.replace(setup, lora=None)
    choice = LayoutChoice(dp=1, tp=1, pp=1, accumulation=8)
    lora_time = step_time(setup, choice, rank_memory(setup, choice))
    full_time = step_time(full, choice, rank_memory(full, choice))
    tokens = 8 * 16
    # the weight gradients of the 81,920 matmul parameters (2 blocks · 36,864 + the head's
    # 8,192) are not taken: 2·81,920 a token fewer; the 3,584 adapters add 6·3,584
    assert full_time.model_flops - lora_time.model_flops == tokens * (2 * 81_920 - 6 * 3_584)
    assert lora_time.dequantize_flops == 0
    # recomputing a checkpointed forward adds the base's 2·N and the adapters' 2·n a token
    checkpointed = dataclasses.replace(choice, checkpoint="full")
    assert (step_time(setup, checkpointed, rank_memory(setup, checkpointed)).recompute_flops
            - step_time(full, checkpointed, rank_memory(full, checkpointed)).recompute_flops
            == tokens * 2 * 3_584)


def test_data_parallel_traffic_is_the_adapters_gradients() -> None:
    setup = _setup("bf16-master", count=2)
    choice = LayoutChoice(dp=2, tp=1, pp=1)
    lora = step_time(setup, choice, rank_memory(setup, choice))
    full = dataclasses.replace(setup, lora=None)
    whole = step_time(full, choice, rank_memory(full, choice))
    # an all-reduce of 3,584 · 4 = 14,336 bytes against the full step's 90,432 · 2 = 180,864
    hardware = get_hardware("h100")
    from tensorledger.roofline.collectives import CollectiveKind, collective_time

    assert lora.dp_comm_s == collective_time(CollectiveKind.ALL_REDUCE, 14_336, 2, hardware,
                                             ranks_per_node=2).time_s
    assert whole.dp_comm_s == collective_time(CollectiveKind.ALL_REDUCE, 180_864, 2, hardware,
                                              ranks_per_node=2).time_s


def test_qlora_base_is_nf4_by_hand() -> None:
    counts = adapter_counts(NF4_READY, lora_shape(NF4_READY, 8, (), nf4=True), 2)
    # q, k, v, out of 128·128 = 16,384 elements: one NF4 block row each, 8,192 bytes of codes
    # + 256 int8 scales + (256 factors + 1 mean + 16 code values) · 2 bytes = 8,994;
    # gate, up, down of 128·384 = 49,152: 24,576 + 768 + (3 + 17) · 2 = 25,384
    assert nf4_bytes(16_384, 2) == 8_994
    assert counts.layer_quantized == 4 * 16_384 + 3 * 49_152 == 212_992
    assert counts.layer_quantized_bytes == 4 * 8_994 + 3 * 25_384 == 112_128
    # about half a byte a parameter: 4.2 bits, against bf16's 16
    assert 0.5 < counts.layer_quantized_bytes / counts.layer_quantized < 0.53
    setup = _setup("bf16", config=NF4_READY, nf4=True)
    choice = LayoutChoice(dp=1, tp=1, pp=1)
    memory = rank_memory(setup, choice)
    # blocks 2 · (112,128 + 2·128 norm values · 2 bytes); embedding and head 256·128·2 each;
    # the final norm 128·2
    assert memory.frozen_bytes == 2 * (112_128 + 512) + 2 * 65_536 + 256 == 356_608
    # adapters 2 blocks · 8·(128 + 128) · 2 targets = 8,192, 16 bytes each
    assert memory.states_bytes == 356_608 + 16 * 8_192
    # torchao dequantises each NF4 weight in forward and again in backward: (2 + 2/64) FLOPs
    # an element each time
    time = step_time(setup, choice, memory)
    assert time.dequantize_flops == 2 * 2 * 212_992 * (2 + 2 / 64) == 1_730_560
    assert time.hfu > time.mfu


def test_activations_of_a_frozen_base_by_hand() -> None:
    # fp32, 2 sequences of 16 (n = 32): a block past the first keeps its two RMSNorms' input
    # and rsqrt, 2 · (4·32·64 + 4·32) = 16,640, the attention norm's output the adapters read,
    # 32·64·4 = 8,192; q, k, v, out, log-sum-exp and RoPE as a full step, 27,136; SwiGLU's
    # gate, SiLU and up outputs 3·32·128·4 = 49,152 (no down input: down is frozen); the two
    # B inputs 2·32·8·4 = 2,048
    closed = lora_activation_memory(TINY, lora_shape(TINY, 8), 2, 16, 4)
    assert closed.activations.per_layer_bytes == 16_640 + 8_192 + 27_136 + 49_152 + 2_048
    assert closed.first_layer_less_bytes == 4 * 32 * 64 + 4 * 32  # the first attention norm


@pytest.mark.parametrize("precision", ["fp32", "bf16-master", "mixed-bf16"])
def test_single_device_rank_agrees_with_a_traced_lora_step(precision: str) -> None:
    from tensorledger.ledger.memory import memory_of
    from tensorledger.workload import resolve_workload, trace_workload
    from tensorledger.workload.spec import resolve_lora

    setup = _setup(precision)
    choice = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=2, accumulation=4)
    memory = rank_memory(setup, choice)
    work = resolve_workload("tiny", batch=2, seq=16, precision=precision, optimizer="adamw",
                            device="fake", lora=resolve_lora(8), step="train")
    ledger = memory_of(trace_workload(work))
    # the same adapters peft made: 3,584 parameters, fp32, whose state account's closed form
    # (napkin.adapters.adapter_recipe) counts as the planner does, with AdamW's 8 step counters
    assert memory.adapter_params == 3_584
    assert ledger.adapter_closed_form is not None
    frozen, adapters = ledger.adapter_closed_form
    assert memory.frozen_bytes == frozen
    assert memory.states_bytes == frozen + adapters.total_bytes - 8 * 4
    # the state: AdamW's step counters (4 bytes a tensor) aside, as a full fine-tune's
    traced_state = ledger.params_bytes + ledger.grads_bytes + ledger.optimizer_state_bytes
    assert memory.states_bytes == pytest.approx(traced_state, rel=0.03)
    # the saved activations (the ledger counts the token ids as an input: 8 bytes a token),
    # to the byte; in bf16 the loss's total weight is a 2-byte scalar the form counts as 4
    closed = memory.activations_bytes + memory.logits_bytes
    traced = ledger.saved_activation_bytes + 8 * 32
    assert closed - traced == (2 if precision == "bf16-master" else 0)
    # the peak adds temporaries the closed form does not list
    assert memory.total_bytes == pytest.approx(ledger.peak_bytes, rel=0.15)


@pytest.mark.parametrize("targets", ["up,down", "output", "gate", "key",
                                     "query,key,value,output,gate,up,down,head"])
@pytest.mark.parametrize("precision", ["fp32", "mixed-bf16"])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_activations_agree_with_traced_steps_for_any_targets(targets: str, precision: str,
                                                             checkpointed: bool) -> None:
    # a second code path: peft's adapters traced on fake tensors, every linear of tiny in
    # turn; the first block's savings differ with the targets (with the MLP alone adapted its
    # attention saves nothing), the head's adapter adds to the final norm's
    from tensorledger.ledger.memory import memory_of
    from tensorledger.workload import resolve_workload, trace_workload
    from tensorledger.workload.spec import resolve_lora

    work = resolve_workload("tiny", batch=2, seq=16, precision=precision, optimizer="adamw",
                            device="fake", lora=resolve_lora(8, targets), step="train",
                            checkpoint=checkpointed)
    traced = memory_of(trace_workload(work)).saved_activation_bytes
    autocast = precision == "mixed-bf16"
    closed = lora_activation_memory(TINY, lora_shape(TINY, 8, tuple(targets.split(","))), 2,
                                    16, 2 if autocast else 4, checkpointed, autocast=autocast)
    assert closed.activations.total_bytes - 8 * 32 == traced  # the token ids aside


def test_plan_cli_says_the_step_is_a_lora_fine_tune(cli) -> None:  # type: ignore[no-untyped-def]
    argv = ["plan", "-m", "llama-3-8b", "-g", "64seq", "-n", "8", "--max-pp", "1", "--top",
            "2", "--lora", "16", "--lora-targets", "value,query", "--qlora"]
    shown = cli(*argv)
    assert shown.code == 0, shown.stderr
    assert "QLoRA fine-tune, r=16 on query, value, base in 4-bit NF4" in " ".join(
        shown.stdout.split())
    data = cli(*argv, "--json").json()
    assert data["lora"] == {"rank": 16, "targets": ["query", "value"], "nf4": True}
    assert data["step"] == "QLoRA fine-tune, r=16 on query, value, base in 4-bit NF4"
    full = cli(*argv[:-5], "--json").json()
    assert full["lora"] is None and full["step"] == "full fine-tune"
    # the QLoRA rank holds its whole NF4 base (about 5.8 GB) and less than half the state of
    # the fastest full fine-tune's, whose 16 bytes a parameter are sharded over 8 ranks
    assert data["ranked"][0]["memory"]["states_bytes"] < full["ranked"][0]["memory"][
        "states_bytes"] / 2
    help_text = " ".join(cli("plan", "--help").stdout.split())
    assert "--lora" in help_text and "--lora-targets" in help_text and "--qlora" in help_text


def test_plan_lora_of_a_profiled_source_is_refused_before_any_trace(  # type: ignore[no-untyped-def]
        cli, tmp_path) -> None:
    from tests.workload.hf_configs import CHECKED

    config = tmp_path / "config.json"
    config.write_text(json.dumps(CHECKED["llama"]))
    assert_one_line_error(cli("plan", "-m", str(config), "-g", "8seq", "-n", "2", "-s", "16",
                              "--lora", "8"), "priced on a preset's closed form")


@pytest.mark.parametrize(("precision", "choice"), [
    ("fp32", LayoutChoice(dp=2, tp=1, pp=1)),
    ("mixed-bf16", LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2)),
    ("fp32", LayoutChoice(dp=2, tp=1, pp=1, zero=2, shard=2, micro_batch=2,
                          checkpoint="full")),
    ("mixed-bf16", LayoutChoice(dp=4, tp=1, pp=1, zero=3, shard=2)),
])
def test_traced_lora_ranks_hold_and_send_what_the_closed_form_says(
        precision: str, choice: LayoutChoice) -> None:
    # plan --verify with --lora: peft's adapters on a rank laid out by FSDP2 or DDP over a fake
    # group, against the planner's rank, as tests/plan/test_verify.py holds a full fine-tune
    from tensorledger.ledger.plan import verify_choice

    setup = dataclasses.replace(_setup(precision, count=choice.count), global_batch_seqs=8)
    v = verify_choice(setup, choice, "tiny")
    # the collectives: the frozen base and the adapters gathered, the adapters' gradients
    # alone reduced, to the byte
    assert v.traced_sent_bytes == v.closed_sent_bytes
    assert v.traced_activation_bytes == v.closed_activation_bytes
    assert v.closed_state_bytes == pytest.approx(v.traced_state_bytes, rel=0.03)
    assert v.closed_total_bytes == pytest.approx(v.traced_peak_bytes, rel=0.15)


def test_layouts_a_lora_trace_cannot_lay_out_say_why() -> None:
    from tensorledger.ledger.plan import traceable_layout

    lora = lora_shape(TINY, 8)
    assert "not TP" in str(traceable_layout(LayoutChoice(dp=1, tp=2, pp=1), lora))
    assert "ZeRO-1" in str(traceable_layout(LayoutChoice(dp=2, tp=1, pp=1, zero=1, shard=2),
                                            lora))
    qlora = lora_shape(NF4_READY, 8, nf4=True)
    assert "one device" in str(traceable_layout(LayoutChoice(dp=2, tp=1, pp=1), qlora))
    assert not isinstance(traceable_layout(LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2),
                                           lora), str)


def test_nf4_dequantisation_flops_against_a_traced_qlora_step() -> None:
    # a third-party count: torchao's own dequantisation, traced through the cost registry on
    # gpt2 (every block matrix a whole number of NF4 blocks: 768·768 = 36 · 16,384)
    pytest.importorskip("torchao")
    from tensorledger.trace.aggregate import class_total
    from tensorledger.workload import resolve_workload, trace_workload
    from tensorledger.workload.qlora import DEQUANTIZE_CLASS
    from tensorledger.workload.spec import resolve_lora

    gpt2 = get_preset("gpt2")
    counts = adapter_counts(gpt2, lora_shape(gpt2, 8, nf4=True), 2)
    # 12 blocks of q, k, v, out (768·768 each) and up, down (768·3,072 each)
    assert 12 * counts.layer_quantized == 12 * (4 * 589_824 + 2 * 2_359_296) == 84_934_656
    work = resolve_workload("gpt2", batch=1, seq=8, precision="bf16", optimizer="adamw",
                            device="fake", lora=resolve_lora(8, None, True), step="train")
    total = class_total(trace_workload(work).trace, DEQUANTIZE_CLASS)
    assert total is not None
    per_use = 84_934_656 * (2 + 2 / 64)
    assert total.forward_flops == per_use
    # backward dequantises again but for the first block's q, k, v, whose input needs no
    # gradient (the planner counts them: an overcount of 3 of 72 weights' one use)
    assert total.backward_flops == per_use - 3 * 589_824 * (2 + 2 / 64)


@pytest.mark.parametrize("qlora", [(), ("--qlora",)])
def test_accumulate_prices_a_lora_split_as_plan_prices_its_layout(  # type: ignore[no-untyped-def]
        cli, qlora: tuple[str, ...]) -> None:
    """accumulate --lora: each micro-batch × accumulation split of 8 sequences on 2 ranks at
    ZeRO-3 costs what plan gives the same layout fixed (--fsdp 2 --microbatches A), a second
    entry into the planner's closed forms; the adapters by hand: r = 4 on query (64 → 64) and
    value (64 → 2 kv heads × 16 = 32) of tiny's 2 blocks, 4·(64 + 64) + 4·(64 + 32) = 896 a
    block, 1,792 in all."""
    common = ("--model", "tiny", "--hardware", "h100", "--count", "2", "--global-batch",
              "8seq", "--seq", "32", "--lora", "4", *qlora, "--json")
    accumulated = cli("accumulate", *common, "--zero", "3")
    assert accumulated.code == 0, accumulated.stderr
    document = accumulated.json()
    assert document["step"].startswith("QLoRA" if qlora else "LoRA")
    full = cli("accumulate", *common[:-3 - len(qlora)], "--json", "--zero", "3").json()
    assert len(document["options"]) == 3  # 4 sequences a rank: 1 × 4, 2 × 2, 4 × 1
    for option, whole in zip(document["options"], full["options"], strict=True):
        planned = cli("plan", *common, "--fsdp", "2", "--tp", "1", "--pp", "1",
                      "--microbatches", str(option["accumulation"]), "--checkpoint", "none")
        assert planned.code == 0, planned.stderr
        best = planned.json()["ranked"][0]
        assert best["choice"]["micro_batch"] == option["micro_batch"]
        assert best["memory"]["adapter_params"] == 2 * (4 * (64 + 64) + 4 * (64 + 32))
        assert best["memory"]["total_bytes"] == pytest.approx(option["memory_bytes"])
        assert best["time"]["step_s"] == pytest.approx(option["step_s"])
        assert option["memory_bytes"] < whole["memory_bytes"]  # frozen: no base state
