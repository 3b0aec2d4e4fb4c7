"""One rank of a sharded training step, traced on a fake process group under fake tensors.

torch.distributed's own parallel code runs unchanged — FSDP2 ``fully_shard`` (HSDP on a 2-D
mesh), DDP, ``ZeroRedundancyOptimizer``, DTensor tensor and sequence parallelism
(``parallelize_module``) — on rank 0 of a *fake* process group of as many ranks as the
:class:`~tensorledger.workload.layout.Layout` has (torch's ``"fake"`` backend: every collective
returns at once and moves nothing) while FakeTensorMode stands in for memory.  The recorder sees
what that rank runs: its share of the arithmetic, on its shards, and every collective it issues,
with the bytes it would send and receive (:mod:`tensorledger.costs.collectives`).  Nothing of
the parallel strategies is re-implemented here; this module builds the mesh
(:func:`build_mesh`), wraps the model (:func:`parallelize`), makes the optimizer
(:func:`make_optimizer`) and runs the step.  The same three functions lay a model out on a real
process group.  Which module tensor parallelism splits how (:class:`TpStyle`,
:func:`default_tp_plan`, :func:`reference_tp_plan`) is :mod:`tensorledger.workload.tensor_parallel`,
whose names this module re-exports.

Two details of running it on the fake group:

- The device mesh is built before FakeTensorMode is entered: building it reads the rank map
  as Python numbers, which fake tensors cannot give.
- DDP is built with ``init_sync=False`` (its construction-time check of parameter shapes
  across ranks reads real memory) and, on a fake group only, with a communication hook that
  does what its built-in one does — divide each gradient bucket by N and all-reduce it —
  because the fake group's asynchronous work carries no value for DDP to read back.  The
  all-reduces are DDP's own buckets, one ``c10d.allreduce_`` each.

The traced step is the second one: the first initialises FSDP's lazy state and the optimizer
state, and fills DTensor's sharding cache, whose misses run each op once more on global
shapes to learn its output's metadata (ops this rank never runs).  DDP (and ZeRO-1, which runs
under DDP) is the exception: its second step opens by rebuilding its gradient buckets in the
order the gradients arrived, which reads real memory, so its first step is traced (its buckets
in their first order: the same gradient bytes all-reduced, perhaps cut into other buckets; the
optimizer's first step creates its state).

>>> import torch
>>> from tensorledger.workload.layout import Layout
>>> step = trace_parallel_step(lambda: torch.nn.Linear(8, 16), lambda: torch.ones(4, 8),
...                            Layout(fsdp=2))
>>> step.param_bytes_per_rank        # (16·8 + 16) fp32 values / 2 ranks · 4 bytes
288
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from tensorledger.errors import InputError, TensorLedgerError, TraceError
from tensorledger.trace.recorder import Recorder
from tensorledger.trace.records import Trace
from tensorledger.trace.storage import local_tensor
from tensorledger.workload.layout import Layout
from tensorledger.workload.optimizers import apart_by_kind
from tensorledger.workload.tensor_parallel import (
    TpStyle,
    apply_tensor_parallel,
    default_tp_plan,
    reference_tp_plan,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ParallelStyle
    from torch.optim.optimizer import ParamsT

__all__ = ["ParallelStep", "TpStyle", "build_mesh", "default_tp_plan", "fake_process_group",
           "fsdp_storage_events", "grad_bytes", "make_optimizer", "parallelize",
           "reference_tp_plan", "shard_units", "trace_parallel_step"]


@dataclass(frozen=True)
class ParallelStep:
    """The trace of one training step of rank 0, and what the rank holds after it."""

    layout: Layout
    trace: Trace
    params_per_rank: int  # parameter values held by this rank (its local shards)
    param_bytes_per_rank: int
    # the optimizer state this rank holds (its local shards; AdamW's step counters included)
    optimizer_state_bytes_per_rank: int
    grad_bytes_per_rank: int = 0  # the gradients it holds after backward (its shards)

    @property
    def world_size(self) -> int:
        return self.layout.count


def _distributed() -> Any:
    if not torch.distributed.is_available():
        raise TensorLedgerError("this PyTorch build has no torch.distributed: sharded layouts "
                                "need a build with it (the CPU and CUDA wheels have it)")
    import torch.distributed as dist

    return dist


@contextmanager
def fake_process_group(world_size: int, rank: int = 0) -> Iterator[Any]:
    """Rank ``rank`` (0 unless told) of a fake process group of ``world_size`` ranks, torn
    down on exit.

    >>> with fake_process_group(4) as group:
    ...     group.size(), group.rank()
    (4, 0)
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise InputError(f"a world size is a whole number of ranks >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise InputError(f"a rank of a group of {world_size} is 0 to {world_size - 1}, got "
                         f"{rank!r}")
    dist = _distributed()
    if dist.is_initialized():
        raise TensorLedgerError("a process group is already initialised in this process; "
                                "a fake one can only be set up where there is none")
    dist.init_process_group("fake", rank=rank, world_size=world_size)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
        _forget_sharding()


def _forget_sharding() -> None:
    """Empty DTensor's sharding-propagation caches.  Their keys hold device meshes, and a mesh
    of a later group with the same ranks and names compares equal to one of a destroyed group:
    a cached redistribution would then reach for the destroyed group's name (a second layout
    traced in one process failed so)."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    propagator = DTensor._op_dispatcher.sharding_propagator
    for cache in (getattr(propagator, "propagate_op_sharding", None),
                  getattr(ShardingPropagator, "_propagate_tensor_meta_cached", None)):
        clear = getattr(cache, "cache_clear", None)
        if clear is not None:
            clear()
    native = getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", None)
    if native is not None:  # the C++ dispatch fast path's own cache (newer torch)
        native()


def build_mesh(layout: Layout, device_type: str = "cpu") -> DeviceMesh:
    """The device mesh of ``layout`` over the process group already initialised (a fake one
    from :func:`fake_process_group`, or a real one of ``layout.count`` ranks): one named
    dimension per degree above 1, outermost first (``dp``, ``fsdp``, ``tp``); a single device
    gets a 1-D mesh of one rank named ``dp``.

    >>> from tensorledger.workload.layout import Layout
    >>> with fake_process_group(8):
    ...     mesh = build_mesh(Layout(fsdp=4, tp=2))
    ...     mesh.mesh_dim_names, mesh["tp"].size()
    (('fsdp', 'tp'), 2)
    """
    dist = _distributed()
    if not dist.is_initialized():
        raise TensorLedgerError("build_mesh needs a process group: run it inside "
                                "fake_process_group(layout.count) or after init_process_group")
    if dist.get_world_size() != layout.count:
        raise InputError(f"the layout {layout.describe() or 'single device'} needs "
                         f"{layout.count} ranks; the process group has {dist.get_world_size()}")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.utils._python_dispatch import _disable_current_modes

    dims = layout.mesh_dims or (("dp", 1),)
    # the mesh's rank table is a real tensor even where a fake mode (and the routed mode) is
    # on: a fake one makes each rank's coordinate a read of no memory, whatever it held
    with _disable_current_modes():
        return init_device_mesh(device_type, tuple(size for _, size in dims),
                                mesh_dim_names=tuple(name for name, _ in dims))


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP wraps one by one before the root: the entries of every ModuleList
    or ModuleDict (a transformer's blocks; a pipeline stage's), innermost first (FSDP wraps
    a child before its parent), else the direct children that hold parameters."""
    lists = [module for module in model.modules()
             if isinstance(module, nn.ModuleList | nn.ModuleDict)]
    units = [block for module in reversed(lists)
             for block in (module.values() if isinstance(module, nn.ModuleDict) else module)]
    if units:
        return units
    return [child for child in model.children() if any(True for _ in child.parameters())]


# ---- data parallelism -------------------------------------------------------------------------


def _ddp(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    dist = _distributed()
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel

    from tensorledger.workload.expert_parallel import expert_parameters

    # expert-parallel experts: each rank's are its own, and their gradients are whole already
    # (every slot routed to them arrived), so DDP leaves them out of its buckets
    own = [name for name, _ in expert_parameters(model)] if mesh.mesh_dim_names == ("ep",) \
        else []
    if own:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(  # type: ignore[no-untyped-call]
            model, own)

    group = mesh.get_group()
    if any(isinstance(p, DTensor) for p in model.parameters()):
        # beside tensor parallelism: torch's own DDP × TP, given the data-parallel slice of
        # the mesh, runs DDP over each parameter's local shard (DTensors again in forward)
        # (torch's own transform, which DDP given a sliced mesh runs, run here so that tied
        # names are joined again before DDP lists the parameters it reduces)
        from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform

        retie = _tied_keeper(model)  # read before torch's swap unties them
        _pre_dp_module_transform(model)
        if retie is not None:
            retie()
            model.register_forward_pre_hook(retie)  # after torch's: DTensors for the forward
            model.register_forward_hook(retie)  # after torch's: the local shards again
        ddp = DistributedDataParallel(model, process_group=group, init_sync=False)
    else:
        ddp = DistributedDataParallel(model, process_group=group, init_sync=False)
    if dist.get_backend(group) != "fake":
        return ddp  # a real group keeps DDP's built-in all-reduce
    ranks = mesh.size()

    def all_reduce_bucket(state: object, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        buffer: torch.Tensor = bucket.buffer()
        buffer.div_(ranks)
        dist.all_reduce(buffer, group=group)
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(buffer)
        return done

    # DDP checks a hook's annotations as objects; this module's are strings
    all_reduce_bucket.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                                         "return": torch.futures.Future[torch.Tensor]}
    ddp.register_comm_hook(None, all_reduce_bucket)
    return ddp


def _tied_keeper(model: nn.Module) -> Callable[..., None] | None:
    """Tied parameters (an embedding table that is also the head) stay one tensor under
    torch's DDP × TP: its swap of each DTensor parameter for its local shard and back (before
    and after every forward) goes by name once per tensor, which leaves a tied tensor's second
    name on the DTensor and the optimizer with both.  The returned function sets every name of
    a tied tensor to what its first name holds (None: nothing is tied); it is run after each of
    torch's swaps."""
    slots: dict[int, list[tuple[nn.Module, str]]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        owner, _, attr = name.rpartition(".")
        slots.setdefault(id(parameter), []).append(
            (model.get_submodule(owner) if owner else model, attr))
    tied = [found for found in slots.values() if len(found) > 1]
    if not tied:
        return None

    def retie(*_: object) -> None:
        for (first, first_attr), *others in tied:
            held = getattr(first, first_attr)
            for module, attr in others:
                if getattr(module, attr) is not held:
                    delattr(module, attr)
                    setattr(module, attr, held)

    return retie


def _shard_beside(layout: Layout, mesh: DeviceMesh, other: str) -> DeviceMesh:
    """The data-parallel (sub)mesh with the ``other`` dimension (cp or ep, whose ranks see
    different tokens) joined to the shard dimension: fsdp and it flattened into one, beside dp
    under HSDP."""
    if layout.fsdp == 1:
        return mesh["dp", other] if layout.strategy == "hsdp" else mesh[other]
    flat = mesh["fsdp", other]._flatten(f"fsdp_{other}")
    if layout.strategy != "hsdp":
        return flat
    with warnings.catch_warnings():  # torch's own way to HSDP beside it, for now
        warnings.filterwarnings("ignore", "Slicing a flattened dim", UserWarning)
        return mesh["dp", f"fsdp_{other}"]


def _data_parallel_mesh(layout: Layout, mesh: DeviceMesh) -> DeviceMesh:
    """The (sub)mesh the data-parallel part runs on: dp and fsdp together for HSDP; with
    context parallelism, fsdp and cp flattened into one shard dimension (torchtitan's
    ``dp_shard_cp``): the cp ranks' gradients are of different tokens and are reduced too."""
    if layout.ep > 1:  # the ep ranks run their own batches: data-parallel to the non-experts
        return _shard_beside(layout, mesh, "ep")
    if layout.cp > 1:
        return _shard_beside(layout, mesh, "cp")
    if layout.strategy == "hsdp":
        return mesh["dp", "fsdp"]
    return mesh["fsdp" if layout.fsdp > 1 else "dp"]


def parallelize(model: nn.Module, layout: Layout, mesh: DeviceMesh,
                tp_plan: Mapping[str, TpStyle | ParallelStyle] | None = None,
                between: Callable[[nn.Module], nn.Module] | None = None,
                offload_params: bool = False, stage: bool = False) -> nn.Module:
    """Lay ``model`` out by ``layout`` on ``mesh`` (from :func:`build_mesh`) and return the
    module to run (the same one, or DDP around it).

    Tensor parallelism first, on ``mesh["tp"]`` (``tp_plan``, else :func:`default_tp_plan`);
    then the data-parallel part: FSDP2 ``fully_shard`` on each of :func:`shard_units` and then
    the root over ``mesh["fsdp"]`` (ZeRO-3; ZeRO-2 keeps each unit gathered from forward to
    backward), over the 2-D ``mesh["dp", "fsdp"]`` for HSDP (sharded within, replicated
    across); DDP over ``mesh["dp"]``; for ZeRO-1, DDP over ``mesh["fsdp"]`` with the optimizer
    sharded by :func:`make_optimizer`.  ``between`` (activation checkpointing, say) is applied
    after tensor parallelism and before the data-parallel wrapping, the order torchtitan uses,
    so FSDP's units are the checkpointed blocks.  ``offload_params`` gives every
    ``fully_shard`` FSDP2's ``CPUOffloadPolicy`` (:mod:`.param_offload`: the shards, their
    gradients and the optimizer state on the host).  It may run under FakeTensorMode (as
    :func:`trace_parallel_step` runs it) or on real tensors.  ``stage``: ``model`` is one
    pipeline stage, whose layers may hold no routed experts under ``--ep`` (its others do).

    >>> from tensorledger.workload.layout import Layout
    >>> with fake_process_group(2):
    ...     model = parallelize(torch.nn.Linear(8, 4), Layout(fsdp=2), build_mesh(Layout(fsdp=2)))
    ...     model.weight.to_local().shape
    torch.Size([2, 8])
    """
    strategy = layout.strategy
    if layout.tp > 1:
        apply_tensor_parallel(model, mesh["tp"], tp_plan, layout.sp, experts=layout.ep > 1)
    elif tp_plan:
        raise InputError("a tensor-parallel plan was given but the layout has no --tp; give "
                         "--tp N (N > 1) or drop the plan")
    experts: list[nn.Module] = []
    if layout.ep > 1:
        from tensorledger.workload.expert_parallel import apply_expert_parallel, expert_modules

        apply_expert_parallel(model, mesh["ep"], required=not stage,
                              tp=mesh["tp"] if layout.etp > 1 else None)
        experts = [module for _, module in expert_modules(model)]
    if between is not None:
        model = between(model)
    if strategy in ("fsdp", "hsdp") or (offload_params and strategy == ""):
        # (parameters offloaded on one device: FSDP2 over its 1-rank mesh, ``dp`` of size 1)
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.distributed.fsdp import fully_shard

        # None: FSDP2's default, resharding every unit but the root after forward
        reshard = False if layout.zero == 2 else None
        options: dict[str, Any] = {}
        if offload_params:
            from tensorledger.workload.param_offload import offload_policy

            options["offload_policy"] = offload_policy(mesh.device_type)
        # FSDP2 over tensor-parallel DTensors joins the two meshes, reading the rank map (a
        # real tensor) as fake tensors cannot: any FakeTensorMode is lifted meanwhile, and a
        # fake model's tensors still dispatch to their own mode (flattening fsdp and cp reads
        # it too).  (DDP stays inside: its buckets must be fake too.)
        with unset_fake_temporarily():
            shard_mesh = _data_parallel_mesh(layout, mesh)
            # the experts over fsdp alone (replicated over dp: HSDP): ep already split them
            for unit in experts:
                fully_shard(unit, mesh=mesh["dp", "fsdp"] if strategy == "hsdp"
                            else mesh["fsdp"], reshard_after_forward=reshard)
            for unit in shard_units(model):
                fully_shard(unit, mesh=shard_mesh, reshard_after_forward=reshard, **options)
            fully_shard(model, mesh=shard_mesh, reshard_after_forward=reshard, **options)
        return model
    if strategy in ("ddp", "zero1"):
        return _ddp(model, _data_parallel_mesh(layout, mesh))
    return model


def make_optimizer(layout: Layout, mesh: DeviceMesh, params: Iterable[nn.Parameter],
                   make: Callable[[ParamsT], torch.optim.Optimizer]) -> torch.optim.Optimizer:
    """The optimizer of a step laid out by ``layout``: ``make(params)``, except for ZeRO-1,
    where ``ZeroRedundancyOptimizer`` over ``mesh["fsdp"]`` gives each rank the parameters of
    its partition (whole parameters, largest first, each to the rank holding fewest values so
    far) and calls ``make`` on those alone; after its step each rank broadcasts its own.

    >>> from tensorledger.workload.layout import Layout
    >>> with fake_process_group(2):
    ...     layout = Layout(fsdp=2, zero=1)
    ...     opt = make_optimizer(layout, build_mesh(layout), torch.nn.Linear(8, 4).parameters(),
    ...                          lambda params: torch.optim.AdamW(params, lr=1e-3))
    ...     type(opt).__name__, [p.shape for g in opt.optim.param_groups for p in g["params"]]
    ('ZeroRedundancyOptimizer', [torch.Size([4, 8])])
    """
    if layout.strategy != "zero1":
        return make(apart_by_kind(list(params)))
    with warnings.catch_warnings():
        # the package's functional optimizers are TorchScript, which warns on first import
        warnings.filterwarnings("ignore", "`torch.jit.[a-z]+` is deprecated",
                                DeprecationWarning)
        from torch.distributed.optim import ZeroRedundancyOptimizer

    def local(groups: ParamsT, **defaults: Any) -> torch.optim.Optimizer:
        return make(groups)

    return ZeroRedundancyOptimizer(list(params), optimizer_class=local,  # type: ignore[arg-type]
                                   process_group=mesh["fsdp"].get_group())


@contextmanager
def fsdp_storage_events(recorder: Recorder,
                        gathered: Callable[[torch.Tensor], None] | None = None
                        ) -> Iterator[None]:
    """Tell ``recorder`` when FSDP2 frees and re-allocates a gathered parameter's storage.

    FSDP2 keeps one storage per unsharded parameter for the whole run and changes its size
    with ``untyped_storage().resize_`` — no aten op a dispatch mode sees — so without this a
    trace would hold every gathered parameter live for the whole step.  FSDP2's two helpers
    that do it (``alloc_storage``, ``free_storage``, private to torch) are wrapped for the
    duration; ``gathered`` is told each tensor whose storage was allocated (to tag it).  A
    torch whose FSDP2 lacks them is left alone (the trace then over-counts, as said above).
    """
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
        alloc, free = _fsdp_param.alloc_storage, _fsdp_param.free_storage
    except (ImportError, AttributeError):
        yield
        return

    def tracked(change: Callable[[torch.Tensor], None], allocates: bool
                ) -> Callable[[torch.Tensor], None]:
        def run(tensor: torch.Tensor) -> None:
            before = tensor.untyped_storage().nbytes()
            change(tensor)
            if tensor.untyped_storage().nbytes() != before:
                recorder.storage_resized(tensor.untyped_storage())
                if allocates and gathered is not None:
                    gathered(tensor)
        return run

    patched = {"alloc_storage": tracked(alloc, True), "free_storage": tracked(free, False)}
    modules = [m for m in (_fsdp_param, _fsdp_param_group)]
    saved = [(m, name, getattr(m, name)) for m in modules for name in patched if hasattr(m, name)]
    try:
        for module, name, _ in saved:
            setattr(module, name, patched[name])
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


# ---- the traced step --------------------------------------------------------------------------


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    # ZeroRedundancyOptimizer keeps its rank's state in the local optimizer it wraps
    inner: torch.optim.Optimizer = getattr(optimizer, "optim", optimizer)
    return sum(local_tensor(value).numel() * value.element_size()
               for state in inner.state.values() for value in state.values()
               if isinstance(value, torch.Tensor))


def trace_parallel_step(build: Callable[[], nn.Module], make_inputs: Callable[[], torch.Tensor],
                        layout: Layout,
                        tp_plan: Mapping[str, TpStyle | ParallelStyle] | None = None,
                        loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
                        modes: Callable[[], AbstractContextManager[object]] | None = None
                        ) -> ParallelStep:
    """Trace rank 0's training step (forward, backward, AdamW step) of ``build()`` laid out by
    ``layout`` (:func:`parallelize`, :func:`make_optimizer`) on a fake process group of
    ``layout.count`` ranks, under fake tensors.

    ``build`` and ``make_inputs`` run under FakeTensorMode; ``loss`` turns the output into a
    scalar (default: the mean of its squares).  ``make_inputs`` gives one rank's batch: each
    data-parallel rank runs its own, every tensor-parallel rank the same one; with context
    parallelism, batch-first and cut along its sequence (dimension 1) to the rank's chunks.
    ``modes`` gives what is entered inside FakeTensorMode before the model is built (a mixture
    of experts' stated routing, :class:`.routed.RoutedMode`).
    """
    if not isinstance(layout, Layout):
        raise InputError(f"a layout is a tensorledger Layout (resolve_layout(...)), got "
                         f"{type(layout).__name__}")
    from torch._subclasses.fake_tensor import FakeTensorMode

    to_scalar = loss or (lambda out: out.float().pow(2).mean())
    name = layout.describe() or "single-device"
    with fake_process_group(layout.count):
        mesh = build_mesh(layout)
        with FakeTensorMode(), (nullcontext() if modes is None else modes()):
            model = parallelize(build(), layout, mesh, tp_plan)
            # the parameters as laid out, before a forward: DDP beside tensor parallelism
            # leaves its DTensors as plain attributes after one, out of model.parameters()
            held = list(model.parameters())
            optimizer = make_optimizer(layout, mesh, held,
                                       lambda params: torch.optim.AdamW(params, lr=1e-3))
            inputs = make_inputs()

            grads = [0]

            def step() -> None:
                to_scalar(model(inputs)).backward()  # type: ignore[no-untyped-call]
                grads[0] = grad_bytes(held)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            sharded: Any = nullcontext()
            if layout.cp > 1:  # the sequence over the cp ranks, torch's ring attention
                from tensorledger.workload.context_parallel import sequence_sharded

                sharded = sequence_sharded(mesh["cp"], [inputs], layout.cp_rotate)
            try:
                with warnings.catch_warnings(), sharded:
                    if loss is None:
                        # FSDP2 warns that the root returns a view (a gathered DTensor's local
                        # tensor) which an in-place op would cut from its backward hook; the
                        # default loss reads it out of place
                        warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a "
                                                "view tensor", UserWarning)
                    if layout.strategy not in ("ddp", "zero1"):
                        step()  # the warm-up: lazy initialisation, optimizer state, caches
                    elif layout.tp > 1:
                        with cast(Any, model).no_sync():  # DDP records no gradient order
                            # DTensor's sharding cache filled (its misses rerun ops on fake
                            # tensors, which a real rank never runs)
                            to_scalar(model(inputs)).backward()  # type: ignore[no-untyped-call]
                        optimizer.zero_grad(set_to_none=True)
                    recorder = Recorder()
                    with recorder, fsdp_storage_events(recorder):
                        step()
            except TensorLedgerError:
                raise
            except Exception as error:
                raise TraceError(f"the {name} step on {layout.count} fake ranks raised "
                                 f"{type(error).__name__}: {error}") from error
            params = [local_tensor(p) for p in _unique(held)]
            numel = sum(p.numel() for p in params)
            nbytes = sum(p.numel() * p.element_size() for p in params)
            state_bytes = _state_bytes(optimizer)
    return ParallelStep(layout=layout, trace=recorder.trace, params_per_rank=numel,
                        param_bytes_per_rank=nbytes, optimizer_state_bytes_per_rank=state_bytes,
                        grad_bytes_per_rank=grads[0])


def grad_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes of the gradients a rank holds for ``params`` (each tensor once; local shards)."""
    return sum(local_tensor(p.grad).numel() * p.grad.element_size()
               for p in _unique(params) if p.grad is not None)


def _unique(params: Iterable[torch.Tensor]) -> Iterator[torch.Tensor]:
    seen: set[int] = set()
    for param in params:
        if id(param) not in seen:
            seen.add(id(param))
            yield param
