"""DDP beside TP with tied embeddings (the table is also the head): torch's swap of each
DTensor parameter for its local shard goes by name once per tensor, which untied the head's
name and left the optimizer a DTensor beside local tensors (a crash).  The tie is kept: the
rank holds the table once, and DDP all-reduces each distinct gradient once."""

from __future__ import annotations

from pathlib import Path

from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tests.workload.hf_configs import write_config


def _run(tmp_path: Path, tied: bool):  # type: ignore[no-untyped-def]
    config = write_config(tmp_path / str(tied), "llama", vocab_size=96,
                          tie_word_embeddings=tied)
    work = resolve_workload(str(config), batch=1, seq=16, precision="fp32",
                            layout=resolve_layout(dp=2, tp=2))
    return trace_workload(work)


def test_tied_table_is_held_and_reduced_once(tmp_path: Path) -> None:
    tied, untied = _run(tmp_path, True), _run(tmp_path, False)
    # vocab 96 × d_model 40 = 3,840 values in the head, half a TP rank's: the tied rank holds
    # the table once, 1,920 fewer values than the untied one
    assert untied.params - tied.params == 96 * 40 // 2
    for run in (tied, untied):
        reduced = sum(r.collective.size_bytes for r in run.trace.records
                      if r.collective is not None and r.collective.kind == "all-reduce"
                      and r.collective.group_size == 2 and r.phase == "backward"
                      and r.collective.rank_stride == 2)  # the dp dimension: ranks 0 and 2
        # every gradient of this rank's parameters, 4 bytes each, once (DDP's buckets)
        assert reduced == 4 * run.params
