"""The action-list pricer's steady-state extension pinned (issue 42's mutation run of
``tensorledger.ledger.schedules``): where it replays, where it extends, what an extended figure
holds, the fallback where torch takes m but not the counts the extension replays, and the
replays shared by every pricer."""

from __future__ import annotations

import pytest

from tensorledger.ledger.schedules import ActionListPricer
from tensorledger.workload.pipeline import action_lists
from tensorledger.workload.schedule_order import order_timeline

REPLAYED = "torch's action lists, replayed"


@pytest.fixture(autouse=True)
def _fresh_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    # the replays are shared by the process: each test starts from none
    monkeypatch.setattr(ActionListPricer, "_replays", {})


def test_up_to_three_periods_the_lists_are_replayed_whole() -> None:
    # 1F1B over p = 2: m = 3·p = 6 is still replayed whole
    figures = ActionListPricer().figures("1f1b", 2, 6, 1)
    assert not isinstance(figures, str) and figures.source == REPLAYED


def test_past_three_periods_the_steady_state_is_extended_by_hand() -> None:
    # m = 7 > 3·2: replays at low = 2·2 + 7 mod 2 = 5 and high = 7, one period apart
    figures = ActionListPricer().figures("1f1b", 2, 7, 1)
    assert not isinstance(figures, str)
    assert figures.source == REPLAYED + ", its steady state past 5 micro-batches extended"
    assert (figures.schedule, figures.pp, figures.microbatches, figures.chunks) == (
        "1f1b", 2, 7, 1)
    # 1F1B's bubble (p − 1)/(m + p − 1) = 1/8; p − s micro-batches in flight on stage s,
    # counted as whole micro-batches
    assert figures.bubble_fraction == pytest.approx(1 / 8, rel=1e-12)
    assert figures.stage_in_flight == (2, 1)
    assert all(type(n) is int for n in figures.stage_in_flight)
    assert figures.rank_stages == ((0,), (1,))


def test_where_torch_takes_m_but_not_the_extensions_counts_m_is_replayed() -> None:
    # interleaved 1F1B, p = 4, v = 2: m = 15 runs in 15 // 4 = 3 rounds of 5; the extension
    # would replay low = 8 + 15 mod 4 = 11, which does not split into 11 // 4 = 2 rounds
    figures = ActionListPricer().figures("interleaved-1f1b", 4, 15, 2)
    assert not isinstance(figures, str) and figures.source == REPLAYED
    assert figures.microbatches == 15
    replay = order_timeline(action_lists("interleaved-1f1b", 4, 15, 2))
    assert figures.bubble_fraction == replay.bubble_fraction
    assert figures.stage_in_flight == replay.in_flight


def test_a_replay_is_held_for_every_pricer() -> None:
    first = ActionListPricer()._replayed("1f1b", 2, 2, 1)
    assert ActionListPricer()._replayed("1f1b", 2, 2, 1) is first


def test_a_replay_holds_the_schedules_own_counts_and_placement() -> None:
    # three chunks a rank (not the interleaved schedules' default of two): the lists of v = 3
    figures = ActionListPricer().figures("interleaved-1f1b", 2, 4, 3)
    assert not isinstance(figures, str)
    assert (figures.schedule, figures.pp, figures.microbatches, figures.chunks) == (
        "interleaved-1f1b", 2, 4, 3)
    replay = order_timeline(action_lists("interleaved-1f1b", 2, 4, 3))
    assert figures.bubble_fraction == replay.bubble_fraction
    assert figures.rank_stages == ((0, 2, 4), (1, 3, 5))  # a loop: r, r + p, r + 2p
    # ZBV's V: rank r holds stages r and 2p − 1 − r
    zbv = ActionListPricer().figures("zbv", 2, 4, 2)
    assert not isinstance(zbv, str) and zbv.rank_stages == ((0, 3), (1, 2))
