"""Parse and format quantities: counts, FLOPs, bytes, rates, durations and shapes.

Conversions between units live here and in ``report`` only.  Parsers accept what a person
writes on a napkin and reject anything ambiguous with a message that says what would parse:

>>> parse_count("70B"), parse_count("15T"), parse_count("1.5M")
(70000000000.0, 15000000000000.0, 1500000.0)
>>> parse_bytes("80GB"), parse_bytes("80GiB")
(80000000000.0, 85899345920.0)
>>> parse_bandwidth("3.35TB/s"), parse_flop_rate("989.5TFLOP/s")
(3350000000000.0, 989500000000000.0)
>>> parse_duration("2w") / 86400
14.0
>>> format_bytes(2415919104, "MiB"), format_bytes(2415919104, "GB")
('2304 MiB', '2.416 GB')
"""

from __future__ import annotations

import math
import re

from tensorledger.errors import ShapeError, UnitError

__all__ = [
    "BINARY_BYTE_UNITS",
    "DECIMAL_BYTE_UNITS",
    "format_bandwidth",
    "format_bytes",
    "format_count",
    "format_duration",
    "format_flop_rate",
    "format_flops",
    "format_sci",
    "parse_bandwidth",
    "parse_bytes",
    "parse_count",
    "parse_duration",
    "parse_flop_rate",
    "parse_flops",
    "parse_shape",
]

_NUMBER = r"(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(r"^\s*" + _NUMBER + r"\s*(?P<unit>[^\s\d].*?)?\s*$")

# Counts use the conventions of ML papers: B for billions (G accepted), T for trillions.
_COUNT_SUFFIXES = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12,
                   "P": 1e15}
DECIMAL_BYTE_UNITS = {"B": 1, "KB": 10**3, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                      "PB": 10**15}
BINARY_BYTE_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_BYTE_UNITS = {**DECIMAL_BYTE_UNITS, **BINARY_BYTE_UNITS}
_SI_PREFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
                "E": 1e18}
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0,
                   "min": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0, "day": 86400.0,
                   "days": 86400.0, "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
                   "y": 365.0 * 86400.0, "year": 365.0 * 86400.0, "years": 365.0 * 86400.0}

_COUNT_HELP = "a count such as 70B, 70e9, 15T, 1.5M or 4096 (K, M, B/G, T, P)"
_BYTES_HELP = ("bytes such as 80GB (1e9) or 80GiB (2^30); units B, KB, MB, GB, TB, KiB, MiB, "
               "GiB, TiB")
_BANDWIDTH_HELP = "a bandwidth such as 3.35TB/s, 900GB/s or 2039GiB/s"
_RATE_HELP = "a rate such as 989.5TFLOP/s, 1.979PFLOP/s or 9.895e14 (FLOP/s)"
_FLOPS_HELP = "a FLOP count such as 3.14e23, 6.3e24FLOPs or 15T"
_DURATION_HELP = "a duration such as 2w, 14d, 36h, 90min, 30s (units ns us ms s min h d w y)"


def _plain(value: float, what: str) -> float:
    """A number given as a number, not a string: finite and non-negative."""
    if isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise UnitError(f"{what} {value!r} must be a finite, non-negative number")
    return float(value)


def _split(text: str, what: str, help_: str) -> tuple[float, str]:
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(f"cannot read {text!r} as {what}; expected {help_}")
    value = float(match["num"])
    if not math.isfinite(value):
        raise UnitError(f"{what} {text!r} is not finite; expected {help_}")
    return value, (match["unit"] or "").strip()


def parse_count(text: str | float | int) -> float:
    """Parse a count: ``70B`` → 7e10, ``15T`` → 1.5e13, ``1.5M`` → 1.5e6, ``70e9`` → 7e10."""
    if not isinstance(text, str):
        return _plain(text, "count")
    value, unit = _split(text, "a count", _COUNT_HELP)
    if unit not in _COUNT_SUFFIXES:
        hint = " (lower-case m and b are ambiguous)" if unit in {"m", "b", "t"} else ""
        raise UnitError(f"unknown count suffix {unit!r} in {text!r}{hint}; expected {_COUNT_HELP}")
    return value * _COUNT_SUFFIXES[unit]


def parse_flops(text: str | float | int) -> float:
    """Parse a FLOP count: ``3.14e23``, ``6.3e24FLOPs``, ``15T`` (a count of operations)."""
    if isinstance(text, str):
        if re.search(r"FLOP/s|FLOPS$", text):
            raise UnitError(f"{text!r} is a rate, not a count; expected {_FLOPS_HELP}")
        return parse_count(re.sub(r"\s*FLOPs?$", "", text.strip()))
    return parse_count(text)


def _byte_factor(unit: str, text: str, help_: str) -> int:
    if unit in _BYTE_UNITS:
        return _BYTE_UNITS[unit]
    if unit.lower() in {u.lower() for u in _BYTE_UNITS} or unit.endswith("b"):
        raise UnitError(f"ambiguous unit {unit!r} in {text!r} (bits or bytes?); expected {help_}")
    raise UnitError(f"unknown unit {unit!r} in {text!r}; expected {help_}")


def parse_bytes(text: str | float | int) -> float:
    """Parse a byte size; decimal (GB = 1e9) and binary (GiB = 2^30) units are kept apart."""
    if not isinstance(text, str):
        return _plain(text, "bytes")
    value, unit = _split(text, "bytes", _BYTES_HELP)
    if unit == "":
        return value
    return value * _byte_factor(unit, text, _BYTES_HELP)


def parse_bandwidth(text: str | float | int) -> float:
    """Parse a bandwidth in bytes per second: ``3.35TB/s`` → 3.35e12."""
    if not isinstance(text, str):
        return _plain(text, "bandwidth")
    value, unit = _split(text, "a bandwidth", _BANDWIDTH_HELP)
    if unit == "":
        return value
    if not unit.endswith("/s"):
        raise UnitError(f"bandwidth {text!r} lacks '/s'; expected {_BANDWIDTH_HELP}")
    return value * _byte_factor(unit[:-2], text, _BANDWIDTH_HELP)


def parse_flop_rate(text: str | float | int) -> float:
    """Parse a compute rate in FLOP/s: ``989.5TFLOP/s`` → 9.895e14.

    ``TFLOPS`` is refused: in this project FLOPs are a count and FLOP/s a rate.
    """
    if not isinstance(text, str):
        return _plain(text, "rate")
    value, unit = _split(text, "a compute rate", _RATE_HELP)
    if unit == "":
        return value
    match = re.fullmatch(r"(?P<prefix>[kKMGTPE]?)FLOP/s", unit)
    if match is None:
        hint = ""
        if re.fullmatch(r"[kKMGTPE]?FLOPS", unit, flags=re.IGNORECASE):
            hint = " (write FLOP/s: 'FLOPS' mixes up a count and a rate)"
        raise UnitError(f"cannot read {text!r} as a compute rate{hint}; expected {_RATE_HELP}")
    return value * _SI_PREFIXES[match["prefix"]]


def parse_duration(text: str | float | int) -> float:
    """Parse a duration into seconds: ``2w``, ``14d``, ``36h``, ``90min``, ``30s``."""
    if not isinstance(text, str):
        raise UnitError(f"duration {text!r} needs a unit; expected {_DURATION_HELP}")
    value, unit = _split(text, "a duration", _DURATION_HELP)
    if unit == "":
        raise UnitError(f"duration {text!r} needs a unit; expected {_DURATION_HELP}")
    if unit not in _DURATION_UNITS:
        hint = " ('m' could be minutes or months)" if unit in {"m", "M"} else ""
        raise UnitError(f"unknown duration unit {unit!r} in {text!r}{hint}; "
                        f"expected {_DURATION_HELP}")
    return value * _DURATION_UNITS[unit]


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse a shape written ``4x8``, ``49152x12288``, ``2,3,4`` or ``1024×1024``."""
    parts = re.split(r"\s*[x×,*]\s*", text.strip())
    if not text.strip() or any(not re.fullmatch(r"\d+", p) for p in parts):
        raise ShapeError(f"cannot read shape {text!r}; expected positive integers joined by 'x', "
                         "such as 4x8 or 1024x1024")
    dims = tuple(int(p) for p in parts)
    if any(d == 0 for d in dims):
        raise ShapeError(f"shape {text!r} has a zero dimension; every dimension must be >= 1")
    return dims


# ------------------------------------------------------------------------------- formatting

def _trim(number: str) -> str:
    """``6.3e+24`` → ``6.3e24``, ``1e-05`` → ``1e-5``."""
    if "e" not in number:
        return number
    mantissa, exponent = number.split("e")
    return f"{mantissa}e{int(exponent)}"


def format_sci(value: float, digits: int = 4) -> str:
    """A number in scientific notation with ``digits`` significant digits: ``6.3e24``."""
    if not math.isfinite(value):
        return str(value)  # "inf", "-inf", "nan"
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return _trim(f"{value:.{digits}g}")
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_count(value: float, digits: int = 4) -> str:
    """A count with a K/M/B/T suffix below 1e15, scientific above: ``70B``, ``6.3e24``."""
    magnitude = abs(value)
    for suffix, factor in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        mantissa = float(f"{value / factor:.{digits}g}")
        if 1 <= abs(mantissa) < 1000 and magnitude < 1000 * factor:
            return _trim(f"{value / factor:.{digits}g}") + suffix
    return _trim(f"{value:.{digits}g}")


def format_flops(value: float, digits: int = 4) -> str:
    """A FLOP count: ``6.3e24 FLOPs``."""
    return f"{_trim(f'{value:.{digits}g}')} FLOPs"


def format_bytes(value: float, unit: str = "auto", digits: int = 4) -> str:
    """Bytes in an explicit unit (``GB``, ``GiB``, ...) or the largest decimal one (``auto``)
    or binary one (``auto-binary``): ``format_bytes(2415919104, "MiB")`` → ``2304 MiB``."""
    if unit in ("auto", "auto-binary"):
        table = DECIMAL_BYTE_UNITS if unit == "auto" else {"B": 1, **BINARY_BYTE_UNITS}
        unit = "B"
        for name, factor in table.items():
            if name != "kB" and abs(value) >= factor:
                unit = name
    if unit not in _BYTE_UNITS:
        raise UnitError(f"unknown byte unit {unit!r}; known: {', '.join(_BYTE_UNITS)}")
    return f"{_trim(f'{value / _BYTE_UNITS[unit]:.{digits}g}')} {unit}"


def format_bandwidth(value: float, digits: int = 4) -> str:
    """Bytes per second in the largest decimal unit: ``3.35 TB/s``."""
    return format_bytes(value, "auto", digits) + "/s"


def format_flop_rate(value: float, digits: int = 4) -> str:
    """FLOP/s with an SI prefix: ``989.5 TFLOP/s``."""
    for prefix, factor in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6),
                           ("k", 1e3)):
        if abs(value) >= factor:
            return f"{_trim(f'{value / factor:.{digits}g}')} {prefix}FLOP/s"
    return f"{_trim(f'{value:.{digits}g}')} FLOP/s"


def format_duration(seconds: float, digits: int = 4) -> str:
    """A duration in the unit a person would pick: ``143.9 days``, ``2.5 h``, ``12 ms``."""
    magnitude = abs(seconds)
    for name, factor, floor in (("years", 365.0 * 86400, 2 * 365.0 * 86400),
                                ("days", 86400.0, 2 * 86400.0), ("h", 3600.0, 2 * 3600.0),
                                ("min", 60.0, 120.0), ("s", 1.0, 1.0), ("ms", 1e-3, 1e-3),
                                ("µs", 1e-6, 1e-6)):
        if magnitude >= floor:
            return f"{_trim(f'{seconds / factor:.{digits}g}')} {name}"
    return f"{_trim(f'{seconds / 1e-9:.{digits}g}')} ns"
