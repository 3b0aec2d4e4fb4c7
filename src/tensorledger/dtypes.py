"""Storage widths of the data types tensorledger accounts, without importing torch.

The full numeric definition of each floating-point format (bias, value set, rounding) lives
in ``tensorledger.formats``; this table only says how many bits an element occupies and which
peak FLOP/s figure of a chip (``compute``) applies to arithmetic in that type.

>>> resolve_dtype("bfloat16").bits, resolve_dtype("fp8").name
(16, 'fp8_e4m3fn')
>>> tensor_bytes((4, 8), "fp32")
128
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from tensorledger.errors import UnknownNameError

__all__ = ["DTYPES", "DType", "resolve_dtype", "tensor_bytes"]


@dataclass(frozen=True)
class DType:
    """A storage type: its canonical name, width in bits, and the peak it computes at."""

    name: str
    bits: int
    compute: str  # key into Hardware.dense_flop_per_s ("bf16", "fp8", "int8", ...)
    aliases: tuple[str, ...] = ()
    torch_name: str | None = None  # attribute of the torch module, when torch has the type

    @property
    def bytes(self) -> float:
        """Bytes per element; fractional for sub-byte types (fp4 is 0.5)."""
        return self.bits / 8


def _table(entries: Iterable[DType]) -> dict[str, DType]:
    return {d.name: d for d in entries}


DTYPES: dict[str, DType] = _table([
    DType("fp64", 64, "fp64", ("float64", "double"), "float64"),
    DType("fp32", 32, "fp32", ("float32", "float"), "float32"),
    # TF32 is a compute mode of fp32 tensors: stored in 32 bits, multiplied at the tf32 peak.
    DType("tf32", 32, "tf32", ("tensorfloat32",), None),
    DType("bf16", 16, "bf16", ("bfloat16",), "bfloat16"),
    DType("fp16", 16, "fp16", ("float16", "half"), "float16"),
    DType("fp8_e4m3fn", 8, "fp8", ("fp8", "e4m3", "e4m3fn", "float8_e4m3fn"), "float8_e4m3fn"),
    DType("fp8_e5m2", 8, "fp8", ("e5m2", "float8_e5m2"), "float8_e5m2"),
    DType("fp8_e4m3fnuz", 8, "fp8", ("e4m3fnuz", "float8_e4m3fnuz"), "float8_e4m3fnuz"),
    DType("fp8_e5m2fnuz", 8, "fp8", ("e5m2fnuz", "float8_e5m2fnuz"), "float8_e5m2fnuz"),
    DType("e8m0", 8, "fp8", ("fp8_e8m0", "float8_e8m0fnu", "e8m0fnu"), "float8_e8m0fnu"),
    DType("fp6_e2m3", 6, "fp6", ("e2m3", "float6_e2m3fn"), None),
    DType("fp6_e3m2", 6, "fp6", ("e3m2", "float6_e3m2fn"), None),
    DType("fp4_e2m1", 4, "fp4", ("fp4", "e2m1", "float4_e2m1fn"), None),
    DType("int64", 64, "int64", ("long",), "int64"),
    DType("int32", 32, "int32", ("int",), "int32"),
    DType("int16", 16, "int16", ("short",), "int16"),
    DType("int8", 8, "int8", (), "int8"),
    DType("uint8", 8, "int8", ("byte",), "uint8"),
    DType("int4", 4, "int4", (), None),
    DType("bool", 8, "int8", (), "bool"),
])

_LOOKUP: dict[str, DType] = {}
for _dtype in DTYPES.values():
    for _key in (_dtype.name, *_dtype.aliases):
        _LOOKUP[_key.lower()] = _dtype
        _LOOKUP["torch." + _key.lower()] = _dtype


def resolve_dtype(name: str) -> DType:
    """Find a dtype by canonical name or alias (``bfloat16``, ``torch.float32``, ``fp8``)."""
    try:
        return _LOOKUP[name.strip().lower()]
    except KeyError:
        raise UnknownNameError("dtype", name, DTYPES) from None


def tensor_bytes(shape: tuple[int, ...], dtype: str | DType) -> int:
    """Bytes a dense tensor of ``shape`` occupies: elements × bits, rounded up to whole bytes."""
    resolved = resolve_dtype(dtype) if isinstance(dtype, str) else dtype
    return -(-math.prod(shape) * resolved.bits // 8)  # whole-number arithmetic: exact at any size
