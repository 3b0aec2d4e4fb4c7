"""A chip's inner tables pinned on TOML text written here: ``[expected]`` (published
efficiencies), ``[calibration]`` (a probed machine's fit), the node topology, each value at
its bounds and each refusal word for word.  (``catalog()`` is cached before mutmut switches a
mutant on: see ``test_catalog_pinned``.)"""

from __future__ import annotations

import pytest

from tensorledger.errors import ConfigError
from tensorledger.hardware.catalog import Calibration, Efficiency, Hardware, parse_hardware_toml

US = 1e-6  # "us": 10⁻⁶ s
BARE = ('name = "Bare"\nmemory = "64GB"\nmemory_bandwidth = "2TB/s"\n'
        '[dense]\nbf16 = "500TFLOP/s"\n')
EXPECTED_KEYS = "matmul, attention, memory_bandwidth, op_overhead, source, sources"
DTYPES = "fp64, fp32, tf32, bf16, fp16, fp8, fp6, fp4, int8, int4"


def read(tables: str, top: str = "") -> Hardware:
    """A chip of BARE's figures with ``top`` lines before them and ``tables`` after its
    [dense] table (text that opens no table goes on top)."""
    if not tables.startswith("["):
        top, tables = top + tables, ""
    return parse_hardware_toml(top + BARE + tables, "lab.toml", "c")


def refusal(tables: str, top: str = "") -> str:
    with pytest.raises(ConfigError) as error:
        read(tables, top)
    message = str(error.value)
    assert "\n" not in message
    return message


# ---- [expected] ----

MATMUL = "[expected.matmul]\nbf16 = [[1e6, 0.5]]\n"


def expected(lines: str, matmul: str = MATMUL) -> str:
    return "[expected]\n" + lines + matmul


def test_the_least_expected_table_is_read() -> None:
    chip = read(expected('memory_bandwidth = 1\nop_overhead = "1us"\n'))
    # no attention figure: None (the matmul fraction serves); no source: "" for every figure;
    # a fraction of 1 (the whole datasheet figure) is allowed, as a float
    assert chip.efficiency == Efficiency(matmul={"bf16": ((1e6, 0.5),)}, attention=None,
                                         memory_bandwidth=1.0, op_overhead_s=1 * US,
                                         sources={"*": ""})
    assert type(chip.efficiency.memory_bandwidth) is float


def test_expected_fractions_and_sizes_at_their_bounds() -> None:
    chip = read(expected('memory_bandwidth = 0.001\nop_overhead = "3600s"\nattention = 1\n',
                         "[expected.matmul]\ndefault = [[1, 1e-9], [1e30, 1]]\n"))
    assert chip.efficiency == Efficiency(matmul={"default": ((1.0, 1e-9), (1e30, 1.0))},
                                         attention=1.0, memory_bandwidth=0.001,
                                         op_overhead_s=3600.0, sources={"*": ""})


@pytest.mark.parametrize(("tables", "message"), [
    ("expected = 3\n", "lab.toml: [c.expected] must be a table"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\nzeta = 1\nspeed = 2\n'),
     f"lab.toml: [c.expected] has unknown key 'speed'; it takes {EXPECTED_KEYS}"),
    # an unknown key is named before the missing ones
    (expected("speed = 2\n", ""),
     f"lab.toml: [c.expected] has unknown key 'speed'; it takes {EXPECTED_KEYS}"),
    (expected('op_overhead = "1us"\n', ""),
     f"lab.toml: [c.expected] lacks matmul, memory_bandwidth; it takes {EXPECTED_KEYS}"),
    (expected("memory_bandwidth = 0.9\n"),
     f"lab.toml: [c.expected] lacks op_overhead; it takes {EXPECTED_KEYS}"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\nmatmul = 3\n', ""),
     "lab.toml: [c.expected.matmul] must be a table such as { bf16 = [[2.1e9, 0.5], [1.1e12, "
     "0.8]] } (FLOPs of one matmul, fraction of the dense peak)"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\nmatmul = {}\n', ""),
     "lab.toml: [c.expected.matmul] must be a table such as { bf16 = [[2.1e9, 0.5], [1.1e12, "
     "0.8]] } (FLOPs of one matmul, fraction of the dense peak)"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\n',
              "[expected.matmul]\nbf17 = [[1e6, 0.5]]\n"),
     f"lab.toml: [c.expected.matmul] has unknown dtype 'bf17'; known: {DTYPES}, default"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\n',
              "[expected.matmul]\nbf16 = [[1e6, 0.5], [1e6, 0.6]]\n"),
     "lab.toml: [c.expected.matmul] bf16: sizes must increase"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\n',
              "[expected.matmul]\nbf16 = [[1e7, 0.5], [1e6, 0.6]]\n"),
     "lab.toml: [c.expected.matmul] bf16: sizes must increase"),
    (expected('memory_bandwidth = 0\nop_overhead = "1us"\n'),
     "lab.toml: [c.expected] memory_bandwidth must be a fraction above 0 and at most 1, such "
     "as 0.8, not 0"),
    (expected('memory_bandwidth = 1.01\nop_overhead = "1us"\n'),
     "lab.toml: [c.expected] memory_bandwidth must be a fraction above 0 and at most 1, such "
     "as 0.8, not 1.01"),
    (expected('memory_bandwidth = true\nop_overhead = "1us"\n'),
     "lab.toml: [c.expected] memory_bandwidth must be a fraction above 0 and at most 1, such "
     "as 0.8, not True"),
    (expected('memory_bandwidth = "0.5"\nop_overhead = "1us"\n'),
     "lab.toml: [c.expected] memory_bandwidth must be a fraction above 0 and at most 1, such "
     "as 0.8, not '0.5'"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\nattention = -0.5\n'),
     "lab.toml: [c.expected] attention must be a fraction above 0 and at most 1, such as 0.8, "
     "not -0.5"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\n',
              "[expected.matmul]\nfp8 = [[1e6, 0]]\n"),
     "lab.toml: [c.expected] matmul.fp8 must be a fraction above 0 and at most 1, such as 0.8, "
     "not 0"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "0s"\n'),
     "lab.toml: [c] expected.op_overhead = '0s' is out of range; it must be positive, from "
     '1e-12 to 3600 in its unit, such as "5us"'),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\nsource = 3\n'),
     "lab.toml: [c] expected.source must be a string, not a number"),
    (expected('memory_bandwidth = 0.9\nop_overhead = "1us"\nsources = { matmul = 3 }\n'),
     'lab.toml: [c.expected.sources] must be a table of strings such as { memory = "the '
     'datasheet" }'),
])
def test_a_bad_expected_table_is_refused(tables: str, message: str) -> None:
    assert refusal(tables) == message


@pytest.mark.parametrize("points", [
    "[]", "3", "[1e6, 0.5]", "[[1e6]]", "[[1e6, 0.5, 1]]", "[[0.5, 0.5]]", "[[true, 0.5]]",
    '[["1e6", 0.5]]', "[[2e30, 0.5]]",
])
def test_a_bad_matmul_curve_is_refused(points: str) -> None:
    tables = expected('memory_bandwidth = 0.9\nop_overhead = "1us"\n',
                      f"[expected.matmul]\nbf16 = {points}\n")
    assert refusal(tables) == ("lab.toml: [c.expected.matmul] bf16 must be [[FLOPs, "
                               "fraction], ...] with sizes increasing")


# ---- [calibration] ----

OLD = ("lab.toml: [c.calibration] takes scale, op_cost, call_cost, piece_cost, "
       "op_cost_by_footprint, view_weights, between_ops, source, unreliable and "
       "low_precision (a profile from an older tensorledger: run `tensorledger probe` again)")
FOOTPRINT = ("lab.toml: [c.calibration] op_cost_by_footprint must be [[bytes, seconds], ...] "
             "with bytes increasing and each cost above 0 and at most 3600 s")


def test_an_empty_calibration_takes_every_default() -> None:
    chip = read("[calibration]\n")
    assert chip.calibration == Calibration(
        scale={}, op_cost_s=0.0, between_ops_s={}, source="", unreliable=(),
        op_cost_by_footprint=(), call_cost_s={}, piece_cost_s={}, view_weights={})
    assert chip.unreliable == ()


def test_calibration_figures_at_their_bounds() -> None:
    # durations of a calibration may be 0 (nothing measured) and up to 3600 s; factors from
    # 0.01 to 100; a footprint cost above 0 and up to 3600 s
    chip = read('[calibration]\nop_cost = "0s"\nscale = { a = 0.01, b = 100, c = 1 }\n'
                'view_weights = { "aten.t" = 0.01, "aten.unbind" = 100 }\n'
                'call_cost = { copy = "0s", norm = "3600s" }\n'
                'piece_cost = { copy = "0s", norm = "1h" }\n'
                'between_ops = { optimizer = "0s", forward-backward = "3600s" }\n'
                "op_cost_by_footprint = [[1, 1e-300], [1e30, 3600]]\n"
                'unreliable = ["fit B"]\n', top='unreliable = ["bw"]\n')
    assert chip.calibration == Calibration(
        scale={"a": 0.01, "b": 100.0, "c": 1.0}, op_cost_s=0.0,
        between_ops_s={"optimizer": 0.0, "forward-backward": 3600.0}, source="",
        unreliable=("fit B",), op_cost_by_footprint=((1.0, 1e-300), (1e30, 3600.0)),
        call_cost_s={"copy": 0.0, "norm": 3600.0}, piece_cost_s={"copy": 0.0, "norm": 3600.0},
        view_weights={"aten.t": 0.01, "aten.unbind": 100.0})
    assert chip.unreliable == ("bw", "fit B")
    assert all(type(v) is float for v in chip.calibration.scale.values())
    assert all(type(v) is float for point in chip.calibration.op_cost_by_footprint
               for v in point)


@pytest.mark.parametrize(("tables", "message"), [
    ("calibration = 3\n", OLD),
    ("[calibration]\nscale_by_size = {}\n", OLD),
    ("[calibration]\nbetween_ops = 3\n",
     "lab.toml: [c.calibration] between_ops must be a table with forward-backward and "
     'optimizer durations, such as { optimizer = "4us" }'),
    ('[calibration]\nbetween_ops = { forward = "1us" }\n',
     "lab.toml: [c.calibration] between_ops must be a table with forward-backward and "
     'optimizer durations, such as { optimizer = "4us" }'),
    ('[calibration]\nbetween_ops = { optimizer = "2h" }\n',
     "lab.toml: [c] calibration.between_ops.optimizer = '2h' is out of range; it must be "
     'positive, from 0 to 3600 in its unit, such as "3us"'),
    ('[calibration]\nop_cost = "2h"\n',
     "lab.toml: [c] calibration.op_cost = '2h' is out of range; it must be positive, from 0 "
     'to 3600 in its unit, such as "2us"'),
    ('[calibration]\ncall_cost = "20us"\n',
     "lab.toml: [c.calibration] call_cost must be a table of durations by class, such as "
     '{ copy = "20us" }'),
    ('[calibration]\npiece_cost = []\n',
     "lab.toml: [c.calibration] piece_cost must be a table of durations by class, such as "
     '{ copy = "20us" }'),
    ('[calibration]\ncall_cost = { copy = "2h" }\n',
     "lab.toml: [c] calibration.call_cost.copy = '2h' is out of range; it must be positive, "
     'from 0 to 3600 in its unit, such as "20us"'),
    ('[calibration]\npiece_cost = { copy = true }\n',
     'lab.toml: [c] calibration.piece_cost.copy must be a quantity such as "20us", not a '
     "boolean"),
    ("[calibration]\nsource = 1\n", "lab.toml: [c] calibration.source must be a string, not a "
                                    "number"),
    ("[calibration]\nunreliable = [1]\n", "lab.toml: [c] unreliable must be an array of "
                                          'strings naming figures, such as ["matmul fp32 256"]'),
    ("[calibration]\nunreliable = \"x\"\n", "lab.toml: [c] unreliable must be an array of "
                                            'strings naming figures, such as ["matmul fp32 '
                                            '256"]'),
])
def test_a_bad_calibration_is_refused(tables: str, message: str) -> None:
    assert refusal(tables) == message


NESTED = ("lab.toml: [c.calibration.low_precision] takes scale, op_cost, call_cost, "
          "piece_cost, op_cost_by_footprint, view_weights, between_ops and source (a profile "
          "from an older tensorledger: run `tensorledger probe` again)")


@pytest.mark.parametrize(("tables", "message"), [
    ("[calibration]\nlow_precision = 3\n", NESTED),
    ("[calibration.low_precision]\nunreliable = []\n", NESTED),  # named in the outer table
    ("[calibration.low_precision.low_precision]\n", NESTED),  # one level only
    ("[calibration.low_precision]\nscale = { a = 101 }\n",
     "lab.toml: [c.calibration.low_precision] scale must be a table of factors from 0.01 to "
     "100, such as { matmul = 1.2 }"),
    ("[calibration.low_precision]\nview_weights = 3\n",
     "lab.toml: [c.calibration.low_precision] view_weights must be a table of factors from 0.01 "
     'to 100, such as { "aten.t" = 2.0 }'),
    ('[calibration.low_precision]\nbetween_ops = { optimizer = "2h" }\n',
     "lab.toml: [c] calibration.low_precision.between_ops.optimizer = '2h' is out of range; "
     'it must be positive, from 0 to 3600 in its unit, such as "3us"'),
    ("[calibration.low_precision]\nop_cost_by_footprint = [[1e4, 0]]\n",
     FOOTPRINT.replace("[c.calibration]", "[c.calibration.low_precision]")),
])
def test_a_bad_low_precision_calibration_is_refused(tables: str, message: str) -> None:
    assert refusal(tables) == message


def test_a_low_precision_calibration_is_read_beside_the_fp32_one() -> None:
    chip = read('[calibration]\nop_cost = "1us"\nscale = { matmul = 2 }\n'
                '[calibration.low_precision]\nop_cost = "3us"\nscale = { matmul-bf16 = 4 }\n'
                'between_ops = { forward-backward = "5us" }\n')
    assert chip.calibration is not None
    low = chip.calibration.low_precision
    assert low is not None and low.scale == {"matmul-bf16": 4.0}
    assert low.op_cost_s == pytest.approx(3e-6)
    assert low.between_ops_s == pytest.approx({"forward-backward": 5e-6})
    assert low.low_precision is None and low.unreliable == ()
    assert chip.calibration.scale == {"matmul": 2.0}
    assert chip.calibration.op_cost_s == pytest.approx(1e-6)


@pytest.mark.parametrize(("key", "example"), [("scale", "{ matmul = 1.2 }"),
                                              ("view_weights", '{ "aten.t" = 2.0 }')])
@pytest.mark.parametrize("table", ["3", "{ a = 0.009 }", "{ a = 101 }", "{ a = true }",
                                   '{ a = "1" }', "{ a = 1, b = -1 }"])
def test_a_bad_factor_table_is_refused(key: str, example: str, table: str) -> None:
    assert refusal(f"[calibration]\n{key} = {table}\n") == (
        f"lab.toml: [c.calibration] {key} must be a table of factors from 0.01 to 100, such as "
        f"{example}")


@pytest.mark.parametrize("curve", [
    "3", "[3]", "[[1e4]]", "[[1e4, 1e-6, 1]]", "[[1e4, 0]]", "[[1e4, -1e-6]]", "[[1e4, 3601]]",
    "[[1e4, true]]", '[[1e4, "1us"]]', "[[0.5, 1e-6]]", "[[1e4, 1e-6], [1e4, 2e-6]]",
    "[[1e5, 1e-6], [1e4, 2e-6]]",
])
def test_a_bad_footprint_curve_is_refused(curve: str) -> None:
    assert refusal(f"[calibration]\nop_cost_by_footprint = {curve}\n") == FOOTPRINT


# ---- the node topology ----

NODE = ("lab.toml: [c] devices_per_node must be a whole number from 1 to 65536, such as 8, "
        "not {}")


def test_devices_per_node_at_its_bounds() -> None:
    for count in (1, 2**16):
        chip = read("", top=f"devices_per_node = {count}\n")
        assert chip.devices_per_node == count


@pytest.mark.parametrize(("value", "shown"), [
    ("0", "0"), ("65537", "65537"), ("true", "True"), ("8.0", "8.0"), ('"8"', "'8'"),
])
def test_a_bad_devices_per_node_is_refused(value: str, shown: str) -> None:
    assert refusal("", top=f"devices_per_node = {value}\n") == NODE.format(shown)


@pytest.mark.parametrize(("line", "message"), [
    ('intra_node_latency = "1.5s"', "intra_node_latency = '1.5s' is out of range; it must be "
                                    'positive, from 1e-12 to 1 in its unit, such as "2.7us"'),
    ('inter_node_latency = "0s"', "inter_node_latency = '0s' is out of range; it must be "
                                  'positive, from 1e-12 to 1 in its unit, such as "2.7us"'),
    ('intra_node_bandwidth = "0B/s"', "intra_node_bandwidth = '0B/s' is out of range; it must "
                                      'be positive, from 1 to 1e+30 in its unit, such as '
                                      '"450GB/s"'),
    ('inter_node_bandwidth = "50GB/s"', "inter_node_bandwidth needs devices_per_node (how many "
                                        "devices share a node before a group crosses the "
                                        "network)"),
    ("node_kind = 1", "node_kind must be a string, not a number"),
    ("inter_node_kind = 1", "inter_node_kind must be a string, not a number"),
    ("topology_source = 1", "topology_source must be a string, not a number"),
])
def test_a_bad_topology_is_refused(line: str, message: str) -> None:
    assert refusal("", top=line + "\n") == f"lab.toml: [c] {message}"


def test_each_topology_key_is_read_alone() -> None:
    # each key of the node read without the others (inter_node_bandwidth needs the count)
    for line, field, value in (
            ('intra_node_bandwidth = "1B/s"', "intra_node_bytes_per_s", 1.0),
            ('intra_node_latency = "1ns"', "intra_node_latency_s", 1e-9),
            ('inter_node_latency = "1s"', "inter_node_latency_s", 1.0),
            ('node_kind = "a"', "node_kind", "a"), ('inter_node_kind = "b"', "inter_node_kind",
                                                    "b")):
        chip = read("", top=line + '\ntopology_source = "doc"\n')
        assert getattr(chip, field) == value
        key = line.split(" = ")[0]
        assert chip.sources == {"*": "user file lab.toml", key: "doc"}
    chip = read("", top='devices_per_node = 4\ninter_node_bandwidth = "1e30B/s"\n')
    assert (chip.devices_per_node, chip.inter_node_bytes_per_s) == (4, 1e30)
