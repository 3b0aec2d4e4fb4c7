"""The device probe and the matmul benchmark: FLOP counts and derived rates, profile files."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorledger.bench import bench_matmul, probe, profile_toml
from tensorledger.bench.probe import ProbeResult
from tensorledger.bench.probe_kernels import KernelPlan
from tensorledger.bench.probe_noise import one_thread
from tensorledger.hardware import get_hardware, load_hardware_file
from tests.conftest import NEEDS_NO_CUDA, assert_one_line_error

#: One point of each kernel the plan times (its sweeps are tested in test_probe_kernels.py):
#: these tests read the probe's arithmetic and its profile, not a curve's shape.
SMALL_PLAN = KernelPlan(seqs=(16,), head_dims=(16,), buffers=(2**14,), matvec_rows=(1,),
                        matvec_dtypes=("fp32",), matvec_weight=(64, 64), matvec_cold_bytes=2**20,
                        loops=(4,), loop_elements=2**12, linear_dtypes=("fp32",),
                        linear_widths=(32,), linear_tokens=16, norm_width=64, norm_tokens=(16,),
                        op_width=64, op_rows=(16,))
SMALL = {"sizes": (32, 64), "budget_s": 0.01, "attention_seqs": (16, 32), "kernels": SMALL_PLAN}


@pytest.fixture(scope="module")
def small_probe():  # type: ignore[no-untyped-def]
    # these tests check the probe's arithmetic on real timings, whatever the machine's load:
    # no figure is set aside for its spread, and one thread leaves no team to stall (the noise
    # handling has its fake-clock tests: test_probe_settle.py, test_probe_noise.py)
    with one_thread():
        return probe("cpu", dtypes=("fp32", "bf16"), buffer_bytes=2**20, max_spread=math.inf,
                     **SMALL)


@pytest.fixture
def any_noise(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI's probe with every figure kept, on one thread, and its sizes, budget and
    kernels those of ``small_probe`` (the CLI's plumbing is under test, not ``--quick``'s plan)."""
    import tensorledger.bench

    def any_spread(*args: Any, **options: Any) -> ProbeResult:
        return probe(*args, **{**options, "max_spread": math.inf, **SMALL})

    monkeypatch.setattr(tensorledger.bench, "probe", any_spread)
    with one_thread():
        yield


def test_probe_points_and_peaks(small_probe) -> None:  # type: ignore[no-untyped-def]
    assert [(p.dtype, p.n) for p in small_probe.matmul] == [
        ("fp32", 32), ("fp32", 64), ("bf16", 32), ("bf16", 64)]
    for point in small_probe.matmul:
        assert point.flops == 2 * point.n**3  # 64: 2 · 262144 = 524288
        assert point.flop_per_s == point.flops / point.median_s
    for dtype in ("fp32", "bf16"):
        best = max(p.flop_per_s for p in small_probe.matmul if p.dtype == dtype)
        assert small_probe.dense_flop_per_s[dtype] == best
    copy, triad, *eager = small_probe.bandwidth
    assert copy.bytes_moved == 2 * 2**20 and triad.bytes_moved == 3 * 2**20
    assert not copy.fresh_output and all(p.fresh_output for p in eager)
    assert small_probe.memory_bandwidth_bytes_per_s == max(copy.bytes_per_s, triad.bytes_per_s)
    assert small_probe.op_overhead_s > 0 and small_probe.bare_op_overhead_s > 0
    assert small_probe.inference_op_overhead_s > 0
    # the eager sweep: 64 KiB, 256 KiB and the 1 MiB main buffer, copy and triad each
    assert [p.buffer_bytes for p in eager] == [2**16, 2**16, 2**18, 2**18, 2**20, 2**20]
    curve = small_probe.curves["bandwidth"]
    assert [size for size, _ in curve] == sorted({p.bytes_moved for p in eager})
    assert dict(curve)[2 * 2**20] == eager[-2].bytes_per_s  # the 1 MiB copy moves 2 MiB
    # attention at (4, 8, s, 64): forward 2 products of 2·s·s·64 per head, backward 2.5×
    for point in small_probe.attention:
        forward = 4 * 8 * 2 * (2 * point.n * point.n * 64)
        assert point.flops == forward + 5 * forward // 2  # 3.5 × forward
    assert small_probe.curves["attention.fp32"] == tuple(
        (p.flops, p.flop_per_s) for p in small_probe.attention)
    matmul = small_probe.curves["matmul.fp32"]
    assert matmul == tuple((p.flops, p.flop_per_s) for p in small_probe.matmul
                           if p.dtype == "fp32")


def test_profile_round_trips(small_probe, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "local.toml"
    path.write_text(profile_toml(small_probe))
    # every figure was let in, whatever its spread: the profile says so
    assert "# probed with --max-spread inf:" in path.read_text()
    chip = load_hardware_file(path)
    assert chip.id == "local"
    assert dict(chip.dense_flop_per_s) == small_probe.dense_flop_per_s
    assert chip.memory_bandwidth_bytes_per_s == small_probe.memory_bandwidth_bytes_per_s
    assert chip.op_overhead_s == pytest.approx(small_probe.op_overhead_s, rel=1e-12)
    assert chip.inference_op_overhead_s == pytest.approx(small_probe.inference_op_overhead_s,
                                                         rel=1e-12)
    assert chip.memory_bytes == small_probe.memory_bytes
    assert dict(chip.curves) == small_probe.curves


def test_hardware_shows_the_probed_fresh_pages(small_probe, tmp_path: Path,  # type: ignore[no-untyped-def]
                                              cli) -> None:
    """A profile whose new tensors of 32 MiB (33,554,432 bytes) or more cost their pages at
    4 GB/s shows that row; the figures are the file's, read back."""
    import dataclasses

    from tensorledger.bench.probe_pages import FreshPages
    from tensorledger.units import format_bandwidth

    path = tmp_path / "local.toml"
    path.write_text(profile_toml(dataclasses.replace(
        small_probe, fresh_pages=FreshPages(32 * 2**20, 4e9, ()))))
    chip = load_hardware_file(path)
    assert (chip.fresh_pages_from_bytes, chip.fresh_page_bytes_per_s) == (33_554_432, 4e9)
    shown = cli("hardware", str(path))
    assert shown.code == 0, shown.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in shown.stdout.splitlines() if line.count("│") > 3}
    assert rows["fresh pages ≥ 32 MiB"] == format_bandwidth(4e9)


def test_hardware_shows_the_probed_per_op_costs(small_probe, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                cli) -> None:
    from tensorledger.units import format_duration

    path = tmp_path / "local.toml"
    path.write_text(profile_toml(small_probe))
    shown = cli("hardware", str(path))
    assert shown.code == 0, shown.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in shown.stdout.splitlines() if line.count("│") > 3}
    assert rows["per-op cost, training"] == format_duration(small_probe.op_overhead_s)
    assert rows["per-op cost, inference"] == format_duration(
        small_probe.inference_op_overhead_s)


def test_bench_matmul_arithmetic() -> None:
    result = bench_matmul(64, "fp32", hardware=get_hardware("h100"), budget_s=0.01)
    assert result.flops == 2 * 64**3 == 524288
    assert result.achieved_flop_per_s == result.flops / result.measurement.median_s
    assert result.spec_peak_flop_per_s == pytest.approx(66.9e12)
    assert result.mfu_spec == result.achieved_flop_per_s / result.spec_peak_flop_per_s
    assert result.mfu_probed is None


@pytest.mark.usefixtures("any_noise")
def test_cli_probe_then_local(cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))
    assert_one_line_error(cli("bench", "matmul", "--hardware", "local"), "tensorledger probe")
    out = tmp_path / "mine.toml"
    result = cli("probe", "--quick", "--output", str(out), "--json")
    assert result.code == 0, result.stderr
    assert "probing" in result.stderr  # progress goes to stderr
    doc = result.json()
    assert doc["profile_path"] == str(out)
    assert load_hardware_file(out).dense_flop_per_s["fp32"] == doc["probe"]["dense_flop_per_s"][
        "fp32"]
    (tmp_path / "local.toml").write_text(out.read_text())
    bench = cli("bench", "matmul", "--n", "32", "--dtype", "fp32", "--budget", "0.01", "--json")
    doc = bench.json()
    assert doc["probed_peak_flop_per_s"] == load_hardware_file(out).dense_flop_per_s["fp32"]
    assert doc["mfu_probed"] == pytest.approx(doc["achieved_flop_per_s"]
                                              / doc["probed_peak_flop_per_s"])


@pytest.mark.parametrize(("args", "fragment"), [
    (["bench", "matmul", "--n", "0"], "expected a whole number from 1 to 1048576"),
    (["bench", "matmul", "--dtype", "fp4"], "no torch type"),
    pytest.param(["bench", "matmul", "--device", "cuda", "--n", "8"], "no CUDA device",
                 marks=NEEDS_NO_CUDA),
    pytest.param(["probe", "--device", "cuda"], "no CUDA device", marks=NEEDS_NO_CUDA),
    (["probe", "--max-spread", "0"], "expected a finite number in [0.01, 100]"),
    (["probe", "--max-spread", "10%"], "'10%' is not a number"),
])
def test_cli_errors(cli, args: list[str], fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(cli(*args), fragment)
