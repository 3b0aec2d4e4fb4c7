"""The step's pieces, each by hand on small CPU modules (issue 42's mutation run of
``tensorledger.workload.step``): the loss, the host-memory check, the device's modes, the
logits found in an output, the vocabulary, the classification labels, the casts, the inputs
and the prepared step's own methods."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from tensorledger.errors import InputError, ModelError
from tensorledger.hardware.target import Target
from tensorledger.trace.grouped import GroupedMMMode
from tensorledger.workload import step as st
from tensorledger.workload.factory import FactoryFile
from tensorledger.workload.layout import Layout
from tensorledger.workload.params import model_params
from tensorledger.workload.recompute import CheckpointedBlock
from tensorledger.workload.routed import RoutedMode
from tensorledger.workload.routing import Routing
from tensorledger.workload.source import ModelSource
from tensorledger.workload.spec import resolve_workload

H100 = Target("h100-sxm", "cuda", (9, 0))


class Logits(nn.Module):
    """Zero logits of ``vocab`` ids for every token: cross-entropy ln(vocab) whatever the ids."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.weight = nn.Parameter(torch.zeros(()))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*tokens.shape, self.vocab) * self.weight


def test_lm_loss_is_the_mean_cross_entropy_of_every_position() -> None:
    tokens = torch.zeros(2, 3, dtype=torch.long)
    targets = torch.tensor([[0, 1, 2], [3, 4, 0]])
    # zero logits: every id has probability 1/5, so -ln(1/5) = ln 5 at each of 2 · 3 positions
    assert st.lm_loss(Logits(5), tokens, targets).item() == pytest.approx(math.log(5))


# ---- host memory ---------------------------------------------------------------------------

@pytest.mark.parametrize(("step", "per_param"), [
    ("forward", 4),  # fp32 parameters only
    ("forward-backward", 8),  # and fp32 gradients
    ("train", 16),  # and AdamW's two fp32 moments: 4 + 4 + 8
])
def test_a_real_cpu_step_is_checked_for_its_state_bytes(
        monkeypatch: pytest.MonkeyPatch, step: str, per_param: int) -> None:
    import tensorledger.hostmemory as hm

    seen: list[tuple[float, str, str]] = []
    monkeypatch.setattr(hm, "check_fits_in_memory",
                        lambda needed, what, hint: seen.append((needed, what, hint)))
    work = resolve_workload("tiny", precision="fp32", device="cpu", step=step)
    st.check_host_memory(work)
    params = model_params(work.source).params
    assert seen == [(params * per_param,
                     f"a {step} step of tiny on real CPU tensors ({params:,} parameters, "
                     f"{per_param} bytes each)",
                     "use --device fake (nothing allocated) or a smaller model")]
    seen.clear()
    st.check_host_memory(resolve_workload("tiny", precision="fp32", step=step))  # meta
    assert seen == []


def test_bf16_master_counts_its_fp32_master_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.hostmemory as hm

    seen: list[float] = []
    monkeypatch.setattr(hm, "check_fits_in_memory", lambda needed, what, hint: seen.append(
        needed))
    work = resolve_workload("tiny", precision="bf16-master", device="cpu")
    st.check_host_memory(work)
    # bf16 parameters 2 and gradients 2, an fp32 master 4, AdamW's two fp32 moments 8: 16
    assert seen == [model_params(work.source).params * 16]


def test_a_model_too_large_for_the_host_is_refused() -> None:
    from tensorledger.errors import DeviceError

    work = resolve_workload("llama-3-405b", precision="fp32", device="cpu", seq=16)
    with pytest.raises(DeviceError, match="a train step of llama-3-405b on real CPU tensors"):
        st.check_host_memory(work)


# ---- the device's modes --------------------------------------------------------------------

def _modes() -> list[type]:
    return [type(mode) for mode in _get_current_dispatch_mode_stack()]


def test_fake_builds_on_the_cpu_under_fake_tensors_and_grouped_mm() -> None:
    from torch._subclasses.fake_tensor import FakeTensor

    with st.placement("fake") as target:
        assert target == "cpu"
        assert isinstance(torch.ones(2), FakeTensor)
        assert GroupedMMMode in _modes()
    assert not isinstance(torch.ones(2), FakeTensor)


def test_meta_and_cpu_build_on_themselves() -> None:
    with st.placement("meta") as target:
        assert target == "meta"
        assert GroupedMMMode in _modes()
    with st.placement("cpu") as target:
        assert target == "cpu"
        assert GroupedMMMode not in _modes()
        assert torch.ones(2).device.type == "cpu"
    with pytest.raises(InputError, match="unknown device 'gpu'"), st.placement("gpu"):
        pass  # pragma: no cover


def test_routing_is_entered_for_a_mixture_of_experts_only() -> None:
    skew = Routing(kind="skew", skew=0.5)
    mode = st.routed(resolve_workload("tiny-moe", routing=skew))
    assert isinstance(mode, RoutedMode)
    assert (mode.experts, mode.chosen, mode.routing) == (6, 2, skew)  # top-2 of 6
    assert not isinstance(st.routed(resolve_workload("tiny")), RoutedMode)


def test_a_layout_gets_a_mesh_and_one_device_none() -> None:
    with st.laid_out(resolve_workload("tiny", precision="fp32")) as (target, mesh):
        assert (target, mesh) == ("meta", None)
    with st.laid_out(resolve_workload("tiny", layout=Layout(fsdp=2))) as (target, mesh):
        assert target == "cpu"
        assert mesh.mesh_dim_names == ("fsdp",) and mesh.size() == 2
    # --offload params on one device: a 1-rank FSDP2 mesh
    with st.laid_out(resolve_workload("tiny", offload=("params",))) as (target, mesh):
        assert mesh is not None and mesh.size() == 1


# ---- outputs, logits and loss -------------------------------------------------------------

def test_logits_are_the_tensor_the_first_of_a_sequence_or_the_attribute() -> None:
    x = torch.ones(2, 3)
    assert st._logits(x) is x
    assert st._logits((x, "cache")) is x
    assert st._logits([x]) is x
    assert st._logits(SimpleNamespace(logits=x)) is x
    for output in ((), ("a", x), SimpleNamespace(logits="no"), {"logits": x}):
        with pytest.raises(ModelError, match="no logits to score"):
            st._logits(output)


def test_default_loss_takes_the_models_own_else_cross_entropy() -> None:
    own = torch.tensor(7.0)
    assert st.default_loss(SimpleNamespace(loss=own, logits=None), torch.zeros(1)) is own
    # zero logits over 4 ids: ln 4 at each of 2 · 3 positions
    logits = torch.zeros(2, 3, 4)
    targets = torch.tensor([[0, 1, 2], [3, 0, 1]])
    got = st.default_loss(SimpleNamespace(loss=None, logits=logits), targets)
    assert got.item() == pytest.approx(math.log(4))
    # logits favouring id 0 by ln 3: p(0) = 3 / (3 + 1 + 1) = 0.6
    favoured = torch.zeros(1, 1, 3)
    favoured[..., 0] = math.log(3)
    assert st.default_loss(favoured, torch.tensor([[0]])).item() == pytest.approx(
        -math.log(0.6))
    with pytest.raises(ModelError, match=r"shape \(4,\), which does not score \(4,\)"):
        st.default_loss(torch.zeros(4), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ModelError, match=r"shape \(2, 3, 4\), which does not score \(2, 2\)"):
        st.default_loss(logits, torch.zeros(2, 2, dtype=torch.long))
    # 2 · 3 = 6 positions score 6 ids in another shape
    assert st.default_loss(logits, torch.zeros(6, dtype=torch.long)).item() == pytest.approx(
        math.log(4))


def test_the_vocabulary_is_the_configs_else_the_first_embeddings() -> None:
    model = nn.Sequential(nn.Embedding(11, 2), nn.Embedding(13, 2))
    assert st._vocabulary(model) == 11
    model.config = SimpleNamespace(vocab_size=17)  # type: ignore[assignment]
    assert st._vocabulary(model) == 17
    for vocab in (0, "17", None):
        model.config = SimpleNamespace(vocab_size=vocab)  # type: ignore[assignment]
        assert st._vocabulary(model) == 11
    with pytest.raises(ModelError, match="Linear has no embedding"):
        st._vocabulary(nn.Linear(2, 2))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, Any] = {}

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> None:
        self.seen = kwargs


@pytest.mark.parametrize(("problem", "labels", "shape", "dtype"), [
    (None, 1, (3,), torch.float32),  # one label: regression
    (None, 4, (3,), torch.long),  # more: single-label classification
    ("regression", 4, (3,), torch.float32),
    ("multi_label_classification", 4, (3, 4), torch.float32),
    ("single_label_classification", 1, (3,), torch.long),
])
def test_a_classifier_is_handed_zero_labels_of_its_problem(
        problem: str | None, labels: int, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    model = Classifier()
    st._classification_labels(model, SimpleNamespace(problem_type=problem, num_labels=labels))
    ids = torch.zeros(3, 5, dtype=torch.long)  # a batch of 3
    model(ids)
    got = model.seen["labels"]
    assert (tuple(got.shape), got.dtype, int(got.count_nonzero())) == (shape, dtype, 0)
    model(input_ids=ids)  # by keyword too
    assert tuple(model.seen["labels"].shape) == shape


def test_a_classifier_keeps_its_labels_and_runs_none_without_gradients() -> None:
    model = Classifier()
    st._classification_labels(model, SimpleNamespace(problem_type=None, num_labels=2))
    mine = torch.ones(3)
    model(torch.zeros(3, 5, dtype=torch.long), labels=mine)
    assert model.seen["labels"] is mine
    with torch.no_grad():
        model(torch.zeros(3, 5, dtype=torch.long))
    assert "labels" not in model.seen


# ---- casts ---------------------------------------------------------------------------------

def test_floating_parameters_grads_and_buffers_are_cast_in_place_and_stay_shared() -> None:
    linear = nn.Linear(2, 3)
    weight = linear.weight
    weight.grad = torch.ones(3, 2)
    shared = torch.ones(4)
    linear.register_buffer("scale", shared)
    linear.register_buffer("count", torch.zeros(2, dtype=torch.long))
    linear.register_buffer("nothing", None)
    other = nn.Linear(3, 3)
    other.register_buffer("scale", shared)
    model = nn.Sequential(linear, other)
    model.ids = nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False)
    already = nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    model.already = already
    st._cast_floating(model, torch.bfloat16)
    assert linear.weight is weight and weight.dtype == torch.bfloat16
    assert weight.grad is not None and weight.grad.dtype == torch.bfloat16
    assert linear.bias.dtype == other.weight.dtype == torch.bfloat16
    assert linear.scale.dtype == torch.bfloat16 and linear.scale is other.scale
    assert linear.count.dtype == torch.long and model.ids.dtype == torch.long
    assert linear.nothing is None and model.already is already


# ---- inputs --------------------------------------------------------------------------------

def _factory(tmp_path: Path, make_inputs: Any = None, loss: Any = None,
             factory: Any = None) -> FactoryFile:
    return FactoryFile(tmp_path / "f.py", "make", factory or (lambda: nn.Linear(2, 2)),
                       make_inputs, loss)


def test_factory_inputs_as_a_dict_a_sequence_or_a_tensor(tmp_path: Path) -> None:
    work = resolve_workload(ModelSource("f.py:make", "factory", "factory", "make"),
                            batch=2, seq=3, precision="fp32")
    ids = torch.zeros(2, 3, dtype=torch.long)
    floats = torch.ones(2)
    made = {"x": floats, "ids": ids}
    args, kwargs, targets, given = st._inputs(
        work, nn.Linear(2, 2), "cpu", _factory(tmp_path, lambda b, s: made))
    # the targets: the first tensor of whole numbers, after the floating ones
    assert (args, kwargs, targets, given) == ((), made, ids, made)
    assert kwargs is not made  # a copy: the model may not change the user's dict
    seq = [floats, ids]
    args, kwargs, targets, given = st._inputs(
        work, nn.Linear(2, 2), "cpu", _factory(tmp_path, lambda b, s: seq))
    assert (args, kwargs, targets, given) == ((floats, ids), {}, ids, seq)
    args, kwargs, targets, given = st._inputs(
        work, nn.Linear(2, 2), "cpu", _factory(tmp_path, lambda b, s: ids))
    assert (args, kwargs, targets, given) == ((ids,), {}, ids, ids)
    # make_inputs is called with (batch, seq)
    sizes: list[tuple[int, int]] = []
    st._inputs(work, nn.Linear(2, 2), "cpu",
               _factory(tmp_path, lambda b, s: sizes.append((b, s)) or ids))
    assert sizes == [(2, 3)]


def test_factory_inputs_that_score_nothing_are_refused(tmp_path: Path) -> None:
    work = resolve_workload(ModelSource("f.py:make", "factory", "factory", "make"),
                            precision="fp32")
    with pytest.raises(ModelError, match="returned str"):
        st._inputs(work, nn.Linear(2, 2), "cpu", _factory(tmp_path, lambda b, s: "x"))
    with pytest.raises(ModelError, match="gives no token ids to score"):
        st._inputs(work, nn.Linear(2, 2), "cpu",
                   _factory(tmp_path, lambda b, s: torch.ones(2)))
    # with a loss of its own, floating inputs are fine
    args, _, targets, _ = st._inputs(work, nn.Linear(2, 2), "cpu",
                                     _factory(tmp_path, lambda b, s: torch.ones(2),
                                              loss=lambda o, i: o.sum()))
    assert targets is None and len(args) == 1


def test_default_inputs_are_zero_token_ids_of_batch_by_seq(tmp_path: Path) -> None:
    work = resolve_workload("tiny", batch=2, seq=3, precision="fp32")
    args, kwargs, targets, given = st._inputs(work, nn.Linear(2, 2), "cpu", None)
    (tokens,) = args
    assert (tuple(tokens.shape), tokens.dtype, int(tokens.count_nonzero())) == (
        (2, 3), torch.long, 0)
    assert kwargs == {} and targets is tokens and given is tokens
    # a factory without make_inputs: a module that takes no token ids is refused
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    with pytest.raises(ModelError, match="Linear has no embedding"):
        st._inputs(resolve_workload(factory, precision="fp32"), nn.Linear(2, 2), "cpu",
                   _factory(tmp_path))
    args, *_ = st._inputs(resolve_workload(factory, precision="fp32", batch=2, seq=3),
                          nn.Embedding(5, 2), "cpu", _factory(tmp_path))
    assert tuple(args[0].shape) == (2, 3)


# ---- modules -------------------------------------------------------------------------------

def test_a_reference_model_is_checkpointed_on_one_device_only() -> None:
    def blocks(module: nn.Module) -> int:
        return sum(isinstance(m, CheckpointedBlock) for m in module.modules())

    single = resolve_workload("tiny", precision="fp32", checkpoint=True)
    assert blocks(st._build_module(single, "meta", torch.float32, None)) == 2  # tiny: 2 layers
    plain = resolve_workload("tiny", precision="fp32")
    assert blocks(st._build_module(plain, "meta", torch.float32, None)) == 0
    laid = resolve_workload("tiny", precision="fp32", checkpoint=True, layout=Layout(fsdp=2))
    assert blocks(st._build_module(laid, "meta", torch.float32, None)) == 0
    built = st._build_module(plain, "meta", torch.bfloat16, None)
    assert {p.dtype for p in built.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in built.parameters()} == {"meta"}


def test_a_factorys_module_is_built_on_the_target_and_cast(tmp_path: Path) -> None:
    work = resolve_workload(ModelSource("f.py:make", "factory", "factory", "make"),
                            precision="fp32")
    module = st._build_module(work, "meta", torch.bfloat16, _factory(tmp_path))
    assert module.weight.device.type == "meta" and module.weight.dtype == torch.bfloat16
    with pytest.raises(ModelError, match=r"the factory f\.py:make returned int, not a"):
        st._build_module(work, "meta", torch.float32, _factory(tmp_path, factory=lambda: 3))


def test_build_module_imports_the_factory_file(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text("import torch\n\ndef make():\n    return torch.nn.Linear(3, 4)\n")
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    work = resolve_workload(source, precision="bf16")
    module, factory = st.build_module(work, "meta")
    assert factory is not None and factory.path == path and factory.name == "make"
    assert tuple(module.weight.shape) == (4, 3) and module.weight.dtype == torch.bfloat16
    module, factory = st.build_module(resolve_workload("tiny", precision="fp32"), "meta")
    assert factory is None  # a preset: no file


def test_zero1_gets_its_optimizer_other_layouts_none() -> None:
    assert st.zero1_optimizer(Layout(fsdp=2), object(), "adamw") is None
    assert st.zero1_optimizer(Layout(fsdp=2, zero=1), None, "adamw") is None
    from tensorledger.workload.parallel import build_mesh, fake_process_group

    layout = Layout(fsdp=2, zero=1)
    with fake_process_group(2):
        mesh = build_mesh(layout)
        inner = st.zero1_optimizer(layout, mesh, "sgd", "foreach")
        assert inner is not None
        optimizer = inner([nn.Parameter(torch.ones(4)), nn.Parameter(torch.ones(2))])
        assert type(optimizer).__name__ == "ZeroRedundancyOptimizer"
        assert type(optimizer.optim).__name__ == "SGD"
        assert optimizer.optim.defaults["foreach"] is True


# ---- the prepared step --------------------------------------------------------------------

def test_prepare_builds_module_inputs_and_optimizer_on_real_cpu_tensors() -> None:
    work = resolve_workload("tiny", precision="fp32", device="cpu", batch=2, seq=4)
    prepared = st.prepare(work, "cpu")
    assert prepared.device_type == "cpu" and prepared.optimizer is not None
    assert prepared.inference is None and prepared.cp_mesh is None
    assert prepared.params_offloaded is None and prepared.lora is None
    assert prepared.float8 is None and prepared.user_loss is None
    assert len(prepared.parameters) == len(set(prepared.parameters))  # tied weights once
    assert tuple(prepared.args[0].shape) == (2, 4)
    before = [p.detach().clone() for p in prepared.parameters]
    prepared.run()
    assert all(p.grad is None for p in prepared.parameters)  # dropped after the step
    moved = sum(not torch.equal(a, p) for a, p in zip(before, prepared.parameters, strict=True))
    assert moved > 0  # the optimizer stepped
    forward = st.prepare(resolve_workload("tiny", precision="fp32", device="cpu",
                                          step="forward"), "cpu")
    assert forward.optimizer is None
    decode = st.prepare(resolve_workload("tiny", step="prefill", device="cpu", seq=4), "cpu")
    assert decode.inference is not None


def test_a_model_with_nothing_to_train_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "frozen.py"
    path.write_text("import torch\n\ndef make():\n    m = torch.nn.Embedding(5, 2)\n"
                    "    m.weight.requires_grad_(False)\n    return m\n")
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    with pytest.raises(ModelError, match="has no trainable parameters"):
        st.prepare(resolve_workload(source, precision="fp32", device="cpu"), "cpu")
    assert st.prepare(resolve_workload(source, precision="fp32", device="cpu",
                                       step="forward"), "cpu").optimizer is None


def test_prepare_lays_out_and_offloads_on_a_mesh() -> None:
    work = resolve_workload("tiny", offload=("params",), precision="fp32")
    with st.laid_out(work) as (target, mesh):
        prepared = st.prepare(work, target, mesh)
    assert prepared.params_offloaded is not None
    assert prepared.params_offloaded.stand_in is False  # the CPU target: nothing stands in
    h100 = resolve_workload("tiny", offload=("params",), precision="fp32",
                            target=H100)
    with st.laid_out(h100) as (target, mesh):
        assert st.prepare(h100, target, mesh).params_offloaded.stand_in is True  # type: ignore[union-attr]


def _prepared(module: nn.Module, work: Any, **fields: Any) -> st.PreparedStep:
    values: dict[str, Any] = {"optimizer": None, "args": (torch.zeros(1, 2, dtype=torch.long),),
                              "kwargs": {}, "targets": torch.zeros(1, 2, dtype=torch.long),
                              "user_loss": None, "user_inputs": None, "device_type": "cpu"}
    values.update(fields)
    return st.PreparedStep(work=work, module=module, parameters=list(module.parameters()),
                           **values)


def test_autocast_is_bf16_where_the_recipe_asks_except_on_meta() -> None:
    mixed = resolve_workload("tiny")
    assert isinstance(_prepared(Logits(3), mixed).autocast(), torch.autocast)
    assert not isinstance(_prepared(Logits(3), mixed, device_type="meta").autocast(),
                          torch.autocast)
    fp32 = resolve_workload("tiny", precision="fp32")
    assert not isinstance(_prepared(Logits(3), fp32).autocast(), torch.autocast)
    with _prepared(Logits(3), mixed).autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


def test_a_users_loss_must_be_a_scalar_tensor() -> None:
    work = resolve_workload("tiny", precision="fp32")
    summed = _prepared(Logits(3), work, user_loss=lambda out, inputs: out.sum() + inputs,
                       user_inputs=2.0)
    assert summed.loss().item() == 2.0  # zero logits summed, plus the inputs handed over
    for bad in (lambda o, i: 1.0, lambda o, i: o):  # a float; logits of 6 values
        with pytest.raises(ModelError, match="not a scalar tensor"):
            _prepared(Logits(3), work, user_loss=bad).loss()
    # no loss of the user's: cross-entropy of 3 ids, ln 3
    assert _prepared(Logits(3), work).loss().item() == pytest.approx(math.log(3))


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))
        self.calls: list[bool] = []

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls.append(torch.is_grad_enabled())
        return torch.zeros(*tokens.shape, 3) * self.weight


def test_a_forward_step_runs_once_without_gradients() -> None:
    module = Counting()
    _prepared(module, resolve_workload("tiny", precision="fp32", step="forward")).run()
    assert module.calls == [False]
    assert _prepared(module, resolve_workload("tiny", precision="fp32")).cache_before() == []


def test_a_training_step_runs_backward_the_optimizer_and_drops_gradients() -> None:
    module = Counting()
    stepped: list[int] = []
    optimizer = SimpleNamespace(step=lambda: stepped.append(len(stepped)))
    prepared = _prepared(module, resolve_workload("tiny", precision="fp32"),
                         optimizer=optimizer)
    seen: list[Any] = []
    prepared.drop_gradients = lambda: seen.append(module.weight.grad)  # type: ignore[method-assign]
    prepared.run()
    assert module.calls == [True] and stepped == [0]
    # d/dw of mean CE over zero·w logits: the logits' gradient sums to 0 per position
    assert seen and seen[0] is not None and seen[0].item() == pytest.approx(0.0)


def test_drop_gradients_clears_every_parameter() -> None:
    module = nn.Linear(2, 2)
    prepared = _prepared(module, resolve_workload("tiny", precision="fp32"))
    for p in module.parameters():
        p.grad = torch.ones_like(p)
    prepared.drop_gradients()
    assert [p.grad for p in module.parameters()] == [None, None]


def test_priming_the_optimizer_steps_on_zero_gradients_of_trainable_parameters() -> None:
    module = nn.Linear(2, 2)
    module.bias.requires_grad_(False)
    grads: list[Any] = []
    optimizer = SimpleNamespace(step=lambda: grads.append(
        (module.weight.grad.clone(), module.bias.grad)))
    prepared = _prepared(module, resolve_workload("tiny", precision="fp32"),
                         optimizer=optimizer)
    prepared.prime_optimizer()
    ((weight_grad, bias_grad),) = grads
    assert torch.equal(weight_grad, torch.zeros(2, 2)) and bias_grad is None
    assert module.weight.grad is None  # dropped afterwards
    _prepared(module, resolve_workload("tiny", precision="fp32")).prime_optimizer()  # none


def test_saved_hooks_see_each_saved_tensor_or_offload_them() -> None:
    prepared = _prepared(Logits(3), resolve_workload("tiny", precision="fp32"))
    saved: list[tuple[int, ...]] = []

    def on_saved(t: torch.Tensor) -> torch.Tensor:
        saved.append(tuple(t.shape))
        return t

    x = torch.ones(2, 3, requires_grad=True)
    with prepared.saved_hooks(on_saved):
        (x * x).sum().backward()
    assert saved == [(2, 3), (2, 3)]  # x saved twice by mul
    assert prepared.saved_hooks() is not None
    offloading = _prepared(Logits(3), resolve_workload("tiny", precision="fp32",
                                                       offload=("activations",)))
    with offloading.saved_hooks(on_saved):
        (x * x).sum().backward()
    assert offloading.offloaded is not None
    assert offloading.offloaded.to_host_bytes == 2 * 2 * 3 * 4  # two saves of 6 fp32 values
    assert saved == [(2, 3), (2, 3)]  # offloaded instead of seen
    # fake tensors for an H100: the CPU stands in for the device
    target = resolve_workload("tiny", target=H100, offload=("activations",))
    standing = _prepared(Logits(3), target)
    standing.saved_hooks()
    assert standing.offloaded is not None and standing.offloaded.stand_in is True
    on_cuda = _prepared(Logits(3), target, device_type="cuda")
    on_cuda.saved_hooks()
    assert on_cuda.offloaded is not None and on_cuda.offloaded.stand_in is False
    assert offloading.offloaded.stand_in is False  # the CPU target


def test_params_moved_counts_afresh_with_the_hosts_hook() -> None:
    from tensorledger.workload.param_offload import ParamOffload

    prepared = _prepared(Logits(3), resolve_workload("tiny", precision="fp32"))
    assert prepared.params_moved() is not None  # nothing to count
    moved = ParamOffload(stand_in=True)
    moved.to_host_bytes = 5

    def hook(t: torch.Tensor) -> None:
        return None

    counted = _prepared(Logits(3), resolve_workload("tiny", precision="fp32"),
                        params_offloaded=moved)
    with counted.params_moved(hook):
        pass
    assert moved.on_host is hook and moved.to_host_bytes == 0


def test_guard_names_the_factory_file(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    prepared = _prepared(Logits(3), resolve_workload(source, precision="fp32"))
    with pytest.raises(ModelError, match=r"a step of .*m\.py:make"), prepared.guard():
        raise ValueError("boom")


# ---- more by hand: what each piece is handed -----------------------------------------------

def test_two_dimensional_logits_score_one_sequence_and_a_one_id_vocabulary_is_kept() -> None:
    # (positions, vocabulary) logits: 3 positions of 4 ids, ln 4 each
    assert st.default_loss(torch.zeros(3, 4), torch.tensor([0, 1, 2])).item() == \
        pytest.approx(math.log(4))
    model = nn.Sequential(nn.Embedding(11, 2))
    model.config = SimpleNamespace(vocab_size=1)  # type: ignore[assignment]
    assert st._vocabulary(model) == 1  # the config's, however small


def test_classification_labels_are_made_on_the_ids_device() -> None:
    for problem, labels in (("multi_label_classification", 4), ("regression", 1),
                            ("single_label_classification", 4)):
        model = Classifier()
        st._classification_labels(model, SimpleNamespace(problem_type=problem,
                                                         num_labels=labels))
        model(torch.zeros(3, 5, dtype=torch.long, device="meta"))
        assert model.seen["labels"].device.type == "meta", problem


def test_a_later_floating_buffer_is_cast_after_an_integer_one() -> None:
    module = nn.Module()
    module.register_buffer("count", torch.zeros(2, dtype=torch.long))
    module.register_buffer("scale", torch.ones(2))
    st._cast_floating(module, torch.bfloat16)
    assert (module.count.dtype, module.scale.dtype) == (torch.long, torch.bfloat16)


def test_default_token_ids_are_made_on_the_target() -> None:
    work = resolve_workload("tiny", batch=2, seq=3, precision="fp32")
    (tokens,), *_ = st._inputs(work, nn.Linear(2, 2), "meta", None)
    assert tokens.device.type == "meta"


def _user_file(tmp_path: Path, body: str) -> tuple[Path, FactoryFile]:
    from tensorledger.workload.factory import load_factory_file

    path = tmp_path / "user_model.py"
    path.write_text(body)
    return path, load_factory_file(path, "make")


BROKEN = """import torch


def make():
    return torch.nn.Linear(2, 2)


def make_inputs(batch, seq):
    raise ValueError("no inputs")


def loss(output, inputs):
    return output.sum()


def broken():
    raise ValueError("broken factory")


def relay(call):
    return call()
"""


def test_a_failing_make_inputs_is_named_with_its_line(tmp_path: Path) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    work = resolve_workload(ModelSource(f"{path}:make", "factory", "factory", "make",
                                        path=path, function="make"), precision="fp32")
    with pytest.raises(ModelError) as caught:
        st._inputs(work, nn.Linear(2, 2), "cpu", factory)
    # the raise is on line 9 of the file
    assert str(caught.value).startswith("make_inputs(batch, seq) failed")
    assert str(caught.value).endswith("(at user_model.py:9)")


def test_a_failing_factory_is_named_with_its_line(tmp_path: Path) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    work = resolve_workload(source, precision="fp32")
    failing = replace(factory, factory=lambda: __import__("user_model_helper_missing"))
    with pytest.raises(ModelError) as caught:
        st._build_module(work, "cpu", torch.float32, failing)
    assert str(caught.value).startswith(f"the factory {path}:make failed")
    broken = replace(factory, factory=factory.factory.__globals__["broken"])
    with pytest.raises(ModelError) as caught:
        st._build_module(work, "cpu", torch.float32, broken)
    # line 17 of the file raises; the lambda of this test is not the place
    assert str(caught.value).endswith("(at user_model.py:17)")


def test_a_failing_cast_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    work = resolve_workload(ModelSource(f"{path}:make", "factory", "factory", "make",
                                        path=path, function="make"), precision="fp32")

    def refuse(module: nn.Module, dtype: torch.dtype) -> None:
        factory.factory.__globals__["broken"]()

    monkeypatch.setattr(st, "_cast_floating", refuse)
    with pytest.raises(ModelError) as caught:
        st._build_module(work, "cpu", torch.bfloat16, factory)
    message = str(caught.value)
    assert message.startswith(f"casting the module of {path}:make to torch.bfloat16 failed")
    assert message.endswith("(at user_model.py:17)")


def test_the_step_guard_points_into_the_factory_file(tmp_path: Path) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    prepared = _prepared(Logits(3), resolve_workload(source, precision="fp32"))
    with pytest.raises(ModelError) as caught, prepared.guard():
        factory.factory.__globals__["broken"]()
    assert str(caught.value).endswith("(at user_model.py:17)")
    # a preset's step: the innermost frame, wherever it is
    with pytest.raises(ModelError) as caught, _prepared(
            Logits(3), resolve_workload("tiny", precision="fp32")).guard():
        factory.factory.__globals__["broken"]()
    assert str(caught.value).endswith("(at user_model.py:17)")


def test_a_transformers_model_is_built_on_the_target_and_checkpointed_when_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[Any, torch.dtype, str]] = []

    def hf_model(work: Any, dtype: torch.dtype) -> nn.Module:
        module = nn.Linear(2, 2)
        built.append((work, dtype, module.weight.device.type))
        return module

    wrapped: list[nn.Module] = []
    monkeypatch.setattr(st, "_hf_model", hf_model)
    monkeypatch.setattr(st, "checkpoint_hf_layers", lambda m: wrapped.append(m) or m)
    source = ModelSource("c.json", "config", "transformers", "m")
    plain = resolve_workload(source, precision="fp32")
    module = st._build_module(plain, "meta", torch.bfloat16, None)
    assert built == [(plain, torch.bfloat16, "meta")] and wrapped == []
    # made by hand: the CLI checkpoints a config.json's model only through its reference
    checkpointed = replace(plain, checkpoint=True)
    again = st._build_module(checkpointed, "meta", torch.float32, None)
    assert isinstance(again, nn.Linear) and again is not module  # a model built anew,
    assert wrapped == [again]  # and it is what was wrapped

    def failing(work: Any, dtype: torch.dtype) -> nn.Module:
        raise ValueError("no such layer")

    monkeypatch.setattr(st, "_hf_model", failing)
    with pytest.raises(ModelError, match=r"building c\.json with transformers failed"):
        st._build_module(plain, "meta", torch.float32, None)


def test_saved_tensors_offloaded_are_shown_to_the_hosts_hook() -> None:
    offloading = _prepared(Logits(3), resolve_workload("tiny", precision="fp32",
                                                       offload=("activations",)))
    on_host: list[tuple[int, ...]] = []
    x = torch.ones(2, 3, requires_grad=True)
    with offloading.saved_hooks(on_host=lambda t: on_host.append(tuple(t.shape))):
        (x * x).sum().backward()
    assert on_host == [(2, 3), (2, 3)]  # x saved twice by mul, each copied to the host


def test_the_sequence_is_sharded_over_the_cp_mesh_with_every_input(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.context_parallel as cp

    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(cp, "sequence_sharded", lambda *args: calls.append(args) or "sharded")
    ids, mask, targets = (torch.zeros(1, 4), torch.ones(1, 4), torch.zeros(1, 4))
    mesh = object()
    work = resolve_workload("tiny", layout=Layout(cp=2, cp_rotate="alltoall"), seq=8)
    prepared = _prepared(Logits(3), work, args=(ids,), kwargs={"mask": mask},
                         targets=targets, cp_mesh=mesh)
    assert prepared.sequence_sharded() == "sharded"
    ((given_mesh, buffers, rotate),) = calls
    assert given_mesh is mesh and rotate == "alltoall"
    assert [b is t for b, t in zip(buffers, (ids, mask, targets), strict=True)] == [True] * 3


def test_the_recipes_autocast_is_bf16_whatever_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        cast = _prepared(Logits(3), resolve_workload("tiny")).autocast()
        assert isinstance(cast, torch.autocast) and cast.fast_dtype == torch.bfloat16
    finally:
        torch.set_autocast_dtype("cpu", before)


class Keyed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.seen: list[dict[str, Any]] = []

    def forward(self, tokens: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.seen.append(kwargs)
        return torch.zeros(*tokens.shape, 3) * self.weight


def test_the_keyword_inputs_reach_the_forward_and_the_loss() -> None:
    module = Keyed()
    prepared = _prepared(module, resolve_workload("tiny", precision="fp32", step="forward"),
                         kwargs={"scale": 2})
    prepared.forward()
    prepared.loss()
    assert module.seen == [{"scale": 2}, {"scale": 2}]


def test_a_cached_step_hands_the_token_ids_and_the_cache_to_the_inference_path() -> None:
    steps: list[tuple[torch.Tensor, bool]] = []
    path = SimpleNamespace(step=lambda ids, own: steps.append((ids, own)))
    ids, other = torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2)
    prepared = _prepared(Logits(3), resolve_workload("tiny", step="prefill"),
                         args=(ids, other), inference=path)
    prepared.forward()
    prepared.forward(own_cache=True)
    assert [(t is ids, own) for t, own in steps] == [(True, False), (True, True)]


def test_fp8_weights_gathered_by_fsdp_get_their_scales_after_each_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torchao.float8

    from tensorledger.workload.float8 import AppliedFloat8

    seen: list[nn.Module] = []
    monkeypatch.setattr(torchao.float8, "precompute_float8_dynamic_scale_for_fsdp", seen.append)
    module = Logits(3)
    work = resolve_workload("tiny", precision="fp32")
    _prepared(module, work, float8=AppliedFloat8("tensorwise", (), (), False)
              ).after_optimizer_step()
    _prepared(module, work).after_optimizer_step()
    assert seen == []  # no fp8 all-gather, or no fp8: nothing
    _prepared(module, work, float8=AppliedFloat8("tensorwise", (), (), True)
              ).after_optimizer_step()
    assert seen == [module]


def test_zero1s_default_kernel_is_the_loop() -> None:
    from tensorledger.workload.parallel import build_mesh, fake_process_group

    layout = Layout(fsdp=2, zero=1)
    with fake_process_group(2):
        inner = st.zero1_optimizer(layout, build_mesh(layout), "adamw")
        assert inner is not None
        optimizer = inner([nn.Parameter(torch.ones(4))])
        assert optimizer.optim.defaults["foreach"] is False
        assert type(optimizer.optim).__name__ == "AdamW"


# ---- prepare's wiring ----------------------------------------------------------------------

class Wiring:
    """Stand-ins for what prepare calls, each recording what it was handed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import tensorledger.workload.inference as inference
        import tensorledger.workload.parallel as parallel

        self.calls: dict[str, Any] = {}
        record = self.calls

        def lora(work: Any, module: nn.Module) -> tuple[nn.Module, str]:
            record["lora"] = (work, module)
            return module, "applied"

        def float8(module: nn.Module, precision: Any, *, sharded: bool) -> tuple[nn.Module, str]:
            record["float8"] = (module, precision, sharded)
            return module, "fp8"

        def parallelize(module: nn.Module, layout: Layout, mesh: Any, *, between: Any,
                        offload_params: bool) -> nn.Module:
            record["parallelize"] = (module, layout, mesh, between, offload_params)
            return module

        def optimizer(params: Any, name: Any, precision: Any, *, inner: Any,
                      kernel: str) -> str:
            record["optimizer"] = (params, name, precision, inner, kernel)
            return "optimizer"

        def zero1(layout: Layout, mesh: Any, name: str, kernel: str) -> str:
            record["zero1"] = (layout, mesh, name, kernel)
            return "inner"

        class Path:
            def __init__(self, work: Any, module: nn.Module, target: str) -> None:
                record["inference"] = (work, module, target)

        monkeypatch.setattr(st, "apply_lora", lora)
        monkeypatch.setattr(st, "apply_float8", float8)
        monkeypatch.setattr(parallel, "parallelize", parallelize)
        monkeypatch.setattr(st, "RecipeOptimizer", optimizer)
        monkeypatch.setattr(st, "zero1_optimizer", zero1)
        monkeypatch.setattr(inference, "InferencePath", Path)


def _work(**options: Any) -> Any:
    from tensorledger.workload.spec import Workload

    base = resolve_workload("tiny", precision="fp32", device="cpu", batch=1, seq=4)
    return Workload(**{**base.__dict__, **options})


def test_prepare_hands_the_adapters_and_fp8_the_built_module(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorledger.napkin.recipes import resolve_precision
    from tensorledger.workload.spec import Lora

    wiring = Wiring(monkeypatch)
    work = _work(lora=Lora(8, 8), precision=resolve_precision("fp8-tensorwise"))
    prepared = st.prepare(work, "cpu")
    lora_work, lora_module = wiring.calls["float8"][0], wiring.calls["lora"][1]
    assert wiring.calls["lora"][0] is work and lora_module is prepared.module
    assert lora_work is prepared.module
    assert wiring.calls["float8"][1] is work.precision
    assert wiring.calls["float8"][2] is False  # one device: nothing sharded
    assert (prepared.lora, prepared.float8) == ("applied", "fp8")
    fsdp = _work(precision=resolve_precision("fp8-tensorwise"), layout=Layout(fsdp=2))
    st.prepare(fsdp, "cpu", mesh={"cp": "cp mesh"})
    assert wiring.calls["float8"][2] is True  # FSDP2 shards the converted weights next
    st.prepare(_work(precision=resolve_precision("fp8-tensorwise"),
                     layout=Layout(dp=2, fsdp=2)), "cpu", mesh={})
    assert wiring.calls["float8"][2] is True  # HSDP too
    st.prepare(_work(precision=resolve_precision("fp8-tensorwise"), layout=Layout(dp=2)),
               "cpu", mesh={})
    assert wiring.calls["float8"][2] is False  # DDP: whole weights


def test_prepare_lays_out_the_module_it_built(monkeypatch: pytest.MonkeyPatch) -> None:
    wiring = Wiring(monkeypatch)
    st.prepare(_work(), "cpu")
    assert "parallelize" not in wiring.calls  # no mesh: one device
    layout = Layout(fsdp=2)
    prepared = st.prepare(_work(layout=layout, checkpoint=True, offload=("params",)), "cpu",
                          mesh={})
    module, given_layout, mesh, between, offload = wiring.calls["parallelize"]
    assert module is prepared.module and given_layout is layout and mesh == {}
    assert between is st.checkpoint_blocks and offload is True
    st.prepare(_work(layout=layout), "cpu", mesh={})
    assert wiring.calls["parallelize"][3:] == (None, False)  # not checkpointed, not offloaded
    factory = ModelSource("f.py:make", "factory", "factory", "make")
    monkeypatch.setattr(st, "build_module", lambda work, target: (Logits(3), None))
    monkeypatch.setattr(st, "_inputs", lambda *args: ((), {}, None, None))
    st.prepare(_work(source=factory, layout=layout, checkpoint=True), "cpu", mesh={})
    assert wiring.calls["parallelize"][3] is None  # a factory checkpoints itself


def test_prepare_makes_the_optimizer_of_the_trainable_parameters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wiring = Wiring(monkeypatch)
    work = _work(optimizer_kernel="foreach", layout=Layout(fsdp=2, zero=1))
    mesh = {"fsdp": "fsdp mesh"}
    prepared = st.prepare(work, "cpu", mesh=mesh)
    params, name, precision, inner, kernel = wiring.calls["optimizer"]
    assert params == prepared.parameters and name is work.optimizer
    assert precision is work.precision and inner == "inner" and kernel == "foreach"
    assert wiring.calls["zero1"] == (work.layout, mesh, "adamw", "foreach")
    assert prepared.optimizer == "optimizer"


def test_prepare_hands_the_inference_path_the_module_and_target(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tensorledger.napkin.recipes import resolve_precision

    wiring = Wiring(monkeypatch)
    work = _work(step=resolve_workload("tiny", step="prefill").step,
                 precision=resolve_precision("bf16"))
    prepared = st.prepare(work, "cpu")
    assert wiring.calls["inference"][0] is work
    assert wiring.calls["inference"][1] is prepared.module
    assert wiring.calls["inference"][2] == "cpu"
    assert prepared.inference is not None


def test_prepare_keeps_the_factorys_loss_and_inputs(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    Wiring(monkeypatch)
    path = tmp_path / "with_loss.py"
    path.write_text("import torch\n\ndef make():\n    return torch.nn.Linear(2, 2)\n\n"
                    "def make_inputs(batch, seq):\n    return torch.ones(batch, 2)\n\n"
                    "def loss(output, inputs):\n    return output.sum()\n")
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    prepared = st.prepare(_work(source=source), "cpu")
    assert prepared.user_loss is not None and prepared.user_loss.__name__ == "loss"
    assert torch.equal(prepared.user_inputs, torch.ones(1, 2))  # batch 1


def test_prepare_keeps_the_cp_mesh_and_the_param_offload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    Wiring(monkeypatch)
    mesh = {"cp": "the cp mesh"}
    cp = st.prepare(_work(layout=Layout(cp=2)), "cpu", mesh=mesh)
    assert cp.cp_mesh == "the cp mesh"
    assert st.prepare(_work(layout=Layout(fsdp=2)), "cpu", mesh=mesh).cp_mesh is None
    assert cp.params_offloaded is None
    offloaded = st.prepare(_work(offload=("params",)), "cpu", mesh={})
    assert offloaded.params_offloaded is not None
    assert offloaded.params_offloaded.stand_in is False  # the CPU target
    h100 = st.prepare(_work(offload=("params",), target=H100), "cpu", mesh={})
    assert h100.params_offloaded is not None and h100.params_offloaded.stand_in is True
    # on a real GPU nothing stands in (built here on the CPU: only the target's name counts)
    monkeypatch.setattr(st, "build_module", lambda work, target: (Logits(3), None))
    monkeypatch.setattr(st, "_inputs", lambda *args: ((), {}, None, None))
    cuda = st.prepare(_work(offload=("params",), target=H100), "cuda", mesh={})
    assert cuda.device_type == "cuda"
    assert cuda.params_offloaded is not None and cuda.params_offloaded.stand_in is False


# ---- a config.json's model, built by a stand-in for transformers ---------------------------

class FakeConfig:
    """A transformers config as far as ``_hf_model`` reads one."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self.pad_token_id = fields.get("pad_token_id")
        self.problem_type = None
        self.num_labels = 2

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FakeConfig:
        if "bad" in raw:
            raise ValueError("bad field")
        return cls(raw)


class FakeAuto:
    made: ClassVar[list[tuple[FakeConfig, torch.dtype, str]]] = []

    def __init__(self, head: str) -> None:
        self.head = head

    def from_config(self, config: FakeConfig, dtype: torch.dtype) -> nn.Module:
        if "unbuildable" in config.fields:
            raise ValueError("Unrecognized configuration class\nsecond line")
        FakeAuto.made.append((config, dtype, self.head))
        return Classifier()


@pytest.fixture
def fake_transformers(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    import sys

    quiet: list[int] = []
    module = SimpleNamespace(
        CONFIG_MAPPING={"llama": FakeConfig}, __version__="9.9",
        logging=SimpleNamespace(set_verbosity_error=lambda: quiet.append(1)),
        AutoModelForCausalLM=FakeAuto("causal"), AutoModelForMaskedLM=FakeAuto("masked"),
        AutoModelForSequenceClassification=FakeAuto("classifier"), quiet=quiet)
    monkeypatch.setitem(sys.modules, "transformers", module)
    FakeAuto.made = []
    return module


def _hf_work(fields: dict[str, Any], head: str | None = None) -> Any:
    source = ModelSource("c.json", "config", "transformers", "m", path=Path("c.json"),
                         hf_config={"model_type": "llama", **fields}, head=head)
    return _work(source=source)


def test_the_config_is_read_without_its_type_and_built_by_its_heads_class(
        fake_transformers: SimpleNamespace) -> None:
    work = _hf_work({"hidden_size": 8})
    model = st._hf_model(work, torch.bfloat16)
    ((config, dtype, head),) = FakeAuto.made
    assert config.fields == {"hidden_size": 8}  # model_type taken out
    assert work.source.hf_config["model_type"] == "llama"  # the source's own is untouched
    assert (dtype, head) == (torch.bfloat16, "causal")  # no head named: a causal LM
    assert fake_transformers.quiet == [1]  # its advice on configs silenced
    assert isinstance(model, Classifier)
    st._hf_model(_hf_work({}, head="masked-lm"), torch.float32)
    assert FakeAuto.made[-1][2] == "masked"
    model = st._hf_model(_hf_work({}, head="causal-lm"), torch.float32)
    assert FakeAuto.made[-1][2] == "causal"
    model(torch.zeros(3, 2, dtype=torch.long))
    assert "labels" not in model.seen  # no labels but for a classifier


def test_a_classifier_gets_a_pad_id_and_labels(fake_transformers: SimpleNamespace) -> None:
    model = st._hf_model(_hf_work({}, head="sequence-classification"), torch.float32)
    config, _, head = FakeAuto.made[-1]
    assert head == "classifier" and config.pad_token_id == 0  # none given: id 0 pads
    model(torch.zeros(3, 2, dtype=torch.long))
    assert tuple(model.seen["labels"].shape) == (3,)  # 2 labels: one class id a sequence
    st._hf_model(_hf_work({"pad_token_id": 5}, head="sequence-classification"), torch.float32)
    assert FakeAuto.made[-1][0].pad_token_id == 5  # its own kept
    st._hf_model(_hf_work({}, head="masked-lm"), torch.float32)
    assert FakeAuto.made[-1][0].pad_token_id is None  # only a classifier needs one


def test_a_config_transformers_cannot_build_is_refused_in_one_line(
        fake_transformers: SimpleNamespace) -> None:
    from tensorledger.errors import ConfigError

    source = ModelSource("c.json", "config", "transformers", "m", path=Path("c.json"),
                         hf_config={"model_type": "mamba9"})
    with pytest.raises(ConfigError, match=r"c\.json: model_type 'mamba9' is not known to "
                                          r"the installed transformers 9\.9"):
        st._hf_model(_work(source=source), torch.float32)
    with pytest.raises(ConfigError, match=r"cannot read it as a llama config \(ValueError: "
                                          r"bad field\)"):
        st._hf_model(_hf_work({"bad": 1}), torch.float32)
    with pytest.raises(ConfigError, match=r"c\.json: model_type 'llama' has no masked-lm "
                                          r"class in transformers \(Unrecognized "
                                          r"configuration class\)$"):
        st._hf_model(_hf_work({"unbuildable": 1}, head="masked-lm"), torch.float32)


def test_warming_without_sync_runs_forward_and_backward_inside_no_sync() -> None:
    from contextlib import contextmanager

    events: list[str] = []

    class Wrapped(Counting):
        @contextmanager
        def no_sync(self) -> Any:
            events.append("enter")
            yield
            events.append("exit")

    module = Wrapped()
    prepared = _prepared(module, resolve_workload("tiny", precision="fp32"))
    prepared.drop_gradients = lambda: events.append(  # type: ignore[method-assign]
        f"drop {module.weight.grad is not None}")
    prepared.warm_without_sync()
    assert module.calls == [True]  # one forward, with gradients
    assert events == ["enter", "exit", "drop True"]  # backward ran: a gradient to drop


# ---- where user code failed: the innermost frame of the user's file ------------------------

RELAY_LINE = 21  # ``return call()`` in BROKEN's relay


def _fails() -> None:
    raise ValueError("deeper than the user's file")


def _relayed(factory: FactoryFile) -> Any:
    """A call that passes through the user's file and fails in this one: the place named is
    the user's line when the file is known, else this file's."""
    relay = factory.factory.__globals__["relay"]
    return lambda *args, **kwargs: relay(_fails)


def _factory_work(path: Path) -> Any:
    return resolve_workload(ModelSource(f"{path}:make", "factory", "factory", "make",
                                        path=path, function="make"), precision="fp32")


def test_a_factory_failing_beyond_its_file_is_placed_in_its_file(tmp_path: Path) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    work = _factory_work(path)
    with pytest.raises(ModelError) as caught:
        st._build_module(work, "cpu", torch.float32, replace(factory, factory=_relayed(factory)))
    assert str(caught.value).endswith(f"(at user_model.py:{RELAY_LINE})")
    with pytest.raises(ModelError) as caught:
        st._inputs(work, nn.Linear(2, 2), "cpu",
                   replace(factory, make_inputs=_relayed(factory)))
    assert str(caught.value).endswith(f"(at user_model.py:{RELAY_LINE})")


def test_a_cast_failing_beyond_the_file_is_placed_in_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    monkeypatch.setattr(st, "_cast_floating", _relayed(factory))
    with pytest.raises(ModelError) as caught:
        st._build_module(_factory_work(path), "cpu", torch.bfloat16, factory)
    assert str(caught.value).endswith(f"(at user_model.py:{RELAY_LINE})")


def test_a_step_failing_beyond_the_factory_file_is_placed_in_it(tmp_path: Path) -> None:
    path, factory = _user_file(tmp_path, BROKEN)
    with pytest.raises(ModelError) as caught, \
            _prepared(Logits(3), _factory_work(path)).guard():
        _relayed(factory)()
    assert str(caught.value) == ("a step of " + f"{path}:make failed: ValueError: deeper than "
                                 f"the user's file (at user_model.py:{RELAY_LINE})")


def test_a_conversion_or_layout_failing_in_user_code_is_placed_in_its_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.parallel as parallel
    from tensorledger.napkin.recipes import resolve_precision

    path, factory = _user_file(tmp_path, BROKEN)
    monkeypatch.setattr(st, "apply_float8", _relayed(factory))
    monkeypatch.setattr(parallel, "parallelize", _relayed(factory))
    source = ModelSource(f"{path}:make", "factory", "factory", "make", path=path,
                         function="make")
    fp8 = resolve_precision("fp8-tensorwise")
    with pytest.raises(ModelError) as caught:
        st.prepare(_work(source=source, precision=fp8), "cpu")
    assert str(caught.value) == (f"converting {path}:make to float8 with torchao failed: "
                                 "ValueError: deeper than the user's file "
                                 f"(at user_model.py:{RELAY_LINE})")
    with pytest.raises(ModelError) as caught:
        st.prepare(_work(source=source, layout=Layout(fsdp=2)), "cpu", mesh={})
    assert str(caught.value) == (f"laying {path}:make out as FSDP ZeRO-3 × 2 failed: "
                                 "ValueError: deeper than the user's file "
                                 f"(at user_model.py:{RELAY_LINE})")
    # a preset has no file of its own: the innermost frame is named
    with pytest.raises(ModelError, match=r"^converting tiny to float8 with torchao failed: "
                                         r".*\(at test_step_pinned\.py:\d+\)$"):
        st.prepare(_work(precision=fp8), "cpu")
    with pytest.raises(ModelError, match=r"^laying tiny out as FSDP ZeRO-3 × 2 failed: "
                                         r".*\(at test_step_pinned\.py:\d+\)$"):
        st.prepare(_work(layout=Layout(fsdp=2)), "cpu", mesh={})
    # a preset's step guard names the innermost frame too
    with pytest.raises(ModelError, match=r"\(at test_step_pinned\.py:\d+\)$"), \
            _prepared(Logits(3), resolve_workload("tiny", precision="fp32")).guard():
        _relayed(factory)()
