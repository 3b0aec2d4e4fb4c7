"""The probed kernel curves' names and how a profile's curves are searched, pinned by hand."""

from __future__ import annotations

from tensorledger.hardware.kernels import (
    DIRECTIONS,
    attention_call_curve,
    attention_curve,
    cast_curve,
    linear_curve,
    matvec_curve,
    matvec_rows,
    nearest_attention_curve,
    norm_curve,
    op_curve,
    stream_curve,
    strided_curve,
)


def test_curve_names() -> None:
    assert DIRECTIONS == ("forward", "backward")
    assert attention_curve("fp32", "forward", 128) == "attention-head.fp32.forward.d128"
    assert attention_call_curve("bf16", "backward", 8) == "attention-call.bf16.backward.d8"
    assert op_curve("fp32", "aten.gelu") == "op.fp32.aten.gelu"
    assert (stream_curve("fp32"), linear_curve("bf16"), strided_curve("fp16")) == (
        "bandwidth.fp32", "linear.bf16", "strided.fp16")
    assert norm_curve("fp32", "forward") == "norm.fp32.forward"
    assert cast_curve("bf16", "fp32") == "cast.bf16-fp32"
    assert matvec_curve("bf16", 16) == "matvec.bf16.m16"


def test_the_rows_decode_products_were_probed_at() -> None:
    curves = {"matvec.bf16.m16": (), "matvec.bf16.m2": (), "matvec.bf16.m1": (),
              "matvec.fp32.m4": (),  # another dtype
              "matvec.bf16.mx": (), "matvec.bf16.m": (),  # no number of rows
              "xmatvec.bf16.m8": (), "matvec.bf16.n8": ()}
    assert matvec_rows(curves, "bf16") == (1, 2, 16)  # increasing as numbers, not as text
    assert matvec_rows(curves, "fp16") == ()


def test_the_nearest_attention_curve_in_logs() -> None:
    curves = {"attention-head.bf16.forward.d64": (), "attention-head.bf16.forward.d16": (),
              "attention-head.bf16.forward.d0": (),  # no width: never chosen
              "attention-head.bf16.forward.dx": (), "attention-head.bf16.backward.d32": (),
              "attention-head.fp32.forward.d32": (), "attention-call.bf16.forward.d32": ()}
    # 32 lies as far from 16 as from 64 in logs (a factor of 2 each way): the narrower
    assert nearest_attention_curve(curves, "bf16", "forward", 32) == (
        "attention-head.bf16.forward.d16")
    # 40: 64 / 40 = 1.6 against 40 / 16 = 2.5
    assert nearest_attention_curve(curves, "bf16", "forward", 40) == (
        "attention-head.bf16.forward.d64")
    assert nearest_attention_curve(curves, "bf16", "forward", 1000) == (
        "attention-head.bf16.forward.d64")
    # a width below 1 is read as 1: nearest 16
    assert nearest_attention_curve(curves, "bf16", "forward", 0) == (
        "attention-head.bf16.forward.d16")
    # widths 1 and 3: a width of 0 is read as 1 (the curve of width 1), one of 2 lies nearer
    # 3 (log 1.5 = 0.41 against log 2 = 0.69)
    narrow = {"attention-head.fp32.forward.d3": (), "attention-head.fp32.forward.d1": ()}
    assert nearest_attention_curve(narrow, "fp32", "forward", 0) == (
        "attention-head.fp32.forward.d1")
    assert nearest_attention_curve(narrow, "fp32", "forward", 2) == (
        "attention-head.fp32.forward.d3")
    assert nearest_attention_curve(curves, "bf16", "backward", 64) == (
        "attention-head.bf16.backward.d32")
    assert nearest_attention_curve(curves, "fp16", "forward", 64) is None
    assert nearest_attention_curve({"attention-head.bf16.forward.d0": ()}, "bf16", "forward",
                                   64) is None
