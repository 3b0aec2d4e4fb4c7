"""One test per fused-optimizer rule, with every term the rule reads switched on and off.

Two parameter tensors, (3, 5) and (7,): 22 elements.  Per element (costs/optimizer.py):
AdamW 14; Adam 12, + 2 with coupled weight decay; SGD 2, + 2 weight decay, + 2 momentum,
+ 2 Nesterov; Adagrad 6, + 2 weight decay.
"""

from __future__ import annotations

import pytest
import torch

from tests.costs.rules_support import aten, record_op

SHAPES = ((3, 5), (7,))
ELEMENTS = 3 * 5 + 7  # 22
F32 = 4


def tensors(device: str) -> list[torch.Tensor]:
    return [torch.zeros(s, device=device) for s in SHAPES]


def steps(device: str) -> list[torch.Tensor]:
    return [torch.ones((), device=device) for _ in SHAPES]


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_rule_aten__fused_adamw_(weight_decay: float) -> None:
    # decoupled decay is part of AdamW's 14, with or without a weight_decay value
    record = record_op("aten._fused_adamw_", lambda: aten._fused_adamw_(
        tensors("meta"), tensors("meta"), tensors("meta"), tensors("meta"), [], steps("meta"),
        lr=0.1, beta1=0.9, beta2=0.99, weight_decay=weight_decay, eps=1e-8, amsgrad=False,
        maximize=False))
    assert record.flops == 14 * ELEMENTS == 308
    # read: params, grads, both moments (4 · 22 fp32 values) and the two step counters
    assert record.bytes_read == F32 * (4 * ELEMENTS + 2) == 360
    assert record.bytes_written == F32 * 4 * ELEMENTS == 352  # written in place: 4 lists
    assert record.category == "elementwise"


@pytest.mark.parametrize(("weight_decay", "per_element"), [(0.0, 12), (0.1, 12 + 2)])
def test_rule_aten__fused_adam_(weight_decay: float, per_element: int) -> None:
    record = record_op("aten._fused_adam_", lambda: aten._fused_adam_(
        tensors("meta"), tensors("meta"), tensors("meta"), tensors("meta"), [], steps("meta"),
        lr=0.1, beta1=0.9, beta2=0.99, weight_decay=weight_decay, eps=1e-8, amsgrad=False,
        maximize=False))
    assert record.flops == per_element * ELEMENTS  # 264 or 308
    assert record.bytes_read == F32 * (4 * ELEMENTS + 2) == 360
    assert record.bytes_written == F32 * 4 * ELEMENTS == 352
    assert record.category == "elementwise"


@pytest.mark.parametrize(("weight_decay", "momentum", "nesterov", "per_element"), [
    (0.0, 0.0, False, 2),
    (0.1, 0.0, False, 2 + 2),       # coupled decay g + λp
    (0.0, 0.9, False, 2 + 2),       # momentum μb + g
    (0.0, 0.9, True, 2 + 2 + 2),    # Nesterov g + μb on top
    (0.1, 0.9, True, 2 + 2 + 2 + 2),
])
def test_rule_aten__fused_sgd_(weight_decay: float, momentum: float, nesterov: bool,
                               per_element: int) -> None:
    # CPU only (no meta kernel): small real tensors
    buffers = tensors("cpu") if momentum else []
    record = record_op("aten._fused_sgd_", lambda: aten._fused_sgd_(
        tensors("cpu"), tensors("cpu"), buffers, weight_decay=weight_decay, momentum=momentum,
        lr=0.1, dampening=0.0, nesterov=nesterov, maximize=False, is_first_step=False))
    assert record.flops == per_element * ELEMENTS  # 44, 88, 88, 132, 176
    lists = 3 if momentum else 2  # params, grads (+ momentum buffers)
    assert record.bytes_read == F32 * lists * ELEMENTS
    assert record.category == "elementwise"


@pytest.mark.parametrize(("weight_decay", "per_element"), [(0.0, 6), (0.1, 6 + 2)])
def test_rule_aten__fused_adagrad_(weight_decay: float, per_element: int) -> None:
    record = record_op("aten._fused_adagrad_", lambda: aten._fused_adagrad_(
        tensors("cpu"), tensors("cpu"), tensors("cpu"), steps("cpu"), lr=0.1, lr_decay=0.0,
        weight_decay=weight_decay, eps=1e-8, maximize=False))
    assert record.flops == per_element * ELEMENTS  # 132 or 176
    # params, grads, state sums and the two step counters
    assert record.bytes_read == F32 * (3 * ELEMENTS + 2) == 272
    assert record.category == "elementwise"


def test_terms_default_to_off_when_not_given() -> None:
    # a call that names no weight decay, momentum or Nesterov flag counts the base step only
    from tests.costs.rules_support import direct

    params = (tensors("meta"),)
    assert direct("aten._fused_adam_", params) == 12 * ELEMENTS
    assert direct("aten._fused_adamw_", params) == 14 * ELEMENTS
    assert direct("aten._fused_sgd_", params) == 2 * ELEMENTS
    assert direct("aten._fused_adagrad_", params) == 6 * ELEMENTS
