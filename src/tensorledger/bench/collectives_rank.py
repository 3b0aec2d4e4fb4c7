"""One rank of ``tensorledger probe --collectives``, run by torchrun (see
:mod:`tensorledger.bench.collectives`): ``python -m tensorledger.bench.collectives_rank SPEC
OUT``.  Every rank times every point; rank 0 writes the points as JSON to OUT.

Each point: one call to learn whether the backend runs the kind, ``warmup`` calls, then samples
of ``number`` calls after a barrier.  A sample is the slowest rank's time (a MAX all-reduce of
the ranks' clocks), so every rank derives the same ``number`` and sample count from it and the
ranks never disagree on how many collectives come next.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorledger.bench.collectives import ERROR_MARK, PROGRESS_MARK, collective_point
from tensorledger.roofline.collectives import CollectiveKind


def _tell(line: str) -> None:
    """One line to the parent process (it reads the rank's stderr for marked lines)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


#: A sample lasts at least this long, so the clock's resolution and the barrier's skew vanish.
MIN_SAMPLE_S = 2e-3
MAX_CALLS_PER_SAMPLE = 1000


def _operation(kind: CollectiveKind, elements: int, world: int, device: Any
               ) -> Callable[[], None]:
    import torch
    import torch.distributed as dist

    # zeros: a sum of zeros stays zero however often it is reduced (ones would overflow)
    if kind is CollectiveKind.ALL_REDUCE:
        buffer = torch.zeros(elements, device=device)
        return lambda: dist.all_reduce(buffer)
    if kind is CollectiveKind.ALL_GATHER:
        whole = torch.empty(elements, device=device)
        shard = torch.zeros(elements // world, device=device)
        return lambda: dist.all_gather_into_tensor(whole, shard)
    if kind is CollectiveKind.REDUCE_SCATTER:
        whole = torch.zeros(elements, device=device)
        shard = torch.empty(elements // world, device=device)
        return lambda: dist.reduce_scatter_tensor(shard, whole)
    raise ValueError(f"no probe for {kind.value}")


def _point(kind: CollectiveKind, size: int, spec: dict[str, Any], device: Any
           ) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def sample(operation: Callable[[], None], number: int) -> float:
        dist.barrier()
        sync()
        start = time.perf_counter()
        for _ in range(number):
            operation()
        sync()
        slowest = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest.item()) / number

    operation = _operation(kind, size // 4, world, device)
    for _ in range(int(spec["warmup"])):
        operation()
    first = sample(operation, 1)
    number = max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(MIN_SAMPLE_S / first)))
    repeats = int(min(spec["max_repeats"], max(spec["min_repeats"],
                                               spec["budget_s"] // (first * number))))
    samples = [sample(operation, number) for _ in range(repeats)]
    point = collective_point(kind, size, world, samples, number)
    return {key: getattr(point, key) for key in point.__dataclass_fields__}


def _supported(kind: CollectiveKind, spec: dict[str, Any], device: Any) -> str | None:
    """None when every rank ran one call of ``kind``; else why not (the same on every rank)."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    why = ""
    try:
        _operation(kind, 4 * world, world, device)()
    except (RuntimeError, NotImplementedError, ValueError) as error:
        why = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
    failed = torch.tensor([1.0 if why else 0.0], device=device)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    if failed.item():
        return why or "another rank could not run it"
    return None


def main(spec_path: Path, out_path: Path) -> None:
    import torch
    import torch.distributed as dist

    spec = json.loads(spec_path.read_text())
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if spec["device"] == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(spec["backend"])
    rank = dist.get_rank()
    points: list[dict[str, Any]] = []
    skipped: list[str] = []
    for kind in (CollectiveKind(k) for k in spec["kinds"]):
        why = _supported(kind, spec, device)
        if why is not None:
            skipped.append(f"{kind.value}: {spec['backend']} cannot run it ({why})")
            continue
        for size in spec["sizes"]:
            if rank == 0:
                _tell(f"{PROGRESS_MARK}{kind.value}, {size / 2**10:g} KiB")
            points.append(_point(kind, int(size), spec, device))
    if rank == 0:
        document = {"backend": spec["backend"], "device": spec["device"],
                    "ranks": dist.get_world_size(), "points": points, "skipped": skipped}
        out_path.write_text(json.dumps(document))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]), Path(sys.argv[2]))
    except Exception as error:  # one line for the parent, which names the rank's failure
        _tell(f"{ERROR_MARK}rank {os.environ.get('RANK', '?')}: {type(error).__name__}: "
              f"{str(error).splitlines()[0][:160] if str(error) else ''}")
        raise SystemExit(1) from None
