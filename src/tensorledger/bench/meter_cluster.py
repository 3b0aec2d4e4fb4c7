"""The cluster's figures under ``torchrun``: each rank's own, gathered with one small collective.

Every logging interval each rank contributes three numbers, its tokens/s, its MFU and the FLOPs
behind that MFU, in one ``all_gather`` of a float64 vector (on the CPU for gloo, on the current
CUDA device for NCCL).  The cluster's tokens/s is the sum of the ranks' (they train on different
data at the same time); its MFU is the FLOP-weighted mean of theirs, so a rank that did more of
the work counts for more.  A rank with no figure for the interval (its only step was being
recorded) leaves the cluster's figure unknown rather than wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["cluster_figures", "gather_rows", "rank_and_world"]


def rank_and_world(group: Any) -> tuple[int, int]:
    """This process's rank and the ranks of ``group`` (the default group where None) under an
    initialised process group; (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def cluster_figures(rows: Sequence[Sequence[float]]) -> tuple[float | None, float | None]:
    """(tokens/s, MFU) of the cluster from each rank's (tokens/s, MFU, FLOPs); NaN = unknown.

    >>> cluster_figures([(1000.0, 0.5, 3e12), (500.0, 0.2, 1e12)])  # (0.5·3 + 0.2·1) / 4
    (1500.0, 0.425)
    """
    if not rows:
        return None, None
    rates = [row[0] for row in rows]
    tokens_per_s = None if any(math.isnan(r) for r in rates) else math.fsum(rates)
    mfu = None
    if not any(math.isnan(row[1]) or math.isnan(row[2]) for row in rows):
        flops = math.fsum(row[2] for row in rows)
        if flops > 0:
            mfu = math.fsum(row[1] * row[2] for row in rows) / flops
    return tokens_per_s, mfu


def gather_rows(values: Sequence[float], group: Any = None) -> list[tuple[float, ...]]:
    """Every rank's ``values`` (same length on each), in rank order, by one ``all_gather``."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend(group))
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else (
        torch.device("cpu"))
    local = torch.tensor(list(values), dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, local, group=group)
    return [tuple(float(v) for v in t.cpu().tolist()) for t in gathered]
