"""The routed dispatch mode (issue 42's mutation run of ``tensorledger.workload.routed``), on
small CPU, meta and fake tensors: the assignment of token-slots, a router's top-k and any
other's, the real shadows of index tensors and what reads them, and the refusals, each
expectation worked out beside it."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tensorledger.errors import TraceError
from tensorledger.workload import routed as rd
from tensorledger.workload.routing import Routing


def test_assignment_fills_the_columns_with_each_expert_its_count() -> None:
    # ids 0 0 1 1 2 2 3 3 as 2 rows of 4, transposed: column 0 is 0 0 1 1, column 1 is 2 2 3 3
    assert rd.assignment((2, 2, 2, 2), tokens=4, chosen=2).tolist() == [
        [0, 2], [0, 2], [1, 3], [1, 3]]
    # ids 0 0 0 2 2 2 (expert 1 has none) over 3 tokens × 2
    assert rd.assignment((3, 0, 3), tokens=3, chosen=2).tolist() == [[0, 2], [0, 2], [0, 2]]
    assert rd.assignment((3, 0, 3), tokens=3, chosen=2).is_contiguous()


def test_a_routers_topk_on_real_tensors_follows_the_routing() -> None:
    source = torch.arange(24, dtype=torch.float32).reshape(6, 4)  # 6 tokens × 4 experts
    routing = Routing(kind="histogram", histogram=(5, 3, 2, 2), source="h")  # 12 = 6 · 2 slots
    mode = rd.RoutedMode(4, 2, routing)
    assert (mode.experts, mode.chosen, mode.routers) == (4, 2, 0)
    with mode:
        values, index = torch.topk(source, 2)
    # ids 0 0 0 0 0 1 | 1 1 2 2 3 3 as 2 × 6, transposed
    assert index.tolist() == [[0, 1], [0, 1], [0, 2], [0, 2], [0, 3], [1, 3]]
    assert index.device.type == "cpu" and index.dtype == torch.int64
    # the scores at them: row r holds 4r … 4r + 3
    assert values.tolist() == [[0, 1], [4, 5], [8, 10], [12, 14], [16, 19], [21, 23]]
    assert mode.routers == 1
    assert len(mode.shadows) == 0  # real tensors need no shadow
    with mode:
        torch.topk(source, 2)
    assert mode.routers == 2  # one more router routed


def test_the_default_routing_is_balanced() -> None:
    with rd.RoutedMode(4, 1):
        _, index = torch.topk(torch.zeros(8, 4), 1)
    # 8 slots over 4 experts: 2 each, ids 0 0 1 1 2 2 3 3 down the one column
    assert index.flatten().tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_router_along_another_dimension_routes_that_dimension() -> None:
    source = torch.zeros(4, 3)  # 4 experts along dim 0, 3 tokens
    with rd.RoutedMode(4, 2) as mode:
        values, index = torch.topk(source, 2, dim=0)
    # 6 slots over 4: (2, 2, 1, 1), ids 0 0 1 1 2 3 as 2 × 3 (one row per choice), that is
    # the 3 × 2 assignment moved back to dim 0
    assert index.tolist() == [[0, 0, 1], [1, 2, 3]]
    assert values.shape == (2, 3) and mode.routers == 1
    with rd.RoutedMode(4, 2):
        _, also = torch.topk(source.t(), 2, -1)  # the same router along the last dimension
    assert also.t().tolist() == index.tolist()


def test_topk_of_another_width_or_k_on_real_tensors_is_torchs_own() -> None:
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.3]])
    wide = torch.tensor([[0.1, 0.9, 0.5, 0.3, 0.7]])
    with rd.RoutedMode(4, 2) as mode:
        _, three = torch.topk(scores, 3)  # k 3 is not the router's 2
        values, smallest = torch.topk(wide, 2, largest=False)  # width 5: torch's own
    assert three.tolist() == [[1, 2, 3]] and mode.routers == 0
    assert smallest.tolist() == [[0, 3]] and values[0].tolist() == pytest.approx([0.1, 0.3])
    with rd.RoutedMode(4, 5), pytest.raises(RuntimeError):
        torch.topk(torch.zeros(2, 4), 5)  # k past the width: torch's refusal, not a routing


def test_a_topk_past_the_width_on_meta_is_torchs_refusal() -> None:
    with rd.RoutedMode(4, 2), pytest.raises(RuntimeError):
        torch.topk(torch.zeros(3, 3, device="meta"), 4)  # k 4 of 3: no routing


def test_a_non_router_topk_on_fake_tensors_is_balanced_and_shadowed() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2, Routing(kind="skew", skew=1.0)) as mode:
        _, index = torch.topk(torch.zeros(3, 2), 1)  # width 2, not the router's 4
        seen = rd.known_values(index)
    # balanced whatever the routing: 3 slots over 2 → (2, 1), ids 0 0 1 down one column
    assert seen == [[0], [0], [1]]
    assert mode.routers == 0  # not a router


def test_a_router_on_fake_tensors_is_shadowed_and_counted() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2, Routing(kind="skew", skew=1.0)) as mode:
        values, index = torch.topk(torch.zeros(4, 4), 2)
        seen = rd.known_values(index)
        counts = rd.known_values(torch.bincount(index.flatten(), minlength=4))
    # skew 1: expert 0 gets min(4, round(2 · 8 / 4)) = 4 slots, the other 4 over 3 = 2, 1, 1
    assert counts == [4, 2, 1, 1]
    assert seen == [[0, 1], [0, 1], [0, 2], [0, 3]]  # ids 0 0 0 0 | 1 1 2 3 as 2 × 4, transposed
    assert mode.routers == 1 and values.shape == (4, 2)


def test_an_index_made_from_nothing_is_shadowed_an_activation_is_not() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2):
        steps = torch.arange(5)
        mask = torch.ones(3, dtype=torch.bool)
        weights = torch.ones(3)
        assert rd.known_values(steps) == [0, 1, 2, 3, 4]
        assert rd.known_values(mask) == [True, True, True]
        assert rd.known_values(weights) is None  # a float: an activation, never shadowed
        # an empty index is shadowed (by empty CPU values: an index made from nothing)
        assert rd.known_values(torch.empty(0, dtype=torch.int64)) == []
        # computed from shadows alone: shadowed too
        assert rd.known_values(steps * 2 + 1) == [1, 3, 5, 7, 9]
        assert rd.known_values(steps // 2) == [0, 0, 1, 1, 2]
        # an activation's op: nothing to shadow
        assert rd.known_values(weights * 2) is None


def test_a_meta_index_is_shadowed_on_the_cpu() -> None:
    with rd.RoutedMode(4, 2) as mode:
        steps = torch.arange(4, device="meta")
        real = mode.shadows[steps]
    assert real.device.type == "cpu" and real.tolist() == [0, 1, 2, 3]
    with rd.RoutedMode(4, 2) as mode:
        on_cpu = torch.arange(4)  # a real tensor has its own values: no shadow
    assert on_cpu not in mode.shadows


def test_a_shadow_holds_at_most_max_shadow_elements() -> None:
    assert rd._MAX_SHADOW == 134217728  # 2^27: a million tokens' one-hot masks of 64 experts
    with FakeTensorMode(), rd.RoutedMode(4, 2):
        at = torch.zeros(rd._MAX_SHADOW, dtype=torch.uint8)  # 128 MiB real: shadowed
        past = torch.zeros(rd._MAX_SHADOW + 1, dtype=torch.uint8)
        assert rd.known_values(at[:3]) == [0, 0, 0]
        assert rd.known_values(past) is None


def test_an_attached_shadow_needs_a_tensor_of_its_shape_within_the_bound() -> None:
    mode = rd.RoutedMode(4, 2)
    out = torch.empty(2, 3, device="meta")
    mode._attach(out, torch.zeros(3, 2))  # another shape: not attached
    assert out not in mode.shadows
    mode._attach((out, 5), (torch.ones(2, 3), 5))  # a tuple: its tensors pair up
    assert mode.shadows[out].tolist() == [[1, 1, 1], [1, 1, 1]]
    other = torch.empty(2, device="meta")
    mode._attach(other, 7)  # a Python number is no shadow
    assert other not in mode.shadows
    mode._attach([other, torch.empty(1, device="meta")], [torch.zeros(2)])  # the shorter pairs
    assert mode.shadows[other].tolist() == [0, 0]


def test_an_attached_shadow_is_bounded() -> None:
    mode = rd.RoutedMode(4, 2)
    big = rd._MAX_SHADOW + 1
    out = torch.empty(big, dtype=torch.uint8, device="meta")
    real = torch.empty(big, dtype=torch.uint8, device="meta")  # only its size is read
    mode._attach(out, real)
    assert out not in mode.shadows


def test_a_data_dependent_size_is_answered_from_the_shadows() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2):
        steps = torch.arange(6)
        hit = torch.nonzero(steps % 3 == 0)  # 0 and 3
        assert hit.shape == (2, 1) and rd.known_values(hit) == [[0], [3]]
        picked = steps[steps > 3]  # masked: 4, 5
        assert rd.known_values(picked) == [4, 5]
        assert (steps.sum().item(), bool((steps > 4).any())) == (15, True)  # 0 + … + 5
        assert steps.tolist() == [0, 1, 2, 3, 4, 5]


def test_a_failure_on_the_shadows_is_one_trace_error() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2):
        steps = torch.arange(3) - 5  # -5, -4, -3: bincount of negatives fails on the CPU
        with pytest.raises(TraceError, match=r"^aten\.bincount\.default on the routing's "
                                             r"indices failed on CPU: RuntimeError: "):
            torch.bincount(steps)


def test_an_error_that_is_not_a_data_dependent_size_is_raised() -> None:
    class Boom(RuntimeError):
        pass

    mode = rd.RoutedMode(4, 2)
    index = torch.empty(2, dtype=torch.int64, device="meta")
    mode.shadows[index] = torch.tensor([0, 1])

    def failing(*args: object, **kwargs: object) -> torch.Tensor:
        if args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            raise Boom("no")
        return torch.tensor([1, 2])

    with pytest.raises(Boom):
        mode.__torch_dispatch__(failing, (), (index,))
    # a data-dependent size: answered from the shadows, on the meta device below
    def dynamic(*args: object, **kwargs: object) -> torch.Tensor:
        if args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
            raise NotImplementedError("data-dependent")
        return torch.tensor([5, 6, 7])

    out = mode.__torch_dispatch__(dynamic, (), (index,))
    assert out.is_meta and out.shape == (3,) and mode.shadows[out].tolist() == [5, 6, 7]
    # kwargs left None: read as none
    assert mode.__torch_dispatch__(lambda: 3, (), (), None) == 3


def test_a_shadow_written_from_what_no_shadow_holds_is_dropped() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2):
        weights = torch.ones(3)  # an activation: no shadow
        steps = torch.arange(3)
        steps.copy_(weights.long())  # written in place from it: its shadow is stale
        assert rd.known_values(steps) is None
        ids = torch.arange(3)
        torch.mul(weights.long(), 2, out=ids)  # out= names the tensor written: dropped too
        assert rd.known_values(ids) is None
        left = torch.arange(3)
        _ = left + weights.long()  # read, not written: its shadow stays
        assert rd.known_values(left) == [0, 1, 2]
        # a written tensor that no shadow holds: nothing to drop, and no error
        total = torch.zeros(3)
        torch.add(left.float(), weights, out=total)  # left.float() is shadowed, weights not
        assert rd.known_values(total) is None


def test_mutated_lists_the_tensors_an_op_writes() -> None:
    a, b = torch.zeros(2), torch.ones(2)
    assert rd.RoutedMode._mutated(torch.ops.aten.add_.Tensor, (a, b), {}) == [a]
    assert rd.RoutedMode._mutated(torch.ops.aten.add.Tensor, (a, b), {}) == []
    out = torch.empty(2)
    assert rd.RoutedMode._mutated(torch.ops.aten.add.out, (a, b), {"out": out}) == [out]
    # the alpha scalar is not a tensor written
    assert rd.RoutedMode._mutated(torch.ops.aten.add_.Tensor, (a,), {"other": b}) == [a]


def test_known_values_without_a_routed_mode_is_none() -> None:
    assert rd.known_values(torch.arange(3)) is None
    with FakeTensorMode():
        assert rd.known_values(torch.arange(3)) is None


def test_without_values_is_fake_or_meta() -> None:
    assert rd._without_values(torch.empty(1, device="meta"))
    assert not rd._without_values(torch.zeros(1))
    with FakeTensorMode():
        assert rd._without_values(torch.zeros(1))


def test_like_keeps_size_strides_and_dtype_on_the_device_below() -> None:
    real = torch.zeros(3, 4, dtype=torch.int32).t()  # strides (1, 4)
    like = rd._like(real, torch.device("meta"))
    assert (like.shape, like.stride(), like.dtype, like.is_meta) == (
        (4, 3), (1, 4), torch.int32, True)
    assert rd._like(7, torch.device("meta")) == 7


def test_data_dependent_errors_are_fakes_and_not_implemented() -> None:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    op = torch.ops.aten.nonzero.default
    assert rd._data_dependent(DynamicOutputShapeException(op))
    assert rd._data_dependent(DataDependentOutputException(op))
    assert rd._data_dependent(NotImplementedError())
    assert not rd._data_dependent(RuntimeError())


def test_a_topk_of_a_shadowed_tensor_runs_on_its_shadow_not_as_a_router() -> None:
    with FakeTensorMode(), rd.RoutedMode(4, 2) as mode:
        steps = torch.arange(8) * 3  # 0, 3, …, 21: shadowed, not a router's scores
        values, index = torch.topk(steps, 2)
        # torch's topk of the shadow: the two largest, 21 and 18 at 7 and 6
        assert (rd.known_values(values), rd.known_values(index)) == ([21, 18], [7, 6])
    assert mode.routers == 0


def test_a_topk_of_one_number_is_torchs_own() -> None:
    with rd.RoutedMode(2, 1) as mode:  # a 0-dim tensor has width 1, not the router's 2
        values, index = torch.topk(torch.tensor(3.0), 1)
    assert (values.item(), index.item(), mode.routers) == (3.0, 0, 0)
    with rd.RoutedMode(4, 1):
        values, _ = torch.topk(torch.tensor(5.0), 1)
    assert values.item() == 5.0


def test_a_router_choosing_every_expert_is_routed() -> None:
    source = torch.arange(4.0).repeat(2, 1)  # torch's own would pick 3, 2, 1, 0 in each row
    with rd.RoutedMode(4, 4) as mode:
        _, index = torch.topk(source, 4)
    # 8 slots, 2 each: ids 0 0 1 1 2 2 3 3 as 4 × 2, transposed
    assert index.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]] and mode.routers == 1


def test_another_topk_keeps_torchs_sorted_flag() -> None:
    torch.manual_seed(0)
    scores = torch.randn(1000)
    theirs = torch.topk(scores, 100, sorted=False).indices  # CPU: not in value order
    with rd.RoutedMode(4, 2):
        ours = torch.topk(scores, 100, sorted=False).indices
    assert torch.equal(ours, theirs)


def test_a_router_of_three_dimensions_along_either_end() -> None:
    source = torch.zeros(2, 3, 4)  # 2 × 3 tokens over 4 experts
    with rd.RoutedMode(4, 2):
        _, index = torch.topk(source, 2)
    # 12 slots, 3 each: ids 0 0 0 1 1 1 2 2 2 3 3 3 as 2 × 6, transposed to 6 × 2
    assert index.shape == (2, 3, 2)
    assert index.reshape(6, 2).tolist() == [[0, 2], [0, 2], [0, 2], [1, 3], [1, 3], [1, 3]]
    with rd.RoutedMode(4, 2):
        _, first = torch.topk(source.permute(2, 0, 1), 2, dim=0)  # experts first
    assert first.shape == (2, 2, 3) and torch.equal(first.permute(1, 2, 0), index)


def test_a_router_of_one_expert_routes_every_token_to_it() -> None:
    with rd.RoutedMode(1, 1):
        _, index = torch.topk(torch.zeros(6, 1), 1)
    assert index.tolist() == [[0]] * 6  # 6 tokens, one expert each


def test_a_routers_indices_on_meta_are_meta() -> None:
    with rd.RoutedMode(4, 2) as mode:
        _, index = torch.topk(torch.zeros(4, 4, device="meta"), 2)
        assert index.is_meta and mode.shadows[index].tolist() == [[0, 2], [0, 2], [1, 3],
                                                                   [1, 3]]


def test_a_routers_indices_on_real_tensors_are_moved_to_its_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    moved: list[object] = []
    real = rd.assignment

    class Watched(torch.Tensor):
        def to(self, *args: object, **kwargs: object) -> torch.Tensor:  # type: ignore[override]
            moved.append(args)
            return super().to(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rd, "assignment",
                        lambda *args: real(*args).as_subclass(Watched))
    with rd.RoutedMode(4, 2):
        torch.topk(torch.zeros(4, 4), 2)
    assert moved == [(torch.device("cpu"),)]  # the source's device: a CUDA router's is CUDA
