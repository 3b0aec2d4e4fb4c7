"""``time`` of a mixture of experts (issue 38, item 4): 6·N_active·D, the active count given
(``--active-params``) or taken from a ``--model`` with routed experts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.napkin.training import devices_for_duration, training_time
from tests.workload.test_active_params import MIXTRAL_8X7B


def test_active_params_count_six_n_active_d() -> None:
    h100 = get_hardware("h100")
    dense = training_time(h100, 8, 0.5, params=46.7e9, tokens=1e12)
    moe = training_time(h100, 8, 0.5, params=46.7e9, tokens=1e12, active_params=12.9e9)
    assert moe.flops == 6 * 12.9e9 * 1e12  # 7.74e22
    assert dense.flops == 6 * 46.7e9 * 1e12
    assert moe.time_s / dense.time_s == pytest.approx(12.9 / 46.7)
    assert moe.steps[0].formula == "6 × active params × tokens"
    needed = devices_for_duration(h100, 86400 * 30, 0.5, params=46.7e9, tokens=1e12,
                                  active_params=12.9e9)
    assert needed.flops == moe.flops and needed.active_params == 12.9e9


def test_active_params_beyond_the_total_are_refused() -> None:
    with pytest.raises(InputError, match="cannot exceed"):
        training_time(get_hardware("h100"), 8, 0.5, params=7e9, tokens=1e12,
                      active_params=8e9)
    with pytest.raises(InputError):
        training_time(get_hardware("h100"), 8, 0.5, flops=1e22, active_params=8e9)


def test_the_cli_takes_the_active_count_of_a_model(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL_8X7B))
    result = cli("time", "--model", str(path), "--tokens", "1T", "--json")
    assert result.code == 0, result.stderr
    flops = json.loads(result.stdout)["flops"]
    assert flops == 6 * 12_879_925_248 * 1e12  # the hand count of test_active_params
    given = cli("time", "--params", "46.7B", "--active-params", "12.9B", "--tokens", "1T")
    assert given.code == 0 and "6·N_active·D" in given.stdout.replace("\n", " ")
    alone = cli("time", "--active-params", "12.9B", "--tokens", "1T")
    assert alone.code == 2 and alone.stderr.count("\n") == 1 and "--params" in alone.stderr
