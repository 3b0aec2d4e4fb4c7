"""The examples' chip when the CPU is in no catalog: the ``tensorledger probe`` profile, else a
peak measured here and now on one 512×512 matmul per dtype (rough: say so when quoting MFU)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tensorledger import Hardware, TensorLedgerError, get_hardware
from tensorledger.bench import bench_matmul
from tensorledger.bench.meter_peak import default_hardware


def example_hardware(name: str | None, dtypes: Sequence[str] = ("fp32",)) -> Hardware:
    """``name`` when given; else this device's default; else a rate measured now."""
    if name:
        return get_hardware(name)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return default_hardware(device)
    except TensorLedgerError:
        rates = {d: bench_matmul(512, d, device.type, budget_s=0.2).achieved_flop_per_s
                 for d in dtypes}
        return Hardware(id="this-cpu", name="this CPU (one 512² matmul, measured just now)",
                        memory_bytes=1.0, memory_bandwidth_bytes_per_s=1.0,
                        dense_flop_per_s=rates, origin="examples/cpu_peak.py")
