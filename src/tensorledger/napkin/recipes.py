"""Bytes per parameter: a precision recipe × an optimizer, broken into its parts.

A training step holds, per parameter: the parameter itself, its gradient, optionally an fp32
master copy (when the working copy is 16-bit), and the optimizer's state values.  Activations
are not per parameter and are left out here (see ``memory``).

>>> b = bytes_per_param("bf16-fp32-states", "adamw")
>>> (b.params_bytes_per_param, b.grads_bytes_per_param, b.master_bytes_per_param,
...  b.optimizer_bytes_per_param, b.total_bytes_per_param)
(2.0, 2.0, 0.0, 8.0, 12.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tensorledger.errors import InputError, UnknownNameError

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "QUANTIZATION_BLOCK",
    "BytesPerParam",
    "Optimizer",
    "Precision",
    "RecipeBytes",
    "bytes_per_param",
    "recipe_bytes",
    "resolve_optimizer",
    "resolve_precision",
]


@dataclass(frozen=True)
class Precision:
    """Where each per-parameter tensor lives: bytes per element of each kind."""

    name: str
    description: str
    param_bytes: float
    grad_bytes: float
    master_bytes: float  # an fp32 copy kept beside 16-bit working weights, 0 if none
    state_bytes: float  # bytes per optimizer state value
    aliases: tuple[str, ...] = ()
    #: torchao's float8 training recipe the linear layers run (``tensorwise``, ``rowwise``),
    #: "" for none: their matmuls in fp8, everything else as ``mixed-bf16``
    float8: str = ""

    @property
    def autocast(self) -> bool:
        """True when the forward runs under bf16 autocast over fp32 weights (``mixed-bf16``
        and the fp8 recipes built on it)."""
        return self.name == "mixed-bf16" or bool(self.float8)


@dataclass(frozen=True)
class Optimizer:
    """An optimizer's per-parameter state: how many values, and what they cost.

    ``state_bytes`` overrides the precision's state width (8-bit optimizers keep 1-byte
    states whatever the recipe); ``scale_bytes_per_param`` adds block-quantisation scales.
    ``step_bytes_per_tensor`` is the fp32 step counter PyTorch keeps per parameter tensor.
    """

    name: str
    description: str
    states: int
    state_bytes: float | None = None
    scale_bytes_per_param: float = 0.0
    step_bytes_per_tensor: int = 0
    aliases: tuple[str, ...] = ()


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", "everything in fp32", 4.0, 4.0, 0.0, 4.0, ("float32",)),
    Precision("bf16", "pure bf16: parameters, gradients and optimizer state in bf16",
              2.0, 2.0, 0.0, 2.0,
              ("pure-bf16", "bfloat16")),
    Precision("mixed-bf16", "bf16 autocast: fp32 parameters (the master copy), fp32 gradients and "
              "state; bf16 copies made on the fly for compute", 4.0, 4.0, 0.0, 4.0,
              ("amp", "autocast")),
    Precision("bf16-master", "bf16 parameters and gradients, an fp32 master copy and fp32 state "
              "(Megatron-style mixed precision)", 2.0, 2.0, 4.0, 4.0, ("bf16-fp32-master",)),
    Precision("bf16-fp32-states", "the lecture's recipe: bf16 parameters and gradients, fp32 "
              "optimizer state, no master copy", 2.0, 2.0, 0.0, 4.0, ("lecture",)),
    # torchao.float8 keeps the weights, gradients and state of mixed-bf16: only the linear
    # layers' matmuls change (fp8 casts made on the fly, in forward and again in backward)
    Precision("fp8-tensorwise", "mixed-bf16 with every linear's matmuls in fp8 (torchao "
              "float8, one dynamic scale per tensor; e4m3 forward, e5m2 gradients)",
              4.0, 4.0, 0.0, 4.0, ("float8-tensorwise",), float8="tensorwise"),
    Precision("fp8-rowwise", "mixed-bf16 with every linear's matmuls in fp8 (torchao float8, "
              "one dynamic scale per row; e4m3 throughout)", 4.0, 4.0, 0.0, 4.0,
              ("float8-rowwise",), float8="rowwise"),
)}

#: Values per block of the block-wise quantised (8-bit) optimizers, each block with an fp32 scale.
QUANTIZATION_BLOCK = 2048

OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("sgd", "plain SGD: no state", 0),
    Optimizer("momentum", "SGD with momentum: one velocity per parameter", 1,
              aliases=("sgd-momentum",)),
    Optimizer("adagrad", "Adagrad: one running sum of squared gradients", 1,
              step_bytes_per_tensor=4),
    Optimizer("rmsprop", "RMSprop: one running mean of squared gradients", 1,
              step_bytes_per_tensor=4),
    Optimizer("adam", "Adam: first and second moments", 2, step_bytes_per_tensor=4),
    Optimizer("adamw", "AdamW: first and second moments (decoupled weight decay)", 2,
              step_bytes_per_tensor=4),
    Optimizer("lion", "Lion: one momentum per parameter", 1),
    # Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization": both moments in
    # 8 bits, one fp32 absmax per block of 2048 values.
    Optimizer("adam8bit", "8-bit Adam: both moments in 8 bits, one fp32 scale per block of 2048",
              2, state_bytes=1, scale_bytes_per_param=2 * 4 / QUANTIZATION_BLOCK,
              step_bytes_per_tensor=4, aliases=("adamw8bit", "8bit-adam")),
)}


def _resolve(kind: str, name: str, table: dict[str, Precision] | dict[str, Optimizer]
             ) -> str:
    key = name.strip().lower()
    for entry in table.values():
        if key == entry.name or key in entry.aliases:
            return entry.name
    raise UnknownNameError(kind, name, table)


def resolve_precision(name: str) -> Precision:
    """A precision recipe by name or alias (``lecture``, ``amp``)."""
    return PRECISIONS[_resolve("precision", name, PRECISIONS)]


def resolve_optimizer(name: str) -> Optimizer:
    """An optimizer by name or alias."""
    return OPTIMIZERS[_resolve("optimizer", name, OPTIMIZERS)]


@dataclass(frozen=True)
class BytesPerParam:
    """The per-parameter bytes of a training step, part by part."""

    precision: str
    optimizer: str
    params_bytes_per_param: float
    grads_bytes_per_param: float
    master_bytes_per_param: float
    optimizer_bytes_per_param: float
    total_bytes_per_param: float


def bytes_per_param(precision: str | Precision, optimizer: str | Optimizer) -> BytesPerParam:
    """Params + grads + master + optimizer state, in bytes per parameter."""
    p = resolve_precision(precision) if isinstance(precision, str) else precision
    o = resolve_optimizer(optimizer) if isinstance(optimizer, str) else optimizer
    state_width = p.state_bytes if o.state_bytes is None else o.state_bytes
    optimizer_bytes = o.states * state_width + (o.scale_bytes_per_param if o.states else 0.0)
    total = p.param_bytes + p.grad_bytes + p.master_bytes + optimizer_bytes
    return BytesPerParam(precision=p.name, optimizer=o.name,
                         params_bytes_per_param=p.param_bytes,
                         grads_bytes_per_param=p.grad_bytes,
                         master_bytes_per_param=p.master_bytes,
                         optimizer_bytes_per_param=optimizer_bytes,
                         total_bytes_per_param=total)


@dataclass(frozen=True)
class RecipeBytes:
    """The exact bytes of a training step's per-parameter tensors, for given parameter tensors.

    :func:`bytes_per_param` is the per-parameter average; this is the whole sum, with the two
    terms that are per *tensor* rather than per parameter: PyTorch's fp32 ``step`` counter (one
    0-dim tensor of 4 bytes per parameter tensor for Adam, AdamW, Adagrad, RMSprop), and the
    fp32 scale of each block of :data:`QUANTIZATION_BLOCK` values of a quantised state (a tensor
    of n values has ⌈n / 2048⌉ blocks per state).
    """

    precision: str
    optimizer: str
    n_params: int
    n_tensors: int
    params_bytes: int
    grads_bytes: int
    master_bytes: int
    optimizer_bytes: int  # state values + quantisation scales + step counters
    step_bytes: int  # the step counters alone (included in optimizer_bytes)
    total_bytes: int


def recipe_bytes(precision: str | Precision, optimizer: str | Optimizer,
                 tensor_numels: Sequence[int]) -> RecipeBytes:
    """Bytes of parameters, gradients, master copy and optimizer state for these tensors.

    >>> r = recipe_bytes("bf16-fp32-states", "adamw", [1000, 24])   # 2 tensors, 1024 params
    >>> r.params_bytes, r.grads_bytes, r.optimizer_bytes            # 2·1024, 2·1024, 8·1024 + 4·2
    (2048, 2048, 8200)
    >>> recipe_bytes("bf16", "adam8bit", [4096]).optimizer_bytes    # 2·4096 + 2·2·4 + 4
    8212
    """
    p = resolve_precision(precision) if isinstance(precision, str) else precision
    o = resolve_optimizer(optimizer) if isinstance(optimizer, str) else optimizer
    numels = [int(n) for n in tensor_numels]
    if any(n < 0 for n in numels):
        raise InputError(f"tensor sizes must be >= 0, got {min(numels)}")
    n_params, n_tensors = sum(numels), len(numels)
    state_width = p.state_bytes if o.state_bytes is None else o.state_bytes
    state_values = round(o.states * state_width * n_params)
    scales = 0
    if o.scale_bytes_per_param and o.states:
        blocks = sum(-(-n // QUANTIZATION_BLOCK) for n in numels)
        scales = o.states * 4 * blocks
    step = o.step_bytes_per_tensor * n_tensors
    params = round(p.param_bytes * n_params)
    grads = round(p.grad_bytes * n_params)
    master = round(p.master_bytes * n_params)
    optimizer_bytes = state_values + scales + step
    return RecipeBytes(precision=p.name, optimizer=o.name, n_params=n_params,
                       n_tensors=n_tensors, params_bytes=params, grads_bytes=grads,
                       master_bytes=master, optimizer_bytes=optimizer_bytes, step_bytes=step,
                       total_bytes=params + grads + master + optimizer_bytes)
