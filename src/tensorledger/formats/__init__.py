"""Numeric formats from fp64 to NVFP4: exact values, casts and block-scaled quantization.

The metadata (registry, properties, every value of a small format, scalar rounding) imports
without torch.  The vectorised casts, MX / NVFP4 block scaling and error metrics use torch and
load it on first use:

>>> from tensorledger import formats
>>> formats.resolve_format("fp4").max_finite
6.0
>>> len(formats.finite_values("fp4_e2m1"))
15
"""

from __future__ import annotations

import importlib
from typing import Any

from tensorledger.formats.spec import (
    FORMATS,
    CodeValue,
    FloatFormat,
    FormatProperties,
    ScalarCast,
    cast_scalar,
    code_values,
    finite_values,
    format_properties,
    resolve_format,
    round_to_format,
)

# Names that live in torch-using modules, loaded on first access.
_LAZY = {
    "CastResult": "quantize",
    "cast": "quantize",
    "pack_codes": "blocks",
    "packed_code_bytes": "blocks",
    "quantize_cast": "blocks",
    "resolve_scheme": "blocks",
    "Scheme": "blocks",
    "unpack_codes": "blocks",
    "Quantized": "blocks",
    "SCHEMES": "blocks",
    "quantize_scheme": "blocks",
    "quantize_mx": "blocks",
    "quantize_nvfp4": "blocks",
    "quantize_per_tensor": "blocks",
    "ErrorMetrics": "metrics",
    "load_tensor": "tensors",
    "random_tensor": "tensors",
    "Comparison": "metrics",
    "SchemeResult": "metrics",
    "compare_schemes": "metrics",
    "error_metrics": "metrics",
}

__all__ = [
    "FORMATS",
    "CodeValue",
    "FloatFormat",
    "FormatProperties",
    "ScalarCast",
    "cast_scalar",
    "code_values",
    "finite_values",
    "format_properties",
    "resolve_format",
    "round_to_format",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorledger.formats' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tensorledger.formats.{module}"), name)
