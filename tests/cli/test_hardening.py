"""Issue 11: no traceback on any input.  One group of tests per class of the issue, each named
after it; the fuzz test (test_fuzz.py) covers the same ground at random."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorledger.errors import ConfigError
from tensorledger.files import parse_json_text, parse_toml_text, read_text_file
from tests.cli.hostile import make_hostile_files
from tests.conftest import assert_one_line_error

HUGE = "1" + "0" * 400  # 10^400
DIGITS_5000 = "7" * 5000
BEYOND_INT64 = str(2**63)  # one past int64's largest


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, str]:
    folder = tmp_path / "hostile"
    folder.mkdir()
    return make_hostile_files(folder)


# ----------------------------------------------------------------- 1. numbers out of range

@pytest.mark.parametrize(("args", "fragment"), [
    (["time", "--params", "70B", "--tokens", "15T", "--count", HUGE], "out of range"),
    (["time", "--params", "70B", "--tokens", "15T", "--count", "1e400"], "not a whole number"),
    (["budget", "--count", HUGE], "out of range"),
    (["time", "--params", "70B", "--tokens", "15T", "--count", DIGITS_5000], "out of range"),
    (["time", "--params", DIGITS_5000, "--tokens", "15T"], "too long"),
    (["tensor", f"{HUGE}x4"], "too long"),
    (["tensor", "1" + "0" * 30 + "x4"], "beyond 2^63 - 1"),
    (["tensor", "x".join(["4096"] * 6)], "at most 2^63 - 1"),  # 4096^6 = 2^72 elements
    (["tensor", "x".join(["2"] * 65)], "at most 64"),
    (["bench", "matmul", "--n", BEYOND_INT64], "out of range"),
    (["bench", "matmul", "--n", str(2**20 + 1)], "from 1 to 1048576"),
    # 10^12 · (3 · 4 + 4) bytes = 16e12 bytes = 14,901 GiB, more than any machine here
    (["bench", "matmul", "--n", "1000000", "--dtype", "fp32"], "needs 14,901 GiB but"),
    (["quantize", "--seed", BEYOND_INT64], "out of range"),
    (["quantize", "--seed", "-1"], "out of range"),
    (["quantize", "--axis", BEYOND_INT64], "out of range"),
    (["bench", "matmul", "--budget", "nan"], "not finite"),
    (["bench", "matmul", "--budget", "inf"], "not finite"),
    (["bench", "matmul", "--budget", "1e400"], "too large for a float"),
    (["bench", "matmul", "--budget", "601"], "out of range"),
    (["time", "--params", "70B", "--tokens", "15T", "--mfu", "nan"], "not finite"),
    (["time", "--params", "1e308", "--tokens", "1e308"], "overflows"),
])
def test_numbers_out_of_range_are_refused(cli, args: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    result = cli(*args)
    assert_one_line_error(result, fragment)
    assert len(result.stderr) < 600  # a 5000-digit number is shown shortened


def test_numbers_out_of_range_days_too_small_overflow_the_answer(cli) -> None:  # type: ignore[no-untyped-def]
    # 6.3e24 FLOPs / (989.5e12 · 0.5 · 1e-320 · 86400 s) is beyond a float: refused, not NaN
    assert_one_line_error(cli("time", "--params", "70B", "--tokens", "15T", "--days", "1e-320"),
                          "overflows")


def test_numbers_out_of_range_largest_count_is_answered(cli) -> None:  # type: ignore[no-untyped-def]
    largest = str(2**63 - 1)
    result = cli("budget", "--count", largest, "--duration", "1s", "--json")
    assert result.code == 0, result.stderr
    # 989.5e12 FLOP/s · (2^63 - 1) · 1 s
    assert result.json()["flops"] == pytest.approx(989.5e12 * (2**63 - 1))


# ---------------------------------------------------------------- 2. negative numbers as values

def test_negative_numbers_cast_accepts_them(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("cast", "-1.5", "--to", "fp16", "--json")
    assert result.code == 0, result.stderr
    doc = result.json()
    assert doc["value"] == -1.5 and doc["result"] == -1.5 and doc["outcome"] == "exact"
    assert cli("cast", "-inf", "--to", "bf16", "--json").json()["result"] is None  # -inf → null


@pytest.mark.parametrize(("args", "fragment"), [
    (["time", "--params", "70B", "--tokens", "15T", "--days", "-1"], "--days '-1'"),
    (["time", "--params", "70B", "--tokens", "15T", "--days", "nan"], "--days 'nan'"),
    (["time", "--params", "-70B", "--tokens", "15T"], "'-70B' is negative"),
    (["budget", "--duration", "-2w"], "'-2w' is negative"),
    (["bench", "matmul", "--n", "-5"], "'-5' is out of range"),
    (["tensor", "-4x4"], "cannot read shape '-4x4'"),
    (["time", "--params", "70B", "--tokens", "15T", "-1"], "looks like a negative number"),
])
def test_negative_numbers_are_refused_in_the_users_words(cli, args: list[str], fragment: str  # type: ignore[no-untyped-def]
                                                         ) -> None:
    result = cli(*args)
    assert_one_line_error(result, fragment)
    assert "-1.0d" not in result.stderr and "nand" not in result.stderr


# -------------------------------------------------------------------- 3. digits of other scripts

@pytest.mark.parametrize(("args", "digit"), [
    (["time", "--params", "٧٠B", "--tokens", "15T"], "ARABIC-INDIC DIGIT SEVEN"),
    (["time", "--params", "７０B", "--tokens", "15T"], "FULLWIDTH DIGIT SEVEN"),
    (["tensor", "٤x٤"], "ARABIC-INDIC DIGIT FOUR"),
    (["cast", "٣", "--to", "fp16"], "ARABIC-INDIC DIGIT THREE"),
    (["budget", "--duration", "२d"], "DEVANAGARI DIGIT TWO"),
    (["time", "--params", "70B", "--tokens", "15T", "--days", "٣"], "ARABIC-INDIC DIGIT THREE"),
    (["bench", "matmul", "--n", "٤"], "ARABIC-INDIC DIGIT FOUR"),
])
def test_other_scripts_digits_are_refused_saying_why(cli, args: list[str], digit: str  # type: ignore[no-untyped-def]
                                                     ) -> None:
    assert_one_line_error(cli(*args), digit, "ASCII digits")


def test_other_scripts_digits_rule_is_in_the_help(cli) -> None:  # type: ignore[no-untyped-def]
    assert "ASCII" in cli("tensor", "--help").stdout
    assert "ASCII" in cli("cast", "--help").stdout


# ------------------------------------------------------------ 4. files not what they claim

@pytest.mark.parametrize(("name", "fragment"), [
    ("fifo.toml", "is a FIFO"),
    ("dev_zero", "is a device"),
    ("folder.toml", "is a folder"),
    ("binary.toml", "not UTF-8"),
    ("deep.toml", "nest too deep"),
    ("missing.toml", "does not exist"),
    ("list_memory.toml", "memory must be a quantity such as \"80GB\", not an array"),
    ("table_memory.toml", "not a table"),
    ("date_memory.toml", "not a date or time"),
    ("bool_memory.toml", "not a boolean"),
    ("huge_int_memory.toml", "more than 4300 digits"),
    ("inf_peak.toml", "dense.bf16"),
    ("nan_peak.toml", "dense.bf16"),
    ("negative_bandwidth.toml", "memory_bandwidth"),
    ("name_list.toml", "name must be a string"),
    ("sources_string.toml", "sources] must be a table of strings"),
    ("aliases_string.toml", "aliases must be an array of strings"),
    ("inf_curve.toml", "finite numbers"),
    ("bool_curve.toml", "finite numbers"),
    ("other_script_digits.toml", "ARABIC-INDIC DIGIT EIGHT"),
    ("not_toml.toml", "not valid TOML"),
])
def test_files_not_what_they_claim_are_refused_naming_file_and_field(  # type: ignore[no-untyped-def]
        cli, hostile: dict[str, str], name: str, fragment: str) -> None:
    path = hostile[name]
    for args in (["hardware", path], ["time", "--flops", "1e20", "--hardware", path]):
        result = cli(*args)
        assert_one_line_error(result, fragment)
        assert path in result.stderr


def test_files_not_what_they_claim_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text("# " + "x" * 2000 + "\n")
    with pytest.raises(ConfigError, match=r"has 2,003 bytes; at most 1,000 bytes are read"):
        read_text_file(path, what="hardware file", max_bytes=1000)
    assert read_text_file(path, what="hardware file", max_bytes=2003).startswith("# x")


def test_files_not_what_they_claim_parsers_bound_nesting() -> None:
    with pytest.raises(ConfigError, match="nest too deep"):
        parse_json_text("[" * 100_000 + "]" * 100_000, where="config.json")
    with pytest.raises(ConfigError, match="deeper than 3 levels"):
        parse_json_text('{"a": [[[1]]]}', where="config.json", max_depth=3)
    with pytest.raises(ConfigError, match="NaN is not a JSON number"):
        parse_json_text('{"a": NaN}', where="config.json")
    with pytest.raises(ConfigError, match="more than 4300 digits"):
        parse_json_text("9" * 5000, where="config.json")
    assert parse_toml_text('a = [[1, 2]]\n', where="x.toml") == {"a": [[1, 2]]}
    assert parse_json_text('{"a": [1]}', where="c.json") == {"a": [1]}


# ----------------------------------------------------------------------------- 5. output paths

def _left_behind(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_output_paths_folder_parent_file_missing_are_refused_before_work(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for target, fragment in ((out, "it is a folder"),
                             (a_file / "plot.png", "is a file, not a folder"),
                             (tmp_path / "missing" / "plot.png", "does not exist"),
                             (out / ("n" * 300 + ".png"), "longer than 255 bytes")):
        assert_one_line_error(cli("formats", "fp4_e2m1", "--plot", str(target)), fragment)
        assert_one_line_error(cli("probe", "--output", str(target).replace(".png", ".toml")),
                              fragment)
    assert _left_behind(out) == []


def test_output_paths_read_only_folder(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root writes anywhere: stand in the permission check
            real_access = os.access
            monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == folder
                                else real_access(path, mode))
        assert_one_line_error(cli("formats", "fp4_e2m1", "--plot", str(folder / "p.png")),
                              "is not writable")
        assert_one_line_error(cli("probe", "--output", str(folder / "p.toml")), "not writable")
    finally:
        folder.chmod(0o755)
    assert _left_behind(folder) == []


@pytest.mark.parametrize("home", ["a_file", "a_file/sub"])
def test_output_paths_bad_tensorledger_home_is_refused_before_probing(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: str) -> None:
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path / home))
    import tensorledger.bench as bench

    def no_probe(*args: object, **kwargs: object) -> None:
        raise AssertionError("probed before the output path was checked")

    monkeypatch.setattr(bench, "probe", no_probe)
    assert_one_line_error(cli("probe"), "TENSORLEDGER_HOME=", "is a file, not a folder")


# ---------------------------------------------------------------- 7. work that cannot fit

def test_work_that_cannot_fit_matmul_is_refused_with_the_figure(  # type: ignore[no-untyped-def]
        cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.hostmemory as hostmemory

    monkeypatch.setattr(hostmemory, "available_memory_bytes", lambda: 2**30)
    # 8192² · (3 · 4 + 4) bytes = 1 GiB needed, more than 80% of 1 GiB
    result = cli("bench", "matmul", "--n", "8192", "--dtype", "fp32")
    assert_one_line_error(result, "needs 1 GiB but 1 GiB are available", "smaller --n")


def test_work_that_cannot_fit_quantize_is_refused_before_drawing(  # type: ignore[no-untyped-def]
        cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.hostmemory as hostmemory

    monkeypatch.setattr(hostmemory, "available_memory_bytes", lambda: 2**30)
    # 2^25 elements · 4 bytes · (1 + 6) = 0.875 GiB, more than 80% of 1 GiB
    result = cli("quantize", "--shape", "4096x8192", "--schemes", "fp8")
    assert_one_line_error(result, "needs 0.875 GiB", "smaller --shape")


_MEASURE = """
import gc, resource, sys, torch
from tensorledger.formats.metrics import WORKING_MULTIPLE, compare_schemes
from tensorledger.formats.tensors import random_tensor
torch.set_num_threads(1)
x = random_tensor("normal", (2048, 8192), 0)
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
compare_schemes(x, ["nvfp4", "bf16"], rounding="stochastic", seed=0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print((after - before) / (4 * x.numel()), WORKING_MULTIPLE)
"""


def test_work_that_cannot_fit_quantizer_stays_within_its_stated_multiple() -> None:
    # peak resident memory beyond the input, in units of the input's fp32 bytes (64 MiB)
    out = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True,
                         check=True).stdout.split()
    ratio, multiple = float(out[0]), int(out[1])
    assert ratio <= multiple, ratio


# ------------------------------------------------------------ 8. silent acceptance of wrong input

def test_silent_acceptance_empty_dtype_is_refused(cli) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("tensor", "4x4", ""), "unknown dtype ''", "known: bf16")


def test_silent_acceptance_a_file_named_like_a_chip_does_not_replace_it(  # type: ignore[no-untyped-def]
        cli, hostile: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(hostile["h100"]).parent)
    result = cli("hardware", "h100", "--json")
    assert result.code == 0, result.stderr
    assert result.json()["chip"]["id"] == "h100-sxm"
    # a path-looking value is a file: ./h100 is read, and refused as not TOML
    assert_one_line_error(cli("hardware", "./h100"), "not valid TOML")
    assert cli("hardware", hostile["chip.toml"], "--json").json()["chip"]["name"] == "Test chip"


def test_silent_acceptance_cast_says_the_input_overflowed(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("cast", "1e999", "--to", "fp16")
    assert result.code == 0, result.stderr
    assert "1e999 overflowed to inf before the cast" in result.stdout
    doc = cli("cast", "1e999", "--to", "fp16", "--json").json()
    assert doc["input_overflowed"] is True and doc["input_text"] == "1e999"
    assert cli("cast", "inf", "--to", "fp16", "--json").json()["input_overflowed"] is False
    assert "underflowed to 0.0 before the cast" in cli("cast", "1e-999", "--to", "bf16").stdout


# --------------------------------------------------------------------------------- 9. pipes

_RUN = "import sys; from tensorledger.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize("reader", ["head -1", "head -c 0"])
@pytest.mark.parametrize("args", ["hardware", "formats e4m3", "formats e4m3 --json",
                                  "time --params 70B --tokens 15T"])
def test_pipes_into_head_end_quietly(reader: str, args: str) -> None:
    command = f'"{sys.executable}" -c "{_RUN}" {args} | {reader} >/dev/null; ' \
              'echo "status=${PIPESTATUS[0]}"'
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "status=0", (done.stdout, done.stderr)
    assert done.stderr == ""


def test_pipes_json_output_is_one_document(cli) -> None:  # type: ignore[no-untyped-def]
    json.loads(cli("hardware", "--json").stdout)
