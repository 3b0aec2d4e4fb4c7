"""step_time's terms the step file leaves: a QLoRA step's weight traffic and dequantisation
(the frozen base read twice, the fp32 adapters as a full fine-tune's, each NF4 weight
dequantised at each use: three with full recomputation), and the pace and bubble of a
pipeline, each written out from the memory it is given and the chip's figures."""

from __future__ import annotations

import dataclasses

import pytest

from tensorledger.hardware import get_hardware
from tensorledger.napkin.adapters import NF4_DEQUANTIZE_FLOPS_PER_ELEMENT, lora_shape
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan.estimate import LayoutChoice, PlanSetup, rank_memory, step_time
from tensorledger.plan.model import search_model

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
