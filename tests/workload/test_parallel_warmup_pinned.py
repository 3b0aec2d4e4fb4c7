"""The traced step's warm-up and DDP's own group beside tensor parallelism (issue 42's
mutation run of ``tensorledger.workload.parallel``, the open survivors' third pass): what the
recorded step is left with after the warm-up, by hand on small modules under fake tensors."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import (
    TpStyle,
    build_mesh,
    fake_process_group,
    parallelize,
    trace_parallel_step,
)
from tests.distributed.parallel_torchrun import Mlp

# Mlp (tests/distributed/parallel_torchrun.py): a replicated projection `pre`, then a
# Megatron MLP (`up` column-wise, `down` row-wise) over tp
PLAN = {"up": TpStyle.COLWISE, "down": TpStyle.ROWWISE}


def _ops(step: Any) -> Counter[tuple[str, str]]:
    return Counter((r.phase, r.op) for r in step.trace.records)


def test_the_warm_ups_gradients_are_dropped_not_zeroed() -> None:
    step = trace_parallel_step(lambda: nn.Linear(8, 16), lambda: torch.ones(4, 8), Layout())
    ops = _ops(step)
    # forward: the Linear's one addmm; backward: its weight's gradient, one mm (the input
    # needs none).  The warm-up's gradients were set to None, so the recorded backward makes
    # them afresh: nothing accumulates into an old one (an add_) and nothing zeroes one
    assert ops["forward", "aten.addmm.default"] == 1
    assert ops["backward", "aten.mm.default"] == 1
    assert ops["backward", "aten.add_.Tensor"] == 0
    assert not any(op == "aten.zero_.default" for _, op in ops)


def test_ddp_beside_tp_warms_up_without_sync_and_drops_the_gradients() -> None:
    step = trace_parallel_step(Mlp, lambda: torch.ones(3, 5, 24), Layout(dp=2, tp=2), PLAN)
    ops = _ops(step)
    # the no-sync warm-up filled DTensor's sharding cache: the recorded forward runs one
    # matmul a Linear — pre's and up's (its column shard) addmm, down's (its row shard) mm,
    # its bias added after the all-reduce — and no sharding-propagation rerun of any
    assert (ops["forward", "aten.addmm.default"], ops["forward", "aten.mm.default"]) == (2, 1)
    # the warm-up's gradients were set to None: none accumulated into, none zeroed
    assert ops["backward", "aten.add_.Tensor"] == 0
    assert not any(op == "aten.zero_.default" for _, op in ops)


def test_ddp_beside_tp_runs_over_the_data_parallel_ranks_alone() -> None:
    layout = Layout(dp=2, tp=2)
    with fake_process_group(4):
        ddp = parallelize(Mlp(), layout, build_mesh(layout), PLAN)
        group = ddp.process_group
        # rank 0 of the 2 × 2 (dp, tp) mesh: its dp replicas are ranks 0 and 2 (tp is
        # innermost), not the whole world of 4 (DDP's own group verifies the parameters'
        # shapes and broadcasts the buffers)
        assert dist.get_process_group_ranks(group) == [0, 2]
