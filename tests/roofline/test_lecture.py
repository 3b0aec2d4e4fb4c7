"""The lecture's intensities (FACTS.md), from traced ops rather than typed-in numbers; the
lecture's compute- or memory-bound split is the roofline bound's (``ideal_bound``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tensorledger.hardware import get_hardware
from tensorledger.roofline import OpPrediction, predict_op
from tensorledger.trace import trace

H100 = get_hardware("h100")
N = 2**20


def _only(step: Callable[[], Any], category: str) -> OpPrediction:
    records = [r for r in trace(step).records if r.category == category]
    assert len(records) == 1, [r.op for r in records]
    return predict_op(0, records[0], H100)


def _vector(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.bfloat16, device="meta")


def test_h100_ridge() -> None:
    assert H100.intensity_flop_per_byte("bf16") == pytest.approx(989.5e12 / 3.35e12)  # ≈ 295


def test_relu() -> None:
    x = _vector(N)
    p = _only(lambda: torch.relu(x), "elementwise")
    assert (p.flops, p.bytes) == (N, 4 * N)  # one compare per element; read 2n, write 2n bytes
    assert p.intensity_flop_per_byte == 0.25 and p.ideal_bound == "memory"


def test_gelu() -> None:
    x = _vector(N)
    p = _only(lambda: F.gelu(x, approximate="tanh"), "elementwise")
    assert p.bytes == 4 * N
    assert p.intensity_flop_per_byte == pytest.approx(5, rel=0.25)  # about 20 FLOPs / 4 bytes
    assert p.ideal_bound == "memory"


def test_dot_product() -> None:
    a, b = _vector(N), _vector(N)
    p = _only(lambda: torch.dot(a, b), "matmul")
    assert p.bytes == 4 * N + 2  # two bf16 vectors in, one bf16 scalar out
    assert p.flops in (2 * N, 2 * N - 1)  # n multiplies, n - 1 (or n) adds
    assert p.intensity_flop_per_byte == pytest.approx(0.5, rel=1e-3)
    assert p.ideal_bound == "memory"


def test_matrix_vector() -> None:
    n = 1024
    m, x = torch.empty(n, n, dtype=torch.bfloat16, device="meta"), _vector(n)
    p = _only(lambda: m @ x, "matmul")
    assert p.bytes == 2 * n * n + 2 * n + 2 * n  # matrix, vector in; vector out
    assert p.intensity_flop_per_byte == pytest.approx(1, rel=2e-3)  # 2n² / (2n² + 4n)
    assert p.ideal_bound == "memory"


def test_matmul() -> None:
    n = 1024
    a = torch.empty(n, n, dtype=torch.bfloat16, device="meta")
    b = torch.empty(n, n, dtype=torch.bfloat16, device="meta")
    p = _only(lambda: a @ b, "matmul")
    assert p.bytes == 6 * n * n  # two n×n bf16 in, one out
    assert p.intensity_flop_per_byte == pytest.approx(n / 3, rel=2e-3)  # 2n³ / 6n² ≈ 341
    assert p.compute_key == "bf16" and p.ideal_bound == "compute"  # 341 > 295
