"""One case per element-wise, ``_foreach_``, reduction and scatter rule.

The expected per-element costs are written out here, not read from the table they check, so
a changed cost fails its op's case.  Element-wise ops run on x (3, 5, 7) = 105 elements with a
second operand broadcast from (5, 7); a cost counted per element of that operand (35) or of
the first one where the output is larger would show.  ``_foreach_`` ops run over two tensors
(3, 5) and (7,): 22 elements.  Reductions reduce x over its middle axis: 105 in, 21 out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.costs.rules_support import aten, direct, meta, record_op, rule

N = 3 * 5 * 7  # 105 output elements
F32 = 4


def x() -> torch.Tensor:
    return meta(3, 5, 7)


def y() -> torch.Tensor:
    return meta(5, 7)  # broadcast against x


def flags() -> torch.Tensor:
    return meta(3, 5, 7, dtype=torch.bool)


def ints() -> torch.Tensor:
    return meta(3, 5, 7, dtype=torch.int32)


Call = Callable[[], Any]


def unary(name: str) -> Call:
    return lambda: getattr(aten, name)(x())


def binary(name: str) -> Call:
    return lambda: getattr(aten, name)(x(), y())


def grad_and(name: str, *rest: Any) -> Call:
    return lambda: getattr(aten, name)(x(), x(), *rest)


#: op → (FLOPs per output element, the call); the cost is the one documented in
#: costs/elementwise.py, restated here
ELEMENTWISE: dict[str, tuple[int, Call]] = {
    "aten.add": (1, binary("add")),
    "aten.sub": (1, binary("sub")),
    "aten.rsub": (1, binary("rsub")),
    "aten.mul": (1, binary("mul")),
    "aten.div": (1, binary("div")),
    "aten.neg": (1, unary("neg")),
    "aten.abs": (1, unary("abs")),
    "aten.reciprocal": (1, unary("reciprocal")),
    "aten.remainder": (1, binary("remainder")),
    "aten.fmod": (1, binary("fmod")),
    "aten.floor": (1, unary("floor")),
    "aten.floor_divide": (1, binary("floor_divide")),
    "aten.ceil": (1, unary("ceil")),
    "aten.round": (1, unary("round")),
    "aten.trunc": (1, unary("trunc")),
    "aten.sign": (1, unary("sign")),
    "aten.sgn": (1, unary("sgn")),
    "aten.relu": (1, unary("relu")),
    "aten.threshold": (1, lambda: aten.threshold(x(), 0.5, 0.0)),
    "aten.threshold_backward": (1, grad_and("threshold_backward", 0.5)),
    "aten.clamp": (1, lambda: aten.clamp(x(), -1.0, 1.0)),
    "aten.clamp_min": (1, lambda: aten.clamp_min(x(), 0.0)),
    "aten.clamp_max": (1, lambda: aten.clamp_max(x(), 1.0)),
    "aten.hardtanh": (1, lambda: aten.hardtanh(x(), -1.0, 1.0)),
    "aten.hardtanh_backward": (1, grad_and("hardtanh_backward", -1.0, 1.0)),
    "aten.maximum": (1, binary("maximum")),
    "aten.minimum": (1, binary("minimum")),
    "aten.eq": (1, binary("eq")),
    "aten.ne": (1, binary("ne")),
    "aten.lt": (1, binary("lt")),
    "aten.le": (1, binary("le")),
    "aten.gt": (1, binary("gt")),
    "aten.ge": (1, binary("ge")),
    "aten.logical_and": (1, lambda: aten.logical_and(flags(), flags())),
    "aten.logical_or": (1, lambda: aten.logical_or(flags(), flags())),
    "aten.logical_not": (1, lambda: aten.logical_not(flags())),
    "aten.bitwise_and": (1, lambda: aten.bitwise_and(ints(), ints())),
    "aten.bitwise_or": (1, lambda: aten.bitwise_or(ints(), ints())),
    "aten.bitwise_not": (1, lambda: aten.bitwise_not(ints())),
    "aten.bitwise_xor": (1, lambda: aten.bitwise_xor(ints(), ints())),
    "aten.__and__": (1, lambda: aten.__and__(flags(), flags())),
    "aten.__or__": (1, lambda: aten.__or__(flags(), flags())),
    "aten.__xor__": (1, lambda: aten.__xor__(ints(), ints())),
    # torchao's NF4 unpacks its two 4-bit codes per byte with >> and &
    "aten.__rshift__": (1, lambda: aten.__rshift__(ints(), 4)),
    "aten.__lshift__": (1, lambda: aten.__lshift__(ints(), 4)),
    "aten.bitwise_right_shift": (1, lambda: aten.bitwise_right_shift(ints(), ints())),
    "aten.bitwise_left_shift": (1, lambda: aten.bitwise_left_shift(ints(), ints())),
    "aten.where": (1, lambda: aten.where(flags(), x(), y())),
    "aten.masked_fill": (1, lambda: aten.masked_fill(x(), flags(), 0.0)),
    "aten.tril": (1, unary("tril")),
    "aten.triu": (1, unary("triu")),
    "aten.isnan": (1, unary("isnan")),
    "aten.isinf": (1, unary("isinf")),
    "aten.nan_to_num": (1, unary("nan_to_num")),
    "aten.pow": (1, binary("pow")),
    "aten.square": (1, unary("square")),
    "aten.exp": (1, unary("exp")),
    "aten.exp2": (1, unary("exp2")),
    "aten.expm1": (1, unary("expm1")),
    "aten.log": (1, unary("log")),
    "aten.log2": (1, unary("log2")),
    "aten.log10": (1, unary("log10")),
    "aten.log1p": (1, unary("log1p")),
    "aten.sqrt": (1, unary("sqrt")),
    "aten.rsqrt": (1, unary("rsqrt")),
    "aten.sin": (1, unary("sin")),
    "aten.cos": (1, unary("cos")),
    "aten.tanh": (1, unary("tanh")),
    "aten.erf": (1, unary("erf")),
    "aten.erfinv": (1, unary("erfinv")),
    "aten.bernoulli": (1, unary("bernoulli")),
    "aten.leaky_relu": (2, lambda: aten.leaky_relu(x(), 0.01)),
    "aten.leaky_relu_backward": (2, grad_and("leaky_relu_backward", 0.01, False)),
    "aten.sigmoid": (3, unary("sigmoid")),
    "aten.sigmoid_backward": (3, grad_and("sigmoid_backward")),
    "aten.log_sigmoid_forward": (4, unary("log_sigmoid_forward")),
    "aten.tanh_backward": (3, grad_and("tanh_backward")),
    "aten.silu": (4, unary("silu")),
    "aten.silu_backward": (8, grad_and("silu_backward")),
    "aten.gelu": (20, unary("gelu")),
    "aten.gelu_backward": (30, grad_and("gelu_backward")),
    "aten.elu": (4, unary("elu")),
    "aten.elu_backward": (4, lambda: aten.elu_backward(x(), 1.0, 1, 1, False, x())),
    "aten.softplus": (3, lambda: aten.softplus(x(), 1, 20)),
    "aten.softplus_backward": (4, grad_and("softplus_backward", 1, 20)),
    "aten.lerp": (3, lambda: aten.lerp(x(), y(), 0.5)),
    "aten.addcmul": (3, lambda: aten.addcmul(x(), y(), y())),
    "aten.addcdiv": (3, lambda: aten.addcdiv(x(), y(), y())),
    "aten.native_dropout": (2, lambda: aten.native_dropout(x(), 0.1, True)),
    "aten.native_dropout_backward": (2, lambda: aten.native_dropout_backward(x(), flags(),
                                                                            1.1)),
}


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


WIDTH = {"fp32": 4, "bool": 1, "int32": 4}


@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_rule_elementwise_table(op: str) -> None:
    per_element, step = ELEMENTWISE[op]
    # composites: the dispatcher shows the pow / bitwise op they become (a DTensor's local
    # computation shows the operators unexpanded)
    if op in ("aten.square", "aten.__and__", "aten.__or__", "aten.__xor__"):
        assert direct(op, (x(),), out=x()) == 1 * N
        return
    record = record_op(op, step)
    assert record.flops == per_element * N, op  # per element of the (3, 5, 7) output
    assert record.category == "elementwise"
    # io: each input storage read once, each output written once (e.g. add: x 105 + y 35
    # fp32 values read = 560 bytes, 105 written = 420)
    read = sum(_numel(s) * WIDTH[d] for s, d in zip(record.input_shapes, record.input_dtypes,
                                                     strict=True))
    written = sum(_numel(s) * WIDTH[d] for s, d in zip(record.output_shapes,
                                                       record.output_dtypes, strict=True))
    assert (record.bytes_read, record.bytes_written) == (read, written)
    assert record.bytes_written >= N  # at least a byte per output element


def test_elementwise_counts_the_broadcast_output_and_alpha() -> None:
    # y (5, 7) + x (3, 5, 7): one add per *output* element, 105, not per first operand (35)
    record = record_op("aten.add", lambda: aten.add(y(), x()))
    assert record.flops == 105
    assert (record.bytes_read, record.bytes_written) == (F32 * (35 + 105), F32 * 105)
    # a + 2·b: one multiply more per element, for add, sub and rsub (not for mul)
    for op in ("add", "sub", "rsub"):
        record = record_op(f"aten.{op}", lambda op=op: getattr(aten, op)(x(), y(), alpha=2))
        assert record.flops == 2 * N == 210, op
        assert record_op(f"aten.{op}", lambda op=op: getattr(aten, op)(
            x(), y(), alpha=1)).flops == N
    # a scalar operand: add(x, 2.0) still one add per element, only x read
    record = record_op("aten.add", lambda: aten.add(x(), 2.0))
    assert (record.flops, record.bytes_read) == (N, F32 * N)
    # in place: add_ falls back to add's rule; self is read and written once
    target = x()
    record = record_op("aten.add", lambda: target.add_(y()))
    assert record.op == "aten.add_.Tensor"
    assert (record.flops, record.bytes_read, record.bytes_written) == (
        N, F32 * (105 + 35), F32 * 105)
    # an output the rule cannot see: counted over the first argument
    assert direct("aten.relu", (x(),), out=None) == N
    assert direct("aten.gelu", (x(),), out=(x(), None)) == 20 * N


def _max_or_min(name: str) -> None:
    # max.other(a, b) is element-wise (one compare per output element). It is a composite
    # that reaches the dispatcher as aten.maximum, so the rule's binary branch is called
    # directly with the two tensors
    assert direct(f"aten.{name}", (y(), x()), out=x()) == N == 105  # not 35
    assert rule(f"aten.{name}").category == "reduction"
    # max(x, dim=1): 21 groups of 5, 4 compares each = 84; the whole tensor: 104
    record = record_op(f"aten.{name}", lambda: getattr(aten, name).dim(x(), 1))
    assert record.flops == 105 - 21 == 84
    assert record.bytes_read == F32 * 105
    record = record_op(f"aten.{name}", lambda: getattr(aten, name)(x()))
    assert record.flops == 105 - 1 == 104
    # a dim given as an int second argument is not a tensor: still a reduction
    assert direct(f"aten.{name}", (x(), 1), out=(meta(3, 7), meta(3, 7))) == 84


def test_rule_aten_max() -> None:
    _max_or_min("max")


def test_rule_aten_min() -> None:
    _max_or_min("min")


# ---- _foreach_ ops over [(3, 5), (7,)]: 22 elements

def tlist() -> list[torch.Tensor]:
    return [meta(3, 5), meta(7)]


def fe(name: str, *rest: Any) -> Call:
    return lambda: getattr(aten, f"_foreach_{name}")(tlist(), *rest)


def fe2(name: str, *rest: Any) -> Call:
    return lambda: getattr(aten, f"_foreach_{name}")(tlist(), tlist(), *rest)


FOREACH: dict[str, tuple[int, Call]] = {
    "aten._foreach_add": (1, fe2("add")),
    "aten._foreach_sub": (1, fe2("sub")),
    "aten._foreach_mul": (1, fe2("mul")),
    "aten._foreach_div": (1, fe2("div")),
    "aten._foreach_neg": (1, fe("neg")),
    "aten._foreach_abs": (1, fe("abs")),
    "aten._foreach_reciprocal": (1, fe("reciprocal")),
    "aten._foreach_sign": (1, fe("sign")),
    "aten._foreach_maximum": (1, fe2("maximum")),
    "aten._foreach_minimum": (1, fe2("minimum")),
    "aten._foreach_clamp_min": (1, fe("clamp_min", 0.0)),
    "aten._foreach_clamp_max": (1, fe("clamp_max", 1.0)),
    "aten._foreach_exp": (1, fe("exp")),
    "aten._foreach_log": (1, fe("log")),
    "aten._foreach_sqrt": (1, fe("sqrt")),
    "aten._foreach_rsqrt": (1, fe("rsqrt")),
    "aten._foreach_pow": (1, fe("pow", 2.0)),
    "aten._foreach_sigmoid": (3, fe("sigmoid")),
    "aten._foreach_tanh": (1, fe("tanh")),
    "aten._foreach_lerp": (3, fe2("lerp", 0.5)),
    "aten._foreach_addcmul": (3, lambda: aten._foreach_addcmul(tlist(), tlist(), tlist(), 0.5)),
    "aten._foreach_addcdiv": (3, lambda: aten._foreach_addcdiv(tlist(), tlist(), tlist(), 0.5)),
}


@pytest.mark.parametrize("op", sorted(FOREACH))
def test_rule_foreach_table(op: str) -> None:
    per_element, step = FOREACH[op]
    record = record_op(op, step)
    assert record.flops == per_element * 22, op  # (3·5 + 7) elements
    assert record.category == "elementwise"
    tensors_in = len(record.input_shapes)  # 2 per list
    assert record.bytes_read == F32 * 22 * tensors_in // 2
    assert record.bytes_written == F32 * 22


def test_foreach_add_counts_alpha() -> None:
    # p + α·g (SGD's foreach step): the multiply counts, as it does for aten.add
    record = record_op("aten._foreach_add", lambda: aten._foreach_add(tlist(), tlist(),
                                                                     alpha=-0.1))
    assert record.flops == 2 * 22 == 44
    record = record_op("aten._foreach_sub", lambda: aten._foreach_sub(tlist(), tlist(),
                                                                     alpha=1))
    assert record.flops == 22


def test_rule_aten__foreach_norm() -> None:
    # a square and an add per element, a root per tensor: 2·15 + 2·7 = 44
    record = record_op("aten._foreach_norm", lambda: aten._foreach_norm(tlist(), 2))
    assert record.flops == 2 * 15 + 2 * 7 == 44
    assert record.bytes_read == F32 * 22
    assert record.bytes_written == F32 * 2  # one norm per tensor
    assert record.category == "reduction"


def test_rule_aten__foreach_max() -> None:
    record = record_op("aten._foreach_max", lambda: aten._foreach_max(tlist()))
    assert record.flops == (15 - 1) + (7 - 1) == 20
    assert record.bytes_read == F32 * 22
    assert record.category == "reduction"


# ---- reductions of x (3, 5, 7) over axis 1: n_in 105, n_out 21

REDUCTIONS: dict[str, tuple[int, Call]] = {
    "aten.sum": (105 - 21, lambda: aten.sum(x(), [1])),                 # 4 adds per group
    "aten.nansum": (105 - 21, lambda: aten.nansum(x(), [1])),
    "aten.prod": (105 - 21, lambda: aten.prod(x(), 1)),
    "aten.cumsum": (105, lambda: aten.cumsum(x(), 1)),                  # one per element
    "aten.cumprod": (105, lambda: aten.cumprod(x(), 1)),
    "aten.mean": (105, lambda: aten.mean(x(), [1])),                    # 84 adds + 21 divides
    "aten.amax": (105 - 21, lambda: aten.amax(x(), [1])),
    "aten.amin": (105 - 21, lambda: aten.amin(x(), [1])),
    "aten.argmax": (105 - 21, lambda: aten.argmax(x(), 1)),
    "aten.argmin": (105 - 21, lambda: aten.argmin(x(), 1)),
    "aten.any": (105 - 21, lambda: aten.any(flags(), 1)),
    "aten.all": (105 - 21, lambda: aten.all(flags(), 1)),
    "aten.aminmax": (2 * 105 - 2 * 21, lambda: aten.aminmax(x(), dim=1)),  # both: 168
    "aten.var": (4 * 105, lambda: aten.var(x(), [1])),                  # mean, centre, square,
    "aten.std": (4 * 105 + 21, lambda: aten.std(x(), [1])),             # sum; + a root each
    "aten.var_mean": (4 * 105, lambda: aten.var_mean(x(), [1])),
    "aten.std_mean": (4 * 105 + 21, lambda: aten.std_mean(x(), [1])),
    "aten.linalg_vector_norm": (2 * 105, lambda: aten.linalg_vector_norm(x(), 2, [1])),
    "aten.norm": (2 * 105, lambda: aten.norm(x(), 2, [1])),
    "aten.logsumexp": (4 * 105, lambda: aten.logsumexp(x(), [1])),
}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
def test_rule_reduction_table(op: str) -> None:
    flops, step = REDUCTIONS[op]
    record = record_op(op, step)
    assert record.flops == flops, op
    assert record.category == "reduction"
    width = 1 if op in ("aten.any", "aten.all") else F32
    assert record.bytes_read == width * 105


def test_reductions_of_the_whole_tensor() -> None:
    # n_out = 1: sum 104 adds; mean 104 adds + 1 divide = 105; std 4·105 + 1 root
    assert record_op("aten.sum", lambda: aten.sum(x())).flops == 104
    assert record_op("aten.mean", lambda: aten.mean(x())).flops == 105
    assert direct("aten.std", (x(),), out=meta()) == 421
    assert direct("aten.sum", (x(),), out=None) == 104  # no output seen: one result


# ---- scatter-adds: one add per source element

def test_rule_aten_scatter_add() -> None:
    # (self (3, 7), dim, index (2, 7), src (2, 7)): 14 adds, not one per element of self (21)
    index = meta(2, 7, dtype=torch.long)
    record = record_op("aten.scatter_add", lambda: aten.scatter_add(meta(3, 7), 0, index,
                                                                    meta(2, 7)))
    assert record.flops == 2 * 7 == 14
    assert record.bytes_read == F32 * 21 + 8 * 14 + F32 * 14 == 252
    assert record.category == "elementwise"


def test_rule_aten_index_add() -> None:
    # (self (5, 7), dim, index (3,), source (3, 7), alpha): 21 adds
    index = meta(3, dtype=torch.long)
    record = record_op("aten.index_add", lambda: aten.index_add(meta(5, 7), 0, index,
                                                                meta(3, 7)))
    assert record.flops == 3 * 7 == 21
    assert record.bytes_read == F32 * 35 + 8 * 3 + F32 * 21 == 248
    assert record.category == "elementwise"
    # alpha given by position after the source: still the source's 21 adds
    assert direct("aten.index_add", (meta(5, 7), 0, index, meta(3, 7), 2)) == 21


def test_rule_aten_index_put_with_accumulate() -> None:
    # no such op in torch 2.13 (index_put_ with accumulate=True is a copy here); the rule
    # counts one add per value, the last argument
    values = meta(3, 7)
    assert direct("aten.index_put_with_accumulate", (meta(5, 7), [None], values)) == 21
    assert direct("aten.index_put_with_accumulate", (meta(5, 7), [None], 1.0)) == 0
    assert rule("aten.index_put_with_accumulate").category == "elementwise"


def test_rule_aten_log_sigmoid() -> None:
    # the composite log_sigmoid reaches a fake or DTensor dispatch unexpanded (ring
    # attention's log-sum-exp merge); on real tensors it is log_sigmoid_forward (the table).
    # 4 per output element: exp, 1 + ·, log, negate: 4 · 105 = 420
    assert direct("aten.log_sigmoid", (x(),), out=x()) == 4 * N == 420
    assert rule("aten.log_sigmoid").category == "elementwise"
