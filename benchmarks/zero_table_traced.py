"""Every cell of the ZeRO table of llama-3-8b traced: stages 0–3 on 2, 8 and 64 fake ranks
(bf16 + AdamW, batch 1 × seq 1), each rank's bytes against napkin's ``torch_zero_bytes``
(the table tests/distributed/test_llama_layouts.py works out by hand; CI traces one rank
count per stage).  One rank holds: parameters (at their high point for ZeRO-2, whose gathered
model is live from forward to backward), gradients and optimizer state, plus AdamW's 4-byte
step counter per tensor it updates.  Prints one line per cell and a JSON line; takes minutes.
"""

from __future__ import annotations

import json
import time

from tensorledger.ledger.memory import memory_of
from tensorledger.napkin.parallel import torch_zero_bytes
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout

V, D, KV, F = 128_256, 4_096, 1_024, 14_336
SHAPES = [(V, D), *[(D, D), (KV, D), (KV, D), (D, D), (F, D), (F, D), (D, F), (D,), (D,)] * 32,
          (D,), (V, D)]


def _layout(stage: int, ranks: int) -> dict[str, int]:
    return {"dp": ranks} if stage == 0 else {"fsdp": ranks, "zero": stage}


def main() -> None:
    cells = []
    for ranks in (2, 8, 64):
        for stage in range(4):
            start = time.perf_counter()
            work = resolve_workload("llama-3-8b", batch=1, seq=1, precision="bf16",
                                    layout=resolve_layout(**_layout(stage, ranks)))
            ledger = memory_of(trace_workload(work))
            params = (max(p.parameter_bytes for p in ledger.timeline.points) if stage == 2
                      else ledger.params_bytes)
            traced = params + ledger.grads_bytes + ledger.optimizer_state_bytes
            closed = torch_zero_bytes(SHAPES, ranks, stage, "bf16", "adamw")
            assert closed.state_tensors is not None
            expected = closed.total_bytes + 4 * closed.state_tensors
            took = time.perf_counter() - start
            print(f"ZeRO-{stage} on {ranks:>2} ranks: traced {traced:>15,} B, closed form "
                  f"{expected:>15,} B ({closed.total_bytes:,} + {closed.state_tensors} step "
                  f"counters), {'equal' if traced == expected else 'DIFFERENT'}, {took:.0f} s",
                  flush=True)
            cells.append({"stage": stage, "ranks": ranks, "traced": traced,
                          "closed": expected, "equal": traced == expected})
    print(json.dumps({"benchmark": "zero_table_traced", "cells": cells,
                      "all_equal": all(c["equal"] for c in cells)}))


if __name__ == "__main__":
    main()
