"""One real ``probe_collectives``: torchrun, 2 gloo ranks on the CPU, three sizes.  Checks the
JSON rank 0 writes (keys, nccl-tests' busbw = algbw × factor exactly) and what the parent makes
of it; no wall-clock value is asserted."""

from __future__ import annotations

from typing import Any

import pytest

from tensorledger.bench import collectives as measured
from tensorledger.roofline.collectives import CollectiveKind, bus_factor

# 4 KiB, 64 KiB, 4 MiB: each splits evenly over 2 fp32 ranks; the largest so that its time
# stands clear of the small sizes' latency even on a busy machine (with 1 MiB on top, a
# 4 KiB all-reduce once took 2.1 ms against 4.6 ms for 1 MiB, and the fit found no
# bandwidth)
SIZES = (4096, 65536, 2**22)
POINT_KEYS = {"kind", "size_bytes", "ranks", "calls_per_sample", "samples_s", "median_s",
              "spread", "bus_factor", "algbw_bytes_per_s", "busbw_bytes_per_s"}


def test_two_gloo_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    documents: list[dict[str, Any]] = []
    read = measured.read_probe

    def keep(document: dict[str, Any]) -> Any:
        documents.append(document)
        return read(document)

    monkeypatch.setattr(measured, "read_probe", keep)
    said: list[str] = []
    result = measured.probe_collectives(2, sizes=SIZES, budget_s=0.01, warmup=1,
                                        min_repeats=3, max_repeats=3, timeout_s=240,
                                        progress=said.append)
    (document,) = documents
    assert document["backend"] == "gloo" and document["device"] == "cpu"
    assert document["ranks"] == 2 and document["skipped"] == []
    points = document["points"]
    assert [(p["kind"], p["size_bytes"]) for p in points] == [
        (kind.value, size) for kind in measured.KINDS for size in SIZES]
    for point in points:
        assert set(point) == POINT_KEYS
        kind = CollectiveKind(point["kind"])
        assert point["ranks"] == 2 and len(point["samples_s"]) == 3
        assert point["calls_per_sample"] >= 1
        assert point["bus_factor"] == bus_factor(kind, 2)  # all-reduce 2·1/2, the others 1/2
        assert point["algbw_bytes_per_s"] == point["size_bytes"] / point["median_s"]
        assert point["busbw_bytes_per_s"] == point["algbw_bytes_per_s"] * point["bus_factor"]
        assert point["median_s"] == sorted(point["samples_s"])[1]
    # progress: torchrun's launch, then rank 0's points in order
    assert said[0] == "torchrun with 2 ranks (gloo)"
    assert said[1:] == [f"{k.value}, {s / 2**10:g} KiB" for k in measured.KINDS for s in SIZES]
    assert result.ranks == 2 and result.link == "intra-node" and len(result.points) == 9
    assert result.fit.points == 9 and result.fit.ranks == 2
    assert result.fit.latency_s >= 0 and result.fit.bandwidth_bytes_per_s > 0
    assert set(result.busbw_curves()) == {f"busbw.{k.value}" for k in measured.KINDS}
