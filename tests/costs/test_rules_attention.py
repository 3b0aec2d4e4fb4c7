"""One test per fused-attention rule: FLOPs (full and causal-halved), bytes and category.

Shapes: batch B = 2, query heads H = 6, key/value heads H_kv = 3 (grouped-query), S_q = 5,
S_k = 7, D_qk = 8, D_v = 4: every size differs, so a key length or value width read from the
query, or a (B, S, H, D) layout read as (B, H, S, D), changes the count.

Forward: scores 2·(B·H)·S_q·S_k·D_qk = 2·12·5·7·8 = 6720, P·V 2·12·5·7·4 = 3360: 10080.
Backward (scores recomputed): 6720 + dV 2·12·7·4·5 = 3360 + dP 2·12·5·7·4 = 3360
+ dQ 2·12·5·8·7 = 6720 + dK 2·12·7·8·5 = 6720: 26880 (2.67× here because D_v ≠ D_qk).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

from tensorledger.trace.records import OpRecord
from tests.costs.rules_support import aten, meta, record_op, record_with_oracle, rule

B, H, H_KV, S_Q, S_K, D, D_V = 2, 6, 3, 5, 7, 8, 4
FORWARD = 2 * 12 * 5 * 7 * 8 + 2 * 12 * 5 * 7 * 4
BACKWARD = 6720 + 3360 + 3360 + 6720 + 6720
BF16 = 2
QKV_BYTES = BF16 * (2 * 6 * 5 * 8 + 2 * 3 * 7 * 8 + 2 * 3 * 7 * 4)  # q 480, k 336, v 168 values


def test_counts_by_hand() -> None:
    assert FORWARD == 6720 + 3360 == 10080
    assert BACKWARD == 26880
    assert QKV_BYTES == 2 * (480 + 336 + 168) == 1968
    # torch's formulas, given (B, H, S, D) shapes, agree
    assert sdpa_flop_count((B, H, S_Q, D), (B, H_KV, S_K, D), (B, H_KV, S_K, D_V)) == FORWARD
    assert sdpa_backward_flop_count((B, H, S_Q, D_V), (B, H, S_Q, D), (B, H_KV, S_K, D),
                                    (B, H_KV, S_K, D_V)) == BACKWARD


def bhsd() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v laid out (B, H, S, D), as the sdpa kernels take them."""
    bf = torch.bfloat16
    return (meta(B, H, S_Q, D, dtype=bf), meta(B, H_KV, S_K, D, dtype=bf),
            meta(B, H_KV, S_K, D_V, dtype=bf))


def bshd() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v laid out (B, S, H, D), as the raw flash/efficient kernels take them."""
    bf = torch.bfloat16
    return (meta(B, S_Q, H, D, dtype=bf), meta(B, S_K, H_KV, D, dtype=bf),
            meta(B, S_K, H_KV, D_V, dtype=bf))


def grad_out(raw: bool = False) -> torch.Tensor:
    shape = (B, S_Q, H, D_V) if raw else (B, H, S_Q, D_V)
    return meta(*shape, dtype=torch.bfloat16)


def check(record: OpRecord, flops: int, causal: bool) -> None:
    assert record.flops == flops
    assert record.flops_causal_halved == (flops // 2 if causal else flops)
    assert record.category == "attention"


def check_causal_flag(op: str, args: tuple[Any, ...], index: int, name: str) -> None:
    """The rule reads the causal flag at ``index`` or by ``name``, and nowhere else."""
    causal = rule(op).causal
    assert causal is not None
    padded = [0] * 20
    padded[index] = True
    assert causal(padded, {}) is True
    padded[index] = False
    assert causal(padded, {}) is False
    assert causal(list(args)[:index], {name: True}) is True
    assert causal(list(args)[:index], {}) is False  # absent: not causal


# ---- the sdpa kernels: (B, H, S, D)

@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_flash_attention(causal: bool) -> None:
    record, oracle = record_with_oracle("aten._scaled_dot_product_flash_attention", lambda: (
        aten._scaled_dot_product_flash_attention(*bhsd(), 0.0, causal)))
    check(record, FORWARD, causal)
    assert oracle == FORWARD
    assert record.bytes_read == QKV_BYTES
    check_causal_flag("aten._scaled_dot_product_flash_attention", (), 4, "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_flash_attention_for_cpu(causal: bool) -> None:
    record = record_op("aten._scaled_dot_product_flash_attention_for_cpu", lambda: (
        aten._scaled_dot_product_flash_attention_for_cpu(*bhsd(), 0.0, causal)))
    check(record, FORWARD, causal)  # FlopCounterMode has no formula for the CPU kernel
    assert record.bytes_read == QKV_BYTES
    # out (B, H, S_q, D_v) bf16 and the fp32 log-sum-exp (B, H, S_q)
    assert record.bytes_written == BF16 * 2 * 6 * 5 * 8 + 4 * 2 * 6 * 5
    check_causal_flag("aten._scaled_dot_product_flash_attention_for_cpu", (), 4, "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_efficient_attention(causal: bool) -> None:
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal): the flag is at
    # 6; position 4 (compute_log_sumexp) is set here to catch a rule that reads it instead
    record, oracle = record_with_oracle("aten._scaled_dot_product_efficient_attention", lambda: (
        aten._scaled_dot_product_efficient_attention(*bhsd(), None, True, 0.0, causal)))
    check(record, FORWARD, causal)
    assert oracle == FORWARD
    assert record.bytes_read == QKV_BYTES
    check_causal_flag("aten._scaled_dot_product_efficient_attention", (), 6, "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_cudnn_attention(causal: bool) -> None:
    record, oracle = record_with_oracle("aten._scaled_dot_product_cudnn_attention", lambda: (
        aten._scaled_dot_product_cudnn_attention(*bhsd(), None, True, 0.0, causal)))
    check(record, FORWARD, causal)
    assert oracle == FORWARD
    check_causal_flag("aten._scaled_dot_product_cudnn_attention", (), 6, "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_fused_attention_overrideable(causal: bool) -> None:
    # (query, key, value, attn_bias, dropout_p, is_causal, ...)
    record = record_op("aten._scaled_dot_product_fused_attention_overrideable", lambda: (
        aten._scaled_dot_product_fused_attention_overrideable(*bhsd(), None, 0.0, causal)))
    check(record, FORWARD, causal)
    check_causal_flag("aten._scaled_dot_product_fused_attention_overrideable", (), 5,
                      "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_flash_attention_backward(causal: bool) -> None:
    q, k, v = bhsd()
    o = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)
    record, oracle = record_with_oracle("aten._scaled_dot_product_flash_attention_backward",
                                        lambda: aten._scaled_dot_product_flash_attention_backward(
        grad_out(), q, k, v, o[0], o[1], o[2], o[3], o[4], o[5], 0.0, causal, o[6], o[7]))
    check(record, BACKWARD, causal)
    assert oracle == BACKWARD
    check_causal_flag("aten._scaled_dot_product_flash_attention_backward", (), 11, "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_flash_attention_for_cpu_backward(causal: bool) -> None:
    q, k, v = bhsd()
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    record = record_op("aten._scaled_dot_product_flash_attention_for_cpu_backward", lambda: (
        aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out(), q, k, v, out, lse,
                                                                  0.0, causal)))
    check(record, BACKWARD, causal)
    check_causal_flag("aten._scaled_dot_product_flash_attention_for_cpu_backward", (), 7,
                      "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_efficient_attention_backward(causal: bool) -> None:
    q, k, v = bhsd()
    o = aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, causal)
    record, oracle = record_with_oracle(
        "aten._scaled_dot_product_efficient_attention_backward",
        lambda: aten._scaled_dot_product_efficient_attention_backward(
            grad_out(), q, k, v, None, o[0], o[1], o[2], o[3], 0.0, [True, True, True, False],
            causal))
    check(record, BACKWARD, causal)
    assert oracle == BACKWARD
    check_causal_flag("aten._scaled_dot_product_efficient_attention_backward", (), 11,
                      "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__scaled_dot_product_cudnn_attention_backward(causal: bool) -> None:
    q, k, v = bhsd()
    o = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal)
    record, oracle = record_with_oracle(
        "aten._scaled_dot_product_cudnn_attention_backward",
        lambda: aten._scaled_dot_product_cudnn_attention_backward(
            grad_out(), q, k, v, o[0], o[1], o[6], o[7], None, o[2], o[3], o[4], o[5], 0.0,
            causal))
    check(record, BACKWARD, causal)
    assert oracle == BACKWARD
    check_causal_flag("aten._scaled_dot_product_cudnn_attention_backward", (), 14, "is_causal")


# ---- the raw kernels: (B, S, H, D).  FlopCounterMode reads their dense inputs as (B, H, S, D)
# (and here refuses the grouped-query shapes), so its formula is applied to the transposed
# shapes as the oracle.

RAW_ORACLE = sdpa_flop_count((B, H, S_Q, D), (B, H_KV, S_K, D), (B, H_KV, S_K, D_V))
RAW_BACKWARD_ORACLE = sdpa_backward_flop_count((B, H, S_Q, D_V), (B, H, S_Q, D),
                                               (B, H_KV, S_K, D), (B, H_KV, S_K, D_V))


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__flash_attention_forward(causal: bool) -> None:
    # (query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    record = record_op("aten._flash_attention_forward", lambda: aten._flash_attention_forward(
        *bshd(), None, None, S_Q, S_K, 0.0, causal, False))
    check(record, FORWARD, causal)
    assert RAW_ORACLE == FORWARD
    assert record.bytes_read == QKV_BYTES
    check_causal_flag("aten._flash_attention_forward", (), 8, "is_causal")


@pytest.mark.parametrize("causal", [False, True])
def test_rule_aten__flash_attention_backward(causal: bool) -> None:
    q, k, v = bshd()
    o = aten._flash_attention_forward(q, k, v, None, None, S_Q, S_K, 0.0, causal, False)
    record = record_op("aten._flash_attention_backward", lambda: aten._flash_attention_backward(
        grad_out(raw=True), q, k, v, o[0], o[1], None, None, S_Q, S_K, 0.0, causal, o[3], o[4]))
    check(record, BACKWARD, causal)
    assert RAW_BACKWARD_ORACLE == BACKWARD
    check_causal_flag("aten._flash_attention_backward", (), 11, "is_causal")


@pytest.mark.parametrize(("mask_type", "causal"), [(0, False), (1, True), (2, True)])
def test_rule_aten__efficient_attention_forward(mask_type: int, causal: bool) -> None:
    # (query, key, value, bias, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    #  dropout_p, custom_mask_type, ...): mask type 1 is causal from the top left, 2 from the
    # bottom right; both are causal
    record = record_op("aten._efficient_attention_forward", lambda: (
        aten._efficient_attention_forward(*bshd(), None, None, None, S_Q, S_K, 0.0, mask_type,
                                          True)))
    check(record, FORWARD, causal)
    assert RAW_ORACLE == FORWARD
    assert record.bytes_read == QKV_BYTES
    by_name = rule("aten._efficient_attention_forward").causal
    assert by_name is not None and by_name([], {"custom_mask_type": mask_type}) is causal
    padded: list[object] = [None] * 12
    assert by_name(padded, {}) is False  # no mask type given: not causal
    padded[9] = mask_type
    assert by_name(padded, {}) is causal


@pytest.mark.parametrize(("mask_type", "causal"), [(0, False), (1, True), (2, True)])
def test_rule_aten__efficient_attention_backward(mask_type: int, causal: bool) -> None:
    q, k, v = bshd()
    o = aten._efficient_attention_forward(q, k, v, None, None, None, S_Q, S_K, 0.0, mask_type,
                                          True)
    record = record_op("aten._efficient_attention_backward", lambda: (
        aten._efficient_attention_backward(grad_out(raw=True), q, k, v, None, o[0], None, None,
                                           S_Q, S_K, o[1], 0.0, o[2], o[3], mask_type, False)))
    check(record, BACKWARD, causal)
    assert RAW_BACKWARD_ORACLE == BACKWARD
    by_name = rule("aten._efficient_attention_backward").causal
    assert by_name is not None and by_name([], {"custom_mask_type": mask_type}) is causal
