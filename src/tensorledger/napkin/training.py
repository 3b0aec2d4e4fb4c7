"""Training compute and time on a napkin: 6·N·D, peak × MFU × devices, days.

The 6·N·D rule (Kaplan et al. 2020, Table 1: C ≈ 6N per training token) counts 2N FLOPs per
token forward and 4N backward; it leaves out attention's sequence-length term and the
optimizer's few FLOPs per parameter.  Peaks are dense (no sparsity) from the hardware catalog.
A mixture of experts runs a token through its active parameters only (k of E routed experts,
the shared parts): given ``active_params``, the rule is 6·N_active·D.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.napkin.arithmetic import (
    Step,
    check_count,
    check_fraction,
    check_positive,
    check_result,
    whole_devices,
)
from tensorledger.summary import show_flops, show_time, summary

__all__ = [
    "DevicesForDuration",
    "FlopBudget",
    "TrainingTime",
    "devices_for_duration",
    "flop_budget",
    "training_flops",
    "training_time",
]

SECONDS_PER_DAY = 86400.0


def training_flops(params: float, tokens: float) -> float:
    """6·N·D: forward 2N and backward 4N FLOPs per token (Kaplan et al. 2020).

    >>> training_flops(70e9, 15e12)
    6.3e+24
    """
    return check_result("FLOP count 6·N·D",
                        6.0 * check_positive("params", params) * check_positive("tokens", tokens))


def _total_flops(flops: float | None, params: float | None, tokens: float | None,
                 active: float | None = None) -> Step:
    """The first step of the working: FLOPs as given, or 6·N·D (6·N_active·D with ``active``).

    >>> _total_flops(None, 46.7e9, 1e12, active=12.9e9).formula
    '6 × active params × tokens'
    """
    if flops is not None:
        if params is not None or tokens is not None or active is not None:
            raise InputError("give either flops, or params with tokens, not both")
        return Step("total FLOPs", "given", check_positive("flops", flops), "flops")
    if params is None or tokens is None:
        raise InputError("give flops, or params and tokens")
    if active is not None:
        check_positive("active params", active)
        if active > params:
            raise InputError(f"active params ({active:.4g}) cannot exceed the total params "
                             f"({params:.4g}): a token runs a part of the model")
        return Step("total FLOPs", "6 × active params × tokens", training_flops(active, tokens),
                    "flops")
    return Step("total FLOPs", "6 × params × tokens", training_flops(params, tokens), "flops")


@dataclass(frozen=True)
class TrainingTime:
    """How long ``flops`` take on ``count`` devices at a model-FLOPs utilisation ``mfu``."""

    hardware: str
    dtype: str
    count: int
    mfu: float
    params: float | None
    tokens: float | None
    flops: float
    peak_flop_per_s: float
    cluster_flop_per_s: float
    flops_per_day: float
    time_s: float
    time_days: float
    steps: tuple[Step, ...]
    active_params: float | None = None  # a mixture of experts: 6·N_active·D was counted

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("TrainingTime", f"{show_flops(self.flops)} on {self.count:,} × "
                       f"{self.hardware} at MFU {self.mfu:g}", f"{self.time_days:,.4g} days")


def training_time(hardware: Hardware, count: int, mfu: float, *, flops: float | None = None,
                  params: float | None = None, tokens: float | None = None,
                  dtype: str = "bf16", active_params: float | None = None) -> TrainingTime:
    """Days to train: FLOPs / (dense peak × MFU × count) / 86400.

    Give ``flops`` directly, or ``params`` and ``tokens`` for 6·N·D; a mixture of experts'
    ``active_params`` (those a token runs) for 6·N_active·D.
    """
    check_count("count", count)
    check_fraction("mfu", mfu)
    total = _total_flops(flops, params, tokens, active_params)
    flops = total.value
    steps = [total]
    peak = hardware.peak_flop_per_s(dtype)
    cluster = check_result("cluster FLOP/s", peak * mfu * count)
    per_day = check_result("FLOPs per day", cluster * SECONDS_PER_DAY)
    time_s = check_result("training time", flops / cluster)
    steps += [
        Step(f"dense {hardware.compute_key(dtype)} peak per device", hardware.id, peak,
             "flop_per_s"),
        Step("achieved by the cluster", "peak × MFU × count", cluster, "flop_per_s"),
        Step("FLOPs per day", "cluster FLOP/s × 86400 s", per_day, "flops_per_day"),
        Step("training time", "total FLOPs / FLOPs per day", time_s / SECONDS_PER_DAY, "days"),
    ]
    return TrainingTime(hardware=hardware.id, dtype=hardware.compute_key(dtype), count=count,
                        mfu=mfu, params=params, tokens=tokens, flops=flops, peak_flop_per_s=peak,
                        cluster_flop_per_s=cluster, flops_per_day=per_day, time_s=time_s,
                        time_days=time_s / SECONDS_PER_DAY, steps=tuple(steps),
                        active_params=active_params)


@dataclass(frozen=True)
class DevicesForDuration:
    """The inverse question: how many devices finish ``flops`` within ``duration_s``."""

    hardware: str
    dtype: str
    mfu: float
    flops: float
    duration_s: float
    peak_flop_per_s: float
    devices_exact: float
    devices: int
    time_days_with_devices: float
    steps: tuple[Step, ...]
    active_params: float | None = None  # a mixture of experts: 6·N_active·D was counted

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("DevicesForDuration", f"{show_flops(self.flops)} within "
                       f"{show_time(self.duration_s)} at MFU {self.mfu:g}",
                       f"{self.devices:,} × {self.hardware}")


def devices_for_duration(hardware: Hardware, duration_s: float, mfu: float, *,
                         flops: float | None = None, params: float | None = None,
                         tokens: float | None = None, dtype: str = "bf16",
                         active_params: float | None = None) -> DevicesForDuration:
    """Devices = ceil(FLOPs / (peak × MFU × duration)); give ``flops``, or ``params`` and
    ``tokens`` for 6·N·D (and ``active_params`` for 6·N_active·D)."""
    check_positive("duration", duration_s)
    check_fraction("mfu", mfu)
    total = _total_flops(flops, params, tokens, active_params)
    flops = total.value
    peak = hardware.peak_flop_per_s(dtype)
    per_device = check_result("FLOPs per device", peak * mfu * duration_s)
    exact = check_result("number of devices", flops / per_device)
    devices = whole_devices("number of devices", exact)
    actual_days = check_result("training time", flops / (peak * mfu * devices) / SECONDS_PER_DAY)
    steps = (
        total,
        Step(f"dense {hardware.compute_key(dtype)} peak per device", hardware.id, peak,
             "flop_per_s"),
        Step("FLOPs one device does in the time", "peak × MFU × duration", per_device, "flops"),
        Step("devices needed", "ceil(total FLOPs / FLOPs per device)", devices, "devices"),
    )
    return DevicesForDuration(hardware=hardware.id, dtype=hardware.compute_key(dtype), mfu=mfu,
                              flops=flops, duration_s=duration_s, peak_flop_per_s=peak,
                              devices_exact=exact, devices=devices,
                              time_days_with_devices=actual_days, steps=steps,
                              active_params=active_params)


@dataclass(frozen=True)
class FlopBudget:
    """FLOPs that ``count`` devices deliver in ``duration_s`` at ``mfu`` (1.0 means peak)."""

    hardware: str
    dtype: str
    count: int
    mfu: float
    duration_s: float
    peak_flop_per_s: float
    flops: float
    steps: tuple[Step, ...]

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("FlopBudget", f"{self.count:,} × {self.hardware} for "
                       f"{show_time(self.duration_s)} at MFU {self.mfu:g}",
                       show_flops(self.flops))


def flop_budget(hardware: Hardware, count: int, duration_s: float, mfu: float = 1.0,
                dtype: str = "bf16") -> FlopBudget:
    """FLOPs = peak × MFU × count × duration (the lecture's 8 H100s for 2 weeks ≈ 9.6e21)."""
    check_count("count", count)
    check_positive("duration", duration_s)
    check_fraction("mfu", mfu)
    peak = hardware.peak_flop_per_s(dtype)
    flops = check_result("FLOP budget", peak * mfu * count * duration_s)
    steps = (
        Step(f"dense {hardware.compute_key(dtype)} peak per device", hardware.id, peak,
             "flop_per_s"),
        Step("duration", "given", duration_s, "s"),
        Step("FLOP budget", "peak × MFU × count × duration", flops, "flops"),
    )
    return FlopBudget(hardware=hardware.id, dtype=hardware.compute_key(dtype), count=count,
                      mfu=mfu, duration_s=duration_s, peak_flop_per_s=peak, flops=flops,
                      steps=steps)
