"""The op cost registry: FLOPs, bytes convention and category of every aten op we know.

Pure, shape-only rules keyed by aten op packet (``"aten.mm"``); see :mod:`.registry` for the
decorator and :mod:`.elementwise` for the one table of per-element costs.  The package needs
no torch: rules read ``.shape`` of whatever tensor-like objects they are given.
"""

from __future__ import annotations

from tensorledger.costs.attention import attention_backward_flops, attention_flops
from tensorledger.costs.elementwise import ELEMENTWISE_FLOPS, REDUCTION_FLOPS, reduction_flops
from tensorledger.costs.matmul import conv_flops, mm_flops
from tensorledger.costs.registry import CATEGORIES, Rule, lookup, packet, register, rules

__all__ = [
    "CATEGORIES",
    "ELEMENTWISE_FLOPS",
    "REDUCTION_FLOPS",
    "Rule",
    "attention_backward_flops",
    "attention_flops",
    "conv_flops",
    "lookup",
    "mm_flops",
    "packet",
    "reduction_flops",
    "register",
    "rules",
]
