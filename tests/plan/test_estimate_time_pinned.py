"""step_time's terms the step file leaves, each written out from the memory it is given and
the chip's figures: a QLoRA step's weight traffic and dequantisation (the frozen base read
twice, the fp32 adapters as a full fine-tune's, each NF4 weight dequantised at each use: three
with full recomputation), a pipeline's pace and bubble, the ring, the experts' reductions and
all-to-alls, a profile's measured collectives, the tensor-parallel collectives at TP 3, the
ridge point, and the data-parallel seconds of a LoRA step and a remembered collective."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import NF4_DEQUANTIZE_FLOPS_PER_ELEMENT, lora_shape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory, step_time
from tensorledger.plan.experts import expert_choice
from tensorledger.plan.model import search_model
from tensorledger.plan.profile import Split
from tensorledger.plan.timing import collective_s, dp_comm_s, ep_comm_s, ring_layer_s
from tensorledger.roofline.collectives import CollectiveKind
from tests.plan.made_up import made_up_profile, tiny_three_heads_on_tp3

H100 = get_hardware("h100")
PEAK = H100.peak_flop_per_s("bf16")
BANDWIDTH = H100.memory_bandwidth_bytes_per_s
TINY = get_preset("tiny")
#: tiny's shape with every block matrix a whole number of NF4 blocks (64 · 256 elements):
#: d 128, q = kv = 128 (4 heads of 32), d_ff 384
NF4_READY = dataclasses.replace(TINY, name="nf4-ready", d_model=128, n_heads=4, n_kv_heads=4,
                                head_dim=32, d_ff=384, vocab_size=256)


def test_a_qlora_step_reads_its_base_twice_and_dequantises_it_at_every_use() -> None:
    # bf16 (2-byte stored weights) on TP 2 of 2 devices, 8 sequences of 16 in 4 micro-batches
    # of 2, every block recomputed: a weight is used in forward, backward and the recomputed
    # forward (3 uses)
    setup = PlanSetup(NF4_READY, H100, 2, 16, 8, resolve_precision("bf16"),
                      resolve_optimizer("adamw"), 80e9, efficiency=0.5,
                      lora=lora_shape(NF4_READY, 8, ("query", "value"), nf4=True))
    choice = LayoutChoice(dp=1, tp=2, pp=1, micro_batch=2, accumulation=4, checkpoint="full")
    memory = rank_memory(setup, choice)
    time = step_time(setup, choice, memory)
    model = search_model(setup)
    # q, k, v, o of 128 · 128 and gate, up, down of 128 · 384: 4 · 16,384 + 3 · 49,152 =
    # 212,992 NF4 elements a block; 2 blocks split over TP 2: 212,992 on the rank
    assert model.adapters is not None and model.adapters.layer_quantized == 212_992
    quantized = 2 * 212_992 / 2
    # dequantised 3 times a micro-batch, (2 + 2/64) FLOPs an element, 4 micro-batches on each
    # of the 2 ranks
    dequantize = 3 * quantized * (2 + 2 / 64) * 4 * 2
    assert NF4_DEQUANTIZE_FLOPS_PER_ELEMENT == 2 + 2 / 64
    assert time.dequantize_flops == pytest.approx(dequantize, rel=1e-12)
    # a micro-batch's traffic: the frozen bytes twice, each adapter 2 × (4 + 4) bytes (fp32
    # weight and gradient), the dequantised weight written and read (2 × 2 bytes) at 3 uses
    bytes_micro = (2 * memory.frozen_bytes + memory.adapter_params * 2 * (4 + 4)
                   + 3 * 2 * 2 * quantized)
    assert memory.frozen_bytes > 0 and memory.adapter_params > 0
    flops = time.model_flops + time.recompute_flops + dequantize
    flops_micro = flops / (2 * 4)
    assert time.intensity_flop_per_byte == pytest.approx(flops_micro / bytes_micro, rel=1e-12)
    compute = 4 * max(flops_micro / (PEAK * 0.5), bytes_micro / BANDWIDTH)
    assert time.compute_s == pytest.approx(compute, rel=1e-12)
    assert time.hfu == pytest.approx(flops / (time.step_s * 2 * PEAK), rel=1e-12)


def test_a_lora_step_without_recomputation_uses_each_weight_twice() -> None:
    # as above, no checkpointing and one micro-batch of 8: 2 uses, m = 1
    setup = PlanSetup(NF4_READY, H100, 2, 16, 8, resolve_precision("bf16"),
                      resolve_optimizer("adamw"), 80e9, efficiency=0.5,
                      lora=lora_shape(NF4_READY, 8, ("query", "value"), nf4=True))
    choice = LayoutChoice(dp=1, tp=2, pp=1, micro_batch=8, accumulation=1)
    memory = rank_memory(setup, choice)
    time = step_time(setup, choice, memory)
    quantized = 2 * 212_992 / 2
    assert time.dequantize_flops == pytest.approx(2 * quantized * (2 + 2 / 64) * 1 * 2,
                                                  rel=1e-12)
    bytes_micro = (2 * memory.frozen_bytes + memory.adapter_params * 16 + 2 * 2 * 2 * quantized)
    flops_micro = (time.model_flops + time.dequantize_flops) / 2
    assert time.recompute_flops == 0.0
    assert time.intensity_flop_per_byte == pytest.approx(flops_micro / bytes_micro, rel=1e-12)


def test_a_profiles_tensor_parallel_collectives_are_its_measured_ones() -> None:
    # the made-up profile, measured with 4 all-reduces a block carrying 512 bytes a token in
    # all (a rank of two), and saved bytes measured without SP or checkpointing alone
    profile = made_up_profile(block_saved={(False, False): Split(10.0, 40.0)},
                              other_saved={False: Split(6.0)},
                              tp_sent_per_token={(False, False): 512.0},
                              tp_collectives={(False, False): 4.0})
    setup = PlanSetup(profile, H100, 2, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    # TP 2, micro-batches of 2 sequences (32 tokens), 4 of them
    choice = LayoutChoice(dp=1, tp=2, pp=1, micro_batch=2, accumulation=4)
    time = step_time(setup, choice, rank_memory(setup, choice))
    # each all-reduce carries 512 · 32 / 4 = 4,096 bytes; 4 blocks × 4 of them × 4 micro-batches
    one = collective_s(setup, CollectiveKind.ALL_REDUCE, 4096.0, 2, 1)
    assert one > 0
    assert time.tp_comm_s == pytest.approx(4 * 4 * 4 * one, rel=1e-12)


def _tiny(config: object = TINY, count: int = 2, batch: int = 8) -> PlanSetup:
    # fp32, sequences of 16 tokens, half the peak
    return PlanSetup(config, H100, count, 16, batch, resolve_precision("fp32"),  # type: ignore[arg-type]
                     resolve_optimizer("adamw"), 1e12, efficiency=0.5)


def test_a_pipeline_step_is_paced_by_its_slowest_rank_and_its_bubble() -> None:
    # tiny's 2 blocks on PP 2 (1F1B, 4 micro-batches of 2): one block a rank, and the last
    # also runs the head (6 · d · V FLOPs a token); 1F1B idles (p − 1)/m = 1/4 of compute
    setup = _tiny()
    choice = LayoutChoice(dp=1, tp=1, pp=2, micro_batch=2, accumulation=4, schedule="1f1b")
    time = step_time(setup, choice, rank_memory(setup, choice))
    model = search_model(setup)
    head = 6.0 * 64 * 128
    assert model.head_flops_per_token == head
    block = (model.flops_per_token - head) / 2
    # the last rank's work, a block and the head, over the average: (b + h) · 2 / (2b + h)
    imbalance = (block + head) * 2 / (2 * block + head)
    assert time.imbalance == pytest.approx(imbalance, rel=1e-12)
    assert time.bubble_to_compute == 0.25
    assert (time.tp_comm_s, time.dp_comm_s, time.dp_exposed_s) == (0.0, 0.0, 0.0)
    assert time.step_s == pytest.approx(time.compute_s * imbalance * 1.25, rel=1e-12)


def test_a_context_parallel_step_adds_each_layers_ring_per_micro_batch() -> None:
    # CP 2 (8 tokens of each 16 a rank), micro-batches of 2, 4 of them; tiny's 2 blocks
    setup = _tiny()
    choice = LayoutChoice(dp=1, cp=2, tp=1, pp=1, micro_batch=2, accumulation=4)
    time = step_time(setup, choice, rank_memory(setup, choice))
    ring = ring_layer_s(setup, choice)
    assert ring > 0
    assert time.cp_comm_s == pytest.approx(2 * 4 * ring, rel=1e-12)
    assert time.step_s == pytest.approx(time.compute_s + 2 * 4 * ring + time.dp_exposed_s,
                                        rel=1e-12)


def test_an_expert_parallel_step_reduces_the_experts_apart_and_adds_the_all_to_alls() -> None:
    # tiny-moe (6 experts) on DP 4 with EP 2 under ZeRO-3 over 4 ranks: the experts' gradients
    # over dp / ep = 2 ranks, their ZeRO group shard / ep = 2
    moe = get_preset("tiny-moe")
    setup = _tiny(moe, count=4)
    choice = LayoutChoice(dp=4, tp=1, pp=1, zero=3, shard=4, ep=2, micro_batch=2,
                          accumulation=1)
    memory = rank_memory(setup, choice)
    time = step_time(setup, choice, memory)
    assert memory.expert_params > 0
    group = expert_choice(choice)
    assert (group.dp, group.shard, group.tp, group.ep) == (2, 2, 2, 1)
    dense = dp_comm_s(setup, choice, memory, 2,
                      params=memory.stage_params - memory.expert_params)
    # 3 local experts over a group of 2: padded to 4 (2 a rank)
    experts = dp_comm_s(setup, group, memory, 2, params=memory.expert_params // 3 * 4)
    assert time.dp_comm_s == pytest.approx(dense + experts, rel=1e-12)
    alltoall = ep_comm_s(setup, choice, 2)  # 2 blocks
    assert alltoall > 0 and time.ep_comm_s == pytest.approx(alltoall, rel=1e-12)
    exposed = max(0.0, dense + experts - time.compute_s) + (dense + experts) / 2
    assert time.dp_exposed_s == pytest.approx(exposed, rel=1e-12)
    assert time.step_s == pytest.approx(time.compute_s + alltoall + exposed, rel=1e-12)


def test_a_profiles_recomputed_blocks_send_their_measured_collectives() -> None:
    # measured recomputed: 5 all-reduces a block carrying 640 bytes a token (without
    # recomputation 4 and 512, which would price it otherwise)
    profile = made_up_profile(block_saved={(False, False): Split(10.0, 40.0),
                                           (False, True): Split(2.0, 6.0)},
                              other_saved={False: Split(6.0)},
                              tp_sent_per_token={(False, False): 512.0, (False, True): 640.0},
                              tp_collectives={(False, False): 4.0, (False, True): 5.0})
    setup = PlanSetup(profile, H100, 2, 16, 8, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12)
    choice = LayoutChoice(dp=1, tp=2, pp=1, micro_batch=2, accumulation=4, checkpoint="full")
    time = step_time(setup, choice, rank_memory(setup, choice))
    # each all-reduce 640 · 32 / 5 = 4,096 bytes; 4 blocks × 5 × 4 micro-batches
    one = collective_s(setup, CollectiveKind.ALL_REDUCE, 4096.0, 2, 1)
    assert time.tp_comm_s == pytest.approx(4 * 5 * 4 * one, rel=1e-12)


def test_a_step_is_memory_bound_below_the_ridge_point_alone() -> None:
    # tiny in fp32 on one device, one micro-batch: its intensity grows with the micro-batch;
    # the ridge at half the peak is 0.5 · peak / bandwidth (about 148 FLOP/B on the H100)
    ridge = PEAK * 0.5 / BANDWIDTH

    def time_of(micro: int, setup: PlanSetup | None = None):  # type: ignore[no-untyped-def]
        setup = setup or _tiny(count=1, batch=micro)
        choice = LayoutChoice(dp=1, tp=1, pp=1, micro_batch=micro)
        return step_time(setup, choice, rank_memory(setup, choice))

    small, large = time_of(16), time_of(32)
    assert small.intensity_flop_per_byte < ridge < large.intensity_flop_per_byte < 4 * ridge
    assert (small.memory_bound, large.memory_bound) == (True, False)
    # at the ridge exactly (the efficiency that puts it there) it is not below it
    setup = _tiny(count=1, batch=16)
    intensity = small.intensity_flop_per_byte
    at_ridge = dataclasses.replace(setup, efficiency=intensity * BANDWIDTH / PEAK)
    assert at_ridge.efficiency is not None
    assert PEAK * at_ridge.efficiency / BANDWIDTH == intensity
    assert time_of(16, at_ridge).memory_bound is False


def test_a_lora_steps_data_parallel_seconds_gather_the_frozen_base_and_the_adapters() -> None:
    # tiny in fp32, LoRA r=8 on the query and the value, ZeRO-3 over DP 2, 3 micro-batches:
    # the fp32 adapters' gradients scattered each micro-batch, the frozen bytes and the
    # adapters gathered twice a micro-batch
    setup = PlanSetup(TINY, H100, 2, 16, 6, resolve_precision("fp32"),
                      resolve_optimizer("adamw"), 1e12, lora=lora_shape(TINY, 8))
    choice = LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2, accumulation=3)
    memory = rank_memory(setup, choice)
    grads = 4.0 * memory.adapter_params
    weights = memory.frozen_bytes + grads
    scatter = collective_s(setup, CollectiveKind.REDUCE_SCATTER, grads, 2, 1)
    gather = collective_s(setup, CollectiveKind.ALL_GATHER, weights, 2, 1)
    assert dp_comm_s(setup, choice, memory, 2) == pytest.approx(3 * (scatter + 2 * gather),
                                                                rel=1e-12)


def test_a_priced_collective_is_remembered_and_read_back() -> None:
    setup = _tiny(count=4)
    kind = CollectiveKind.ALL_GATHER
    first = collective_s(setup, kind, 1e6, 4, 1)
    # 4 ranks 1 apart, all 4 on a node of 8
    assert search_model(setup).collectives[(kind, 1e6, 4, 4)] == first > 0
    search_model(setup).collectives[(kind, 1e6, 4, 4)] = 123.0  # read back, not priced again
    assert collective_s(setup, kind, 1e6, 4, 1) == 123.0


def test_three_heads_on_tp_3_all_reduce_per_layer() -> None:
    # tiny with 3 heads (d_ff 192, V 129) in fp32 on TP 3, 8 micro-batches of 1: 2 blocks × 4
    # all-reduces of 16 tokens × 64 × 4 bytes, a micro-batch
    setup, choice = tiny_three_heads_on_tp3()
    time = step_time(setup, choice, rank_memory(setup, choice))
    one = collective_s(setup, CollectiveKind.ALL_REDUCE, 16.0 * 64 * 4, 3, 1)
    assert time.tp_comm_s == pytest.approx(2 * 4 * 8 * one, rel=1e-12)
