"""QLoRA's frozen base: the model's linear weights stored in torchao's 4-bit NF4 tensor.

torchao's ``NF4Tensor`` (the QLoRA format of Dettmers et al., 2023, as torchtune trains it) was
taken over bitsandbytes' ``Params4bit`` because it is a traceable tensor subclass of plain torch
ops: it builds and runs under FakeTensorMode, and every op of its dequantisation is an aten op
the trace records.  bitsandbytes packs and unpacks in its own CUDA kernels, which neither fake
tensors nor a CPU run can execute.

What one weight of ``N`` elements holds (``block`` 64, ``scaler_block`` 256, torchao's
defaults and the paper's): the 4-bit codes, two to a byte (``N / 2`` bytes, uint8); one int8
scale per block of 64 (``N / 64`` bytes); those scales double-quantised, one factor per 256 of
them in the weight's dtype (``N / 16,384`` values) and their mean (one value); and the 16-entry
NF4 code book in the weight's dtype.  So ``N`` must be a multiple of 64 · 256 = 16,384; a
linear whose weight is not stays in its stored dtype, and the result says which.

Which linears: every ``nn.Linear`` of the model but its output head, as transformers loads a
model in 4 bits (bitsandbytes' ``load_in_4bit`` keeps the output embeddings in their dtype).

The dequantisation runs at each use, in forward and again in backward (torchao's
``LinearNF4`` saves the 4-bit weight, not the dequantised one).  Each quantised linear gets a
child :class:`NF4Dequantize` module that runs torchao's own ``get_original_weight``, so the
trace attributes those ops to ``<linear>.dequantize`` and their FLOPs and bytes can be summed
(:func:`tensorledger.trace.aggregate.module_class_totals` over ``NF4Dequantize``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.trace.aggregate import class_total
from tensorledger.trace.records import Trace
from tensorledger.units import format_bytes, format_sci
from tensorledger.workload.quiet import IMPORT_LOGGERS

__all__ = ["DEQUANTIZE_CLASS", "NF4_BLOCK", "NF4_SCALER_BLOCK", "NF4Base", "NF4Dequantize",
           "dequantization_note", "flat_tensors", "quantize_base", "quiet_torchao"]

#: Elements per absmax block, and block scales per second-level factor (torchao's defaults).
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256
#: The class name the trace records the dequantisation under.
DEQUANTIZE_CLASS = "NF4Dequantize"


def _drop(record: logging.LogRecord) -> bool:
    return False


@contextmanager
def quiet_torchao() -> Iterator[None]:
    """torchao imported (by this module or by peft, which looks for it) without the log of
    its import (:data:`~tensorledger.workload.quiet.IMPORT_LOGGERS`); no figure depends on it."""
    loggers = [logging.getLogger(name) for name in IMPORT_LOGGERS]
    for logger in loggers:
        logger.addFilter(_drop)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(_drop)


def _nf4_class() -> Any:
    try:
        with quiet_torchao():
            from torchao.quantization import NF4Tensor
    except ImportError:
        raise InputError("--qlora stores the base in torchao's NF4 tensors, and torchao is "
                         "not installed: pip install 'tensorledger[ao]'") from None
    return NF4Tensor


class NF4Dequantize(nn.Module):
    """torchao's dequantisation of one NF4 weight, run as a module so the trace names it."""

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        dequantized: torch.Tensor = type(weight).get_original_weight(weight)  # type: ignore[attr-defined]
        return dequantized


@dataclass(frozen=True)
class NF4Base:
    """The linears QLoRA quantised, and those left in their stored dtype (and why)."""

    quantized: tuple[str, ...]  # module paths
    quantized_params: int
    kept: tuple[tuple[str, str], ...]  # (module path, why)
    torchao_version: str

    def describe(self) -> str:
        text = (f"the base's {len(self.quantized)} linears ({self.quantized_params:,} "
                f"parameters) in 4-bit NF4 through torchao {self.torchao_version} (blocks of "
                f"{NF4_BLOCK}, int8 scales double-quantised per {NF4_SCALER_BLOCK}), "
                "dequantised at each use, forward and backward")
        if self.kept:
            shown = ", ".join(f"{name} ({why})" for name, why in self.kept[:4])
            more = f" and {len(self.kept) - 4} more" if len(self.kept) > 4 else ""
            text += f"; left in their stored dtype: {shown}{more}"
        return text


def flat_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors holding ``tensor``'s memory: a traceable wrapper subclass (an NF4
    weight) unfolded into its inner tensors, anything else itself."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if not is_traceable_wrapper_subclass(tensor) or type(tensor).__name__ == "DTensor":
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    return [inner for name in names for inner in flat_tensors(getattr(tensor, name))]


def _head(module: nn.Module) -> nn.Module | None:
    output = getattr(module, "get_output_embeddings", None)
    if callable(output):
        head = output()
        if isinstance(head, nn.Module):
            return head
    head = getattr(module, "head", None)
    return head if isinstance(head, nn.Module) else None


def quantize_base(module: nn.Module) -> NF4Base:
    """Store ``module``'s linear weights (but its output head's) in NF4, frozen, in place."""
    nf4 = _nf4_class()
    import torchao

    head = _head(module)
    embedded = {id(sub.weight) for sub in module.modules() if isinstance(sub, nn.Embedding)}
    quantized: list[str] = []
    count = 0
    kept: list[tuple[str, str]] = []
    for name, sub in list(module.named_modules()):
        if not isinstance(sub, nn.Linear):
            continue
        weight = sub.weight
        if sub is head or id(weight) in embedded:
            kept.append((name, "the output head"))
            continue
        numel = weight.numel()
        if numel % (NF4_BLOCK * NF4_SCALER_BLOCK):
            kept.append((name, f"{numel:,} elements, not a multiple of "
                               f"{NF4_BLOCK * NF4_SCALER_BLOCK:,}"))
            continue
        with torch.no_grad():
            stored = nf4.from_tensor(weight.detach(), NF4_BLOCK, NF4_SCALER_BLOCK)
        sub.weight = nn.Parameter(stored, requires_grad=False)
        dequantize = NF4Dequantize()
        sub.add_module("dequantize", dequantize)
        _route(sub.weight, dequantize)
        if sub.bias is not None:
            sub.bias.requires_grad_(False)
        quantized.append(name)
        count += numel
    if not quantized:
        why = "; ".join(f"{name}: {reason}" for name, reason in kept[:3]) or "it has none"
        raise InputError(f"--qlora found no linear of {type(module).__name__} to store in NF4 "
                         f"({why})")
    return NF4Base(quantized=tuple(quantized), quantized_params=count, kept=tuple(kept),
                   torchao_version=str(torchao.__version__))


def _route(weight: torch.Tensor, dequantize: nn.Module) -> None:
    """torchao dequantises by ``weight.get_original_weight()``; on this weight that call runs
    ``dequantize`` (the same function, inside a module the trace sees)."""
    weight.get_original_weight = lambda: dequantize(weight)  # type: ignore[attr-defined]


def dequantization_note(trace: Trace) -> str:
    """What dequantising the NF4 base cost in ``trace``: its FLOPs and bytes, forward and
    backward, beside the step's."""
    total = class_total(trace, DEQUANTIZE_CLASS)
    if total is None:
        return "NF4 dequantisation: none ran in this step"
    flops = sum(r.flops for r in trace.records)
    moved = sum(r.bytes_read + r.bytes_written for r in trace.records)
    return (f"NF4 dequantisation ({total.modules} weights, in forward and again in backward): "
            f"{format_sci(total.flops)} FLOPs ({total.flops / flops:.1%} of the step's; "
            f"forward {format_sci(total.forward_flops)}, backward "
            f"{format_sci(total.backward_flops)}), {format_bytes(total.bytes)} moved "
            f"({total.bytes / moved:.1%} of the step's)")
