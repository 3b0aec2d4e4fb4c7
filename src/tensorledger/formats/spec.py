"""Floating-point formats defined by their bit layout; every property is computed from it.

A format is a sign bit (or none), ``E`` exponent bits, ``M`` mantissa bits and a rule for its
special codes.  Bias, range, epsilon and the value of every code follow from those alone, so the
FACTS table is a test of this module, not an input to it.

>>> fmt = resolve_format("fp4")
>>> fmt.name, fmt.bias, fmt.max_finite, fmt.min_subnormal
('fp4_e2m1', 1, 6.0, 0.5)
>>> resolve_format("e4m3").max_finite, resolve_format("fp8_e5m2").max_finite
(448.0, 57344.0)
>>> round_to_format(17.0, "fp8_e4m3fn"), round_to_format(1e-8, "fp16")
(16.0, 0.0)

Special-code rules (``specials``):

- ``ieee``: the all-ones exponent holds ±inf (mantissa 0) and NaN (anything else).
- ``fn`` (finite, "fn"): no infinity; only S.1111.111 is NaN, the rest of the top binade is finite.
- ``fnuz`` (finite, no negative zero): the code 1000…0 is the only NaN; +0 is the only zero, and
  the bias is one larger than IEEE's.
- ``finite``: every code is a number (fp6, fp4); there is neither inf nor NaN.
- ``e8m0``: unsigned powers of two (the MX scale); 0xFF is NaN and there is no zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Literal

from tensorledger.errors import InputError, UnknownNameError

__all__ = [
    "FORMATS",
    "CodeValue",
    "FloatFormat",
    "FormatProperties",
    "ScalarCast",
    "Specials",
    "cast_scalar",
    "code_values",
    "finite_values",
    "format_properties",
    "read_cast_input",
    "resolve_format",
    "round_to_format",
]

Specials = Literal["ieee", "fn", "fnuz", "finite", "e8m0"]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: its layout and special-code rule.

    ``storage_bits`` differs from the layout only for tf32, which is a compute mode on 32-bit
    fp32 storage.  ``subnormals`` is False for tf32: NVIDIA documents no subnormal range for it,
    so it is treated as flushing them.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    specials: Specials = "ieee"
    signed: bool = True
    subnormals: bool = True
    storage_bits: int | None = None
    aliases: tuple[str, ...] = ()
    note: str = ""

    # ---------------------------------------------------------------- layout
    @property
    def sign_bits(self) -> int:
        return 1 if self.signed else 0

    @property
    def layout_bits(self) -> int:
        return self.sign_bits + self.exponent_bits + self.mantissa_bits

    @property
    def bits(self) -> int:
        """Bits one element occupies in memory."""
        return self.storage_bits if self.storage_bits is not None else self.layout_bits

    @property
    def bias(self) -> int:
        # fnuz formats move the bias up by one: the code IEEE would spend on -0 is NaN, and the
        # exponent range shifts down by one binade.
        return (1 << (self.exponent_bits - 1)) - 1 + (1 if self.specials == "fnuz" else 0)

    # ------------------------------------------------------------- exponents
    @property
    def min_exponent(self) -> int:
        """Unbiased exponent of the smallest normal number."""
        return -self.bias if self.specials == "e8m0" else 1 - self.bias

    @property
    def max_exponent(self) -> int:
        """Unbiased exponent of the largest finite number."""
        top = (1 << self.exponent_bits) - 1
        # IEEE and e8m0 spend the whole top binade on specials; the others keep it finite.
        return top - 1 - self.bias if self.specials in ("ieee", "e8m0") else top - self.bias

    @property
    def max_mantissa(self) -> int:
        """Largest mantissa field of the top finite binade (fn loses one code to NaN there)."""
        full = (1 << self.mantissa_bits) - 1
        return full - 1 if self.specials == "fn" else full

    # ------------------------------------------------------------ properties
    @property
    def max_finite(self) -> float:
        significand = 1 + self.max_mantissa / 2**self.mantissa_bits
        return math.ldexp(significand, self.max_exponent)

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.min_exponent)

    @property
    def min_subnormal(self) -> float | None:
        """Smallest positive subnormal, or None when the format has none."""
        if not self.subnormals or self.mantissa_bits == 0:
            return None
        return math.ldexp(1.0, self.min_exponent - self.mantissa_bits)

    @property
    def min_positive(self) -> float:
        subnormal = self.min_subnormal
        return self.min_normal if subnormal is None else subnormal

    @property
    def epsilon(self) -> float:
        """Distance from 1 to the next larger value."""
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def dynamic_range_decades(self) -> float:
        """log10(max finite / smallest positive value)."""
        return math.log10(self.max_finite) - math.log10(self.min_positive)

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials != "finite"

    @property
    def has_zero(self) -> bool:
        return self.specials != "e8m0"

    @property
    def has_negative_zero(self) -> bool:
        return self.signed and self.specials not in ("fnuz", "e8m0")

    @property
    def code_count(self) -> int:
        return 1 << self.layout_bits

    # -------------------------------------------------------------- decoding
    def decode(self, code: int) -> float:
        """The value of one code (an unsigned integer of ``layout_bits`` bits)."""
        if not 0 <= code < self.code_count:
            raise InputError(f"code {code} is out of range for {self.name} "
                             f"(0 .. {self.code_count - 1})")
        e_bits, m_bits = self.exponent_bits, self.mantissa_bits
        sign_bit = code >> (e_bits + m_bits) if self.signed else 0
        exponent = (code >> m_bits) & (2**e_bits - 1)
        mantissa = code & (2**m_bits - 1)
        top = 2**e_bits - 1
        nan = math.copysign(math.nan, -1.0 if sign_bit else 1.0)  # a NaN keeps its sign bit
        if self.specials == "e8m0":
            return math.nan if exponent == top else math.ldexp(1.0, exponent - self.bias)
        if self.specials == "fnuz" and code == 1 << (e_bits + m_bits):
            return nan
        if self.specials == "ieee" and exponent == top:
            return nan if mantissa else (-math.inf if sign_bit else math.inf)
        if self.specials == "fn" and exponent == top and mantissa == 2**m_bits - 1:
            return nan
        if exponent == 0:
            magnitude = (math.ldexp(mantissa, self.min_exponent - m_bits)
                         if self.subnormals else 0.0)
        else:
            magnitude = math.ldexp(2**m_bits + mantissa, exponent - self.bias - m_bits)
        return -magnitude if sign_bit else magnitude

    def encode(self, value: float) -> int:
        """The code of a value the format holds exactly (the inverse of :meth:`decode`)."""
        codes = _code_table(self)
        if math.isnan(value):
            return next(c for c, v in enumerate(codes) if math.isnan(v))
        key = (value, math.copysign(1.0, value))
        for code, decoded in enumerate(codes):
            if (decoded, math.copysign(1.0, decoded)) == key:
                return code
        raise InputError(f"{value!r} is not a value of {self.name}")


@cache
def _code_table(fmt: FloatFormat) -> tuple[float, ...]:
    if fmt.layout_bits > 8:
        raise InputError(f"{fmt.name} has {fmt.code_count} codes; only formats of at most 8 bits "
                         "are enumerated")
    return tuple(fmt.decode(code) for code in range(fmt.code_count))


def _formats(entries: Iterable[FloatFormat]) -> dict[str, FloatFormat]:
    return {f.name: f for f in entries}


FORMATS: dict[str, FloatFormat] = _formats([
    FloatFormat("fp64", 11, 52, aliases=("float64", "double")),
    FloatFormat("fp32", 8, 23, aliases=("float32", "float")),
    FloatFormat("tf32", 8, 10, subnormals=False, storage_bits=32, aliases=("tensorfloat32",),
                note="compute mode: fp32 storage, 10-bit mantissa in tensor-core matmuls"),
    FloatFormat("bf16", 8, 7, aliases=("bfloat16",)),
    FloatFormat("fp16", 5, 10, aliases=("float16", "half")),
    FloatFormat("fp8_e4m3fn", 4, 3, "fn", aliases=("fp8", "e4m3", "e4m3fn", "float8_e4m3fn"),
                note="OCP FP8; MXFP8 and NVFP4 block-scale element"),
    FloatFormat("fp8_e5m2", 5, 2, aliases=("e5m2", "float8_e5m2"), note="OCP FP8"),
    FloatFormat("fp8_e4m3fnuz", 4, 3, "fnuz", aliases=("e4m3fnuz", "float8_e4m3fnuz"),
                note="AMD MI300 FP8"),
    FloatFormat("fp8_e5m2fnuz", 5, 2, "fnuz", aliases=("e5m2fnuz", "float8_e5m2fnuz"),
                note="AMD MI300 FP8"),
    FloatFormat("e8m0", 8, 0, "e8m0", signed=False,
                aliases=("fp8_e8m0", "float8_e8m0fnu", "e8m0fnu"),
                note="MX block scale: a power of two"),
    FloatFormat("fp6_e2m3", 2, 3, "finite", aliases=("e2m3", "float6_e2m3fn"), note="MXFP6"),
    FloatFormat("fp6_e3m2", 3, 2, "finite", aliases=("e3m2", "float6_e3m2fn"), note="MXFP6"),
    FloatFormat("fp4_e2m1", 2, 1, "finite", aliases=("fp4", "e2m1", "float4_e2m1fn"),
                note="MXFP4 and NVFP4 element"),
])

_LOOKUP: dict[str, FloatFormat] = {}
for _format in FORMATS.values():
    for _key in (_format.name, *_format.aliases):
        _LOOKUP[_key.lower()] = _format
        _LOOKUP["torch." + _key.lower()] = _format


def resolve_format(name: str | FloatFormat) -> FloatFormat:
    """Find a format by canonical name or alias (``fp4``, ``e4m3``, ``bfloat16``)."""
    if isinstance(name, FloatFormat):
        return name
    try:
        return _LOOKUP[name.strip().lower()]
    except KeyError:
        raise UnknownNameError("format", name, FORMATS) from None


@dataclass(frozen=True)
class CodeValue:
    """One code of a format: its bits, its value and what kind of value it is."""

    code: int
    bits: str  # sign.exponent.mantissa, e.g. "0.10.1"
    value: float
    kind: Literal["zero", "subnormal", "normal", "inf", "nan"]


def _bit_string(fmt: FloatFormat, code: int) -> str:
    text = format(code, f"0{fmt.layout_bits}b")
    parts = [text[: fmt.sign_bits], text[fmt.sign_bits: fmt.sign_bits + fmt.exponent_bits],
             text[fmt.sign_bits + fmt.exponent_bits:]]
    return ".".join(p for p in parts if p)


def _kind(fmt: FloatFormat, value: float) -> Literal["zero", "subnormal", "normal", "inf", "nan"]:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "zero"
    return "subnormal" if abs(value) < fmt.min_normal else "normal"


def code_values(fmt: str | FloatFormat) -> tuple[CodeValue, ...]:
    """Every code of a format of at most 8 bits, in code order."""
    resolved = resolve_format(fmt)
    return tuple(CodeValue(code, _bit_string(resolved, code), value, _kind(resolved, value))
                 for code, value in enumerate(_code_table(resolved)))


def finite_values(fmt: str | FloatFormat) -> tuple[float, ...]:
    """The distinct finite values of a format of at most 8 bits, ascending (-0 counts as 0).

    >>> finite_values("fp4_e2m1")
    (-6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    """
    values = {v + 0.0 for v in _code_table(resolve_format(fmt)) if math.isfinite(v)}
    return tuple(sorted(values))


def round_to_format(value: float, fmt: str | FloatFormat, *, saturate: bool = False) -> float:
    """Round one Python float to the nearest value of ``fmt`` (ties to even), without torch.

    This is the scalar reference for the vectorised casts of ``formats.quantize``.  Overflow
    gives inf where the format has it, else NaN, else (fp6, fp4) the largest value; with
    ``saturate`` it always gives ± the largest finite value.  NaN into a format without NaN
    gives 0.  Into e8m0, which holds no zero or negative number, zero, negatives and NaN give NaN
    and anything below 2^-127 gives 2^-127.
    """
    resolved = resolve_format(fmt)
    if resolved.name == "fp64":
        return float(value)
    if math.isnan(value):
        return math.nan if resolved.has_nan else 0.0
    if resolved.specials == "e8m0":
        if not value > 0:
            return math.nan
        value = max(value, resolved.min_normal)
    magnitude = abs(value)
    if resolved.subnormals or magnitude >= resolved.min_normal:
        exponent = max(math.frexp(magnitude)[1] - 1, resolved.min_exponent) if magnitude else 0
        quantum_exponent = max(exponent, resolved.min_exponent) - resolved.mantissa_bits
        # Scaling by a power of two is exact and Python's round() ties to even.
        rounded = math.ldexp(round(math.ldexp(magnitude, -quantum_exponent)), quantum_exponent) \
            if math.isfinite(magnitude) else magnitude
    else:
        rounded = 0.0  # tf32 keeps no subnormals
    if rounded > resolved.max_finite:
        if saturate or resolved.specials == "finite":
            rounded = resolved.max_finite
        else:
            rounded = math.inf if resolved.has_inf else math.nan
    result = math.copysign(rounded, value)
    return result + 0.0 if not resolved.has_negative_zero else result


@dataclass(frozen=True)
class FormatProperties:
    """Every computed property of a format, flat, for tables and JSON."""

    name: str
    aliases: tuple[str, ...]
    bits: int
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_finite: float
    min_normal: float
    min_subnormal: float | None
    epsilon: float
    dynamic_range_decades: float
    has_inf: bool
    has_nan: bool
    has_negative_zero: bool
    has_zero: bool
    specials: str
    note: str


def format_properties(fmt: str | FloatFormat) -> FormatProperties:
    """The properties of one format, computed from its layout.

    >>> p = format_properties("fp16")
    >>> p.max_finite, p.min_normal == 2**-14, p.min_subnormal == 2**-24
    (65504.0, True, True)
    """
    f = resolve_format(fmt)
    return FormatProperties(
        name=f.name, aliases=f.aliases, bits=f.bits, sign_bits=f.sign_bits,
        exponent_bits=f.exponent_bits, mantissa_bits=f.mantissa_bits, bias=f.bias,
        max_finite=f.max_finite, min_normal=f.min_normal, min_subnormal=f.min_subnormal,
        epsilon=f.epsilon, dynamic_range_decades=f.dynamic_range_decades, has_inf=f.has_inf,
        has_nan=f.has_nan, has_negative_zero=f.has_negative_zero, has_zero=f.has_zero,
        specials=f.specials, note=f.note)


Outcome = Literal["exact", "rounded", "underflow", "overflow", "saturated", "nan"]


@dataclass(frozen=True)
class ScalarCast:
    """One number rounded to a format, and what happened to it."""

    value: float
    format: str
    result: float
    code: int | None  # for formats of at most 8 bits
    outcome: Outcome
    abs_error: float
    rel_error: float | None
    saturate: bool
    max_finite: float
    min_positive: float
    # the number as typed, when it was beyond fp64's range and became ±inf (or 0) before
    # any cast: "1e999" is read as inf, so the cast itself only sees inf
    input_text: str = ""
    input_overflowed: bool = False
    input_underflowed: bool = False


def read_cast_input(text: str) -> tuple[float, bool, bool]:
    """A number as typed for ``cast``: ASCII digits (``-1.5``, ``1e-8``) or ``inf``/``nan``,
    and whether it overflowed to ±inf or underflowed to zero on reading (``1e999``,
    ``1e-999``), which happens before any cast.

    >>> read_cast_input("1e999"), read_cast_input("-1.5")
    ((inf, True, False), (-1.5, False, False))
    """
    from tensorledger.units import check_ascii_number  # units is torch-free too

    expected = "expected a number such as 1e-8, -3.5, inf or nan, in ASCII digits"
    try:
        check_ascii_number(text, "the value")
    except InputError as error:
        raise InputError(f"{error}; {expected}") from None
    number = r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*"
    special = r"\s*[+-]?(?:nan|inf|infinity)\s*"
    if not (re.fullmatch(number, text) or re.fullmatch(special, text, re.IGNORECASE)):
        raise InputError(f"cannot read {text[:40]!r} as a number; {expected}")
    value = float(text)
    is_number = re.fullmatch(number, text) is not None
    overflowed = is_number and math.isinf(value)
    underflowed = is_number and value == 0 and any(c in "123456789" for c in
                                                  text.lower().split("e")[0])
    return value, overflowed, underflowed


def cast_scalar(value: float, fmt: str | FloatFormat, *, saturate: bool = False) -> ScalarCast:
    """Round ``value`` to ``fmt`` and say whether it was exact, rounded, underflowed to zero,
    overflowed or saturated.

    >>> cast_scalar(1e-8, "fp16").outcome, cast_scalar(1e-8, "bf16").outcome
    ('underflow', 'rounded')
    """
    resolved = resolve_format(fmt)
    result = round_to_format(value, resolved, saturate=saturate)
    outcome: Outcome
    if math.isnan(value):
        outcome = "nan"
    elif value != 0 and result == 0:
        outcome = "underflow"
    elif math.isfinite(value) and not math.isfinite(result):
        outcome = "overflow"
    elif abs(value) > resolved.max_finite and abs(result) == resolved.max_finite:
        outcome = "saturated"
    elif result == value:
        outcome = "exact"
    else:
        outcome = "rounded"
    finite = math.isfinite(value) and math.isfinite(result)
    abs_error = abs(result - value) if finite else math.nan
    rel_error = abs_error / abs(value) if finite and value != 0 else None
    code = resolved.encode(result) if resolved.layout_bits <= 8 else None
    return ScalarCast(value, resolved.name, result, code, outcome, abs_error, rel_error, saturate,
                      resolved.max_finite, resolved.min_positive)
