"""A model's per-block profile, measured: the real module (a preset, a ``config.json`` of any
architecture, a factory) built at one block and at two and traced on fake tensors, each at one
rank and at two tensor-parallel ranks (with and without sequence parallelism, and with its
blocks checkpointed, where the model allows), one micro-batch of one sequence.

Per block = the two-block trace less the one-block trace; the rest (embedding, head, loss) =
the one-block trace less a block; a figure at two ranks beside one gives the part tensor
parallelism splits (:class:`~tensorledger.plan.profile.Split`).  A factory's model is built as
it is (its layer count is its own): it is profiled whole, as one block with no pipeline and no
tensor parallelism.

The workload layer builds every variant (:func:`~tensorledger.workload.resolve_workload`, the
same loading as ``memory`` and ``trace``); nothing here reads a config or a factory itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorledger.errors import ModelError, TensorLedgerError
from tensorledger.memory.timeline import TimelinePoint
from tensorledger.napkin.recipes import resolve_precision
from tensorledger.plan.profile import ModelProfile, Split
from tensorledger.trace.aggregate import communication
from tensorledger.workload import resolve_workload, trace_workload
from tensorledger.workload.layout import resolve_layout
from tensorledger.workload.source import ModelSource

__all__ = ["LAYER_KEYS", "measure_profile", "with_layers"]

#: The fields a config.json names its layer count by, by architecture family.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
#: An unbounded context (computed positions): the longest sequence a plan takes then.
_UNBOUNDED = 1 << 24
#: The op categories whose FLOPs a profile counts: the tensor-core work (the closed form's).
_COUNTED = ("matmul", "attention")


@dataclass(frozen=True)
class _Point:
    """One traced step of one rank: per token where it scales with tokens."""

    params: float  # the rank's parameters
    embedding_params: float  # of them, the parts named as embeddings (the whole model's)
    flops: float
    forward_flops: float
    largest_matmul: float  # the largest forward matmul inside a block
    saved: float
    temporary: float  # the forward's most: for an LM the loss's logits and their kin
    sent: float
    collectives: float


def layer_count(source: ModelSource) -> int | None:
    """The layer count of a preset or a config.json; None for a factory (its own)."""
    if source.config is not None and source.builder == "reference":
        return source.config.n_layers
    if source.hf_config is not None:
        for key in LAYER_KEYS:
            value = source.hf_config.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    if source.config is not None:
        return source.config.n_layers
    return None


def with_layers(source: ModelSource, layers: int) -> ModelSource:
    """``source`` built with ``layers`` blocks: the reference config's ``n_layers``, or the
    config.json's layer field (and any per-layer list, such as ``layer_types``, cut to it)."""
    config = (dataclasses.replace(source.config, n_layers=layers)
              if source.config is not None else None)
    raw = None
    if source.hf_config is not None:
        raw = dict(source.hf_config)
        key = next((k for k in LAYER_KEYS if k in raw), None)
        if key is None and source.builder == "transformers":
            raise ModelError(f"{source.label}: no layer count field ({', '.join(LAYER_KEYS)}) "
                             "to build it at one and two blocks; give it one")
        if key is not None:
            raw[key] = layers
        for name, value in list(raw.items()):
            if isinstance(value, list) and name.startswith("layer_") and len(value) > layers:
                raw[name] = value[:layers]
    return dataclasses.replace(source, config=config, hf_config=raw)


def _block_module(module: str) -> bool:
    return any(part.isdigit() for part in module.split("."))


def _trace(source: ModelSource, seq_len: int, precision: str, tp: int, sp: bool,
           checkpoint: bool) -> _Point:
    layout = resolve_layout(tp=tp, sp=sp)
    # a factory's own code may copy only past one sequence (a slice of a batch of one is
    # still contiguous): two sequences show its temporaries as every larger batch has them
    batch = 2 if source.kind == "factory" else 1
    work = resolve_workload(source, batch=batch, seq=seq_len, step="forward-backward",
                            precision=precision, device="fake", checkpoint=checkpoint,
                            layout=layout)
    from tensorledger.ledger.memory import memory_of

    run = trace_workload(work)
    tokens = float(run.tokens)
    records = run.trace.records
    # the model's FLOPs as the closed form and MFU count them: the matmuls, and attention
    # with its backward twice its forward (a fused kernel's recomputed scores are not the
    # model's: the trace counts them, 2.5×)
    forward = sum(r.flops_causal_halved for r in records
                  if r.phase == "forward" and r.category in _COUNTED)
    attention = sum(r.flops_causal_halved for r in records
                    if r.phase == "forward" and r.category == "attention")
    matmuls_all = sum(r.flops_causal_halved for r in records if r.category == "matmul")
    matmuls = [r.flops for r in records if r.phase == "forward" and r.category == "matmul"
               and _block_module(r.module)] or [r.flops for r in records
                                                if r.phase == "forward"
                                                and r.category == "matmul"] or [0]
    collectives = communication(run.trace)
    embedding = sum(n for name, n in run.param_parts if "embed" in name or name in (
        "wte", "wpe", "transformer.wte", "transformer.wpe"))
    ledger = memory_of(run)
    return _Point(params=float(run.params), embedding_params=float(embedding),
                  flops=(matmuls_all + 3 * attention) / tokens,
                  forward_flops=forward / tokens,
                  largest_matmul=max(matmuls) / tokens,
                  saved=ledger.saved_activation_bytes / tokens,
                  temporary=_forward_excess(ledger.timeline.points) / tokens,
                  sent=sum(c.bytes_sent for c in collectives) / tokens,
                  collectives=float(sum(c.calls for c in collectives)))


def _forward_excess(points: Sequence[TimelinePoint]) -> float:
    """What the forward holds at its highest beyond the saved tensors it ends with: the
    loss's logits and their kin (the planner adds it to every saved tensor of the stage)."""
    forward = [p for p in points if p.phase == "forward"]
    if not forward:
        return 0.0
    saved = max(p.saved_activation_bytes for p in forward)
    return float(max(p.saved_activation_bytes + p.temporary_bytes for p in forward) - saved)


def _derive_checkpointed(block_saved: dict[tuple[bool, bool], Split],
                         sent: dict[tuple[bool, bool], float],
                         calls: dict[tuple[bool, bool], float], width: int,
                         precision: str) -> None:
    """Full recomputation of a block the workload cannot checkpoint, as the reference model's
    traced one runs it: the block keeps its input (``width`` values a token, fp32 under
    autocast, else the parameters' dtype) and its recomputed forward redoes one of its two
    forward all-reduces (5 of the traced 4 + 1, without sequence parallelism)."""
    recipe = resolve_precision(precision)
    stream = 4 if recipe.name == "mixed-bf16" else recipe.param_bytes
    block_saved[(False, True)] = Split(float(width * stream))
    if (False, False) in sent:
        sent[(False, True)] = sent[(False, False)] * 5 / 4
        calls[(False, True)] = calls[(False, False)] * 5 / 4


def _try(make: Callable[[], _Point]) -> _Point | None:
    """A traced point, or None where the model refuses that layout (no plan for it)."""
    try:
        return make()
    except TensorLedgerError:
        return None


def _tp_sizes(source: ModelSource) -> tuple[tuple[str, int], ...]:
    config = source.config
    if config is not None:
        return (("attention heads", config.n_heads),
                ("key/value heads", config.n_kv_heads or config.n_heads),
                ("MLP hidden width", config.d_ff or 4 * config.d_model),
                ("vocabulary", config.vocab_size))
    raw: Mapping[str, Any] = source.hf_config or {}
    sizes = []
    for what, keys in (("attention heads", ("num_attention_heads", "n_head")),
                       ("key/value heads", ("num_key_value_heads",)),
                       ("MLP hidden width", ("intermediate_size", "n_inner", "ffn_dim")),
                       ("vocabulary", ("vocab_size",))):
        value = next((raw[k] for k in keys if isinstance(raw.get(k), int)), None)
        if value:
            sizes.append((what, int(value)))
    return tuple(sizes)


def _width(source: ModelSource, key: str, fallback: int) -> int:
    if source.config is not None:
        return int(getattr(source.config, {"hidden": "d_model", "vocab": "vocab_size"}[key]))
    raw: Mapping[str, Any] = source.hf_config or {}
    keys = {"hidden": ("hidden_size", "n_embd", "d_model"), "vocab": ("vocab_size",)}[key]
    return next((int(raw[k]) for k in keys if isinstance(raw.get(k), int)), fallback)


def measure_profile(source: ModelSource, *, seq_len: int, precision: str,
                    progress: Callable[[str], None] | None = None) -> ModelProfile:
    """Trace ``source`` at one and two blocks (and one and two tensor-parallel ranks) and
    return its per-block profile at ``seq_len`` tokens a sequence and ``precision``."""
    say = progress or (lambda _: None)
    precision = resolve_precision(precision).name
    layers = layer_count(source)
    scaled = layers is not None
    builds = {k: with_layers(source, k) for k in (1, 2)} if scaled else {1: source}
    reference = source.builder == "reference"

    def point(k: int, tp: int, sp: bool, checkpoint: bool) -> _Point | None:
        say(f"profiling {source.name}: {k} block{'s' if k > 1 else ''}, TP {tp}"
            f"{' + SP' if sp else ''}{', checkpointed' if checkpoint else ''}")
        if tp == 1 and not sp and not checkpoint:  # the model's own step: errors speak
            return _trace(builds[k], seq_len, precision, tp, sp, checkpoint)
        return _try(lambda: _trace(builds[k], seq_len, precision, tp, sp, checkpoint))

    counts = tuple(builds)
    plain = {k: point(k, 1, False, False) for k in counts}
    full = {k: point(k, 1, False, True) for k in counts} if source.config is not None else {}
    if any(p is None for p in full.values()):
        full = {}
    split = {k: point(k, 2, False, False) for k in counts} if scaled else {}
    if any(p is None for p in split.values()):
        split = {}
    split_full = ({k: point(k, 2, False, True) for k in counts} if split and full else {})
    if any(p is None for p in split_full.values()):
        split_full = {}
    sp_points = ({k: point(k, 2, True, False) for k in counts} if split and reference else {})
    if any(p is None for p in sp_points.values()):
        sp_points = {}
    sp_full = ({k: point(k, 2, True, True) for k in counts} if sp_points and full else {})
    if any(p is None for p in sp_full.values()):
        sp_full = {}

    def block_of(points: Mapping[int, _Point | None], name: str) -> float:
        values = [float(getattr(points[k], name)) for k in counts]
        return values[1] - values[0] if scaled else values[0]

    def other_of(points: Mapping[int, _Point | None], name: str) -> float:
        return float(getattr(points[1], name)) - block_of(points, name) if scaled else 0.0

    def per_rank(name: str, one: Mapping[int, _Point | None],
                 two: Mapping[int, _Point | None], part: Callable[..., float]) -> Split:
        return Split.measured(part(one, name), part(two, name) if two else None)

    first = plain[1]
    assert first is not None
    block_params = per_rank("params", plain, split, block_of)
    other_params = per_rank("params", plain, split, other_of)
    other_total = other_params.at(1)
    share = min(1.0, first.embedding_params / other_total) if other_total else 0.0
    embedding = Split(other_params.whole * share, other_params.split * share)
    head = Split(other_params.whole - embedding.whole, other_params.split - embedding.split)
    block_saved = {(False, False): per_rank("saved", plain, split, block_of)}
    other_saved = {False: per_rank("saved", plain, split, other_of)}
    if full:
        block_saved[(False, True)] = per_rank("saved", full, split_full, block_of)
    if sp_points:
        block_saved[(True, False)] = Split.measured(block_of(plain, "saved"),
                                                    block_of(sp_points, "saved"))
        other_saved[True] = Split.measured(other_of(plain, "saved"),
                                           other_of(sp_points, "saved"))
    if sp_full and full:
        block_saved[(True, True)] = Split.measured(block_of(full, "saved"),
                                                   block_of(sp_full, "saved"))
    sent: dict[tuple[bool, bool], float] = {}
    calls: dict[tuple[bool, bool], float] = {}
    other_sent: dict[bool, float] = {}
    for key, points in (((False, False), split), ((False, True), split_full),
                        ((True, False), sp_points), ((True, True), sp_full)):
        if points:
            sent[key] = block_of(points, "sent")
            calls[key] = block_of(points, "collectives")
            if not key[1]:
                other_sent[key[0]] = other_of(points, "sent")
    # a factory's own loss: its forward's temporaries as measured (a language model of a
    # config.json or a preset holds its logits at the loss, priced from its vocabulary)
    temporaries = {} if scaled else {False: Split(first.temporary)}
    checkpoints = ("none", "full") if full else ("none",)
    notes: tuple[str, ...] = () if scaled else (
        f"{source.name} is profiled whole (a factory builds its own layer count): one part, "
        "no pipeline, no tensor parallelism",)
    width = _width(source, "hidden", 0)
    if scaled and not full and width:
        _derive_checkpointed(block_saved, sent, calls, width, precision)
        checkpoints = ("none", "full")
        notes += ("checkpoint full derived, not traced (the workload checkpoints the reference "
                  "model's blocks only): a block keeps its input, d values a token in the "
                  "stream's dtype, and recomputes its first tensor-parallel all-reduce",)
    return ModelProfile(
        name=source.name, source=f"traced ({'1 and 2 blocks' if scaled else 'as built'}, "
        f"fake tensors, seq {seq_len:,}, {precision})" + (
            f"; per block scaled to {layers} blocks" if scaled else ""), seq_len=seq_len,
        precision=precision,
        n_layers=layers or 1, d_model=_width(source, "hidden", 0),
        vocab_size=_width(source, "vocab", 0),
        context_length=source.max_seq or _UNBOUNDED, embedding=embedding, block=block_params,
        head=head, block_flops_per_token=block_of(plain, "flops"),
        other_flops_per_token=other_of(plain, "flops"),
        block_forward_flops_per_token=block_of(plain, "forward_flops"),
        other_forward_flops_per_token=other_of(plain, "forward_flops"),
        largest_matmul_flops_per_token=first.largest_matmul,
        block_saved=block_saved, other_saved=other_saved, tp_sent_per_token=sent,
        tp_collectives=calls, other_tp_sent_per_token=other_sent,
        loss_temporaries=temporaries,
        tp_sizes=_tp_sizes(source) if split else (), tensor_parallel=bool(split),
        sequence_parallel=bool(sp_points), checkpoints=checkpoints, whole=not scaled,
        notes=notes)
