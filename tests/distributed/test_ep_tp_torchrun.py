"""EP × TP on 4 real gloo ranks computes what the whole model computes (issue 38; ETP = 1):
the logits of each rank's tokens, and the local experts' gradients under both ep ranks' losses
(tests/distributed/ep_tp_torchrun.py)."""

from __future__ import annotations

from pathlib import Path

from tests.distributed.ep_tp_torchrun import NAME
from tests.distributed.launch import torchrun

SCRIPT = Path(__file__).with_name("ep_tp_torchrun.py")


def test_ep_beside_tp_matches_the_whole_model(tmp_path: Path) -> None:
    for record in torchrun(SCRIPT, tmp_path, 4, [NAME])[NAME]:
        assert record["grad_scale"] > 1e-6  # the experts learn something
        assert record["logits"] < 1e-4 and record["expert_grads"] < 1e-6, record
