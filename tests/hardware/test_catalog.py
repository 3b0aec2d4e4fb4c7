"""The hardware catalog holds FACTS.md's numbers, each with a source, dense apart from sparse."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorledger.errors import ConfigError, InputError, UnknownNameError
from tensorledger.hardware import COMPUTE_KEYS, catalog, get_hardware, load_hardware_file

T = 1e12
G = 1e9

# chip: (bf16 dense, fp8 dense or None, fp4 dense or None, tf32, fp32, memory, bandwidth) per
# FACTS.md's hardware table.
FACTS = {
    "a100-40gb": (312 * T, None, None, 156 * T, 19.5 * T, 40 * G, 1555 * G),
    "a100-80gb": (312 * T, None, None, 156 * T, 19.5 * T, 80 * G, 2039 * G),
    "h100-sxm": (989.5 * T, 1979 * T, None, 494.7 * T, 66.9 * T, 80 * G, 3.35e12),
    "h100-pcie": (756 * T, 1513 * T, None, 378 * T, 51 * T, 80 * G, 2.0e12),
    "h200-sxm": (989.5 * T, 1979 * T, None, 494.7 * T, 66.9 * T, 141 * G, 4.8e12),
    "b200": (2250 * T, 4500 * T, 9000 * T, 1100 * T, 80 * T, 180 * G, 8e12),
    "mi300x": (1307.4 * T, 2614.9 * T, None, 653.7 * T, 163.4 * T, 192 * G, 5.3e12),
    "l4": (121 * T, 242.5 * T, None, 60 * T, 30.3 * T, 24 * G, 300 * G),
    "rtx-4090": (165.2 * T, 330.3 * T, None, 82.6 * T, 82.6 * T, 24 * G, 1008 * G),
    "tpu-v5e": (197 * T, None, None, None, None, 16 * G, 819 * G),
    "tpu-v5p": (459 * T, None, None, None, None, 95 * G, 2765 * G),
}
# chip: (bf16, fp8, fp4) "with sparsity" figures of FACTS.md
SPARSE = {
    "a100-40gb": (624 * T, None, None), "a100-80gb": (624 * T, None, None),
    "h100-sxm": (1979 * T, 3958 * T, None), "h100-pcie": (1513 * T, 3026 * T, None),
    "h200-sxm": (1979 * T, 3958 * T, None), "b200": (4500 * T, 9000 * T, 18000 * T),
    "l4": (242 * T, 485 * T, None), "rtx-4090": (330.4 * T, 660.6 * T, None),
}


@pytest.mark.parametrize("chip_id", sorted(FACTS))
def test_facts_numbers(chip_id: str) -> None:
    chip = get_hardware(chip_id)
    bf16, fp8, fp4, tf32, fp32, memory, bandwidth = FACTS[chip_id]
    assert chip.peak_flop_per_s("bf16") == pytest.approx(bf16)
    for key, value in (("fp8", fp8), ("fp4", fp4), ("tf32", tf32), ("fp32", fp32)):
        if value is None:
            assert key not in chip.dense_flop_per_s
        else:
            assert chip.dense_flop_per_s[key] == pytest.approx(value)
    assert chip.memory_bytes == pytest.approx(memory)
    assert chip.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth)


@pytest.mark.parametrize("chip_id", sorted(SPARSE))
def test_sparse_figures_are_kept_apart_and_twice_dense(chip_id: str) -> None:
    chip = get_hardware(chip_id)
    for key, value in zip(("bf16", "fp8", "fp4"), SPARSE[chip_id], strict=True):
        if value is not None:
            assert chip.sparse_flop_per_s[key] == pytest.approx(value)
            # the dense peak is the datasheet's sparse figure halved (to the datasheet's rounding)
            assert chip.dense_flop_per_s[key] == pytest.approx(value / 2, rel=2e-3)


def test_every_number_has_a_source() -> None:
    for chip in catalog().values():
        keys = ["memory", "memory_bandwidth", *chip.dense_flop_per_s, *chip.sparse_flop_per_s]
        if chip.interconnect_bytes_per_s is not None:
            keys.append("interconnect")
        for key in keys:
            assert len(chip.source(key)) > 10, (chip.id, key)


def test_host_links_are_sourced_and_per_direction() -> None:
    """The host (CPU) to device link of every GPU, per direction, with a source of its own:
    datasheets give PCIe both ways (H100's 'PCIe Gen5: 128GB/s' is 64 GB/s each way)."""
    chips = catalog()
    expected = {"h100-sxm": 64e9, "h100-pcie": 64e9, "h200-sxm": 64e9, "mi300x": 64e9,
                "a100-40gb": 32e9, "a100-80gb": 32e9, "l4": 32e9, "rtx-4090": 32e9,
                "v100-sxm": 16e9}
    for chip_id, per_direction in expected.items():
        chip = chips[chip_id]
        assert chip.host_link_bytes_per_s == per_direction, chip_id
        assert "PCIe" in (chip.host_link_kind or ""), chip_id
        assert "host_link" in chip.sources and "per direction" in chip.sources["host_link"]
    assert chips["h100-sxm"].host_link_kind == "PCIe 5.0 x16"
    # the PCIe generation: 16 GT/s (4.0) and 32 GT/s (5.0) a lane, 16 lanes, 128b/130b
    # coding: 31.5 and 63.0 GB/s, rounded by the datasheets to 32 and 64
    pcie4 = 16e9 * 16 / 8 * 128 / 130
    assert pcie4 == pytest.approx(31.5e9, rel=1e-3)
    assert chips["tpu-v5e"].host_link_bytes_per_s is None  # no figure: nothing assumed


def test_h100_intensity_is_about_295() -> None:
    chip = get_hardware("h100")
    assert chip.intensity_flop_per_byte("bf16") == pytest.approx(989.5e12 / 3.35e12)  # 295.37
    assert round(chip.intensity_flop_per_byte("bf16")) == 295


def test_aliases_and_dtype_names() -> None:
    assert get_hardware("h100").id == "h100-sxm"
    assert get_hardware("H100").id == "h100-sxm"
    assert get_hardware("a100").id == "a100-80gb"
    h100 = get_hardware("h100-sxm")
    assert h100.peak_flop_per_s("bfloat16") == h100.peak_flop_per_s("bf16")
    assert h100.peak_flop_per_s("fp8_e4m3fn") == h100.dense_flop_per_s["fp8"]


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"h1000.*known: a100-40gb, .*h100-sxm"):
        get_hardware("h1000")
    with pytest.raises(InputError, match="v100-sxm lists no dense bf16 peak"):
        get_hardware("v100").peak_flop_per_s("bf16")


def test_user_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "my-chip.toml"
    path.write_text('name = "Mine"\nmemory = "64GB"\nmemory_bandwidth = "2TB/s"\n'
                    '[dense]\nbf16 = "500TFLOP/s"\n')
    chip = get_hardware(str(path))
    assert chip.id == "my-chip"
    assert chip.intensity_flop_per_byte("bf16") == pytest.approx(500e12 / 2e12)  # 250
    assert str(path) in chip.source("bf16")

    table = tmp_path / "table.toml"
    table.write_text('[x1]\nname = "X1"\nmemory = "1GiB"\nmemory_bandwidth = "1GB/s"\n'
                     '[x1.dense]\nfp32 = "1TFLOP/s"\n')
    assert load_hardware_file(table).memory_bytes == 2**30


@pytest.mark.parametrize(("body", "fragment"), [
    ('name = "x"\nmemory = "64GB"\n[dense]\nbf16 = "1TFLOP/s"\n', "lacks memory_bandwidth"),
    ('name = "x"\nmemory = "64Gb"\nmemory_bandwidth = "1TB/s"\n[dense]\nbf16 = "1TFLOP/s"\n',
     "memory"),
    ('name = "x"\nmemory = "64GB"\nmemory_bandwidth = "1TB/s"\n[dense]\nbf17 = "1TFLOP/s"\n',
     "unknown dtype 'bf17'"),
    ('name = "x"\nmemory = "64GB"\nmemory_bandwidth = "1TB/s"\ncolour = 1\n[dense]\n'
     'bf16 = "1TFLOP/s"\n', "unknown key 'colour'"),
    ('name = "x"\nmemory = "64GB"\nmemory_bandwidth = "1TB/s"\n[dense]\nbf16 = "1TFLOPS"\n',
     "FLOP/s"),
    ('name = "x"\nmemory = "0GB"\nmemory_bandwidth = "1TB/s"\n[dense]\nbf16 = "1TFLOP/s"\n',
     "positive"),
    ("this is = not [toml", "not valid TOML"),
])
def test_user_toml_errors(tmp_path: Path, body: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        get_hardware(str(path))


def test_fresh_pages_are_read_from_a_users_toml(tmp_path: Path) -> None:
    path = tmp_path / "cpu.toml"
    chip = 'name = "x"\nmemory = "64GB"\nmemory_bandwidth = "1TB/s"\n'
    dense = '[dense]\nbf16 = "1TFLOP/s"\n'
    path.write_text(chip + 'fresh_pages_from = "32MiB"\nfresh_page_rate = "5GB/s"\n' + dense)
    loaded = get_hardware(str(path))
    assert (loaded.fresh_pages_from_bytes, loaded.fresh_page_bytes_per_s) == (2**25, 5e9)
    path.write_text(chip + dense)  # neither: none measured, both 0
    loaded = get_hardware(str(path))
    assert (loaded.fresh_pages_from_bytes, loaded.fresh_page_bytes_per_s) == (0.0, 0.0)
    for key, example in (("fresh_pages_from", '"32MiB"'), ("fresh_page_rate", '"5GB/s"')):
        path.write_text(chip + f"{key} = true\n" + dense)
        with pytest.raises(ConfigError) as error:
            get_hardware(str(path))
        assert str(error.value) == (
            f"{path}: [cpu] {key} must be a quantity such as {example}, not a boolean")


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match=r"hardware file .* does not exist"):
        get_hardware("/nonexistent/chip.toml")


def test_compute_keys_cover_every_dtype() -> None:
    from tensorledger.dtypes import DTYPES

    float_kinds = {d.compute for d in DTYPES.values() if not d.name.startswith(("int", "uint"))}
    assert float_kinds - {"int8"} <= set(COMPUTE_KEYS)


def test_attainable_interpolates_log_log() -> None:
    chip = get_hardware("h100").__class__(
        **{**get_hardware("h100").__dict__,
           "curves": {"matmul.bf16": ((1e6, 1e12), (1e8, 1e14))}})
    assert chip.attainable("matmul.bf16", 1e6, 5.0) == 1e12
    assert chip.attainable("matmul.bf16", 1e7, 5.0) == pytest.approx(1e13)  # halfway in logs
    assert chip.attainable("matmul.bf16", 1e3, 5.0) == 1e12  # flat below the first point
    assert chip.attainable("matmul.bf16", 1e12, 5.0) == 1e14  # and above the last
    assert chip.attainable("matmul.fp32", 1e7, 5.0) == 5.0  # no curve: the ceiling given


def test_curves_validation(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\nmemory = "1GB"\nmemory_bandwidth = "1GB/s"\n[dense]\n'
                    'fp32 = "1TFLOP/s"\n[curves]\nbandwidth = [[2.0, 1.0], [1.0, 3.0]]\n')
    with pytest.raises(ConfigError, match="sizes increasing"):
        load_hardware_file(path)


_CHIP = 'name = "x"\nmemory = "1GB"\nmemory_bandwidth = "1TB/s"\n[dense]\nbf16 = "1TFLOP/s"\n'


@pytest.mark.parametrize(("expected", "message"), [
    ('[expected]\nmemory_bandwidth = 0.9\nop_overhead = "1us"\n', "lacks matmul"),
    ('[expected]\nmatmul = { bf16 = [[1e9, 1.5]] }\nmemory_bandwidth = 0.9\nop_overhead = "1us"\n',
     "fraction above 0 and at most 1"),
    ('[expected]\nmatmul = { bf16 = [[1e9, 0.5]] }\nmemory_bandwidth = true\nop_overhead = "1us"\n',
     "memory_bandwidth must be a fraction"),
    ('[expected]\nmatmul = { bf17 = [[1e9, 0.5]] }\nmemory_bandwidth = 0.9\nop_overhead = "1us"\n',
     "unknown dtype"),
    ('[expected]\nmatmul = { bf16 = [[1e9, 0.5], [1e8, 0.6]] }\nmemory_bandwidth = 0.9\n'
     'op_overhead = "1us"\n', "sizes must increase"),
    ('[expected]\nmatmul = { bf16 = [[1e9, 0.5]] }\nmemory_bandwidth = 0.9\nop_overhead = "1us"\n'
     'speed = 2\n', "unknown key"),
    ('unreliable = "all"\n', "unreliable must be an array"),
])
def test_bad_expected_tables_are_one_line(tmp_path: Path, expected: str, message: str) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(expected.replace("[expected]", _CHIP + "[expected]") if "[expected]" in
                    expected else expected + _CHIP)
    with pytest.raises(ConfigError, match=message):
        load_hardware_file(path)


def test_a_users_expected_table_is_used(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(_CHIP + '[expected]\nmatmul = { default = [[1e6, 0.25], [1e10, 0.5]] }\n'
                    'memory_bandwidth = 0.8\nop_overhead = "3us"\nsource = "my lab"\n')
    chip = load_hardware_file(path)
    assert chip.expected_basis == "efficiencies" and chip.expected_op_overhead_s == 3e-6
    assert chip.efficiency is not None and chip.efficiency.source("matmul") == "my lab"
    # log-log halfway between 1e6 and 1e10 FLOPs: sqrt(0.25 · 0.5)
    assert chip.expected_flop_rate("matmul.bf16", "bf16", 1e8) == pytest.approx(
        1e12 * (0.25 * 0.5) ** 0.5)
    assert chip.expected_bandwidth(123) == pytest.approx(0.8e12)
