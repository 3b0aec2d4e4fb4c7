"""QLoRA's NF4 base, piece by piece (issue 42's mutation run of ``tensorledger.workload.qlora``):
which linears are stored in NF4 and which are kept, what an NF4 weight holds, the summary line,
on small real CPU modules (no trace, no transformers)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError
from tensorledger.workload import qlora

N = qlora.NF4_BLOCK * qlora.NF4_SCALER_BLOCK  # 64 · 256 = 16,384 elements: the smallest weight


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(128, 128)
        self.a = nn.Linear(128, 128)  # 16,384 elements: one NF4 weight
        self.b = nn.Linear(128, 256, bias=False)  # 32,768 = 2 · 16,384
        self.c = nn.Linear(128, 64)  # 8,192: off the grid
        self.head = nn.Linear(128, 128, bias=False)  # the output head: kept
        self.tied = nn.Linear(128, 128, bias=False)
        self.tied.weight = self.embedding.weight  # an embedding's weight: kept as the head is


def test_the_base_is_quantised_but_head_embedding_and_odd_sizes() -> None:
    model = _Model()
    base = qlora.quantize_base(model)
    assert base.quantized == ("a", "b")
    assert base.quantized_params == N + 2 * N  # a, then b's 128 · 256
    assert base.kept == (("c", "8,192 elements, not a multiple of 16,384"),
                         ("head", "the output head"), ("tied", "the output head"))
    assert type(model.a.weight).__name__ == "NF4Tensor" and not model.a.weight.requires_grad
    assert type(model.c.weight) is nn.Parameter and model.c.weight.requires_grad
    assert model.a.bias is not None and not model.a.bias.requires_grad  # frozen with its weight
    assert model.c.bias is not None and model.c.bias.requires_grad
    assert isinstance(model.a.dequantize, qlora.NF4Dequantize)
    assert not hasattr(model.c, "dequantize")
    # the routed call runs the module: the weight back in fp32, near the original (4 bits)
    before = model.b.weight.get_original_weight()
    assert before.shape == (256, 128) and before.dtype == torch.float32
    assert torch.equal(model.b.dequantize(model.b.weight), before)


def test_a_model_with_nothing_to_quantise_is_refused() -> None:
    with pytest.raises(InputError, match=r"\(0: 8,192 elements, not a multiple of 16,384\)"):
        qlora.quantize_base(nn.Sequential(nn.Linear(128, 64)))  # 8,192 elements only
    with pytest.raises(InputError, match="it has none"):
        qlora.quantize_base(nn.Sequential(nn.ReLU()))


def test_the_output_embeddings_are_the_head_when_a_model_names_them() -> None:
    model = nn.Module()
    out = nn.Linear(2, 2)
    model.get_output_embeddings = lambda: out  # transformers' way of naming the head
    model.head = nn.Linear(2, 2)
    assert qlora._head(model) is out
    model.get_output_embeddings = lambda: None  # no output embeddings: the head attribute
    assert qlora._head(model) is model.head
    assert qlora._head(SimpleNamespace(head="not a module")) is None  # not a module: no head
    assert qlora._head(nn.Linear(2, 2)) is None


def test_an_nf4_weight_unfolds_into_its_five_inner_tensors() -> None:
    weight = qlora._nf4_class().from_tensor(torch.randn(128, 128), qlora.NF4_BLOCK,
                                            qlora.NF4_SCALER_BLOCK)
    inner = qlora.flat_tensors(weight)
    # codes N/2 = 8,192 uint8; scaler mean 1; factors N/16,384 = 1; scales N/64 = 256 int8; book 16
    assert sorted((t.numel(), t.dtype) for t in inner) == sorted([
        (8192, torch.uint8), (1, torch.float32), (1, torch.float32), (256, torch.int8),
        (16, torch.float32)])
    plain = torch.ones(3)
    assert qlora.flat_tensors(plain)[0] is plain  # anything else is itself


def test_the_summary_shows_four_kept_linears_and_counts_the_rest() -> None:
    def base(kept: int) -> qlora.NF4Base:
        return qlora.NF4Base(("a", "b"), 32768, tuple((f"k{i}", "why") for i in range(kept)),
                             "9.9")
    head = ("the base's 2 linears (32,768 parameters) in 4-bit NF4 through torchao 9.9 (blocks "
            "of 64, int8 scales double-quantised per 256), dequantised at each use, forward and "
            "backward")
    assert base(0).describe() == head
    assert base(4).describe() == head + (
        "; left in their stored dtype: k0 (why), k1 (why), k2 (why), k3 (why)")
    assert base(6).describe() == head + (  # 6 − 4 = 2 more
        "; left in their stored dtype: k0 (why), k1 (why), k2 (why), k3 (why) and 2 more")


def test_the_import_log_is_dropped_inside_only() -> None:
    logger = logging.getLogger(qlora.IMPORT_LOGGERS[0])
    with qlora.quiet_torchao():
        assert qlora._drop in logger.filters
        assert logger.filter(logging.LogRecord("x", logging.INFO, "", 0, "m", None, None)) is False
    assert qlora._drop not in logger.filters


def test_five_kept_linears_show_four_and_one_more() -> None:
    base = qlora.NF4Base(("a",), N, tuple((f"k{i}", "w") for i in range(5)), "1.0")
    assert base.describe().endswith("k3 (w) and 1 more")  # 5 − 4 = 1


def test_the_base_names_torchaos_version() -> None:
    import torchao

    model = nn.Sequential(nn.Linear(128, 128))  # 16,384 elements: one NF4 weight
    assert qlora.quantize_base(model).torchao_version == str(torchao.__version__)


def _record(index: int, module: str, phase: str, flops: int, read: int, written: int
            ) -> object:
    from tensorledger.trace.records import OpRecord

    return OpRecord(index, "aten.mm.default", module, phase, "matmul", (), (), (), (), flops,
                    read, written, True, flops, (), ())


def test_the_dequantisation_note_by_hand() -> None:
    from tensorledger.trace.records import Trace

    records = (_record(0, "a.dequantize", "forward", 1000, 100, 50),
               _record(1, "a", "forward", 3000, 600, 250),
               _record(2, "a.dequantize", "backward", 1000, 100, 50),
               _record(3, "b.dequantize", "backward", 0, 40, 10))
    trace = Trace(records=records, uncovered={}, device="meta",
                  module_classes={"a.dequantize": "NF4Dequantize",
                                  "b.dequantize": "NF4Dequantize", "a": "Linear"})
    # dequantisation: 2 weights; FLOPs 1,000 + 1,000 + 0 = 2,000 of the step's 5,000 (40.0%),
    # forward 1,000, backward 1,000; bytes 150 + 150 + 50 = 350 of 1,200 moved (29.2%);
    # format_sci writes counts this small whole
    assert qlora.dequantization_note(trace) == (
        "NF4 dequantisation (2 weights, in forward and again in backward): 2000 FLOPs (40.0% "
        "of the step's; forward 1000, backward 1000), 350 B moved (29.2% of the step's)")
    empty = Trace(records=(), uncovered={}, device="meta")
    assert qlora.dequantization_note(empty) == "NF4 dequantisation: none ran in this step"


def test_a_dtensor_is_not_unfolded() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2):
        sharded = distribute_tensor(torch.ones(4, 2), init_device_mesh("cpu", (2,)), [Shard(0)])
        # a DTensor is a traceable wrapper too, but its memory is counted as the DTensor itself
        assert qlora.flat_tensors(sharded) == [sharded]
