"""The reference experts under expert parallelism compute what they compute whole (issue 38):
2 real gloo ranks, each with its own tokens and its real router's uneven routing, dropless and
with a capacity; the slots regrouped by expert after the dispatch and put back before the
combine (:mod:`tensorledger.workload.expert_parallel`)."""

from __future__ import annotations

from pathlib import Path

from tests.distributed.ep_reference_torchrun import NAMES
from tests.distributed.launch import torchrun

SCRIPT = Path(__file__).with_name("ep_reference_torchrun.py")


def test_expert_parallel_reference_moe_matches_the_whole_layer(tmp_path: Path) -> None:
    ranks = torchrun(SCRIPT, tmp_path, 2, NAMES)
    for name in NAMES:
        for record in ranks[name]:
            assert record["local_experts"] == 3  # 6 experts over 2 ranks
            assert record["scale"] > 0.01, name  # a layer that computes something
            assert record["output"] < 1e-5 and record["input_grad"] < 1e-5, (name, record)
