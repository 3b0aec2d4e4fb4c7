"""The collective probe without torchrun: the α–β fit, nccl-tests' factors, the profile it
writes, and the CLI's refusals (the real run is in test_collectives_torchrun.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from tensorledger.bench import collectives as measured
from tensorledger.bench.collectives import (
    CollectiveProbe,
    LinkFit,
    collective_point,
    fit_link,
    link_time_s,
)
from tensorledger.bench.probe import ProbeResult, profile_toml
from tensorledger.errors import InputError
from tensorledger.hardware import load_hardware_file
from tensorledger.hardware.catalog import parse_hardware_toml
from tensorledger.roofline.collectives import CollectiveKind, collective_time
from tests.conftest import assert_one_line_error

AR, AG, RS = (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER,
              CollectiveKind.REDUCE_SCATTER)
SIZES = tuple(4**k * 2**10 for k in range(1, 9))  # 4 KiB … 64 MiB


def _points(alpha: float, bandwidth: float, ranks: int, noise: float = 0.0,
            seed: int = 0) -> list[tuple[CollectiveKind, float, float]]:
    rng = random.Random(seed)
    return [(kind, float(size), link_time_s(kind, size, ranks, alpha, bandwidth)
             * (1 + rng.uniform(-noise, noise)))
            for kind in (AR, AG, RS) for size in SIZES]


# ------------------------------------------------------------------------------ the fitter


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_fit_recovers_exact_alpha_and_bandwidth(ranks: int) -> None:
    fit = fit_link(_points(37e-6, 3.1e9, ranks), ranks)
    assert fit.latency_s == pytest.approx(37e-6, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(3.1e9, rel=1e-9)
    assert fit.rms_relative_error == pytest.approx(0.0, abs=1e-12)
    assert fit.points == 24 and not fit.latency_clamped


def test_fit_by_hand_two_points() -> None:
    # 2 ranks: all-reduce 2 steps, moves 2·1/2·S = S; all-gather 1 step, moves S/2
    # t_AR = 2·10µs + 1e6/1e9 = 1.02 ms; t_AG = 10µs + 0.5e6/1e9 = 0.51 ms
    fit = fit_link([(AR, 1e6, 1.02e-3), (AG, 1e6, 0.51e-3), (AR, 4e6, 4.02e-3)], 2)
    assert fit.latency_s == pytest.approx(10e-6, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(1e9, rel=1e-9)


def test_fit_within_tolerance_of_noisy_points() -> None:
    for seed in range(5):
        fit = fit_link(_points(80e-6, 0.5e9, 2, noise=0.10, seed=seed), 2)
        assert fit.latency_s == pytest.approx(80e-6, rel=0.15), seed
        assert fit.bandwidth_bytes_per_s == pytest.approx(0.5e9, rel=0.10), seed
        assert 0 < fit.rms_relative_error < 0.10


def test_fit_clamps_a_negative_latency() -> None:
    # times that fall below the line's intercept at small sizes: the free fit's α < 0
    points = [(AR, float(s), s / 1e9 * (0.5 if s < 2**16 else 1.0)) for s in SIZES]
    fit = fit_link(points, 2)
    assert fit.latency_clamped and fit.latency_s == 0.0
    assert fit.bandwidth_bytes_per_s > 0


@pytest.mark.parametrize("points, ranks, fragment", [
    ([(AR, 1e6, 1e-3)], 2, "at least two points"),
    ([(AR, 1e6, 1e-3), (AR, 1e6, 2e-3)], 2, "same proportion"),  # one size, one kind
    ([(AR, 1e6, 1e-3), (AG, 0.0, 1e-3)], 2, "above 0"),
    ([(AR, 1e6, 1e-3), (AG, 1e6, float("nan"))], 2, "above 0"),
    ([(AR, 1e6, 1e-3), (AR, 2e6, 1e-3)], 1, "2 or more ranks"),
    ([(AR, 1e3, 1e-3), (AR, 1e6, 1e-4)], 2, "do not grow"),
])
def test_fit_refusals(points: list[tuple[CollectiveKind, float, float]], ranks: int,
                      fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        fit_link(points, ranks)


def test_fit_prices_like_collective_time() -> None:
    # the fitted link as a profile's node: collective_time gives back the fitted formula
    fit = fit_link(_points(37e-6, 3.1e9, 4), 4)
    chip = parse_hardware_toml(_profile(_probe(fit, 4)), "t.toml", "local")
    for kind in (AR, AG, RS):
        for size in (4096.0, 2.0**26):
            priced = collective_time(kind, size, 4, chip).time_s
            own = link_time_s(kind, size, 4, fit.latency_s, fit.bandwidth_bytes_per_s)
            assert priced == pytest.approx(own, rel=1e-12)


# ----------------------------------------------------------- nccl-tests' factors, by hand


def test_busbw_factors_by_hand() -> None:
    samples = [3e-3, 1e-3, 2e-3, 4e-3, 5e-3]  # median 3 ms
    size = 3 * 2**20  # 3 MiB = 3145728 B; algbw = 3145728 / 3e-3 = 1048576000 B/s
    expected = {(AR, 2): 1.0,  # 2·(2−1)/2
                (AR, 4): 1.5,  # 2·3/4
                (AG, 4): 0.75,  # 3/4
                (RS, 8): 0.875}  # 7/8
    for (kind, ranks), factor in expected.items():
        point = collective_point(kind, size, ranks, samples, calls_per_sample=7)
        assert point.median_s == 3e-3 and point.calls_per_sample == 7
        assert point.algbw_bytes_per_s == size / 3e-3
        assert point.bus_factor == factor
        assert point.busbw_bytes_per_s == point.algbw_bytes_per_s * factor
    # spread: quartiles of 1..5 ms (inclusive) are 2 and 4 ms: IQR 2 ms over the median 3 ms
    assert collective_point(AR, size, 2, samples).spread == pytest.approx(2 / 3)
    with pytest.raises(InputError):
        collective_point(AR, size, 2, [])


# ------------------------------------------------------------------------- the profile


def _probe(fit: LinkFit, ranks: int) -> CollectiveProbe:
    points = tuple(collective_point(kind, size, ranks, [link_time_s(
        kind, size, ranks, fit.latency_s, fit.bandwidth_bytes_per_s)]) for kind in (AR, AG)
        for size in (2**12, 2**20))
    return CollectiveProbe(backend="gloo", device="cpu", ranks=ranks, link="intra-node",
                           points=points, fit=fit)


def _profile(probe: CollectiveProbe) -> str:
    result = ProbeResult(device="cpu", name="test cpu", memory_bytes=2**30,
                         dense_flop_per_s={"fp32": 1e11}, memory_bandwidth_bytes_per_s=1e10,
                         op_overhead_s=1e-6, bare_op_overhead_s=1e-6,
                         curves={"bandwidth": ((1e6, 2e10), (1e7, 1e10))})
    return profile_toml(result, collectives=probe)


def test_profile_round_trip(tmp_path: Path) -> None:
    fit = LinkFit(latency_s=123.456e-6, bandwidth_bytes_per_s=7.89e8, ranks=3, points=4,
                  rms_relative_error=0.05)
    probe = _probe(fit, 3)
    path = tmp_path / "local.toml"
    path.write_text(_profile(probe))
    chip = load_hardware_file(path)
    assert chip.devices_per_node == 3
    assert chip.intra_node_bytes_per_s == fit.bandwidth_bytes_per_s
    assert chip.intra_node_latency_s == pytest.approx(fit.latency_s, rel=1e-12)
    assert chip.inter_node_bytes_per_s is None and chip.inter_node_latency_s is None
    assert "probe --collectives" in chip.source("intra_node_bandwidth")
    assert chip.curves["bandwidth"] == ((1e6, 2e10), (1e7, 1e10))  # the probe's own curves
    for kind in ("all-reduce", "all-gather"):
        curve = chip.curves[f"busbw.{kind}"]
        assert curve == tuple((float(p.size_bytes), p.busbw_bytes_per_s)
                              for p in probe.points if p.kind == kind)
    assert chip.unreliable == ()  # one sample per point: no spread
    spread = collective_point(AR, 2**16, 3, [1e-3, 2e-3, 3e-3, 4e-3, 5e-3])  # IQR 2/3 of 3 ms
    noisy = CollectiveProbe(backend="gloo", device="cpu", ranks=3, link="intra-node",
                            points=(*probe.points, spread), fit=fit)
    reread = parse_hardware_toml(_profile(noisy), "n.toml", "local")
    assert reread.unreliable == ("all-reduce 65536 B (spread 67%)",)
    # without collectives the profile has no node
    bare = ProbeResult(device="cpu", name="x", memory_bytes=2**30,
                       dense_flop_per_s={"fp32": 1e11}, memory_bandwidth_bytes_per_s=1e10,
                       op_overhead_s=1e-6, bare_op_overhead_s=1e-6)
    assert parse_hardware_toml(profile_toml(bare), "b.toml").devices_per_node is None


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("args, fragment", [
    (["--collectives", "--ranks", "0"], "--ranks"),
    (["--collectives", "--ranks", "1"], "--ranks"),
    (["--collectives", "--ranks", "99999"], "--ranks"),
    (["--collectives", "--ranks", "-2"], "--ranks"),
    (["--collectives", "--ranks", "two"], "--ranks"),
    (["--ranks", "2"], "--collectives"),
    (["--collectives", "--device", "meta"], "cpu (gloo) or cuda"),
])
def test_cli_refusals(cli, tmp_path: Path, monkeypatch, args: list[str],  # type: ignore[no-untyped-def]
                      fragment: str) -> None:
    def never(*_: object, **__: object) -> None:
        raise AssertionError("nothing is measured after a refusal")

    import tensorledger.bench as bench

    monkeypatch.setattr(measured, "probe_collectives", never)
    monkeypatch.setattr(bench, "probe", never)
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))
    assert_one_line_error(cli("probe", *args, "--output", str(tmp_path / "p.toml")), fragment)
    assert not (tmp_path / "p.toml").exists()


def test_cli_collectives_fold_into_the_profile(cli, tmp_path: Path, monkeypatch  # type: ignore[no-untyped-def]
                                               ) -> None:
    import tensorledger.bench as bench
    from tests.cli.test_fuzz import _fake_collectives, _fake_probe

    calls: list[dict[str, object]] = []

    def fake(ranks: int, **options: object) -> CollectiveProbe:
        calls.append({**options, "ranks": ranks})
        probe: CollectiveProbe = _fake_collectives(ranks)
        return probe

    monkeypatch.setattr(measured, "probe_collectives", fake)
    monkeypatch.setattr(bench, "probe", _fake_probe)
    out = tmp_path / "p.toml"
    result = cli("probe", "--quick", "--collectives", "--ranks", "3", "--output", str(out),
                 "--json")
    assert result.code == 0, result.stderr
    assert calls[0]["ranks"] == 3 and calls[0]["sizes"] == measured.QUICK_SIZES
    doc = result.json()
    assert doc["collectives"]["ranks"] == 3
    assert doc["collectives"]["fit"]["latency_s"] == 50e-6
    chip = load_hardware_file(out)
    assert chip.devices_per_node == 3 and chip.intra_node_bytes_per_s == 1e9
    text = cli("probe", "--collectives", "--output", str(out))
    assert text.code == 0 and "fitted intra-node link" in text.stdout
    assert calls[1]["ranks"] == 2 and calls[1]["sizes"] == measured.DEFAULT_SIZES


def test_torchrun_failure_is_one_line() -> None:
    from tensorledger.errors import DeviceError

    # a launch whose rank says why it failed: that line is the error
    command = [sys.executable, "-c", "import sys; print('tensorledger-error: rank 0: boom', "
               "file=sys.stderr); sys.exit(3)"]
    with pytest.raises(DeviceError, match=r"failed \(exit 3\): rank 0: boom"):
        measured._run(command, 2, 60.0, lambda _: None)


def test_torchrun_failure_names_the_rank_error() -> None:
    from tensorledger.errors import DeviceError

    # torchrun's own report ("ChildFailedError", "traceback : To enable traceback see: ...")
    # says nothing of the cause; the rank's line before it does
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "-m", "tensorledger.no_such_module"]
    with pytest.raises(DeviceError, match=r"No module named tensorledger\.no_such_module"):
        measured._run(command, 2, 120.0, lambda _: None)


def test_torchrun_timeout_is_one_line() -> None:
    from tensorledger.errors import DeviceError

    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(DeviceError, match=r"killed after 0.5 s"):
        measured._run(command, 2, 0.5, lambda _: None)
