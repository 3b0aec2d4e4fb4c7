"""Which chip the meter runs on, and which of its dense peaks a counted step is measured against.

- *The chip*: a CUDA device's name (``torch.cuda.get_device_name``) maps onto a catalog id
  through a short table of patterns; a name the table does not know is never guessed (an H100
  NVL or an A100 PCIe has other peaks than its SXM sibling).  Failing that, the profile written
  by ``tensorledger probe`` (``--hardware local``), and failing that the user must name one.
- *The peak*: the dtype the matrix work actually ran in, read off the recorded matmul and
  attention ops (bf16 under autocast even though the parameters are fp32; tf32 for fp32
  matmuls on CUDA when ``torch.backends.cuda.matmul.allow_tf32`` is on).  When matrix work ran
  in several dtypes the peak is the FLOP-weighted harmonic mean of theirs, i.e. the rate at
  which the chip would do the same mixture: Σ flops / Σ (flops_d / peak_d).
- A peak is refused when it is a "with sparsity" figure: a dense entry equal to or above the
  chip's own sparse entry, or equal to the sparse figure of the catalog chip of the same id.

>>> chip_for_device_name("NVIDIA H100 80GB HBM3"), chip_for_device_name("NVIDIA H100 NVL")
('h100-sxm', None)
>>> chip_for_device_name("NVIDIA A100-SXM4-40GB"), chip_for_device_name("NVIDIA A100 80GB PCIe")
('a100-40gb', None)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tensorledger.errors import InputError, TensorLedgerError, UnknownNameError
from tensorledger.hardware import LOCAL, Hardware, catalog, get_hardware, local_profile_path
from tensorledger.units import format_flop_rate

if TYPE_CHECKING:
    import torch

    from tensorledger.bench.meter_routing import LayerRouting
    from tensorledger.trace.records import Trace

__all__ = ["MATRIX_CATEGORIES", "Peak", "StepCount", "chip_for_device_name", "count_step",
           "default_hardware", "dense_peak", "resolve_hardware"]

#: Categories of recorded ops that run on the matrix units (the MFU peak's dtype comes from them).
MATRIX_CATEGORIES = frozenset({"matmul", "attention"})

_FLOATING_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4")

# CUDA device names (as torch reports them) → catalog ids.  Order matters: the PCIe and NVL
# variants of a chip are tried before the plain name, and variants not in the catalog match
# nothing.
_CUDA_NAMES: tuple[tuple[re.Pattern[str], str | None], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), chip) for pattern, chip in (
        (r"\bH100\b.*\bPCIe\b", "h100-pcie"),
        (r"\bH100\b.*\bNVL\b", None),
        (r"\bH100\b", "h100-sxm"),  # "NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"
        (r"\bH200\b.*\bNVL\b", None),
        (r"\bH200\b", "h200-sxm"),
        (r"\bA100\b.*SXM.*40\s*GB", "a100-40gb"),
        (r"\bA100\b.*SXM.*80\s*GB", "a100-80gb"),
        (r"\bB200\b", "b200"),
        (r"\bMI300X\b", "mi300x"),
        (r"\bL4\b", "l4"),
        (r"\bRTX 4090\b", "rtx-4090"),
        (r"\bV100\b.*SXM2", "v100-sxm"),
    ))


def chip_for_device_name(name: str) -> str | None:
    """The catalog id of a CUDA device name, or None when the name is not one the catalog has."""
    for pattern, chip in _CUDA_NAMES:
        if pattern.search(name):
            return chip
    return None


def _local_or_none() -> Hardware | None:
    return get_hardware(LOCAL) if local_profile_path().is_file() else None


def default_hardware(device: torch.device) -> Hardware:
    """The chip ``device`` is: its catalog entry when its name is known, else the probed
    profile, else an error that says how to name one."""
    seen = device.type
    if device.type == "cuda":
        import torch

        seen = torch.cuda.get_device_name(device)
        chip = chip_for_device_name(seen)
        if chip is not None:
            return catalog()[chip]
    local = _local_or_none()
    if local is not None:
        return local
    raise TensorLedgerError(
        f"the meter cannot tell which hardware {seen!r} is; pass hardware= (a catalog id such "
        f"as 'h100', or a TOML file), or run `tensorledger probe` to measure this machine "
        f"(it writes {local_profile_path()})")


def resolve_hardware(hardware: str | Hardware | None, device: torch.device) -> Hardware:
    """A chip given by name, path or object, or the default for ``device``."""
    if hardware is None:
        return default_hardware(device)
    if isinstance(hardware, Hardware):
        return hardware
    if not isinstance(hardware, str) or not hardware.strip():
        raise InputError(f"hardware must be a catalog id, a TOML path or a Hardware, got "
                         f"{hardware!r}")
    return get_hardware(hardware)


@dataclass(frozen=True)
class StepCount:
    """What the recorder counted in one step of one input shape."""

    flops: int  # causal attention counted in full, as Trace.flops
    flops_causal_halved: int
    matrix_flops: Mapping[str, int]  # compute key ("bf16", "tf32", ...) → matmul + attention
    tokens: int  # tokens of the recorded step
    ops: int
    uncovered: Mapping[str, int]  # op → calls with no cost rule (their FLOPs are not counted)
    phase_flops: Mapping[str, int] = field(default_factory=dict)  # forward, backward, ...
    # each MoE layer's routing as measured in the step (bench.meter_routing); () for none
    routing: tuple[LayerRouting, ...] = ()

    def flops_for(self, convention: str) -> int:
        """FLOPs under ``full`` or ``causal-halved``."""
        return self.flops if convention == "full" else self.flops_causal_halved


def _matrix_key(dtypes: tuple[str, ...], tf32: bool) -> str | None:
    from tensorledger.dtypes import resolve_dtype

    for dtype in dtypes:
        try:
            key = resolve_dtype(dtype).compute
        except UnknownNameError:
            continue
        if key in _FLOATING_KEYS:
            return "tf32" if key == "fp32" and tf32 else key
    return None


def count_step(trace: Trace, tokens: int, tf32: bool = False,
               routing: tuple[LayerRouting, ...] = ()) -> StepCount:
    """Sum a recorded step: FLOPs, and matrix FLOPs by the dtype they ran in.

    ``tf32``: fp32 matmuls ran on tensor cores in TF32 (CUDA with ``allow_tf32``);
    ``routing``: the MoE routing measured in the step, kept beside its count.
    """
    matrix: dict[str, int] = {}
    phases: dict[str, int] = {}
    for record in trace.records:
        phases[record.phase] = phases.get(record.phase, 0) + record.flops
        if record.category in MATRIX_CATEGORIES and record.flops:
            key = _matrix_key(record.input_dtypes, tf32)
            if key is not None:
                matrix[key] = matrix.get(key, 0) + record.flops
    ordered = dict(sorted(matrix.items(), key=lambda item: -item[1]))
    return StepCount(flops=trace.flops, flops_causal_halved=trace.flops_causal_halved,
                     matrix_flops=ordered, tokens=tokens, ops=len(trace.records),
                     uncovered=dict(trace.uncovered), phase_flops=phases, routing=routing)


@dataclass(frozen=True)
class Peak:
    """The dense peak a step's MFU is measured against."""

    hardware: str  # the chip's id
    dtypes: tuple[str, ...]  # compute keys of the matrix work, most FLOPs first
    flop_per_s: float

    @property
    def label(self) -> str:
        """``bf16`` or ``bf16+fp32``: the dtypes whose peaks make this one."""
        return "+".join(self.dtypes)


def _refuse_sparse(hardware: Hardware, key: str) -> float:
    dense = hardware.peak_flop_per_s(key)
    own_sparse = hardware.sparse_flop_per_s.get(key)
    same = catalog().get(hardware.id)
    catalog_sparse = same.sparse_flop_per_s.get(key) if same is not None else None
    if (own_sparse is not None and dense >= own_sparse) or (
            catalog_sparse is not None and dense == catalog_sparse):
        raise TensorLedgerError(
            f"{hardware.id}'s {key} peak of {format_flop_rate(dense)} is a with-sparsity "
            f"figure, which only 2:4 sparse matmuls reach; MFU needs the dense peak (for "
            f"NVIDIA datasheets, half the sparse one)")
    return dense


def dense_peak(count: StepCount, hardware: Hardware) -> Peak:
    """The dense peak for the matrix dtypes of ``count`` on ``hardware`` (see the module
    docstring); fp32 (or the chip's slowest floating peak) when the step did no matrix work.

    >>> from tensorledger.hardware import get_hardware
    >>> step = StepCount(flops=300, flops_causal_halved=300, matrix_flops={"bf16": 200},
    ...                  tokens=4, ops=3, uncovered={})
    >>> dense_peak(step, get_hardware("h100")).flop_per_s
    989500000000000.0
    """
    matrix = {k: v for k, v in count.matrix_flops.items() if v > 0}
    if not matrix:
        floating = [k for k in _FLOATING_KEYS if k in hardware.dense_flop_per_s]
        if not floating:
            raise InputError(f"{hardware.id} lists no floating-point peak to measure MFU by")
        key = "fp32" if "fp32" in floating else min(
            floating, key=lambda k: hardware.dense_flop_per_s[k])
        return Peak(hardware.id, (key,), _refuse_sparse(hardware, key))
    peaks = {key: _refuse_sparse(hardware, key) for key in matrix}
    if len(peaks) == 1:  # exactly the table's figure, not a rounded quotient
        return Peak(hardware.id, tuple(peaks), next(iter(peaks.values())))
    ideal_s = sum(flops / peaks[key] for key, flops in matrix.items())
    return Peak(hardware.id, tuple(matrix), sum(matrix.values()) / ideal_s)
