"""The hardware file's parser pinned on TOML text written here: every field a chip states,
every default, and each one-line refusal word for word.

``catalog()`` is cached, and mutmut forks each mutant's worker from a process that has already
filled that cache, so the tests of the packaged catalog never run a mutated parser.  These parse
text themselves (``parse_hardware_toml``, and the table parsers where no file reaches a branch),
so a change to the parser shows here.  Each expected figure is the unit's definition applied by
hand (``"64GB"`` is 64 × 10⁹ bytes, ``"5us"`` 5 × 10⁻⁶ s), written beside it.
"""

from __future__ import annotations

import datetime
import importlib
import math
from pathlib import Path

import pytest

from tensorledger.errors import ConfigError, TensorLedgerError, UnknownNameError
from tensorledger.hardware.catalog import (
    Calibration,
    Efficiency,
    Hardware,
    get_hardware,
    is_hardware_path,
    load_hardware_file,
    local_profile_path,
    parse_hardware_toml,
)
from tensorledger.units import parse_bytes, parse_flop_rate

# the module (``tensorledger.hardware.catalog`` the attribute is the function ``catalog``)
catalog_module = importlib.import_module("tensorledger.hardware.catalog")

GB = 1e9  # "GB": 10⁹ bytes
GIB = 2**30  # "GiB"
MIB = 2**20  # "MiB"
T = 1e12  # "T" of TB/s, TFLOP/s
US = 1e-6  # "us": 10⁻⁶ s
NS = 1e-9  # "ns"
# the keys a chip may state, as the file format names them: required, optional, topology
KNOWN_KEYS = ("name, memory, memory_bandwidth, dense, vendor, aliases, interconnect, "
              "interconnect_kind, source, sparse, sources, notes, op_overhead, "
              "inference_op_overhead, fresh_pages_from, fresh_page_rate, curves, expected, "
              "unreliable, calibration, compute_capability, host_link, host_link_kind, "
              "devices_per_node, node_kind, intra_node_bandwidth, inter_node_bandwidth, "
              "inter_node_kind, intra_node_latency, inter_node_latency, topology_source")
DTYPES = "fp64, fp32, tf32, bf16, fp16, fp8, fp6, fp4, int8, int4"

BARE = 'name = "Bare"\nmemory = "64GB"\nmemory_bandwidth = "2TB/s"\n'
DENSE = '[dense]\nbf16 = "500TFLOP/s"\n'


def refusal(text: str, where: str = "lab.toml", stem: str = "c") -> str:
    """The one-line message ``parse_hardware_toml`` refuses ``text`` with."""
    with pytest.raises(ConfigError) as error:
        parse_hardware_toml(text, where, stem)
    message = str(error.value)
    assert "\n" not in message
    return message


def with_line(line: str) -> str:
    """BARE + DENSE with ``line`` in place of BARE's line of the same key, or added."""
    key = line.split(" = ")[0]
    kept = [kept for kept in BARE.splitlines() if kept.split(" = ")[0] != key]
    return "\n".join([*kept, line]) + "\n" + DENSE


def bare_chip(chip_id: str, where: str) -> Hardware:
    """BARE + DENSE as a chip, each field written out: 64 × 10⁹ bytes, 2 × 10¹² bytes/s, a bf16
    peak of 500 × 10¹² FLOP/s; nothing else stated, so nothing else known."""
    return Hardware(
        id=chip_id, name="Bare", memory_bytes=64 * GB, memory_bandwidth_bytes_per_s=2 * T,
        dense_flop_per_s={"bf16": 500 * T}, sparse_flop_per_s={},
        interconnect_bytes_per_s=None, interconnect_kind=None, host_link_bytes_per_s=None,
        host_link_kind=None, vendor="", compute_capability=None, aliases=(),
        sources={"*": f"user file {where}"}, origin=where, notes="", op_overhead_s=0.0,
        inference_op_overhead_s=0.0, fresh_pages_from_bytes=0.0, fresh_page_bytes_per_s=0.0,
        curves={}, efficiency=None, unreliable=(), calibration=None, devices_per_node=None,
        node_kind=None, intra_node_bytes_per_s=None, inter_node_bytes_per_s=None,
        inter_node_kind=None, intra_node_latency_s=None, inter_node_latency_s=None)


def test_a_bare_chip_takes_every_default() -> None:
    chip = parse_hardware_toml(BARE + DENSE, "lab.toml", "bare")
    assert chip == bare_chip("bare", "lab.toml")
    # no stem given: the id is "file"
    assert parse_hardware_toml(BARE + DENSE, "lab.toml").id == "file"


def test_one_chip_table_is_read_under_its_own_id() -> None:
    text = "[x1]\n" + BARE + "[x1.dense]\nbf16 = \"500TFLOP/s\"\n"
    assert parse_hardware_toml(text, "t.toml", "ignored") == bare_chip("x1", "t.toml")


FULL = '''id = "full-1"
name = "Full One"
vendor = "Acme"
compute_capability = "12.1"
aliases = ["F1", "Full"]
memory = "80GiB"
memory_bandwidth = "3.5TB/s"
interconnect = "900GB/s"
interconnect_kind = "Link 4"
host_link = "64GB/s"
host_link_kind = "PCIe 5.0 x16"
source = "the datasheet"
notes = "a note"
op_overhead = "5us"
inference_op_overhead = "4us"
fresh_pages_from = "32MiB"
fresh_page_rate = "5GB/s"
unreliable = ["matmul fp32 256"]
devices_per_node = 8
node_kind = "eight on a board"
intra_node_bandwidth = "450GB/s"
inter_node_bandwidth = "50GB/s"
inter_node_kind = "a NIC each"
intra_node_latency = "1us"
inter_node_latency = "3us"
topology_source = "the board's manual"
[dense]
bf16 = "1000TFLOP/s"
fp32 = "60TFLOP/s"
[sparse]
bf16 = "2000TFLOP/s"
[sources]
memory = "the box"
intra_node_bandwidth = "measured"
[curves]
bandwidth = [[1e3, 1e11], [1e9, 3e12]]
"matmul.bf16" = [[1, 2], [10, 20.5]]
[expected]
source = "my lab"
memory_bandwidth = 0.8
op_overhead = "3us"
attention = 0.5
[expected.matmul]
bf16 = [[1e6, 0.25], [1e10, 1]]
default = [[1e6, 0.125]]
[expected.sources]
matmul = "a paper"
[calibration]
source = "fitted"
op_cost = "2us"
unreliable = ["step A"]
scale = { matmul = 1.25, copy = 0.5 }
view_weights = { "aten.t" = 2.0 }
between_ops = { forward-backward = "30us", optimizer = "4us" }
call_cost = { copy = "20us" }
piece_cost = { matmul = "1ns" }
op_cost_by_footprint = [[1e4, 2e-6], [1e6, 4e-6]]
'''


def test_a_full_chip_reads_every_key() -> None:
    chip = parse_hardware_toml(FULL, "lab.toml", "stem")
    efficiency = Efficiency(
        matmul={"bf16": ((1e6, 0.25), (1e10, 1.0)), "default": ((1e6, 0.125),)},
        attention=0.5, memory_bandwidth=0.8, op_overhead_s=3 * US,
        sources={"matmul": "a paper", "*": "my lab"})
    calibration = Calibration(
        scale={"matmul": 1.25, "copy": 0.5}, op_cost_s=2 * US,
        between_ops_s={"forward-backward": 30 * US, "optimizer": 4 * US}, source="fitted",
        unreliable=("step A",), op_cost_by_footprint=((1e4, 2e-6), (1e6, 4e-6)),
        call_cost_s={"copy": 20 * US}, piece_cost_s={"matmul": 1 * NS},
        view_weights={"aten.t": 2.0})
    # topology_source covers each topology key [sources] does not name itself
    topology = "the board's manual"
    sources = {"memory": "the box", "intra_node_bandwidth": "measured", "*": "the datasheet",
               "devices_per_node": topology, "node_kind": topology,
               "inter_node_bandwidth": topology, "inter_node_kind": topology,
               "intra_node_latency": topology, "inter_node_latency": topology}
    assert chip == Hardware(
        id="full-1", name="Full One", vendor="Acme", compute_capability="12.1",
        aliases=("f1", "full"),  # lower-cased: get_hardware looks them up lower-cased
        memory_bytes=80 * GIB, memory_bandwidth_bytes_per_s=3.5 * T,
        interconnect_bytes_per_s=900 * GB, interconnect_kind="Link 4",
        host_link_bytes_per_s=64 * GB, host_link_kind="PCIe 5.0 x16",
        dense_flop_per_s={"bf16": 1000 * T, "fp32": 60 * T},
        sparse_flop_per_s={"bf16": 2000 * T}, sources=sources, origin="lab.toml",
        notes="a note", op_overhead_s=5 * US, inference_op_overhead_s=4 * US,
        fresh_pages_from_bytes=32 * MIB, fresh_page_bytes_per_s=5 * GB,
        curves={"bandwidth": ((1e3, 1e11), (1e9, 3e12)), "matmul.bf16": ((1.0, 2.0),
                                                                         (10.0, 20.5))},
        efficiency=efficiency,
        unreliable=("matmul fp32 256", "step A"),  # the chip's, then its calibration's
        calibration=calibration, devices_per_node=8, node_kind="eight on a board",
        intra_node_bytes_per_s=450 * GB, inter_node_bytes_per_s=50 * GB,
        inter_node_kind="a NIC each", intra_node_latency_s=1 * US,
        inter_node_latency_s=3 * US)
    for curve in chip.curves.values():  # numbers, not TOML's integers
        assert all(type(v) is float for point in curve for v in point)


def test_a_topology_without_its_source_names_none() -> None:
    chip = parse_hardware_toml(BARE + 'devices_per_node = 2\nintra_node_latency = "1s"\n'
                               + DENSE, "w", "c")
    assert chip.sources == {"*": "user file w"}  # no topology_source: nothing added
    assert (chip.devices_per_node, chip.intra_node_latency_s) == (2, 1.0)  # 1 s: the top
    assert chip.inter_node_bytes_per_s is None  # devices_per_node alone is no NIC


@pytest.mark.parametrize(("text", "message"), [
    # neither a chip at the top level nor exactly one table
    ("", "lab.toml: expected one chip (keys name, memory, memory_bandwidth and a [dense] "
         "table), or exactly one [chip-id] table"),
    ('name = "x"\n', "lab.toml: expected one chip (keys name, memory, memory_bandwidth and a "
                     "[dense] table), or exactly one [chip-id] table"),
    ('name = "x"\n[x1]\nname = "y"\n', "lab.toml: expected one chip (keys name, memory, "
     "memory_bandwidth and a [dense] table), or exactly one [chip-id] table"),
    ("[x1]\n[x2]\n", "lab.toml: expected one chip (keys name, memory, memory_bandwidth and a "
                     "[dense] table), or exactly one [chip-id] table"),
    # a top-level chip: one of memory and [dense] makes it one
    ('name = "x"\nmemory = "1GB"\n', "lab.toml: [c] lacks memory_bandwidth, dense; a chip "
                                     "needs name, memory, memory_bandwidth, dense"),
    (DENSE, "lab.toml: [c] lacks name, memory, memory_bandwidth; a chip needs name, memory, "
            "memory_bandwidth, dense"),
    ("id = 3\n" + BARE + DENSE, "lab.toml: [file] id must be a string, not a number"),
    ("[x1]\nmemory = 1\n", "lab.toml: [x1] lacks name, memory_bandwidth, dense; a chip needs "
                           "name, memory, memory_bandwidth, dense"),
    # the first unknown key in sorted order
    (BARE + "zeta = 1\nalpha = 2\n" + DENSE,
     f"lab.toml: [c] has unknown key 'alpha'; known: {KNOWN_KEYS}"),
    (BARE + "[dense]\n", "lab.toml: [c.dense] needs at least one peak"),
    (BARE + 'aliases = "h1"\n' + DENSE, 'lab.toml: [c] aliases must be an array of strings '
                                        'such as ["h100"], not a string'),
    (BARE + 'aliases = ["h1", 1]\n' + DENSE, 'lab.toml: [c] aliases must be an array of '
                                             'strings such as ["h100"], not an array'),
])
def test_a_chip_file_is_refused_in_one_line(text: str, message: str) -> None:
    assert refusal(text) == message


def test_text_that_is_no_toml_is_refused_naming_the_file() -> None:
    assert refusal(BARE + 'name = "twice"\n').startswith("lab.toml: not valid TOML: ")


def test_a_chip_that_is_no_table_is_refused() -> None:
    # parse_hardware_toml hands _chip tables only; the packaged catalog could hold another
    with pytest.raises(ConfigError) as error:
        catalog_module._chip("c", 3, "catalog.toml", "catalog")
    assert str(error.value) == "catalog.toml: [c] must be a table"


@pytest.mark.parametrize(("line", "message"), [
    ("memory = true", 'memory must be a quantity such as "80GB", not a boolean'),
    ("memory = [1]", 'memory must be a quantity such as "80GB", not an array'),
    ("memory = { a = 1 }", 'memory must be a quantity such as "80GB", not a table'),
    ("memory = 1979-05-27", 'memory must be a quantity such as "80GB", not a date or time'),
    ("memory = 07:32:00", 'memory must be a quantity such as "80GB", not a date or time'),
    ("memory = 0", 'memory = 0 is out of range; it must be positive, from 1 to 1e+30 in its '
                   'unit, such as "80GB"'),
    ("memory = 0.5", 'memory = 0.5 is out of range; it must be positive, from 1 to 1e+30 in '
                     'its unit, such as "80GB"'),
    ('memory = "2e30B"', "memory = '2e30B' is out of range; it must be positive, from 1 to "
                         '1e+30 in its unit, such as "80GB"'),
    ('memory_bandwidth = "0B/s"', "memory_bandwidth = '0B/s' is out of range; it must be "
                                  'positive, from 1 to 1e+30 in its unit, such as "3.35TB/s"'),
    ("interconnect = false", 'interconnect must be a quantity such as "900GB/s", not a '
                             "boolean"),
    ("host_link = false", 'host_link must be a quantity such as "64GB/s", not a boolean'),
    ("fresh_pages_from = false", 'fresh_pages_from must be a quantity such as "32MiB", not a '
                                 "boolean"),
    ("fresh_page_rate = false", 'fresh_page_rate must be a quantity such as "5GB/s", not a '
                                "boolean"),
    ('op_overhead = "0us"', "op_overhead = '0us' is out of range; it must be positive, from "
                            '1e-12 to 3600 in its unit, such as "5us"'),
    ('op_overhead = "2h"', "op_overhead = '2h' is out of range; it must be positive, from "
                           '1e-12 to 3600 in its unit, such as "5us"'),
    ('inference_op_overhead = "0us"', "inference_op_overhead = '0us' is out of range; it must "
                                      "be positive, from 1e-12 to 3600 in its unit, such as "
                                      '"5us"'),
    # a long value is cut to 30 characters and an ellipsis
    (f'memory = "{"9" * 40}GB"', f"memory = '{'9' * 29}… is out of range; it must be "
                                 'positive, from 1 to 1e+30 in its unit, such as "80GB"'),
    ("name = 1", "name must be a string, not a number"),
    ("vendor = 1", "vendor must be a string, not a number"),
    ("notes = true", "notes must be a string, not a boolean"),
    ("source = []", "source must be a string, not an array"),
    ("interconnect_kind = 4", "interconnect_kind must be a string, not a number"),
    ("host_link_kind = 4", "host_link_kind must be a string, not a number"),
    ("unreliable = [1]", 'unreliable must be an array of strings naming figures, such as '
                         '["matmul fp32 256"]'),
])
def test_a_bad_figure_is_refused_in_one_line(line: str, message: str) -> None:
    assert refusal(with_line(line)) == f"lab.toml: [c] {message}"


def test_a_unit_error_is_named_with_its_key() -> None:
    with pytest.raises(TensorLedgerError) as unit:
        parse_bytes("64Gb")  # the unit's own refusal (bits or bytes?), named under the key
    assert refusal(with_line('memory = "64Gb"')) == f"lab.toml: [c] memory: {unit.value}"
    # a bare number of bytes, written as text, is bytes
    assert parse_hardware_toml(with_line('memory = "64"'), "w", "c").memory_bytes == 64.0


def test_quantities_at_their_bounds_are_read() -> None:
    # 1 and 10³⁰ of a unit are the ends of the range, both in
    for memory, expected in (("1", 1.0), ("1e30", 1e30), ('"1B"', 1.0)):
        body = with_line(f"memory = {memory}")
        assert parse_hardware_toml(body, "w", "c").memory_bytes == expected
    # the per-op overhead from 10⁻¹² s (1 ps is below the file's units: 0.001 ns) to 3600 s
    for overhead, seconds in (('"0.001ns"', 0.001 * NS), ('"3600s"', 3600.0), ('"1h"', 3600.0)):
        chip = parse_hardware_toml(BARE + f"op_overhead = {overhead}\n" + DENSE, "w", "c")
        assert chip.op_overhead_s == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(("table", "message"), [
    ("dense = 3\n", 'lab.toml: [c.dense] must be a table such as { bf16 = "989.5TFLOP/s" }'),
    ("[dense]\nzz = 1\naa = 2\n", f"lab.toml: [c.dense] has unknown dtype 'aa'; known: {DTYPES}"),
    ("[dense]\nbf16 = true\n", 'lab.toml: [c] dense.bf16 must be a quantity such as '
                               '"989.5TFLOP/s", not a boolean'),
    (DENSE + "[sparse]\nbf16 = [1]\n", 'lab.toml: [c] sparse.bf16 must be a quantity such as '
                                       '"989.5TFLOP/s", not an array'),
    ("sparse = 3\n" + DENSE, 'lab.toml: [c.sparse] must be a table such as '
                             '{ bf16 = "989.5TFLOP/s" }'),
    (DENSE + "[sources]\nmemory = 1\n", 'lab.toml: [c.sources] must be a table of strings '
                                        'such as { memory = "the datasheet" }'),
])
def test_bad_peak_and_source_tables_are_refused(table: str, message: str) -> None:
    assert refusal(BARE + table) == message


def test_a_unit_error_in_a_peak_names_its_dtype() -> None:
    with pytest.raises(TensorLedgerError) as unit:
        parse_flop_rate("1TFLOPS")
    assert refusal(BARE + '[dense]\nfp8 = "1TFLOPS"\n') == f"lab.toml: [c] dense.fp8: {unit.value}"


CURVE_RULE = ("must be [[size, rate], ...] with finite numbers from 1 to 1e+30 and sizes "
              "increasing")


@pytest.mark.parametrize("curve", [
    "[]",  # no point
    "3",  # not a list
    "[3, 4]",  # points not pairs
    "[[1, 2, 3]]", "[[1]]",  # three numbers, one
    "[[0.5, 2]]", "[[2, 0.5]]",  # below 1
    "[[1, 2e30]]",  # beyond 10³⁰
    '[[1, "2"]]', "[[true, 2]]",  # a string, a boolean
    "[[1, inf]]", "[[nan, 1]]",
    "[[2, 1], [1, 3]]",  # sizes decreasing
    "[[2, 1], [2, 3]]",  # a size twice
])
def test_a_bad_curve_is_refused(curve: str) -> None:
    text = BARE + DENSE + f"[curves]\nbw = {curve}\n"
    assert refusal(text) == f"lab.toml: [c.curves] 'bw' {CURVE_RULE}"


def test_a_curve_of_one_point_and_of_bounds_is_read() -> None:
    text = BARE + DENSE + "[curves]\nbw = [[1, 1e30]]\nflat = [[1e30, 1]]\n"
    assert parse_hardware_toml(text, "w", "c").curves == {"bw": ((1.0, 1e30),),
                                                          "flat": ((1e30, 1.0),)}
    assert refusal(BARE + "curves = 3\n" + DENSE) == (
        "lab.toml: [c.curves] must be a table of [[size, rate], ...]")


@pytest.mark.parametrize(("value", "ok"), [
    (1, True), (1.0, True), (1e30, True), (0.999, False), (1.0000001e30, False),
    (True, False), ("5", False), (None, False), (math.nan, False), (math.inf, False),
    (10**400, False),  # an integer of 401 digits: beyond a float, not an error
])
def test_a_curves_point_value(value: object, ok: bool) -> None:
    assert catalog_module._point_value(value) is ok


@pytest.mark.parametrize(("value", "kind"), [
    (True, "a boolean"), ({}, "a table"), ([], "an array"),
    (datetime.date(2020, 1, 1), "a date or time"), (datetime.time(1, 2), "a date or time"),
    (datetime.datetime(2020, 1, 1, 1), "a date or time"), ("x", "a string"), (1, "a number"),
    (1.5, "a number"),
])
def test_toml_types_in_tomls_words(value: object, kind: str) -> None:
    assert catalog_module._toml_type(value) == kind


def test_short_values_are_shown_whole_and_long_ones_cut() -> None:
    assert catalog_module._short("a" * 38) == repr("a" * 38)  # 40 characters with the quotes
    assert catalog_module._short("a" * 39) == repr("a" * 39)[:30] + "…"  # 41: cut to 30
    assert catalog_module._short(12) == "12"


@pytest.mark.parametrize(("value", "shown"), [
    ('"9"', "'9'"), ('"9.0.1"', "'9.0.1'"), ('"123.0"', "'123.0'"), ('"9.123"', "'9.123'"),
    ('"a.b"', "'a.b'"), ('"9.x"', "'9.x'"), ('"٩.0"', "'٩.0'"), ('" 9.0"', "' 9.0'"),
    ("9.0", "9.0"), ('"9."', "'9.'"),
])
def test_a_bad_compute_capability_is_refused(value: str, shown: str) -> None:
    assert refusal(BARE + f"compute_capability = {value}\n" + DENSE) == (
        f'lab.toml: [c] compute_capability must be NVIDIA\'s "major.minor" such as "9.0", '
        f"not {shown}")


@pytest.mark.parametrize("value", ["9.0", "12.10", "0.0", "1.2"])
def test_a_compute_capability_of_one_or_two_digits_each_is_read(value: str) -> None:
    chip = parse_hardware_toml(BARE + f'compute_capability = "{value}"\n' + DENSE, "w", "c")
    assert chip.compute_capability == value


def test_where_the_local_profile_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TENSORLEDGER_HOME", "/tl")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert local_profile_path() == Path("/tl/local.toml")
    monkeypatch.setenv("TENSORLEDGER_HOME", "")  # empty: not set
    assert local_profile_path() == Path("/xdg/tensorledger/local.toml")
    monkeypatch.delenv("TENSORLEDGER_HOME")
    assert local_profile_path() == Path("/xdg/tensorledger/local.toml")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert local_profile_path() == tmp_path / ".cache" / "tensorledger" / "local.toml"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert local_profile_path() == tmp_path / ".cache" / "tensorledger" / "local.toml"


def test_local_reads_the_probed_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))
    missing = tmp_path / "local.toml"
    message = (f"no local hardware profile at {missing}; run `tensorledger probe` first (or "
               "pass a catalog chip or a TOML file)")
    with pytest.raises(ConfigError) as error:
        get_hardware(" Local ")
    assert str(error.value) == message
    missing.mkdir()  # a folder is no profile
    with pytest.raises(ConfigError) as error:
        get_hardware("local")
    assert str(error.value) == message
    missing.rmdir()
    missing.write_text(BARE + DENSE)
    assert get_hardware("LOCAL") == bare_chip("local", str(missing))  # the file's stem
    # a path the system cannot look at (a name too long) is no profile either
    long = tmp_path / ("x" * 300)
    monkeypatch.setenv("TENSORLEDGER_HOME", str(long))
    with pytest.raises(ConfigError) as error:
        get_hardware("local")
    assert str(error.value).startswith(f"no local hardware profile at {long / 'local.toml'};")


@pytest.mark.parametrize(("spec", "is_path"), [
    ("a/b", True), ("/chip", True), ("chip.toml", True), (" Chip.TOML ", True),
    ("h100", False), ("h100.tomlx", False), ("toml", False), ("a\\b", False), ("", False),
])
def test_a_path_is_told_from_a_name(spec: str, is_path: bool) -> None:
    assert is_hardware_path(spec) is is_path


def test_a_chip_is_found_by_id_alias_or_path(tmp_path: Path) -> None:
    assert get_hardware(" H100-SXM ").id == "h100-sxm"
    assert get_hardware("H100-SXM5").id == "h100-sxm"  # an alias, lower-cased
    path = tmp_path / "my-chip.toml"
    path.write_text(BARE + DENSE)
    assert get_hardware(str(path)) == bare_chip("my-chip", str(path))
    assert load_hardware_file(path) == bare_chip("my-chip", str(path))
    with pytest.raises(UnknownNameError) as error:
        get_hardware("h999")
    assert error.value.name == "h999" and "h100-sxm" in error.value.known


def test_a_hardware_file_of_more_than_a_mebibyte_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    body = BARE + DENSE
    # padded with a comment to exactly 1 MiB: read; one byte more: refused
    path.write_text(body + "#" + "x" * (MIB - len(body) - 2) + "\n")
    assert path.stat().st_size == MIB
    assert load_hardware_file(path).memory_bytes == 64 * GB
    path.write_text(body + "#" + "x" * (MIB - len(body) - 1) + "\n")
    with pytest.raises(ConfigError, match=r"; at most 1 MiB are read"):
        load_hardware_file(path)
