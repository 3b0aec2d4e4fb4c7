"""EP × TP × ETP on 4 real gloo ranks computes what the whole model computes (issue 38;
torchtitan's ETP = TP): the logits of each rank's tokens, each rank's slice of its local
experts' gradients under both ep ranks' losses, and the router gradient upstream of the
experts' input all-reduce, dropless and with a capacity (tests/distributed/etp_torchrun.py)."""

from __future__ import annotations

from pathlib import Path

from tests.distributed.etp_torchrun import NAMES
from tests.distributed.launch import torchrun

SCRIPT = Path(__file__).with_name("etp_torchrun.py")


def test_etp_beside_ep_and_tp_matches_the_whole_model(tmp_path: Path) -> None:
    found = torchrun(SCRIPT, tmp_path, 4, NAMES)
    for record in (record for name in NAMES for record in found[name]):
        assert record["grad_scale"] > 1e-6 and record["router_scale"] > 1e-6, record
        assert record["logits"] < 1e-5, record
        assert record["expert_grads"] < 1e-6 and record["router_grad"] < 1e-6, record
