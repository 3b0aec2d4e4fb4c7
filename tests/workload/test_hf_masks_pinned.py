"""transformers' mask questions on fake tensors, pinned against a stand-in ``masking_utils``
that notes how it is asked (issue 42's mutation run of ``tensorledger.workload.hf_masks``; the
real transformers is exercised by tests/workload/test_target_hf.py, too slow to run per mutant).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tensorledger.workload.hf_masks import (
    NO_PACKING_ASSUMED,
    NO_PADDING_ASSUMED,
    _is_fake,
    padding_as_given,
)


class _Masking(types.ModuleType):
    """A ``transformers.masking_utils`` whose functions note each call."""

    def __init__(self, packed: bool = True, sdpa: bool = True) -> None:
        super().__init__("transformers.masking_utils")
        self.asked: list[tuple[Any, ...]] = []
        self.summed: list[tuple[int, ...]] = []
        self.found: list[tuple[int, ...]] = []
        if sdpa:
            self._ignore_causal_mask_sdpa = self._sdpa
        if packed:
            self.find_packed_sequence_indices = self._packed

    def _sdpa(self, padding_mask: Any, q_length: int, kv_length: int, *args: Any,
              **kwargs: Any) -> int:
        self.asked.append((padding_mask, q_length, kv_length, args, kwargs))
        return 7  # truthy, not True: the answer is made a bool

    def fast_all(self, tensor: torch.Tensor) -> torch.Tensor:
        self.summed.append(tuple(tensor.shape))
        return tensor.sum() == tensor.numel()

    def _packed(self, position_ids: torch.Tensor) -> torch.Tensor | None:
        self.found.append(tuple(position_ids.shape))
        return position_ids + 0  # stands for the tracing branch's mask: the ids' shape


def _install(monkeypatch: pytest.MonkeyPatch, masking: types.ModuleType) -> None:
    package = types.ModuleType("transformers")
    package.__spec__ = importlib.machinery.ModuleSpec("transformers", None)
    package.masking_utils = masking  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", package)
    monkeypatch.setitem(sys.modules, "transformers.masking_utils", masking)


def test_a_fake_padding_mask_is_taken_as_no_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking()
    original = masking._ignore_causal_mask_sdpa
    _install(monkeypatch, masking)
    notes: list[str] = ["before"]
    mask = torch.ones(2, 6, device="meta")
    with padding_as_given(notes):
        assert masking._ignore_causal_mask_sdpa is not original
        decide = masking._ignore_causal_mask_sdpa
        assert decide(mask, 6, 6, 0, 0, local_attention_size=4) is True  # bool(7)
        assert decide(mask, 1, 6, 3, 3) is True  # a question of one token asked again
    # asked as if no mask were given, every other argument passed on as it came
    assert masking.asked == [(None, 6, 6, (0, 0), {"local_attention_size": 4}),
                             (None, 1, 6, (3, 3), {})]
    assert notes == ["before", NO_PADDING_ASSUMED]  # noted once for two questions
    # kv = q (6 = 6), then q = 1; the mask's 6 columns no more than kv's 6: both summed
    assert masking.summed == [(2, 6), (2, 6)]
    assert masking._ignore_causal_mask_sdpa is original  # restored


@pytest.mark.parametrize(("q", "kv", "columns"), [
    (3, 6, 6),  # q neither 1 nor kv: a real run asks nothing of the mask
    (6, 6, 7),  # 7 columns > kv 6: a real run cuts the mask first (not recorded here)
    (1, 6, 7),
])
def test_the_mask_is_summed_only_where_a_real_run_sums_it(monkeypatch: pytest.MonkeyPatch,
                                                          q: int, kv: int,
                                                          columns: int) -> None:
    masking = _Masking()
    _install(monkeypatch, masking)
    with padding_as_given([]):
        masking._ignore_causal_mask_sdpa(torch.ones(2, columns, device="meta"), q, kv, 0, 0)
    assert masking.summed == []
    assert masking.asked == [(None, q, kv, (0, 0), {})]


def test_the_mask_is_summed_at_exactly_kv_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking()
    _install(monkeypatch, masking)
    with padding_as_given([]):
        masking._ignore_causal_mask_sdpa(torch.ones(3, 4, device="meta"), 1, 5, 0, 0)
    assert masking.summed == [(3, 4)]  # q = 1, 4 columns ≤ kv 5


def test_a_real_or_absent_mask_goes_to_transformers_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking()
    _install(monkeypatch, masking)
    notes: list[str] = []
    real = torch.ones(1, 4)
    with padding_as_given(notes):
        assert masking._ignore_causal_mask_sdpa(real, 4, 4, 0, 0) is True
        assert masking._ignore_causal_mask_sdpa(None, 4, 4, 1, 2, 3) is True
    assert masking.asked[0][0] is real
    assert masking.asked[1] == (None, 4, 4, (1, 2, 3), {})
    assert notes == [] and masking.summed == []  # nothing assumed, nothing summed


def test_a_fake_tensor_of_fake_tensor_mode_counts_as_fake(
        monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking()
    _install(monkeypatch, masking)
    notes: list[str] = []
    with FakeTensorMode():
        mask = torch.ones(2, 3)  # a FakeTensor on the cpu: not meta
    with padding_as_given(notes):
        masking._ignore_causal_mask_sdpa(mask, 3, 3, 0, 0)
    assert masking.asked[0][0] is None and notes == [NO_PADDING_ASSUMED]


def test_fake_position_ids_are_taken_as_unpacked(monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking()
    original = masking.find_packed_sequence_indices
    _install(monkeypatch, masking)
    notes: list[str] = []
    fake = torch.zeros(2, 5, dtype=torch.long, device="meta")
    with padding_as_given(notes):
        find = masking.find_packed_sequence_indices
        assert find(fake) is None and find(fake) is None
        real = torch.tensor([[0, 1, 2]])
        assert torch.equal(find(real), real)  # real ids: transformers' own answer
    assert notes == [NO_PACKING_ASSUMED]  # once for two fake questions
    assert masking.found == [(2, 5), (2, 5), (1, 3)]  # each asked of transformers
    assert masking.find_packed_sequence_indices is original


def test_fake_position_ids_whose_question_finds_none(monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking()
    masking.find_packed_sequence_indices = lambda ids: None  # one sequence a row
    _install(monkeypatch, masking)
    with padding_as_given([]):
        assert masking.find_packed_sequence_indices(torch.zeros(1, 2, device="meta")) is None


def test_a_transformers_without_packing_keeps_only_the_mask_question(
        monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking(packed=False)
    _install(monkeypatch, masking)
    with padding_as_given([]):
        assert not hasattr(masking, "find_packed_sequence_indices")
        masking._ignore_causal_mask_sdpa(torch.ones(1, 2, device="meta"), 2, 2, 0, 0)
    assert masking.asked == [(None, 2, 2, (0, 0), {})]
    assert not hasattr(masking, "find_packed_sequence_indices")


def test_a_transformers_without_the_mask_question_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    masking = _Masking(sdpa=False)
    original = masking.find_packed_sequence_indices
    _install(monkeypatch, masking)
    notes: list[str] = []
    with padding_as_given(notes):
        assert not hasattr(masking, "_ignore_causal_mask_sdpa")
        assert masking.find_packed_sequence_indices is original
    assert notes == []


def test_without_transformers_nothing_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # find_spec: not installed
    notes: list[str] = []
    with padding_as_given(notes):
        pass
    assert notes == []


def test_fake_means_a_fake_or_meta_tensor() -> None:
    with FakeTensorMode():
        fake = torch.ones(1)
    assert _is_fake(fake) is True and _is_fake(torch.ones(1, device="meta")) is True
    assert _is_fake(torch.ones(1)) is False
    assert _is_fake([[0, 1]]) is False  # no tensor at all (no is_meta): not fake
