"""Load and validate hardware descriptions (the packaged catalog or a user's TOML file)."""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import ConfigError, InputError, TensorLedgerError, UnknownNameError
from tensorledger.units import parse_bandwidth, parse_bytes, parse_duration, parse_flop_rate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["COMPUTE_KEYS", "LOCAL", "Hardware", "catalog", "get_hardware", "load_hardware_file",
           "local_profile_path"]

#: The keys a chip's peak table may use: one per arithmetic the hardware has a rate for.
COMPUTE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4")

_REQUIRED = ("name", "memory", "memory_bandwidth", "dense")
_OPTIONAL = ("vendor", "aliases", "interconnect", "interconnect_kind", "source", "sparse",
             "sources", "notes", "op_overhead", "curves")

#: The name under which ``tensorledger probe`` saves this machine's measured profile.
LOCAL = "local"


def local_profile_path() -> Path:
    """Where ``tensorledger probe`` saves, and ``--hardware local`` reads, the profile:
    ``$TENSORLEDGER_HOME/local.toml``, else ``$XDG_CACHE_HOME/tensorledger/local.toml``."""
    home = os.environ.get("TENSORLEDGER_HOME")
    if home:
        return Path(home) / "local.toml"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tensorledger" / "local.toml"


@dataclass(frozen=True)
class Hardware:
    """One accelerator.  Peaks are dense (no sparsity); ``sources`` covers every number."""

    id: str
    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    dense_flop_per_s: Mapping[str, float]
    sparse_flop_per_s: Mapping[str, float] = field(default_factory=dict)
    interconnect_bytes_per_s: float | None = None
    interconnect_kind: str | None = None
    vendor: str = ""
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    origin: str = "catalog"
    notes: str = ""
    op_overhead_s: float = 0.0  # fixed cost per op (launch, dispatch); measured by the probe
    # Measured rates by problem size, from the probe: "matmul.fp32" → ((flops, flop_per_s),
    # ...), "attention.fp32" likewise, "bandwidth" → ((bytes, bytes_per_s), ...).  Small
    # problems reach less than the peak (and small buffers more than DRAM bandwidth, from
    # cache); catalog chips have none and use their peaks throughout.
    curves: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    def compute_key(self, dtype: str) -> str:
        """The peak-table key for a dtype name: ``bfloat16`` → ``bf16``, ``e4m3`` → ``fp8``."""
        key = dtype.strip().lower()
        return key if key in COMPUTE_KEYS else resolve_dtype(key).compute

    def peak_flop_per_s(self, dtype: str) -> float:
        """Dense peak FLOP/s for arithmetic in ``dtype``; an error if the chip has none."""
        key = self.compute_key(dtype)
        if key not in self.dense_flop_per_s:
            raise InputError(f"{self.id} lists no dense {key} peak for dtype {dtype!r}; it lists: "
                             f"{', '.join(self.dense_flop_per_s)}")
        return self.dense_flop_per_s[key]

    def intensity_flop_per_byte(self, dtype: str) -> float:
        """The accelerator's intensity (the roofline's ridge point): peak / memory bandwidth."""
        return self.peak_flop_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    def attainable(self, curve: str, size: float, ceiling: float) -> float:
        """The rate measured for a problem of ``size`` on ``curve`` (log-log interpolation
        between probed points, flat beyond them), or ``ceiling`` when there is no curve."""
        points = self.curves.get(curve)
        if not points or size <= 0:
            return ceiling
        if size <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if size <= x1:
                t = math.log(size / x0) / math.log(x1 / x0)
                return float(math.exp(math.log(y0) + t * math.log(y1 / y0)))
        return points[-1][1]

    def source(self, key: str) -> str:
        """Where a number comes from: ``memory``, ``memory_bandwidth``, ``bf16``, ...;
        ``*`` is the chip's own source, which covers every number not named otherwise."""
        return self.sources.get(key) or self.sources.get("*", "")

    def specific_source(self, key: str) -> str:
        """The source named for this number alone, or ``""`` when the chip's source covers it."""
        return self.sources.get(key, "") if key != "*" else ""


def _number(chip: str, key: str, value: Any, parse: Callable[[str], float], where: str) -> float:
    try:
        number = parse(value)
    except TensorLedgerError as error:
        raise ConfigError(f"{where}: [{chip}] {key}: {error}") from None
    if number <= 0:
        raise ConfigError(f"{where}: [{chip}] {key} must be positive, got {value!r}")
    return number


def _peaks(chip: str, table: Any, what: str, where: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [{chip}.{what}] must be a table such as "
                          "{ bf16 = \"989.5TFLOP/s\" }")
    unknown = sorted(set(table) - set(COMPUTE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: [{chip}.{what}] has unknown dtype {unknown[0]!r}; "
                          f"known: {', '.join(COMPUTE_KEYS)}")
    return {k: _number(chip, f"{what}.{k}", v, parse_flop_rate, where) for k, v in table.items()}


def _curves(chip: str, raw: Any, where: str) -> dict[str, tuple[tuple[float, float], ...]]:
    """``[curves]`` of a profile: each a list of [size, rate] pairs with sizes increasing."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}.curves] must be a table of [[size, rate], ...]")
    curves = {}
    for name, points in raw.items():
        ok = isinstance(points, list) and len(points) >= 1 and all(
            isinstance(p, list) and len(p) == 2 and all(
                isinstance(v, int | float) and v > 0 for v in p) for p in points)
        sizes = [p[0] for p in points] if ok else []
        if not ok or sizes != sorted(set(sizes)):
            raise ConfigError(f"{where}: [{chip}.curves] {name} must be [[size, rate], ...] "
                              "with positive numbers and sizes increasing")
        curves[str(name)] = tuple((float(x), float(y)) for x, y in points)
    return curves


def _chip(chip: str, raw: Any, where: str, origin: str) -> Hardware:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}] must be a table")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise ConfigError(f"{where}: [{chip}] lacks {', '.join(missing)}; a chip needs "
                          f"{', '.join(_REQUIRED)}")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise ConfigError(f"{where}: [{chip}] has unknown key {unknown[0]!r}; known: "
                          f"{', '.join(_REQUIRED + _OPTIONAL)}")
    dense = _peaks(chip, raw["dense"], "dense", where)
    if not dense:
        raise ConfigError(f"{where}: [{chip}.dense] needs at least one peak")
    sparse = _peaks(chip, raw.get("sparse", {}), "sparse", where)
    sources = dict(raw.get("sources", {}))
    default_source = raw.get("source") or f"user file {origin}"
    sources["*"] = str(default_source)
    interconnect = raw.get("interconnect")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError(f"{where}: [{chip}] aliases must be a list of strings")
    return Hardware(
        id=chip,
        name=str(raw["name"]),
        vendor=str(raw.get("vendor", "")),
        aliases=tuple(aliases),
        memory_bytes=_number(chip, "memory", raw["memory"], parse_bytes, where),
        memory_bandwidth_bytes_per_s=_number(chip, "memory_bandwidth", raw["memory_bandwidth"],
                                             parse_bandwidth, where),
        interconnect_bytes_per_s=None if interconnect is None else _number(
            chip, "interconnect", interconnect, parse_bandwidth, where),
        interconnect_kind=raw.get("interconnect_kind"),
        dense_flop_per_s=dense,
        sparse_flop_per_s=sparse,
        sources=sources,
        origin=origin,
        notes=str(raw.get("notes", "")),
        op_overhead_s=0.0 if "op_overhead" not in raw else _number(
            chip, "op_overhead", raw["op_overhead"], parse_duration, where),
        curves=_curves(chip, raw.get("curves", {}), where),
    )


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{where}: not valid TOML: {error}") from None


@cache
def catalog() -> dict[str, Hardware]:
    """Every chip of the packaged catalog, by id."""
    text = resources.files("tensorledger.hardware").joinpath("catalog.toml").read_text("utf-8")
    data = _parse_toml(text, "catalog.toml")
    return {chip: _chip(chip, raw, "catalog.toml", "catalog") for chip, raw in data.items()}


def load_hardware_file(path: str | Path) -> Hardware:
    """A user's chip from a TOML file: either one chip's keys at the top level (the id is the
    file's stem, or ``id = ...``) or exactly one ``[chip-id]`` table."""
    path = Path(path)
    where = str(path)
    try:
        text = path.read_text("utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read hardware file {where}: {error.strerror}") from None
    data = _parse_toml(text, where)
    if "dense" in data or "memory" in data:
        chip = str(data.pop("id", path.stem))
        return _chip(chip, data, where, where)
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if len(tables) != 1 or len(data) != 1:
        raise ConfigError(f"{where}: expected one chip (keys name, memory, memory_bandwidth and a "
                          "[dense] table), or exactly one [chip-id] table")
    ((chip, raw),) = tables.items()
    return _chip(chip, raw, where, where)


def get_hardware(spec: str) -> Hardware:
    """A chip by catalog id or alias (``h100`` → ``h100-sxm``), from a ``.toml`` path, or
    ``local``: this machine's profile as measured by ``tensorledger probe``."""
    if spec.strip().lower() == LOCAL:
        path = local_profile_path()
        if not path.is_file():
            raise ConfigError(f"no local hardware profile at {path}; run `tensorledger probe` "
                              "first (or pass a catalog chip or a TOML file)")
        return load_hardware_file(path)
    if spec.endswith(".toml") or "/" in spec or Path(spec).is_file():
        return load_hardware_file(spec)
    key = spec.strip().lower()
    chips = catalog()
    if key in chips:
        return chips[key]
    for chip in chips.values():
        if key in chip.aliases:
            return chip
    raise UnknownNameError("hardware", spec, chips)

