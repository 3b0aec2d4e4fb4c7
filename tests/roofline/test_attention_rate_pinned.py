"""``attention_rate`` pinned by hand where the mutation run (issue 42) found no test: the head
width of the curve read is the digits after the name's last ``.d``, so a profile key that
itself begins with a ``d`` (``attention-head.d8.forward.d16``) still finds its call curve.
Every profile here is synthetic: no clock is read."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tensorledger.hardware import Hardware
from tensorledger.roofline.kernel_rates import attention_rate

SDPA = "aten._scaled_dot_product_flash_attention_for_cpu.default"


def test_a_key_beginning_with_d_reads_its_call_curve_at_the_curves_width() -> None:
    chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
                    dense_flop_per_s={"fp32": 1.0},
                    curves={"attention-head.d8.forward.d16": ((1e4, 1e10),),
                            "attention-call.d8.forward.d16": ((1e4, 1e5),)})
    # batch 2, 2 heads, 32 tokens, width 24 (nearest 16 in logs): 4 heads of 10⁴ FLOPs each
    op = SimpleNamespace(op=SDPA, flops=40_000, input_shapes=((2, 2, 32, 24),))
    # heads: 4 · 10⁴ / 10¹⁰ = 4 µs; a call at 10⁵ a second: 10 µs; 14 µs in all
    assert attention_rate(op, chip, "d8") == pytest.approx(4e4 / 14e-6)  # 2.857e9 FLOP/s
    # without the call curve: the heads' time alone, 4·10⁴ / 4 µs = 10¹⁰ FLOP/s
    head = "attention-head.d8.forward.d16"
    heads_only = dataclasses.replace(chip, curves={head: chip.curves[head]})
    assert attention_rate(op, heads_only, "d8") == pytest.approx(1e10)
