"""LoRA under a layout (issue 40): peft's adapters on a tiny HF Llama laid out by FSDP2 (the
frozen base sharded, the adapters sharded and alone trained) and by DDP (everything replicated,
the adapters' gradients all-reduced), rank 0's memory on fake ranks against a hand derivation;
tensor parallelism, a 4-bit base and ZeRO-1 under a layout refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorledger.errors import InputError
from tensorledger.ledger.memory import memory_of
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.spec import resolve_lora
from tests.workload.hf_configs import write_config

pytest.importorskip("peft")
pytest.importorskip("transformers")

F32 = 4
RANK = 8
# The tiny Llama (tests/workload/hf_configs.py): vocab 97, hidden 40, q 4 heads × 12 = 48,
# k and v 2 heads × 12 = 24, d_ff 72, 2 layers, untied head.
#   embedding 97·40 = 3,880; head 3,880; final norm 40
#   a layer: q 48·40 = 1,920, k 960, v 960, o 1,920, gate/up/down 3 · 2,880, norms 80 = 14,480
#   base: 3,880 + 2 · 14,480 + 40 + 3,880 = 36,760
BASE = 3_880 + 2 * 14_480 + 40 + 3_880
# adapters r · (d_in + d_out): q 8 · (40 + 48) = 704, v 8 · (40 + 24) = 512; 2 layers
ADAPTERS = (RANK * (40 + 48) + RANK * (40 + 24)) * 2
ADAPTER_TENSORS = 2 * 2 * 2  # A and B · q, v · 2 layers


def _memory(tmp_path: Path, **layout: int):  # type: ignore[no-untyped-def]
    path = write_config(tmp_path, "llama")
    work = resolve_workload(str(path), batch=2, seq=12, precision="fp32", device="fake",
                            lora=resolve_lora(RANK, "q_proj,v_proj"),
                            layout=resolve_layout(**layout))
    return trace_workload(work)


def test_fsdp_shards_the_frozen_base_and_trains_the_adapters_alone(tmp_path: Path) -> None:
    run = _memory(tmp_path, fsdp=2)
    ledger = memory_of(run)
    assert BASE == 36_760 and ADAPTERS == 2_432
    assert run.model_params == BASE + ADAPTERS
    assert run.trainable_params == ADAPTERS
    # FSDP2 cuts every tensor along dim 0, rank 0 taking the larger half: the embedding's and
    # the head's 97 rows give it 49 · 40 = 1,960 each, 20 past an even half; every other row
    # count (48, 24, 40, 72, the adapters' 8, 48 and 24) halves evenly
    per_rank = (BASE + ADAPTERS) // 2 + 20 + 20
    assert per_rank == 19_636
    assert run.params == per_rank
    assert ledger.params_bytes == per_rank * F32
    # gradients for the adapters alone, their half: 2,432 / 2 · 4 bytes
    assert ledger.grads_bytes == ADAPTERS // 2 * F32 == 4_864
    # AdamW: two moments of the adapters' half, and a step counter (one fp32 scalar) for
    # each adapter tensor: 2 · 4,864 + 8 · 4
    assert ledger.optimizer_state_bytes == 2 * ADAPTERS // 2 * F32 + ADAPTER_TENSORS * F32
    assert ledger.optimizer_state_bytes == 9_760
    gathers = [r for r in run.trace.records
               if r.collective is not None and r.collective.kind == "all-gather"]
    reduces = [r for r in run.trace.records
               if r.collective is not None and r.collective.kind == "reduce-scatter"]
    assert gathers and reduces
    # the frozen base has no gradient to reduce: the reduce-scatters carry the adapters'
    # gradients alone (fp32, the whole 2,432 before the scatter), the gathers the whole model
    assert sum(r.collective.size_bytes for r in reduces  # type: ignore[union-attr]
               ) == ADAPTERS * F32
    assert sum(r.collective.size_bytes for r in gathers if r.phase == "forward"  # type: ignore[union-attr]
               ) == (per_rank * 2) * F32


def test_ddp_replicates_and_all_reduces_the_adapters_gradients(tmp_path: Path) -> None:
    run = _memory(tmp_path, dp=2)
    ledger = memory_of(run)
    assert run.params == BASE + ADAPTERS  # every rank holds the whole model
    assert ledger.params_bytes == (BASE + ADAPTERS) * F32 == 156_768
    assert ledger.grads_bytes == ADAPTERS * F32 == 9_728
    assert ledger.optimizer_state_bytes == 2 * ADAPTERS * F32 + ADAPTER_TENSORS * F32
    reduced = [r for r in run.trace.records
               if r.collective is not None and r.collective.kind == "all-reduce"]
    # one DDP bucket: the adapters' gradients alone (frozen weights join none)
    assert [r.collective.size_bytes for r in reduced] == [ADAPTERS * F32]  # type: ignore[union-attr]


@pytest.mark.parametrize(("layout", "qlora", "message"), [
    ({"tp": 2}, False, "--lora is traced on one device, under --fsdp or --dp"),
    ({"fsdp": 2}, True, "--qlora is traced on one device"),
    ({"fsdp": 2, "zero": 1}, False, "--lora under --zero 1"),
])
def test_layouts_not_traced_with_adapters_are_refused(tmp_path: Path, layout: dict[str, int],
                                                      qlora: bool, message: str) -> None:
    path = write_config(tmp_path, "llama")
    with pytest.raises(InputError, match=message):
        resolve_workload(str(path), device="fake", layout=resolve_layout(**layout),
                         lora=resolve_lora(RANK, "q_proj,v_proj", qlora=qlora))
