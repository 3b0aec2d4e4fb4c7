"""Terminal output that agrees with itself: one duration unit per figure, one number format
(``units.format_sci``), MFU against a chip that is not the device measured says so, and the
model is labelled by the source the user gave."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tensorledger.bench.harness import Measurement
from tensorledger.bench.matmul import MatmulBenchmark, spec_matches
from tensorledger.hardware import get_hardware
from tensorledger.report.bench import matmul_view
from tensorledger.units import format_duration, format_sci

H100_BF16 = 989.5e12  # dense bf16 peak of h100-sxm in the catalog


def _text(view: list[object]) -> str:
    console = Console(file=io.StringIO(), width=200)
    for part in view:
        console.print(part)
    return str(console.file.getvalue())  # type: ignore[attr-defined]


def test_time_states_the_duration_in_one_unit(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("time", "--params", "70B", "--tokens", "15T", "--hardware", "h100", "--count",
                 "8", "--mfu", "0.5")
    assert result.code == 0, result.stderr
    # 6 · 70e9 · 15e12 = 6.3e24 FLOPs at 989.5e12 · 0.5 · 8 FLOP/s = 1.592e9 s = 50.47 years
    duration = format_duration(6 * 70e9 * 15e12 / (H100_BF16 * 0.5 * 8))
    assert duration == "50.47 years"
    answer = result.stdout.strip().splitlines()[-1]
    assert answer.startswith(f"≈ {duration} (") and "days" not in answer
    assert result.stdout.count(duration) == 2  # the table's last row and the answer agree


def test_devices_for_a_deadline_use_the_shared_duration(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("time", "--flops", "3.14e23", "--hardware", "h100", "--days", "30").stdout
    # 3.14e23 / (989.5e12 · 0.5 · 245 devices) = 2.59e6 s = 29.98 days
    assert f"in {format_duration(3.14e23 / (H100_BF16 * 0.5 * 245))} at MFU" in out


def _benchmark(device: str, mfu: float, spec_is_device: bool) -> MatmulBenchmark:
    n = 512
    time_s = 2 * n**3 / (mfu * H100_BF16)
    measurement = Measurement("matmul 512", device, "perf_counter", 1, 1, (time_s,), time_s,
                              time_s, time_s, time_s, time_s, 0.0, 0.0, None)
    return MatmulBenchmark(n=n, dtype="bf16", device=device, flops=2 * n**3,
                           measurement=measurement, achieved_flop_per_s=mfu * H100_BF16,
                           spec_hardware="h100-sxm", spec_peak_flop_per_s=H100_BF16,
                           mfu_spec=mfu, probed_peak_flop_per_s=None, mfu_probed=None,
                           device_name=device, spec_is_device=spec_is_device)


def test_matmul_view_uses_the_shared_formats_and_shows_small_mfus() -> None:
    text = _text(list(matmul_view(_benchmark("cpu", 1.37e-4, False))))
    assert format_sci(2 * 512**3) == "2.684e8" and "2.684e8" in text  # 2 · 512³ = 268,435,456
    assert "e+" not in text
    assert "1.37e-4" in text and "0.000" not in text
    assert "not the device measured: cpu" in text and "h100-sxm's dense bf16 peak" in text
    same = _text(list(matmul_view(_benchmark("cuda", 0.61, True))))
    assert "0.61" in same and "not the device measured" not in same


def test_which_chip_is_the_device_measured() -> None:
    h100 = get_hardware("h100")
    assert not spec_matches(h100, "cpu", "cpu")
    assert spec_matches(h100, "cuda", "NVIDIA H100 80GB HBM3")
    assert not spec_matches(h100, "cuda", "NVIDIA H200")
    assert not spec_matches(get_hardware("a100-80gb"), "cuda", "NVIDIA H100 PCIe")


def test_bench_matmul_on_cpu_against_h100(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("bench", "matmul", "--n", "64", "--dtype", "fp32", "--device", "cpu",
                 "--hardware", "h100", "--budget", "0.05")
    assert result.code == 0, result.stderr
    assert format_sci(2 * 64**3) in result.stdout  # 2 · 64³ = 524,288 → 5.243e5
    assert "not the device measured: cpu" in result.stdout
    assert "e+" not in result.stdout and "MFU 0.000" not in result.stdout


def test_the_run_line_has_one_duration(cli) -> None:  # type: ignore[no-untyped-def]
    doc = cli("account", "--model", "tiny", "--batch", "1", "--seq", "8", "--tokens", "1B",
              "--json").json()
    out = cli("account", "--model", "tiny", "--batch", "1", "--seq", "8", "--tokens",
              "1B").stdout
    line = next(line for line in out.splitlines() if line.startswith("the whole run"))
    assert format_duration(doc["run"]["time_s"]) in line and "days)" not in line


def test_a_factory_is_labelled_as_given(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    example = Path(__file__).parents[2] / "examples" / "own_model.py"
    given = f"{example}:make_model"
    out = cli("trace", "--model", given, "--batch", "1", "--seq", "8", "--step", "forward",
              "--depth", "1").stdout
    assert out.startswith(f"{given}: step forward")
