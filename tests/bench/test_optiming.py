"""The profiler's op times: the ops a kernel calls inside itself are counted with the op that
a trace of the step records, so measured and predicted times cover the same ops."""

from __future__ import annotations

import torch

from tensorledger.bench.optiming import profile_calls, profile_ops
from tensorledger.trace import trace


def test_ops_called_inside_a_traced_op_count_with_it() -> None:
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)

    def step() -> None:
        torch.nn.functional.linear(x, w).relu()

    traced = {r.op.rsplit(".", 1)[0] for r in trace(step).records}
    # a dispatch mode sees t, mm and relu; linear decomposes above it, and transpose and
    # as_strided run inside t, clamp_min inside relu
    assert {"aten.t", "aten.mm", "aten.relu"} <= traced
    assert not {"aten.transpose", "aten.as_strided", "aten.clamp_min"} & traced
    plain = {t.op for t in profile_ops(step, repeats=2)}
    assert {"aten.transpose", "aten.as_strided", "aten.clamp_min"} <= plain
    folded = profile_ops(step, repeats=2, traced=traced)
    names = {t.op for t in folded}
    # no op inside a traced one is left on its own; linear, called by nothing traced, keeps
    # its name (its own time is the call's entry, before t and mm)
    assert {"aten.t", "aten.mm", "aten.relu"} <= names
    assert names <= {"aten.t", "aten.mm", "aten.relu", "aten.linear", "aten.matmul"}
    assert all(t.time_s > 0 for t in folded)


def test_calls_come_in_order_one_step_each() -> None:
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)

    def step() -> None:
        torch.nn.functional.linear(x, w).relu().sum()

    traced = {r.op for r in trace(step).records}
    runs = profile_calls(step, repeats=3, traced=traced)
    assert len(runs) == 3
    for run in runs:
        # besides the entries of linear and matmul, which decompose above the trace, the
        # calls the trace records, in its order
        composite = {"aten.linear", "aten.matmul"}
        assert [c.op for c in run if c.op not in composite] == ["aten.t", "aten.mm",
                                                               "aten.relu", "aten.sum"]
        assert all(c.time_s > 0 for c in run)
    # profile_ops is the same calls summed by name, per step
    total = {t.op: t.time_s for t in profile_ops(step, repeats=2, traced=traced)}
    assert set(total) == {c.op for c in runs[0]}
