"""A context-parallel rank (torch's context_parallel ring attention on the fake group),
traced, against napkin's closed form (napkin/context.py): bytes the ring sends, attention
FLOPs, saved activations, each to the byte for tiny.

The memory ledger counts the token ids as an input, not a saved activation; the closed form
lists them with the embeddings: the two differ by exactly 8·n_r (n_r = b·s/cp)."""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.hardware.target import target_of
from tensorledger.ledger.memory import memory_of
from tensorledger.napkin.context import context_parallel_rank
from tensorledger.napkin.transformer import get_preset, parameter_count
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.run import StepTrace

B, S = 2, 128
TINY = get_preset("tiny")


def _trace(cp: int, precision: str = "fp32", chip: str | None = None, **layout: Any
           ) -> StepTrace:
    work = resolve_workload("tiny", batch=B, seq=S, precision=precision, device="fake",
                            layout=resolve_layout(cp=cp, **layout),
                            target=None if chip is None else target_of(get_hardware(chip)))
    return trace_workload(work)


def _ring_sent(run: StepTrace) -> int:
    return sum(r.collective.bytes_sent for r in run.trace.records
               if r.collective is not None and r.module.endswith(".attention"))


def _attention_forward(run: StepTrace) -> int:
    return sum(r.flops_causal_halved for r in run.trace.records
               if r.phase == "forward" and "scaled_dot_product" in r.op)


def test_tiny_cp2_fp32_by_hand() -> None:
    run = _trace(2)
    # s_r = 64 tokens a rank; kv heads 2, head 16, fp32: K = 2·2·2·64·16·4 = 32,768
    # per layer: forward all-gather 1·K, backward all-gather 1·K + 2 permutes of G = K (fp32)
    # = 4·32,768 = 131,072; 2 layers: 262,144
    assert _ring_sent(run) == 262_144
    ring = context_parallel_rank(TINY, B, S, 2, dtype_bytes=4)
    assert ring.sent_bytes == 262_144
    # forward attention, causal-halved: c = 32, 2 blocks of 8·b·h·c²·d = 8·2·4·1024·16
    # = 1,048,576 each, 2 layers: 4,194,304 = half the whole sequence's 2·b·h·s²·d = 8,388,608
    assert _attention_forward(run) == ring.attention_flops == 4_194_304
    saved = memory_of(run).saved_activation_bytes
    assert saved == ring.saved_activation_bytes - 8 * B * S // 2
    assert any("ring attention" in note for note in run.assumptions)


@pytest.mark.parametrize(("cp", "precision"), [(4, "fp32"), (2, "mixed-bf16")])
def test_closed_form_equals_traced_rank(cp: int, precision: str) -> None:
    run = _trace(cp, precision)
    bf16 = precision == "mixed-bf16"
    ring = context_parallel_rank(TINY, B, S, cp, dtype_bytes=2 if bf16 else 4, autocast=bf16)
    assert _ring_sent(run) == ring.sent_bytes
    assert _attention_forward(run) == ring.attention_flops
    assert memory_of(run).saved_activation_bytes == (ring.saved_activation_bytes
                                                     - 8 * ring.tokens_per_rank)


def test_h100_target_runs_its_kernel_in_the_ring() -> None:
    # fp32 on an H100 is memory-efficient attention, which repeats the 2 kv heads to the 4
    # query heads before the ring sees them: twice the bytes of the CPU's kernel
    run = _trace(2, chip="h100-sxm")
    kernels = {r.op for r in run.trace.records if "scaled_dot_product" in r.op}
    assert kernels == {"aten._scaled_dot_product_efficient_attention.default",
                       "aten._scaled_dot_product_efficient_attention_backward.default"}
    ring = context_parallel_rank(TINY, B, S, 2, dtype_bytes=4, repeated_kv=True)
    assert _ring_sent(run) == ring.sent_bytes == 2 * 262_144


def test_cp_with_fsdp_shards_over_both() -> None:
    run = _trace(2, fsdp=2)
    # FSDP over fsdp·cp = 4 ranks: every parameter's rows divide by 4, so a rank holds
    # exactly a quarter of them; the ring is over the 2 cp ranks alone, as without FSDP
    assert run.params * 4 == parameter_count(TINY).total_params
    assert _ring_sent(run) == 262_144


def test_cp_must_split_the_sequence_in_2cp_chunks() -> None:
    with pytest.raises(InputError, match="does not divide by 8"):
        resolve_workload("tiny", batch=B, seq=100, layout=resolve_layout(cp=4))


def test_llama_3_405b_shapes_cp16_tp8_at_128k() -> None:
    # Llama 3 405B's long-context layout without its pipeline (with it: test_context_parallel_
    # pipeline.py and the roofline run of the issue):
    # 126 layers traced took 406 s here, ring bytes 32,765,902,848 equal to the closed form,
    # saved 615,485,705,172 B against 615,485,702,148; two layers here, every one the same.
    # One kv head a TP rank, s_r = 8,192: K = 2·8,192·128·2 = 4,194,304, G = 2·K; a layer
    # sends 15·K forward, 15·K + 16·G backward: 15·K + 15·K + 32·K = 62·K
    import dataclasses

    from tensorledger.workload.source import ModelSource

    config = dataclasses.replace(get_preset("llama-3-405b"), n_layers=2, name="405b-2l")
    source = ModelSource(label=config.name, kind="preset", builder="reference",
                         name=config.name, config=config)
    work = resolve_workload(source, batch=1, seq=131_072, precision="mixed-bf16",
                            device="fake", layout=resolve_layout(cp=16, tp=8),
                            target=target_of(get_hardware("h100-sxm")))
    run = trace_workload(work)
    ring = context_parallel_rank(config, 1, 131_072, 16, dtype_bytes=2, tp=8, autocast=True)
    assert ring.sent_bytes == 2 * 62 * 4_194_304
    sent = sum(r.collective.bytes_sent for r in run.trace.records
               if r.collective is not None and r.module.endswith(".attention")
               and r.collective.kind in ("all-gather", "all-to-all"))
    assert sent == ring.sent_bytes
    assert _attention_forward(run) == ring.attention_flops


def test_llama_3_70b_shapes_cp8_tp8_at_128k() -> None:
    # llama-3-70b's layer (d 8192, 64 heads, 8 kv heads, head 128, d_ff 28,672) at 131,072
    # tokens, CP 8 × TP 8, mixed bf16, on an H100 (flash: grouped heads kept): two layers,
    # since every layer is the same (80 traced: 20,132,659,200 B sent, equal; saved
    # 353,996,703,620 B against the closed form's 353,996,701,700, 5e-9 off)
    import dataclasses

    from tensorledger.workload.source import ModelSource

    config = dataclasses.replace(get_preset("llama-3-70b"), n_layers=2, name="llama-3-70b-2l")
    source = ModelSource(label=config.name, kind="preset", builder="reference",
                         name=config.name, config=config)
    work = resolve_workload(source, batch=1, seq=131_072, precision="mixed-bf16",
                            device="fake", layout=resolve_layout(cp=8, tp=8),
                            target=target_of(get_hardware("h100-sxm")))
    run = trace_workload(work)
    ring = context_parallel_rank(config, 1, 131_072, 8, dtype_bytes=2, tp=8, autocast=True)
    # one kv head a TP rank, s_r = 16,384: K = 2·1·16,384·128·2 = 8,388,608, G = 2·K;
    # a layer sends 7·K forward, 7·K + 8·G backward = 251,658,240
    assert ring.sent_bytes == 2 * 251_658_240
    sent = sum(r.collective.bytes_sent for r in run.trace.records
               if r.collective is not None and r.module.endswith(".attention")
               and r.collective.kind in ("all-gather", "all-to-all"))
    assert sent == ring.sent_bytes
    assert _attention_forward(run) == ring.attention_flops
    saved = memory_of(run).saved_activation_bytes
    assert saved == pytest.approx(ring.saved_activation_bytes - 8 * ring.tokens_per_rank,
                                  rel=0.02)


def test_ring_permutation_priced_by_the_bytes_it_sends() -> None:
    # the gradient pass is an all-to-all that sends its whole buffer to the next rank: at 2
    # ranks the even-split convention would count half of it (S·(N−1)/N); the record counts
    # all of it, and roofline prices that many bytes (as an even all-to-all of 2·S)
    from tensorledger.roofline.collectives import CollectiveKind, collective_time
    from tensorledger.roofline.model import predict_op

    run = _trace(2)
    h100 = get_hardware("h100-sxm")
    permutes = [r for r in run.trace.records if r.op.endswith("all_to_all_single.default")]
    assert len(permutes) == 4
    for record in permutes:
        info = record.collective
        assert info is not None
        # G = 2·b·kv_heads·s_r·d·4 = 2·2·2·64·16·4 = 32,768 bytes, all of it sent
        assert info.size_bytes == info.bytes_sent == info.bytes_received == 32_768
        priced = predict_op(record.index, record, h100).time_s
        even = collective_time(CollectiveKind.ALL_TO_ALL, 2 * 32_768, 2, h100,
                               ranks_per_node=2).time_s
        assert priced == even > collective_time(CollectiveKind.ALL_TO_ALL, 32_768, 2, h100,
                                                ranks_per_node=2).time_s


def test_all_to_all_rotation_sends_the_same_bytes_in_more_calls() -> None:
    # torch's other rotation: a permutation of K per ring step instead of one all-gather, so
    # cp − 1 = 3 all-to-alls forward and backward per layer instead of one all-gather each;
    # each sends K, which is what the all-gather sends to each of the 3 others: equal bytes
    run = _trace(4, cp_rotate="alltoall")
    ring = context_parallel_rank(TINY, B, S, 4, dtype_bytes=4)
    assert _ring_sent(run) == ring.sent_bytes
    forward = [r.op for r in run.trace.records if r.collective is not None
               and r.phase == "forward" and r.module.endswith(".attention")]
    assert forward == ["_c10d_functional.all_to_all_single.default"] * (2 * 3)
    assert "alltoall" in run.work.layout.describe()
