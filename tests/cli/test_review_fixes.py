"""Bad input found in review: each is one line and exit 2, before any work or output file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tensorledger.report.files import write_atomic
from tests.conftest import NEEDS_NO_CUDA, assert_one_line_error


@pytest.mark.parametrize(("args", "fragment"), [
    (["bench", "matmul", "--device", "gpu"], "unknown device 'gpu'"),
    (["probe", "--device", "gpu"], "unknown device 'gpu'"),
    pytest.param(["roofline", "--model", "tiny", "--measure", "--device", "cuda"],
                 "no CUDA device", marks=NEEDS_NO_CUDA),
    (["roofline", "--model", "tiny", "--measure", "--device", "meta", "--precision", "fp32"],
     "use --device cpu or cuda"),
    (["trace", "--model", "tiny", "--device", "gpu"], "unknown device"),
    (["bench", "matmul", "--budget", "-1"], "'-1' is out of range; expected a finite number in"),
    (["memory", "--model", "tiny", "--seq", "8", "--plot", "memory.txt"], ".png, .svg, .pdf"),
    (["tensor", "4x8", "bf16", "--dtype", "fp8"], "give the dtype once"),
    (["time", "--params", "7B", "--tokens", "1T", "--days", "30", "--count", "8"],
     "does not take --count"),
    (["fit", "--params", "70B", "--count", "8"], "does not take --count"),
])
def test_refused_in_one_line(cli, args: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli(*args), fragment)


def test_probe_output_in_a_missing_folder_is_refused_before_probing(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "chip.toml"
    assert_one_line_error(cli("probe", "--output", str(target)), "does not exist")
    assert not target.parent.exists()
    assert_one_line_error(cli("probe", "--output", str(tmp_path / "chip.txt")), ".toml")


@pytest.mark.parametrize(("value", "fmt", "expected"), [
    ("inf", "fp16", "→ inf"), ("1e6", "e5m2", "→ inf"), ("1e999", "fp16", "→ inf"),
])
def test_casts_to_infinity_print(cli, value: str, fmt: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    result = cli("cast", value, "--to", fmt)
    assert result.code == 0, result.stderr
    assert expected in result.stdout


def test_days_with_params_shows_six_n_d(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("time", "--params", "70B", "--tokens", "15T", "--days", "30", "--json").json()
    assert doc["steps"][0]["formula"] == "6 × params × tokens"
    assert doc["flops"] == pytest.approx(6 * 70e9 * 15e12)  # 6.3e24
    assert doc["devices"] == 4913  # 6.3e24 / (989.5e12 · 0.5 · 30 · 86400) = 4912.7 → 4913


def test_files_follow_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "out.txt", "x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # 0o666 less the umask 0o022
