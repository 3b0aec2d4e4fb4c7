"""Tensor parallelism with no data-parallel wrapper, and DDP beside it: the step runs (the
optimizer's foreach kernels over the sharded linears and the whole norms apart), and the whole
model's parameter count is the single device's, whatever the layout holds between forwards."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.optimizers import apart_by_kind, make_optimizer
from tensorledger.workload.parallel import build_mesh, fake_process_group


def _params(model: str, **layout: int) -> tuple[int, int]:
    work = resolve_workload(model, batch=2, seq=16, optimizer_kernel="foreach",
                            layout=resolve_layout(**layout))
    run = trace_workload(work)
    return run.model_params, sum(run.param_numels)


@pytest.mark.parametrize(("model", "layout"), [
    ("tiny", {"tp": 2}),  # the foreach step failed: "got mixed torch.Tensor and DTensor"
    ("tiny", {"tp": 2, "sp": True}),
    ("tiny", {"dp": 2, "tp": 2}),  # counted 45,376: the local shards DDP × TP leaves
    ("tiny-moe", {"ep": 2, "tp": 2}),  # counted 74,816
    ("tiny-moe", {"ep": 2, "tp": 2, "etp": 2}),
])
def test_the_whole_model_is_counted_whatever_the_layout(model: str,
                                                       layout: dict[str, int]) -> None:
    whole, _ = _params(model)  # one device: every parameter whole (a second path)
    counted, per_rank = _params(model, **layout)
    assert counted == whole
    assert per_rank < whole  # a rank holds its shards (and its own experts) only


def test_dtensors_and_tensors_go_to_the_optimizer_in_two_groups() -> None:
    with fake_process_group(2):
        layout = resolve_layout(tp=2)
        mesh = build_mesh(layout)["tp"]
        sharded = torch.nn.Parameter(distribute_tensor(torch.zeros(4, 2), mesh, [Replicate()]))
        whole = torch.nn.Parameter(torch.zeros(3))
        groups = apart_by_kind([whole, sharded])
        assert [[id(p) for p in g["params"]] for g in groups] == [[id(sharded)], [id(whole)]]
        assert isinstance(groups[0]["params"][0], DTensor)
        optimizer = make_optimizer("adamw", [whole, sharded], kernel="foreach")
        assert len(optimizer.param_groups) == 2
    # one kind alone, or groups given: as they came
    assert apart_by_kind([whole]) == [whole]
    given = [{"params": [whole]}]
    assert apart_by_kind(given) is given
