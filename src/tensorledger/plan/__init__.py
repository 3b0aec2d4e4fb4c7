"""Planning: accumulation, checkpointing, layout search.

Closed forms only, no torch: ``tensorledger plan`` searches tens of thousands of layouts in a
second or two.  :func:`plan_layouts` ranks every feasible layout of a cluster by predicted step
time and counts the rejected ones by the constraint that binds; :func:`plan_accumulation`
splits a global batch into micro-batches that fit a memory budget.
"""

from __future__ import annotations

from tensorledger.plan.accumulate import (
    AccumulationOption,
    AccumulationPlan,
    plan_accumulation,
)
from tensorledger.plan.estimate import (
    ATTENTIONS,
    CHECKPOINTS,
    LayoutChoice,
    LayoutEstimate,
    PlanSetup,
    RankMemory,
    StepTime,
    estimate,
    layer_activation_bytes,
    rank_memory,
    step_time,
)
from tensorledger.plan.fixed import FixedDims
from tensorledger.plan.layouts import (
    REASONS,
    LayoutPlan,
    NoLayoutError,
    Rejection,
    divisors,
    plan_layouts,
)
from tensorledger.plan.pipeline import SCHEDULES, ScheduleFigures, SchedulePricer
from tensorledger.plan.traffic import SentBytes, Verified, sent_bytes

__all__ = ["ATTENTIONS", "CHECKPOINTS", "REASONS", "SCHEDULES", "AccumulationOption",
           "AccumulationPlan", "FixedDims", "LayoutChoice", "LayoutEstimate", "LayoutPlan",
           "NoLayoutError", "PlanSetup", "RankMemory", "Rejection", "ScheduleFigures",
           "SchedulePricer", "SentBytes", "StepTime", "Verified",
           "divisors", "estimate", "layer_activation_bytes", "plan_accumulation",
           "plan_layouts", "rank_memory", "sent_bytes", "step_time"]
