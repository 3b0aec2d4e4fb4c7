"""The roofline: each op is bound by compute or by memory bandwidth.

``predict(records, hardware)`` turns traced ops into predicted times: per op
``max(FLOPs / peak(dtype), bytes / bandwidth)`` plus the chip's per-op overhead, the bound
that decides it, and totals per category, module and phase.  Torch-free: it reads op records,
never runs them.
"""

from __future__ import annotations

from tensorledger.roofline.model import (
    TENSOR_CORE_CATEGORIES,
    OpLike,
    OpPrediction,
    RooflinePrediction,
    TimeTotal,
    calibrated_for,
    ceiling,
    compute_key_for,
    predict,
    predict_op,
)

__all__ = [
    "TENSOR_CORE_CATEGORIES",
    "OpLike",
    "OpPrediction",
    "RooflinePrediction",
    "TimeTotal",
    "calibrated_for",
    "ceiling",
    "compute_key_for",
    "predict",
    "predict_op",
]
