"""A mixture of experts' routing decided by :class:`~.routing.Routing`, on any tensors.

:class:`RoutedMode` is a dispatch mode entered just above the device's own (FakeTensorMode for
``fake``), below the trace recorder, so the recorder sees every op as the model issued it:

- ``aten.topk`` of a router (its last dimension the model's E experts, k its experts per
  token) returns the routing's indices — token-slots per expert as :meth:`Routing.counts`
  says — and the scores gathered at them, on real tensors as on fake ones, so a real CPU step
  and a fake trace route alike;
- on fake or meta tensors every topk's indices, and what is computed from indices alone (one
  hot masks, ``sort``, ``histc``, ``bincount``, ``cumsum``, ``nonzero``/``where``, ``//``,
  ``.tolist()``, ``bool(...)``), carry a real CPU *shadow*: the op runs on the shadows too, so
  an op whose output size or value depends on the data (``nonzero``, ``.item()``) is answered
  from them instead of failing.  A shadow is kept for integer and boolean tensors made from
  nothing (``arange``) and for anything computed from shadows alone, never for activations.

The assignment of token-slots to tokens: the expert ids, each repeated its count times, fill
the tokens × k matrix column by column; an expert's run is at most ``tokens`` long, so it
never meets the same token twice.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakTensorKeyDictionary

from tensorledger.errors import TraceError
from tensorledger.workload.routing import BALANCED, Routing

__all__ = ["RoutedMode", "assignment", "known_values"]

aten = torch.ops.aten

#: The most elements a shadow may hold: a one-hot mask of a million tokens over 64 experts.
_MAX_SHADOW = 1 << 27


def assignment(counts: tuple[int, ...], tokens: int, chosen: int) -> torch.Tensor:
    """A tokens × chosen matrix of expert ids in which expert e appears ``counts[e]`` times,
    at most once a row.

    >>> assignment((3, 1, 2), tokens=3, chosen=2).tolist()
    [[0, 1], [0, 2], [0, 2]]
    """
    ids = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    return ids.reshape(chosen, tokens).t().contiguous()


class RoutedMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Route the ``chosen`` of ``experts`` experts of every router as ``routing`` says."""

    def __init__(self, experts: int, chosen: int, routing: Routing = BALANCED) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.experts, self.chosen, self.routing = experts, chosen, routing
        self.shadows: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.routers = 0  # router top-ks routed so far

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is aten.topk.default and args[0] not in self.shadows:
            return self._topk(*args, **kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if not tensors:  # made from nothing: an index (arange) is shadowed, no activation
            out = func(*args, **kwargs)
            if (isinstance(out, torch.Tensor) and _without_values(out)
                    and not out.dtype.is_floating_point and out.numel() <= _MAX_SHADOW):
                self._attach(out, self._on_shadows(func, args, kwargs))
            return out
        shadowed = [t in self.shadows for t in tensors] if len(self.shadows) else []
        if not any(shadowed):  # an activation's op: most of a step
            return func(*args, **kwargs)
        if not all(shadowed):
            for t in self._mutated(func, args, kwargs):
                self.shadows.pop(t, None)  # type: ignore[no-untyped-call]  # written from what no shadow holds
            return func(*args, **kwargs)
        real = self._on_shadows(func, args, kwargs)
        if not isinstance(real, torch.Tensor | tuple | list):
            return real  # a Python number: .item(), .tolist(), bool()
        try:
            out = func(*args, **kwargs)
        except Exception as error:  # a data-dependent size: nonzero, where, masked_select
            if not _data_dependent(error):
                raise
            device = tensors[0].device
            out = tree_map(lambda r: _like(r, device), real)
        self._attach(out, real)
        return out

    def _topk(self, source: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
              sorted: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        width = source.shape[dim] if source.dim() else 1
        router = width == self.experts and k == self.chosen
        shadowing = _without_values(source)
        if (not router and not shadowing) or k > width:  # torch's own answer, or its refusal
            return aten.topk.default(source, k, dim, largest, sorted)  # type: ignore[no-any-return]
        moved = source.movedim(dim, -1)
        tokens = moved.numel() // max(width, 1)
        routing = self.routing if router else BALANCED
        counts = routing.counts(tokens, width, k)
        with _disable_current_modes():  # real CPU indices, whatever the modes below
            ids = assignment(counts, tokens, k).reshape(*moved.shape[:-1], k).movedim(-1, dim)
        if router:
            self.routers += 1
        if shadowing:
            index = _like(ids, source.device)
            self.shadows[index] = ids
        else:
            index = ids.to(source.device)
        return aten.gather.default(source, dim, index), index

    def _on_shadows(self, func: Any, args: Any, kwargs: Any) -> Any:
        def real(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return self.shadows[x]
            if isinstance(x, torch.device):
                return torch.device("cpu")
            return x

        with _disable_current_modes():
            try:
                return func(*tree_map(real, args), **tree_map(real, kwargs))
            except Exception as error:
                raise TraceError(f"{func} on the routing's indices failed on CPU: "
                                 f"{type(error).__name__}: {str(error).splitlines()[0]}"
                                 ) from None

    def _attach(self, out: Any, real: Any) -> None:
        outs, _ = tree_flatten(out)
        reals, _ = tree_flatten(real)
        for o, r in zip(outs, reals, strict=False):
            if (isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                    and o.shape == r.shape and r.numel() <= _MAX_SHADOW):
                self.shadows[o] = r

    @staticmethod
    def _mutated(func: Any, args: Any, kwargs: Any) -> list[torch.Tensor]:
        schema = func._schema
        written: list[torch.Tensor] = []
        for i, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(argument.name)
            if isinstance(value, torch.Tensor):
                written.append(value)
        return written


def known_values(tensor: torch.Tensor) -> list[Any] | None:
    """The values of ``tensor`` as its shadow holds them, read at once, if a routed mode is
    on and shadows it; else None.  (``.tolist()`` of a fake tensor reads it element by element,
    each a dispatch through every mode: a quarter of a second for 256 experts' counts.)

    >>> from torch._subclasses.fake_tensor import FakeTensorMode
    >>> with FakeTensorMode(), RoutedMode(4, 2):
    ...     counts = torch.bincount(torch.topk(torch.zeros(6, 4), 2).indices.flatten(),
    ...                             minlength=4)
    ...     known_values(counts), known_values(torch.zeros(2))
    ([3, 3, 3, 3], None)
    """
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    for mode in _get_current_dispatch_mode_stack():
        if isinstance(mode, RoutedMode):
            real = mode.shadows.get(tensor)  # type: ignore[no-untyped-call]
            if real is not None:
                return cast(list[Any], real.tolist())
    return None


def _without_values(t: torch.Tensor) -> bool:
    """A fake or meta tensor: its values are not there to read."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or t.is_meta


def _like(real: Any, device: torch.device) -> Any:
    """A tensor of the device below (fake or meta) with ``real``'s size, strides and dtype."""
    if not isinstance(real, torch.Tensor):
        return real
    return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=device)


def _data_dependent(error: Exception) -> bool:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    return isinstance(error, DynamicOutputShapeException | DataDependentOutputException
                      | NotImplementedError)
