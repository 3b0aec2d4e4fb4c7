"""What to account and the one place that runs it: a :class:`Workload` (model source, batch,
sequence, step, precision recipe, optimizer, checkpointing, device) resolved once from the
command line into objects, and the code that builds its module and runs (or traces) its step
on meta, fake, cpu or cuda tensors.

Importing this package, :mod:`.spec` or :mod:`.source` loads no torch (a command checks its
options before torch loads); the names that run a step load it when first used.

>>> from tensorledger.workload import resolve_workload, trace_workload
>>> run = trace_workload(resolve_workload("tiny", batch=2, seq=8, precision="fp32"))
>>> run.params == sum(run.param_numels) and run.trace.flops > 6 * run.params * 16
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tensorledger.workload.params import model_params
from tensorledger.workload.routing import BALANCED, Routing, resolve_routing
from tensorledger.workload.source import ModelSource, hf_available, resolve_source
from tensorledger.workload.spec import (
    DEFAULTS,
    DEVICES,
    STEPS,
    Step,
    Workload,
    resolve_step,
    resolve_workload,
)

if TYPE_CHECKING:
    from tensorledger.workload.run import (
        StepTrace,
        TaggingRecorder,
        device_records,
        record_step,
        trace_model,
        trace_workload,
    )
    from tensorledger.workload.step import PreparedStep, placement, prepare

__all__ = [
    "BALANCED",
    "DEFAULTS",
    "DEVICES",
    "STEPS",
    "ModelSource",
    "PreparedStep",
    "Routing",
    "Step",
    "StepTrace",
    "TaggingRecorder",
    "Workload",
    "device_records",
    "hf_available",
    "model_params",
    "placement",
    "prepare",
    "record_step",
    "resolve_routing",
    "resolve_source",
    "resolve_step",
    "resolve_workload",
    "trace_model",
    "trace_workload",
]

_LAZY = {"StepTrace": "run", "TaggingRecorder": "run", "record_step": "run",
         "device_records": "run",
         "trace_model": "run", "trace_workload": "run", "PreparedStep": "step",
         "placement": "step", "prepare": "step"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
