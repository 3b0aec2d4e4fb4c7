"""Closed forms of a fine-tuning step's state with adapters (LoRA, QLoRA): a frozen base in its
stored dtype or in 4-bit NF4, and adapters that alone have gradients and optimizer state.

NF4 as torchao stores it (``NF4Tensor``, the QLoRA format of Dettmers et al., 2023), for a
weight of ``n`` elements made from ``w``-byte floats, blocks of 64, 256 scales per factor:

- the 4-bit codes, two to a byte:                  n / 2 bytes
- an int8 absmax scale per block of 64:            n / 64 bytes
- a factor per 256 of those scales, in the weight's dtype: n / 16,384 values, except that
  with exactly one such block torchao keeps the whole expanded row of 256 it took it from
- the mean the scales were centred on and the 16-value code book: 17 values

So a bf16 weight costs 0.5 + 1/64 + 2/16,384 bytes a parameter (4.126 bits) plus 34 bytes.

>>> nf4_bytes(4096 * 14_336, 2)    # 29,360,128 + 917,504 + 7,168 + 34
30284834
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.napkin.activations import ActivationMemory, activation_memory
from tensorledger.napkin.recipes import Optimizer, Precision, RecipeBytes, recipe_bytes
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["DEFAULT_TARGETS", "FULL_FINE_TUNE", "NF4_BLOCK", "NF4_DEQUANTIZE_FLOPS_PER_ELEMENT",
           "NF4_SCALER_BLOCK", "REFERENCE_LINEARS", "AdapterCounts", "LoraActivations", "LoraShape",
           "adapter_counts", "adapter_recipe", "frozen_bytes", "lora_activation_memory",
           "lora_shape", "nf4_bytes", "step_words"]

#: What a step trains without adapters, in words (``step_words``).
FULL_FINE_TUNE = "full fine-tune"

#: Elements per absmax block, and block scales per second-level factor (torchao's defaults).
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256


def nf4_bytes(numel: int, itemsize: int) -> int:
    """Bytes torchao's NF4 keeps for a weight of ``numel`` elements of ``itemsize`` bytes."""
    whole = NF4_BLOCK * NF4_SCALER_BLOCK
    if numel <= 0 or numel % whole:
        raise InputError(f"an NF4 weight holds a multiple of {whole:,} elements, got {numel:,}")
    factors = numel // whole
    factor_values = NF4_SCALER_BLOCK if factors == 1 else factors
    return numel // 2 + numel // NF4_BLOCK + (factor_values + 1 + 16) * itemsize


def frozen_bytes(tensors: Sequence[tuple[int, int, bool]]) -> int:
    """Bytes of frozen tensors given as (elements, bytes an element, stored in NF4).

    >>> frozen_bytes([(16_384, 2, True), (97 * 128, 2, False)])   # 8,192 + 256 + 273·2 + 24,832
    33826
    """
    return sum(nf4_bytes(n, width) if nf4 else n * width for n, width, nf4 in tensors)


def adapter_recipe(precision: Precision, optimizer: Optimizer, numels: Sequence[int],
                   itemsize: int) -> RecipeBytes | None:
    """The adapters' parameters, gradients and optimizer state under ``precision``, for
    adapters of ``itemsize`` bytes an element (peft keeps them in fp32 over a 16-bit base:
    fp32 gradients and states then, with no master copy, under ``bf16``, ``bf16-master`` and
    ``bf16-fp32-states`` alike, as traced steps hold); None where an adapter's width is
    neither the recipe's nor fp32 over a 16-bit base."""
    if itemsize == precision.param_bytes:
        return recipe_bytes(precision, optimizer, numels)
    if itemsize == 4 and precision.param_bytes == 2:
        return recipe_bytes("fp32", optimizer, numels)
    return None


# ------------------------------------------------------- LoRA on the reference Transformer

#: The reference model's linear layers (:mod:`tensorledger.models.transformer`), by the names
#: ``--lora-targets`` takes on a preset (peft matches a module's last name); ``gate`` is
#: SwiGLU's alone.  Hugging Face's names for the same layers, for the one-line refusal.
REFERENCE_LINEARS = ("query", "key", "value", "output", "gate", "up", "down", "head")
_HF_NAMES = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "o_proj": "output",
             "gate_proj": "gate", "up_proj": "up", "down_proj": "down", "lm_head": "head"}
#: What ``--lora`` adapts on a preset when no targets are named: peft's usual q_proj, v_proj
#: (:data:`tensorledger.workload.lora.REFERENCE_TARGETS`, which a test holds equal).
DEFAULT_TARGETS = ("query", "value")
#: FLOPs of torchao's dequantisation of one NF4 weight of n elements, as the cost registry
#: counts its elementwise ops: the two 4-bit codes of each byte split by a shift and a mask
#: (n/2 + n/2), each value times its block's scale (n), and each block's int8 scale divided
#: by its factor and added to the mean (2 per block of 64).
NF4_DEQUANTIZE_FLOPS_PER_ELEMENT = 2.0 + 2.0 / NF4_BLOCK


@dataclass(frozen=True)
class LoraShape:
    """LoRA adapters on named linears of every block (and the head, when named) of a
    reference model: an ``A`` (r × d_in) and a ``B`` (d_out × r) beside each, the rest frozen
    in its stored dtype, or with ``nf4`` (QLoRA) its linears (but the head's) in 4-bit NF4.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> lora_shape(get_preset("tiny"), 8, ("value", "query")).describe()
    'LoRA r=8 on query, value'
    """

    rank: int
    targets: tuple[str, ...]  # in the model's order (REFERENCE_LINEARS')
    nf4: bool = False

    def describe(self) -> str:
        kind = "QLoRA" if self.nf4 else "LoRA"
        base = " over a 4-bit NF4 base" if self.nf4 else ""
        return f"{kind} r={self.rank} on {', '.join(self.targets)}{base}"

    def fine_tune(self) -> str:
        """What a step of these adapters trains, in words: ``LoRA fine-tune, r=8 on query,
        value`` (QLoRA: its base named too)."""
        base = ", base in 4-bit NF4" if self.nf4 else ""
        return (f"{'QLoRA' if self.nf4 else 'LoRA'} fine-tune, r={self.rank} on "
                f"{', '.join(self.targets)}{base}")


def _linears(config: TransformerConfig) -> dict[str, tuple[int, int]]:
    """(d_in, d_out) of each linear a block holds, and the head's, by name."""
    d, f = config.d_model, config.d_ff
    shapes = {"query": (d, config.q_dim), "key": (d, config.kv_dim),
              "value": (d, config.kv_dim), "output": (config.q_dim, d)}
    if config.mlp == "swiglu":
        shapes["gate"] = (d, f)
    shapes |= {"up": (d, f), "down": (f, d), "head": (d, config.vocab_size)}
    return shapes


def lora_shape(config: TransformerConfig, rank: int, targets: Sequence[str] = (),
               nf4: bool = False) -> LoraShape:
    """``--lora``'s adapters on a preset, its targets checked against the reference model's
    linears (none named: :data:`DEFAULT_TARGETS`); a dense block only (no experts, no
    latent attention)."""
    if config.moe is not None or config.mla is not None:
        raise InputError(f"--lora is priced on dense blocks; {config.name}'s "
                         f"{'experts' if config.moe is not None else 'latent attention'} "
                         "have no adapter closed form here yet")
    have = _linears(config)
    for target in targets:
        if target not in have:
            hint = (f" (peft's {target} is the reference model's {_HF_NAMES[target]})"
                    if target in _HF_NAMES else "")
            raise InputError(f"--lora-targets: {config.name} (the reference model) has no "
                             f"linear {target!r}{hint}; its linear modules: {', '.join(have)}")
    named = set(targets) or set(DEFAULT_TARGETS)
    return LoraShape(rank=rank, targets=tuple(n for n in have if n in named), nf4=nf4)


@dataclass(frozen=True)
class AdapterCounts:
    """Parameters of a LoRA fine-tune of a reference model, and of its frozen base.

    A block's adapters hold r·(d_in + d_out) parameters per adapted linear; with ``nf4`` every
    matrix of a block whose elements are a multiple of 64·256 is stored in NF4 (torchao's
    blocks), as :mod:`tensorledger.workload.qlora` quantises them; the embedding, the norms and
    the head keep their stored dtype."""

    layer_params: int  # the adapters of one block
    head_params: int  # the head's adapter (0 unless the head is a target)
    params: int  # all of them: n_layers · layer_params + head_params
    layer_rank_values: int  # a token's low-rank intermediates in a block: r per adapted linear
    layer_matrices: int  # a block's frozen matrices (its norms apart)
    layer_quantized: int  # of those, the elements stored in NF4 (0 without nf4)
    layer_quantized_bytes: int  # their NF4 bytes at the stored dtype's width

    def layer_frozen_bytes(self, itemsize: float) -> float:
        """A block's frozen matrices: NF4 where quantised, ``itemsize`` bytes elsewhere."""
        return self.layer_quantized_bytes + (self.layer_matrices - self.layer_quantized) * itemsize


def adapter_counts(config: TransformerConfig, lora: LoraShape, itemsize: int = 2
                   ) -> AdapterCounts:
    """The adapters' and the frozen base's counts (``itemsize``: the stored dtype's bytes).

    >>> from tensorledger.napkin.transformer import get_preset
    >>> tiny = get_preset("tiny")   # d 64, q 64, kv 32: query 8·(64+64), value 8·(64+32)
    >>> adapter_counts(tiny, lora_shape(tiny, 8, ("query", "value"))).layer_params
    1792
    """
    shapes = _linears(config)
    block = {name: shape for name, shape in shapes.items() if name != "head"}
    per_linear = {name: lora.rank * (d_in + d_out) for name, (d_in, d_out) in shapes.items()}
    layer = sum(per_linear[n] for n in lora.targets if n != "head")
    head = per_linear["head"] if "head" in lora.targets else 0
    matrices = sum(d_in * d_out for d_in, d_out in block.values())
    quantized = [d_in * d_out for d_in, d_out in block.values()
                 if lora.nf4 and (d_in * d_out) % (NF4_BLOCK * NF4_SCALER_BLOCK) == 0]
    return AdapterCounts(
        layer_params=layer, head_params=head, params=config.n_layers * layer + head,
        layer_rank_values=lora.rank * sum(1 for n in lora.targets if n != "head"),
        layer_matrices=matrices, layer_quantized=sum(quantized),
        layer_quantized_bytes=sum(nf4_bytes(n, itemsize) for n in quantized))


#: The bytes of an adapter's element: peft keeps adapters in fp32 over a 16-bit base too.
ADAPTER_BYTES = 4
#: Which block input each linear reads: the attention norm's output, the attention's output,
#: the MLP norm's output, the MLP's product (SwiGLU) or activation (GELU).
_INPUTS = {"query": "attention in", "key": "attention in", "value": "attention in",
           "output": "attention out", "gate": "mlp in", "up": "mlp in", "down": "mlp mid"}
#: The linears tensor parallelism splits by rows (their inputs split): the rest by columns.
_ROW_PARALLEL = ("output", "down")


@dataclass(frozen=True)
class LoraActivations:
    """What a LoRA step saves for backward: the full fine-tune's form, its terms redone.

    ``activations`` has the layer terms of a block past the first, the final norm and the
    loss end of a LoRA step; the first block saves ``first_layer_less_bytes`` fewer (its input
    comes from the frozen embedding and needs no gradient)."""

    activations: ActivationMemory
    adapters_bytes_per_layer: int  # the adapters' own saved tensors, in per_layer_bytes
    first_layer_less_bytes: int


def lora_activation_memory(config: TransformerConfig, lora: LoraShape, batch: int,
                           seq_len: int, dtype_bytes: int = 2, checkpointed: bool = False,
                           tp: int = 1, sequence_parallel: bool = False,
                           autocast: bool = False) -> LoraActivations:
    """Bytes a LoRA step of the reference Transformer saves for backward, from
    :func:`tensorledger.napkin.activations.activation_memory`'s terms (same arguments) with
    the rule that sets a fine-tune of frozen weights apart: an op saves a tensor only for a
    gradient something needs, and no frozen weight needs one.

    - a frozen linear saves no input (its weight's gradient is not taken) but, under
      autocast, still its bf16 weight cast (the input's gradient needs it);
    - a frozen norm scale: RMSNorm keeps its fp32 input and ``rsqrt`` (4·n·d + 4·n), not its
      normalised input nor its output; LayerNorm its input and statistics;
    - the attention core and the MLP's activations are kept as in full fine-tuning (the
      gradient flows through them to the adapters below), but the down projection's input;
    - each adapted linear's ``A`` saves its input, as peft hands it over: cast to the
      adapters' fp32 (a new tensor, n·d_in·4, under a 16-bit base), its bf16 cast under
      autocast (n·d_in·2, with the casts of A and B, 2·r·(d_in + d_out)), or in fp32 the
      input itself (a norm's output, once for the linears reading it, n·d·4; the attention's
      output and the MLP's product are saved anyway); ``B`` saves the low-rank intermediate,
      n·r in fp32 (bf16 under autocast);
    - the first block's input comes from the frozen embedding and needs no gradient: an op
      there saves only what the gradient of a later input needs (:func:`_block_bytes` with
      ``stream_grad`` off): with the query or value adapted, its attention norm, its frozen
      q, k, v weight casts and their adapters' ``A`` casts, and in 16 bits RoPE's tables of
      an unadapted query or key go; with only the MLP adapted, its attention too.

    Under tensor parallelism the adapters are split as their linears are (the column-parallel
    ones' ``B`` by rows, the row-parallel ones' ``A`` by columns): a row-parallel linear's
    saved input is its rank's 1/t, a column-parallel one's whole, and the low-rank
    intermediate whole (r values a token, all-reduced after a row-parallel ``A``).

    >>> from tensorledger.napkin.transformer import get_preset
    >>> tiny = get_preset("tiny")
    >>> m = lora_activation_memory(tiny, lora_shape(tiny, 8), 2, 16, 4)
    >>> # norms 2·8,320 + 8,192, attention 27,136, MLP 49,152, the two B inputs 2·1,024
    >>> m.activations.per_layer_bytes
    103168
    >>> m.first_layer_less_bytes        # the first attention norm: 4·32·64 + 4·32
    8320
    """
    full = activation_memory(config, batch, seq_len, dtype_bytes, checkpointed, tp=tp,
                             sequence_parallel=sequence_parallel, autocast=autocast)
    a, n, d, t = dtype_bytes, batch * seq_len, config.d_model, tp
    mine = n // (tp if sequence_parallel else 1)
    shape = _Shape(config, lora, n, seq_len, a, t, mine, autocast)
    norms, attention, mlp, adapters, copies = _block_bytes(shape, stream_grad=True)
    per_layer = norms + attention + mlp + adapters + copies
    kept = full.per_layer_bytes if checkpointed else per_layer
    first_block = _block_bytes(shape, stream_grad=False)
    first = 0 if checkpointed else per_layer - sum(first_block)
    final_norm = shape.norm
    loss = full.loss_bytes - (n * d * a if autocast else 0)  # the frozen head: no input cast
    if "head" in lora.targets:
        final_norm += (n * d * a if shape.shared else 0) + shape.adapter("head", True)
    layers = config.n_layers * kept - first
    total = layers + full.embeddings_bytes + final_norm + loss
    closed = dataclasses.replace(
        full, norms_bytes_per_layer=norms, attention_bytes_per_layer=attention,
        mlp_bytes_per_layer=mlp + adapters, per_layer_bytes=kept, layers_bytes=layers,
        final_norm_bytes=final_norm, loss_bytes=loss, total_bytes=total,
        weight_copies_bytes=(0 if checkpointed else (config.n_layers - 1) * copies
                             + first_block[4])
        + (a * config.vocab_size * d // t if autocast else 0))
    return LoraActivations(activations=closed, adapters_bytes_per_layer=adapters,
                           first_layer_less_bytes=first)


@dataclass(frozen=True)
class _Shape:
    """What a block's saved bytes depend on (see :func:`lora_activation_memory`)."""

    config: TransformerConfig
    lora: LoraShape
    n: int  # tokens
    seq_len: int
    a: int  # bytes of an activation (the parameter dtype; 2 under autocast)
    t: int  # tensor-parallel ranks
    mine: int  # the tokens a norm runs on (1/t of them with sequence parallelism)
    autocast: bool

    @property
    def shared(self) -> bool:
        """fp32 without autocast: an adapter's A reads its input itself (no cast)."""
        return self.a == ADAPTER_BYTES and not self.autocast

    @property
    def norm(self) -> int:
        """A norm with a frozen scale: RMSNorm's fp32 input and rsqrt, LayerNorm's input and
        statistics."""
        d, mine = self.config.d_model, self.mine
        if self.config.norm == "rmsnorm":
            return 4 * mine * d + 4 * mine
        return mine * d * (4 if self.autocast else self.a) + 8 * mine

    def adapter(self, name: str, input_grad: bool) -> int:
        """An adapted linear's own saved tensors: its cast input (none when ``shared``), B's
        input (the r-value intermediate), and under autocast the casts of B and, when its
        input needs a gradient, of A."""
        d_in, d_out = _linears(self.config)[name]
        r, t = self.lora.rank, self.t
        local_in = d_in // t if name in _ROW_PARALLEL else d_in
        low = self.n * r * (2 if self.autocast else ADAPTER_BYTES)
        if self.autocast:
            return (self.n * local_in * 2 + low + 2 * r * d_out // t
                    + (2 * r * d_in // t if input_grad else 0))
        return (0 if self.shared else self.n * local_in * ADAPTER_BYTES) + low


def _block_bytes(shape: _Shape, stream_grad: bool) -> tuple[int, int, int, int, int]:
    """(norms, attention, MLP, adapters, autocast's weight casts) a block saves; with
    ``stream_grad`` off, of a block whose input needs no gradient (the first), where an op
    saves a tensor only for an input or adapter that needs one."""
    config, lora, n, a, t = shape.config, shape.lora, shape.n, shape.a, shape.t
    d, f, q, kv = config.d_model, config.d_ff // t, config.q_dim, config.kv_dim
    adapted = {name for name in lora.targets if name != "head"}
    swiglu = config.mlp == "swiglu"
    # which outputs need a gradient: a projection's when its input or its adapter does
    grad = {name: stream_grad or name in adapted for name in ("query", "key", "value")}
    core = any(grad.values())  # the attention's inputs, and so its output
    after_attention = stream_grad or core or "output" in adapted
    gate = after_attention or "gate" in adapted
    up = after_attention or "up" in adapted
    middle = (gate or up) if swiglu else up  # the down projection's input
    needs = {"attention in": stream_grad, "attention out": core, "mlp in": after_attention,
             "mlp mid": middle}
    read = {_INPUTS[name] for name in adapted}
    norms = shape.norm * (stream_grad + after_attention)
    if shape.shared:  # a norm's output, saved once for the adapters that read it
        norms += n * d * a * (("attention in" in read) + ("mlp in" in read))
    attention = 0
    if core:  # q, k, v and the output (SDPA's), one fp32 log-sum-exp a head and row
        attention = ((n * (q + 2 * kv) * a + n * q * a) // t
                     + 4 * (n // shape.seq_len) * (config.n_heads // t) * shape.seq_len)
    elif shape.shared and "output" in adapted:  # the output, for its adapter alone
        attention = n * q * a // t
    if config.positions == "rope":
        tables = 2 * shape.seq_len * config.head_dim * a  # cos and sin
        rotated = grad["query"] + grad["key"]
        attention += tables * rotated if a == 2 else (tables if rotated else 0)
    # SwiGLU: SiLU's input, its output and the up projection's output; GELU: its input
    mlp = n * f * a * ((gate + up + gate) if swiglu else up)
    mlp += n * f * a if shape.shared and "mlp mid" in read else 0
    adapters = sum(shape.adapter(name, needs[_INPUTS[name]]) for name in adapted)
    copies = 0
    if shape.autocast:  # a frozen linear's weight cast, when its input needs a gradient
        copies = a * (stream_grad * d * (q + 2 * kv) // t + core * q * d // t
                      + after_attention * (2 if swiglu else 1) * d * f + middle * f * d)
    return norms, attention, mlp, adapters, copies


def step_words(lora: LoraShape | None) -> str:
    """What one step trains, in words: :data:`FULL_FINE_TUNE` without adapters, else
    :meth:`LoraShape.fine_tune`.

    >>> step_words(None)
    'full fine-tune'
    """
    return FULL_FINE_TUNE if lora is None else lora.fine_tune()
