"""``tensorledger formats``, ``cast`` and ``quantize``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.conftest import assert_one_line_error

from tensorledger.formats.blocks import quantize_scheme
from tensorledger.formats.metrics import error_metrics


def test_formats_table_lists_every_format(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("formats")
    assert result.code == 0
    for name in ("fp64", "tf32", "fp8_e4m3fn", "e8m0", "fp4_e2m1"):
        assert name in result.stdout
    document = cli("formats", "--json").json()
    rows = {row["name"]: row for row in document["formats"]}
    assert rows["fp8_e4m3fn"]["max_finite"] == 448.0
    assert rows["fp8_e5m2"]["max_finite"] == 57344.0
    assert rows["e8m0"]["min_subnormal"] is None


def test_one_format_shows_every_value(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("formats", "fp4")
    assert result.code == 0
    assert "15 distinct finite values: -6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6" \
        in result.stdout
    document = cli("formats", "fp4_e2m1", "--json").json()
    assert [c["value"] for c in document["codes"][:8]] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert len(document["codes"]) == 16
    nan_codes = [c["code"] for c in cli("formats", "e4m3", "--json").json()["codes"]
                 if c["kind"] == "nan"]
    assert nan_codes == [0x7F, 0xFF]


def test_wide_format_shows_properties_only(cli) -> None:  # type: ignore[no-untyped-def]
    document = cli("formats", "bf16", "--json").json()
    assert document["codes"] is None
    assert document["format"]["min_subnormal"] == 2.0**-133


def test_cast_underflow_in_fp16_not_in_bf16(cli) -> None:  # type: ignore[no-untyped-def]
    fp16 = cli("cast", "1e-8", "--to", "fp16")
    assert fp16.code == 0
    assert "→ 0 in fp16" in fp16.stdout and "underflowed" in fp16.stdout
    assert cli("cast", "1e-8", "--to", "fp16", "--json").json()["result"] == 0.0
    bf16 = cli("cast", "1e-8", "--to", "bf16", "--json").json()
    # bf16 near 1e-8: exponent -27, spacing 2^-34; 1e-8 / 2^-34 = 171.8 → 172 · 2^-34
    assert bf16["result"] == 172 * 2.0**-34
    assert bf16["outcome"] == "rounded"


def test_cast_overflow_and_saturation(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("cast", "500", "--to", "e4m3", "--json").json()["outcome"] == "overflow"
    saturated = cli("cast", "500", "--to", "e4m3", "--saturate", "--json").json()
    assert (saturated["result"], saturated["code"], saturated["outcome"]) == \
        (448.0, 0x7E, "saturated")
    assert cli("cast", "17", "--to", "e4m3", "--json").json()["result"] == 16.0


def test_formats_and_cast_do_not_load_torch() -> None:
    code = ("import sys; from tensorledger.cli import main;"
            "assert main(['formats', 'fp4']) == 0; assert main(['cast', '1e-8', '--to', 'fp16']) "
            "== 0; assert 'torch' not in sys.modules, 'torch loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_quantize_table_matches_the_library(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("quantize", "--schemes", "nvfp4,mxfp4,mxfp8,fp8", "--dist", "normal", "--shape",
            "1024x1024", "--seed", "0")
    result = cli(*args)
    assert result.code == 0 and "nvfp4" in result.stdout and "20.43" in result.stdout
    document = cli(*args, "--json").json()
    rows = {row["scheme"]: row for row in document["results"]}
    torch.manual_seed(0)
    x = torch.randn(1024, 1024)
    expected = error_metrics(x, quantize_scheme(x, "nvfp4").dequantized)
    assert rows["nvfp4"]["error"]["mse"] == expected.mse
    assert rows["nvfp4"]["packed_bytes"] == 2**19 + 2**16 + 4  # 2^20/2 + 2^20/16 + 4
    assert rows["fp8"]["bits_per_value"] == pytest.approx(8 + 32 / 2**20)


def test_quantize_reads_user_tensors(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from safetensors.torch import save_file

    weight = torch.randn(64, 64, generator=torch.Generator().manual_seed(3))
    expected = error_metrics(weight, quantize_scheme(weight, "nvfp4").dequantized).mse
    np.save(tmp_path / "w.npy", weight.numpy())
    torch.save({"layer.weight": weight, "layer.bias": torch.zeros(64)}, tmp_path / "w.pt")
    save_file({"layer.weight": weight}, str(tmp_path / "w.safetensors"))
    for file, extra in (("w.npy", ()), ("w.pt", ("--tensor", "layer.weight")),
                        ("w.safetensors", ())):
        document = cli("quantize", "--schemes", "nvfp4", "--input", str(tmp_path / file),
                       *extra, "--json").json()
        assert document["results"][0]["error"]["mse"] == expected, file


def test_bad_inputs_give_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli("formats", "fp5"), "unknown format 'fp5'", "fp4_e2m1")
    assert_one_line_error(cli("cast", "1e-8", "--to", "fp7"), "unknown format 'fp7'")
    assert_one_line_error(cli("cast", "abc", "--to", "fp16"), "cannot read 'abc'")
    assert_one_line_error(cli("quantize", "--schemes", "nvfp5"), "nvfp5", "mxfp4")
    assert_one_line_error(cli("quantize", "--shape", "10xx4"), "cannot read shape")
    assert_one_line_error(cli("quantize", "--dist", "cauchy"), "unknown distribution")
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "none.npy")),
                          "does not exist")
    (tmp_path / "bad.npy").write_bytes(b"not a numpy file")
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "bad.npy")),
                          "cannot read tensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00\x01garbage")
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "bad.safetensors")),
                          "cannot read tensors")
    torch.save({"a": torch.ones(2), "b": torch.ones(2)}, tmp_path / "two.pt")
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "two.pt")),
                          "choose one with --tensor", "a, b")
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "two.pt"), "--tensor", "c"),
                          "unknown tensor", "a, b")
    np.save(tmp_path / "ints.npy", np.arange(4))
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "ints.npy")),
                          "floating-point")
    (tmp_path / "x.txt").write_text("1")
    assert_one_line_error(cli("quantize", "--input", str(tmp_path / "x.txt")), ".safetensors")
    assert_one_line_error(cli("formats", "fp4", "--plot", str(tmp_path / "x.gif")), ".png")
    assert_one_line_error(cli("formats", "bf16", "--plot", str(tmp_path / "x.png")),
                          "at most 8 bits")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_plot_number_line(cli, tmp_path: Path, suffix: str, magic: bytes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"fp4{suffix}"
    result = cli("formats", "fp4_e2m1", "--plot", str(path))
    assert result.code == 0 and f"wrote {path}" in result.stdout
    assert path.read_bytes().startswith(magic)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind
