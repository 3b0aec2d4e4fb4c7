"""Element-wise ops and reductions: the one table of per-element FLOP costs.

One FLOP is one add, multiply, compare or select.  Special functions (exp, log, sqrt, tanh,
erf) count 1 each, as one instruction of the special-function unit; composite activations
count their arithmetic from those.  GELU counts 20 per element: the lecture's figure for the
tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) evaluated the way kernels do
(polynomial, tanh, and the products around it), the exact erf form costs about the same.
Element-wise FLOPs are counted per element of the (broadcast) output; ``add``/``sub`` with an
``alpha`` other than 1 count one multiply more.

>>> ELEMENTWISE_FLOPS["relu"], ELEMENTWISE_FLOPS["gelu"], ELEMENTWISE_FLOPS["add"]
(1, 20, 1)
>>> reduction_flops("sum", n_in=12, n_out=3)  # 3 groups of 4: 3 adds each
9
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from tensorledger.costs.registry import numel, register

__all__ = ["ELEMENTWISE_FLOPS", "FOREACH_OPS", "REDUCTION_FLOPS", "reduction_flops"]

#: FLOPs per output element, with the reason where it is more than one operation.
ELEMENTWISE_FLOPS: dict[str, int] = {
    # one arithmetic operation, compare or select
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "reciprocal": 1,
    "remainder": 1, "fmod": 1, "floor": 1, "ceil": 1, "round": 1, "trunc": 1, "sign": 1,
    "sgn": 1, "relu": 1, "threshold": 1, "threshold_backward": 1, "clamp": 1, "clamp_min": 1,
    "clamp_max": 1, "hardtanh": 1, "hardtanh_backward": 1, "maximum": 1, "minimum": 1,
    "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1, "logical_and": 1, "logical_or": 1,
    "logical_not": 1, "bitwise_and": 1, "bitwise_or": 1, "bitwise_not": 1, "bitwise_xor": 1,
    "__and__": 1, "__or__": 1, "__xor__": 1,  # the operators' spellings (DTensor's vocab mask)
    "bitwise_left_shift": 1, "bitwise_right_shift": 1, "__lshift__": 1, "__rshift__": 1,
    # (shifts: torchao's NF4 unpacks two 4-bit codes from a byte with >> and &)
    "where": 1, "masked_fill": 1, "tril": 1, "triu": 1, "isnan": 1, "isinf": 1,
    "nan_to_num": 1, "pow": 1, "square": 1, "floor_divide": 1,
    # special functions: one special-function-unit instruction each
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1, "sqrt": 1,
    "rsqrt": 1, "sin": 1, "cos": 1, "tanh": 1, "erf": 1, "erfinv": 1,
    # composites
    "leaky_relu": 2,             # compare, multiply
    "leaky_relu_backward": 2,
    "sigmoid": 3,                # exp(-x), 1 + ·, reciprocal
    "sigmoid_backward": 3,       # g · y · (1 - y)
    "log_sigmoid": 4,            # -softplus(-x): exp, 1 + ·, log, negate (ring attention's
    "log_sigmoid_forward": 4,    # log-sum-exp merge; the CPU kernel is the _forward one)
    "tanh_backward": 3,          # g · (1 - y²)
    "silu": 4,                   # x · sigmoid(x)
    "silu_backward": 8,          # g · σ · (1 + x · (1 - σ)), with σ recomputed (3)
    "gelu": 20,                  # the lecture's figure for the tanh approximation
    "gelu_backward": 30,         # the derivative re-evaluates tanh: about 1.5 × the forward
    "elu": 4, "elu_backward": 4, "softplus": 3, "softplus_backward": 4,
    "lerp": 3,                   # a + w · (b - a)
    "addcmul": 3,                # a + v · b · c
    "addcdiv": 3,                # a + v · b / c
    "native_dropout": 2,         # draw-and-compare, scale
    "native_dropout_backward": 2,  # mask · g · scale
    "bernoulli": 1,
}

#: Ops that torch also ships as ``_foreach_<op>`` / ``_foreach_<op>_`` over lists of tensors.
FOREACH_OPS = ("add", "sub", "mul", "div", "neg", "abs", "reciprocal", "sign", "maximum",
               "minimum", "clamp_min", "clamp_max", "exp", "log", "sqrt", "rsqrt", "pow",
               "sigmoid", "tanh", "lerp", "addcmul", "addcdiv")

#: Reductions as FLOPs = per_input · n_in + per_output · n_out (n−1 adds per group of n).
REDUCTION_FLOPS: dict[str, tuple[int, int]] = {
    "sum": (1, -1), "nansum": (1, -1), "prod": (1, -1), "cumsum": (1, 0), "cumprod": (1, 0),
    "mean": (1, 0),              # n - 1 adds and one divide per group
    "amax": (1, -1), "amin": (1, -1), "max": (1, -1), "min": (1, -1), "argmax": (1, -1),
    "argmin": (1, -1), "any": (1, -1), "all": (1, -1), "aminmax": (2, -2),
    "var": (4, 0), "std": (4, 1), "var_mean": (4, 0), "std_mean": (4, 1),  # mean, center,
    #                                                          square, sum (+ sqrt for std)
    "linalg_vector_norm": (2, 0), "norm": (2, 0),  # square and add; a root per group
    "logsumexp": (4, 0),         # max, subtract and exp, sum, log per group
}


def reduction_flops(name: str, n_in: int, n_out: int) -> int:
    """FLOPs of a reduction of ``n_in`` elements into ``n_out`` results."""
    per_input, per_output = REDUCTION_FLOPS[name]
    return max(0, per_input * n_in + per_output * n_out)


def _first_tensor(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return value[0] if value else None
    return value


#: ``add(a, b, alpha=s)`` computes a + s·b: one multiply more when ``alpha`` is not 1.
_SCALED_BY_ALPHA = frozenset({"add", "sub", "rsub"})


# Each family's count is one module-level function of (name, args, kwargs, out), bound to an
# op's name with functools.partial: the code runs at call time, where mutation testing sees it.

def _elementwise_flops(name: str, cost: int, args: Sequence[Any], kwargs: dict[str, Any],
                       out: Any) -> int:
    result = _first_tensor(out)
    target = result if result is not None and hasattr(result, "shape") else args[0]
    scaled = name in _SCALED_BY_ALPHA and kwargs.get("alpha", 1) != 1
    return (cost + scaled) * numel(target)


def _foreach_flops(name: str, cost: int, args: Sequence[Any], kwargs: dict[str, Any],
                   out: Any) -> int:
    # the first argument is the list the op runs over (and, in place, writes); α·b costs its
    # multiply as in ``add`` (SGD's foreach step is ``_foreach_add_(p, g, alpha=-lr)``)
    scaled = name in _SCALED_BY_ALPHA and kwargs.get("alpha", 1) != 1
    return (cost + scaled) * sum(numel(t) for t in args[0])


#: Reductions that also come in a binary, elementwise form: ``max(a, b)`` (``max.other``).
_ALSO_BINARY = frozenset({"max", "min"})


def _reduction_op_flops(name: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any
                        ) -> int:
    result = _first_tensor(out)
    if name in _ALSO_BINARY and len(args) > 1 and hasattr(args[1], "shape"):
        return numel(result)  # one compare per output element, as maximum(a, b)
    return reduction_flops(name, numel(args[0]), numel(result) if result is not None else 1)


for _name, _cost in ELEMENTWISE_FLOPS.items():
    register(f"aten.{_name}", category="elementwise")(partial(_elementwise_flops, _name, _cost))
for _name in FOREACH_OPS:
    register(f"aten._foreach_{_name}", category="elementwise")(
        partial(_foreach_flops, _name, ELEMENTWISE_FLOPS[_name]))
for _name in REDUCTION_FLOPS:
    register(f"aten.{_name}", category="reduction")(partial(_reduction_op_flops, _name))


def _foreach_norm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return sum(reduction_flops("norm", numel(t), 1) for t in args[0])


register("aten._foreach_norm", category="reduction")(_foreach_norm)


def _foreach_max(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return sum(reduction_flops("max", numel(t), 1) for t in args[0])


register("aten._foreach_max", category="reduction")(_foreach_max)
