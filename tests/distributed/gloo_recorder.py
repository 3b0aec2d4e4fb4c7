"""The recorder the real-rank scripts of this folder record a step with over gloo."""

from __future__ import annotations

import time
from typing import Any

from tensorledger.trace import Recorder

__all__ = ["gloo_recorder"]


#: Ops at which the main thread has waited for a collective (FSDP2's ``work.wait()`` shows
#: no op; its copy-out follows it)
_COMPLETIONS = frozenset({"_c10d_functional.wait_tensor.default",
                          "fsdp.split_with_sizes_copy.default"})
_SETTLE_OPS = 4
_SETTLE_S = 0.01


def gloo_recorder() -> Recorder:
    """A recorder for real gloo ranks: gloo's reduce-scatter reduces a copy of its input that
    it makes inside the collective's kernel, where no dispatch mode sees it, and when it
    completes cuts its own chunk out of it (``split`` + ``copy_``, which the mode does see).
    Met first there, that copy would be booked as alive before the step (live from its first
    op: 126,240 bytes over the five FSDP groups of ``--ep 2 --fsdp 2``).  NCCL reduces in
    place, and the fake rank predicts no copy: it is left out (booked at the reduce-scatter
    instead, it alone would make the peak of the tiny preset's FSDP step, 32,768 bytes over
    the prediction: block 1's gradients, reduced while the other block's are live).

    Gloo's worker thread holds a collective's tensors until it lets go of the finished work,
    a moment after the main thread's wait returns; when it is the last holder, the storage is
    freed then, some ops after the main thread let go (rank 0's peak 7,488 or 12,672 bytes
    over the fake rank's in two launches of six, without what follows).  The main thread
    sleeps ``_SETTLE_S`` after each of the ``_SETTLE_OPS`` ops that follow a collective or a
    wait, so that the worker has let go before the next op is recorded, as the fake rank's
    group, which holds nothing, does."""
    class GlooRecorder(Recorder):
        op = ""

        def _record(self, info: Any, *args: Any) -> None:
            self.op = info.name
            super()._record(info, *args)
            if any(r.collective is not None or r.op in _COMPLETIONS
                   for r in self.records[-_SETTLE_OPS:]):
                time.sleep(_SETTLE_S)

        def _storage_id(self, storage: Any, created: Any) -> tuple[int, bool]:
            number, new = super()._storage_id(storage, created)
            last = self.records[-1] if self.records else None
            if (new and created is None and self.op == "aten.split.Tensor"
                    and last is not None and last.op == "c10d._reduce_scatter_base_.default"):
                self._preexisting.pop()  # gloo's, not the program's: its free is ignored
            return number, new

    return GlooRecorder()
