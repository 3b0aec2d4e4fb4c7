"""The recorder: the lecture's deep network, attribution to modules and phases, identical
counts on meta, fake and real tensors, storages, bytes of views and in-place ops."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode
from trace_nets import DeepNet, TinyTransformer, lm_loss

from tensorledger.errors import TraceError
from tensorledger.trace import (
    ROOT,
    Recorder,
    Trace,
    backward_forward_ratio,
    by_category,
    by_module,
    by_phase,
    trace,
)

B, D, L = 4, 16, 3


def matmul_flops(result: Trace, phase: str, module: str | None = None) -> int:
    return sum(r.flops for r in result.records if r.category == "matmul" and r.phase == phase
               and (module is None or r.module == module))


def deep_step(model: DeepNet, x: torch.Tensor) -> None:
    model(x).sum().backward()


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_deep_network_input_requiring_grad_backward_is_twice_forward(device: str) -> None:
    model = DeepNet(D, L, device=device)
    x = torch.randn(B, D, device=device, requires_grad=True)
    result = trace(deep_step, model, x)
    forward = matmul_flops(result, "forward")
    backward = matmul_flops(result, "backward")
    assert forward == 2 * B * D * D * L                      # 2 * 4 * 16 * 16 * 3 = 6144
    assert backward == 2 * forward
    assert forward + backward == 6 * B * D * D * L           # 18432
    for i in range(L):
        name = f"DeepNet.layers.{i}"
        assert matmul_flops(result, "backward", name) == 2 * matmul_flops(result, "forward", name)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_deep_network_plain_input_skips_the_first_input_gradient(device: str) -> None:
    model = DeepNet(D, L, device=device)
    x = torch.randn(B, D, device=device)  # as in the lecture: the data needs no gradient
    result = trace(deep_step, model, x)
    total = matmul_flops(result, "forward") + matmul_flops(result, "backward")
    assert total == 6 * B * D * D * L - 2 * B * D * D        # 18432 - 2048 = 16384
    tree = by_module(result)
    first, second = tree.find("DeepNet.layers.0"), tree.find("DeepNet.layers.1")
    assert first is not None and second is not None
    assert first.flops_backward == first.flops_forward == 2 * B * D * D   # weight grad only
    # later layers: both gradients (ReLU runs in DeepNet.forward, not in the layer)
    assert second.flops_backward == 2 * second.flops_forward == 4 * B * D * D


def test_deep_network_matches_flop_counter_per_op() -> None:
    model = DeepNet(D, L)
    x = torch.randn(B, D, requires_grad=True)
    with FlopCounterMode(display=False) as oracle:
        result = trace(deep_step, model, x)
    ours: Counter[str] = Counter()
    for r in result.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    theirs = {str(op): n for op, n in oracle.get_flop_counts()["Global"].items()}
    assert ours == theirs


def test_root_of_module_tree_is_the_sum_of_records() -> None:
    model = TinyTransformer(device="meta")
    tokens = torch.zeros(2, 8, dtype=torch.long, device="meta")
    result = trace(lambda: lm_loss(model, tokens).backward())
    root = by_module(result)
    assert root.name == ROOT
    assert root.flops == sum(r.flops for r in result.records)
    assert root.ops == len(result.records)
    assert root.bytes_read == sum(r.bytes_read for r in result.records)
    assert root.flops_forward + root.flops_backward == root.flops
    assert sum(c.flops for c in by_category(result)) == root.flops
    assert sum(p.flops for p in by_phase(result)) == root.flops
    # each node holds its children plus its own ops
    for node in (root, root.find("TinyTransformer"), root.find("TinyTransformer.blocks.0")):
        assert node is not None
        assert node.flops >= sum(c.flops for c in node.children)
    folded = by_module(result, depth=1)
    assert [c.name for c in folded.children] == ["TinyTransformer"]
    assert folded.children[0].children == ()
    assert folded.children[0].flops == root.find("TinyTransformer").flops  # type: ignore[union-attr]


def _transformer_trace(device: str) -> Trace:
    torch.manual_seed(0)
    model = TinyTransformer(device=device)
    tokens = torch.randint(0, 64, (2, 16), device=device)
    optimizer = torch.optim.AdamW(model.parameters())

    def step() -> None:
        lm_loss(model, tokens).backward()
        optimizer.step()

    return trace(step)


def _summary(result: Trace) -> list[tuple[object, ...]]:
    return [(r.op, r.module, r.phase, r.category, r.input_shapes, r.output_shapes,
             r.output_dtypes, r.flops, r.flops_causal_halved, r.bytes_read, r.bytes_written)
            for r in result.records]


def test_counts_identical_on_meta_fake_and_real_tensors() -> None:
    real = _transformer_trace("cpu")
    meta = _transformer_trace("meta")
    with FakeTensorMode():
        fake = _transformer_trace("cpu")
    assert (real.device, meta.device, fake.device) == ("cpu", "meta", "fake:cpu")
    assert _summary(real) == _summary(meta) == _summary(fake)
    assert real.uncovered == {}
    assert [p.phase for p in by_phase(real)] == ["forward", "backward", "optimizer"]


def test_tiny_transformer_matmuls_match_flop_counter_and_attention_by_hand() -> None:
    torch.manual_seed(0)
    model = TinyTransformer()  # vocab 64, dim 32, heads 4, 2 layers
    tokens = torch.randint(0, 64, (2, 16))
    with FlopCounterMode(display=False) as oracle:
        result = trace(lambda: lm_loss(model, tokens).backward())
    ours: Counter[str] = Counter()
    for r in result.records:
        if r.category == "matmul":
            ours[r.op.rsplit(".", 1)[0]] += r.flops
    theirs = {str(op): n for op, n in oracle.get_flop_counts()["Global"].items()}
    assert ours == theirs  # FlopCounterMode is silent on the CPU attention kernel
    attention = [r for r in result.records if r.category == "attention"]
    # per layer, forward: 2 products of 2 * (b 2 * h 4) * s 16 * s 16 * d 8 = 32768 each;
    # backward recomputes the scores: five products.  Causal: half of each.
    assert [r.flops for r in attention] == [65536, 65536, 163840, 163840]
    assert [r.flops_causal_halved for r in attention] == [32768, 32768, 81920, 81920]
    assert backward_forward_ratio(result) == pytest.approx(2.0, rel=0.05)


def test_autocast_records_the_dtypes_each_op_ran_in() -> None:
    model = TinyTransformer()
    tokens = torch.randint(0, 64, (2, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = trace(lambda: model(tokens))
    matmuls = {r.output_dtypes[0] for r in result.records if r.category == "matmul"}
    norms = {r.output_dtypes[0] for r in result.records if r.op.startswith("aten.native_layer")}
    assert matmuls == {"bf16"}
    assert norms == {"fp32"}


def test_phases_modules_and_the_optimizer() -> None:
    model = DeepNet(D, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        model(torch.ones(B, D)).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    result = trace(step)
    phases = [r.phase for r in result.records]
    assert phases.index("backward") > phases.index("forward")
    assert {r.module for r in result.records if r.phase == "optimizer"} == {ROOT}
    assert "other" in phases  # gradient clipping: after backward, outside modules
    # SGD without momentum: p.add_(g, alpha=-lr): a multiply and an add per element of the
    # 2 layers of 16 * 16: 2 * 2 * 256
    optimizer_flops = sum(r.flops for r in result.records if r.phase == "optimizer")
    assert optimizer_flops == 2 * 2 * D * D


def test_views_move_nothing_and_in_place_ops_count_once() -> None:
    x = torch.ones(4, 8)
    y = torch.ones(4, 8)
    result = trace(lambda: (x.view(8, 4), x.T, x.add_(y), x.add(y)))
    view, transpose, in_place, fresh = result.records
    assert (view.category, view.bytes_read, view.bytes_written) == ("view", 0, 0)
    assert (transpose.bytes_read, transpose.bytes_written) == (0, 0)
    # add_: reads x and y (2 * 128), writes x once (128) and creates nothing
    assert (in_place.bytes_read, in_place.bytes_written) == (256, 128)
    assert in_place.storages_created == ()
    assert (fresh.bytes_read, fresh.bytes_written) == (256, 128)
    assert len(fresh.storages_created) == 1


def test_storages_are_created_once_and_freed_once() -> None:
    model = DeepNet(D, L, device="meta")
    result = trace(deep_step, model, torch.ones(B, D, device="meta"))
    created = [sid for r in result.records for sid, _ in r.storages_created]
    preexisting = [sid for sid, _ in result.storages_preexisting]
    freed = [sid for r in result.records for sid in r.storages_freed]
    freed += list(result.storages_freed_at_end)
    assert len(set(created)) == len(created)
    assert set(created).isdisjoint(preexisting)
    assert len(set(freed)) == len(freed)
    assert set(freed) <= set(created) | set(preexisting)
    # a storage is freed only after it was created
    when_created = {sid: r.index for r in result.records for sid, _ in r.storages_created}
    for r in result.records:
        for sid in r.storages_freed:
            assert when_created.get(sid, -1) < r.index
    # the first layer's matmul output: B·D fp32 values, freed once ReLU has replaced it
    first = next(r for r in result.records if r.op == "aten.mm.default")
    assert first.storages_created[0][1] == B * D * 4


def test_uncovered_ops_are_listed_with_their_call_counts() -> None:
    x = torch.randn(4, 4)
    result = trace(lambda: (torch.linalg.qr(x), torch.linalg.qr(x)))
    assert result.uncovered == {"aten.linalg_qr.default": 2}
    assert all(not r.covered and r.flops == 0 for r in result.records)


def test_recorder_context_and_errors() -> None:
    with Recorder() as recorder:
        torch.ones(2, device="meta") * 2
    assert [r.op for r in recorder.trace.records] == ["aten.ones.default", "aten.mul.Tensor"]
    with pytest.raises(TraceError, match="ends"):
        _ = Recorder().trace
    with pytest.raises(TraceError, match="raised ValueError: boom"):
        trace(lambda: (_ for _ in ()).throw(ValueError("boom")))


def test_package_attribute_traces_and_importing_the_package_loads_no_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, tensorledger; assert 'torch' not in sys.modules; "
            "import torch; t = tensorledger.trace(lambda: torch.ones(2, 3, device='meta') @ "
            "torch.ones(3, 4, device='meta')); print(t.flops)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "48"  # 2 * 2 * 4 * 3
