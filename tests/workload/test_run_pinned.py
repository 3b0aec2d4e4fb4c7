"""The step tracer's own logic (issue 42's mutation run of ``tensorledger.workload.run``) on a
stand-in step: a real two-layer CPU module with a stand-in ``PreparedStep`` around it, so each
branch of the recorder (train, forward, inference, host offload), the warm-up decisions of
:func:`trace_workload` and the fields of its :class:`StepTrace` are checked without building a
model; the tags, counts and notes are worked out from the module's shapes beside each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.trace.records import OpRecord
from tensorledger.workload import run as rn
from tensorledger.workload.context_parallel import RING_NOTE
from tensorledger.workload.layout import SINGLE, Layout


class Adam:
    """The recipe optimizer's interface over torch's Adam: its state is its tensors."""

    def __init__(self, params: list[nn.Parameter], renews: bool = False) -> None:
        self.inner = torch.optim.Adam(params, lr=0.1)
        self.steps = 0
        self.params = params
        self.renews = renews  # the step writes the first weight into a new storage

    def master_tensors(self) -> list[torch.Tensor]:
        return []

    def state_tensors(self) -> list[torch.Tensor]:
        return [t for state in self.inner.state.values() for k, t in state.items()
                if k != "step"]

    def step(self) -> None:
        self.steps += 1
        self.inner.step()
        if self.renews:
            self.params[0].data = self.params[0].data.clone()


class Sequential(nn.Sequential):
    """peft's ``get_base_model`` on a model without adapters: itself."""

    def get_base_model(self) -> nn.Module:
        return self


class Step:
    """A stand-in ``PreparedStep``: a Linear(3, 4) then a Linear(4, 2), on the CPU; every call
    the tracer makes is written to ``calls``."""

    def __init__(self, *, backward: bool = True, optimizer: bool = True,
                 layout: Layout = SINGLE, inference: Any = None,
                 params_offloaded: Any = None, offloaded: Any = None, name: str = "train",
                 lora: Any = None, float8: Any = None, gathers: bool = False,
                 renews: bool = False, reads_first: bool = False) -> None:
        torch.manual_seed(0)
        self.module = Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
        self.parameters = list(self.module.parameters())
        self.optimizer = Adam(self.parameters, renews) if optimizer else None
        self.gathers = gathers  # the loss gathers a tensor as FSDP2 does (free, then alloc)
        self.reads_first = reads_first  # entering reads the parameters and the state
        self.work = SimpleNamespace(
            layout=layout, step=SimpleNamespace(backward=backward, optimizer=optimizer,
                                                name=name),
            device="cpu", model="stand-in", routing_note="", offload=(),
            source=SimpleNamespace(config=None, builder="transformers", hf_config=None),
            tokens=5)
        self.inference = inference
        self.params_offloaded = params_offloaded
        self.offloaded = offloaded
        self.lora = lora
        self.float8 = float8
        self.calls: list[str] = []
        self.on_host: Callable[[torch.Tensor], None] | None = None
        self.kept: list[torch.Tensor] = []

    def cache_before(self) -> list[torch.Tensor]:
        self.calls.append("cache_before")
        return [] if self.inference is None else self.inference.before

    @contextmanager
    def _entered(self, name: str) -> Iterator[None]:
        self.calls.append(name)
        yield
        self.calls.append("/" + name)

    def sequence_sharded(self) -> Any:
        return self._entered("sharded")

    def guard(self) -> Any:
        return self._entered("guard")

    def params_moved(self, on_host: Callable[[torch.Tensor], None]) -> Any:
        self.on_host = on_host
        if self.reads_first:
            # entering reads the parameters and the optimizer state (as a move to the device
            # would), so the recorder knows them before the step's first op
            state = [] if self.optimizer is None else self.optimizer.state_tensors()
            for tensor in (*self.parameters, *state):
                tensor.detach().sum()
        return self._entered("moved")

    @contextmanager
    def saved_hooks(self, pack: Callable[[torch.Tensor], torch.Tensor],
                    on_host: Callable[[torch.Tensor], None]) -> Iterator[None]:
        self.calls.append("hooks")
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        on_host(self.to_host[0])  # an activation save_on_cpu would have copied to the host

    def loss(self) -> torch.Tensor:
        self.calls.append("loss")
        x = torch.ones(5, 3)
        self.kept = [x]
        # made by ops, so the recorder knows them: what the host callbacks are told
        self.to_host = [torch.ones(2) * 3, torch.ones(2) * 5]
        if self.gathers:
            from torch.distributed.fsdp._fully_shard import _fsdp_param

            self.gathered = torch.ones(3) * 2
            _fsdp_param.free_storage(self.gathered)
            _fsdp_param.alloc_storage(self.gathered)
        return self.module(x).square().sum()

    def forward(self, own_cache: bool = False) -> None:
        self.calls.append(f"forward own_cache={own_cache}")
        self.kept = [self.module(torch.ones(5, 3))]
        if self.inference is not None:  # the step writes a new cache tensor
            self.inference.after = [torch.zeros(4) + 1]

    def after_optimizer_step(self) -> None:
        self.calls.append("after_optimizer_step")

    def drop_gradients(self) -> None:
        self.calls.append("drop_gradients")
        if self.on_host is not None:
            self.on_host(self.to_host[1])  # a gradient copied to the host
        for p in self.parameters:
            p.grad = None

    def run(self) -> None:
        self.calls.append("run")
        self.loss().backward()
        if self.optimizer is not None:
            self.optimizer.step()
        self.drop_gradients()

    def warm_without_sync(self) -> None:
        self.calls.append("warm_without_sync")

    def prime_optimizer(self) -> None:
        self.calls.append("prime_optimizer")


# ---------------------------------------------------------------- the recorder's tags


def test_a_training_step_tags_parameters_gradients_state_and_saved_activations() -> None:
    step = Step()
    trace, tags, cached = rn._record(step)
    seen = Counter(tags.values())
    # 4 parameter tensors (2 weights, 2 biases), their 4 gradients, Adam's exp_avg and
    # exp_avg_sq of each (8); saved for backward: the input, the first layer's output (the
    # second's input) and the second's (square's input); the weights they save are parameters;
    # the one activation and the one gradient the stand-in tells its host callbacks of
    assert seen["parameter"] == 4 and seen["gradient"] == 4
    assert seen["optimizer_state"] == 8
    assert seen["saved_activation"] == 3
    assert seen["host_activation"] == 1 and seen["host_gradient"] == 1
    assert set(seen) == {"parameter", "gradient", "optimizer_state", "saved_activation",
                         "host_activation", "host_gradient"}
    assert cached is None
    assert step.optimizer is not None and step.optimizer.steps == 1
    assert step.calls == ["cache_before", "sharded", "guard", "moved", "hooks", "loss",
                          "after_optimizer_step", "drop_gradients", "/moved", "/guard",
                          "/sharded"]
    assert all(p.grad is None for p in step.parameters)
    assert {r.phase for r in trace.records} >= {"forward", "backward", "optimizer"}


def test_record_step_is_the_trace_and_tags() -> None:
    trace, tags = rn.record_step(Step())
    assert Counter(tags.values())["parameter"] == 4 and trace.records


def test_a_step_without_an_optimizer_tags_no_state() -> None:
    step = Step(optimizer=False)
    _, tags, _ = rn._record(step)
    seen = Counter(tags.values())
    assert seen["optimizer_state"] == 0 and seen["gradient"] == 4
    assert "after_optimizer_step" not in step.calls and "drop_gradients" in step.calls


def test_a_forward_step_holds_every_parameter() -> None:
    step = Step(backward=False, optimizer=False, name="forward")
    trace, tags, _ = rn._record(step)
    # held before any op: all 4 parameters, none saved, no gradient
    assert Counter(tags.values()) == {"parameter": 4}
    assert "forward own_cache=False" in step.calls and "loss" not in step.calls
    assert {r.phase for r in trace.records} == {"forward"}


def test_an_offloaded_step_tags_the_hosts_copies() -> None:
    step = Step(params_offloaded=SimpleNamespace(to_device_bytes=0, to_host_bytes=0))
    _, tags, _ = rn._record(step)
    seen = Counter(tags.values())
    # the shards, gradients and state are the host's; and so is the optimizer step's output
    # (host gradients: the 4 gradients and the one the stand-in copies)
    assert seen["host_parameter"] == 4 and seen["host_gradient"] == 5
    assert seen["host_optimizer_state"] == 8 and seen["saved_activation"] == 3
    assert seen["host_temporary"] > 0  # Adam's temporaries of its step on the host
    assert "parameter" not in seen and "optimizer_state" not in seen


def test_an_offloaded_forward_holds_the_hosts_parameters() -> None:
    step = Step(backward=False, optimizer=False,
                params_offloaded=SimpleNamespace(to_device_bytes=0, to_host_bytes=0))
    _, tags, _ = rn._record(step)
    assert Counter(tags.values()) == {"host_parameter": 4}


class Cache:
    """A stand-in inference path: a cache of two tensors before, one replaced by the step."""

    def __init__(self) -> None:
        self.before = [torch.zeros(6), torch.zeros(10)]
        self.after: list[torch.Tensor] = []
        self.cache = "the cache"
        self.held: list[int] = []

    def tensors(self, cache: str) -> list[torch.Tensor]:
        assert cache == "the cache"
        return [*self.before, *self.after]

    def facts(self, held: int) -> str:
        self.held.append(held)
        return f"held {held}"


def test_an_inference_step_holds_the_parameters_and_the_cache() -> None:
    cache = Cache()
    step = Step(backward=False, optimizer=False, inference=cache, name="decode")
    _, tags, cached = rn._record(step)
    # the cache's two float32 tensors: 6 · 4 + 10 · 4 = 64 bytes held
    assert cached == "held 64" and cache.held == [64]
    # the two held and the one the step wrote
    assert Counter(tags.values()) == {"parameter": 4, "kv_cache": 3}
    assert "forward own_cache=True" in step.calls
    assert step.calls.count("cache_before") == 2  # primed before the recorder, then held


def test_hold_counts_each_storage_once() -> None:
    recorder = rn.TaggingRecorder()
    base = torch.zeros(8)  # 32 bytes
    assert recorder.hold([base, base[2:], torch.zeros(3)], "kv_cache") == 32 + 12
    assert sorted(recorder.tags.values()) == ["kv_cache", "kv_cache"]
    recorder.hold([base], "parameter")  # tagged already: the first tag stays
    assert sorted(recorder.tags.values()) == ["kv_cache", "kv_cache"]


def test_tag_skips_none_and_unknown_storages_and_keeps_the_first_tag() -> None:
    recorder = rn.TaggingRecorder()
    known = torch.zeros(4)
    recorder.hold([known], "first")
    recorder.tag([None, known, torch.zeros(2)], "second")  # None skipped; zeros(2) unknown
    assert list(recorder.tags.values()) == ["first"]
    later = rn.TaggingRecorder()
    seen = torch.zeros(4)
    later.hold([seen], "x")
    later.tags.clear()
    later.tag([None, seen], "after a None")  # a None is skipped, not the end of the list
    assert list(later.tags.values()) == ["after a None"]
    fresh = rn.TaggingRecorder()
    fresh.hold([torch.zeros(1)], "x")
    other = torch.zeros(5)
    fresh.hold([other], "y")
    fresh.tags.clear()
    fresh.tag([other], "z")
    assert list(fresh.tags.values()) == ["z"]


def _record_of(number: int, phase: str) -> OpRecord:
    return OpRecord(index=number, op="aten.add.Tensor", module="", phase=phase,
                    category="elementwise", input_shapes=(), input_dtypes=(),
                    output_shapes=(), output_dtypes=(), flops=0, bytes_read=0,
                    bytes_written=0, covered=True, flops_causal_halved=0,
                    storages_created=((number, 8), (number + 10, 8)), storages_freed=())


def test_made_by_tags_what_the_records_created_and_nothing_tagged() -> None:
    recorder = rn.TaggingRecorder()
    recorder.tags[11] = "optimizer_state"
    recorder.made_by([_record_of(1, "optimizer"), _record_of(2, "optimizer")],
                     "host_temporary")
    assert recorder.tags == {1: "host_temporary", 11: "optimizer_state", 2: "host_temporary",
                             12: "host_temporary"}


def test_device_records_leave_the_hosts_optimizer_step_out() -> None:
    records = (_record_of(1, "forward"), _record_of(2, "optimizer"))
    run = SimpleNamespace(work=SimpleNamespace(offload=("params",)),
                          trace=SimpleNamespace(records=records))
    assert rn.device_records(run) == (records[0],)  # type: ignore[arg-type]
    run.work.offload = ("activations",)
    assert rn.device_records(run) == records  # type: ignore[arg-type]


def test_saved_tagger_tags_what_is_not_a_parameter() -> None:
    recorder = rn.TaggingRecorder()
    weight, saved = torch.zeros(3), torch.zeros(4)
    recorder.hold([weight, saved], "held")
    recorder.tags.clear()
    pack = rn.saved_tagger(recorder, [weight])
    assert pack(weight) is weight and pack(weight[1:]) is not None
    assert recorder.tags == {}  # the parameter (and a view of it) is not an activation
    assert pack(saved) is saved
    assert list(recorder.tags.values()) == ["saved_activation"]


def test_gathered_events_only_under_fsdp() -> None:
    recorder = rn.TaggingRecorder()
    for strategy in ("", "ddp", "zero1"):
        assert isinstance(rn.gathered_events(recorder, strategy), nullcontext)
    for strategy in ("fsdp", "hsdp"):
        events = rn.gathered_events(recorder, strategy)
        assert not isinstance(events, nullcontext)
        with events:
            pass


# ---------------------------------------------------------------- parameters by part


def test_parts_of_a_module_by_path_up_to_the_first_layer_index() -> None:
    module = nn.Module()
    module.layers = nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 2)])
    module.head = nn.Linear(2, 5, bias=False)
    module.scale = nn.Parameter(torch.ones(7))
    step = SimpleNamespace(module=module, lora=None)
    # layers: 3·4 + 4 + 4·2 + 2 = 26; head: 2 · 5 = 10; the root's own scale: 7
    assert rn.parts_of(step) == (("layers", 26), ("head", 10),  # type: ignore[arg-type]
                                 ("(root)", 7))


def test_parts_of_a_layer_list_at_the_root_keeps_its_first_name() -> None:
    module = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    # each path starts with its index: cut at 1, "0" and "1" apart: 3·4 + 4 = 16, 4·2 + 2 = 10
    assert rn.parts_of(SimpleNamespace(module=module, lora=None)) == (  # type: ignore[arg-type]
        ("0", 16), ("1", 10))


def test_parts_of_the_reference_model_by_its_parts() -> None:
    from tensorledger.models import build_model, get_preset
    from tensorledger.models.build import parameter_parts

    with torch.device("meta"):
        model = build_model(get_preset("tiny"))
    parts = rn.parts_of(SimpleNamespace(module=model, lora=None))  # type: ignore[arg-type]
    named = dict(model.named_parameters())
    expected: Counter[str] = Counter()
    for name, part in parameter_parts(model).items():
        if name in named:
            expected[part] += named[name].numel()
    assert dict(parts) == dict(expected)
    assert [count for _, count in parts] == sorted(expected.values(), reverse=True)
    assert sum(count for _, count in parts) == sum(p.numel() for p in named.values())


class Adapted(nn.Module):
    """A stand-in of peft's wrapper: its base model holds ``.lora_`` parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Module()
        self.base.layers = nn.ModuleList([nn.Linear(3, 4)])
        self.base.layers[0].lora_A = nn.Linear(3, 1, bias=False)

    def get_base_model(self) -> nn.Module:
        return self.base


def test_parts_of_adapters_are_a_part_of_their_own() -> None:
    step = SimpleNamespace(module=Adapted(), lora="applied")
    # the layer: 3 · 4 + 4 = 16; the adapter: 3 · 1 = 3
    assert rn.parts_of(step) == (("layers", 16), ("lora adapters", 3))  # type: ignore[arg-type]


# ---------------------------------------------------------------- trace_workload on a stand-in


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[rn.StepTrace, Step, list[str]]]:
    def trace(step: Step, **options: Any) -> tuple[rn.StepTrace, Step, list[str]]:
        said: list[str] = []
        entered: list[object] = []

        target = options.pop("target", "cpu")
        mesh = object()

        @contextmanager
        def laid_out(work: Any, notes: list[str]) -> Iterator[tuple[str, object]]:
            entered.append(work)
            notes.append("a note of the layout")
            yield target, mesh

        def prepare(work: Any, on: str, within: object) -> Step:
            assert (work, on, within) == (step.work, target, mesh)
            return step

        monkeypatch.setattr(rn, "laid_out", laid_out)
        monkeypatch.setattr(rn, "prepare", prepare)
        run = rn.trace_workload(step.work, progress=said.append, **options)  # type: ignore[arg-type]
        assert entered == [step.work]
        return run, step, said

    return trace


def test_a_single_devices_training_step_warms_up_then_traces(traced: Any) -> None:
    run, step, said = traced(Step())
    assert said == ["building stand-in on cpu", "running the first step (optimizer state)",
                    "tracing the train step"]
    assert step.calls.count("run") == 1 and step.optimizer.steps == 2  # warm-up, then traced
    assert step.calls.count("sharded") == 2  # around both steps, and the traced step's own
    assert run.first_step is None and run.first_step_tags == {}
    assert run.param_numels == (12, 4, 8, 2)  # 3 · 4, 4, 4 · 2, 2
    assert run.params == 26 and run.model_params == 26
    assert run.param_parts == (("0", 16), ("1", 10))
    assert Counter(run.tags.values())["optimizer_state"] == 8  # the state existed: steady
    assert run.trainable_params is None and run.active_params is None
    assert run.assumptions == ("a note of the layout",)
    assert run.measured_peak_bytes is None and run.cache is None
    assert run.offloaded_bytes is None and run.params_offloaded_bytes is None
    assert (run.frozen_tensors, run.trained_tensors) == ((), ())
    assert run.work is step.work and run.tokens == 5
    assert {r.phase for r in run.trace.records} >= {"forward", "backward", "optimizer"}


def test_the_first_step_is_traced_when_asked(traced: Any) -> None:
    run, step, _ = traced(Step(), first_step=True)
    assert "run" not in step.calls  # recorded instead of run
    assert run.first_step is not None
    # the first step's state is made by its optimizer step, so tagged after it too
    assert Counter(run.first_step_tags.values())["parameter"] == 4


def test_a_forward_step_runs_no_warm_up(traced: Any) -> None:
    run, step, said = traced(Step(backward=False, optimizer=False, name="forward"))
    assert said == ["building stand-in on cpu", "tracing the forward step"]
    assert "run" not in step.calls and run.first_step is None


def test_a_layouts_rank_warms_up_whatever_the_step(traced: Any) -> None:
    step = Step(backward=False, optimizer=False, layout=Layout(fsdp=2, cp=2), name="forward")
    run, step, said = traced(step, first_step=True)
    assert said == ["building stand-in on rank 0 of 4 fake ranks (FSDP ZeRO-3 × 2 · CP × 2 "
                    "(ring attention, allgather; FSDP ZeRO-3 over fsdp·cp = 4 ranks))",
                    "running a first step (sharding set-up)", "tracing the forward step"]
    assert step.calls.count("run") == 1 and run.first_step is None  # a rank: run, not traced
    assert run.assumptions == ("a note of the layout", RING_NOTE)


def test_an_offloaded_single_device_warms_up_as_a_rank(traced: Any) -> None:
    shards = SimpleNamespace(to_device_bytes=11, to_host_bytes=13)
    run, step, _ = traced(Step(backward=False, optimizer=False, params_offloaded=shards),
                          first_step=True)
    assert step.calls.count("run") == 1 and run.first_step is None
    assert run.params_offloaded_bytes == (11, 13)
    assert run.assumptions[1] == (
        "parameters offloaded by FSDP2's CPUOffloadPolicy (shards, gradients and optimizer "
        "state in host memory, the optimizer step on the CPU): 11 bytes of shards copied to "
        "the device before the all-gathers, 13 bytes of gradient shards to the host after the "
        "reduce-scatters")


def test_ddp_traces_its_first_step_after_priming(traced: Any) -> None:
    _, step, said = traced(Step(layout=Layout(dp=2, tp=2)))
    assert said[1:] == ["filling DTensor's sharding cache (a step DDP does not sync)",
                        "creating the optimizer state (an optimizer step on zero gradients)",
                        "tracing the train step"]
    assert "run" not in step.calls
    assert step.calls.index("warm_without_sync") < step.calls.index("prime_optimizer")


def test_ddp_without_tp_or_backward_skips_the_sharding_cache(traced: Any) -> None:
    _, step, said = traced(Step(layout=Layout(dp=2)))
    assert "warm_without_sync" not in step.calls and "prime_optimizer" in step.calls
    _, step, said = traced(Step(layout=Layout(fsdp=2, zero=1, tp=2), backward=False,
                                optimizer=False, name="forward"))
    assert "warm_without_sync" not in step.calls and "prime_optimizer" not in step.calls
    assert "run" not in step.calls  # zero1 is DDP: no warm-up either
    assert said[-1] == "tracing the forward step"


def test_the_notes_in_order(traced: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = SimpleNamespace(to_host_bytes=1234, to_device_bytes=5678)
    float8 = SimpleNamespace(describe=lambda: "float8 note")
    step = Step(offloaded=moved, float8=float8)
    step.work.routing_note = "routing note"
    run, _, _ = traced(step)
    assert run.assumptions == (
        "a note of the layout", "float8 note",
        "activations offloaded by torch's save_on_cpu (every tensor autograd saves, weights "
        "included): 1,234 bytes to the host in forward, 5,678 back in backward",
        "routing note")
    assert run.offloaded_bytes == (1234, 5678)


def test_offload_notes_of_both_in_order() -> None:
    step = SimpleNamespace(params_offloaded=SimpleNamespace(to_device_bytes=1000,
                                                            to_host_bytes=2000),
                           offloaded=SimpleNamespace(to_host_bytes=3000, to_device_bytes=4000))
    notes = rn._offload_notes(step)  # type: ignore[arg-type]
    assert len(notes) == 2
    assert "1,000 bytes of shards copied to the device" in notes[0]
    assert "2,000 bytes of gradient shards to the host" in notes[0]
    assert notes[1].endswith("3,000 bytes to the host in forward, 4,000 back in backward")
    assert rn._offload_notes(SimpleNamespace(params_offloaded=None,  # type: ignore[arg-type]
                                             offloaded=None)) == ()


class Lora:
    def __init__(self, base: Any) -> None:
        self.base = base

    def describe(self) -> str:
        return "lora note"


def test_adapter_notes_and_tensors() -> None:
    step = Step()
    step.lora = Lora(None)
    step.parameters[0].requires_grad_(False)  # the first weight frozen (12 elements)
    assert rn._adapter_notes(step, None) == ("lora note",)  # type: ignore[arg-type]
    frozen, trained = rn._adapter_tensors(step)  # type: ignore[arg-type]
    assert frozen == ((12, 4, False),)  # float32: 4 bytes an element, not NF4
    assert trained == ((4, 4), (8, 4), (2, 4))
    assert rn._adapter_notes(Step(), None) == ()  # type: ignore[arg-type]
    assert rn._adapter_tensors(Step()) == ((), ())  # type: ignore[arg-type]


def test_adapter_notes_over_an_nf4_base_say_what_dequantising_cost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rn, "dequantization_note", lambda trace: f"dequantised {trace}")
    step = SimpleNamespace(lora=Lora("nf4"))
    assert rn._adapter_notes(step, "T") == ("lora note", "dequantised T")  # type: ignore[arg-type]


def test_trainable_parameters_with_adapters(traced: Any) -> None:
    step = Step()
    step.lora = Lora(None)
    step.parameters[2].requires_grad_(False)  # the second weight frozen: 4 · 2 = 8
    run, _, _ = traced(step)
    assert run.trainable_params == 26 - 8
    assert run.assumptions == ("a note of the layout", "lora note")
    assert run.frozen_tensors == ((8, 4, False),)


def test_active_parameters_of_a_mixture_of_experts(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.params as params

    asked: list[Any] = []

    def active(named: dict[str, Any], experts: int, k: int) -> int:
        asked.append((named, experts, k))
        return 99

    monkeypatch.setattr(params, "active_params", active)
    monkeypatch.setattr(params, "routing", lambda source: (8, 2))
    step = Step()
    assert rn._active(step) == 99  # type: ignore[arg-type]
    named, experts, k = asked[0]
    assert (experts, k) == (8, 2)
    assert named == {"0.weight": (12, (4, 3)), "0.bias": (4, (4,)),
                     "1.weight": (8, (2, 4)), "1.bias": (2, (2,))}
    assert rn._active(Step(layout=Layout(fsdp=2))) is None  # type: ignore[arg-type]
    monkeypatch.setattr(params, "routing", lambda source: None)
    assert rn._active(step) is None  # type: ignore[arg-type]


def test_whole_params_counts_the_steps_parameters() -> None:
    step = Step()
    step.parameters = step.parameters[:2]  # the step's own list is what is counted
    assert rn._whole_params(step) == 16  # type: ignore[arg-type]  # 3 · 4 + 4


# ---------------------------------------------------------------- the trace's summary


def test_step_trace_params_tokens_and_repr() -> None:
    from tensorledger.trace.records import Trace

    work = SimpleNamespace(tokens=6)
    run = rn.StepTrace(work=work, param_numels=(1000, 234),  # type: ignore[arg-type]
                       trace=Trace(records=(), uncovered={}, device="cpu"))
    assert run.params == 1234 and run.tokens == 6
    assert (run.param_parts, run.tags, run.first_step, run.first_step_tags,
            run.measured_peak_bytes, run.assumptions, run.model_params, run.trainable_params,
            run.active_params, run.offloaded_bytes, run.params_offloaded_bytes,
            run.frozen_tensors, run.trained_tensors, run.cache, run.pipeline) == (
        (), {}, None, {}, None, (), 0, None, None, None, None, (), (), None, None)
    assert repr(run) == f"StepTrace({work!r}, 1,234 params, {run.trace!r})"


# ---------------------------------------------------------------- a pipeline's rank


def test_a_pipeline_rank_is_traced_with_the_workloads_settings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.pipeline as pipeline
    from tensorledger.napkin.transformer import get_preset, parameter_count

    config = get_preset("tiny")  # 2 layers
    asked: dict[str, Any] = {}

    def trace_pipeline_step(*args: Any, **kwargs: Any) -> Any:
        asked["args"], asked["kwargs"] = args, kwargs
        return SimpleNamespace(param_numels=(5, 6), trace="T", tags={1: "parameter"},
                               timeline="timeline")

    monkeypatch.setattr(pipeline, "trace_pipeline_step", trace_pipeline_step)
    layout = Layout(pp=2, microbatches=4, schedule="interleaved-1f1b", chunks=1, cp=2, fsdp=3)
    work = SimpleNamespace(
        source=SimpleNamespace(config=config), layout=layout, batch=8, seq=16, target=None,
        precision=SimpleNamespace(name="bf16-mixed"), optimizer=SimpleNamespace(name="adamw"),
        checkpoint="full", optimizer_kernel="foreach", routing="R", routing_note="rn")
    said: list[str] = []
    run = rn.trace_pipeline_rank(work, 1, said.append)  # type: ignore[arg-type]
    assert said == [f"tracing a rank of stage 1 of {layout.describe()} on fake ranks"]
    assert asked["args"] == (config, 8, 16, 2, 4, "interleaved-1f1b")
    within = Layout(cp=2, fsdp=3)  # the pipeline's own degrees back at one
    assert asked["kwargs"] == {
        "stage": 1, "chunks": 1, "within": within, "precision": "bf16-mixed",
        "optimizer": "adamw", "checkpoint": "full", "optimizer_kernel": "foreach",
        "stage_layers": (1, 1), "routing": "R"}  # 2 layers over 2 stages
    assert (run.param_numels, run.trace, run.tags, run.pipeline) == (
        (5, 6), "T", {1: "parameter"}, "timeline")
    assert run.model_params == parameter_count(config).total_params
    assert run.assumptions == ("rn", RING_NOTE)
    # without a routing note or cp: none; without progress: nothing said
    work.routing_note, work.layout = "", Layout(pp=2, microbatches=4)
    assert rn.trace_pipeline_rank(work).assumptions == ()  # type: ignore[arg-type]
    assert asked["kwargs"]["stage"] == 0  # the first stage by default


def test_trace_workload_of_a_pipeline_traces_its_first_stage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(rn, "trace_pipeline_rank",
                        lambda work, stage, say: asked.append((work, stage, say)) or "traced")
    work = SimpleNamespace(layout=Layout(pp=2))
    said: list[str] = []
    assert rn.trace_workload(work, progress=said.append) == "traced"  # type: ignore[arg-type]
    assert asked[0][0] is work and asked[0][1] == 0
    asked[0][2]("hello")
    assert said == ["hello"]  # the progress handed on
    rn.trace_workload(work)  # type: ignore[arg-type]
    asked[1][2]("quiet")  # no progress: a callable that says nothing


def test_trace_model_resolves_then_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(rn, "resolve_workload",
                        lambda model, **options: asked.append((model, options)) or "work")
    monkeypatch.setattr(rn, "trace_workload", lambda work: f"traced {work}")
    assert rn.trace_model("tiny", batch=2, seq=8) == "traced work"
    assert asked == [("tiny", {"batch": 2, "seq": 8})]


# ---------------------------------------------------------------- more of the recorder


def test_an_optimizer_step_that_renews_a_parameter_tags_it_a_parameter() -> None:
    _, tags, _ = rn._record(Step(renews=True))
    # the 4 parameters, and the first weight's new storage the optimizer step wrote
    assert Counter(tags.values())["parameter"] == 5


def test_gathered_events_tag_what_fsdp_allocates() -> None:
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    recorder = rn.TaggingRecorder()
    with recorder, rn.gathered_events(recorder, "fsdp"):
        gathered = torch.ones(3) * 2
        _fsdp_param.free_storage(gathered)
        _fsdp_param.alloc_storage(gathered)
    assert list(recorder.tags.values()) == ["parameter"]


def test_fsdps_gathers_are_watched_under_fsdp_and_host_offload_only() -> None:
    # one device: no FSDP, the gathered tensor stays untagged (4 parameters)
    _, tags, _ = rn._record(Step(gathers=True))
    assert Counter(tags.values())["parameter"] == 4
    # a rank of FSDP: the gathered tensor is a parameter too
    _, tags, _ = rn._record(Step(gathers=True, layout=Layout(fsdp=2)))
    assert Counter(tags.values())["parameter"] == 5
    # host offload on one device is a 1-rank FSDP2: watched, the shards the host's
    _, tags, _ = rn._record(Step(gathers=True, params_offloaded=SimpleNamespace()))
    seen = Counter(tags.values())
    assert (seen["parameter"], seen["host_parameter"]) == (1, 4)


def test_parts_of_a_ddp_module_are_its_models() -> None:
    from torch.nn.parallel import DistributedDataParallel

    inner = nn.Sequential(nn.Linear(3, 4))
    wrapped = DistributedDataParallel.__new__(DistributedDataParallel)
    nn.Module.__init__(wrapped)
    wrapped.module = inner  # what DDP holds: the model whole
    # named as the model's ("0"), not DDP's ("module"): 3 · 4 + 4 = 16
    assert rn.parts_of(SimpleNamespace(module=wrapped, lora=None)) == (  # type: ignore[arg-type]
        ("0", 16),)


def test_parts_of_a_nested_path_keep_every_name_before_the_index() -> None:
    module = nn.Module()
    module.model = nn.Module()
    module.model.layers = nn.ModuleList([nn.Linear(2, 2)])
    # model.layers.0.weight and .bias: cut at the index, "model.layers": 2 · 2 + 2 = 6
    assert rn.parts_of(SimpleNamespace(module=module, lora=None)) == (  # type: ignore[arg-type]
        ("model.layers", 6),)


class NF4Tensor(nn.Parameter):
    """Named as torchao's NF4 weight: its type's name is what the tracer reads."""


def test_adapter_tensors_mark_an_nf4_base() -> None:
    step = Step()
    step.lora = Lora(None)
    nf4 = NF4Tensor(torch.zeros(3, 5), requires_grad=False)
    step.parameters = [nf4, *step.parameters[1:]]
    frozen, _ = rn._adapter_tensors(step)  # type: ignore[arg-type]
    assert frozen == ((15, 4, True),)  # 3 · 5 elements, NF4


# ---------------------------------------------------------------- trace_workload, more


def test_a_cuda_target_measures_the_peak(traced: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 4242.0)
    run, _, _ = traced(Step(), target="cuda")
    assert run.measured_peak_bytes == 4242 and type(run.measured_peak_bytes) is int
    assert calls == ["synchronize", "reset", "synchronize"]  # before and after the traced step
    run, _, _ = traced(Step(), target="cpu")
    assert run.measured_peak_bytes is None


def test_trace_workload_hands_on_the_active_parameters_and_the_cache(
        traced: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.params as params

    monkeypatch.setattr(params, "routing", lambda source: (8, 2))
    monkeypatch.setattr(params, "active_params", lambda named, experts, k: experts * 10 + k)
    run, _, _ = traced(Step())
    assert run.active_params == 82  # the stand-in's 8 · 10 + 2
    cache = Cache()
    run, _, _ = traced(Step(backward=False, optimizer=False, inference=cache, name="decode"))
    assert run.cache == "held 64"


def test_trace_workload_with_adapters_over_an_nf4_base(traced: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    noted: list[Any] = []
    monkeypatch.setattr(rn, "dequantization_note", lambda trace: noted.append(trace) or "deq")
    step = Step()
    step.lora = Lora("nf4")
    step.parameters[0].requires_grad_(False)
    run, _, _ = traced(step)
    assert noted == [run.trace]  # the traced step's own trace
    assert run.assumptions == ("a note of the layout", "lora note", "deq")
    assert run.trained_tensors == ((4, 4), (8, 4), (2, 4))  # the rest, float32


def test_a_pipeline_rank_runs_the_targets_program_and_names_the_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.pipeline as pipeline
    from tensorledger.errors import InputError
    from tensorledger.napkin.transformer import TransformerConfig
    from tensorledger.workload.schedules import StageLayers

    asked: dict[str, Any] = {}
    programs: list[object] = []

    @contextmanager
    def target_program(target: object) -> Iterator[None]:
        programs.append(target)
        yield

    def trace_pipeline_step(*args: Any, **kwargs: Any) -> Any:
        asked.update(kwargs)
        return SimpleNamespace(param_numels=(1,), trace="T", tags={}, timeline=None)

    monkeypatch.setattr(rn, "target_program", target_program)
    monkeypatch.setattr(pipeline, "trace_pipeline_step", trace_pipeline_step)
    config = TransformerConfig(vocab_size=128, context_length=64, d_model=64, n_layers=6,
                               n_heads=4, name="six")
    layout = Layout(pp=2, microbatches=4, schedule="interleaved-1f1b", chunks=2,
                    stage_layers=StageLayers.parse("first-1,last-1"), tp=2)
    work = SimpleNamespace(
        source=SimpleNamespace(config=config), layout=layout, batch=8, seq=16, target="h100",
        precision=SimpleNamespace(name="fp32"), optimizer=SimpleNamespace(name="sgd"),
        checkpoint=None, optimizer_kernel="for-loop", routing=None, routing_note="")
    run = rn.trace_pipeline_rank(work)  # type: ignore[arg-type]
    assert programs == ["h100"] and run.work is work
    # each stage laid out over the other degrees: one stage, no stage layers of its own
    assert asked["within"] == Layout(tp=2)
    assert asked["stage_layers"] == (1, 2, 2, 1)  # first-1,last-1 over 2 · 2 stages of 6
    work.layout = Layout(pp=4, microbatches=4)
    with pytest.raises(InputError, match=r"^--pp 4 does not divide six's 6 layers"):
        rn.trace_pipeline_rank(work)  # type: ignore[arg-type]


def test_what_the_recorder_knows_as_the_step_starts_is_tagged_at_once(traced: Any) -> None:
    # the parameters and the warm-up's optimizer state are read on entering: tagged then, and
    # the later tags (setdefault) keep those first categories
    run, _, _ = traced(Step(reads_first=True))
    seen = Counter(run.tags.values())
    assert (seen["parameter"], seen["optimizer_state"], seen["gradient"]) == (4, 8, 4)
    _, tags, _ = rn._record(Step(reads_first=True, params_offloaded=SimpleNamespace()))
    assert Counter(tags.values())["host_parameter"] == 4
