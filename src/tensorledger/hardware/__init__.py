"""Accelerators as data: peak FLOP/s per dtype, memory, bandwidth, each number with a source.

The catalog ships as ``catalog.toml`` inside the package; a user's own chip comes from a TOML
file of the same shape (``--hardware my.toml``).  Nothing here imports torch.

>>> h100 = get_hardware("h100")
>>> h100.id, h100.peak_flop_per_s("bf16"), round(h100.intensity_flop_per_byte("bf16"))
('h100-sxm', 989500000000000.0, 295)
"""

from __future__ import annotations

from tensorledger.hardware.catalog import (
    COMPUTE_KEYS,
    LOCAL,
    Efficiency,
    Hardware,
    catalog,
    get_hardware,
    load_hardware_file,
    local_profile_path,
)

__all__ = ["COMPUTE_KEYS", "LOCAL", "Efficiency", "Hardware", "catalog", "get_hardware",
           "load_hardware_file", "local_profile_path"]
