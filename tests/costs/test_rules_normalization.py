"""One test per normalisation, softmax and negative-log-likelihood rule.

Norms run over x (3, 5, 7) normalised over the last axis: n = 105 elements, 15 rows; batch and
group norms over (N 2, C 6, L 5): n = 60.  Per-element costs (see costs/normalization.py):
layer norm 5 + weight 1 + bias 1, backward 8 + weight 2 + bias 1; RMS norm 3 + weight 1,
backward 6 + weight 2; softmax 5, its backward 4.
"""

from __future__ import annotations

import pytest
import torch

from tests.costs.rules_support import aten, direct, meta, record_op, rule

F32 = 4
SHAPE = (3, 5, 7)
N = 3 * 5 * 7  # 105
ROWS = 3 * 5  # one mean and one rstd per row


@pytest.mark.parametrize(("weight", "bias", "per_element"), [
    (True, True, 7), (True, False, 6), (False, True, 6), (False, False, 5)])
def test_rule_aten_native_layer_norm(weight: bool, bias: bool, per_element: int) -> None:
    # (input, normalized_shape, weight, bias, eps)
    w, b = (meta(7) if weight else None), (meta(7) if bias else None)
    record = record_op("aten.native_layer_norm",
                       lambda: aten.native_layer_norm(meta(*SHAPE), [7], w, b, 1e-5))
    assert record.flops == per_element * N  # e.g. 7 · 105 = 735
    assert record.bytes_read == F32 * (N + 7 * weight + 7 * bias)  # 420 + 28 + 28 = 476
    assert record.bytes_written == F32 * (N + 2 * ROWS) == 540  # output, mean, rstd
    assert record.category == "normalization"


@pytest.mark.parametrize(("mask", "weight", "bias", "per_element"), [
    ([True, True, True], True, True, 8 + 2 + 1),
    ([True, False, False], True, True, 8),       # frozen weight and bias
    ([False, True, True], True, True, 2 + 1),    # the first layer: no input gradient
    ([True, True, True], False, True, 8 + 1),    # no weight: no weight gradient
    ([True, True, True], True, False, 8 + 2),    # no bias: no bias gradient
])
def test_rule_aten_native_layer_norm_backward(mask: list[bool], weight: bool, bias: bool,
                                              per_element: int) -> None:
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    w, b = (meta(7) if weight else None), (meta(7) if bias else None)
    mean, rstd = meta(3, 5, 1), meta(3, 5, 1)
    record = record_op("aten.native_layer_norm_backward", lambda: (
        aten.native_layer_norm_backward(meta(*SHAPE), meta(*SHAPE), [7], mean, rstd, w, b,
                                        mask)))
    assert record.flops == per_element * N  # e.g. 11 · 105 = 1155
    # grad_out, input, mean, rstd (+ weight, bias)
    assert record.bytes_read == F32 * (2 * N + 2 * ROWS + 7 * weight + 7 * bias)
    assert record.category == "normalization"
    # the output mask absent: every gradient
    assert direct("aten.native_layer_norm_backward",
                  (meta(*SHAPE), meta(*SHAPE), [7], mean, rstd, meta(7), meta(7))) == 11 * N


# ---- batch and group norms: x (2, 6, 5), 60 elements, 6 channels, 3 groups

BN = 2 * 6 * 5  # 60


@pytest.mark.parametrize(("affine", "per_element"), [(True, 7), (False, 5)])
def test_rule_aten_native_group_norm(affine: bool, per_element: int) -> None:
    # (input, weight, bias, N, C, HxW, group, eps)
    w, b = (meta(6), meta(6)) if affine else (None, None)
    record = record_op("aten.native_group_norm", lambda: (
        aten.native_group_norm(meta(2, 6, 5), w, b, 2, 6, 5, 3, 1e-5)))
    assert record.flops == per_element * BN  # 7 · 60 = 420 or 5 · 60 = 300
    assert record.bytes_read == F32 * (BN + 12 * affine)
    assert record.bytes_written == F32 * (BN + 2 * 2 * 3)  # output, mean and rstd per group
    assert record.category == "normalization"
    # weight without bias: 6 per element
    assert direct("aten.native_group_norm", (meta(2, 6, 5), meta(6), None, 2, 6, 5, 3)) == 360


def _batch_norm_args(affine: bool) -> tuple[torch.Tensor | None, ...]:
    w, b = (meta(6), meta(6)) if affine else (None, None)
    return meta(2, 6, 5), w, b, meta(6), meta(6)  # input, weight, bias, running mean and var


@pytest.mark.parametrize(("affine", "per_element"), [(True, 7), (False, 5)])
def test_rule_aten_native_batch_norm(affine: bool, per_element: int) -> None:
    args = _batch_norm_args(affine)
    record = record_op("aten.native_batch_norm",
                       lambda: aten.native_batch_norm(*args, True, 0.1, 1e-5))
    assert record.flops == per_element * BN
    # input, weight and bias, running mean and var (updated in place, so also written)
    assert record.bytes_read == F32 * (BN + 12 * affine + 12)
    assert record.category == "normalization"
    assert direct("aten.native_batch_norm", (args[0], None, meta(6))) == 6 * BN  # bias only


@pytest.mark.parametrize(("affine", "per_element"), [(True, 7), (False, 5)])
def test_rule_aten__native_batch_norm_legit(affine: bool, per_element: int) -> None:
    args = _batch_norm_args(affine)
    record = record_op("aten._native_batch_norm_legit",
                       lambda: aten._native_batch_norm_legit(*args, True, 0.1, 1e-5))
    assert record.flops == per_element * BN
    assert record.bytes_read == F32 * (BN + 12 * affine + 12)
    assert record.category == "normalization"


@pytest.mark.parametrize(("affine", "per_element"), [(True, 7), (False, 5)])
def test_rule_aten__native_batch_norm_legit_no_training(affine: bool, per_element: int) -> None:
    args = _batch_norm_args(affine)
    record = record_op("aten._native_batch_norm_legit_no_training",
                       lambda: aten._native_batch_norm_legit_no_training(*args, 0.1, 1e-5))
    assert record.flops == per_element * BN
    assert record.bytes_read == F32 * (BN + 12 * affine + 12)
    assert record.category == "normalization"


MASKS = [([True, True, True], 8 + 2 + 1), ([True, False, False], 8), ([False, True, True], 3),
         ([False, False, False], 0)]


@pytest.mark.parametrize(("mask", "per_element"), MASKS)
def test_rule_aten_native_batch_norm_backward(mask: list[bool], per_element: int) -> None:
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
    #  output_mask)
    def step(weight: torch.Tensor | None) -> object:
        return aten.native_batch_norm_backward(meta(2, 6, 5), meta(2, 6, 5), weight, meta(6),
                                               meta(6), meta(6), meta(6), True, 1e-5, mask)

    record = record_op("aten.native_batch_norm_backward", lambda: step(meta(6)))
    assert record.flops == per_element * BN  # e.g. 11 · 60 = 660
    assert record.bytes_read == F32 * (2 * BN + 5 * 6)  # grad, input, weight and four stats
    assert record.category == "normalization"
    # no affine weight: only the input gradient, whatever the mask asks
    record = record_op("aten.native_batch_norm_backward", lambda: step(None))
    assert record.flops == 8 * mask[0] * BN


@pytest.mark.parametrize(("mask", "per_element"), MASKS)
def test_rule_aten_native_group_norm_backward(mask: list[bool], per_element: int) -> None:
    # (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
    def step(weight: torch.Tensor | None) -> object:
        return aten.native_group_norm_backward(meta(2, 6, 5), meta(2, 6, 5), meta(2, 3),
                                               meta(2, 3), weight, 2, 6, 5, 3, mask)

    record = record_op("aten.native_group_norm_backward", lambda: step(meta(6)))
    assert record.flops == per_element * BN
    assert record.bytes_read == F32 * (2 * BN + 2 * 6 + 6)  # grad, input, mean, rstd, weight
    assert record.category == "normalization"
    record = record_op("aten.native_group_norm_backward", lambda: step(None))
    assert record.flops == 8 * mask[0] * BN


# ---- RMS norm

@pytest.mark.parametrize(("weight", "per_element"), [(True, 4), (False, 3)])
def test_rule_aten__fused_rms_norm(weight: bool, per_element: int) -> None:
    # (input, normalized_shape, weight, eps); on meta and CPU the op decomposes before the
    # dispatcher shows it (CUDA runs it fused), so the rule is called directly
    w = meta(7) if weight else None
    assert direct("aten._fused_rms_norm", (meta(*SHAPE), [7], w, 1e-5)) == per_element * N
    assert (rule("aten._fused_rms_norm").category, rule("aten._fused_rms_norm").moves) == (
        "normalization", "io")  # 4 · 105 = 420 or 3 · 105 = 315


def test_rule_aten_rms_norm() -> None:
    # a composite (the dispatcher shows its parts); the rule is the fused kernel's
    x = meta(*SHAPE)
    assert direct("aten.rms_norm", (x, [7], meta(7), 1e-5)) == 4 * N == 420
    assert direct("aten.rms_norm", (x, [7], None, 1e-5)) == 3 * N == 315
    assert direct("aten.rms_norm", (x, [7])) == 3 * N
    assert (rule("aten.rms_norm").category, rule("aten.rms_norm").moves) == (
        "normalization", "io")


@pytest.mark.parametrize(("mask", "weight", "per_element"), [
    ([True, True], True, 6 + 2), ([True, False], True, 6), ([False, True], True, 2),
    ([True, True], False, 6)])
def test_rule_aten__fused_rms_norm_backward(mask: list[bool], weight: bool,
                                           per_element: int) -> None:
    # (grad_out, input, normalized_shape, rstd, weight, output_mask)
    w = meta(7) if weight else None
    record = record_op("aten._fused_rms_norm_backward", lambda: (
        aten._fused_rms_norm_backward(meta(*SHAPE), meta(*SHAPE), [7], meta(3, 5, 1), w, mask)))
    assert record.flops == per_element * N  # e.g. 8 · 105 = 840
    assert record.bytes_read == F32 * (2 * N + ROWS + 7 * weight)
    assert record.category == "normalization"
    assert direct("aten._fused_rms_norm_backward",
                  (meta(*SHAPE), meta(*SHAPE), [7], meta(3, 5, 1), meta(7))) == 8 * N


# ---- softmax: 5 per element forward, 4 backward, over x (3, 5, 7)

def test_rule_aten__softmax() -> None:
    record = record_op("aten._softmax", lambda: aten._softmax(meta(*SHAPE), -1, False))
    assert record.flops == 5 * N == 525
    assert (record.bytes_read, record.bytes_written) == (F32 * N, F32 * N)
    assert record.category == "normalization"


def test_rule_aten__safe_softmax() -> None:
    record = record_op("aten._safe_softmax", lambda: aten._safe_softmax(meta(*SHAPE), -1))
    assert record.flops == 5 * N == 525
    assert (record.bytes_read, record.bytes_written) == (F32 * N, F32 * N)
    assert record.category == "normalization"


def test_rule_aten__log_softmax() -> None:
    record = record_op("aten._log_softmax", lambda: aten._log_softmax(meta(*SHAPE), -1, False))
    assert record.flops == 5 * N == 525
    assert (record.bytes_read, record.bytes_written) == (F32 * N, F32 * N)
    assert record.category == "normalization"


def test_rule_aten__softmax_backward_data() -> None:
    record = record_op("aten._softmax_backward_data", lambda: aten._softmax_backward_data(
        meta(*SHAPE), meta(*SHAPE), -1, torch.float32))
    assert record.flops == 4 * N == 420
    assert (record.bytes_read, record.bytes_written) == (F32 * 2 * N, F32 * N)
    assert record.category == "normalization"


def test_rule_aten__log_softmax_backward_data() -> None:
    record = record_op("aten._log_softmax_backward_data", lambda: (
        aten._log_softmax_backward_data(meta(*SHAPE), meta(*SHAPE), -1, torch.float32)))
    assert record.flops == 4 * N == 420
    assert (record.bytes_read, record.bytes_written) == (F32 * 2 * N, F32 * N)
    assert record.category == "normalization"


# ---- negative log-likelihood: one add per target; 5 targets over 7 classes

def _targets(*shape: int) -> torch.Tensor:
    return meta(*shape, dtype=torch.long)


def test_rule_aten_nll_loss_forward() -> None:
    # (self (5, 7) log-probabilities, target (5,), weight, reduction, ignore_index)
    record = record_op("aten.nll_loss_forward", lambda: aten.nll_loss_forward(
        meta(5, 7), _targets(5), None, 1, -100))
    assert record.flops == 5  # one per target, not per log-probability (35)
    assert record.bytes_read == F32 * 5 * 7 + 8 * 5 == 180  # a gather would read less
    assert record.category == "reduction"


def test_rule_aten_nll_loss2d_forward() -> None:
    # self (2, 7, 3, 4), target (2, 3, 4): 24 targets
    record = record_op("aten.nll_loss2d_forward", lambda: aten.nll_loss2d_forward(
        meta(2, 7, 3, 4), _targets(2, 3, 4), None, 1, -100))
    assert record.flops == 2 * 3 * 4 == 24
    assert record.bytes_read == F32 * 2 * 7 * 3 * 4 + 8 * 24 == 864
    assert record.category == "reduction"


def test_rule_aten_nll_loss_backward() -> None:
    # (grad_output, self, target, weight, reduction, ignore_index, total_weight)
    record = record_op("aten.nll_loss_backward", lambda: aten.nll_loss_backward(
        meta(), meta(5, 7), _targets(5), None, 1, -100, meta()))
    assert record.flops == 5  # one write per target, not per element of self (35)
    assert record.bytes_written == F32 * 5 * 7 == 140
    assert record.category == "reduction"


def test_rule_aten_nll_loss2d_backward() -> None:
    record = record_op("aten.nll_loss2d_backward", lambda: aten.nll_loss2d_backward(
        meta(), meta(2, 7, 3, 4), _targets(2, 3, 4), None, 1, -100, meta()))
    assert record.flops == 24
    assert record.bytes_written == F32 * 2 * 7 * 3 * 4 == 672
    assert record.category == "reduction"
