"""Expert parallelism, fake and real (issue 38, item 5): real gloo ranks (CPU) under
``torchrun --nproc-per-node 2`` (``--ep 2``) and ``4`` (``--ep 2 --fsdp 2``) running a tiny
Hugging Face Mixtral with balanced routing forced on every rank issue, on each rank, the same
collectives — op, kind, group size, bytes, phase, order: the experts' all-to-alls with their
split sizes, DDP's all-reduce or FSDP2's all-gathers and reduce-scatters — run the same matmul
FLOPs, reach the same live-memory peak (FSDP2's storage resizes told to both recorders:
:func:`~tensorledger.workload.parallel.fsdp_storage_events`) and hold the same parameter,
gradient and optimizer-state bytes as rank 0 of the fake process group predicts.  (The op
streams differ in bookkeeping only: a real group wraps each autograd all-to-all's result,
DDP's own bucket copies and the fake hook's differ, the fake rank builds the counts it would
receive from its own, and gloo's reduce-scatter cuts its chunk out of its own copy: see
``ep_torchrun._gloo_recorder``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tensorledger.workload.layout import Layout
from tensorledger.workload.parallel import trace_parallel_step
from tests.distributed.ep_torchrun import (
    CONFIG,
    EP_LAYOUTS,
    TOKENS_SHAPE,
    loss,
    mixtral,
    routed,
    summary,
)
from tests.distributed.launch import torchrun

pytest.importorskip("transformers")

SCRIPT = Path(__file__).with_name("ep_torchrun.py")
F32 = 4


def _launch(out: Path, ranks: int) -> dict[str, list[dict[str, Any]]]:
    return torchrun(SCRIPT, out, ranks, EP_LAYOUTS[ranks])


def _fake(layout: Layout) -> dict[str, Any]:
    from tensorledger.trace.grouped import GroupedMMMode

    def modes() -> Any:
        from contextlib import ExitStack

        stack = ExitStack()
        stack.enter_context(GroupedMMMode())
        stack.enter_context(routed())
        return stack

    step = trace_parallel_step(mixtral, lambda: torch.zeros(TOKENS_SHAPE, dtype=torch.long),
                               layout, loss=loss, modes=modes)
    return summary(step.trace) | {
        "params_per_rank": step.params_per_rank,
        "param_bytes_per_rank": step.param_bytes_per_rank,
        "grad_bytes": step.grad_bytes_per_rank,
        "optimizer_state_bytes": step.optimizer_state_bytes_per_rank}


@pytest.mark.parametrize("ranks", sorted(EP_LAYOUTS))
def test_real_ep_ranks_match_the_fake_prediction(tmp_path: Path, ranks: int) -> None:
    real = _launch(tmp_path, ranks)
    for name, fields in EP_LAYOUTS[ranks].items():
        layout = Layout(**fields)
        predicted = _fake(layout)
        assert predicted["uncovered"] == {}
        # the live-memory peak too: with FSDP2 both recorders are told of its storage
        # resizes (fsdp_storage_events), which no op shows — untold, the fake rank held every
        # gathered parameter for the whole step (469,660 bytes) and the real one more
        # (595,900); told, both 417,404
        assert real[name][0] == predicted, name
        # by hand, per layer: 24 tokens × top-2 = 48 token-slots of hidden 40 in fp32, 24
        # bound for each ep rank (balanced: 12 to each of 4 experts, 2 a rank):
        # dispatch and combine each send 24 · 40 · 4 = 3,840 bytes of a 7,680-byte buffer
        slots = TOKENS_SHAPE[0] * TOKENS_SHAPE[1] * CONFIG["num_experts_per_tok"]
        buffer = slots * CONFIG["hidden_size"] * F32
        sent = buffer * (2 - 1) // 2
        tokens = [c for c in predicted["collectives"]
                  if c[2] == "all-to-all" and c[4] == buffer]
        # 2 layers × (dispatch, combine) forward, and their gradients' in backward
        assert [c[0] for c in tokens] == ["forward"] * 4 + ["backward"] * 4
        assert {c[5] for c in tokens} == {c[6] for c in tokens} == {sent}
        # the expert counts: 4 int64 per layer, 2 to each rank
        counts = [c for c in predicted["collectives"] if c[2] == "all-to-all" and c[4] == 32]
        assert [c[5] for c in counts] == [16, 16]
