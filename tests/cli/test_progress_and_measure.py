"""Progress on stderr (only on a terminal, only for work over a second, never with --quiet or
--json), and ``account --measure``: the step run for real beside the prediction for this
machine's profile."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tensorledger.cli.common import progress
from tests.conftest import assert_one_line_error


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_progress_shows_the_stage_once_work_runs_over_the_delay() -> None:
    stream = Terminal()
    with progress(stream=stream, delay_s=0.05) as say:
        say("tracing the train step")
        time.sleep(0.3)
    assert "tracing the train step" in stream.getvalue()


def test_progress_stays_silent_for_short_work_quiet_json_and_pipes() -> None:
    for options in ({"delay_s": 10.0}, {"quiet": True, "delay_s": 0.0},
                    {"as_json": True, "delay_s": 0.0}):
        stream = Terminal()
        with progress(stream=stream, **options) as say:  # type: ignore[arg-type]
            say("tracing")
            time.sleep(0.05)
        assert stream.getvalue() == "", options
    pipe = io.StringIO()  # not a terminal
    with progress(stream=pipe, delay_s=0.0) as say:
        say("tracing")
        time.sleep(0.05)
    assert pipe.getvalue() == ""
    assert threading.active_count() < 50  # the timers end with their blocks


def test_commands_take_quiet(cli: Any) -> None:
    for command in ("trace", "memory", "roofline", "account"):
        result = cli(command, "--model", "tiny", "--batch", "1", "--seq", "8", "--quiet",
                     "--json")
        assert result.code == 0, (command, result.stderr)
        json.loads(result.stdout)
        assert result.stderr == ""


_PROFILE = ('name = "this cpu"\nmemory = "8GB"\nmemory_bandwidth = "10GB/s"\n'
            'op_overhead = "10us"\n[dense]\nfp32 = "50GFLOP/s"\nbf16 = "5GFLOP/s"\n')


def test_account_measure_sets_the_local_step_beside_its_prediction(
        cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path))
    (tmp_path / "local.toml").write_text(_PROFILE)
    result = cli("account", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision",
                 "fp32", "--hardware", "h100", "--measure", "--json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    measured = doc["measured"]
    assert measured["device"] == "cpu" and measured["prediction"]["hardware"] == "local"
    comparison = measured["comparison"]
    assert comparison["measured_step_s"] > 0
    # the error is the prediction for this machine against its own measurement
    assert comparison["error"] == pytest.approx(
        comparison["predicted_step_s"] / comparison["measured_step_s"] - 1)
    # and the catalog prediction is untouched beside it
    assert doc["roofline"]["hardware"] == "h100-sxm"
    table = cli("account", "--model", "tiny", "--batch", "1", "--seq", "8", "--precision",
                "fp32", "--measure")
    assert table.code == 0 and "Measured on this machine (cpu)" in table.stdout


def test_account_measure_without_a_profile_is_one_line(
        cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSORLEDGER_HOME", str(tmp_path / "empty"))
    result = cli("account", "--model", "tiny", "--measure")
    assert_one_line_error(result, "no local hardware profile", "tensorledger probe")
