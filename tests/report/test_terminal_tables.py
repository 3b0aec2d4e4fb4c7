"""Terminal tables read right when narrow (issue 41): module paths that differ only at their
end (gpt2's ``blocks.{0..11}.attention.query``, ``.key``, ``.value``) keep that end when the
name column is too narrow for them, so no two rows read the same."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tensorledger.report.roofline import totals_table
from tensorledger.report.terminal import tail_cut
from tensorledger.roofline.modules import ModuleTime

#: gpt2's roofline rows as `roofline --model gpt2` names them (the figures do not matter here)
NAMES = ("", "TransformerLM.blocks.{0..11}.mlp.up", "TransformerLM.blocks.{0..11}.mlp.down",
         "TransformerLM.blocks.{0..11}.attention.query",
         "TransformerLM.blocks.{0..11}.attention.key",
         "TransformerLM.blocks.{0..11}.attention.value", "TransformerLM.head",
         "TransformerLM.blocks.{0..11}.attention.output")


def _rows(width: int) -> list[str]:
    modules = [ModuleTime(name=name, count=1 if "{" not in name else 12, members=(name,),
                          ops=300, flops=43_510_000_000, bytes=486_200_000, time_s=6.117e-4,
                          share_of_step=0.061, compute_bound_ops=36, memory_bound_ops=12,
                          overhead_bound_ops=84, ideal_time_s=1.451e-4) for name in NAMES]
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(totals_table("by module", modules))
    lines = console.export_text().splitlines()
    return [line.split("│")[1].strip() for line in lines if line.count("│") > 2]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_module_rows_stay_distinct_and_keep_their_end(width: int) -> None:
    cells = _rows(width)
    assert len(cells) == len(NAMES)
    assert len(set(cells)) == len(cells), cells
    for cell, name in zip(cells, NAMES, strict=True):
        shown = cell.removeprefix("…")
        full = (name or "(root)") + (" ×12" if "{" in name else "")
        assert full.endswith(shown), (cell, full)  # the end is kept, never the start alone
        assert cell == full or cell.startswith("…")


def test_at_120_columns_the_attention_rows_are_named_whole_from_blocks_on() -> None:
    cells = _rows(120)
    # 120 columns leave the name column 40 cells (38 inside its padding):
    # 'TransformerLM.blocks.{0..11}.attention.query ×12' is 48 long, so its first component
    # goes and the rest (34 cells and the ellipsis) is kept
    assert "…blocks.{0..11}.attention.query ×12" in cells
    assert "…blocks.{0..11}.attention.key ×12" in cells


@pytest.mark.parametrize(("text", "width", "expected"), [
    ("TransformerLM.head", 30, "TransformerLM.head"),  # fits: untouched
    # 48 cells into 30: the last 29 are 's.{0..11}.attention.query ×12', cut at the component
    ("TransformerLM.blocks.{0..11}.attention.query ×12", 30, "…{0..11}.attention.query ×12"),
    ("TransformerLM.blocks.{0..11}.attention.query ×12", 24, "…attention.query ×12"),
    ("optimizer", 1, "…"),
])
def test_tail_cut(text: str, width: int, expected: str) -> None:
    assert tail_cut(text, width) == expected
    assert len(tail_cut(text, width)) <= width
