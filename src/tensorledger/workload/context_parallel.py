"""Context parallelism: each sequence split over the ``cp`` ranks, attention run as torch's
ring attention (``torch.distributed.tensor.experimental.context_parallel``).

Nothing of the ring is re-implemented.  Inside :func:`sequence_sharded` torch's own context
manager is entered: it splits the step's token ids and targets along the sequence into
2 × cp chunks and gives rank r chunks r and 2·cp − 1 − r (its head-tail load balancer, so
every rank has the same share of a causal mask), and it patches
``F.scaled_dot_product_attention`` so that q, k and v become DTensors sharded on the sequence
over the cp mesh.  The attention op they reach is then run by torch's ring handler: one
all-gather of each rank's keys and values (``_RotateMethod.ALL_GATHER``, torch's default) and
cp blocks of attention per rank (the first causal on its own two chunks, then cp − 1 blocks
of half the queries or half the keys, all unmasked), merged by their log-sum-exps; in
backward, the keys and values gathered again and their gradients passed round the ring by an
all-to-all per block (``permute_tensor``), accumulated in fp32.

How it composes with the target's attention kernel
(:func:`tensorledger.trace.kernels.target_program`): the target's program decides the kernel
first (flash, memory-efficient or math, by PyTorch's rules for that chip) and calls its aten
op on the DTensors; torch's ring handler is keyed on exactly those ops (flash, efficient and
cuDNN attention, forward and backward), so each ring block runs the target's kernel on local
shards.  The math kernel has no ring (torch's handler refuses it), and neither does the CPU's
fused kernel: :func:`cpu_ring_attention` registers one for it, built on torch's own ring
template, so that real CPU ranks (gloo) and a CPU target run the same ring.

Rotary positions are computed from the local sequence length, as the reference model does
(``rope_angles(x.shape[1], ...)``): the same shapes and costs as the true positions, not the
same values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from tensorledger.errors import InputError

__all__ = ["RING_NOTE", "cpu_ring_attention", "sequence_sharded"]

#: What the trace of a context-parallel rank assumes, for its notes.
RING_NOTE = ("context parallelism: torch's ring attention (context_parallel): the sequence "
             "in 2·cp load-balanced chunks, cp blocks of the attention kernel above per rank "
             "and layer; keys and values all-gathered over the cp ranks, their gradients "
             "passed round the ring (all-to-all) in fp32")


def _unique(tensors: Sequence[Any]) -> list[torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor) and tensor.dim() >= 2:
            seen.setdefault(id(tensor), tensor)
    return list(seen.values())


_ENTERED: list[bool] = []


@contextmanager
def sequence_sharded(cp_mesh: Any, buffers: Sequence[Any], rotate: str = "allgather"
                     ) -> Iterator[None]:
    """Run the step inside as one rank of ``cp_mesh``: ``buffers`` (batch-first token ids,
    targets) cut to this rank's load-balanced chunks of the sequence (dimension 1) and
    restored on exit; attention is torch's ring attention inside, keys and values moved by
    ``rotate`` (``allgather``: torch's default; ``alltoall``).

    Entering it again inside is a no-op: a warm-up step and the traced step run in one
    entry, because each entry installs torch's CP sharding rules anew, which empties
    DTensor's sharding cache (whose misses run ops on global shapes, no rank's work)."""
    if _ENTERED:  # already inside: the buffers are this rank's chunks already
        yield
        return
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    cpu_ring_attention()
    tensors = _unique(buffers)
    _ENTERED.append(True)
    rotation = cp._cp_options.rotate_method
    cp.set_rotate_method(rotate)
    try:
        with _cpu_rules(), _metadata_unseen(), context_parallel(
                cp_mesh, buffers=tensors, buffer_seq_dims=[1] * len(tensors)):
            yield
    finally:
        cp._cp_options.rotate_method = rotation
        _ENTERED.pop()


@contextmanager
def _metadata_unseen() -> Iterator[None]:
    """DTensor learns the global shape of an attention op's outputs by running the op on
    global fake shapes, uncached while a FakeTensorMode is active (it counts that as
    tracing), so on every call of torch's ring handler.  That run is no rank's work: it is
    run here outside the modes (recorders) active around it, in a fake mode of its own."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.utils._python_dispatch import _disable_current_modes

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def unseen(self: Any, op_schema: Any) -> Any:
        with _disable_current_modes():
            return original(self, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = unseen  # type: ignore[method-assign]
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = (  # type: ignore[method-assign]
            original)


_HANDLERS: dict[Any, Any] = {}


def cpu_ring_attention() -> None:
    """Give torch's context-parallel dispatcher a ring for the CPU's fused attention kernel
    (``_scaled_dot_product_flash_attention_for_cpu`` and its backward), which it has none
    for: torch's own ring template (``_templated_ring_attention`` and its backward) with the
    CPU kernel in each block, added to the handlers torch installs while a
    ``context_parallel`` is entered.  Its sharding rule (everything sharded on the sequence)
    is installed by :func:`_cpu_rules` for as long as :func:`sequence_sharded` is entered."""
    if _HANDLERS:
        return
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    aten = torch.ops.aten
    forward = aten._scaled_dot_product_flash_attention_for_cpu.default
    backward = aten._scaled_dot_product_flash_attention_for_cpu_backward.default

    def ring_forward(mesh: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     dropout_p: float = 0.0, is_causal: bool = False, *,
                     attn_mask: torch.Tensor | None = None, scale: float | None = None
                     ) -> tuple[torch.Tensor, ...]:
        if attn_mask is not None:
            raise InputError("--cp runs torch's ring attention, which takes no attention mask; "
                             "this model passes one: trace it without --cp")
        result: tuple[torch.Tensor, ...] = cp._templated_ring_attention(
            mesh.get_group(), 2, aten._scaled_dot_product_flash_attention_for_cpu,
            query=query, key=key, value=value, is_causal=is_causal, dropout_p=dropout_p,
            scale=scale)
        return result

    def ring_backward(mesh: Any, grad_out: torch.Tensor, query: torch.Tensor,
                      key: torch.Tensor, value: torch.Tensor, out: torch.Tensor,
                      logsumexp: torch.Tensor, dropout_p: float, is_causal: bool, *,
                      attn_mask: torch.Tensor | None = None, scale: float | None = None
                      ) -> tuple[torch.Tensor, ...]:
        result: tuple[torch.Tensor, ...] = cp._templated_ring_attention_backward(
            mesh.get_group(), 2, backward, grad_out=grad_out, grad_out_name="grad_out",
            query=query, key=key, value=value, out=out, logsumexp=logsumexp,
            is_causal=is_causal, dropout_p=dropout_p, scale=scale)
        return result

    rings: dict[Any, Callable[..., tuple[torch.Tensor, ...]]] = {
        forward: ring_forward, backward: ring_backward}

    def handler(op_call: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        from torch.distributed.tensor import DTensor

        dispatcher = DTensor._op_dispatcher
        info = dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        dispatcher.sharding_propagator.propagate(info)
        sharding = info.output_sharding
        assert sharding is not None and not sharding.needs_redistribute
        local = rings[op_call](info.compute_mesh, *info.local_args, **info.local_kwargs)
        return dispatcher.wrap(local, sharding.output_spec)

    for op in rings:
        cp.custom_ops[op] = handler  # what torch's dispatcher installs on entering CP
        _HANDLERS[op] = handler
    efficient = aten._scaled_dot_product_efficient_attention.default
    torch_efficient = cp.custom_ops[efficient]

    def checked(op_call: Any, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        query = args[0]
        rows = query.to_local().shape[2] // 2 if hasattr(query, "to_local") else 0
        if rows % 32:
            raise InputError(
                "memory-efficient attention (the target's kernel here) pads its log-sum-exp "
                f"to a multiple of 32 rows, which torch's ring cannot merge for chunks of "
                f"{rows} tokens: use a --seq that divides by 64·cp, or bf16 (flash)")
        return torch_efficient(op_call, args, kwargs)

    cp.custom_ops[efficient] = checked
    _HANDLERS[efficient] = checked


@contextmanager
def _cpu_rules() -> Iterator[None]:
    """The CPU kernel's sharding under context parallelism: q, k, v, the output and the
    log-sum-exp sharded on the sequence (dimension 2), as torch's rule for flash attention."""
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy
    from torch.distributed.tensor.experimental._context_parallel import _sharding_rules
    from torch.distributed.tensor.placement_types import Replicate, Shard

    aten = torch.ops.aten
    seq = Shard(2)

    def forward_rule(schema: Any) -> Any:
        # outputs (out, logsumexp), then inputs (q, k, v)
        strategies: list[list[Any]] = [[Replicate()] * 5, [seq] * 5]
        return expand_to_full_mesh_op_strategy(schema.get_mesh_from_args(), schema,
                                               strategies, input_index=2)

    def backward_rule(schema: Any) -> Any:
        # outputs (dq, dk, dv), then inputs (grad_out, q, k, v, out, logsumexp)
        strategies: list[list[Any]] = [[Replicate()] * 9, [seq] * 9]
        return expand_to_full_mesh_op_strategy(schema.get_mesh_from_args(validate=False),
                                               schema, strategies, input_index=3)

    context = _sharding_rules._op_strategy_context
    with context(aten._scaled_dot_product_flash_attention_for_cpu.default, forward_rule,
                 RuntimeSchemaInfo(3)), \
            context(aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                    backward_rule, RuntimeSchemaInfo(6)):
        yield
