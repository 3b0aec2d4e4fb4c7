"""Hugging Face attention masks on fake tensors: the branch a real run takes, and what it assumed.

transformers decides whether SDPA may run with ``is_causal=True`` instead of an explicit 4-D
mask by reading the padding mask's values (``masking_utils._ignore_causal_mask_sdpa``: no
padded token → no mask).  A fake tensor has no values, so transformers takes the tracing branch
and builds the full mask: a fake run records the mask's ops and memory, and on a GPU target the
memory-efficient kernel in place of flash, where a real run of the same all-ones mask builds no
mask at all.

:func:`padding_as_given` decides that question for fake padding masks the way a real run of a
mask without padding does, and notes the assumption so the output can say it.  A mask with real
padding is a real run's to measure (``--device cpu``): its values are what decide.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["NO_PACKING_ASSUMED", "NO_PADDING_ASSUMED", "padding_as_given"]

#: The note the output shows when the assumption was made.
NO_PADDING_ASSUMED = ("attention mask: a padding mask on fake tensors (no values) was taken "
                      "as holding no padding, as transformers decides for an all-ones mask: "
                      "is_causal, no 4-D mask built; run --device cpu for a mask with padding")

#: The note when fake position ids were taken as one sequence a row (nothing packed).
NO_PACKING_ASSUMED = ("position ids: fake ones (no values) were taken as one sequence a row, "
                      "nothing packed, as transformers finds for the ids it makes itself: no "
                      "4-D mask built")


def _is_fake(tensor: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor) or getattr(tensor, "is_meta", False)


@contextmanager
def padding_as_given(notes: list[str]) -> Iterator[None]:
    """Inside, transformers' SDPA mask decision treats a fake padding mask as one without
    padding (appending :data:`NO_PADDING_ASSUMED` to ``notes`` once when it does).  Nothing is
    imported or changed when transformers is not installed."""
    if importlib.util.find_spec("transformers") is None:
        yield
        return
    import transformers.masking_utils

    masking: Any = transformers.masking_utils
    original: Callable[..., bool] | None = getattr(masking, "_ignore_causal_mask_sdpa", None)
    if original is None:  # another transformers: nothing to decide
        yield
        return

    def decide(padding_mask: Any, q_length: int, kv_length: int, *args: Any,
               **kwargs: Any) -> bool:
        if padding_mask is None or not _is_fake(padding_mask):
            return bool(original(padding_mask, q_length, kv_length, *args, **kwargs))
        if NO_PADDING_ASSUMED not in notes:
            notes.append(NO_PADDING_ASSUMED)
        if (q_length == 1 or kv_length == q_length) and padding_mask.shape[-1] <= kv_length:
            # the ops a real run spends on the question (its sum of the mask against the
            # mask's size; only reading the answer back is left out)
            masking.fast_all(padding_mask)
        return bool(original(None, q_length, kv_length, *args, **kwargs))

    packed: Callable[..., Any] | None = getattr(masking, "find_packed_sequence_indices", None)

    def unpacked(position_ids: Any) -> Any:
        """Without a cache (training with checkpointing, ``use_cache=False``) transformers looks
        for packed sequences in the position ids by their values; fake ones have none, and it
        would build a 4-D mask (attention off flash).  A real run of the ids it makes itself
        (``arange``) finds one sequence a row and builds no mask: so here too, the ops it
        spends on the question recorded."""
        assert packed is not None
        if not _is_fake(position_ids):
            return packed(position_ids)
        if NO_PACKING_ASSUMED not in notes:
            notes.append(NO_PACKING_ASSUMED)
        found = packed(position_ids)  # the tracing branch: the same ops, the mask returned
        if found is not None:
            (found[:, -1] == 0).all()  # what a real run reads back to decide
        return None

    masking._ignore_causal_mask_sdpa = decide
    if packed is not None:
        masking.find_packed_sequence_indices = unpacked
    try:
        yield
    finally:
        masking._ignore_causal_mask_sdpa = original
        if packed is not None:
            masking.find_packed_sequence_indices = packed
