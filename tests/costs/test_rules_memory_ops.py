"""One case per rule of the ops that move memory without arithmetic: views, copies, fills,
allocations and embedding lookups (collectives: test_rules_collectives.py).  FLOPs are 0
except for embedding backward; what each pins is its category and which bytes it moves
(``io``: inputs read and outputs written; ``write``: outputs only; ``none``: nothing)."""

from __future__ import annotations

import pytest
import torch

from tests.costs.rules_support import aten, direct, meta, record_op, rule

F32 = 4

VIEWS = ("view", "_unsafe_view", "reshape", "_reshape_alias", "alias", "detach", "t",
         "transpose", "permute", "expand", "unsqueeze", "squeeze", "slice", "select", "split",
         "split_with_sizes", "chunk", "unbind", "as_strided", "unflatten", "flatten", "narrow",
         "diagonal", "unfold", "view_as_real", "view_as_complex", "lift_fresh",
         "_local_scalar_dense", "numpy_T", "movedim", "expand_as", "view_as", "real", "imag",
         "conj", "_conj", "_neg_view", "resolve_conj", "resolve_neg", "is_same_size",
         "_has_compatible_shallow_copy_type")
COPIES = ("_to_copy", "clone", "contiguous", "cat", "stack", "index", "index_select",
          "gather", "repeat", "repeat_interleave", "constant_pad_nd", "slice_backward",
          "select_backward",
          "slice_scatter", "select_scatter", "as_strided_scatter", "masked_select", "flip",
          "roll", "expand_copy", "permute_copy", "view_copy", "_unsafe_index", "index_put",
          "_index_put_impl", "scatter", "masked_scatter", "lift", "_pin_memory", "to")
FILLS = ("zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill", "zero",
         "_foreach_zero", "scalar_tensor", "arange", "new_zeros", "new_ones", "new_full",
         "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm",
         "normal", "uniform", "random", "exponential", "linspace", "eye", "tensor")
ALLOCATIONS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
               "empty_permuted", "resize_")
#: op → (category, moves, destination written and not read): what the table test pins
MOVES: dict[str, tuple[str, str, bool]] = {
    **{f"aten.{n}": ("view", "none", False) for n in VIEWS},
    **{f"aten.{n}": ("copy", "io", False) for n in COPIES},
    "aten._foreach_copy": ("copy", "io", True),
    **{f"aten.{n}": ("copy", "write", False) for n in FILLS},
    **{f"aten.{n}": ("other", "none", False) for n in ALLOCATIONS},
}


@pytest.mark.parametrize("op", sorted(MOVES))
def test_rule_memory_table(op: str) -> None:
    found = rule(op)
    assert (found.category, found.moves, found.write_only_self) == MOVES[op]
    assert found.bytes_read is None and found.causal is None
    assert direct(op, (meta(3, 5),), out=meta(3, 5)) == 0  # no arithmetic


def test_views_move_nothing_copies_move_both_fills_write_allocations_nothing() -> None:
    x = meta(3, 5)
    view = record_op("aten.view", lambda: x.view(5, 3))
    assert (view.bytes_read, view.bytes_written, view.category) == (0, 0, "view")
    cast = record_op("aten._to_copy", lambda: x.to(torch.bfloat16))
    assert (cast.bytes_read, cast.bytes_written) == (F32 * 15, 2 * 15)  # 60 in, 30 out
    fill = record_op("aten.ones", lambda: torch.ones(3, 5, device="meta"))
    assert (fill.bytes_read, fill.bytes_written, fill.category) == (0, F32 * 15, "copy")
    filled = record_op("aten.fill", lambda: x.fill_(1.0))  # in place: written, not read
    assert (filled.bytes_read, filled.bytes_written) == (0, F32 * 15)
    empty = record_op("aten.empty", lambda: torch.empty(3, 5, device="meta"))
    assert (empty.bytes_read, empty.bytes_written, empty.category) == (0, 0, "other")


def test_rule_aten_copy() -> None:
    # copy_(dst, src): the destination is written, never read; src bf16 (3, 5) into fp32
    src = meta(3, 5, dtype=torch.bfloat16)

    def step() -> None:
        dst = torch.empty(3, 5, device="meta")  # made in the step: its storage is known
        dst.copy_(src)

    record = record_op("aten.copy", step)
    assert record.op == "aten.copy_.default"
    assert record.bytes_read == 2 * 15 == 30  # src only (dst would add 60)
    assert record.bytes_written == F32 * 15 == 60
    assert (record.flops, record.category) == (0, "copy")
    assert rule("aten.copy").write_only_self


def test_foreach_copy_does_not_read_its_destination() -> None:
    src = [meta(3, 5), meta(7)]

    def step() -> None:
        dst = [torch.empty(3, 5, device="meta"), torch.empty(7, device="meta")]
        aten._foreach_copy_(dst, src)

    record = record_op("aten._foreach_copy", step)
    assert record.bytes_read == F32 * 22  # the sources: 15 + 7 values
    assert record.bytes_written == F32 * 22


def test_copy_into_a_destination_first_seen_by_copy() -> None:
    dst, src = meta(3, 5), meta(3, 5, dtype=torch.bfloat16)
    record = record_op("aten.copy", lambda: dst.copy_(src))
    assert (record.bytes_read, record.bytes_written) == (30, 60)
    assert record.storages_created == ()


# ---- embedding: a table of 50 rows × 4, indices (3, 5)

def test_rule_aten_embedding() -> None:
    # reads the 15 gathered rows (15·4 fp32 = 240 bytes) and the indices (15 int64 = 120),
    # not the table (50·4·4 = 800) and not nothing
    table, indices = meta(50, 4), meta(3, 5, dtype=torch.long)
    record = record_op("aten.embedding", lambda: aten.embedding(table, indices))
    assert record.bytes_read == F32 * 3 * 5 * 4 + 8 * 3 * 5 == 360
    assert record.bytes_written == F32 * 3 * 5 * 4 == 240
    assert (record.flops, record.category) == (0, "embedding")
    # bf16 table: the row width follows the table's dtype
    record = record_op("aten.embedding", lambda: aten.embedding(
        meta(50, 4, dtype=torch.bfloat16), indices))
    assert record.bytes_read == 2 * 60 + 8 * 15 == 240


def test_rule_aten_embedding_dense_backward() -> None:
    # (grad_output (3, 5, 4), indices, num_weights, padding_idx, scale_grad_by_freq): each
    # gradient element added into its row: 60 adds
    indices = meta(3, 5, dtype=torch.long)
    record = record_op("aten.embedding_dense_backward", lambda: aten.embedding_dense_backward(
        meta(3, 5, 4), indices, 50, -1, False))
    assert record.flops == 3 * 5 * 4 == 60
    assert record.bytes_read == F32 * 60 + 8 * 15 == 360
    assert record.bytes_written == F32 * 50 * 4 == 800  # the whole gradient table
    assert record.category == "embedding"


def test_rule_aten_embedding_backward() -> None:
    # a composite (the dispatcher shows embedding_dense_backward): called directly
    args = (meta(3, 5, 4), meta(3, 5, dtype=torch.long), 50, -1, False, False)
    assert direct("aten.embedding_backward", args) == 60
    assert rule("aten.embedding_backward").category == "embedding"


def test_rule_aten__embedding_bag_backward() -> None:
    # one add per element of the incoming gradient (2 bags × 4)
    args = (meta(2, 4), meta(6, dtype=torch.long), meta(2, dtype=torch.long))
    assert direct("aten._embedding_bag_backward", args) == 2 * 4
    assert rule("aten._embedding_bag_backward").category == "embedding"


def test_repeat_interleave_reads_the_counts_and_writes_the_indices() -> None:
    """Expert parallelism's dispatch expands counts into expert ids (the Tensor overload; an
    int count decomposes into views and a clone): counts [2, 2, 2] as int64 read 3 × 8 = 24 B
    and write the 6 ids, 6 × 8 = 48 B; no arithmetic."""
    counts = torch.tensor([2, 2, 2], device="meta")
    found = record_op("aten.repeat_interleave",
                      lambda: torch.repeat_interleave(counts, output_size=6))
    assert (found.bytes_read, found.bytes_written, found.flops) == (24, 48, 0)
