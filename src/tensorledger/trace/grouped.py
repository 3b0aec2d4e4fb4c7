"""Grouped matrix products on fake and meta tensors in the dtypes a GPU runs them in.

``aten._grouped_mm`` is the kernel of transformers' default MoE experts (``grouped_mm``).
PyTorch's meta function for it accepts bf16 operands only, while the CUDA kernel accepts bf16,
fp16 and fp32 (``_grouped_mm_validate_inputs``, ``aten/src/ATen/native/GroupedMMUtils.h``):
bf16 goes to the grouped CUTLASS kernel on sm90/sm100, anything else to a loop of one ``mm``
per group after copying ``offs`` to the host (``_grouped_mm_fallback``).  The output has
``mat_a``'s dtype.  So on fake tensors every fp32 recipe failed where an H100 runs.

What an H100 runs, recipe by recipe, with transformers 5's ``grouped_mm`` experts (they call
``grouped_mm(input.to(weight.dtype), weight, offs=...)`` whenever the GPU is sm80 or newer):

=================  ===============================================================
recipe             the experts' grouped products
=================  ===============================================================
fp32               fp32: the per-group ``mm`` fallback
mixed-bf16         fp32 as well: autocast has no rule for ``_grouped_mm`` (neither
                   ``AutocastCUDA`` nor ``AutocastCPU``; pytorch/pytorch#174763), and
                   transformers casts the input to the fp32 weights, so the experts
                   run in fp32 while the rest of the model runs in bf16
bf16, bf16-master, bf16-fp32-states
                   bf16: the grouped kernel
=================  ===============================================================

:class:`GroupedMMMode` gives fake and meta tensors the CUDA kernel's dtype rule, so the traced
program is that one: an fp32 ``_grouped_mm`` is recorded as one fp32 op (its FLOPs from
:func:`tensorledger.costs.matmul.grouped_mm_flops`), as a dispatch mode sees it on the GPU
(the fallback's per-group ``mm`` calls run inside the kernel, below the modes).  It checks
what CUDA checks (dims, contraction, ``offs`` present iff an operand is 2-D, 1-D int32
``offs``, no bias, the output dtype, 16-byte aligned strides) and makes the output CUDA's
shape; bf16 calls, real tensors and subclasses (DTensor) go on to PyTorch unchanged.

It must sit *below* the recorder's dispatch mode (entered before it), so that the recorder
sees ``aten._grouped_mm`` and not the allocation this mode answers with, and *above*
``FakeTensorMode`` (entered after it), so that it answers before fake tensors' meta function
refuses; the warm-up step needs it too.  Entered beside ``FakeTensorMode`` where a step is
placed, it is both:

>>> import torch
>>> from torch._subclasses.fake_tensor import FakeTensorMode
>>> with FakeTensorMode(), GroupedMMMode():
...     x, w = torch.empty(24, 8), torch.empty(4, 8, 12)
...     offs = torch.empty(4, dtype=torch.int32)
...     out = torch._grouped_mm(x, w, offs=offs)
>>> tuple(out.shape), out.dtype
((24, 12), torch.float32)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["GroupedMMMode", "grouped_mm_output"]

_GROUPED_MM = torch.ops.aten._grouped_mm.default
#: The operand dtypes CUDA's ``_grouped_mm`` takes; torch's meta function takes only bf16.
_CUDA_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def _check_strides(name: str, mat: torch.Tensor) -> None:
    # Row- or column-major in the last two axes, the leading stride a multiple of 16 bytes
    # (the kernel's TMA loads; the fallback checks it too).
    size, stride = mat.shape, mat.stride()
    alignment = 16 // mat.element_size()
    if stride[-2] == 1 and stride[-1] >= max(1, size[-2]):
        lead = stride[-1]
    elif stride[-1] == 1 and stride[-2] >= max(1, size[-1]):
        lead = stride[-2]
    else:
        raise RuntimeError(f"Invalid strides/sizes, got {list(stride)} for strides and "
                           f"{list(size)} for sizes of {name}")
    _check(lead % alignment == 0, f"{name}: strides should be multiple of 16 bytes")


def grouped_mm_output(mat_a: torch.Tensor, mat_b: torch.Tensor,
                      offs: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The output ``aten._grouped_mm`` would return on CUDA for these operands, allocated
    (uninitialised) on their device, after CUDA's checks; a ``RuntimeError`` where CUDA
    raises one.  Shapes: (ΣM, K)·(G, K, N) → (ΣM, N); (M, ΣK)·(ΣK, N) → (G, M, N);
    (G, M, K)·(K, ΣN) → (M, ΣN); (G, M, K)·(G, K, N) → (G, M, N)."""
    _check(mat_a.dtype in _CUDA_DTYPES and mat_b.dtype in _CUDA_DTYPES,
           f"Expected mat_a and mat_b to be Float32, BFloat16 or Float16, got {mat_a.dtype} "
           f"and {mat_b.dtype}")
    # validated one by one, but every kernel behind it (the grouped one, mm) wants one dtype
    _check(mat_a.dtype == mat_b.dtype, "expected mat1 and mat2 to have the same dtype, but "
           f"got: {mat_a.dtype} != {mat_b.dtype}")
    _check(mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3), "mat_a and mat_b have to be 2 or 3d")
    a_2d, b_2d = mat_a.dim() == 2, mat_b.dim() == 2
    if not (a_2d and b_2d):
        _check(mat_a.shape[-1] == mat_b.shape[-2],
               "contraction dimension of mat_a and mat_b must match")
    _check_strides("mat_a", mat_a)
    _check_strides("mat_b", mat_b)
    _check((offs is not None) == (a_2d or b_2d),
           "Have to provide offsets if there is a 2d matrix, or no offset if both are 3d")
    if offs is not None:
        _check(offs.dim() == 1 and offs.dtype == torch.int32, "Offsets have to be 1D int32")
    _check(bias is None, "Bias not supported yet")
    dtype = out_dtype or mat_a.dtype
    _check(dtype == mat_a.dtype, "Grouped gemm output dtype must match `mat_a` dtype")
    groups = 0 if offs is None else offs.shape[0]
    size: list[int]
    if a_2d and b_2d:
        size = [groups, mat_a.shape[0], mat_b.shape[1]]
    elif a_2d:
        _check(groups == mat_b.shape[0], "matrix batch sizes have to match")
        size = [mat_a.shape[0], mat_b.shape[-1]]
    elif b_2d:
        _check(groups == mat_a.shape[0], "matrix batch sizes have to match")
        size = [mat_a.shape[1], mat_b.shape[1]]
    else:
        _check(mat_a.shape[0] == mat_b.shape[0], "batched dimension has to match")
        size = [mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1]]
    if torch.version.cuda is None:  # as torch's meta function: contiguous off CUDA builds
        return torch.empty(size, dtype=dtype, device=mat_a.device)
    # CUDA pads the output's rows to 16 bytes (TMA stores)
    alignment = 16 // dtype.itemsize
    padded = -(-size[-1] // alignment) * alignment
    stride = [padded, 1] if len(size) == 2 else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


def _without_data(tensor: Any) -> bool:
    return isinstance(tensor, FakeTensor) or (isinstance(tensor, torch.Tensor)
                                              and tensor.is_meta)


class GroupedMMMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Answer ``aten._grouped_mm`` on fake and meta operands of a dtype torch's meta function
    refuses (fp32, fp16) with the output CUDA's kernel makes; every other op, and bf16,
    real or subclass operands, go on unchanged."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is _GROUPED_MM and _answers(types, args):
            return grouped_mm_output(*args, **kwargs)
        return func(*args, **kwargs)


def _answers(types: Any, args: Sequence[Any]) -> bool:
    mat_a, mat_b = args[0], args[1]
    plain = all(t in (torch.Tensor, FakeTensor) for t in types)
    return (plain and _without_data(mat_a) and _without_data(mat_b)
            and not (mat_a.dtype == mat_b.dtype == torch.bfloat16))
