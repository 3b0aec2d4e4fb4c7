"""``tensorledger probe`` and ``tensorledger bench matmul``: measurements on this machine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from tensorledger.cli.common import JSON_HELP, emit, integer_parser, real_parser
from tensorledger.errors import InputError
from tensorledger.hardware import LOCAL, get_hardware, local_profile_path
from tensorledger.report.files import check_output_path, write_atomic

__all__ = ["register"]

# the limits are stated in help, so they are known without importing torch
MAX_MATMUL_N = 2**20  # tensorledger.bench.matmul.MAX_MATMUL_N
MAX_BUDGET_S = 600.0  # tensorledger.bench.matmul.MAX_BUDGET_S
MAX_RANKS = 64  # tensorledger.bench.collectives.MAX_RANKS
MAX_SPREAD = 100.0  # the widest --max-spread: an interquartile range 100 times the median

JsonOpt = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu or cuda (cuda:0, ...).")]


def probe_command(
    device: DeviceOpt = "cpu",
    output: Annotated[Path | None, typer.Option(
        "--output", help="Profile file to write (default: the local profile that "
        "`--hardware local` reads).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sweep, short budget.")] = False,
    calibrate: Annotated[bool, typer.Option(
        "--calibrate", help="On a CPU, also fit the profile on whole eager steps of seven "
        "calibration models in each precision recipe, fp32, mixed-bf16 and bf16 (kernels in "
        "a step by dtype, time between ops: about twelve minutes more, twice that where the "
        "machine's speed wanders and the steps are measured again); not with --quick."
    )] = False,
    collectives: Annotated[bool, typer.Option(
        "--collectives", help="Also time all-reduce, all-gather and reduce-scatter on --ranks "
        "local ranks under torchrun (gloo on cpu, NCCL on cuda) and write the fitted latency "
        "and bandwidth as this machine's node in the profile (with the bus bandwidth by size)."
    )] = False,
    ranks: Annotated[int | None, typer.Option(
        "--ranks", parser=integer_parser(2, MAX_RANKS),
        help=f"Ranks for --collectives, 2 to {MAX_RANKS} (on cuda at most the devices "
        "present); default 2.")] = None,
    max_spread: Annotated[float, typer.Option(
        "--max-spread", parser=real_parser(0.01, MAX_SPREAD),
        help="The widest spread (interquartile range over the median, as a fraction: 0.1 is "
        f"10%) a figure may keep after its re-measurements, 0.01 to {MAX_SPREAD:g}; a figure "
        "wider is left out of the profile (a DRAM bandwidth or per-op cost it cannot do "
        "without is kept and marked unreliable). A busy machine may need more.")] = 0.10,
    as_json: JsonOpt = False,
) -> None:
    """Measure this device's matmul FLOP/s per dtype, memory bandwidth and per-op overhead
    (and with --collectives its collectives)."""
    from tensorledger.bench import probe, probe_apart, profile_toml
    from tensorledger.bench.probe_kernels import KernelPlan
    from tensorledger.report.bench import collectives_view, probe_view

    # refuse where the profile goes before the minutes of probing
    if output is not None:
        check_output_path(output, (".toml",))
    else:
        home = os.environ.get("TENSORLEDGER_HOME")
        check_output_path(local_profile_path(), (".toml",), make_folder=True,
                          what=f"TENSORLEDGER_HOME={home}: " if home else "")
    if calibrate and (quick or device.strip().lower() != "cpu"):
        raise InputError("--calibrate runs whole steps on the CPU: use it with --device cpu "
                         "and without --quick")
    if ranks is not None and not collectives:
        raise InputError("--ranks applies to --collectives; add --collectives or drop --ranks")
    status = Console(stderr=True)
    measured = None
    if collectives:  # first: a torchrun that fails costs seconds, not the probe's minutes
        from tensorledger.bench.collectives import (
            DEFAULT_SIZES,
            QUICK_SIZES,
            check_ranks,
            probe_collectives,
        )

        check_ranks(ranks or 2, device)
        measured = probe_collectives(
            ranks or 2, device=device, sizes=QUICK_SIZES if quick else DEFAULT_SIZES,
            budget_s=0.05 if quick else 0.2,
            progress=lambda step: status.print(f"probing collectives: {step} ...", style="dim"))
    options: dict[str, Any] = {"sizes": (64, 128, 256, 512) if quick else None,
                               "attention_seqs": (64, 128) if quick else None,
                               "budget_s": 0.1 if quick else 0.5, "max_spread": max_spread,
                               "kernels": KernelPlan.quick() if quick else None}
    # the calibration's steps run in this process after the probe: the probe in a process of
    # its own leaves this one's thread count as it was (bench.probe_apart)
    result = (probe_apart if calibrate else probe)(
        device=device, progress=lambda step: status.print(f"probing {step} ...", style="dim"),
        **options)
    target = output or local_profile_path()
    text = profile_toml(result, collectives=measured)
    if calibrate:
        from tensorledger.hardware.catalog import parse_hardware_toml
        from tensorledger.ledger.calibrate import calibrate as fit
        from tensorledger.ledger.calibrate import calibration_toml

        fitted = fit(parse_hardware_toml(text, str(target), "local"),
                     progress=lambda step: status.print(f"{step} ...", style="dim"))
        text = profile_toml(result, calibration=calibration_toml(fitted), collectives=measured)
    if output is None:
        target.parent.mkdir(parents=True, exist_ok=True)  # the default place is ours to make
    write_atomic(target, text)
    document: dict[str, object] = {"profile_path": str(target), "probe": result}
    views = probe_view(result, str(target))
    if measured is not None:
        document["collectives"] = measured
        views[-1:-1] = collectives_view(measured)
    emit("probe", document, as_json, *views)


def matmul_command(
    n: Annotated[int, typer.Option("--n", parser=integer_parser(1, MAX_MATMUL_N),
                                   help=f"Matrix size: an n×n by n×n product, 1 to "
                                   f"{MAX_MATMUL_N}; refused if it does not fit in memory.")]
    = 2048,
    dtype: Annotated[str, typer.Option("--dtype", help="fp32, bf16, fp16, ...")] = "bf16",
    device: DeviceOpt = "cpu",
    hardware: Annotated[str | None, typer.Option(
        "--hardware", "-H", help="Chip whose dense peak the MFU is taken against.")] = None,
    budget: Annotated[float, typer.Option(parser=real_parser(0.0, MAX_BUDGET_S),
                                          help="Seconds of repeats after warm-up, 0 to "
                                          f"{MAX_BUDGET_S:g}.")] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """Time one matmul: FLOPs, achieved FLOP/s, MFU against the spec and the probed peak."""
    from tensorledger.bench import bench_matmul
    from tensorledger.report.bench import matmul_view

    if not 0 <= budget <= MAX_BUDGET_S:
        raise InputError(f"--budget must be from 0 to {MAX_BUDGET_S:g} seconds, got {budget:g}")
    spec = get_hardware(hardware) if hardware else None
    probed = get_hardware(LOCAL) if _profile_present() else None
    result = bench_matmul(n, dtype, device, hardware=spec, probed=probed, budget_s=budget)
    emit("bench matmul", result, as_json, *matmul_view(result))


def _profile_present() -> bool:
    try:
        return local_profile_path().is_file()
    except OSError:
        return False


def register(app: typer.Typer) -> None:
    app.command("probe")(probe_command)
    bench = typer.Typer(help="Benchmarks on this machine.", no_args_is_help=True)
    bench.command("matmul")(matmul_command)
    app.add_typer(bench, name="bench")
