"""trace.layout.inner_loop pinned on hand-built layouts: each expectation walks the output's
dimensions innermost first, as the docstring says, with the arithmetic beside it."""

from __future__ import annotations

from tensorledger.trace.layout import inner_loop


def test_a_layout_without_strides_is_not_walked() -> None:
    # two dimensions, one stride: no layout to walk
    assert inner_loop(((2, 3), (1,)), []) == 0


def test_an_input_of_higher_rank_than_the_output_is_not_walked() -> None:
    out = ((4, 2), (2, 1))
    wider = ((3, 4, 2), (8, 1, 4))  # rank 3 into rank 2: not broadcast to the output
    # skipped: only the output is walked, contiguous, one loop
    assert inner_loop(out, [wider]) == 0
    # read as if aligned from the right it would be (1, 4) over the output: dim 1 (stride 1,
    # 2 elements) then dim 0, where it steps 1 and not 4·2 = 8: a loop of 2, which is not it


def test_an_input_whose_strides_do_not_match_its_shape_is_not_walked() -> None:
    out = ((4, 2), (2, 1))
    assert inner_loop(out, [((4, 2), (1,))]) == 0
    # the inputs after it are still walked: a column (one value per row) cuts loops of 2
    assert inner_loop(out, [((4, 2), (1,)), ((4, 1), (2, 1))]) == 2


def test_a_dimension_of_size_one_in_an_input_is_broadcast_whatever_its_stride() -> None:
    out = ((4, 2), (2, 1))
    column = ((4, 1), (2, 1))  # one value per row; its size-1 dimension's stride is any
    # the column steps (2, 0) over the output: dim 1 first (2 elements), then dim 0, where the
    # output steps 2 = 1·2 but the column 2 ≠ 0·2: loops of 2
    assert inner_loop(out, [column]) == 2
    # (read with its stride 1 over dim 1 it would step 2 = 1·2 there: one loop, 0)


def test_leading_dimensions_an_input_lacks_are_broadcast() -> None:
    out = ((4, 2), (2, 1))
    row = ((2,), (1,))  # steps (0, 1): dim 1 merges nothing; dim 0: 0 ≠ 1·2
    assert inner_loop(out, [row]) == 2
    assert inner_loop(out, [out, ((1, 2), (2, 1))]) == 2  # the same row, with its size-1 dim


def test_size_one_output_dimensions_are_left_out_of_the_walk() -> None:
    out = ((4, 1), (1, 1))
    # only dim 0 (4 elements) is walked: one loop, 0
    assert inner_loop(out, [out]) == 0
    # walked, the size-1 dim 1 would come first (stride 1, the later dim on a tie), a loop of
    # 1, and dim 0 would then need the input's step (1) to be 0·1 (it is broadcast there)


def test_dimensions_are_walked_by_stride_magnitude_the_later_first_on_a_tie() -> None:
    # equal strides: dim 1 first (the later), 3 elements; dim 0 steps 3, not 3·3 = 9: 3
    # (dim 0 first would give 2: dim 1 steps 3, not 3·2 = 6)
    assert inner_loop(((2, 3), (3, 3)), []) == 3
    # a negative stride counts by its size: dim 1 (|1|) first, 3 elements; dim 0 steps -3,
    # not 1·3: 3 (by signed value dim 0 would come first: 1 ≠ -3·2, a loop of 2)
    assert inner_loop(((2, 3), (-3, 1)), []) == 3


def test_the_loop_grows_over_every_merged_dimension() -> None:
    # (2, 3, 4) contiguous output, an input transposed in its outer two dims: strides (4, 8, 1)
    out = ((2, 3, 4), (12, 4, 1))
    swapped = ((2, 3, 4), (4, 8, 1))
    # dim 2 (4 elements), then dim 1: output 4 = 1·4, input 8 ≠ 1·4: a loop of 4
    assert inner_loop(out, [swapped]) == 4
    # an input contiguous in dims 1, 2 but with a gap after each row of 12: strides (24, 4, 1)
    gapped = ((2, 3, 4), (24, 4, 1))
    # dim 2: 4; dim 1: 4 = 1·4 for both, loop 12; dim 0: output 12 = 1·12, input 24 ≠ 12
    assert inner_loop(out, [gapped]) == 12
    # two operands: the first that breaks ends the loop
    assert inner_loop(out, [gapped, swapped]) == 4
