"""How many users a chip serves: weights, the KV budget, prefill and decode on a napkin.

Torch-free closed forms over a :class:`TransformerConfig`, its :class:`KvLayout` and a catalog
chip's expected efficiencies (``Hardware.expected_flop_rate`` / ``expected_bandwidth``, as the
roofline prices a traced op):

- **Memory** (vLLM's convention): a chip offers ``memory × memory_utilization``; the weights
  (``/ tp``) and an activation reserve come off, the rest is the KV cache, allocated in pages of
  ``block_size`` tokens per layer.  The largest batch is the number of sequences of ``context``
  tokens whose pages fit.
- **Decode** (one token for each of ``batch`` sequences): the step streams the weights the
  matmuls use (the embedding table is gathered, not streamed) and every sequence's cache, and
  does ``2·N_matmul`` FLOPs per token plus attention over the context (``4·q_dim`` per cached
  token and layer).  Its time is the larger of bytes / expected bandwidth and FLOPs / expected
  rate: memory-bound while the batch is small.
- **Ridge**: the batch where the weights' matmuls turn compute-bound,
  ``streamed weight bytes · peak / (2·N_matmul · bandwidth)`` — for bf16 weights ≈ peak /
  bandwidth (H100 SXM ≈ 295).  The cache adds bytes in proportion to the batch, so at a long
  context decode may never turn (decode attention's intensity is ≈ n_heads / n_kv_heads).
- **Prefill** (time to first token of ``batch`` prompts of ``context`` tokens): compute-bound,
  ``2·N_matmul`` per token at the expected matmul rate plus causal attention (halved; sliding
  layers count their window) at the expected attention rate.

Left out, and said in the output: tensor-parallel communication, the scheduler and sampling,
the framework's own memory (CUDA context, graphs), the precision lab's error of a quantized
format (it needs torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorledger.dtypes import DType
from tensorledger.errors import InputError, UnknownNameError
from tensorledger.hardware.catalog import Hardware
from tensorledger.napkin.arithmetic import Step
from tensorledger.napkin.kvcache import KvLayout, resolve_cache_dtype
from tensorledger.napkin.transformer import TransformerConfig, parameter_count

__all__ = ["ACTIVATION_CHUNK_TOKENS", "MAX_CURVE_BATCH", "WEIGHT_FORMATS", "ServeRow",
           "Serving", "WeightFormat", "resolve_weight_format", "serving"]

#: Tokens of the prefill chunk the activation reserve is sized for (an assumption: a serving
#: engine profiles its own peak; chunked prefill keeps it to a chunk of this order).
ACTIVATION_CHUNK_TOKENS = 8192
#: The largest batch the curve is drawn to.
MAX_CURVE_BATCH = 1 << 20


@dataclass(frozen=True)
class WeightFormat:
    """How weights are stored: bits per weight (block scales included) and the arithmetic
    their matmuls run in."""

    name: str
    bits_per_param: float
    compute: str  # peak-table key: bf16, fp8, fp4, int8
    description: str


WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("bf16", 16, "bf16", "bf16"),
    WeightFormat("fp16", 16, "fp16", "fp16"),
    WeightFormat("fp8", 8, "fp8", "fp8 E4M3 with per-tensor scales (not counted), fp8 matmuls"),
    WeightFormat("int8", 8, "int8", "int8 with per-channel scales (not counted), int8 matmuls"),
    # weight-only (w4a16): groups of 128 weights share a bf16 scale, 4 + 16/128 bits
    WeightFormat("int4", 4 + 16 / 128, "bf16",
                 "int4 weight-only, a bf16 scale per 128 weights (4.125 bits), bf16 matmuls"),
    # NVFP4: blocks of 16 E2M1 values with an E4M3 scale, 4 + 8/16 bits
    WeightFormat("nvfp4", 4 + 8 / 16, "fp4",
                 "NVFP4: an E4M3 scale per 16 E2M1 values (4.5 bits), fp4 matmuls"),
    # MXFP4: blocks of 32 E2M1 values with an E8M0 scale, 4 + 8/32 bits
    WeightFormat("mxfp4", 4 + 8 / 32, "fp4",
                 "MXFP4: an E8M0 scale per 32 E2M1 values (4.25 bits), fp4 matmuls"),
)}


def resolve_weight_format(name: str) -> WeightFormat:
    key = name.strip().lower()
    if key not in WEIGHT_FORMATS:
        raise UnknownNameError("weights dtype", name, WEIGHT_FORMATS)
    return WEIGHT_FORMATS[key]


@dataclass(frozen=True)
class ServeRow:
    """Prefill and decode at one batch (sequences in flight on one tensor-parallel group)."""

    batch: int
    fits: bool  # its cache fits the budget
    ttft_s: float  # prefill of ``batch`` prompts of the context, together
    decode_bytes: float  # per chip per step: weights streamed + the caches read
    decode_flops: float  # per chip per step
    decode_memory_s: float
    decode_compute_s: float
    tpot_s: float  # time per output token: the larger of the two
    bound: str  # "memory" or "compute"
    tokens_per_s_per_chip: float
    tokens_per_s_per_user: float


@dataclass(frozen=True)
class Serving:
    """``tensorledger serve``: what one chip holds and how fast it decodes, by batch."""

    model: str
    hardware: str
    attention: str
    count: int
    tp: int
    replicas: int
    weights_format: str
    weights_description: str
    kv_dtype: str
    context: int
    memory_utilization: float
    block_size: int
    params: int
    matmul_params: int
    weights_bytes: float  # all of the model
    weights_bytes_per_chip: float
    streamed_weights_bytes_per_chip: float  # what a decode step reads (no embedding table)
    usable_bytes_per_chip: float  # memory × utilization
    activation_reserve_bytes: float
    kv_budget_bytes_per_chip: float
    kv_bytes_per_token: int  # all layers, the whole model
    kv_bytes_per_sequence_per_chip: int  # one sequence of the context, paged, this chip's heads
    max_batch: int  # per tensor-parallel group
    max_sequences: int  # over all replicas
    peak_flop_per_s: float
    bandwidth_bytes_per_s: float
    expected_bandwidth_bytes_per_s: float
    ridge_batch: float  # roofline: the weights' matmuls turn compute-bound (datasheet rates)
    ridge_batch_at_context: float | None  # with the cache at the context; None: never
    rows: tuple[ServeRow, ...]  # powers of two to past the ridge and the fit, and max_batch
    steps: tuple[Step, ...]
    notes: tuple[str, ...]

    def row(self, batch: int) -> ServeRow:
        for row in self.rows:
            if row.batch == batch:
                return row
        raise InputError(f"no row for batch {batch}")


def _chip_key(chip: Hardware, key: str, what: str) -> str:
    if key not in chip.dense_flop_per_s:
        raise InputError(f"{chip.id} has no {key} arithmetic for {what}; it lists: "
                         f"{', '.join(chip.dense_flop_per_s)}")
    return key


def _attention_rate(chip: Hardware, key: str, flops: float) -> float:
    """As the roofline prices a fused attention kernel: a probed curve, else the published
    fraction of the peak, else the matmul rate."""
    curve = f"attention.{key}"
    efficiency = chip.efficiency
    if curve in chip.curves or efficiency is None or efficiency.attention is None:
        return chip.expected_flop_rate(curve, key, flops)
    return chip.dense_flop_per_s[key] * efficiency.attention


def _causal_pairs(context: int, window: int | None) -> float:
    """(query, key) pairs of causal attention over ``context`` tokens, halved as the house
    counts (s²/2); a window caps the keys of each query."""
    if window is None or context <= window:
        return context * context / 2
    return window * window / 2 + (context - window) * window


def serving(config: TransformerConfig, layout: KvLayout, chip: Hardware, *,
            count: int = 1, tp: int = 1, weights_dtype: str = "bf16", kv_dtype: str = "bf16",
            context: int | None = None, memory_utilization: float = 0.9,
            block_size: int = 16) -> Serving:
    """Serving capacity of ``config`` on ``count`` chips in groups of ``tp``.

    >>> from tensorledger.hardware import get_hardware
    >>> from tensorledger.napkin import get_preset, kv_layout
    >>> s = serving(get_preset("llama-3-8b"), kv_layout(get_preset("llama-3-8b")),
    ...             get_hardware("h100"))
    >>> s.row(1).bound, round(s.ridge_batch)
    ('memory', 295)
    """
    if not (isinstance(count, int) and isinstance(tp, int) and 1 <= tp <= count):
        raise InputError(f"--tp must be from 1 to --count ({count}), got {tp}")
    if count % tp:
        raise InputError(f"--count ({count}) must be a multiple of --tp ({tp}): each "
                         "tensor-parallel group is a replica")
    if config.n_heads % tp:
        raise InputError(f"--tp {tp} does not divide {config.name}'s {config.n_heads} heads")
    if not (math.isfinite(memory_utilization) and 0 < memory_utilization <= 1):
        raise InputError(f"--memory-utilization must be in (0, 1], got {memory_utilization!r}")
    if not 1 <= block_size <= MAX_CURVE_BATCH:
        raise InputError(f"--block-size must be from 1 to {MAX_CURVE_BATCH}, got {block_size}")
    ctx = config.context_length if context is None else context
    if ctx < 1:
        raise InputError(f"--context must be 1 or more tokens, got {ctx}")
    if config.positions == "learned" and ctx > config.context_length:
        raise InputError(f"--context {ctx} is longer than {config.name}'s table of "
                         f"{config.context_length} learned positions")
    fmt = resolve_weight_format(weights_dtype)
    cache: DType = resolve_cache_dtype(kv_dtype)
    weight_key = _chip_key(chip, fmt.compute, f"{fmt.name} weights")
    _chip_key(chip, cache.compute, f"a {cache.name} KV cache")
    act_key = _chip_key(chip, "bf16", "bf16 activations and attention")

    counts = parameter_count(config)
    params = counts.total_params
    # every weight of a matmul (the head also when tied): forward FLOPs / 2 outside attention
    matmul_params = (config.n_layers * (config.d_model * (config.q_dim + 2 * config.kv_dim)
                                        + config.q_dim * config.d_model
                                        + (2 if config.mlp == "gelu" else 3)
                                        * config.d_model * config.d_ff)
                     + config.vocab_size * config.d_model)
    bytes_per_param = fmt.bits_per_param / 8
    weights = params * bytes_per_param
    weights_chip = weights / tp
    # a tied head is the embedding table and is streamed; an untied model gathers its table
    gathered = counts.embeddings_params if not config.tied_embeddings else \
        counts.embeddings_params - config.vocab_size * config.d_model
    streamed_chip = (params - gathered) * bytes_per_param / tp

    usable = chip.memory_bytes * memory_utilization
    chunk = min(ctx, ACTIVATION_CHUNK_TOKENS)
    # the residual, Q/K/V and the MLP's hidden outputs of one layer for a prefill chunk, bf16
    widths = config.d_model + config.q_dim + 2 * config.kv_dim + \
        (2 if config.mlp == "swiglu" else 1) * config.d_ff
    reserve = chunk * widths * 2 / tp
    budget = usable - weights_chip - reserve
    if budget <= 0:
        raise InputError(
            f"{config.name}'s weights ({weights_chip / 1e9:.3g} GB a chip in {fmt.name}) and "
            f"activation reserve ({reserve / 1e9:.3g} GB) leave no room for a KV cache in "
            f"{memory_utilization:g} of one {chip.id}'s {chip.memory_bytes / 1e9:.3g} GB; give "
            "a larger --tp, a smaller --weights-dtype or a higher --memory-utilization")
    heads_chip = layout.n_kv_heads if layout.attention == "mla" else \
        -(-layout.n_kv_heads // tp)
    share = 1.0 if layout.attention == "mla" else heads_chip / layout.n_kv_heads
    seq_paged = -(-layout.sequence_bytes(ctx, cache, block_size) * heads_chip
                  // (layout.n_kv_heads if layout.attention != "mla" else heads_chip))
    seq_read = layout.sequence_bytes(ctx, cache) * share
    max_batch = int(budget // seq_paged)
    if max_batch < 1:
        raise InputError(
            f"a context of {ctx:,} tokens fits no batch: one sequence's KV cache needs "
            f"{seq_paged / 1e9:.4g} GB a chip ({cache.name}), the cache budget of one "
            f"{chip.id} is {budget / 1e9:.4g} GB; give a shorter --context, a smaller "
            "--kv-dtype or a larger --tp")

    peak = chip.dense_flop_per_s[weight_key]
    bandwidth = chip.memory_bandwidth_bytes_per_s
    expected_bw = chip.expected_bandwidth(streamed_chip)
    matmul_flops_token = 2 * matmul_params / tp
    attn_decode_token = sum(4 * config.q_dim * held for held in layout.cached_tokens(ctx)) / tp
    attn_prefill_prompt = sum(4 * config.q_dim * _causal_pairs(ctx, w)
                              for w in layout.layer_windows) / tp
    widest = (2 if config.mlp == "gelu" else 1) * config.d_ff  # the largest matmul's output

    def row(batch: int) -> ServeRow:
        mm_flops = batch * matmul_flops_token
        attn_flops = batch * attn_decode_token
        decode_bytes = streamed_chip + batch * seq_read
        memory_s = decode_bytes / chip.expected_bandwidth(decode_bytes)
        largest = 2 * batch * config.d_model * widest / tp
        compute_s = mm_flops / chip.expected_flop_rate(f"matmul.{weight_key}", weight_key,
                                                       largest) \
            + attn_flops / _attention_rate(chip, act_key, attn_flops)
        tpot = max(memory_s, compute_s)
        tokens = batch * ctx
        pf_mm = tokens * matmul_flops_token
        pf_attn = batch * attn_prefill_prompt
        pf_rate = chip.expected_flop_rate(f"matmul.{weight_key}", weight_key,
                                          2 * tokens * config.d_model * widest / tp)
        pf_compute = pf_mm / pf_rate + pf_attn / _attention_rate(chip, act_key, pf_attn)
        pf_bytes = streamed_chip + batch * seq_read
        ttft = max(pf_compute, pf_bytes / chip.expected_bandwidth(pf_bytes))
        return ServeRow(batch=batch, fits=batch <= max_batch, ttft_s=ttft,
                        decode_bytes=decode_bytes, decode_flops=mm_flops + attn_flops,
                        decode_memory_s=memory_s, decode_compute_s=compute_s, tpot_s=tpot,
                        bound="memory" if memory_s >= compute_s else "compute",
                        tokens_per_s_per_chip=batch / tpot / tp,
                        tokens_per_s_per_user=1 / tpot)

    ridge = streamed_chip * peak / (matmul_flops_token * bandwidth)
    per_seq_slack = (matmul_flops_token + attn_decode_token) * bandwidth / peak - seq_read
    ridge_ctx = streamed_chip / per_seq_slack if per_seq_slack > 0 else None
    reach = min(MAX_CURVE_BATCH, 2 * max(max_batch, math.ceil(ridge)))
    batches = sorted({*(1 << k for k in range(reach.bit_length()) if 1 << k <= reach),
                      min(max_batch, MAX_CURVE_BATCH)})
    rows = tuple(row(b) for b in batches)
    first = rows[0]
    steps = (
        Step("weights", f"{params:,} params × {fmt.bits_per_param:g} bits / 8 / tp {tp}",
             weights_chip, "bytes"),
        Step("usable memory", f"{chip.memory_bytes / 1e9:g} GB × {memory_utilization:g}",
             usable, "bytes"),
        Step("activation reserve", f"{chunk:,} tokens × {widths:,} × 2 B / tp (assumed)",
             reserve, "bytes"),
        Step("KV budget", "usable − weights − reserve", budget, "bytes"),
        Step("KV per sequence", f"{ctx:,} tokens in blocks of {block_size}, "
             f"{layout.attention}, {cache.name}", seq_paged, "bytes"),
        Step("largest batch", "⌊budget / KV per sequence⌋", max_batch, "sequences"),
        Step("decode bytes, batch 1", "streamed weights + one cache", first.decode_bytes,
             "bytes"),
        Step("time per output token, batch 1",
             f"bytes / ({bandwidth / 1e12:g} TB/s × "
             f"{chip.expected_bandwidth(first.decode_bytes) / bandwidth:g})",
             first.tpot_s, "s"),
        Step("ridge batch", f"streamed bytes × peak / (2·N_matmul × bandwidth); "
             f"{fmt.compute} peak {peak / 1e12:g} TFLOP/s", ridge, "sequences"),
    )
    notes = (
        f"weights: {fmt.description}",
        "left out: tensor-parallel communication, scheduling and sampling, the framework's own "
        "memory (CUDA context, graphs), a quantized format's error (the precision lab's "
        "`tensorledger quantize` measures it)",
        f"activation reserve assumed: one prefill chunk of {chunk:,} tokens through the widest "
        "layer (a serving engine profiles its own)",
    )
    return Serving(
        model=config.name, hardware=chip.id, attention=layout.attention, count=count, tp=tp,
        replicas=count // tp, weights_format=fmt.name, weights_description=fmt.description,
        kv_dtype=cache.name, context=ctx, memory_utilization=memory_utilization,
        block_size=block_size, params=params, matmul_params=matmul_params,
        weights_bytes=weights, weights_bytes_per_chip=weights_chip,
        streamed_weights_bytes_per_chip=streamed_chip, usable_bytes_per_chip=usable,
        activation_reserve_bytes=reserve, kv_budget_bytes_per_chip=budget,
        kv_bytes_per_token=layout.bytes_per_token(cache),
        kv_bytes_per_sequence_per_chip=seq_paged, max_batch=max_batch,
        max_sequences=max_batch * (count // tp), peak_flop_per_s=peak,
        bandwidth_bytes_per_s=bandwidth, expected_bandwidth_bytes_per_s=expected_bw,
        ridge_batch=ridge, ridge_batch_at_context=ridge_ctx, rows=rows, steps=steps,
        notes=notes)
