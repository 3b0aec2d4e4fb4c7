"""The cluster's step, from one traced rank: the pipeline bubble, the exposed communication,
tokens/s and MFU of the whole cluster (``roofline`` and ``account`` show the same figures).

A rank of a layout is traced with the collectives it issues, priced on the links they cross
(``roofline.collectives``); every rank is taken as busy as the traced one.  The step of the
cluster is that rank's expected step stretched by the pipeline bubble: serial (communication
after compute), or with each phase's communication hidden under its compute (the ideal
overlap); the truth lies between.  MFU counts the FLOPs that ran on every rank (with
checkpointing, the recomputed forward too) over the cluster's step and its dense peak.

>>> c = ClusterStep(ranks=8, layout="DDP × 8", data_parallel=8, tokens=1000, rank_time_s=0.1,
...                 overlapped_time_s=0.08, communication_s=0.03, pipeline_bubble=0.0,
...                 rank_flops=5e13, peak_flop_per_s=1e15)
>>> round(c.step_s, 3), round(c.exposed_communication_s, 3), c.tokens_per_s
(0.1, 0.02, (80000.0, 100000.0))
>>> round(c.mfu, 3)  # 5e13 / (1e15 · 0.1)
0.5
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.roofline.model import RooflinePrediction
from tensorledger.workload import Workload
from tensorledger.workload.schedule_order import OrderTimeline

__all__ = ["ClusterStep", "cluster_step", "pipeline_bubble_of"]


@dataclass(frozen=True)
class ClusterStep:
    """The cluster's step as its traced rank sets it."""

    ranks: int  # devices of the layout (1: one device)
    layout: str  # the layout in words ("FSDP × 8, TP × 2")
    data_parallel: int  # ranks that each run their own batch
    tokens: int  # of one data-parallel rank's step
    rank_time_s: float  # the traced rank's expected step, serial
    overlapped_time_s: float  # the same, each phase's communication hidden under its compute
    communication_s: float  # the rank's collectives on the links
    pipeline_bubble: float  # idle share of a pipeline's step, (p − 1)/(v·m + p − 1)
    rank_flops: float  # FLOPs one rank runs a step
    peak_flop_per_s: float  # the dense peak MFU is taken against
    recomputed: bool = False  # checkpointed: the FLOPs that ran include a recomputed forward
    recomputed_flops: float = 0.0  # of rank_flops, the recomputed forward's
    # where the bubble comes from: the schedule's own action lists (napkin's formula in
    # hand-made steps)
    bubble_source: str = "(p − 1)/(v·m + p − 1)"
    # the traced pipeline rank's most micro-batches in flight, all its stages together
    in_flight: int | None = None

    @property
    def stretch(self) -> float:
        """How much longer the step is than the rank's busy time: 1/(1 − bubble)."""
        return 1.0 / (1.0 - self.pipeline_bubble)

    @property
    def step_s(self) -> float:
        """The cluster's step, serial, the bubble included."""
        return self.rank_time_s * self.stretch

    @property
    def overlapped_step_s(self) -> float:
        """The cluster's step with communication ideally overlapped, the bubble included."""
        return self.overlapped_time_s * self.stretch

    @property
    def exposed_communication_s(self) -> float:
        """The most communication the step can leave exposed: serial less ideally overlapped."""
        return self.rank_time_s - self.overlapped_time_s

    @property
    def tokens_per_s(self) -> tuple[float, float]:
        """The cluster's tokens/s, (serial, overlapped); 0 for a step of no time."""
        tokens = self.data_parallel * self.tokens
        return (tokens / self.step_s if self.step_s > 0 else 0.0,
                tokens / self.overlapped_step_s if self.overlapped_step_s > 0 else 0.0)

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: every rank's model FLOPs (a recomputed forward left out)
        over the cluster's serial step and the peak of every rank."""
        denominator = self.peak_flop_per_s * self.step_s
        return (self.rank_flops - self.recomputed_flops) / denominator if denominator > 0 \
            else 0.0

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: :attr:`mfu` with every FLOP that ran, a recomputed
        forward included (equal to it when nothing is recomputed)."""
        denominator = self.peak_flop_per_s * self.step_s
        return self.rank_flops / denominator if denominator > 0 else 0.0


def pipeline_bubble_of(work: Workload) -> float:
    """The pipeline bubble of ``work``'s layout (0 without a pipeline): its schedule's own
    action lists replayed (:func:`~tensorledger.workload.schedule_order.order_timeline`)."""
    layout = work.layout
    if layout.pp == 1:
        return 0.0
    from tensorledger.workload.pipeline import action_lists
    from tensorledger.workload.schedule_order import order_timeline

    order = action_lists(layout.schedule, layout.pp, layout.microbatches, layout.chunks)
    return order_timeline(order).bubble_fraction


def cluster_step(work: Workload, prediction: RooflinePrediction, peak_flop_per_s: float,
                 count: int | None = None, pipeline: OrderTimeline | None = None
                 ) -> ClusterStep:
    """The cluster of ``work``'s layout, or of ``count`` devices each running the traced step
    on its own batch with nothing exchanged (``count`` given for a one-device trace).
    ``pipeline`` is the traced schedule's own timeline: its bubble stretches the step."""
    layout = work.layout
    ranks = layout.count if count is None or not layout.single else count
    return ClusterStep(
        ranks=ranks, layout=layout.describe() if not layout.single else (
            f"{ranks} independent replicas" if ranks > 1 else "one device"),
        data_parallel=layout.data_parallel if count is None or not layout.single else ranks,
        tokens=work.tokens, rank_time_s=prediction.time_s,
        overlapped_time_s=prediction.overlapped_time_s,
        communication_s=prediction.communication_s,
        pipeline_bubble=(pipeline_bubble_of(work) if pipeline is None
                         else pipeline.bubble_fraction),
        bubble_source=f"{work.layout.schedule}'s action lists",
        in_flight=None if pipeline is None else pipeline.rank_in_flight[0],
        rank_flops=float(prediction.flops), peak_flop_per_s=peak_flop_per_s,
        recomputed=work.checkpoint, recomputed_flops=float(prediction.recomputed_flops))
