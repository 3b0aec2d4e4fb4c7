"""Load and validate hardware descriptions: the packaged catalog (``catalog.toml``), a user's
TOML file of the same shape, the probed local profile (``LOCAL``, :func:`local_profile_path`),
and the bounds each figure is checked against.

What a chip *is* once loaded (:class:`Hardware`, :class:`Efficiency`, :class:`Calibration`,
:func:`interpolate`) lives in :mod:`tensorledger.hardware.chip`; those names are re-exported
here so ``from tensorledger.hardware.catalog import Hardware`` keeps working.
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tensorledger.errors import ConfigError, TensorLedgerError, UnknownNameError
from tensorledger.files import parse_toml_text, read_text_file
from tensorledger.hardware.chip import (
    BETWEEN_GROUPS,
    COMPUTE_KEYS,
    Calibration,
    Efficiency,
    Hardware,
    interpolate,
)
from tensorledger.units import parse_bandwidth, parse_bytes, parse_duration, parse_flop_rate

__all__ = [
    "BETWEEN_GROUPS",
    "COMPUTE_KEYS",
    "LOCAL",
    "MAX_DEVICES_PER_NODE",
    "MAX_HARDWARE_FILE_BYTES",
    "MAX_HOP_LATENCY_S",
    "MAX_OP_OVERHEAD_S",
    "MAX_QUANTITY",
    "Calibration",
    "Efficiency",
    "Hardware",
    "catalog",
    "get_hardware",
    "interpolate",
    "is_hardware_path",
    "load_hardware_file",
    "local_profile_path",
    "parse_hardware_toml",
]

#: The largest hardware TOML file read (a probed profile is a few KiB).
MAX_HARDWARE_FILE_BYTES = 1 * 2**20
#: Every bytes, bytes/s and FLOP/s figure of a chip (and each point of its curves) lies in
#: [1, MAX_QUANTITY] of its unit: a billion times beyond any chip, far below a float's overflow.
MAX_QUANTITY = 1e30
#: The largest per-op overhead a chip may state.
MAX_OP_OVERHEAD_S = 3600.0

_REQUIRED = ("name", "memory", "memory_bandwidth", "dense")
_OPTIONAL = ("vendor", "aliases", "interconnect", "interconnect_kind", "source", "sparse",
             "sources", "notes", "op_overhead", "inference_op_overhead", "fresh_pages_from",
             "fresh_page_rate", "curves", "expected",
             "unreliable", "calibration", "compute_capability", "host_link", "host_link_kind")
_EXPECTED_KEYS = ("matmul", "attention", "memory_bandwidth", "op_overhead", "source", "sources")
#: The node topology of a chip (each optional; a collective needs the ones its group uses):
#: bandwidths are per device and per direction, latencies per hop of a ring.
_TOPOLOGY = ("devices_per_node", "node_kind", "intra_node_bandwidth", "inter_node_bandwidth",
             "inter_node_kind", "intra_node_latency", "inter_node_latency", "topology_source")
#: The most devices a node may state.
MAX_DEVICES_PER_NODE = 2**16
#: The longest hop latency a chip may state.
MAX_HOP_LATENCY_S = 1.0

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


def _toml_type(value: Any) -> str:
    """What a TOML value is, in TOML's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, datetime.date | datetime.time):
        return "a date or time"
    if isinstance(value, str):
        return "a string"
    return "a number"


def _number(chip: str, key: str, value: Any, parse: Callable[[Any], float], where: str,
            *, low: float = 1.0, high: float = MAX_QUANTITY, example: str = '"80GB"') -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: [{chip}] {key} must be a quantity such as {example}, not "
                          f"{_toml_type(value)}")
    try:
        number = parse(value)
    except TensorLedgerError as error:
        raise ConfigError(f"{where}: [{chip}] {key}: {error}") from None
    if not low <= number <= high:
        raise ConfigError(f"{where}: [{chip}] {key} = {_short(value)} is out of range; it must "
                          f"be positive, from {low:g} to {high:g} in its unit, such as {example}")
    return number


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + "…"


def _text(chip: str, key: str, value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: [{chip}] {key} must be a string, not {_toml_type(value)}")
    return value


def _peaks(chip: str, table: Any, what: str, where: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [{chip}.{what}] must be a table such as "
                          "{ bf16 = \"989.5TFLOP/s\" }")
    unknown = sorted(set(table) - set(COMPUTE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: [{chip}.{what}] has unknown dtype {_short(unknown[0])}; "
                          f"known: {', '.join(COMPUTE_KEYS)}")
    return {k: _number(chip, f"{what}.{k}", v, parse_flop_rate, where, example='"989.5TFLOP/s"')
            for k, v in table.items()}


def _point_value(value: Any) -> bool:
    """A point of a curve: a finite number (not a boolean) from 1 to ``MAX_QUANTITY``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return False
    return math.isfinite(number) and 1.0 <= number <= MAX_QUANTITY


def _curves(chip: str, raw: Any, where: str) -> dict[str, tuple[tuple[float, float], ...]]:
    """``[curves]`` of a profile: each a list of [size, rate] pairs with sizes increasing."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}.curves] must be a table of [[size, rate], ...]")
    curves = {}
    for name, points in raw.items():
        ok = isinstance(points, list) and len(points) >= 1 and all(
            isinstance(p, list) and len(p) == 2 and all(_point_value(v) for v in p)
            for p in points)
        sizes = [float(p[0]) for p in points] if ok else []
        if not ok or sizes != sorted(set(sizes)):
            raise ConfigError(f"{where}: [{chip}.curves] {_short(name)} must be [[size, rate], "
                              f"...] with finite numbers from 1 to {MAX_QUANTITY:g} and sizes "
                              "increasing")
        curves[str(name)] = tuple((float(x), float(y)) for x, y in points)
    return curves


def _sources(chip: str, raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"{where}: [{chip}.sources] must be a table of strings such as "
                          "{ memory = \"the datasheet\" }")
    return dict(raw)


def _fraction(chip: str, key: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{where}: [{chip}.expected] {key} must be a fraction above 0 and at "
                          f"most 1, such as 0.8, not {_short(value)}")
    return float(value)


def _efficiency(chip: str, raw: Any, where: str) -> Efficiency:
    """``[chip.expected]``: published fractions of the datasheet figures, each sourced."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}.expected] must be a table")
    unknown = sorted(set(raw) - set(_EXPECTED_KEYS))
    missing = [k for k in ("matmul", "memory_bandwidth", "op_overhead") if k not in raw]
    if unknown or missing:
        raise ConfigError(f"{where}: [{chip}.expected] " + (
            f"has unknown key {_short(unknown[0])}" if unknown else
            f"lacks {', '.join(missing)}") + f"; it takes {', '.join(_EXPECTED_KEYS)}")
    table = raw["matmul"]
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{where}: [{chip}.expected.matmul] must be a table such as "
                          "{ bf16 = [[2.1e9, 0.5], [1.1e12, 0.8]] } (FLOPs of one matmul, "
                          "fraction of the dense peak)")
    matmul = {}
    for name, points in table.items():
        if name not in (*COMPUTE_KEYS, "default"):
            raise ConfigError(f"{where}: [{chip}.expected.matmul] has unknown dtype "
                              f"{_short(name)}; known: {', '.join(COMPUTE_KEYS)}, default")
        ok = isinstance(points, list) and len(points) >= 1 and all(
            isinstance(p, list) and len(p) == 2 and _point_value(p[0]) for p in points)
        if not ok:
            raise ConfigError(f"{where}: [{chip}.expected.matmul] {name} must be [[FLOPs, "
                              "fraction], ...] with sizes increasing")
        sizes = [float(p[0]) for p in points]
        if sizes != sorted(set(sizes)):
            raise ConfigError(f"{where}: [{chip}.expected.matmul] {name}: sizes must increase")
        matmul[name] = tuple((float(p[0]), _fraction(chip, f"matmul.{name}", p[1], where))
                             for p in points)
    sources = _sources(f"{chip}.expected", raw.get("sources", {}), where)
    sources["*"] = _text(chip, "expected.source", raw.get("source", ""), where)
    return Efficiency(
        matmul=matmul,
        attention=None if "attention" not in raw else _fraction(chip, "attention",
                                                               raw["attention"], where),
        memory_bandwidth=_fraction(chip, "memory_bandwidth", raw["memory_bandwidth"], where),
        op_overhead_s=_number(chip, "expected.op_overhead", raw["op_overhead"], parse_duration,
                              where, low=1e-12, high=MAX_OP_OVERHEAD_S, example='"5us"'),
        sources=sources)


def _chip(chip: str, raw: Any, where: str, origin: str) -> Hardware:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}] must be a table")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise ConfigError(f"{where}: [{chip}] lacks {', '.join(missing)}; a chip needs "
                          f"{', '.join(_REQUIRED)}")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL) - set(_TOPOLOGY))
    if unknown:
        raise ConfigError(f"{where}: [{chip}] has unknown key {unknown[0]!r}; known: "
                          f"{', '.join(_REQUIRED + _OPTIONAL + _TOPOLOGY)}")
    dense = _peaks(chip, raw["dense"], "dense", where)
    if not dense:
        raise ConfigError(f"{where}: [{chip}.dense] needs at least one peak")
    sparse = _peaks(chip, raw.get("sparse", {}), "sparse", where)
    sources = _sources(chip, raw.get("sources", {}), where)
    default_source = _text(chip, "source", raw.get("source", ""), where)
    sources["*"] = default_source or f"user file {origin}"
    interconnect = raw.get("interconnect")
    interconnect_kind = raw.get("interconnect_kind")
    topology = _topology(chip, raw, where, sources)
    calibration = None if "calibration" not in raw else _calibration(
        chip, raw["calibration"], where)
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError(f"{where}: [{chip}] aliases must be an array of strings such as "
                          "[\"h100\"], not " + _toml_type(aliases))
    return Hardware(
        id=chip,
        name=_text(chip, "name", raw["name"], where),
        vendor=_text(chip, "vendor", raw.get("vendor", ""), where),
        compute_capability=_capability(chip, raw.get("compute_capability"), where),
        aliases=tuple(a.lower() for a in aliases),
        memory_bytes=_number(chip, "memory", raw["memory"], parse_bytes, where),
        memory_bandwidth_bytes_per_s=_number(chip, "memory_bandwidth", raw["memory_bandwidth"],
                                             parse_bandwidth, where, example='"3.35TB/s"'),
        interconnect_bytes_per_s=None if interconnect is None else _number(
            chip, "interconnect", interconnect, parse_bandwidth, where, example='"900GB/s"'),
        interconnect_kind=None if interconnect_kind is None else _text(
            chip, "interconnect_kind", interconnect_kind, where),
        host_link_bytes_per_s=None if "host_link" not in raw else _number(
            chip, "host_link", raw["host_link"], parse_bandwidth, where, example='"64GB/s"'),
        host_link_kind=None if "host_link_kind" not in raw else _text(
            chip, "host_link_kind", raw["host_link_kind"], where),
        dense_flop_per_s=dense,
        sparse_flop_per_s=sparse,
        sources=sources,
        origin=origin,
        notes=_text(chip, "notes", raw.get("notes", ""), where),
        op_overhead_s=0.0 if "op_overhead" not in raw else _number(
            chip, "op_overhead", raw["op_overhead"], parse_duration, where, low=1e-12,
            high=MAX_OP_OVERHEAD_S, example='"5us"'),
        inference_op_overhead_s=0.0 if "inference_op_overhead" not in raw else _number(
            chip, "inference_op_overhead", raw["inference_op_overhead"], parse_duration, where,
            low=1e-12, high=MAX_OP_OVERHEAD_S, example='"5us"'),
        fresh_pages_from_bytes=0.0 if "fresh_pages_from" not in raw else _number(
            chip, "fresh_pages_from", raw["fresh_pages_from"], parse_bytes, where,
            example='"32MiB"'),
        fresh_page_bytes_per_s=0.0 if "fresh_page_rate" not in raw else _number(
            chip, "fresh_page_rate", raw["fresh_page_rate"], parse_bandwidth, where,
            example='"5GB/s"'),
        curves=_curves(chip, raw.get("curves", {}), where),
        efficiency=None if "expected" not in raw else _efficiency(chip, raw["expected"], where),
        unreliable=_unreliable(chip, raw.get("unreliable", []), where) + (
            calibration.unreliable if calibration is not None else ()),
        calibration=calibration,
        **topology,
    )


def _capability(chip: str, raw: Any, where: str) -> str | None:
    """``compute_capability``: NVIDIA's "major.minor" (``"9.0"``), or absent."""
    if raw is None:
        return None
    parts = raw.split(".") if isinstance(raw, str) else []
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 2 for p in parts):
        raise ConfigError(f"{where}: [{chip}] compute_capability must be NVIDIA's "
                          f"\"major.minor\" such as \"9.0\", not {_short(raw)}")
    return str(raw)


def _calibration(chip: str, raw: Any, where: str, table: str = "calibration"
                 ) -> Calibration:
    """``[calibration]`` of a probed profile: ``scale`` (cost class → factor), ``call_cost``
    and ``piece_cost`` (cost class → duration), ``op_cost`` and ``op_cost_by_footprint``, and
    ``between_ops`` (``forward-backward``, ``optimizer`` → duration), ``view_weights`` (view
    op → factor), and ``low_precision``: the fit of the low-precision recipes' steps
    (``Calibration.low_precision``), a table of the same keys less ``unreliable`` (its steps
    are named in this one's) and ``low_precision``."""
    keys = ["scale", "op_cost", "call_cost", "piece_cost", "op_cost_by_footprint",
            "view_weights", "between_ops", "source"]
    if table == "calibration":  # not the low-precision fit within it
        keys += ["unreliable", "low_precision"]
    if not isinstance(raw, dict) or set(raw) - set(keys):
        raise ConfigError(f"{where}: [{chip}.{table}] takes {', '.join(keys[:-1])} and "
                          f"{keys[-1]} (a profile from an older tensorledger: run "
                          "`tensorledger probe` again)")
    scales = _factors(chip, raw, "scale", "{ matmul = 1.2 }", where, table)
    weights = _factors(chip, raw, "view_weights", '{ "aten.t" = 2.0 }', where, table)
    between = raw.get("between_ops", {})
    if not isinstance(between, dict) or set(between) - {"forward-backward", "optimizer"}:
        raise ConfigError(f"{where}: [{chip}.{table}] between_ops must be a table with "
                          "forward-backward and optimizer durations, such as "
                          '{ optimizer = "4us" }')
    costs = {}
    for key in ("call_cost", "piece_cost"):
        found = raw.get(key, {})
        if not isinstance(found, dict):
            raise ConfigError(f"{where}: [{chip}.{table}] {key} must be a table of "
                              f'durations by class, such as {{ copy = "20us" }}')
        costs[key] = {str(k): _number(chip, f"{table}.{key}.{k}", v, parse_duration,
                                      where, low=0.0, high=MAX_OP_OVERHEAD_S, example='"20us"')
                      for k, v in found.items()}
    return Calibration(
        scale=scales,
        call_cost_s=costs["call_cost"], piece_cost_s=costs["piece_cost"],
        op_cost_s=0.0 if "op_cost" not in raw else _number(
            chip, f"{table}.op_cost", raw["op_cost"], parse_duration, where, low=0.0,
            high=MAX_OP_OVERHEAD_S, example='"2us"'),
        between_ops_s={k: _number(chip, f"{table}.between_ops.{k}", v, parse_duration,
                                  where, low=0.0, high=MAX_OP_OVERHEAD_S, example='"3us"')
                       for k, v in between.items()},
        source=_text(chip, f"{table}.source", raw.get("source", ""), where),
        unreliable=_unreliable(chip, raw.get("unreliable", []), where),
        op_cost_by_footprint=_footprint_curve(chip, raw.get("op_cost_by_footprint", []), where,
                                              table),
        view_weights=weights,
        low_precision=None if "low_precision" not in raw else _calibration(
            chip, raw["low_precision"], where, f"{table}.low_precision"))


#: The factors a profile's calibration may hold (``scale``, ``view_weights``).
FACTOR_RANGE = (0.01, 100.0)


def _factors(chip: str, raw: dict[str, Any], key: str, example: str, where: str,
             table: str) -> dict[str, float]:
    """``[calibration] key`` (or ``[table] key``): a table of factors within
    ``FACTOR_RANGE``."""
    found = raw.get(key, {})
    low, high = FACTOR_RANGE
    if not isinstance(found, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and low <= v <= high
            for v in found.values()):
        raise ConfigError(f"{where}: [{chip}.{table}] {key} must be a table of factors "
                          f"from {low:g} to {high:g}, such as {example}")
    return {str(k): float(v) for k, v in found.items()}


def _footprint_curve(chip: str, raw: Any, where: str, table: str
                     ) -> tuple[tuple[float, float], ...]:
    """``op_cost_by_footprint``: [[bytes, seconds], ...], bytes increasing, each cost above 0
    and at most ``MAX_OP_OVERHEAD_S``."""
    ok = isinstance(raw, list) and all(
        isinstance(p, list) and len(p) == 2 and _point_value(p[0]) and isinstance(
            p[1], int | float) and not isinstance(p[1], bool) and 0 < p[1] <= MAX_OP_OVERHEAD_S
        for p in raw)
    sizes = [float(p[0]) for p in raw] if ok else []
    if not ok or sizes != sorted(set(sizes)):
        raise ConfigError(f"{where}: [{chip}.{table}] op_cost_by_footprint must be "
                          "[[bytes, seconds], ...] with bytes increasing and each cost above 0 "
                          f"and at most {MAX_OP_OVERHEAD_S:g} s")
    return tuple((float(x), float(y)) for x, y in raw)


def _unreliable(chip: str, raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ConfigError(f"{where}: [{chip}] unreliable must be an array of strings naming "
                          "figures, such as [\"matmul fp32 256\"]")
    return tuple(raw)


def _topology(chip: str, raw: dict[str, Any], where: str, sources: dict[str, str]
              ) -> dict[str, Any]:
    """The node topology keys of a chip as :class:`Hardware` fields; ``topology_source``
    becomes the source of each topology number that ``[sources]`` does not name itself."""
    fields: dict[str, Any] = {}
    count = raw.get("devices_per_node")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_DEVICES_PER_NODE):
            raise ConfigError(f"{where}: [{chip}] devices_per_node must be a whole number from "
                              f"1 to {MAX_DEVICES_PER_NODE}, such as 8, not {_short(count)}")
        fields["devices_per_node"] = count
    for key in ("intra_node_bandwidth", "inter_node_bandwidth"):
        if key in raw:
            fields[key.replace("bandwidth", "bytes_per_s")] = _number(
                chip, key, raw[key], parse_bandwidth, where, example='"450GB/s"')
    for key in ("intra_node_latency", "inter_node_latency"):
        if key in raw:
            fields[key + "_s"] = _number(chip, key, raw[key], parse_duration, where, low=1e-12,
                                         high=MAX_HOP_LATENCY_S, example='"2.7us"')
    for key in ("node_kind", "inter_node_kind"):
        if key in raw:
            fields[key] = _text(chip, key, raw[key], where)
    if "inter_node_bandwidth" in raw and count is None:
        raise ConfigError(f"{where}: [{chip}] inter_node_bandwidth needs devices_per_node (how "
                          "many devices share a node before a group crosses the network)")
    source = _text(chip, "topology_source", raw.get("topology_source", ""), where)
    if source:
        for key in _TOPOLOGY[:-1]:
            if key in raw:
                sources.setdefault(key, source)
    return fields


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    return parse_toml_text(text, where=where)


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
    text = read_text_file(path, what="hardware file", max_bytes=MAX_HARDWARE_FILE_BYTES)
    return parse_hardware_toml(text, str(path), path.stem)


def parse_hardware_toml(text: str, where: str, stem: str = "file") -> Hardware:
    """A chip from the text of a hardware file (see :func:`load_hardware_file`); ``stem`` is
    its id when the text names none."""
    data = _parse_toml(text, where)
    if "dense" in data or "memory" in data:
        chip = _text("file", "id", data.pop("id", stem), where)
        return _chip(chip, data, where, where)
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if len(tables) != 1 or len(data) != 1:
        raise ConfigError(f"{where}: expected one chip (keys name, memory, memory_bandwidth and a "
                          "[dense] table), or exactly one [chip-id] table")
    ((chip, raw),) = tables.items()
    return _chip(chip, raw, where, where)


def is_hardware_path(spec: str) -> bool:
    """Whether ``spec`` names a file rather than a chip: it holds a path separator or ends in
    ``.toml``.  A file named ``h100`` in the working folder is not read for ``h100``."""
    separators = {"/", os.sep, os.altsep or "/"}
    return any(sep in spec for sep in separators) or spec.strip().lower().endswith(".toml")


def get_hardware(spec: str) -> Hardware:
    """A chip by catalog id or alias (``h100`` → ``h100-sxm``), from a path (one with a
    separator, or ending in ``.toml``), or ``local``: this machine's profile as measured by
    ``tensorledger probe``."""
    if spec.strip().lower() == LOCAL:
        path = local_profile_path()
        try:
            present = path.is_file()
        except OSError:
            present = False
        if not present:
            raise ConfigError(f"no local hardware profile at {path}; run `tensorledger probe` "
                              "first (or pass a catalog chip or a TOML file)")
        return load_hardware_file(path)
    if is_hardware_path(spec):
        return load_hardware_file(spec)
    key = spec.strip().lower()
    chips = catalog()
    if key in chips:
        return chips[key]
    for chip in chips.values():
        if key in chip.aliases:
            return chip
    raise UnknownNameError("hardware", spec, chips)

