"""Context parallelism's own pieces (issue 42's mutation run of
``tensorledger.workload.context_parallel``): the buffers it shards, the handlers it adds to
torch's ring dispatcher, and the memory-efficient kernel's 32-row check, with no mesh."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from torch.distributed.tensor.experimental._context_parallel import _attention as cp_attention

from tensorledger.errors import InputError
from tensorledger.workload import context_parallel as cp


def test_buffers_are_the_distinct_tensors_of_two_or_more_dimensions() -> None:
    ids, targets, flat = torch.zeros(2, 8), torch.zeros(2, 8), torch.zeros(8)
    # ids twice (one buffer), a 1-d tensor and a non-tensor left out, the order kept
    unique = cp._unique([ids, flat, targets, ids, "x"])
    assert len(unique) == 2 and unique[0] is ids and unique[1] is targets
    assert cp._unique([torch.zeros(1, 1)])[0].shape == (1, 1)  # 2 dimensions: a buffer


@pytest.fixture
def fresh_ring() -> Iterator[None]:
    """The handlers as torch left them, so that ``cpu_ring_attention`` registers anew here (an
    earlier test of the process registered them already, and a second call returns at once)."""
    aten = torch.ops.aten
    ops, handlers = dict(cp_attention.custom_ops), dict(cp._HANDLERS)
    cp._HANDLERS.clear()
    for op in (aten._scaled_dot_product_flash_attention_for_cpu.default,
               aten._scaled_dot_product_flash_attention_for_cpu_backward.default):
        cp_attention.custom_ops.pop(op, None)
    efficient = aten._scaled_dot_product_efficient_attention.default
    cp_attention.custom_ops[efficient] = cp_attention._sdpa_handler  # torch's own
    try:
        yield
    finally:
        cp_attention.custom_ops.clear()
        cp_attention.custom_ops.update(ops)
        cp._HANDLERS.clear()
        cp._HANDLERS.update(handlers)


def test_the_cpu_ring_is_registered_once_for_forward_backward_and_the_checked_kernel(
        fresh_ring: None) -> None:
    cp.cpu_ring_attention()
    aten = torch.ops.aten
    forward = aten._scaled_dot_product_flash_attention_for_cpu.default
    backward = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    efficient = aten._scaled_dot_product_efficient_attention.default
    assert set(cp._HANDLERS) == {forward, backward, efficient}
    for op in (forward, backward, efficient):
        assert cp_attention.custom_ops[op] is cp._HANDLERS[op]
    before = dict(cp._HANDLERS)
    cp.cpu_ring_attention()  # again: nothing replaced (the checked kernel is not wrapped twice)
    assert dict(cp._HANDLERS) == before


def test_memory_efficient_chunks_must_be_a_multiple_of_32_rows(
        fresh_ring: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[object, ...]] = []
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention.default
    monkeypatch.setitem(cp_attention.custom_ops, efficient,
                        lambda *args: calls.append(args) or "torch's")
    cp.cpu_ring_attention()
    checked = cp._HANDLERS[efficient]
    assert cp_attention.custom_ops[efficient] is checked
    # a query (B, H, S, D) of 2 · 48 local rows: chunks of 48, 48 % 32 = 16: refused
    query = SimpleNamespace(to_local=lambda: torch.zeros(1, 1, 96, 4))
    with pytest.raises(InputError, match="chunks of 48 tokens"):
        checked("op", (query, torch.zeros(1)), {})  # the query is the first argument
    # 2 · 64 rows, shape (1, 1, 128, 48): chunks of 64 = 2 · 32 pass on to torch's handler
    query = SimpleNamespace(to_local=lambda: torch.zeros(1, 1, 128, 48))
    assert checked("op", (query,), {"k": 1}) == "torch's"
    assert calls == [("op", (query,), {"k": 1})]
    # a plain tensor (no local shard) counts 0 rows: passed on
    assert checked("op", (torch.zeros(1),), {}) == "torch's"


def test_entering_again_inside_is_a_no_op_and_the_rotation_is_restored() -> None:
    rotation = cp_attention._cp_options.rotate_method
    cp._ENTERED.append(True)  # as if a step were already inside
    try:
        with cp.sequence_sharded(None, [torch.zeros(2, 8)], rotate="alltoall"):
            assert cp_attention._cp_options.rotate_method == rotation  # nothing set anew
    finally:
        cp._ENTERED.pop()
    assert not cp._ENTERED


def test_a_freshly_registered_ring_runs_tiny_cp2(fresh_ring: None) -> None:
    from tensorledger.workload import resolve_workload, trace_workload
    from tensorledger.workload.layout import resolve_layout

    work = resolve_workload("tiny", batch=2, seq=128, precision="fp32", device="fake",
                            layout=resolve_layout(cp=2))
    records = trace_workload(work).trace.records
    sent = sum(r.collective.bytes_sent for r in records
               if r.collective is not None and r.module.endswith(".attention"))
    # 64 tokens a rank; kv heads 2, head 16, fp32: K = 2·2·2·64·16·4 = 32,768; per layer the
    # forward all-gather K, backward all-gather K and 2 permutes of K: 4·K; 2 layers: 262,144
    assert sent == 262_144
    forward = sum(r.flops_causal_halved for r in records
                  if r.phase == "forward" and "scaled_dot_product" in r.op)
    # causal-halved: c = 32, 2 blocks of 8·b·h·c²·d = 8·2·4·1024·16 = 1,048,576, 2 layers
    assert forward == 4_194_304
    backward = [r for r in records if r.phase == "backward" and "scaled_dot_product" in r.op]
    assert len(backward) == 2 * 2  # 2 ring blocks a layer, 2 layers


def test_the_ring_hands_the_kernels_arguments_on_to_torchs_templates(
        fresh_ring: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ring's handler unwraps a call (here a stand-in dispatcher gives its local arguments
    back as written) and calls torch's ring template with them: the defaults the aten
    schema gives where the call leaves them out, and every given one passed on."""
    from torch.distributed.tensor import DTensor

    seen: list[tuple[str, object, int, dict[str, object]]] = []

    def template(name: str) -> object:
        def called(group: object, seq_dim: int, op: object, **kwargs: object) -> tuple[str]:
            seen.append((name, group, seq_dim, kwargs))
            return (name,)
        return called

    monkeypatch.setattr(cp_attention, "_templated_ring_attention", template("forward"))
    monkeypatch.setattr(cp_attention, "_templated_ring_attention_backward", template("backward"))
    mesh = SimpleNamespace(get_group=lambda: "the cp group")
    info = SimpleNamespace(compute_mesh=mesh, local_args=(), local_kwargs={},
                           output_sharding=SimpleNamespace(needs_redistribute=False,
                                                           output_spec="spec"))
    dispatcher = SimpleNamespace(unwrap_to_op_info=lambda op, args, kwargs: info,
                                 sharding_propagator=SimpleNamespace(propagate=lambda i: None),
                                 wrap=lambda local, spec: (local, spec))
    monkeypatch.setattr(DTensor, "_op_dispatcher", dispatcher)
    cp.cpu_ring_attention()
    aten = torch.ops.aten
    forward = aten._scaled_dot_product_flash_attention_for_cpu.default
    backward = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    q, k, v = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)

    # q, k, v alone: the schema's defaults, dropout 0, not causal, no scale (1/√d in torch)
    info.local_args = (q, k, v)
    assert cp._HANDLERS[forward](forward, (), {}) == (("forward",), "spec")
    name, group, seq_dim, kwargs = seen.pop()
    assert (name, group, seq_dim) == ("forward", "the cp group", 2)  # (B, H, S, D): dim 2
    assert kwargs["query"] is q and kwargs["key"] is k and kwargs["value"] is v
    assert (kwargs["dropout_p"], kwargs["is_causal"], kwargs["scale"]) == (0.0, False, None)

    # every argument given: passed on as given
    info.local_args, info.local_kwargs = (q, k, v, 0.25, True), {"scale": 0.125}
    cp._HANDLERS[forward](forward, (), {})
    kwargs = seen.pop()[3]
    assert (kwargs["dropout_p"], kwargs["is_causal"], kwargs["scale"]) == (0.25, True, 0.125)

    grad, out, lse = torch.zeros(2), torch.zeros(3), torch.zeros(4)
    info.local_args = (grad, q, k, v, out, lse, 0.25, True)
    assert cp._HANDLERS[backward](backward, (), {}) == (("backward",), "spec")
    name, group, seq_dim, kwargs = seen.pop()
    assert (name, group, seq_dim) == ("backward", "the cp group", 2)
    assert kwargs["grad_out"] is grad and kwargs["out"] is out and kwargs["logsumexp"] is lse
    assert (kwargs["dropout_p"], kwargs["is_causal"], kwargs["scale"]) == (0.25, True, 0.125)

    # a sharding that would need a redistribution is never computed on
    info.output_sharding.needs_redistribute = True
    with pytest.raises(AssertionError):
        cp._HANDLERS[forward](forward, (), {})
    assert not seen
