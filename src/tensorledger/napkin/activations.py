"""Closed-form activation memory: what autograd keeps for backward, without running anything.

Two models, each derived from what PyTorch's ops really save (measured term by term with
``saved_tensors_hooks``, see :mod:`tensorledger.memory.saved`) rather than from a paper.

**The lecture's deep network** (L blocks of D×D matmul → activation, batch B).  The napkin
count is one B·D activation per block, L·B·D values.  PyTorch keeps (L+1)·B·D with ReLU: each
matmul saves its input, and ReLU saves its output, which *is* the next matmul's input, so the
two coincide, plus the last ReLU's output.  GELU saves its input (the matmul output) instead, a
second tensor per block: 2·L·B·D.  Checkpointing each block keeps only block inputs, L·B·D for
both, so it halves GELU's memory and saves one tensor with ReLU.

**The reference Transformer** (:mod:`tensorledger.models.transformer`, fused attention).
Korthikanti et al. 2022 count s·b·h·(34 + 5·a·s/h) bytes per layer for GPT-3 in 16 bits, with
dropout masks and the s² attention scores.  This implementation differs, so the terms are
rederived; with n = b·s tokens, a = bytes per activation (the parameter dtype), per layer:

- **norms** (two per layer).  RMSNorm (PyTorch's composite ``rms_norm``) computes in fp32 and
  saves its input upcast to fp32 (4·n·d), the fp32 ``rsqrt`` (4·n), the fp32 normalised input
  that the scale's gradient needs (4·n·d), and its output in dtype a (n·d·a), which the next
  projections save.  LayerNorm (native kernel) saves its input (n·d·a), fp32 mean and rstd
  (2·4·n) and its output (n·d·a).
- **attention**.  Fused SDPA (flash/efficient, as on GPUs and on CPU) saves q (n·q_dim·a), k
  and v (2·n·kv_dim·a: GQA makes them smaller), its output (n·q_dim·a, also the output
  projection's input) and one fp32 log-sum-exp per head and row (4·b·H·s); no s² scores.
  RoPE rotates q and k into new tensors (the ones SDPA saves) and keeps cos and sin (s·head_dim
  each, at dtype a; in 16 bits they are cast separately for q and k: four tensors, not two).
- **MLP**.  SwiGLU saves the gate output (SiLU's input), SiLU's output, the up output and their
  product (the down projection's input): 4·n·d_ff·a.  GELU saves its input and output, 2·n·d_ff·a.
- Dropout is off (p = 0) and saves nothing; residual adds save nothing.

Outside the layers: the token ids (8·n), a learned position index (8·s), the final norm, the
log-softmax of the loss (n·V·a, the largest single tensor at small d), the targets (8·n) and
one fp32 scalar.  The logits themselves are not kept.  With per-layer checkpointing a layer
keeps only its input, n·d·a.  Under bf16 autocast (``autocast=True``) the linear layers save
bf16 copies of their inputs and weights and the stream stays fp32: see :func:`activation_memory`.

>>> from tensorledger.napkin.transformer import get_preset
>>> m = activation_memory(get_preset("gpt2"), batch=1, seq_len=1024, dtype_bytes=4)
>>> m.per_layer_bytes        # 4·1024·(2·2·768 + 4·768 + 2·3072) + 2·2·4·1024 + 4·12·1024
50397184
>>> deep_network_activations(1024, 8, 4, "gelu").kept_values   # 2·L·B·D
65536
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["ActivationMemory", "DeepActivations", "activation_memory",
           "deep_network_activations", "korthikanti_layer_bytes"]

_INDEX_BYTES = 8  # int64 token ids and positions
_STAT_BYTES = 4  # fp32 norm statistics, log-sum-exp, the loss's total weight


def _positive(**values: int) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{key} must be a whole number >= 1, got {value!r}")


@dataclass(frozen=True)
class ActivationMemory:
    """Saved-for-backward bytes of one forward pass of a Transformer LM, by part."""

    model: str
    batch: int
    seq_len: int
    dtype_bytes: int
    checkpointed: bool
    norms_bytes_per_layer: int
    attention_bytes_per_layer: int
    mlp_bytes_per_layer: int
    per_layer_bytes: int
    layers_bytes: int
    embeddings_bytes: int  # token ids and position index
    final_norm_bytes: int
    loss_bytes: int  # log-softmax output, targets, total weight
    total_bytes: int
    korthikanti_layer_bytes: int  # the paper's per-layer figure at the same shape, for contrast
    weight_copies_bytes: int = 0  # under autocast: the bf16 weight casts saved (in the layers
    #                                and the loss's head), included in the totals above
    autocast: bool = False


def _norm_bytes(config: TransformerConfig, tokens: int, a: int, shards: int = 1) -> int:
    """A norm's saved bytes over ``tokens``; with sequence parallelism (``shards`` > 1) the norm
    runs on its 1/t of the tokens and the next projections save the all-gathered output."""
    d, mine = config.d_model, tokens // shards
    if config.norm == "rmsnorm":
        return 4 * mine * d + _STAT_BYTES * mine + 4 * mine * d + tokens * d * a
    return mine * d * a + 2 * _STAT_BYTES * mine + tokens * d * a


def korthikanti_layer_bytes(config: TransformerConfig, batch: int, seq_len: int) -> int:
    """Korthikanti et al. 2022, 16-bit, no recomputation: s·b·h·(34 + 5·a·s/h) per layer."""
    s, b, h, heads = seq_len, batch, config.d_model, config.n_heads
    return s * b * h * 34 + 5 * heads * s * s * b


def activation_memory(config: TransformerConfig, batch: int, seq_len: int,
                      dtype_bytes: int = 2, checkpointed: bool = False, tp: int = 1,
                      sequence_parallel: bool = False, autocast: bool = False
                      ) -> ActivationMemory:
    """Bytes the reference Transformer saves for backward in one training forward pass; with
    ``tp`` > 1, what one tensor-parallel rank saves under the Megatron plan of
    :func:`tensorledger.workload.parallel.default_tp_plan` (rederived from traced ranks):

    - q, k, v, the attention output, the MLP's insides and the log-sum-exp are split by heads
      or columns: 1/t of each; RoPE's cos and sin tables are not;
    - the norms, their inputs and the loss's log-softmax (the logits are gathered) are whole
      on every rank;
    - with ``sequence_parallel`` the norms run on 1/t of the tokens; the projections after
      each save its all-gathered output, n·d·a, whole (torch saves the gathered input of a
      linear layer: Korthikanti et al. re-gather it in backward instead).

    With ``autocast`` (the ``mixed-bf16`` recipe: fp32 parameters, bf16 autocast) the
    residual stream, the norms and the log-softmax stay fp32 and each linear layer saves its
    *own* bf16 cast of its input and of its weight (autocast caches a weight's cast; the
    weights' copies are freed in backward):

    - a norm saves its fp32 input and statistics (RMSNorm also its fp32 normalised input)
      but not its output: the linear layers after it save their casts, n·d·2 each (q, k and
      v three, SwiGLU's gate and up two, GELU's one, the head one);
    - every matrix's bf16 copy, 2 bytes per (local) weight, biases not (their gradient needs
      no saved tensor);
    - the log-softmax output in fp32, n·V·4.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> tiny = get_preset("tiny")
    >>> activation_memory(tiny, 2, 16, 4, tp=2).attention_bytes_per_layer  # (16384+8192+512)/2+2048
    14592
    >>> activation_memory(tiny, 2, 16, 4, tp=2, sequence_parallel=True).norms_bytes_per_layer
    32896
    >>> activation_memory(tiny, 2, 16, 2, autocast=True).weight_copies_bytes  # 2·(2·36864+8192)
    163840
    """
    _positive(batch=batch, seq_len=seq_len, tp=tp)
    if dtype_bytes not in (2, 4):
        raise InputError(f"dtype_bytes must be 2 (bf16/fp16) or 4 (fp32), got {dtype_bytes!r}")
    if autocast and dtype_bytes != 2:
        raise InputError("autocast computes in 16 bits: give dtype_bytes=2 with autocast")
    for what, size in (("heads", config.n_heads), ("key/value heads", config.n_kv_heads),
                       ("MLP width", config.d_ff)):
        if size % tp:
            raise InputError(f"tensor parallelism of {tp} does not divide the {size} {what} "
                             f"of {config.name}")
    if sequence_parallel and seq_len % tp:
        raise InputError(f"sequence parallelism of {tp} does not divide the sequence of "
                         f"{seq_len}")
    a, n, s, d = dtype_bytes, batch * seq_len, seq_len, config.d_model
    shards = tp if sequence_parallel else 1
    swiglu = config.mlp == "swiglu"
    norm = _autocast_norm_bytes(config, n // shards) if autocast else _norm_bytes(
        config, n, a, shards)
    norms = 2 * norm
    attention = ((n * (config.q_dim + 2 * config.kv_dim) * a + n * config.q_dim * a) // tp
                 + _STAT_BYTES * batch * (config.n_heads // tp) * s)
    if config.positions == "rope":
        tables = 2 if a == 4 else 4  # cos and sin; cast apart for q and k when 16-bit
        attention += tables * s * config.head_dim * a
    mlp = (4 if swiglu else 2) * n * (config.d_ff // tp) * a
    copies = 0
    if autocast:  # each linear's cast input, whole on a TP rank (and gathered under SP)
        attention += 3 * n * d * a
        mlp += (2 if swiglu else 1) * n * d * a
        matrices = (2 * d * config.q_dim + 2 * d * config.kv_dim
                    + (3 if swiglu else 2) * d * config.d_ff)
        copies = a * matrices // tp
    per_layer = norms + attention + mlp + copies
    # a checkpointed layer keeps its input: the residual stream, fp32 under autocast
    stream = 4 if autocast else a
    kept_per_layer = n // shards * d * stream if checkpointed else per_layer
    layers = config.n_layers * kept_per_layer
    embeddings = _INDEX_BYTES * n + (_INDEX_BYTES * s if config.positions == "learned" else 0)
    final_norm = norm
    head_copy = a * config.vocab_size * d // tp if autocast else 0
    loss = (n * config.vocab_size * (4 if autocast else a) + _INDEX_BYTES * n + _STAT_BYTES
            + (n * d * a + head_copy if autocast else 0))
    total = layers + embeddings + final_norm + loss
    weight_copies = (0 if checkpointed else config.n_layers * copies) + head_copy
    return ActivationMemory(model=config.name, batch=batch, seq_len=seq_len, dtype_bytes=a,
                            checkpointed=checkpointed, norms_bytes_per_layer=norms,
                            attention_bytes_per_layer=attention, mlp_bytes_per_layer=mlp,
                            per_layer_bytes=kept_per_layer, layers_bytes=layers,
                            embeddings_bytes=embeddings, final_norm_bytes=final_norm,
                            loss_bytes=loss, total_bytes=total,
                            korthikanti_layer_bytes=korthikanti_layer_bytes(config, batch,
                                                                            seq_len),
                            weight_copies_bytes=weight_copies, autocast=autocast)


def _autocast_norm_bytes(config: TransformerConfig, tokens: int) -> int:
    """A norm under autocast: fp32 input and statistics (and RMSNorm's normalised input);
    its output is saved only as the next layers' bf16 casts, counted with them."""
    d = config.d_model
    if config.norm == "rmsnorm":
        return 4 * tokens * d + _STAT_BYTES * tokens + 4 * tokens * d
    return 4 * tokens * d + 2 * _STAT_BYTES * tokens


@dataclass(frozen=True)
class DeepActivations:
    """What the deep network keeps for backward, and how it differs from the napkin count."""

    activation: str
    checkpointed: bool
    batch: int
    d_model: int
    n_layers: int
    kept_values: int  # what PyTorch keeps
    napkin_values: int  # the lecture's L·B·D
    kept_bytes: int
    napkin_bytes: int
    kept_tensors: int  # in units of B·D
    explanation: str


def deep_network_activations(d_model: int, n_layers: int, batch: int, activation: str = "relu",
                             checkpointed: bool = False, dtype_bytes: int = 4
                             ) -> DeepActivations:
    """Values the lecture's deep network keeps for backward, against the napkin's L·B·D."""
    _positive(d_model=d_model, n_layers=n_layers, batch=batch, dtype_bytes=dtype_bytes)
    if activation not in ("relu", "gelu"):
        raise InputError(f"unknown activation {activation!r}; known: relu, gelu")
    L, bd = n_layers, batch * d_model
    if checkpointed:
        tensors = L
        why = ("each checkpointed block keeps only its input (L tensors of B·D); the rest is "
               "recomputed in backward")
    elif activation == "relu":
        tensors = L + 1
        why = ("each matmul keeps its input and ReLU keeps its output, which is the next "
               "matmul's input: one tensor per block plus the last output, (L+1)·B·D")
    else:
        tensors = 2 * L
        why = ("each matmul keeps its input and GELU keeps its own input (the matmul output) "
               "too: two tensors per block, 2·L·B·D")
    return DeepActivations(activation=activation, checkpointed=checkpointed, batch=batch,
                           d_model=d_model, n_layers=L, kept_values=tensors * bd,
                           napkin_values=L * bd, kept_bytes=tensors * bd * dtype_bytes,
                           napkin_bytes=L * bd * dtype_bytes, kept_tensors=tensors,
                           explanation=why)
