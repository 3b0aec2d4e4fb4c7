"""The meter's peak: which chip, which dtype, dense only; and the cluster's arithmetic."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tensorledger.bench.meter_cluster import cluster_figures
from tensorledger.bench.meter_peak import StepCount, chip_for_device_name, dense_peak
from tensorledger.errors import TensorLedgerError
from tensorledger.hardware import catalog, get_hardware


def _count(**matrix: int) -> StepCount:
    return StepCount(flops=sum(matrix.values()) + 7, flops_causal_halved=0, matrix_flops=matrix,
                     tokens=3, ops=5, uncovered={})


@pytest.mark.parametrize(("name", "chip"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", None),  # other peaks than the SXM part: never guessed
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA H200 NVL", None),
    ("NVIDIA GH200 480GB", None),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", None),
    ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", None),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("Tesla V100-SXM2-32GB", "v100-sxm"),
    ("Tesla T4", None),
])
def test_cuda_names_map_onto_catalog_ids(name: str, chip: str | None) -> None:
    assert chip_for_device_name(name) == chip
    if chip is not None:
        assert chip in catalog()


def test_one_dtype_uses_its_dense_peak() -> None:
    h100 = get_hardware("h100")
    assert dense_peak(_count(bf16=10**12), h100).flop_per_s == 989.5e12
    assert dense_peak(_count(tf32=10**12), h100).flop_per_s == 494.7e12
    assert dense_peak(_count(), h100).dtypes == ("fp32",)  # no matrix work: the vector peak


def test_mixed_dtypes_use_the_flop_weighted_harmonic_mean() -> None:
    # 3e12 FLOPs at bf16 (989.5e12/s) and 1e12 at fp32 (66.9e12/s): the mixture takes
    # 3/989.5 + 1/66.9 seconds per 1e12·... → 4e12 / (3e12/989.5e12 + 1e12/66.9e12)
    peak = dense_peak(_count(bf16=3 * 10**12, fp32=10**12), get_hardware("h100"))
    assert peak.flop_per_s == pytest.approx(4 / (3 / 989.5e12 + 1 / 66.9e12))
    assert peak.label == "bf16+fp32"
    assert 66.9e12 < peak.flop_per_s < 989.5e12


def test_a_sparse_figure_is_refused_as_a_peak() -> None:
    h100 = get_hardware("h100")
    copied = dataclasses.replace(h100, dense_flop_per_s={**h100.dense_flop_per_s,
                                                         "bf16": 1979e12})
    with pytest.raises(TensorLedgerError, match="with-sparsity"):
        dense_peak(_count(bf16=1), copied)
    # a user's chip that lists the sparse figure as dense, with no sparse table: caught when it
    # carries a catalog id
    bare = dataclasses.replace(copied, sparse_flop_per_s={})
    with pytest.raises(TensorLedgerError, match="dense peak"):
        dense_peak(_count(bf16=1), bare)
    own = dataclasses.replace(bare, id="my-chip", sparse_flop_per_s={"bf16": 1979e12})
    with pytest.raises(TensorLedgerError, match="my-chip"):
        dense_peak(_count(bf16=1), own)


def test_a_dtype_the_chip_has_no_peak_for_is_an_error() -> None:
    with pytest.raises(TensorLedgerError, match="v100-sxm lists no dense bf16 peak"):
        dense_peak(_count(bf16=1), get_hardware("v100"))


def test_cluster_arithmetic() -> None:
    rows = [(1200.0, 0.30, 5e12), (800.0, 0.50, 3e12), (1000.0, 0.20, 2e12)]
    rate, mfu = cluster_figures(rows)
    assert rate == 3000.0  # 1200 + 800 + 1000
    assert mfu == pytest.approx((0.30 * 5 + 0.50 * 3 + 0.20 * 2) / 10)  # 0.34
    nan = math.nan
    assert cluster_figures([(1.0, nan, nan), (2.0, 0.5, 1.0)]) == (3.0, None)
    assert cluster_figures([(nan, 0.5, 1.0), (2.0, 0.5, 1.0)]) == (None, 0.5)
    assert cluster_figures([]) == (None, None)


def test_a_cuda_device_defaults_to_its_catalog_chip(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch

    from tensorledger.bench.meter_peak import default_hardware

    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))  # no probed profile
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert default_hardware(torch.device("cuda", 0)).id == "h200-sxm"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 NVL")
    with pytest.raises(TensorLedgerError, match="'NVIDIA H100 NVL'"):
        default_hardware(torch.device("cuda", 0))
