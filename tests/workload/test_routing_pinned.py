"""The routing assumption's arithmetic (issue 42's mutation run of
``tensorledger.workload.routing``): counts, refusals, the summary line, the file reader and the
(experts, k) a source names, each figure by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorledger.errors import ConfigError, InputError
from tensorledger.models import get_preset
from tensorledger.workload import routing as rt
from tensorledger.workload.source import ModelSource


def test_even_counts_give_the_remainder_to_the_first_experts() -> None:
    assert rt._even(10, 4) == (3, 3, 2, 2)  # 10 = 4 · 2 + 2
    assert rt._even(8, 4) == (2, 2, 2, 2)
    assert rt._even(3, 4) == (1, 1, 1, 0)


def test_skew_gives_the_first_expert_its_multiple_and_the_rest_evenly() -> None:
    skew = rt.Routing(kind="skew", skew=0.5)
    # 12 tokens · 2 = 24 slots over 4: balanced 6; first 1.5 · 6 = 9; rest 15 over 3 = 5 each
    assert skew.counts(12, 4, 2) == (9, 5, 5, 5)
    # first capped at the tokens: 3 · 2 · 4 / 2 = 12 > 6 tokens → 6; rest 6 over 1 = 6
    assert rt.Routing(kind="skew", skew=3.0).counts(6, 2, 2) == (6, 6)
    # one expert: no skew to give, all 12 slots to it
    assert skew.counts(12, 1, 1) == (12,)
    # round((1 + 0.25) · 10 / 4) = round(3.125) = 3; 7 over 3 = 3, 2, 2
    assert rt.Routing(kind="skew", skew=0.25).counts(5, 4, 2) == (3, 3, 2, 2)


def test_a_histogram_of_other_size_or_sum_is_scaled_or_ignored() -> None:
    given = rt.Routing(kind="histogram", histogram=(30, 10, 4, 4), source="h.json")
    assert given.counts(24, 4, 2) == (30, 10, 4, 4)  # 24 · 2 = 48 = 30 + 10 + 4 + 4: as given
    # 12 · 2 = 24 slots: exact 15, 5, 2, 2 (half of each); 15 capped at the 12 tokens, and the
    # 3 slots it loses go one each to the others (all remainders 0, in expert order)
    assert given.counts(12, 4, 2) == (12, 6, 3, 3)
    # a histogram of 3 experts for a model of 4: balanced 48 / 4 = 12 each
    assert rt.Routing(kind="histogram", histogram=(1, 1, 1), source="h").counts(24, 4, 2) == (
        12, 12, 12, 12)


def test_largest_remainder_rounds_up_the_largest_fractions_under_the_cap() -> None:
    # exact 2.5, 1.5, 1.0 of 5 slots: floors 2, 1, 1 (4); one more to the first of the .5s
    assert rt._largest_remainder([0.5, 0.3, 0.2], 5, 10) == (3, 1, 1)
    # exact 2.4, 1.8, 0.8: floors 2, 1, 0; remainders .4, .8, .8 → the .8s first: 2, 2, 1
    assert rt._largest_remainder([0.48, 0.36, 0.16], 5, 10) == (2, 2, 1)
    # the cap: exact 4, 1 with cap 3 → 3, 1, and the one left over goes to the other: 3, 2
    assert rt._largest_remainder([0.8, 0.2], 5, 3) == (3, 2)
    # already whole: nothing added
    assert rt._largest_remainder([0.5, 0.5], 4, 10) == (2, 2)


def test_a_histogram_is_checked_against_the_model() -> None:
    given = rt.Routing(kind="histogram", histogram=(6, 2), source="h.json")
    with pytest.raises(InputError, match="lists 2 experts; the model routes to 3"):
        given.check(4, 3, 2)
    with pytest.raises(InputError, match="sums to 8 token-slots; 6 tokens × top-1 of 2 experts"):
        given.check(6, 2, 1)  # 6 · 1 = 6 slots, not 8
    with pytest.raises(InputError, match="gives an expert 6 token-slots, more than the 4"):
        given.check(4, 2, 2)  # 4 · 2 = 8 slots as given, but 6 > 4 tokens
    # 6 tokens · top-1 of 2 = 6 slots = 4 + 2, the busiest 4 ≤ 6: accepted
    rt.Routing(kind="histogram", histogram=(4, 2), source="h").check(6, 2, 1)
    # the busiest exactly the tokens: accepted (each of the 4 tokens chose it once)
    rt.Routing(kind="histogram", histogram=(4, 4), source="h").check(4, 2, 2)


def test_a_skew_is_checked_against_top_k_of_e() -> None:
    # share (1 + S) · k / E: S = 1, k = 2, E = 4 → 2 · 2 / 4 = 1, every token: accepted
    rt.Routing(kind="skew", skew=1.0).check(10, 4, 2)
    # S = 1.5 → 2.5 · 2 / 4 = 125% > 1; at most 4 / 2 − 1 = 1
    with pytest.raises(InputError, match=r"gives expert 0 125% of the tokens.*at most 1$"):
        rt.Routing(kind="skew", skew=1.5).check(10, 4, 2)
    rt.BALANCED.check(10, 4, 2)  # balanced is always accepted


def test_the_summary_states_the_assumption_and_its_counts() -> None:
    tail = "token-slots per expert 3, 3, 2, 2 (5 tokens × top-2 of 4)"  # 10 slots: _even
    assert rt.BALANCED.describe(5, 4, 2) == f"balanced (tokens · k / E each): {tail}"
    given = rt.Routing(kind="histogram", histogram=(3, 3, 2, 2), source="h.json")
    assert given.describe(5, 4, 2) == f"histogram from h.json: {tail}"
    assert rt.Routing(kind="skew", skew=0.5).describe(12, 4, 2) == (
        "skew 0.5: expert 0 gets 1.5× the balanced share; token-slots per expert 9, 5, 5, 5 "
        "(12 tokens × top-2 of 4)")  # 24 slots: first 1.5 · 6 = 9, rest 15 / 3
    # nine experts: eight shown, then an ellipsis; 1,000 tokens · top-9 = 9,000 slots, 1,000 each
    assert rt.BALANCED.describe(1000, 9, 9) == (
        "balanced (tokens · k / E each): token-slots per expert 1,000, 1,000, 1,000, 1,000, "
        "1,000, 1,000, 1,000, 1,000, … (1,000 tokens × top-9 of 9)")


def test_skew_is_parsed_from_its_text() -> None:
    assert rt.resolve_routing(" Skew= 0.5 ") == rt.Routing(kind="skew", skew=0.5)
    assert rt.resolve_routing("skew=0") is rt.BALANCED
    assert rt.resolve_routing(" BALANCED ") is rt.BALANCED
    assert rt.resolve_routing("") is rt.BALANCED
    for bad in ("skew=-0.5", "skew=x", "skew=inf", "skew=nan"):
        with pytest.raises(InputError, match="takes a number S"):
            rt.resolve_routing(bad)


def test_routing_of_a_config() -> None:
    assert rt.routing(ModelSource("m", "config", "transformers", "m", hf_config={
        "num_experts": 8, "top_k": 2})) == (8, 2)
    assert rt.routing(ModelSource("m", "config", "transformers", "m", hf_config={
        "n_routed_experts": 2, "moe_topk": 2})) == (2, 2)  # k = E: allowed
    for config in ({"num_experts": 8}, {"num_experts": 1, "top_k": 1},
                   {"num_experts": 4, "top_k": 5}, {"num_experts": 4, "top_k": 0},
                   {"num_experts": "8", "top_k": 2}, {}):
        assert rt.routing(ModelSource("m", "config", "transformers", "m",
                                      hf_config=config)) is None


def test_the_reference_preset_routes_by_its_moe() -> None:
    source = ModelSource("tiny-moe", "preset", "reference", "tiny-moe",
                         config=get_preset("tiny-moe"))
    assert rt.routing(source) == (6, 2)  # tiny-moe: 6 experts, top-2
    dense = ModelSource("tiny", "preset", "reference", "tiny", config=get_preset("tiny"))
    assert rt.routing(dense) is None


def test_a_routing_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text("[3, 0, 1]")
    routing = rt.resolve_routing(str(path))
    assert routing == rt.Routing(kind="histogram", histogram=(3, 0, 1), source=str(path))
    for bad in ("[]", "[1.5]", "[true]", "[-1]", "{}", "[0, 0]"):
        path.write_text(bad)
        with pytest.raises(InputError):
            rt.resolve_routing(str(path))
    with pytest.raises(InputError, match="JSON file of counts"):
        rt.resolve_routing(str(tmp_path / "missing.json"))


def test_two_experts_are_skewed_too() -> None:
    # 6 tokens · top-1 = 6 slots over 2: balanced 3; first round(1.5 · 3) = round(4.5) = 4
    # (round half to even), the other 6 − 4 = 2; balanced would be 3, 3
    assert rt.Routing(kind="skew", skew=0.5).counts(6, 2, 1) == (4, 2)


def test_eight_experts_are_all_shown() -> None:
    # 8 tokens · top-1 over 8: 1 each, all eight shown, no ellipsis
    assert rt.BALANCED.describe(8, 8, 1).endswith(
        "expert 1, 1, 1, 1, 1, 1, 1, 1 (8 tokens × top-1 of 8)")


def test_a_skew_of_two_equals_signs_is_refused() -> None:
    # the figure is all after the first "=": "0.5=1" is no number
    with pytest.raises(InputError, match=r"got '0\.5=1'"):
        rt.resolve_routing("skew=0.5=1")


def test_the_routing_files_errors_name_it(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    with pytest.raises(InputError, match=r"routing histogram .*h\.json does not exist"):
        rt.resolve_routing(str(path))
    path.write_text("[1," + " " * (1 << 20))  # past 1 MiB: refused before it is parsed
    with pytest.raises(InputError, match="at most 1"):
        rt.resolve_routing(str(path))
    path.write_text("[1,")  # bad JSON: the error names the file
    with pytest.raises(ConfigError, match=r"h\.json: not valid JSON"):
        rt.resolve_routing(str(path))
    for bad in ("5", "[]"):  # a number, an empty list: no list of whole numbers
        path.write_text(bad)
        with pytest.raises(InputError, match="a routing file holds a JSON list"):
            rt.resolve_routing(str(path))


def test_the_most_experts_a_file_may_list(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(str([1] * rt.MAX_EXPERTS))  # 65,536 counts: at the limit, accepted
    assert len(rt.resolve_routing(str(path)).histogram) == 1 << 16
    path.write_text(str([1] * (rt.MAX_EXPERTS + 1)))
    with pytest.raises(InputError, match="lists 65,537 experts"):
        rt.resolve_routing(str(path))


def test_top_1_routing_is_a_mixture_too() -> None:
    # one expert per token (Switch-style) of 8: still a mixture
    assert rt.routing(ModelSource("m", "config", "transformers", "m", hf_config={
        "num_local_experts": 8, "num_experts_per_tok": 1})) == (8, 1)
