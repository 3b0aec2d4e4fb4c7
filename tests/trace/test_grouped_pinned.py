"""trace.grouped pinned: the output CUDA's ``_grouped_mm`` makes, on a CUDA build's padded
rows too (``torch.version.cuda`` set), and what its checks refuse, each by hand."""

from __future__ import annotations

import pytest
import torch

from tensorledger.trace.grouped import GroupedMMMode, _answers, grouped_mm_output


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _offs(groups: int) -> torch.Tensor:
    return torch.empty(groups, dtype=torch.int32, device="meta")


def test_a_cuda_build_pads_each_output_row_to_16_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    half = torch.float16
    # b column-major (its leading stride 8 fp16 = 16 bytes: aligned) with N = 12
    b = _meta(3, 12, 8, dtype=half).transpose(-1, -2)
    # (ΣM, K)·(G, K, N) → (10, 12) fp16: a row of 12 · 2 = 24 bytes padded to 32 = 16 elements
    out = grouped_mm_output(_meta(10, 8, dtype=half), b, _offs(3))
    assert (tuple(out.shape), out.stride(), out.dtype) == ((10, 12), (16, 1), half)
    # batched (G, M, K)·(G, K, N) → (3, 16, 12): rows of 16, a matrix of 16 · 16 = 256
    out = grouped_mm_output(_meta(3, 16, 8, dtype=half), b)
    assert (tuple(out.shape), out.stride()) == ((3, 16, 12), (256, 16, 1))
    assert out.device.type == "meta"  # on the operands' device
    # batched with N = 20 fp16 = 40 bytes: padded to 48, rows of 24 (M = 16 plays no part)
    wide = _meta(3, 20, 8, dtype=half).transpose(-1, -2)
    out = grouped_mm_output(_meta(3, 16, 8, dtype=half), wide)
    assert (tuple(out.shape), out.stride()) == ((3, 16, 20), (16 * 24, 24, 1))
    # 4 rows of N = 12 fp32: 48 bytes a row, no padding (the rows' count plays no part)
    out = grouped_mm_output(_meta(4, 8), _meta(3, 8, 12), _offs(3))
    assert (tuple(out.shape), out.stride()) == ((4, 12), (12, 1))
    # fp32: 12 · 4 = 48 bytes, already a multiple of 16: no padding
    out = grouped_mm_output(_meta(10, 8), _meta(3, 8, 12), _offs(3))
    assert out.stride() == (12, 1)
    # 9 fp32 = 36 bytes: padded to 48, 12 elements
    out = grouped_mm_output(_meta(10, 8), _meta(3, 9, 8).transpose(-1, -2), _offs(3))
    assert (tuple(out.shape), out.stride()) == ((10, 9), (12, 1))


def test_each_layout_s_shape_off_a_cuda_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    # (M, ΣK)·(ΣK, N) → (G, M, N): 2 groups, M = 4, N = 12
    out = grouped_mm_output(_meta(12, 4).t(), _meta(12, 12), _offs(2))
    assert (tuple(out.shape), out.stride()) == ((2, 4, 12), (48, 12, 1))
    # (G, M, K)·(K, ΣN) → (M, ΣN): M = 16, ΣN = 20
    out = grouped_mm_output(_meta(3, 16, 8), _meta(8, 20), _offs(3))
    assert tuple(out.shape) == (16, 20)
    # (ΣM, K)·(G, K, N) → (ΣM, N)
    assert tuple(grouped_mm_output(_meta(10, 8), _meta(3, 8, 20), _offs(3)).shape) == (10, 20)
    # out_dtype equal to mat_a's is accepted
    assert grouped_mm_output(_meta(10, 8), _meta(3, 8, 20), _offs(3),
                             out_dtype=torch.float32).dtype == torch.float32


@pytest.mark.parametrize(("a", "b", "offs", "message"), [
    # K: 8 against 12, batched and 2d-3d
    ((3, 16, 8), (3, 12, 20), None, "contraction dimension of mat_a and mat_b must match"),
    ((10, 8), (3, 6, 12), 3, "contraction dimension of mat_a and mat_b must match"),
    ((2, 3, 16, 8), (3, 8, 20), None, "mat_a and mat_b have to be 2 or 3d"),
    ((3, 16, 8), (2, 8, 20), None, "batched dimension has to match"),  # G: 3 against 2
    ((3, 16, 8), (8, 20), 2, "matrix batch sizes have to match"),  # 3 matrices, 2 offsets
    ((10, 8), (3, 8, 20), 2, "matrix batch sizes have to match"),  # 3 matrices, 2 offsets
    ((3, 16, 8), (3, 8, 20), 3,
     "Have to provide offsets if there is a 2d matrix, or no offset if both are 3d"),
    ((12, 4), (12, 12), None,
     "Have to provide offsets if there is a 2d matrix, or no offset if both are 3d"),
])
def test_what_cuda_refuses(a: tuple[int, ...], b: tuple[int, ...], offs: int | None,
                           message: str) -> None:
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        grouped_mm_output(_meta(*a), _meta(*b), None if offs is None else _offs(offs))


def test_offsets_strides_and_dtypes_cuda_refuses() -> None:
    a, b = _meta(10, 8), _meta(3, 8, 12)
    with pytest.raises(RuntimeError, match=r"^Offsets have to be 1D int32$"):
        grouped_mm_output(a, b, torch.empty(3, dtype=torch.int64, device="meta"))
    with pytest.raises(RuntimeError, match=r"^Offsets have to be 1D int32$"):
        grouped_mm_output(a, b, torch.empty(3, 1, dtype=torch.int32, device="meta"))
    # every other column: strides (16, 2), neither row- nor column-major
    with pytest.raises(RuntimeError, match=r"^Invalid strides/sizes, got \[16, 2\] for "
                       r"strides and \[10, 8\] for sizes of mat_a$"):
        grouped_mm_output(_meta(10, 16)[:, ::2], b, _offs(3))
    with pytest.raises(RuntimeError, match=r"for sizes of mat_b$"):
        grouped_mm_output(a, _meta(3, 8, 24)[..., ::2], _offs(3))
    # column-major with a leading stride of 10 fp32 = 40 bytes: no multiple of 16
    with pytest.raises(RuntimeError, match=
                       r"^mat_a: strides should be multiple of 16 bytes$"):
        grouped_mm_output(_meta(8, 10).t(), b, _offs(3))
    # rows of 9 fp32 = 36 bytes
    with pytest.raises(RuntimeError, match=r"^mat_b: strides should be multiple of 16 bytes$"):
        grouped_mm_output(a, _meta(3, 8, 9), _offs(3))
    # one column of 8 rows, strides (1, 1): column-major (its stride 1 over one column is
    # at least 1), a leading stride of 1 fp32 = 4 bytes: refused for alignment, not layout
    with pytest.raises(RuntimeError, match=
                       r"^mat_a: strides should be multiple of 16 bytes$"):
        grouped_mm_output(_meta(8, 1), _meta(3, 1, 12), _offs(3))
    # one row of 8 as a transposed column, strides (1, 1): read as column-major, lead 1
    with pytest.raises(RuntimeError, match=
                       r"^mat_a: strides should be multiple of 16 bytes$"):
        grouped_mm_output(_meta(8, 1).t(), b, _offs(3))
    with pytest.raises(RuntimeError, match=r"^Expected mat_a and mat_b to be "
                       r"Float32, BFloat16 or Float16, got torch.float32 and torch.float64$"):
        grouped_mm_output(a, _meta(3, 8, 12, dtype=torch.float64), _offs(3))
    with pytest.raises(RuntimeError, match=r"^expected mat1 and mat2 to have the same dtype"):
        grouped_mm_output(a, _meta(3, 8, 12, dtype=torch.float16), _offs(3))
    with pytest.raises(RuntimeError, match=r"^Bias not supported yet$"):
        grouped_mm_output(a, b, _offs(3), bias=_meta(3, 12))
    with pytest.raises(RuntimeError,
                       match=r"^Grouped gemm output dtype must match `mat_a` dtype$"):
        grouped_mm_output(a, b, _offs(3), out_dtype=torch.bfloat16)


def test_a_single_row_is_row_major() -> None:
    # (1, 8) contiguous, strides (8, 1): row-major with a leading stride of 8 fp32 = 32
    # bytes (its stride 1 over the columns is not read as a column-major lead)
    out = grouped_mm_output(_meta(1, 8), _meta(3, 8, 12), _offs(3))
    assert tuple(out.shape) == (1, 12)


def test_which_calls_the_mode_answers() -> None:
    bf16 = torch.bfloat16
    plain = (torch.Tensor,)
    assert _answers(plain, (_meta(10, 8), _meta(3, 8, 12)))
    assert _answers(plain, (_meta(10, 8, dtype=bf16), _meta(3, 8, 12)))  # one bf16 only
    assert _answers(plain, (_meta(10, 8), _meta(3, 8, 12, dtype=bf16)))
    assert not _answers(plain, (_meta(10, 8, dtype=bf16), _meta(3, 8, 12, dtype=bf16)))
    assert not _answers(plain, (torch.empty(10, 8), _meta(3, 8, 12)))  # real data
    assert not _answers(plain, (_meta(10, 8), torch.empty(3, 8, 12)))
    assert not _answers((torch.Tensor, torch.nn.Parameter), (_meta(10, 8), _meta(3, 8, 12)))
    with GroupedMMMode():  # any other op goes on unchanged
        assert tuple(torch.mm(_meta(2, 3), _meta(3, 4)).shape) == (2, 4)
