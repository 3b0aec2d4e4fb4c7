"""The checkpointing note's deep-network figures in `checkpoint --deep ... --json` (issue 42's
seeded bug: the note fed the wrong count of vectors and no test read these JSON figures)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("activation", "kept_tensors"), [("relu", 4 + 1), ("gelu", 2 * 4)])
@pytest.mark.parametrize("batch", [8, 24])
def test_the_deep_network_note_counts_every_vector_of_the_batch(
        cli, activation: str, kept_tensors: int, batch: int) -> None:  # type: ignore[no-untyped-def]
    # D = 16, L = 4: one activation is B·D values; ReLU keeps (L+1) of them (each matmul's input
    # and the last output), GELU 2·L (each matmul's input and each GELU's input); the napkin
    # count is L·B·D; fp32, 4 bytes a value
    doc = cli("checkpoint", "--deep", f"16,4,{batch},{activation}", "--json").json()
    deep = doc["deep"]
    unit = batch * 16
    assert (deep["batch"], deep["d_model"], deep["n_layers"]) == (batch, 16, 4)
    assert deep["kept_tensors"] == kept_tensors
    assert deep["kept_values"] == kept_tensors * unit
    assert deep["napkin_values"] == 4 * unit
    assert deep["kept_bytes"] == 4 * kept_tensors * unit
    assert deep["napkin_bytes"] == 4 * 4 * unit
    # a second path: the study's own "none" row leaves out the network's input (block 0's input
    # is not the step's to free): ReLU L units; GELU keeps the last output in its place, 2·L
    none = next(r for r in doc["rows"] if r["policy"] == "none")
    assert none["saved_bytes"] == 4 * unit * (4 if activation == "relu" else 8)
