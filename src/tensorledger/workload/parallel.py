"""One rank of a sharded training step, traced on a fake process group under fake tensors.

torch.distributed's own parallel code runs unchanged — FSDP2 ``fully_shard``, DDP, DTensor
tensor parallelism (``parallelize_module``) — on rank 0 of a *fake* process group of world
size N (torch's ``"fake"`` backend: every collective returns at once and moves nothing) while
FakeTensorMode stands in for memory.  The recorder sees what that rank runs: its share of the
arithmetic, on its shards, and every collective it issues, with the bytes it would send and
receive (:mod:`tensorledger.costs.collectives`).  Nothing of the parallel strategies is
re-implemented here; this module only builds the mesh, wraps the model and runs the step.

Two details of running it this way:

- The device mesh is built before FakeTensorMode is entered: building it reads the rank map
  as Python numbers, which fake tensors cannot give.
- DDP is built with ``init_sync=False`` (its construction-time check of parameter shapes
  across ranks reads real memory) and with a communication hook that does what its built-in
  one does — divide each gradient bucket by N and all-reduce it — because the fake group's
  asynchronous work carries no value for DDP to read back.  The all-reduces are DDP's own
  buckets, one ``c10d.allreduce_`` each.

The traced step is the second one: the first initialises FSDP's lazy state and the optimizer
state, and fills DTensor's sharding cache, whose misses run each op once more on global
shapes to learn its output's metadata (ops this rank never runs).  DDP is the exception: its
second step opens by rebuilding its gradient buckets in the order the gradients arrived,
which reads real memory, so its first step is traced (its buckets in their first order: the
same gradient bytes all-reduced, perhaps cut into other buckets; the optimizer's first step
creates its state).

>>> import torch
>>> step = trace_parallel_step(lambda: torch.nn.Linear(8, 16), lambda: torch.ones(4, 8),
...                            Strategy.FSDP, 2)
>>> step.param_bytes_per_rank        # (16·8 + 16) fp32 values / 2 ranks · 4 bytes
288
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from torch import nn

from tensorledger.errors import InputError, TensorLedgerError, TraceError
from tensorledger.trace.recorder import Recorder
from tensorledger.trace.records import Trace
from tensorledger.workload.layout import Layout

__all__ = ["ParallelStep", "Strategy", "TpStyle", "build_mesh", "fake_process_group",
           "parallelize", "shard_units", "trace_parallel_step"]


class Strategy(Enum):
    """How the model is spread over the ranks."""

    DDP = "ddp"  # replicated; gradients all-reduced
    FSDP = "fsdp"  # FSDP2 fully_shard per unit, then the root (ZeRO-3)
    FSDP_ZERO2 = "fsdp-zero2"  # the same, unsharded from forward to backward: gathered once
    TP = "tp"  # DTensor tensor parallelism with a column / row-wise plan


class TpStyle(Enum):
    """The parallel style of one module of a tensor-parallel plan."""

    COLWISE = "colwise"  # weight split by output features; output sharded on its last dim
    ROWWISE = "rowwise"  # weight split by input features; output all-reduced


@dataclass(frozen=True)
class ParallelStep:
    """The trace of one training step of rank 0, and what the rank holds."""

    strategy: Strategy
    world_size: int
    trace: Trace
    params_per_rank: int  # parameter values held by this rank (its local shards)
    param_bytes_per_rank: int


def _distributed() -> Any:
    if not torch.distributed.is_available():
        raise TensorLedgerError("this PyTorch build has no torch.distributed: sharded layouts "
                                "need a build with it (the CPU and CUDA wheels have it)")
    import torch.distributed as dist

    return dist


@contextmanager
def fake_process_group(world_size: int) -> Iterator[Any]:
    """Rank 0 of a fake process group of ``world_size`` ranks, torn down on exit.

    >>> with fake_process_group(4) as group:
    ...     group.size(), group.rank()
    (4, 0)
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InputError(f"a world size is a whole number of ranks >= 1, got {world_size!r}")
    dist = _distributed()
    if dist.is_initialized():
        raise TensorLedgerError("a process group is already initialised in this process; "
                                "a fake one can only be set up where there is none")
    dist.init_process_group("fake", rank=0, world_size=world_size)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP wraps one by one before the root: the entries of every ModuleList
    (a transformer's blocks), innermost first (FSDP wraps a child before its parent), else
    the direct children that hold parameters."""
    lists = [module for module in model.modules() if isinstance(module, nn.ModuleList)]
    units = [block for module in reversed(lists) for block in module]
    if units:
        return units
    return [child for child in model.children() if any(True for _ in child.parameters())]


def _wrap(model: nn.Module, strategy: Strategy, mesh: Any, world_size: int,
          tp_plan: Mapping[str, TpStyle]) -> nn.Module:
    dist = _distributed()
    if strategy in (Strategy.FSDP, Strategy.FSDP_ZERO2):
        from torch.distributed.fsdp import fully_shard

        # None: FSDP2's default, resharding every unit but the root after forward
        reshard = False if strategy is Strategy.FSDP_ZERO2 else None
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        return model
    if strategy is Strategy.DDP:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, init_sync=False)

        def all_reduce_bucket(state: object, bucket: Any) -> torch.futures.Future[torch.Tensor]:
            buffer: torch.Tensor = bucket.buffer()
            buffer.div_(world_size)
            dist.all_reduce(buffer)
            done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            done.set_result(buffer)
            return done

        # DDP checks a hook's annotations as objects; this module's are strings
        all_reduce_bucket.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                                             "return": torch.futures.Future[torch.Tensor]}
        ddp.register_comm_hook(None, all_reduce_bucket)
        return ddp
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        RowwiseParallel,
        parallelize_module,
    )

    if not tp_plan:
        raise InputError("tensor parallelism needs a plan: module path → colwise or rowwise")
    known = dict(model.named_modules())
    missing = [path for path in tp_plan if path not in known]
    if missing:
        raise InputError(f"the tensor-parallel plan names {missing[0]!r}, which is no module of "
                         f"the model; known: {', '.join(p for p in known if p) or '(none)'}")
    styles: dict[str, ParallelStyle] = {
        path: ColwiseParallel() if style is TpStyle.COLWISE else RowwiseParallel()
        for path, style in tp_plan.items()}
    parallelize_module(model, mesh, styles)
    return model


def _local_numel(tensor: torch.Tensor) -> int:
    local = getattr(tensor, "to_local", None)
    return int((local() if local is not None else tensor).numel())


def trace_parallel_step(build: Callable[[], nn.Module], make_inputs: Callable[[], torch.Tensor],
                        strategy: Strategy, world_size: int,
                        tp_plan: Mapping[str, TpStyle] | None = None,
                        loss: Callable[[torch.Tensor], torch.Tensor] | None = None
                        ) -> ParallelStep:
    """Trace rank 0's training step (forward, backward, AdamW step) of ``build()`` laid out by
    ``strategy`` over ``world_size`` ranks of a fake process group, under fake tensors.

    ``build`` and ``make_inputs`` run under FakeTensorMode; ``loss`` turns the output into a
    scalar (default: the mean of its squares).  The model and inputs are the global ones:
    each rank of DDP and FSDP gets the same batch here, as each real rank gets its own.
    """
    try:
        strategy = Strategy(strategy)
    except ValueError:
        raise InputError(f"unknown parallel strategy {strategy!r}; known: "
                         f"{', '.join(s.value for s in Strategy)}") from None
    dist = _distributed()
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh

    to_scalar = loss or (lambda out: out.float().pow(2).mean())
    with fake_process_group(world_size):
        mesh = init_device_mesh("cpu", (world_size,))
        with FakeTensorMode():
            model = _wrap(build(), strategy, mesh, world_size, tp_plan or {})
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            inputs = make_inputs()

            def step() -> None:
                to_scalar(model(inputs)).backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            try:
                if strategy is not Strategy.DDP:
                    step()  # the warm-up: lazy initialisation, optimizer state, sharding caches
                recorder = Recorder()
                with recorder:
                    step()
            except TensorLedgerError:
                raise
            except Exception as error:
                raise TraceError(f"the {strategy.value} step on {world_size} fake ranks raised "
                                 f"{type(error).__name__}: {error}") from error
            params = list(_unique(model.parameters()))
            numel = sum(_local_numel(p) for p in params)
            nbytes = sum(_local_numel(p) * p.element_size() for p in params)
        assert dist.get_world_size() == world_size
    return ParallelStep(strategy=strategy, world_size=world_size, trace=recorder.trace,
                        params_per_rank=numel, param_bytes_per_rank=nbytes)


def _unique(params: Iterable[torch.Tensor]) -> Iterator[torch.Tensor]:
    seen: set[int] = set()
    for param in params:
        if id(param) not in seen:
            seen.add(id(param))
            yield param


def build_mesh(layout: Layout, device_type: str = "cpu") -> Any:
    """The device mesh of ``layout``, its dimensions named as :attr:`Layout.mesh_dims`; built
    inside a process group of ``layout.count`` ranks (before FakeTensorMode is entered)."""
    from torch.distributed.device_mesh import init_device_mesh

    dims = layout.mesh_dims or (("dp", 1),)
    return init_device_mesh(device_type, tuple(size for _, size in dims),
                            mesh_dim_names=tuple(name for name, _ in dims))


def parallelize(model: nn.Module, layout: Layout, mesh: Any,
                tp_plan: Mapping[str, TpStyle] | None = None) -> nn.Module:
    """Lay ``model`` out over ``mesh`` as ``layout`` says, with torch.distributed's own code:
    FSDP2 over the ``fsdp`` dimension (HSDP over ``dp`` × ``fsdp``), else DDP over ``dp``."""
    if layout.tp > 1 or layout.strategy == "zero1":
        raise InputError(f"{layout.describe()}: tensor parallelism and ZeRO-1 are not traced "
                         "by this build; use --fsdp and --dp")
    if layout.strategy in ("fsdp", "hsdp"):
        strategy = Strategy.FSDP_ZERO2 if layout.zero == 2 else Strategy.FSDP
        sub = mesh["dp", "fsdp"] if layout.strategy == "hsdp" else mesh["fsdp"]
        return _wrap(model, strategy, sub, layout.count, {})
    if layout.strategy == "ddp":
        return _wrap(model, Strategy.DDP, mesh["dp"], layout.dp, {})
    return model
