"""The napkin commands end to end: tables, JSON, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error


def test_time_prints_the_working(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("time", "--params", "70B", "--tokens", "15T", "--hardware", "h100", "--count",
                 "1024", "--mfu", "0.5")
    assert result.code == 0, result.stderr
    for fragment in ("6.3e24 FLOPs", "989.5 TFLOP/s", "4.377e22 FLOPs/day", "143.9 days"):
        assert fragment in result.stdout


def test_time_json(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("time", "--params", "70B", "--tokens", "15T", "--hardware", "h100", "--count",
              "1024", "--json").json()
    assert doc["command"] == "time" and doc["schema_version"] == 1
    assert doc["flops"] == pytest.approx(6.3e24)
    assert doc["time_days"] == pytest.approx(6.3e24 / (989.5e12 * 0.5 * 1024 * 86400))
    assert doc["peak_flop_per_s"] == 989.5e12


def test_time_flops_and_inverse(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("time", "--flops", "3.14e23", "--hardware", "h100", "--days", "30",
              "--json").json()
    assert doc["devices"] == 245  # 3.14e23 / (989.5e12 · 0.5 · 30 · 86400) = 244.9 → 245
    assert doc["devices_exact"] == pytest.approx(3.14e23 / (989.5e12 * 0.5 * 30 * 86400))


def test_fit(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("fit", "--hardware", "h100", "--count", "8", "--optimizer", "adamw",
                 "--precision", "bf16-fp32-states")
    assert result.code == 0
    assert "53.33B" in result.stdout and "activations are excluded" in result.stdout
    doc = cli("fit", "--params", "70B", "--hardware", "h100", "--precision", "lecture",
              "--json").json()
    assert doc["devices"] == 11  # 70e9 · 12 / 80e9 = 10.5
    assert doc["breakdown"]["total_bytes_per_param"] == 12


def test_tensor(cli) -> None:  # type: ignore[no-untyped-def]
    assert "= 128 bytes" in cli("tensor", "4x8", "--dtype", "fp32").stdout
    out = cli("tensor", "49152x12288", "fp32").stdout
    assert "2304 MiB" in out and "2.416 GB" in out
    assert cli("tensor", "4x8", "--json").json()["bytes"] == 128


def test_budget(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("budget", "--hardware", "h100", "--count", "8", "--duration", "2w",
              "--json").json()
    assert doc["flops"] == pytest.approx(989.5e12 * 8 * 14 * 86400)  # 9.575e21
    assert "9.575e21 FLOPs" in cli("budget", "--count", "8", "--duration", "2w").stdout


def test_hardware_list_and_show(cli) -> None:  # type: ignore[no-untyped-def]
    listing = cli("hardware")
    assert listing.code == 0 and "h100-sxm" in listing.stdout and "mi300x" in listing.stdout
    shown = cli("hardware", "h100")
    assert "295.4 FLOP/byte" in shown.stdout  # 989.5e12 / 3.35e12
    assert "[1.979 PFLOP/s]" in shown.stdout  # with-sparsity kept apart
    doc = cli("hardware", "h100", "--json").json()
    assert doc["intensity_flop_per_byte"]["bf16"] == pytest.approx(989.5e12 / 3.35e12)


@pytest.mark.parametrize(("args", "fragment"), [
    (["time", "--params", "70Q", "--tokens", "15T"], "unknown count suffix 'Q'"),
    (["time", "--params", "70B"], "give --params and --tokens"),
    (["time", "--params", "70B", "--tokens", "1T", "--flops", "1e23"], "not both"),
    (["time", "--params", "70B", "--tokens", "1T", "--hardware", "h1000"], "unknown hardware"),
    (["time", "--params", "70B", "--tokens", "1T", "--mfu", "1.5"],
     "expected a finite number in (0, 1]"),
    (["time", "--params", "70B", "--tokens", "1T", "--count", "0"],
     "'0' is out of range; expected a whole number from 1"),
    (["time", "--params", "70B", "--tokens", "1T", "--count", "x"], "--count"),
    (["time", "--bogus"], "No such option"),
    (["fit", "--optimizer", "adan"], "unknown optimizer"),
    (["fit", "--precision", "fp12"], "unknown precision"),
    (["tensor", "4xq"], "cannot read shape"),
    (["tensor", "4x8", "fp33"], "unknown dtype 'fp33'"),
    (["budget", "--duration", "3m"], "minutes or months"),
    (["hardware", "nope.toml"], "hardware file nope.toml does not exist"),
    (["nosuchcommand"], "No such command"),
])
def test_bad_input_is_one_line(cli, args: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli(*args), fragment)


def test_broken_hardware_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "chip.toml"
    path.write_text("[dense\n")
    assert_one_line_error(cli("time", "--flops", "1e20", "--hardware", str(path)),
                          "not valid TOML")


def test_napkin_commands_do_not_import_torch() -> None:
    code = ("import sys; from tensorledger.cli import main; "
            "main(['time', '--params', '7B', '--tokens', '1T', '--json']); "
            "main(['fit', '--json']); main(['hardware', 'h100', '--json']); "
            "sys.stderr.write(str(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stderr.strip() == "[]"


def test_console_script_exit_code(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "tensorledger"
    done = subprocess.run([str(script), "hardware", "h1000"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stdout == ""
