"""trace.recorder pinned: storages re-sized outside any op, nested optimizer steps, the module an
attention decision is told in, keyword arguments of a traced step."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tensorledger.costs.registry import register
from tensorledger.hardware.target import Target
from tensorledger.trace.kernels import target_program
from tensorledger.trace.recorder import Recorder, recomputation, trace

H100 = Target("h100-sxm", "cuda", (9, 0))


def test_a_storage_resized_outside_an_op_is_freed_and_created_at_the_next_op() -> None:
    x = torch.ones(4, 8)  # 4 * 8 fp32 = 128 bytes, met first as an input: pre-existing, id 0
    with Recorder() as recorder:
        y = x * 2  # y's storage: id 1, 128 bytes
        storage = y.untyped_storage()
        storage.resize_(0)  # as FSDP2 frees a gathered parameter
        recorder.storage_resized(storage)
        storage.resize_(64)  # and gathers it again, here in 64 bytes
        recorder.storage_resized(storage)
        _ = x + 1  # a new output: id 3
    mul, add = recorder.trace.records
    assert mul.storages_created == ((1, 128),)
    assert recorder.trace.storages_preexisting == ((0, 128),)
    # both told at the next op: id 1's 128 bytes freed, the re-sized storage created anew as
    # id 2 (64 bytes) before the op's own output (id 3, 128 bytes)
    assert add.storages_freed == (1,)
    assert add.storages_created == ((2, 64), (3, 128))


def test_a_storage_resized_before_recording_is_not_counted() -> None:
    x = torch.ones(4, 8)
    recorder = Recorder()
    recorder.storage_resized(torch.ones(16).untyped_storage())  # not recording yet: ignored
    with recorder:
        _ = x + 1
    (add,) = recorder.trace.records
    # x is pre-existing (id 0), the output id 1: the 64 bytes told before were not registered
    assert recorder.trace.storages_preexisting == ((0, 128),)
    assert add.storages_created == ((1, 128),)
    assert add.storages_freed == ()


class _Outer(torch.optim.Optimizer):
    """An optimizer whose step runs another's (a wrapper, as a LoRA or ZeRO optimizer is)."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        super().__init__(params, {})
        self.inner = torch.optim.SGD(params, lr=0.5)

    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]
        self.inner.step()  # the inner step's hooks run inside the outer's
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.mul_(0.5)  # after the inner step, still the optimizer's work


def test_a_step_inside_a_step_leaves_the_optimizer_phase_when_the_outer_one_ends() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = _Outer([w])

    def step() -> None:
        (w * 2).sum().backward()
        optimizer.step()
        with torch.no_grad():
            _ = w + 1  # after the step: glue code, "other"

    result = trace(step)
    by_op = [(r.op, r.phase) for r in result.records]
    assert ("aten.mul_.Tensor", "optimizer") in by_op  # the outer step's own op, after the inner
    assert by_op[-1] == ("aten.add.Tensor", "other")


def test_an_attention_decision_is_told_with_the_module_it_ran_in() -> None:
    class Attention(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = Attention()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x)

    x = torch.ones(2, 4, 8, 16, dtype=torch.bfloat16, device="meta")
    with target_program(H100), Recorder() as recorder:
        Block()(x)
    ((module, kernel, _),) = recorder.trace.attention_kernels
    # the innermost module (two deep), not its parent
    assert (module, kernel) == ("Block.attn", "flash")


def test_a_traced_step_receives_its_keyword_arguments() -> None:
    def step(x: torch.Tensor, *, scale: float) -> None:
        _ = x * scale

    result = trace(step, torch.ones(2, 3, device="meta"), scale=2.0)
    assert [r.op for r in result.records] == ["aten.mul.Tensor"]


def test_an_out_argument_met_first_is_pre_existing_and_written_not_read() -> None:
    x, y = torch.ones(4), torch.zeros(4)  # 4 fp32 each: 16 bytes
    with Recorder() as recorder:
        torch.mul(x, 2, out=y)
    (mul,) = recorder.trace.records
    # x read first (id 0), then y registered as the destination (id 1): both existed before
    assert recorder.trace.storages_preexisting == ((0, 16), (1, 16))
    assert mul.storages_created == ()
    assert (mul.bytes_read, mul.bytes_written) == (16, 16)  # x read, y written


# An op with an optional buffer written in place; called without it, the dispatcher hands on
# one argument, so the buffer's position (1) is past the end of ``args``.
_LIB = torch.library.Library("tl_recorder_pinned", "DEF")
_LIB.define("doubled(Tensor x, Tensor(a!)? buffer=None) -> Tensor")


def _doubled(x: torch.Tensor, buffer: torch.Tensor | None = None) -> torch.Tensor:
    if buffer is not None:
        buffer.copy_(x)
    return x * 2


_LIB.impl("doubled", _doubled, "CompositeExplicitAutograd")
# An op whose cost rule cannot read its arguments (the test gives it one that asks for a sixth).
_LIB.define("misread(Tensor x) -> Tensor")
_LIB.impl("misread", lambda x: x * 2, "CompositeExplicitAutograd")
# An op that hands back a view of its input, though its schema does not say so.
_LIB.define("same(Tensor x) -> Tensor")
_LIB.impl("same", lambda x: x.view(x.shape), "CompositeExplicitAutograd")


def test_an_optional_in_place_argument_left_out_is_no_argument() -> None:
    x, buffer = torch.ones(4), torch.zeros(4)
    with Recorder() as recorder:
        torch.ops.tl_recorder_pinned.doubled(x)
        torch.ops.tl_recorder_pinned.doubled(x, buffer)
    without, with_buffer = recorder.trace.records
    assert without.input_shapes == ((4,),)
    assert without.bytes_written == 16  # the output alone: 4 fp32
    # the buffer: read as an input, written in place (16 bytes) beside the output's 16
    assert with_buffer.input_shapes == ((4,), (4,))
    assert with_buffer.bytes_written == 32
    # no cost rule and not a view: "other", listed as uncovered (twice)
    assert (without.category, without.covered) == ("other", False)
    assert recorder.trace.uncovered == {"tl_recorder_pinned.doubled.default": 2}


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a module that is no attribute of this one: named after its class, under its caller
        return torch.nn.ReLU()(self.inner(x))


def test_roots_are_numbered_once_each_and_unregistered_modules_named_by_the_caller() -> None:
    first, second = _Net(), _Net()
    x = torch.ones(2, 3)
    with torch.no_grad(), Recorder() as recorder:
        first(x)
        first(x)  # the same root again: the same name, no new number
        second(x)  # a second root of the class: #2
    modules = [r.module for r in recorder.trace.records if r.op == "aten.relu.default"]
    # the ReLU runs in _Net's forward (the stack: _Net alone), after _Net.inner has returned
    assert modules == ["_Net.ReLU", "_Net.ReLU", "_Net#2.ReLU"]
    assert recorder.trace.module_classes["_Net#2.inner"] == "Linear"


def test_a_resized_storage_that_dies_frees_each_of_its_ids_once() -> None:
    x = torch.ones(4, 8)
    with Recorder() as recorder:
        y = x * 2  # id 1, 128 bytes
        storage = y.untyped_storage()
        storage.resize_(0)
        recorder.storage_resized(storage)  # id 1 freed
        storage.resize_(64)
        recorder.storage_resized(storage)  # id 2 created
        del y, storage  # the storage dies: id 2 freed, and id 1 not a second time
        _ = x + 1
    _, add = recorder.trace.records
    assert sorted(add.storages_freed) == [1, 2]


def test_dtype_names_are_the_library_s_and_torch_s_where_it_has_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.trace.recorder as recorder_module

    monkeypatch.setattr(recorder_module, "_DTYPE_NAMES", {})  # worked out afresh, not cached
    with Recorder() as recorder:
        _ = torch.ones(2, dtype=torch.bfloat16) * 2
        _ = torch.ones(2, dtype=torch.complex64) * 2  # a dtype the library does not list
        _ = torch.ones(2, dtype=torch.bfloat16) * 3  # bf16 again: from the cache
    names = [r.output_dtypes for r in recorder.trace.records if r.op == "aten.mul.Tensor"]
    # torch.bfloat16 is the library's bf16; torch.complex64 keeps torch's name, less "torch."
    assert names == [("bf16",), ("complex64",), ("bf16",)]


def test_copy_reads_its_source_and_only_writes_its_destination() -> None:
    x, y = torch.ones(4), torch.zeros(4)  # 16 bytes each
    with Recorder() as recorder:
        y.copy_(x)
    (copy,) = recorder.trace.records
    assert (copy.bytes_read, copy.bytes_written) == (16, 16)  # not 32 read: y is not read


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_pointwise_op_reading_a_tensor_without_strides_is_recorded() -> None:
    # a sparse CSR operand has no strides (torch raises): its layout is read without them
    csr = torch.eye(3).to_sparse_csr()
    dense = torch.ones(3, 3)
    with Recorder() as recorder:
        out = dense + csr  # a dense result: a new storage, so no view, and its inner loop read
    (add,) = recorder.trace.records
    assert out.layout == torch.strided
    assert (add.op, add.category, add.output_shapes) == ("aten.add.Tensor", "elementwise",
                                                        ((3, 3),))
    assert add.bytes_written == 36  # 3 * 3 fp32


class _Child(torch.nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.exp()


class _Parent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = _Child()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x * 3)  # x * 3 is the parent's, built before the child ran


def test_the_backward_of_a_child_s_input_belongs_to_the_parent() -> None:
    x = torch.ones(3, requires_grad=True)
    result = trace(lambda: _Parent()(x).sum().backward())
    backward = [(r.op, r.module) for r in result.records
                if r.phase == "backward" and r.op == "aten.mul.Tensor"]
    # exp's backward (grad * exp) in the child, then x * 3's (grad * 3) in the parent
    assert backward == [("aten.mul.Tensor", "_Parent.child"), ("aten.mul.Tensor", "_Parent")]


class _Diamond(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        return x.cos() + y * y  # y * y: one node reached twice, before the cosine's


def test_every_backward_node_of_a_module_is_tagged_past_one_reached_twice() -> None:
    x = torch.ones(3, requires_grad=True)
    result = trace(lambda: _Diamond()(x).sum().backward())
    modules = {r.module for r in result.records
               if r.phase == "backward" and r.op != "aten.expand.default"}  # sum's: the root
    assert modules == {"_Diamond"}  # the cosine's backward too (neg, sin, mul)


def test_a_recorder_records_one_block_neither_nested_in_itself_nor_twice() -> None:
    from tensorledger.errors import TraceError

    recorder = Recorder()
    with recorder, pytest.raises(TraceError, match="one step"):
        recorder.__enter__()  # already recording
    with pytest.raises(TraceError, match="one step"):
        recorder.__enter__()  # finished: its trace is made


class _Failing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _ = x * 2
        raise ValueError("a forward that fails")


def test_a_module_whose_forward_raises_leaves_the_module_stack() -> None:
    x = torch.ones(3)
    with Recorder() as recorder:
        with pytest.raises(ValueError, match="fails"):
            _Failing()(x)  # the step catches it and goes on
        _ = x + 1
    mul, add = recorder.trace.records
    assert mul.module == "_Failing"
    assert add.module == ""  # the root again: the failed module was left


def test_a_block_without_ops_has_no_device_and_frees_after_the_last_op_are_kept() -> None:
    with Recorder() as empty:
        pass
    assert empty.trace.device == "none"
    assert empty.trace.records == ()
    x = torch.ones(4)
    with Recorder() as recorder:
        y = x * 2  # id 1 (x is id 0)
        del y  # freed after the last op: told at the end
    assert recorder.trace.storages_freed_at_end == (1,)


def test_the_device_is_the_first_op_s_output_s() -> None:
    x = torch.ones(4)  # on the CPU
    with Recorder() as recorder:
        _ = x.to("meta")  # the first op reads the CPU, writes meta
    assert recorder.trace.device == "meta"


def test_views_without_a_cost_rule_are_covered_views_that_move_nothing() -> None:
    indices = torch.tensor([[0, 1], [1, 0]])
    sparse = torch.sparse_coo_tensor(indices, torch.ones(2), (2, 2), check_invariants=True)
    x = torch.ones(4)
    with Recorder() as recorder:
        _ = sparse._values()  # its schema returns an alias; no rule in the registry
        _ = torch.ops.tl_recorder_pinned.same(x)  # no alias in its schema, but its output is x's
    found = {r.op: r for r in recorder.trace.records}
    for op in ("aten._values.default", "tl_recorder_pinned.same.default"):
        record = found[op]
        assert (record.category, record.covered) == ("view", True)
        assert (record.bytes_read, record.bytes_written) == (0, 0)
    assert recorder.trace.uncovered == {}


def test_an_op_its_rule_cannot_read_is_uncovered_with_no_flops(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorledger.costs import registry

    registry.rules()  # the real table loaded first, then a copy to write into
    monkeypatch.setattr(registry, "_RULES", dict(registry._RULES))
    register("tl_recorder_pinned.misread", category="matmul")(lambda args, kwargs, out: args[5])
    x = torch.ones(4)
    with Recorder() as recorder:
        _ = torch.ops.tl_recorder_pinned.misread(x)
    (record,) = recorder.trace.records
    # listed, not counted as zero: covered is False, its FLOPs 0 in both counts
    assert record.covered is False
    assert (record.flops, record.flops_causal_halved) == (0, 0)
    assert recorder.trace.uncovered == {"tl_recorder_pinned.misread.default": 1}


def test_a_fill_rule_writes_without_reading_its_input() -> None:
    x = torch.ones(4)  # 16 bytes
    with Recorder() as recorder:
        _ = torch.zeros_like(x)  # reads only x's shape
    (record,) = recorder.trace.records
    assert (record.op, record.bytes_read, record.bytes_written) == (
        "aten.zeros_like.default", 0, 16)


def test_an_in_place_foreach_op_s_inner_loop_is_its_first_operand_s() -> None:
    a = torch.ones(4, 8)  # strides (8, 1)
    b = torch.ones(8, 4).t()  # (4, 8) with strides (1, 4): read down the columns
    with Recorder() as recorder:
        torch._foreach_mul_([a], [b])  # returns nothing: the loop is a's, written in place
    (record,) = recorder.trace.records
    assert record.output_shapes == ()
    # a's rows (8 elements, stride 1) merge with its columns (8 = 1 * 8), but b's do not
    # (1 != 4 * 8): loops of 8.  From b's layout it would be 4 (columns of 4)
    assert record.inner_loop == 8


def test_gelu_s_variant_is_named_only_where_it_is_not_the_default() -> None:
    x = torch.ones(4)
    with Recorder() as recorder:
        torch.nn.functional.gelu(x)
        torch.nn.functional.gelu(x, approximate="tanh")
    assert [r.variant for r in recorder.trace.records] == ["", "tanh"]


def test_a_checkpointed_block_s_forward_is_run_again_in_backward_as_recomputation() -> None:
    from torch.utils.checkpoint import checkpoint

    linear = torch.nn.Linear(8, 8)
    x = torch.ones(4, 8, requires_grad=True)

    def block(t: torch.Tensor) -> torch.Tensor:
        return linear(t).relu()  # relu saves its output: rebuilt in backward

    result = trace(lambda: checkpoint(block, x, use_reentrant=False).sum().backward())
    addmms = [(r.phase, r.recomputed) for r in result.records if r.op == "aten.addmm.default"]
    # once in the forward, once more in backward (inside the Linear's forward, run again)
    assert addmms == [("forward", False), ("backward", True)]
    # relu's gradient is backward's own work, outside any module's forward: no recomputation
    assert [r.recomputed for r in result.records
            if r.op == "aten.threshold_backward.default"] == [False]


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.proj(t).relu()


class _Checkpointed(torch.nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.block = _Block()
        self.head = torch.nn.Linear(8, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.block, x, use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_block_s_backward_belongs_to_its_modules_either_way(
        reentrant: bool) -> None:
    # a reentrant checkpoint (transformers' default) runs the recomputed forward's graph
    # backward, inside the outer backward: its nodes must be tagged while backward runs, or
    # every gradient op of the block falls to the root
    model = _Checkpointed(reentrant)
    x = torch.ones(4, 8, requires_grad=True)
    result = trace(lambda: model(x).sum().backward())
    own = {(r.op, r.module) for r in result.records
           if r.phase == "backward" and not r.recomputed}
    # relu's gradient is the block's; the projection's two gradient matmuls (input and weight)
    # are its Linear's, as are the head's for the head
    assert ("aten.threshold_backward.default", "_Checkpointed.block") in own
    assert {m for op, m in own if op == "aten.mm.default"} == {
        "_Checkpointed.head", "_Checkpointed.block.proj"}
    assert not any(m == "" for op, m in own if op != "aten.expand.default")  # only sum's grad


class _SavesItsHidden(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
        self.hidden: Any = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.linear(x).exp()
        self.hidden = weakref.ref(hidden)
        return hidden.sin()  # sin's node saves its input, the hidden tensor


def test_tagging_a_node_keeps_nothing_it_saved_alive() -> None:
    # leaving the module tags the output's nodes (sin's among them) with the module: the tag
    # lives on the node itself, so dropping the output frees the node and with it the tensor
    # it saved, as untraced; a table of nodes in the recorder would hold it to the trace's end
    model = _SavesItsHidden()
    with Recorder():
        out = model(torch.ones(3))
        assert model.hidden() is not None  # held by sin's node, for its backward
        del out
        assert model.hidden() is None


def test_a_recorder_reads_only_the_module_tags_it_wrote() -> None:
    # the forward traced by one recorder, its backward by another: the second never saw the
    # modules (its module table is empty), so it attributes the backward to the root rather
    # than to names the first recorder gave
    model = _SavesItsHidden()
    with Recorder() as first:
        out = model(torch.ones(3, requires_grad=True))
    with Recorder() as second:
        out.sum().backward()
    assert "_SavesItsHidden.linear" in {r.module for r in first.trace.records}
    assert {r.module for r in second.trace.records} == {""}
    assert second.trace.module_classes == {}


class _RunsAgainInBackward(torch.autograd.Function):
    """A backward that runs forward work again by itself, as transformers' checkpointing does
    (its layer's ``forward`` called directly, no module hook): told by ``recomputation()``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        with recomputation():
            _ = grad.exp()  # the recomputed forward
        return grad * 2  # the backward's own


def test_ops_inside_recomputation_in_backward_are_recomputed() -> None:
    x = torch.ones(3, requires_grad=True)
    result = trace(lambda: _RunsAgainInBackward.apply(x).sum().backward())
    flags = {r.op: r.recomputed for r in result.records if r.phase == "backward"}
    assert flags["aten.exp.default"] is True
    assert flags["aten.mul.Tensor"] is False


def test_a_storage_read_through_two_views_counts_its_larger_view_once() -> None:
    x = torch.ones(4)  # 16 bytes
    with Recorder() as recorder:
        _ = x + x[:1]  # the whole of x, then one element of it: 16 bytes, not 4, not 20
    (add,) = [r for r in recorder.trace.records if r.op == "aten.add.Tensor"]
    assert add.bytes_read == 16


def test_a_one_byte_read_is_counted() -> None:
    flag = torch.ones(1, dtype=torch.uint8)  # 1 byte
    with Recorder() as recorder:
        _ = flag + 1
    (add,) = recorder.trace.records
    assert add.bytes_read == 1


def test_a_storage_resized_to_one_byte_is_created() -> None:
    flag = torch.ones(1, dtype=torch.uint8)
    with Recorder() as recorder:
        y = flag + 1  # id 1 (flag is id 0): 1 byte
        storage = y.untyped_storage()
        storage.resize_(0)
        recorder.storage_resized(storage)  # id 1 freed
        storage.resize_(1)
        recorder.storage_resized(storage)  # 1 byte again: id 2
        _ = flag + 2  # id 3
    _, second = recorder.trace.records
    assert second.storages_created == ((2, 1), (3, 1))
