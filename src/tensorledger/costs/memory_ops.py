"""Ops that move or allocate memory without arithmetic: views, copies and casts, fills,
allocations and embedding lookups.

Views and metadata ops move no bytes.  A copy or a cast costs no FLOP and moves its input and
output.  An allocation (``empty``) writes nothing; a fill writes its output.  An embedding
lookup reads only the rows it gathers (plus the indices), not the whole table; its backward
adds each gradient row into the table (one add per element).  Collectives are in
:mod:`tensorledger.costs.collectives`.

>>> lookup("aten.view").category, lookup("aten.view").moves
('view', 'none')
>>> lookup("aten._to_copy").category
'copy'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorledger.costs.registry import lookup, numel, register  # noqa: F401 (doctest)

__all__ = ["COPY_OPS", "FILL_OPS", "VIEW_OPS"]

VIEW_OPS = ("view", "_unsafe_view", "reshape", "_reshape_alias", "alias", "detach", "t",
            "transpose", "permute", "expand", "unsqueeze", "squeeze", "slice", "select",
            "split", "split_with_sizes", "chunk", "unbind", "as_strided", "unflatten",
            "flatten", "narrow", "diagonal", "unfold", "view_as_real", "view_as_complex",
            "lift_fresh", "_local_scalar_dense", "numpy_T", "movedim", "expand_as", "view_as",
            "real", "imag", "conj", "_conj", "_neg_view", "resolve_conj", "resolve_neg",
            "is_same_size", "_has_compatible_shallow_copy_type")
COPY_OPS = ("_to_copy", "copy", "clone", "contiguous", "cat", "stack", "index",
            "index_select", "gather", "repeat", "repeat_interleave", "constant_pad_nd",
            "slice_backward",
            "select_backward", "slice_scatter", "select_scatter", "as_strided_scatter",
            "_foreach_copy", "masked_select", "flip", "roll", "expand_copy", "permute_copy",
            "view_copy", "_unsafe_index", "index_put", "_index_put_impl", "scatter",
            "masked_scatter", "lift", "_pin_memory", "to")
FILL_OPS = ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill", "zero",
            "_foreach_zero", "scalar_tensor", "arange", "new_zeros", "new_ones", "new_full",
            "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm",
            "normal", "uniform", "random", "exponential", "linspace", "eye", "tensor")
ALLOCATION_OPS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "empty_permuted", "resize_")


def _zero(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return 0


for _name in VIEW_OPS:
    register(f"aten.{_name}", category="view", moves="none")(_zero)
for _name in COPY_OPS:
    register(f"aten.{_name}", category="copy",
             write_only_self=_name in ("copy", "_foreach_copy"))(_zero)
for _name in FILL_OPS:
    register(f"aten.{_name}", category="copy", moves="write")(_zero)
for _name in ALLOCATION_OPS:
    register(f"aten.{_name}", category="other", moves="none")(_zero)


def _embedding_read(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    weight, indices = args[0], args[1]
    return int(numel(out) * weight.element_size() + numel(indices) * indices.element_size())


register("aten.embedding", category="embedding", bytes_read=_embedding_read)(_zero)


def _embedding_backward(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    return numel(args[0])  # one add of each gradient row element into the table


register("aten.embedding_dense_backward", "aten.embedding_backward",
         "aten._embedding_bag_backward", category="embedding")(_embedding_backward)


def _scatter_add(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    source = args[3] if len(args) > 3 else args[-1]
    return numel(source) if hasattr(source, "shape") else 0


register("aten.scatter_add", "aten.index_add", "aten.index_put_with_accumulate",
         category="elementwise")(_scatter_add)
