"""A model's parameter count: the closed form when it has a reference config (no torch),
else ``sum(p.numel())`` of the module built on fake tensors (nothing allocated)."""

from __future__ import annotations

from collections.abc import Sequence

from tensorledger.napkin.transformer import ModelParams, parameter_count
from tensorledger.workload.routing import routing
from tensorledger.workload.source import ModelSource, resolve_source

__all__ = ["active_params", "model_params", "routing"]


def model_params(model: str | ModelSource) -> ModelParams:
    """Total parameters of the model ``model`` names.

    >>> model_params("gpt2").params
    124439808
    """
    source = model if isinstance(model, ModelSource) else resolve_source(model)
    if source.builder == "reference" and source.config is not None:
        count = parameter_count(source.config)
        moe = source.config.moe
        return ModelParams(model=source.label, params=count.total_params,
                           source=f"closed-form total from the {source.kind} (embeddings and "
                                  "head included)", active_params=count.active_params,
                           routing="" if moe is None else _routing_words(*routing(source)
                                                                         or (0, 0)))
    from tensorledger.workload.spec import resolve_workload
    from tensorledger.workload.step import build_module, placement

    work = resolve_workload(source, step="forward", precision="fp32", device="fake", seq=1)
    with placement(work.device) as target:
        module, _ = build_module(work, target)
        named = {name: (p.numel(), tuple(p.shape)) for name, p in module.named_parameters()}
        total = sum(numel for numel, _ in named.values())
        routed = routing(source)
        active = None if routed is None else active_params(named, *routed)
    return ModelParams(model=source.label, params=total,
                       source=f"sum of parameter numel of {source.built_by}, built on fake "
                              "tensors", active_params=active,
                       routing="" if routed is None else _routing_words(*routed))


def _routing_words(experts: int, chosen: int) -> str:
    return f"{chosen} of {experts} routed experts per token, shared ones always"


#: config.json fields of the routed experts and of the experts each token is sent to, by the
#: names transformers' mixture-of-experts configs use.
def active_params(named: dict[str, tuple[int, tuple[int, ...]]], experts: int, chosen: int
                  ) -> int:
    """Parameters one token runs through: every one but the routed experts', of which
    ``chosen`` of ``experts`` (``named``: parameter name → (numel, shape), tied ones once).

    >>> active_params({"mlp.experts.w": (8 * 6, (8, 6)), "attn.q": (10, (10,))}, 8, 2)
    22
    """
    total = sum(numel for numel, _ in named.values())
    routed = sum(numel for name, (numel, shape) in named.items()
                 if _routed_expert(name, shape, experts))
    return total - routed + routed * chosen // experts


def _routed_expert(name: str, shape: Sequence[int], experts: int) -> bool:
    """A parameter of the routed experts: under an ``experts`` module, either one expert's own
    (``experts.3.w1.weight``) or all of them stacked on the first dimension
    (``experts.gate_up_proj`` of E × ...); shared experts (``shared_expert``) are not."""
    parts = name.split(".")
    if "experts" not in parts:
        return False
    after = parts[parts.index("experts") + 1:]
    if after and after[0].isdigit():
        return True
    return len(shape) > 0 and shape[0] == experts
