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
import unicodedata

from tensorledger.errors import ShapeError, UnitError

__all__ = [
    "BINARY_BYTE_UNITS",
    "DECIMAL_BYTE_UNITS",
    "MAX_DIMS",
    "MAX_ELEMENTS",
    "MAX_INT64",
    "MAX_TEXT_CHARS",
    "NUMBER_RULES",
    "check_ascii_number",
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
    "parse_integer",
    "parse_real",
    "parse_shape",
    "shown",
]

#: The largest whole number passed on (to torch, to a seed, to a size): torch's int64.
MAX_INT64 = 2**63 - 1
#: The most dimensions a shape may have (torch's own limit is 64 too).
MAX_DIMS = 64
#: The most elements a shape may hold: what an int64 element count can say.
MAX_ELEMENTS = MAX_INT64
#: The longest text read as one number or quantity.
MAX_TEXT_CHARS = 100
#: What is accepted as a number, for help texts and error messages.
NUMBER_RULES = ("ASCII digits 0-9 only, with an optional decimal point and exponent (1e9); "
                "no digits of other scripts, no thousands separators")

_NUMBER = r"(?P<sign>[+-]?)(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(r"^\s*" + _NUMBER + r"\s*(?P<unit>[^\s\d].*?)?\s*$", re.ASCII)
_INTEGER = re.compile(r"^\s*(?P<sign>[+-]?)(?P<digits>\d+)\s*$", re.ASCII)
_REAL = re.compile(r"^\s*(?P<sign>[+-]?)(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*$",
                   re.ASCII)

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


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, shortened to ``limit`` characters (a 5000-digit number
    stays one readable line)."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit - 12] + "…" + text[-8:]) + f" ({len(text):,} characters)"


def check_ascii_number(text: str, what: str) -> str:
    """``text`` unchanged unless it is too long or holds digits of another script
    (``٧٠``, ``７０``): those are refused, saying why."""
    if len(text) > MAX_TEXT_CHARS:
        raise UnitError(f"{_subject(what, text)} is too long; at most {MAX_TEXT_CHARS} "
                        "characters are read as a number")
    problem = _foreign_digit(text)
    if problem:
        raise UnitError(f"{_subject(what, text)} holds {problem}; numbers are read in "
                        f"{NUMBER_RULES}")
    return text


def _foreign_digit(text: str) -> str:
    """The first digit of another script in ``text``, described, or ``""``."""
    for char in text:
        if not char.isascii() and (char.isdigit() or char.isnumeric()):
            return f"{char!r} ({unicodedata.name(char, f'U+{ord(char):04X}')})"
    return ""


def _plain(value: float, what: str) -> float:
    """A number given as a number, not a string: finite and non-negative."""
    try:
        finite = not isinstance(value, bool) and math.isfinite(value)
    except (OverflowError, TypeError):  # an int beyond a float's range, or not a number at all
        finite = False
    if not finite or value < 0:
        raise UnitError(f"{what} {shown(str(value))} must be a finite, non-negative number")
    return float(value)


def _split(text: str, what: str, help_: str) -> tuple[float, str]:
    check_ascii_number(text, what)
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(f"cannot read {shown(text)} as {what}; expected {help_}")
    if match["sign"] == "-":
        raise UnitError(f"{what} {shown(text)} is negative; expected {help_}")
    value = float(match["num"])
    if not math.isfinite(value):
        raise UnitError(f"{what} {shown(text)} is too large to be a finite number; "
                        f"expected {help_}")
    return value, (match["unit"] or "").strip()


def parse_integer(text: str | int, *, what: str, minimum: int = 0,
                  maximum: int = MAX_INT64) -> int:
    """A whole number written in ASCII digits, from ``minimum`` to ``maximum`` (int64 by
    default), refused with the user's own text otherwise.

    >>> parse_integer("4096", what="--n"), parse_integer("-3", what="--axis", minimum=-64)
    (4096, -3)
    """
    if isinstance(text, bool):
        raise UnitError(f"{_subject(what, str(text))} is not a whole number")
    bounds = f"a whole number from {minimum} to {maximum}"
    if isinstance(text, int):
        value = text
        shown_text = _subject(what, str(text))
    else:
        match = _INTEGER.match(text)
        shown_text = _subject(what, text)
        if match is None:
            check_ascii_number(text, what)
            extra = " (a fraction)" if _REAL.match(text) else ""
            raise UnitError(f"{shown_text} is not a whole number{extra}; expected {bounds} "
                            f"in {NUMBER_RULES}")
        digits = match["digits"].lstrip("0") or "0"
        if len(digits) > len(str(max(abs(minimum), abs(maximum)))):  # before int(): no limit hit
            raise UnitError(f"{shown_text} is out of range; expected {bounds}")
        value = int(match["sign"] + digits)
    if not minimum <= value <= maximum:
        raise UnitError(f"{shown_text} is out of range; expected {bounds}")
    return value


def _subject(what: str, text: str) -> str:
    """``--days '-1'``, or the quoted text alone when the caller names the option itself."""
    return f"{what} {shown(text)}" if what else shown(text)


def parse_real(text: str | float, *, what: str, minimum: float = -math.inf,
               maximum: float = math.inf, minimum_open: bool = False) -> float:
    """A finite number written in ASCII (``0.5``, ``-1.5``, ``1e-3``), from ``minimum`` to
    ``maximum`` (above ``minimum`` when ``minimum_open``); NaN and infinities are refused.

    >>> parse_real("0.5", what="--mfu", minimum=0, maximum=1, minimum_open=True)
    0.5
    """
    low = "(" if minimum_open else "["
    bounds = f"a finite number in {low}{minimum:g}, {maximum:g}]"
    if isinstance(text, str):
        check_ascii_number(text, what)
        shown_text = _subject(what, text)
        if re.fullmatch(r"\s*[+-]?(nan|inf|infinity)\s*", text, re.IGNORECASE):
            raise UnitError(f"{shown_text} is not finite; NaN and infinities are refused; "
                            f"expected {bounds}")
        match = _REAL.match(text)
        if match is None:
            raise UnitError(f"{shown_text} is not a number; expected {bounds}, written "
                            f"in {NUMBER_RULES}")
        value = float(match["sign"] + match["num"])
    else:
        value = float(text)
        shown_text = _subject(what, repr(text))
    if not math.isfinite(value):
        raise UnitError(f"{shown_text} is not finite (too large for a float, or NaN); "
                        f"expected {bounds}")
    if value < minimum or (minimum_open and value == minimum) or value > maximum:
        raise UnitError(f"{shown_text} is out of range; expected {bounds}")
    return value


def parse_count(text: str | float | int) -> float:
    """Parse a count: ``70B`` → 7e10, ``15T`` → 1.5e13, ``1.5M`` → 1.5e6, ``70e9`` → 7e10."""
    if not isinstance(text, str):
        return _plain(text, "count")
    value, unit = _split(text, "a count", _COUNT_HELP)
    if unit not in _COUNT_SUFFIXES:
        hint = " (lower-case m and b are ambiguous)" if unit in {"m", "b", "t"} else ""
        raise UnitError(f"unknown count suffix {shown(unit)} in {shown(text)}{hint}; "
                        f"expected {_COUNT_HELP}")
    return _finite(value * _COUNT_SUFFIXES[unit], text, "a count", _COUNT_HELP)


def _finite(value: float, text: str, what: str, help_: str) -> float:
    """A product of a number and its unit that still fits a float (1e307T does not)."""
    if not math.isfinite(value):
        raise UnitError(f"{what} {shown(text)} is too large to be a finite number; "
                        f"expected {help_}")
    return value


def parse_flops(text: str | float | int) -> float:
    """Parse a FLOP count: ``3.14e23``, ``6.3e24FLOPs``, ``15T`` (a count of operations)."""
    if isinstance(text, str):
        if re.search(r"FLOP/s|FLOPS$", text):
            raise UnitError(f"{shown(text)} is a rate, not a count; expected {_FLOPS_HELP}")
        return parse_count(re.sub(r"\s*FLOPs?$", "", text.strip()))
    return parse_count(text)


def _byte_factor(unit: str, text: str, help_: str) -> int:
    if unit in _BYTE_UNITS:
        return _BYTE_UNITS[unit]
    if unit.lower() in {u.lower() for u in _BYTE_UNITS} or unit.endswith("b"):
        raise UnitError(f"ambiguous unit {shown(unit)} in {shown(text)} (bits or bytes?); "
                        f"expected {help_}")
    raise UnitError(f"unknown unit {shown(unit)} in {shown(text)}; expected {help_}")


def parse_bytes(text: str | float | int) -> float:
    """Parse a byte size; decimal (GB = 1e9) and binary (GiB = 2^30) units are kept apart."""
    if not isinstance(text, str):
        return _plain(text, "bytes")
    value, unit = _split(text, "bytes", _BYTES_HELP)
    if unit == "":
        return value
    return _finite(value * _byte_factor(unit, text, _BYTES_HELP), text, "bytes", _BYTES_HELP)


def parse_bandwidth(text: str | float | int) -> float:
    """Parse a bandwidth in bytes per second: ``3.35TB/s`` → 3.35e12."""
    if not isinstance(text, str):
        return _plain(text, "bandwidth")
    value, unit = _split(text, "a bandwidth", _BANDWIDTH_HELP)
    if unit == "":
        return value
    if not unit.endswith("/s"):
        raise UnitError(f"bandwidth {shown(text)} lacks '/s'; expected {_BANDWIDTH_HELP}")
    return _finite(value * _byte_factor(unit[:-2], text, _BANDWIDTH_HELP), text, "a bandwidth",
                   _BANDWIDTH_HELP)


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
        raise UnitError(f"cannot read {shown(text)} as a compute rate{hint}; "
                        f"expected {_RATE_HELP}")
    return _finite(value * _SI_PREFIXES[match["prefix"]], text, "a compute rate", _RATE_HELP)


def parse_duration(text: str | float | int) -> float:
    """Parse a duration into seconds: ``2w``, ``14d``, ``36h``, ``90min``, ``30s``."""
    if not isinstance(text, str):
        raise UnitError(f"duration {shown(str(text))} needs a unit; expected {_DURATION_HELP}")
    value, unit = _split(text, "a duration", _DURATION_HELP)
    if unit == "":
        raise UnitError(f"duration {shown(str(text))} needs a unit; expected {_DURATION_HELP}")
    if unit not in _DURATION_UNITS:
        hint = " ('m' could be minutes or months)" if unit in {"m", "M"} else ""
        raise UnitError(f"unknown duration unit {shown(unit)} in {shown(text)}{hint}; "
                        f"expected {_DURATION_HELP}")
    return _finite(value * _DURATION_UNITS[unit], text, "a duration", _DURATION_HELP)


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse a shape written ``4x8``, ``49152x12288``, ``2,3,4`` or ``1024×1024``.

    At most :data:`MAX_DIMS` dimensions of ASCII digits, each >= 1, and at most
    :data:`MAX_ELEMENTS` (2^63 - 1) elements in all.
    """
    expected = ("expected positive whole numbers in ASCII digits joined by 'x', such as 4x8 or "
                "1024x1024")
    if len(text) > 4 * MAX_TEXT_CHARS:
        raise ShapeError(f"shape {shown(text)} is too long; {expected}")
    problem = _foreign_digit(text)
    if problem:
        raise ShapeError(f"shape {shown(text)} holds {problem}; {expected}")
    parts = re.split(r"\s*[x×,*]\s*", text.strip())
    if not text.strip() or any(not re.fullmatch(r"[0-9]+", p) for p in parts):
        raise ShapeError(f"cannot read shape {shown(text)}; {expected}")
    if len(parts) > MAX_DIMS:
        raise ShapeError(f"shape {shown(text)} has {len(parts)} dimensions; at most {MAX_DIMS}")
    if any(len(p.lstrip("0")) > len(str(MAX_ELEMENTS)) for p in parts):
        raise ShapeError(f"shape {shown(text)} has a dimension beyond 2^63 - 1; at most "
                         f"{MAX_ELEMENTS:,} elements in all")
    dims = tuple(int(p) for p in parts)
    if any(d == 0 for d in dims):
        raise ShapeError(f"shape {shown(text)} has a zero dimension; every dimension must be "
                         ">= 1")
    if math.prod(dims) > MAX_ELEMENTS:
        raise ShapeError(f"shape {shown(text)} has {math.prod(dims):.3g} elements; at most "
                         f"2^63 - 1 = {MAX_ELEMENTS:,}")
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
