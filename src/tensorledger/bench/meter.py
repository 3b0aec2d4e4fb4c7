"""A live MFU meter for your own training loop: two lines, exact FLOPs, the right peak.

>>> import torch
>>> from tensorledger.hardware import get_hardware
>>> model = torch.nn.Linear(16, 8, bias=False)
>>> ticks = iter(range(100))                             # a fake clock: 1 s per reading
>>> meter = Meter(model, hardware=get_hardware("h100"), warmup_steps=1, every=0, quiet=True,
...               clock=lambda: float(next(ticks)))
>>> for _ in range(3):
...     with meter.step(tokens=4):
...         model(torch.ones(4, 16)).sum().backward()
...         model.weight.grad = None
>>> meter.close().flops_per_step        # 2·4·16·8 forward + (4·8 − 1) sum + 2·4·16·8 backward
2079

How it works:

- **FLOPs**: the first step runs under the trace recorder (``tensorledger.trace``), so its
  count is exact for *your* model, its dtypes, loss and optimizer: every aten op, forward,
  backward, optimizer and glue.  The count is kept under the step's *shape key*, the shapes and
  dtypes of the tensors the model was called with during the step (every micro-batch); a later
  step with a new key is timed but not counted, and the step after it is recorded again (up to
  ``max_recordings`` keys; pad batches to a few lengths when they vary).  A change that alters
  FLOPs without changing shapes (autocast switched on, layers frozen) needs ``recount()``.
  Recorded steps run slower and are left out of every figure; their time is reported apart.
- **Time**: ``with meter.step():`` brackets one optimizer step.  On CUDA the bounds are CUDA
  events on the current stream, read (one synchronisation) when an interval closes, so the
  meter never stalls the queue; elsewhere ``time.perf_counter`` after synchronising the device
  (nothing to do on the CPU).  Time between the end of one step and the start of the next
  (data loading, logging, evaluation) is reported apart as *outside* time; tokens/s and MFU
  are over the time inside the steps.
- **Gradient accumulation**: put ``meter.step()`` around the whole accumulation (all the
  micro-batches and the optimizer step).  Tokens are counted from the token-id tensors the
  model is called with (``input_ids=`` or the first integer tensor argument), summed over the
  micro-batches, so no arithmetic is needed; pass ``tokens=`` to override (padding included
  or not: your choice).
- **Mixtures of experts**: the recorded step's experts' FLOPs are those of the routing the
  real batch took, reported beside them (:mod:`tensorledger.bench.meter_routing`).
- **MFU** = FLOPs / (step time × dense peak of the dtype the matrix work ran in), see
  :mod:`tensorledger.bench.meter_peak`.  Every FLOP the trace counts is in the numerator
  (matmuls, attention, elementwise, norms, optimizer), attention under ``attention=`` (``full``
  by default, as Kaplan, Chinchilla and nanoGPT count it; ``causal-halved`` as Megatron-LM).
  An MFU above 1 is refused: the peak or the clock is wrong, and the message says which.
- **Expected MFU**: beside the measured MFU, the one the time model of ``roofline`` and
  ``account`` expects: the recorded step's ops priced on the meter's chip (the catalog's
  expected efficiencies; a probed profile's rates; or the datasheet alone, where the expected
  time is the roofline bound), the same FLOPs over that time and the same peak, and named by
  what it rests on (:mod:`tensorledger.bench.meter_expected`).
- **Intervals**: every ``every`` steps (or at ``flush()``) the meter closes an interval: it
  resolves the step times, writes one JSON line per step and one for the interval, updates
  ``metrics()``, writes one line on stderr (rank 0; ``quiet=True`` for none) and, under
  ``torchrun``, gathers every rank's figures with one small ``all_gather``
  (:mod:`tensorledger.bench.meter_cluster`).  Under ``torchrun`` every rank must close the
  same intervals: keep ``every`` (or your ``flush()`` calls) and ``close()`` in step.  On gloo,
  drop the DDP/FSDP wrapper and call ``dist.destroy_process_group()`` before the script ends:
  left to the interpreter's exit, a gloo worker thread may release the last collective's
  tensors after Python has begun to shut down, and the rank aborts (a torch matter, about one
  run in ten on two CPU ranks here; ``tests/bench/meter_torchrun.py`` shows the order).
- **Summary**: ``close()`` (or leaving ``with Meter(...)``) returns a :class:`MeterSummary`:
  medians and quartiles over the steps after the first ``warmup_steps``.
- **Memory**: the CUDA caching allocator's peak (``max_memory_allocated``) on CUDA, the
  process's peak resident set size (``getrusage``) elsewhere; both since the process started.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Hashable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import torch

from tensorledger.bench.harness import _statistics
from tensorledger.bench.meter_cluster import cluster_figures, gather_rows, rank_and_world
from tensorledger.bench.meter_expected import ExpectedStep, expected_mfu, expected_step
from tensorledger.bench.meter_inputs import (
    ShapeKey,
    check_tokens,
    model_device,
    shape_key,
    token_ids,
)
from tensorledger.bench.meter_peak import Peak, StepCount, count_step, dense_peak, resolve_hardware
from tensorledger.bench.meter_records import (
    ClockTimer,
    CudaTimer,
    MeterInterval,
    MeterSummary,
    PendingStep,
    StepRecord,
    flat_record,
    peak_memory,
)
from tensorledger.bench.meter_routing import RoutingProbe, measured_routing
from tensorledger.display import view
from tensorledger.errors import ConfigError, InputError, TensorLedgerError
from tensorledger.hardware import Hardware
from tensorledger.trace.recorder import Recorder
from tensorledger.units import format_flop_rate

__all__ = ["Meter", "MeterInterval", "MeterSummary", "StepRecord"]

_CONVENTIONS = ("full", "causal-halved")


# ---------------------------------------------------------------------------------- the meter

class _StepContext:
    """One ``with meter.step():`` block; see :meth:`Meter.step`."""

    __slots__ = ("_meter", "_state", "tokens")

    def __init__(self, meter: Meter, tokens: int | None) -> None:
        self._meter = meter
        self.tokens = tokens
        self._state = "new"

    def __enter__(self) -> _StepContext:
        if self._state != "new":
            raise TensorLedgerError("this meter.step() context was already entered; call "
                                    "meter.step() again for each step")
        self._meter._begin(self)
        self._state = "open"
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if self._state != "open":
            return
        self._state = "done"
        self._meter._end(self, failed=kind is not None)


class Meter:
    """Measure tokens/s, FLOP/s, MFU and memory of a training loop, step by step.

    ``model``: the module the loop calls (its forward inputs give the shape key and the token
    count); ``hardware``: a catalog id, a TOML path or a :class:`Hardware` (default: this
    device's catalog entry, else the ``tensorledger probe`` profile); ``every``: steps per
    interval (0: only at ``flush()``/``close()``); ``warmup_steps``: first steps left out of the
    summary; ``jsonl``: a JSON-lines file (``{rank}`` in the name is replaced; under torchrun
    without it, ``.rank<r>`` goes before the suffix); ``quiet``: no stderr lines;
    ``stream``: where the lines go (default ``sys.stderr``); ``attention``: ``full`` or
    ``causal-halved``; ``clock``: a clock to use instead of the device's (tests); ``group``:
    the process group whose ranks make the cluster (default: the whole world).
    """

    def __init__(self, model: torch.nn.Module | None, *, hardware: str | Hardware | None = None,
                 every: int = 10, warmup_steps: int = 3, jsonl: str | Path | None = None,
                 quiet: bool = False, stream: IO[str] | None = None, attention: str = "full",
                 clock: Callable[[], float] | None = None, device: str | None = None,
                 max_recordings: int = 16, group: Any = None) -> None:
        for name, value in (("every", every), ("warmup_steps", warmup_steps),
                            ("max_recordings", max_recordings)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(f"{name} must be a whole number >= 0, got {value!r}")
        if attention not in _CONVENTIONS:
            raise InputError(f"unknown attention convention {attention!r}; known: "
                             f"{', '.join(_CONVENTIONS)}")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputError(f"the meter needs the torch.nn.Module the loop calls, got "
                             f"{type(model).__name__}")
        self.device = model_device(model, device)
        self.hardware = resolve_hardware(hardware, self.device)
        self.attention = attention
        self.every = every
        self.warmup_steps = warmup_steps
        self.max_recordings = max_recordings
        self.quiet = quiet
        self._stream = stream
        self._group = group
        self.rank, self.world_size = rank_and_world(group)
        if clock is not None:
            self._timer: ClockTimer | CudaTimer = ClockTimer(clock, self.device,
                                                                "injected clock")
        elif self.device.type == "cuda":
            self._timer = CudaTimer()
        else:
            self._timer = ClockTimer(time.perf_counter, self.device, "perf_counter")
        self._jsonl_path = None if jsonl is None else self._rank_path(Path(jsonl))
        self._jsonl: IO[str] | None = None
        if self._jsonl_path is not None:
            try:
                self._jsonl_path.parent.mkdir(parents=True, exist_ok=True)
                self._jsonl = self._jsonl_path.open("w", encoding="utf-8")
            except OSError as error:
                raise ConfigError(f"cannot write the meter's JSON lines to {self._jsonl_path}: "
                                  f"{error.strerror}") from None
        self._handle = None if model is None else model.register_forward_pre_hook(
            self._on_forward, with_kwargs=True)

        self._counts: dict[ShapeKey, StepCount] = {}
        self._recordings: list[StepCount] = []
        self._peaks: dict[int, Peak] = {}  # id(StepCount) → its peak
        # id(StepCount) → its step priced by the roofline's time model (None: could not be)
        self._expected: dict[int, ExpectedStep | None] = {}
        self._record_next = True
        self._open: _StepContext | None = None
        self._recorder: Recorder | None = None
        self._probe: RoutingProbe | None = None
        self._keys: list[Hashable] = []
        self._tokens_seen = 0
        self._tokens_unknown = False
        self._start: Any = None
        self._previous_end: Any = None
        self._pending: list[PendingStep] = []
        self._steps = 0
        self._closed = False
        self._summary: MeterSummary | None = None
        self._last: MeterInterval | None = None
        # the measured steps (after warm-up, not recorded), for the summary
        self._time = array("d")
        self._outside = array("d")
        self._tokens = array("d")
        self._flops = array("d")  # NaN: uncounted
        self._ideal = array("d")  # FLOPs / peak; NaN: uncounted
        self._expected_time = array("d")  # expected step time; NaN: not priced
        self._recorded = 0
        self._recording_s = 0.0

    # ---- set-up --------------------------------------------------------------------------
    def _rank_path(self, path: Path) -> Path:
        if "{rank}" in path.name:
            return path.with_name(path.name.replace("{rank}", str(self.rank)))
        if self.world_size > 1:
            return path.with_name(f"{path.stem}.rank{self.rank}{path.suffix}")
        return path

    # ---- the step ------------------------------------------------------------------------
    def step(self, tokens: int | None = None) -> _StepContext:
        """A context around one optimizer step (all its micro-batches included).

        ``tokens``: the tokens of this step on this rank; by default counted from the token
        ids the model is called with.
        """
        if self._closed:
            raise TensorLedgerError("this meter is closed; make a new Meter to measure again")
        return _StepContext(self, check_tokens(tokens))

    def recount(self) -> None:
        """Record the next step again (after a change that alters FLOPs, not shapes)."""
        self._counts.clear()
        self._record_next = True

    def _on_forward(self, module: torch.nn.Module, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> None:
        if self._open is None:
            return None
        self._keys.append(shape_key(args, kwargs))
        tokens = token_ids(args, kwargs)
        if tokens is None:
            self._tokens_unknown = True
        else:
            self._tokens_seen += tokens
        return None

    def _begin(self, context: _StepContext) -> None:
        if self._closed:
            raise TensorLedgerError("this meter is closed; make a new Meter to measure again")
        if self._open is not None:
            raise TensorLedgerError("a meter step is already open; each `with meter.step():` "
                                    "must end before the next one begins")
        self._keys = []
        self._tokens_seen = 0
        self._tokens_unknown = False
        self._start = self._timer.mark()
        if self._record_next and len(self._recordings) < self.max_recordings:
            # the probe below the recorder: it sees each op the recorder lets through
            self._probe = RoutingProbe()
            self._probe.__enter__()  # type: ignore[no-untyped-call]
            self._recorder = Recorder()
            self._recorder.__enter__()
        self._open = context

    def _end(self, context: _StepContext, failed: bool) -> None:
        end = self._timer.mark()
        recorder, self._recorder = self._recorder, None
        probe, self._probe = self._probe, None
        self._open = None
        if recorder is not None:
            recorder.__exit__(None, None, None)
        if probe is not None:
            probe.__exit__(None, None, None)  # type: ignore[no-untyped-call]
        if failed:  # the step raised: not counted (nor as outside time); the error goes on
            self._previous_end = end
            return
        self._steps += 1
        tokens = context.tokens
        if tokens is None:
            if self._tokens_unknown or self._tokens_seen <= 0:
                raise TensorLedgerError(
                    f"the meter cannot tell how many tokens step {self._steps} had: the model "
                    f"was not called with token ids; pass meter.step(tokens=...)")
            tokens = self._tokens_seen
        key = tuple(self._keys)
        count: StepCount | None
        if recorder is not None:
            tf32 = self.device.type == "cuda" and bool(torch.backends.cuda.matmul.allow_tf32)
            count = count_step(recorder.trace, tokens, tf32,
                               () if probe is None else measured_routing(recorder.trace,
                                                                         probe.calls))
            self._expected[id(count)] = self._price(recorder, tokens)
            self._counts[key] = count
            self._recordings.append(count)
            self._record_next = False
        else:
            count = self._counts.get(key)
            if count is None:
                self._record_next = True
        self._pending.append(PendingStep(self._steps, self._start, end, self._previous_end, tokens,
                                      key, count, recorder is not None))
        # a recorded step is priced after its end: the next step's outside time starts after
        self._previous_end = end if recorder is None else self._timer.mark()
        if self.every and self._steps % self.every == 0:
            self.flush()

    def _price(self, recorder: Recorder, tokens: int) -> ExpectedStep | None:
        """The recorded step priced by the roofline's time model on the meter's chip; None
        when the chip cannot price it (a collective on a chip without link figures): the
        measured figures go on without an expected one."""
        try:
            return expected_step(recorder.trace, self.hardware, tokens)
        except TensorLedgerError:
            return None

    # ---- intervals ---------------------------------------------------------------------
    def _peak(self, count: StepCount) -> Peak:
        peak = self._peaks.get(id(count))
        if peak is None:
            peak = self._peaks[id(count)] = dense_peak(count, self.hardware)
        return peak

    def _finish(self, pending: PendingStep) -> StepRecord:
        time_s = self._timer.seconds(pending.start, pending.end)
        outside = None if pending.previous_end is None else self._timer.seconds(
            pending.previous_end, pending.start)
        count = pending.count or self._counts.get(pending.key)
        flops = peak = mfu = expected_s = expected = None
        if count is not None:
            flops = count.flops_for(self.attention)
            peak = self._peak(count).flop_per_s
            priced = self._expected.get(id(count))
            if priced is not None:
                expected_s = priced.time_s
                expected = expected_mfu(flops, peak, expected_s)
            if not pending.recorded and time_s > 0:
                mfu = flops / time_s / peak
                if mfu > 1:
                    raise TensorLedgerError(
                        f"MFU {mfu:.2f} at step {pending.index} is above 1: {flops:.4g} FLOPs in "
                        f"{time_s:.4g} s is {format_flop_rate(flops / time_s)}, more than the "
                        f"{self._peak(count).label} peak of {self.hardware.id} "
                        f"({format_flop_rate(peak)}); name the right hardware= or, if the clock "
                        f"is your own, make it wait for the device")
        return StepRecord(step=pending.index, time_s=time_s, outside_time_s=outside,
                          tokens=pending.tokens, flops=flops, peak_flop_per_s=peak, mfu=mfu,
                          recorded=pending.recorded, warmup=pending.index <= self.warmup_steps,
                          expected_time_s=expected_s, expected_mfu=expected)

    def flush(self) -> MeterInterval:
        """Close the current interval now and return its figures (under torchrun: on every
        rank, as it gathers)."""
        pending, self._pending = self._pending, []
        if pending:
            self._timer.resolve(pending[-1].end)
        records = [self._finish(p) for p in pending]
        timed = [r for r in records if not r.recorded]
        counted = [r for r in timed if r.flops is not None and r.peak_flop_per_s is not None]
        for record in records:
            if record.recorded:
                self._recorded += 1
                self._recording_s += record.time_s
            elif not record.warmup:
                self._keep(record)
        step_time = math.fsum(r.time_s for r in timed)
        counted_time = math.fsum(r.time_s for r in counted)
        outside = [r.outside_time_s for r in timed if r.outside_time_s is not None]
        flops = math.fsum(float(r.flops or 0) for r in counted)
        ideal = math.fsum(float(r.flops or 0) / float(r.peak_flop_per_s or 1) for r in counted)
        tokens_per_s = (math.fsum(r.tokens for r in timed) / step_time) if step_time > 0 else None
        mfu = ideal / counted_time if counted and counted_time > 0 else None
        priced = [r for r in counted if r.expected_time_s is not None]
        expected_time = math.fsum(float(r.expected_time_s or 0) for r in priced)
        expected_ideal = math.fsum(float(r.flops or 0) / float(r.peak_flop_per_s or 1)
                                   for r in priced)
        latest = self._recordings[-1] if self._recordings else None
        peak = self._peak(latest) if latest is not None else None
        memory, source = peak_memory(self.device)
        cluster_rate = cluster_mfu = None
        if self.world_size > 1:
            nan = float("nan")
            rows = gather_rows((nan if tokens_per_s is None else tokens_per_s,
                                nan if mfu is None else mfu, flops if counted else nan),
                               self._group)
            cluster_rate, cluster_mfu = cluster_figures(rows)
        elif tokens_per_s is not None:
            cluster_rate, cluster_mfu = tokens_per_s, mfu
        interval = MeterInterval(
            step=self._steps, steps=len(timed),
            step_time_s=step_time / len(timed) if timed else None,
            outside_time_s=math.fsum(outside) / len(outside) if outside else None,
            tokens_per_s=tokens_per_s, flops=flops,
            flops_per_step=flops / len(counted) if counted else None,
            flop_per_s=flops / counted_time if counted and counted_time > 0 else None,
            mfu=mfu, peak_flop_per_s=None if peak is None else peak.flop_per_s,
            peak_dtype=None if peak is None else peak.label, hardware=self.hardware.id,
            attention=self.attention, peak_memory_bytes=memory, memory_source=source,
            rank=self.rank, world_size=self.world_size, cluster_tokens_per_s=cluster_rate,
            cluster_mfu=cluster_mfu,
            expected_step_time_s=expected_time / len(priced) if priced else None,
            expected_mfu=expected_ideal / expected_time if priced and expected_time > 0 else None,
            expected_name=self._expected_name())
        if not records:  # nothing since the last interval: gathered (to stay in step), unsaid
            return interval
        self._last = interval
        if self._jsonl is not None:
            lines = [json.dumps({"kind": "step", "rank": self.rank, **flat_record(r)})
                     for r in records]
            lines.append(json.dumps({"kind": "interval", **flat_record(interval)}))
            self._jsonl.write("\n".join(lines) + "\n")
            self._jsonl.flush()
        if timed and not self.quiet and self.rank == 0:
            self._write(str(view("text", interval)))  # drawn by presentation (report.meter)
        return interval

    def _expected_name(self) -> str | None:
        latest = self._recordings[-1] if self._recordings else None
        priced = None if latest is None else self._expected.get(id(latest))
        return None if priced is None else priced.name

    def _keep(self, record: StepRecord) -> None:
        self._expected_time.append(math.nan if record.expected_time_s is None
                                   else record.expected_time_s)
        self._time.append(record.time_s)
        self._outside.append(math.nan if record.outside_time_s is None
                             else record.outside_time_s)
        self._tokens.append(record.tokens)
        if record.flops is None or record.peak_flop_per_s is None:
            self._flops.append(math.nan)
            self._ideal.append(math.nan)
        else:
            self._flops.append(record.flops)
            self._ideal.append(record.flops / record.peak_flop_per_s)

    def _write(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        stream.write(text + "\n")
        stream.flush()

    # ---- reading -------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        """Steps ended so far on this rank."""
        return self._steps

    @property
    def recordings(self) -> tuple[StepCount, ...]:
        """Every recorded step's count, oldest first."""
        return tuple(self._recordings)

    @property
    def jsonl_path(self) -> Path | None:
        """This rank's JSON-lines file."""
        return self._jsonl_path

    def metrics(self) -> dict[str, float]:
        """The latest interval's figures as a flat dict of numbers, units in the keys, for any
        logger (TensorBoard, W&B, ...); unknown figures are left out."""
        figures: dict[str, float] = {"step": float(self._steps)}
        last = self._last
        if last is None:
            return figures
        for key in ("step_time_s", "outside_time_s", "tokens_per_s", "flops_per_step",
                    "flop_per_s", "mfu", "peak_flop_per_s", "peak_memory_bytes",
                    "cluster_tokens_per_s", "cluster_mfu", "expected_step_time_s",
                    "expected_mfu"):
            value = getattr(last, key)
            if value is not None:
                figures[key] = float(value)
        figures["world_size"] = float(last.world_size)
        return figures

    def summary(self) -> MeterSummary:
        """The figures so far on this rank (the cluster's only after ``close()``)."""
        if self._summary is not None:
            return self._summary
        return self._summarize(None, None)

    def _summarize(self, cluster_rate: float | None, cluster_mfu: float | None) -> MeterSummary:
        times = list(self._time)
        step_time = None if not times else _statistics(
            "meter step", str(self.device), self._timer.name, self.warmup_steps, 1, times)
        outside = [v for v in self._outside if not math.isnan(v)]
        counted = [i for i, v in enumerate(self._flops) if not math.isnan(v)]
        counted_time = math.fsum(times[i] for i in counted)
        total_time = math.fsum(times)
        tokens = int(math.fsum(self._tokens))
        rates = [self._tokens[i] / t for i, t in enumerate(times) if t > 0]
        mfus = sorted(self._ideal[i] / times[i] for i in counted if times[i] > 0)
        quartiles = (statistics.quantiles(mfus, n=4, method="inclusive") if len(mfus) >= 2
                     else [mfus[0]] * 3 if mfus else [None] * 3)
        flops = math.fsum(self._flops[i] for i in counted)
        counted_tokens = math.fsum(self._tokens[i] for i in counted)
        latest = self._recordings[-1] if self._recordings else None
        memory, source = peak_memory(self.device)
        inside_outside = total_time + math.fsum(outside)
        priced = [i for i in counted if not math.isnan(self._expected_time[i])]
        expected_time = math.fsum(self._expected_time[i] for i in priced)
        latest_priced = None if latest is None else self._expected.get(id(latest))
        return MeterSummary(
            hardware=self.hardware.id, device=str(self.device), timer=self._timer.name,
            attention=self.attention, steps=self._steps,
            warmup_steps=min(self.warmup_steps, self._steps), recorded_steps=self._recorded,
            recording_time_s=self._recording_s, measured_steps=len(times),
            uncounted_steps=len(times) - len(counted), step_time=step_time,
            outside_time_median_s=statistics.median(outside) if outside else None,
            outside_share=(math.fsum(outside) / inside_outside
                           if outside and inside_outside > 0 else None),
            tokens=tokens, tokens_per_s=tokens / total_time if total_time > 0 else None,
            tokens_per_s_median=statistics.median(rates) if rates else None,
            flops_per_step=None if latest is None else latest.flops_for(self.attention),
            flops=flops,
            flops_per_token=flops / counted_tokens if counted and counted_tokens > 0 else None,
            flop_per_s=flops / counted_time if counted and counted_time > 0 else None,
            mfu=(math.fsum(self._ideal[i] for i in counted) / counted_time
                 if counted and counted_time > 0 else None),
            mfu_median=statistics.median(mfus) if mfus else None,
            mfu_q1=quartiles[0], mfu_q3=quartiles[2],
            peak=None if latest is None else self._peak(latest),
            peak_memory_bytes=memory, memory_source=source, rank=self.rank,
            world_size=self.world_size,
            cluster_tokens_per_s=cluster_rate, cluster_mfu=cluster_mfu,
            expected_step_time_s=None if latest_priced is None else latest_priced.time_s,
            expected_mfu=(math.fsum(self._ideal[i] for i in priced) / expected_time
                          if priced and expected_time > 0 else None),
            expected_name=None if latest_priced is None else latest_priced.name,
            expected_rests_on=None if latest_priced is None else latest_priced.rests_on,
            routing=() if latest is None else latest.routing)

    # ---- the end -------------------------------------------------------------------------
    def close(self) -> MeterSummary:
        """Close the last interval, gather the cluster's summary (under torchrun: on every
        rank), write the summary line and file, and return the summary.  Idempotent."""
        if self._summary is not None:
            return self._summary
        if self._open is not None:
            raise TensorLedgerError("close() was called inside an open meter step; close the "
                                    "meter after the step ends")
        if self._pending or self.world_size > 1:
            self.flush()
        local = self._summarize(None, None)
        rate, mfu = local.tokens_per_s, local.mfu
        if self.world_size > 1:
            nan = float("nan")
            rows = gather_rows((nan if rate is None else rate, nan if mfu is None else mfu,
                                local.flops if local.mfu is not None else nan), self._group)
            rate, mfu = cluster_figures(rows)
        self._summary = summary = self._summarize(rate, mfu)
        self._release()
        if self._jsonl is not None:
            document = asdict(summary)
            document["step_time"] = None if summary.step_time is None else {
                k: v for k, v in asdict(summary.step_time).items() if k != "samples_s"}
            self._jsonl.write(json.dumps({"kind": "summary", **document}) + "\n")
            self._jsonl.close()
            self._jsonl = None
        if not self.quiet and self.rank == 0:
            self._write(str(view("text", summary)))
        return summary

    def _release(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if kind is None:
            self.close()
            return
        # an error left the loop: no collective (other ranks may be gone), just let go
        self._release()
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
