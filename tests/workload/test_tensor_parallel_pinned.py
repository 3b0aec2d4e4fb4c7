"""Tensor-parallel plans, style by style (issue 42's mutation run of
``tensorledger.workload.tensor_parallel``): each module's torch style and its layouts, read off
the plan's objects on meta-device models, with no mesh and no trace; a Hugging Face stand-in
(``config``, ``base_model``, ``_tp_plan``) for the plans transformers brings."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
)

from tensorledger.errors import InputError
from tensorledger.models import get_preset
from tensorledger.models.transformer import TransformerLM
from tensorledger.workload import tensor_parallel as tp

R, S1 = Replicate(), Shard(1)


def _model(name: str = "tiny", **change: object) -> TransformerLM:
    config = dataclasses.replace(get_preset(name), **change)
    with torch.device("meta"):
        return TransformerLM(config)


def _layouts(style: object) -> dict[str, object]:
    return {key: value for key, value in vars(style).items()
            if key in ("input_layouts", "output_layouts", "desired_input_layouts",
                       "use_local_output", "sequence_sharding")}


def test_the_sequence_parallel_plan_of_tiny_style_by_style() -> None:
    plan = tp.default_tp_plan(_model(), sp=True)
    # the embedding reduce-scatters onto the sequence shards; the head gathers them
    assert type(plan["token_embedding"]) is RowwiseParallel
    assert _layouts(plan["token_embedding"]) == {
        "input_layouts": (R,), "output_layouts": (S1,), "use_local_output": True}
    assert type(plan["head"]) is ColwiseParallel
    assert _layouts(plan["head"]) == {"input_layouts": (S1,), "output_layouts": (R,),
                                      "desired_input_layouts": (R,), "use_local_output": True}
    assert type(plan["final_norm"]) is SequenceParallel
    for block in ("blocks.0", "blocks.1"):  # tiny: 2 layers
        for half in ("attention", "mlp"):  # each half gathers its shard into one replicated input
            assert type(plan[f"{block}.{half}"]) is PrepareModuleInput
            assert plan[f"{block}.{half}"].input_layouts == (S1,)
            assert plan[f"{block}.{half}"].desired_input_layouts == (R,)
        for name in ("attention.query", "attention.key", "attention.value", "mlp.up", "mlp.gate"):
            assert type(plan[f"{block}.{name}"]) is ColwiseParallel
            assert plan[f"{block}.{name}"].output_layouts == (Shard(-1),)  # torch's default
        for name in ("attention.output", "mlp.down"):  # reduce-scatter back onto the shards
            assert type(plan[f"{block}.{name}"]) is RowwiseParallel
            assert plan[f"{block}.{name}"].output_layouts == (S1,)
        for norm in ("attention_norm", "mlp_norm"):
            assert type(plan[f"{block}.{norm}"]) is SequenceParallel
    # 3 model-level entries + per block 2 halves, 5 colwise, 2 rowwise, 2 norms = 3 + 2·11
    assert len(plan) == 25


def test_without_sp_the_stream_is_replicated_and_the_norms_unplanned() -> None:
    plan = tp.default_tp_plan(_model(), sp=False)
    assert plan["token_embedding"].output_layouts == (R,)
    assert plan["head"].input_layouts == (R,)
    assert plan["blocks.0.attention"].input_layouts == (R,)
    assert plan["blocks.1.mlp.down"].output_layouts == (R,)
    assert "final_norm" not in plan
    assert not [path for path in plan if path.endswith("norm")]
    assert len(plan) == 2 + 2 * 9  # embedding, head; per block 2 halves, 5 colwise, 2 rowwise


def test_an_mlp_without_a_gate_splits_up_alone() -> None:
    plan = tp.default_tp_plan(_model(mlp="gelu"), sp=False)  # a GPT-2 style MLP: up, down
    assert "blocks.0.mlp.gate" not in plan
    assert type(plan["blocks.0.mlp.up"]) is ColwiseParallel


def test_learned_positions_run_without_sp_only() -> None:
    model = _model(positions="learned")
    assert "head" in tp.default_tp_plan(model, sp=False)  # no sequence split: planned
    with pytest.raises(InputError, match="learned position embedding"):
        tp.default_tp_plan(model, sp=True)


def test_a_part_holds_only_what_it_is_given() -> None:
    model = _model()
    plan = tp.reference_tp_plan([("blocks.1", model.blocks[1])], embedding=False, head=False,
                                sp=True)
    assert "token_embedding" not in plan and "head" not in plan and "final_norm" not in plan
    assert all(path.startswith("blocks.1.") for path in plan)
    # the last stage alone: the head and its norm, no embedding
    last = tp.reference_tp_plan([], embedding=False, head=True, sp=True)
    assert sorted(last) == ["final_norm", "head"]
    assert sorted(tp.reference_tp_plan([], embedding=False, head=True, sp=False)) == ["head"]
    assert sorted(tp.reference_tp_plan([], embedding=True, head=False, sp=False)) == [
        "token_embedding"]


def test_a_mixture_of_experts_splits_its_shared_experts_only() -> None:
    model = _model("tiny-moe")  # 1 shared expert of width 48
    plan = tp.default_tp_plan(model, experts=True)
    shared = plan["blocks.0.mlp.shared"]
    assert type(shared) is PrepareModuleInput
    assert (shared.input_layouts, shared.desired_input_layouts) == ((R,), (R,))
    assert type(plan["blocks.0.mlp.shared.gate"]) is ColwiseParallel
    assert type(plan["blocks.0.mlp.shared.up"]) is ColwiseParallel
    assert type(plan["blocks.0.mlp.shared.down"]) is RowwiseParallel
    assert plan["blocks.0.mlp.shared.down"].output_layouts == (R,)  # torch's default
    # router and routed experts stay whole on every tp rank: neither is in the plan, nor the MoE
    assert "blocks.0.mlp" not in plan
    assert not [path for path in plan if "router" in path or "experts." in path]
    with pytest.raises(InputError, match="without --ep"):
        tp.default_tp_plan(model)  # experts defaults to off
    with pytest.raises(InputError, match="without --ep"):
        tp.reference_tp_plan([("blocks.0", model.blocks[0])], embedding=False, head=False,
                             sp=False)  # the same default for a part
    with pytest.raises(InputError, match="--sp beside --ep"):
        tp.default_tp_plan(model, sp=True, experts=True)


def test_a_mixture_without_shared_experts_plans_its_attention_only() -> None:
    moe = dataclasses.replace(get_preset("tiny-moe").moe, n_shared=0)
    plan = tp.default_tp_plan(_model("tiny-moe", moe=moe), experts=True)
    assert not [path for path in plan if ".mlp" in path]
    assert "blocks.0.attention.query" in plan


@pytest.mark.parametrize(("name", "kind", "layouts"), [
    ("colwise", ColwiseParallel, {"output_layouts": (Shard(-1),)}),
    ("rowwise", RowwiseParallel, {"input_layouts": (Shard(-1),), "output_layouts": (R,)}),
    ("colwise_rep", ColwiseParallel, {"output_layouts": (R,)}),  # gathered output
    ("colwise_gather_output", ColwiseParallel, {"output_layouts": (R,)}),
    ("rowwise_rep", RowwiseParallel, {"input_layouts": (R,)}),  # replicated input
    ("rowwise_split_input", RowwiseParallel, {"input_layouts": (R,)}),
    ("embedding_rowwise", RowwiseParallel, {"input_layouts": (R,)}),
])
def test_each_hugging_face_style_maps_to_torch(name: str, kind: type,
                                               layouts: dict[str, object]) -> None:
    style = tp._hf_style(name)
    assert type(style) is kind
    for key, value in layouts.items():
        assert getattr(style, key) == value


def test_hugging_face_sequence_parallel_hands_back_local_tensors() -> None:
    style = tp._hf_style("sequence_parallel")
    assert type(style) is SequenceParallel
    assert style.use_local_output is True  # torch's default is False


class _Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Module(), nn.Module()])
        for layer in self.layers:
            layer.q_proj = nn.Linear(2, 2)
            layer.o_proj = nn.Linear(2, 2)
            layer.q_proj_extra = nn.Linear(2, 2)


class _HfModel(nn.Module):
    """Stands in for a transformers model: ``config``, ``base_model`` under ``model.``."""

    def __init__(self, config_plan: dict[str, str] | None, own_plan: dict[str, str] | None
                 ) -> None:
        super().__init__()
        self.model = _Base()
        self.config = SimpleNamespace(base_model_tp_plan=config_plan)
        if own_plan is not None:
            self._tp_plan = own_plan

    @property
    def base_model(self) -> nn.Module:
        return self.model


def test_the_config_plan_is_prefixed_by_the_base_models_path() -> None:
    model = _HfModel({"layers.*.q_proj": "colwise", "layers.*.o_proj": "rowwise"}, None)
    plan = tp.default_tp_plan(model)
    # * matches one path part, and the pattern the whole path: q_proj_extra is not q_proj
    assert sorted(plan) == ["model.layers.0.o_proj", "model.layers.0.q_proj",
                            "model.layers.1.o_proj", "model.layers.1.q_proj"]
    assert type(plan["model.layers.1.q_proj"]) is ColwiseParallel
    assert type(plan["model.layers.0.o_proj"]) is RowwiseParallel


def test_the_models_own_plan_goes_before_its_configs() -> None:
    model = _HfModel({"layers.*.q_proj": "colwise"}, {"model.layers.0.o_proj": "rowwise"})
    assert list(tp.default_tp_plan(model)) == ["model.layers.0.o_proj"]


def test_a_star_matches_one_path_part_only() -> None:
    model = _HfModel(None, {"model.*.q_proj": "colwise"})  # layers.0 is two parts: no match
    assert tp._hugging_face_plan(model) == {}
    model = _HfModel(None, {"model.layers.*": "colwise"})
    assert sorted(tp._hugging_face_plan(model)) == ["model.layers.0", "model.layers.1"]


def test_a_base_model_that_is_the_model_gets_no_prefix() -> None:
    model = _HfModel({"model.layers.0.q_proj": "colwise"}, None)
    model.__class__ = type("_Self", (_HfModel,), {"base_model": property(lambda self: self)})
    assert list(tp._hugging_face_plan(model)) == ["model.layers.0.q_proj"]


def test_hugging_face_plans_refuse_sp_and_unknown_styles() -> None:
    with pytest.raises(InputError, match="sequence parallelism"):
        tp.default_tp_plan(_HfModel({"layers.*.q_proj": "colwise"}, None), sp=True)
    with pytest.raises(InputError, match="no tensor-parallel plan"):
        tp.default_tp_plan(_HfModel(None, None))
    with pytest.raises(InputError, match="packed_colwise"):
        tp.default_tp_plan(_HfModel({"layers.*.q_proj": "packed_colwise"}, None))
    with pytest.raises(InputError, match="no default tensor-parallel plan"):
        tp.default_tp_plan(nn.Linear(2, 2))


def test_a_plan_of_tp_styles_becomes_torch_styles() -> None:
    model = _Base()
    styles = tp._styles(model, {"layers.0.q_proj": tp.TpStyle.COLWISE,
                                "layers.0.o_proj": tp.TpStyle.ROWWISE,
                                "layers.1.q_proj": SequenceParallel()})
    assert type(styles["layers.0.q_proj"]) is ColwiseParallel
    assert type(styles["layers.0.o_proj"]) is RowwiseParallel
    assert type(styles["layers.1.q_proj"]) is SequenceParallel  # a torch style passes as is
    with pytest.raises(InputError, match=r"'layers\.9'"):
        tp._styles(model, {"layers.9": tp.TpStyle.COLWISE})
    with pytest.raises(InputError, match="needs a plan"):
        tp._styles(model, {})


def test_tied_slots_are_grouped_in_module_order() -> None:
    model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False), nn.Linear(2, 2))
    model[1].weight = model[0].weight  # tied: one parameter in two slots
    assert tp._tied(model) == [[(model[0], "weight"), (model[1], "weight")]]
    model[2].bias = None  # an empty slot is no parameter
    assert len(tp._tied(model)) == 1


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(8, 4)
        self.head = nn.Linear(4, 8, bias=False)
        self.head.weight = self.embedding.weight  # tied: one (8, 4) parameter


def _mesh() -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (2,))


def test_tied_parameters_sharded_alike_are_tied_again() -> None:
    from tensorledger.workload.parallel import fake_process_group

    model = _Tied()
    with fake_process_group(2):
        # rowwise embedding and colwise head both shard the (8, 4) weight on dim 0
        tp.apply_tensor_parallel(model, _mesh(), {"embedding": tp.TpStyle.ROWWISE,
                                                  "head": tp.TpStyle.COLWISE}, sp=False)
    assert model.head.weight is model.embedding.weight
    assert model.embedding.weight.placements == (Shard(0),)


def test_tied_parameters_sharded_unlike_are_refused() -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2), pytest.raises(InputError, match="unlike its twin"):
        # a rowwise head shards its weight on dim 1, the embedding on dim 0
        tp.apply_tensor_parallel(_Tied(), _mesh(), {"embedding": tp.TpStyle.ROWWISE,
                                                    "head": tp.TpStyle.ROWWISE}, sp=False)


def test_the_default_plan_is_laid_beside_expert_parallelism_only_when_asked() -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(2):
        with pytest.raises(InputError, match="without --ep"):
            tp.apply_tensor_parallel(_model("tiny-moe"), _mesh(), None, sp=False)
        model = _model("tiny-moe")
        tp.apply_tensor_parallel(model, _mesh(), None, sp=False, experts=True)
    assert model.blocks[0].mlp.shared.up.weight.placements == (Shard(0),)  # colwise: out rows


def test_a_model_without_config_plan_or_base_model_has_no_plan() -> None:
    # no _tp_plan, no config, no base_model: each missing attribute read as "none", not an error
    with pytest.raises(InputError, match="Linear has no tensor-parallel plan"):
        tp._hugging_face_plan(nn.Linear(2, 2))
    model = nn.Linear(2, 2)
    model.config = SimpleNamespace()  # a config without base_model_tp_plan
    with pytest.raises(InputError, match="Linear has no tensor-parallel plan"):
        tp._hugging_face_plan(model)


def test_a_model_with_a_config_but_no_base_model_is_no_hugging_face_model() -> None:
    model = nn.Linear(2, 2)
    model.config = SimpleNamespace(base_model_tp_plan={"weight": "colwise"})
    with pytest.raises(InputError, match="no default tensor-parallel plan for Linear"):
        tp.default_tp_plan(model)  # both attributes needed: a config alone is not enough


def test_tied_parameters_outside_the_plan_stay_tied() -> None:
    from tensorledger.workload.parallel import fake_process_group

    model = _Tied()
    model.other = nn.Linear(4, 4)
    with fake_process_group(2):
        tp.apply_tensor_parallel(model, _mesh(), {"other": tp.TpStyle.COLWISE}, sp=False)
    # neither twin is a DTensor (no placements on either): tied again as they were
    assert model.head.weight is model.embedding.weight
    assert not hasattr(model.embedding.weight, "placements")


def test_latent_attention_is_refused_before_the_mlp_is_looked_at() -> None:
    from tensorledger.models.latent import LatentAttention

    block = nn.Module()  # a block with latent attention and no mlp
    object.__setattr__(block, "attention", LatentAttention.__new__(LatentAttention))
    with pytest.raises(InputError, match="latent attention"):
        tp.reference_tp_plan([("blocks.0", block)], embedding=False, head=False, sp=False)
