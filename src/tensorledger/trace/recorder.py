"""The recorder: a TorchDispatchMode that writes one OpRecord per aten op of a step.

Attribution:

- *module*: global forward pre/post hooks keep a stack of fully qualified module names
  (an outermost module is named by its class, its children by their attribute paths:
  ``Transformer.layers.0.attn``).  Backward ops are attributed to the module whose forward
  built the autograd node that runs them: when a module's forward returns, the autograd
  nodes it created are tagged with its name, and during backward the recorder asks autograd
  which node is running.
- *phase*: ``backward`` while an autograd graph task runs; ``optimizer`` between the global
  optimizer step pre and post hooks; ``forward`` inside a module's forward or before the
  first backward; ``other`` after it (gradient clipping, zeroing, glue code).

Attention: on the meta device PyTorch has no fused attention kernel and decomposes
``scaled_dot_product_attention`` into its math path (bmm, softmax, ...), while CPU, CUDA and
fake tensors run a fused kernel.  So that the same shapes give the same counts everywhere, a
TorchFunctionMode sends meta calls to the CPU fused kernel's meta function, which exists for
every shape the math path accepts with 4-d inputs.

DTensor: an op on DTensors is left to DTensor, which runs it as ops on this rank's local
shards and the collectives its redistributions need; those are recorded (FLOPs per rank).
DTensor's sharding cache, on a miss, runs an op once more on global shapes to learn the
output's metadata, and the recorder sees that too: record a step once the cache is warm (a
second step), as :mod:`tensorledger.workload.parallel` does.  Collectives carry a
:class:`~tensorledger.trace.records.CollectiveInfo` (:mod:`tensorledger.trace.collectives`).
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    is_traceable_wrapper_subclass,
    is_traceable_wrapper_subclass_type,
)
from torch.utils._pytree import tree_leaves

from tensorledger.costs.registry import Rule, lookup
from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import TensorLedgerError, TraceError, UnknownNameError
from tensorledger.hardware.target import CPU
from tensorledger.trace.collectives import collective_info
from tensorledger.trace.kernels import _SDPA, active_target, listen, sdpa_on
from tensorledger.trace.layout import inner_loop
from tensorledger.trace.records import ROOT, CollectiveInfo, OpRecord, Trace, is_norm_class

__all__ = ["Recorder", "recomputation", "trace"]

# Queries of sizes and devices that fake tensors and symbolic shapes dispatch: not ops.
#: How many checkpointed functions are running now (:func:`recomputation`).
_recomputing = 0


@contextlib.contextmanager
def recomputation() -> Iterator[None]:
    """Run a checkpointed function: ops it runs while autograd runs a backward are its
    recomputation (``OpRecord.recomputed``), even where no module's forward hook sees them
    (transformers calls a layer's ``forward`` itself when it recomputes it)."""
    global _recomputing
    _recomputing += 1
    try:
        yield
    finally:
        _recomputing -= 1


_SKIPPED_NAMESPACES = ("prim", "profiler")
_SKIPPED_PACKETS = frozenset({"aten.sym_size", "aten.sym_stride", "aten.sym_numel",
                              "aten.sym_storage_offset", "aten.is_contiguous",
                              "aten.is_strides_like_format", "aten.is_non_overlapping_and_dense"})


@dataclass(frozen=True, slots=True)
class _OpInfo:
    """What the recorder needs to know about one op overload, worked out once."""

    name: str
    skip: bool
    rule: Rule | None
    view_schema: bool  # returns an alias of an input and writes nothing
    mutated: tuple[int | str, ...]  # positions / keyword names of arguments written in place
    write_only: tuple[int | str, ...]  # arguments written and not read (out=, copy_'s self)


def _describe(func: Any) -> _OpInfo:
    name = str(func)
    packet = name.rsplit(".", 1)[0]
    namespace = name.split(".", 1)[0]
    skip = namespace in _SKIPPED_NAMESPACES or packet in _SKIPPED_PACKETS
    rule = lookup(packet)
    mutated: list[int | str] = []
    write_only: list[int | str] = []
    view_schema = False
    schema = getattr(func, "_schema", None)
    if schema is not None:
        for position, argument in enumerate(schema.arguments):
            key: int | str = argument.name if argument.kwarg_only else position
            alias = argument.alias_info
            if alias is not None and alias.is_write:
                mutated.append(key)
                if argument.is_out or (rule is not None and rule.write_only_self
                                       and position == 0):
                    write_only.append(key)
        view_schema = not mutated and any(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    return _OpInfo(name, skip, rule, view_schema, tuple(mutated), tuple(write_only))


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        text = str(dtype).removeprefix("torch.")
        try:
            name = resolve_dtype(text).name
        except UnknownNameError:
            name = text
        _DTYPE_NAMES[dtype] = name
    return name


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield item


def _argument(args: Sequence[Any], kwargs: dict[str, Any], key: int | str) -> Any:
    if isinstance(key, str):
        return kwargs.get(key)
    return args[key] if key < len(args) else None


def _view_bytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel()) * tensor.element_size()


def _layout(tensor: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of a tensor, what ``trace.layout`` reads."""
    try:
        return tuple(tensor.shape), tuple(tensor.stride())
    except RuntimeError:  # a layout without strides (sparse, nested): read as contiguous
        return tuple(tensor.shape), ()


def _storage(tensor: torch.Tensor) -> torch.UntypedStorage | None:
    if is_traceable_wrapper_subclass(tensor):
        # a wrapper (torchao's NF4 weight) holds its memory in inner tensors, which its ops
        # read as ops of their own; its own storage is a placeholder of the logical size
        return None
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None  # sparse, nested or wrapper tensors: no plain storage


def _is_wrapper(kind: type) -> bool:
    """A tensor subclass that holds other tensors and dispatches each op to them (DTensor,
    torchao's ``Float8TrainingTensor`` and fp8-gathered weights); FakeTensor and Parameter are
    not."""
    return is_traceable_wrapper_subclass_type(kind)


class _Dispatch(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recorder = recorder
        self.infos: dict[Any, _OpInfo] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if any(_is_wrapper(t) for t in types):
            # A wrapper subclass turns the op into ops on the tensors it holds: DTensor into
            # ops on the local shards (and collectives), torchao's float8 tensor into
            # ``_scaled_mm`` on its fp8 data and scales.  Those are what the chip runs,
            # recorded when the subclass dispatches them.
            return NotImplemented
        out = func(*args, **kwargs)
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _describe(func)
        if not info.skip:
            self.recorder._record(info, args, kwargs, out)
        return out


#: Categories of the pieces of a normalisation run op by op (HF ``LlamaRMSNorm``, a hand-written
#: RMSNorm): inside a norm module they count as ``normalization``.
_NORM_PARTS = ("elementwise", "reduction")
_RECORDERS = itertools.count()  # each recorder tags autograd nodes under a key of its own
#: Categories of pointwise kernels (torch's TensorIterator), whose inner loop the layouts of
#: their operands set (``trace.layout``); fused kernels (norms, losses) loop their own way.
_POINTWISE = frozenset({"elementwise", "copy"})


class _Attention(TorchFunctionMode):
    """Outside a :func:`~tensorledger.trace.kernels.target_program`, attention on meta as the
    CPU runs it (the CPU fused kernel's meta function); inside one, left to its mode."""

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _SDPA and args and active_target() is None:
            out = sdpa_on(CPU, *args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


class Recorder:
    """Record every aten op run inside the ``with`` block.

    >>> import torch
    >>> with Recorder() as recorder:
    ...     _ = torch.ones(4, 8, device="meta") @ torch.ones(8, 2, device="meta")
    >>> [(r.op, r.flops) for r in recorder.trace.records if r.category == "matmul"]
    [('aten.mm.default', 128)]
    """

    def __init__(self) -> None:
        self.records: list[OpRecord] = []
        self._trace: Trace | None = None
        self._live: dict[int, tuple[int, int]] = {}  # storage address → (id, nbytes)
        self._finalizers: list[weakref.finalize[Any, Any]] = []
        self._preexisting: list[tuple[int, int]] = []
        self._pending_frees: list[int] = []
        self._pending_creates: list[tuple[int, int]] = []  # re-sized outside any op
        self._next_storage = 0
        self._stack: list[str] = []
        self._names: dict[torch.nn.Module, str] = {}
        self._classes: dict[str, str] = {}  # module path → class name
        self._root_names: set[str] = set()
        self._tag_key = f"tensorledger.module.{next(_RECORDERS)}"
        self._optimizer_depth = 0
        self._backward_seen = False
        self._device: str | None = None
        self._active = False
        self._handles: list[Any] = []
        self._modes: list[Any] = []
        self._attention: list[tuple[str, str, str]] = []  # module, kernel, why

    # ---- the context manager -------------------------------------------------------------
    def __enter__(self) -> Recorder:
        if self._active or self._trace is not None:
            raise TraceError("a Recorder records one step; make a new one for the next")
        self._active = True
        self._handles = [
            register_module_forward_pre_hook(self._enter_module),
            register_module_forward_hook(self._leave_module, always_call=True),
            register_optimizer_step_pre_hook(self._enter_optimizer),
            register_optimizer_step_post_hook(self._leave_optimizer),
        ]
        self._modes = [listen(self._note_attention), _Attention(), _Dispatch(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def _note_attention(self, kernel: str, reason: str) -> None:
        self._attention.append((self._stack[-1] if self._stack else ROOT, kernel, reason))

    def __exit__(self, *exc: object) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        self._active = False
        for finalizer in self._finalizers:
            finalizer.detach()
        freed_at_end = tuple(self._pending_frees)
        uncovered = Counter(r.op for r in self.records if not r.covered)
        self._trace = Trace(
            records=tuple(self.records),
            uncovered=dict(sorted(uncovered.items())),
            device=self._device or "none",
            storages_preexisting=tuple(self._preexisting),
            storages_freed_at_end=freed_at_end,
            module_classes=dict(self._classes),
            attention_kernels=tuple(dict.fromkeys(self._attention)),
        )
        self._names.clear()
        self._finalizers.clear()
        self._live.clear()

    @property
    def trace(self) -> Trace:
        """The finished trace; available once the ``with`` block has ended."""
        if self._trace is None:
            raise TraceError("the trace is ready when the 'with Recorder()' block ends")
        return self._trace

    # ---- modules and optimizer ---------------------------------------------------------------
    def _name(self, module: torch.nn.Module) -> str:
        name = self._names.get(module)
        if name is not None:
            return name
        if self._stack:
            base = f"{self._stack[-1]}.{type(module).__name__}"
        else:
            base = type(module).__name__
            suffix = 1
            while base in self._root_names:
                suffix += 1
                base = f"{type(module).__name__}#{suffix}"
            self._root_names.add(base)
        for path, child in module.named_modules():
            named = self._names.setdefault(child, f"{base}.{path}" if path else base)
            self._classes.setdefault(named, type(child).__name__)
        return self._names[module]

    def _enter_module(self, module: torch.nn.Module, args: Any) -> None:
        name = self._name(module)
        # nodes built before this call (the inputs' history) belong to the caller
        self._tag(args, self._stack[-1] if self._stack else ROOT)
        self._stack.append(name)

    def _leave_module(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._stack:
            self._tag(output, self._stack[-1])
            self._stack.pop()

    def _tag(self, values: Any, name: str) -> None:
        """Give every autograd node behind ``values`` not yet tagged the module ``name``.

        The tag is kept in the node's own ``metadata``, so it holds no node (and no saved
        tensor) alive.  A forward run again inside backward is tagged too: a reentrant
        checkpoint runs the recomputed graph backward (whose ops then belong to the block's
        modules), while a non-reentrant one drops it unrun, its tags with it."""
        if not torch.is_grad_enabled():
            return
        key = self._tag_key
        # (``metadata`` is a property on every node type: torch's stub says a method)
        pending: list[Any] = [t.grad_fn for t in tree_leaves(values)
                              if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while pending:
            node = pending.pop()
            metadata = node.metadata
            if key in metadata:
                continue
            metadata[key] = name
            pending.extend(following for following, _ in node.next_functions
                           if following is not None)

    def _enter_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_depth += 1

    def _leave_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_depth = max(0, self._optimizer_depth - 1)

    # ---- storages ------------------------------------------------------------------------------
    def _storage_id(self, storage: torch.UntypedStorage, created: list[tuple[int, int]] | None
                    ) -> tuple[int, bool]:
        """The id of a storage, registering it when new; True when it was new."""
        address = storage._cdata
        known = self._live.get(address)
        if known is not None:
            return known[0], False
        number = self._next_storage
        self._next_storage += 1
        nbytes = int(storage.nbytes())
        self._live[address] = (number, nbytes)
        (created if created is not None else self._preexisting).append((number, nbytes))
        self._finalizers.append(weakref.finalize(storage, self._freed, address, number))
        return number, True

    def storage_resized(self, storage: torch.UntypedStorage) -> None:
        """Tell the recorder that ``storage`` changed size outside any op, as FSDP2 frees
        (``resize_(0)``) and re-allocates its gathered parameters: the old size is freed and
        the new one (if any) created, both at the next op."""
        if not self._active:
            return
        address = storage._cdata
        known = self._live.pop(address, None)
        if known is not None:
            self._pending_frees.append(known[0])
        if storage.nbytes() > 0:
            self._storage_id(storage, self._pending_creates)

    def _freed(self, address: int, number: int) -> None:
        known = self._live.get(address)
        if known is None or known[0] != number:
            return  # its free was told already, when it was re-sized (storage_resized)
        del self._live[address]
        if self._active:
            self._pending_frees.append(number)

    # ---- one op ------------------------------------------------------------------------------
    def _phase(self) -> str:
        if torch._C._current_graph_task_id() != -1:
            self._backward_seen = True
            return "backward"
        if self._optimizer_depth:
            return "optimizer"
        if self._stack or not self._backward_seen:
            return "forward"
        return "other"

    def _module(self, phase: str) -> str:
        if self._stack:
            return self._stack[-1]  # also a recomputed forward inside backward
        if phase == "backward":
            node: Any = torch._C._current_autograd_node()
            if node is not None:
                return str(node.metadata.get(self._tag_key, ROOT))
        return ROOT

    def _record(self, info: _OpInfo, args: Sequence[Any], kwargs: dict[str, Any],
                out: Any) -> None:
        write_only = info.write_only
        inputs: list[torch.Tensor] = []
        read: dict[int, int] = {}  # storage address → bytes read from it
        for position, value in enumerate(args):
            for tensor in _tensors(value):
                inputs.append(tensor)
                if position not in write_only:
                    self._read(tensor, read)
        for name, value in kwargs.items():
            for tensor in _tensors(value):
                inputs.append(tensor)
                if name not in write_only:
                    self._read(tensor, read)
        outputs = [t for t in _tensors(out)]
        if self._device is None:
            self._device = self._device_of(outputs or inputs)

        # A destination written in place (``copy_``, ``out=``) existed before the op, even when
        # the trace meets it here first: it is registered as pre-existing, never as created.
        for key in info.mutated:
            for tensor in _tensors(_argument(args, kwargs, key)):
                storage = _storage(tensor)
                if storage is not None:
                    self._storage_id(storage, None)
        created: list[tuple[int, int]] = []
        written = 0
        for tensor in outputs:
            storage = _storage(tensor)
            if storage is not None and self._storage_id(storage, created)[1]:
                written += _view_bytes(tensor)
        for key in info.mutated:
            for tensor in _tensors(_argument(args, kwargs, key)):
                written += _view_bytes(tensor)

        rule = info.rule
        aliases_only = bool(outputs) and not created and not info.mutated
        view = info.view_schema or aliases_only
        covered = rule is not None or view
        flops = halved = 0
        category = "view" if view else "other"
        collective: CollectiveInfo | None = None
        if rule is not None:
            category = rule.category
            try:
                flops = halved = int(rule.flops(args, kwargs, out))
                if rule.causal is not None and rule.causal(args, kwargs):
                    halved = flops // 2
                if rule.collective is not None:
                    collective = collective_info(rule.collective, args, kwargs, out)
            except (IndexError, KeyError, TypeError, ValueError, AttributeError, RuntimeError):
                covered = False  # an argument layout the rule does not know: listed, not zero
                flops = halved = 0
        moves = "none" if view else (rule.moves if rule is not None else "io")
        if moves == "none":
            bytes_read = written = 0
        elif moves == "write":
            bytes_read = 0
        elif rule is not None and rule.bytes_read is not None:
            bytes_read = rule.bytes_read(args, kwargs, out)
        else:
            bytes_read = sum(read.values())

        loop = 0
        if category in _POINTWISE and moves != "none" and (outputs or inputs):
            loop = inner_loop(_layout(outputs[0] if outputs else inputs[0]),
                              [_layout(t) for t in inputs])
        phase = self._phase()
        module = self._module(phase)
        if category in _NORM_PARTS and is_norm_class(self._classes.get(module, "")):
            category = "normalization"  # a norm written out: pow, mean, rsqrt, mul
        freed = tuple(self._pending_frees)
        self._pending_frees.clear()
        resized = tuple(self._pending_creates)
        self._pending_creates.clear()
        self.records.append(OpRecord(
            index=len(self.records),
            op=info.name,
            module=module,
            phase=phase,
            category=category,
            input_shapes=tuple(tuple(t.shape) for t in inputs),
            input_dtypes=tuple(_dtype_name(t.dtype) for t in inputs),
            output_shapes=tuple(tuple(t.shape) for t in outputs),
            output_dtypes=tuple(_dtype_name(t.dtype) for t in outputs),
            flops=flops,
            bytes_read=bytes_read,
            bytes_written=written,
            covered=covered,
            flops_causal_halved=halved,
            storages_created=resized + tuple(created),
            storages_freed=freed,
            collective=collective,
            # a module's forward running while autograd runs a backward: a checkpoint's
            # recomputation (backward ops are attributed through autograd nodes, no stack)
            recomputed=phase == "backward" and (bool(self._stack) or _recomputing > 0),
            inner_loop=loop,
            variant=kernel_variant(kwargs),
        ))

    def _read(self, tensor: torch.Tensor, read: dict[int, int]) -> None:
        storage = _storage(tensor)
        if storage is None:
            return
        self._storage_id(storage, None)
        address = storage._cdata
        amount = min(_view_bytes(tensor), int(storage.nbytes()))
        if amount > read.get(address, 0):
            read[address] = amount

    @staticmethod
    def _device_of(tensors: Sequence[torch.Tensor]) -> str | None:
        for tensor in tensors:
            kind = tensor.device.type
            if type(tensor).__name__ == "FakeTensor":
                kind = f"fake:{kind}"
            return kind
        return None


def trace(step: Callable[..., Any], *args: Any, **kwargs: Any) -> Trace:
    """Run ``step(*args, **kwargs)`` once and return the trace of every aten op it ran.

    >>> import torch
    >>> layer = torch.nn.Linear(8, 4, bias=False, device="meta")
    >>> result = trace(lambda x: layer(x).sum().backward(), torch.ones(2, 8, device="meta"))
    >>> sum(r.flops for r in result.records if r.category == "matmul")  # forward + weight grad
    256
    """
    recorder = Recorder()
    try:
        with recorder:
            step(*args, **kwargs)
    except TensorLedgerError:
        raise
    except Exception as error:  # a step that fails is reported as one, not as a traceback
        raise TraceError(f"the traced step raised {type(error).__name__}: {error}") from error
    return recorder.trace


def kernel_variant(kwargs: dict[str, Any] | None) -> str:
    """The kernel a non-tensor argument chose (``OpRecord.variant``): GELU's ``approximate``
    where it is not the default, else ``""``.

    >>> kernel_variant({"approximate": "tanh"}), kernel_variant({"approximate": "none"})
    ('tanh', '')
    >>> kernel_variant(None), kernel_variant({"dim": 1})
    ('', '')
    """
    chosen = (kwargs or {}).get("approximate")
    return chosen if isinstance(chosen, str) and chosen != "none" else ""
