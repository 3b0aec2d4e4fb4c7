"""The Trainer callback driven by hand, in the order ``Trainer.train`` calls it (transformers
needed, accelerate not): one meter step per optimizer step, figures added at each log."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from tests.bench.meter_helpers import TEST_CPU, FakeClock, tiny_run


def test_the_callback_meters_steps_and_fills_the_logs() -> None:
    pytest.importorskip("transformers")
    from tensorledger.bench import hf_callback

    run = tiny_run()
    clock = FakeClock()
    callback = hf_callback.MeterCallback(hardware=TEST_CPU, clock=clock, warmup_steps=1)
    assert type(callback).__name__ == "MeterCallback"
    args = SimpleNamespace(logging_steps=3)
    state = SimpleNamespace(global_step=0, log_history=[])
    control = SimpleNamespace()
    callback.on_train_begin(args, state, control, model=run.model)
    micro = [run.batch(2, 16, seed=s) for s in range(2)]
    logged = []
    for _ in range(6):
        callback.on_step_begin(args, state, control)
        run.accumulated(micro)  # two micro-batches, one optimizer step
        clock.advance(0.02)
        callback.on_step_end(args, state, control)
        state.global_step += 1
        clock.advance(0.001)
        if state.global_step % args.logging_steps == 0:
            logs = {"loss": 1.0}
            state.log_history.append({**logs, "step": state.global_step})  # as Trainer.log
            callback.on_log(args, state, control, logs=logs)
            logged.append(logs)
    final = {"train_runtime": 1.0}
    state.log_history.append({**final, "step": state.global_step})
    callback.on_log(args, state, control, logs=final)  # nothing timed since: left alone
    callback.on_train_end(args, state, control)
    flops = callback.meter.recordings[0].flops
    assert [entry["step"] for entry in state.log_history[:2]] == [3, 6]
    for logs, entry in zip(logged, state.log_history, strict=False):
        assert entry["meter_mfu"] == logs["meter_mfu"] == pytest.approx(flops / 0.02 / 100e9)
        assert entry["meter_tokens_per_s"] == pytest.approx(64 / 0.02)  # 2 × 2 × 16 tokens
        assert entry["meter_outside_time_s"] == pytest.approx(0.001)
    assert "meter_mfu" not in final
    assert callback.summary is not None and callback.summary.measured_steps == 5


def test_importing_the_module_does_not_import_transformers() -> None:
    import subprocess

    script = ("import sys, tensorledger.bench.hf_callback as h\n"
              "assert 'transformers' not in sys.modules\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
