"""The meter inside a Hugging Face ``Trainer``: a ``TrainerCallback`` (needs the ``hf`` extra).

``transformers`` is imported when ``MeterCallback`` is first used, not when this module is, so
tensorledger works without it.  The callback opens a meter step at ``on_step_begin`` and closes
it at ``on_step_end``, which the Trainer calls once per optimizer step, around all the
micro-batches of gradient accumulation; tokens are counted from the ``input_ids`` the model is
called with.  At each of the Trainer's logging steps it closes the meter's interval and adds
the meter's figures to the logs, prefixed ``meter_`` (``meter_mfu``, ``meter_tokens_per_s``,
``meter_step_time_s``, ...), both in ``trainer.state.log_history`` and in the dict the logging
integrations (TensorBoard, W&B, ...) receive; :func:`install` puts the callback first so that
those integrations see the figures too.  ``callback.summary`` holds the meter's summary once
training ends.

A step that raises inside ``Trainer.train`` leaves the meter's step open (the Trainer calls no
callback on the way out); make a new callback to train again.
"""

from __future__ import annotations

from typing import Any

from tensorledger.errors import TensorLedgerError

__all__ = ["MeterCallback", "install"]

MeterCallback: type  # built on first use by the module __getattr__ below (imports transformers)


def _build() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError:
        raise TensorLedgerError("MeterCallback needs transformers; install it with "
                                "pip install 'tensorledger[hf]'") from None

    from tensorledger.bench.meter import Meter, MeterSummary

    class MeterCallback(TrainerCallback):
        """Meter every optimizer step of a ``Trainer``; add the figures to its logs.

        ``hardware`` and ``options`` go to :class:`~tensorledger.bench.meter.Meter`
        (``every`` defaults to 0 and ``quiet`` to True here: the Trainer's logging steps
        close the intervals and its logs carry the figures).
        """

        def __init__(self, hardware: Any = None, prefix: str = "meter_", **options: Any) -> None:
            self.hardware = hardware
            self.prefix = prefix
            self.options = {"every": 0, "quiet": True, **options}
            self.meter: Meter | None = None
            self.summary: MeterSummary | None = None
            self._step: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                           **kwargs: Any) -> None:
            self.meter = Meter(model, hardware=self.hardware, **self.options)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.meter is not None:
                self._step = self.meter.step()
                self._step.__enter__()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            step, self._step = self._step, None
            if step is not None:
                step.__exit__(None, None, None)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            if self.meter is None or self._step is not None or self.summary is not None:
                return
            if not self.meter.flush().steps:
                return  # no step timed since the last log (evaluation, the final summary)
            figures = {f"{self.prefix}{key}": value
                       for key, value in self.meter.metrics().items() if key != "step"}
            if logs is not None:
                logs.update(figures)
            history = getattr(state, "log_history", None)
            if history and history[-1].get("step") == state.global_step:
                history[-1].update(figures)  # the Trainer appended a copy before calling us

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.meter is not None and self.summary is None:
                self.summary = self.meter.close()

    MeterCallback.__module__ = __name__
    MeterCallback.__qualname__ = "MeterCallback"
    return MeterCallback


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    global _CLASS
    if name == "MeterCallback":
        if _CLASS is None:
            _CLASS = _build()
        return _CLASS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install(trainer: Any, hardware: Any = None, **options: Any) -> Any:
    """Add a :class:`MeterCallback` to ``trainer`` as its first callback, so the logging
    integrations that run after it see the meter's figures; returns the callback."""
    callback = __getattr__("MeterCallback")(hardware=hardware, **options)
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
