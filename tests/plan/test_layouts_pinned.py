"""The planner's one-line refusals pinned word for word: which rejection ``_why_none`` and
``_why_none_fixed`` name (the least memory, the first divisibility detail), and the figures
they print (bytes in GB by /1e9, the budget by ``:g``).  Every expected line is written out
by hand from the pieces the search would hand them."""

from __future__ import annotations

from tensorledger.hardware import get_hardware
from tensorledger.napkin.recipes import resolve_optimizer, resolve_precision
from tensorledger.napkin.transformer import get_preset
from tensorledger.plan import FixedDims, LayoutChoice, PlanSetup
from tensorledger.plan.layouts import _Tally, _why_none, _why_none_fixed

H100 = get_hardware("h100")
# 1,000,005,001 B / 1e9 = 1.000005001, which :g (6 significant digits) shows as 1.00001; the
# same bytes over 1,000,000,001 are 1.0000049999..., shown as 1
BUDGET = 1_000_005_001.0
WHERE = "tiny on 2 × h100-sxm"


def _setup() -> PlanSetup:
    return PlanSetup(get_preset("tiny"), H100, 2, 16, 4, resolve_precision("fp32"),
                     resolve_optimizer("adamw"), BUDGET)


ZERO3 = LayoutChoice(dp=2, tp=1, pp=1, zero=3, shard=2, micro_batch=2, accumulation=3,
                     checkpoint="full")
DDP = LayoutChoice(dp=2, tp=1, pp=1)


def _two_memory_rejections() -> _Tally:
    tally = _Tally()
    # 2e18 B kept first, then 1e18 B: the kept list is sorted, the least first
    tally.reject(DDP, "memory per rank", "more", 2e18)
    tally.reject(ZERO3, "memory per rank", "less", 1e18)
    return tally


def test_no_layout_names_the_least_memory_rejection_and_the_budget() -> None:
    tally = _two_memory_rejections()
    # 1e18 / 1e9 = 1,000,000,000.0 GB (over 1,000,000,001 it would be 999,999,999.0)
    assert _why_none(_setup(), tally, None) == (
        f"{WHERE} fits in no layout: memory per rank binds, the least is 1000000000.0 GB "
        "(DP 2 (ZeRO-3 × 2), checkpoint full) against a budget of 1.00001 GB; use more "
        "devices, a smaller model or shorter sequences")


def test_no_layout_under_divisibility_names_the_first_detail_kept() -> None:
    tally = _Tally()
    tally.reject(DDP, "divisibility", "tp 16 spans nodes (8 devices per node)")
    tally.reject(DDP, "divisibility", "pp 4 exceeds the 2 layers")
    assert _why_none(_setup(), tally, None) == (
        f"{WHERE}: divisibility binds, no layout divides the model (tp 16 spans nodes (8 "
        "devices per node)); use a device count with divisors the model's heads and layers "
        "accept")


def test_no_layout_without_any_rejection_says_no_layout() -> None:
    assert _why_none(_setup(), _Tally(), None) == (
        f"{WHERE}: divisibility binds, no layout divides the model (no layout); use a device "
        "count with divisors the model's heads and layers accept")


def test_a_fixed_search_names_its_dimensions_and_the_least_memory() -> None:
    tally = _two_memory_rejections()
    fixed = FixedDims(zero=3)
    # through _why_none too: a given FixedDims hands over to _why_none_fixed with `where`
    assert _why_none(_setup(), tally, None, fixed=fixed) == (
        f"{WHERE} with ZeRO-3 (fixed by you) does not fit: memory per rank 1000000000.0 GB "
        "(DP 2 (ZeRO-3 × 2), micro-batch 2 × 3, checkpoint full) against a budget of 1.00001 "
        "GB; fix fewer dimensions or ones that shard more")


def test_a_fixed_search_names_the_first_divisibility_detail() -> None:
    tally = _Tally()
    tally.reject(DDP, "divisibility", "pp 4 exceeds the 2 layers")
    assert _why_none_fixed(_setup(), tally, FixedDims(pp=4), WHERE) == (
        f"{WHERE} with PP 4 (fixed by you): divisibility binds, pp 4 exceeds the 2 layers; "
        "fix fewer dimensions or others")


def test_a_fixed_search_names_the_global_batch_before_divisibility() -> None:
    tally = _Tally()
    tally.reject(DDP, "divisibility", "pp 4 exceeds the 2 layers")
    tally.reject(DDP, "global batch", "3 sequences is not a multiple of 2")
    assert _why_none_fixed(_setup(), tally, FixedDims(dp=2), WHERE) == (
        f"{WHERE} with DP 2 (fixed by you): global batch binds, 3 sequences is not a multiple "
        "of 2; fix fewer dimensions or others")


def test_a_fixed_search_with_nothing_rejected() -> None:
    assert _why_none_fixed(_setup(), _Tally(), FixedDims(dp=2), WHERE) == (
        f"{WHERE} with DP 2 (fixed by you): no layout has these dimensions; fix fewer of them "
        "or others")


def test_one_rejection_is_kept_of_each_kind_numbers_aside() -> None:
    tally = _Tally()
    tally.reject(DDP, "divisibility", "tp 16 spans nodes (8 devices per node)")
    tally.reject(DDP, "divisibility", "tp 32 spans nodes (8 devices per node)")
    # a detail whose number is already a "#" is the same kind as well
    tally.reject(DDP, "divisibility", "tp # spans nodes (# devices per node)")
    tally.reject(DDP, "divisibility", "pp 4 exceeds the 2 layers")
    assert [r.detail for r in tally.kept["divisibility"]] == [
        "tp 16 spans nodes (8 devices per node)", "pp 4 exceeds the 2 layers"]
    assert tally.counts["divisibility"] == 4


def test_memory_rejections_keep_the_five_least() -> None:
    tally = _Tally()
    for gb in (10, 20, 30, 40, 50):  # five kept: the list is full (KEPT_REJECTIONS = 5)
        tally.reject(DDP, "memory per rank", f"{gb} GB", gb * 1e9)
    # 45 GB < the largest kept, 50 GB: it goes in and 50 GB goes out; it is above the
    # second kept (20 GB) and the second largest (40 GB), so a comparison with either of
    # those, or with 0, would leave 50 GB in
    tally.reject(DDP, "memory per rank", "45 GB", 45e9)
    # 60 GB is above every kept one: counted, not kept
    tally.reject(DDP, "memory per rank", "60 GB", 60e9)
    assert [r.memory_bytes for r in tally.kept["memory per rank"]] == [
        10e9, 20e9, 30e9, 40e9, 45e9]
    assert [r.detail for r in tally.kept["memory per rank"]] == [
        "10 GB", "20 GB", "30 GB", "40 GB", "45 GB"]
    assert tally.counts["memory per rank"] == 7  # 5 + 1 + 1
    assert tally.searched == 7


def test_a_memory_rejection_of_no_bytes_sorts_first() -> None:
    tally = _Tally()
    tally.reject(DDP, "memory per rank", "half a byte", 0.5)
    tally.reject(ZERO3, "memory per rank", "no bytes", 0.0)
    # 0 B < 0.5 B: the least first, a zero read as zero (not as a byte or more)
    assert [r.memory_bytes for r in tally.kept["memory per rank"]] == [0.0, 0.5]


def test_five_kinds_of_other_rejection_are_kept_and_no_sixth() -> None:
    tally = _Tally()
    details = ["tp 16 spans nodes", "pp 4 exceeds the layers", "cp 3 splits no sequence",
               "ep 5 splits no expert", "heads 7 over tp", "vocab 9 over tp"]
    for detail in details:  # six kinds, numbers aside: each differs in its words
        tally.reject(DDP, "divisibility", detail)
    # KEPT_REJECTIONS = 5: the first five kept, all six counted
    assert [r.detail for r in tally.kept["divisibility"]] == details[:5]
    assert tally.counts["divisibility"] == 6
