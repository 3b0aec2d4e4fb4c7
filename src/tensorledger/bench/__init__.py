"""Measurement: the only place in tensorledger that times anything.

``measure(fn)`` warms up, synchronises the device before and after, repeats until a time
budget or a count, and returns robust statistics; ``probe`` measures this device's ceilings
(matmul FLOP/s per dtype, memory bandwidth, per-op overhead) and saves them as a hardware
profile that ``--hardware local`` then uses like a catalog chip; ``tensorledger.Meter``
(:mod:`tensorledger.bench.meter`) measures tokens/s and MFU live in a user's own training loop,
and :mod:`tensorledger.bench.hf_callback` runs it inside a Hugging Face ``Trainer``.
"""

from __future__ import annotations

from tensorledger.bench.harness import Measurement, measure, synchronize
from tensorledger.bench.matmul import MatmulBenchmark, bench_matmul
from tensorledger.bench.probe import ProbeResult, probe, profile_toml
from tensorledger.bench.probe_apart import probe_apart

__all__ = [
    "MatmulBenchmark",
    "Measurement",
    "ProbeResult",
    "bench_matmul",
    "measure",
    "probe",
    "probe_apart",
    "profile_toml",
    "synchronize",
]
