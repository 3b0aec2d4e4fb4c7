"""Context parallelism in closed form: what one rank of torch's ring attention sends and
keeps, with no torch import.

Torch's ``context_parallel`` (all-gather rotation, the default, and its head-tail load
balancer; see :mod:`tensorledger.workload.context_parallel`) gives each of the ``cp`` ranks
s/cp tokens of every sequence.  Per layer, with b the batch, h_x the key/value heads a rank
exchanges (its kv heads, n_kv/tp; the query heads n_heads/tp when the kernel repeats keys and
values to the query heads first, as memory-efficient attention does), d the head size, a the
bytes of q, k, v (2 under bf16 autocast) and s_r = s/cp:

- forward: one all-gather of the rank's keys and values, a buffer of K = 2·b·h_x·s_r·d·a
  bytes: the rank sends K to each of the cp − 1 others (ring convention: (cp − 1)·K);
- backward: the same all-gather again ((cp − 1)·K), and the gradients of keys and values,
  accumulated in fp32 (G = 2·b·h_x·s_r·d·4), passed to the next rank cp times (an all-to-all
  permutation per ring step, the whole buffer each time): cp·G.

Attention FLOPs per rank, causal-halved, are exactly 1/cp of the whole sequence's: the first
block is causal on the rank's two chunks of c = s/(2·cp) tokens (2c × 2c, half counted), each
of the cp − 1 others unmasked c × 2c: cp blocks of 8·b·h·c²·d FLOPs = 2·b·h·s²·d/cp.

Saved activations per rank: :func:`~tensorledger.napkin.activations.activation_memory` at
s/cp tokens, plus two terms the ring adds (found by comparing traced ranks storage by
storage with a single device at s/cp):

- the merged attention output is contiguous by heads (b, h, s, d), so the output
  projection's (b, s, h·d) input is a copy, saved beside it: n_r·(q_dim/tp)·a per layer;
- ``context_parallel`` cuts the targets in place (``resize_``), which keeps their storage
  whole: the loss keeps 8·b·s bytes of targets, not 8·b·s/cp.

>>> from tensorledger.napkin.transformer import get_preset
>>> ring = context_parallel_rank(get_preset("tiny"), batch=2, seq_len=128, cp=2, dtype_bytes=4)
>>> ring.kv_buffer_bytes            # 2·2·2·64·16·4
32768
>>> ring.sent_bytes                 # 2 layers · (2·1·32,768 + 2·32,768)
262144
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.napkin.activations import ActivationMemory, activation_memory
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["ContextParallelRank", "context_parallel_rank"]

_GRAD_BYTES = 4  # torch's ring accumulates the key/value gradients in fp32
_INDEX_BYTES = 8


@dataclass(frozen=True)
class ContextParallelRank:
    """One context-parallel rank of a Transformer layer stack: bytes sent, FLOPs, memory."""

    cp: int
    tokens_per_rank: int  # b·s/cp
    exchanged_heads: int  # h_x
    kv_buffer_bytes: int  # K: a rank's keys and values, one layer
    grad_buffer_bytes: int  # G: their fp32 gradients
    forward_sent_bytes: int  # all layers
    backward_sent_bytes: int
    sent_bytes: int  # per step
    attention_flops: int  # forward, causal-halved, this rank
    activations: ActivationMemory  # activation_memory at s/cp
    ring_copy_bytes: int  # the merged outputs' copies, all layers
    targets_kept_bytes: int  # the targets' whole storage beyond their s/cp share
    saved_activation_bytes: int  # activations + the two terms above


def context_parallel_rank(config: TransformerConfig, batch: int, seq_len: int, cp: int,
                          dtype_bytes: int = 2, tp: int = 1, autocast: bool = False,
                          repeated_kv: bool = False, checkpointed: bool = False,
                          sequence_parallel: bool = False) -> ContextParallelRank:
    """Rank r's share of a step under ``cp``-way context parallelism (and ``tp``-way tensor
    parallelism, heads split); ``repeated_kv`` when the attention kernel repeats grouped
    keys and values to the query heads before the ring sees them (memory-efficient
    attention does).  With ``checkpointed`` blocks a layer keeps only its input: no copy of
    the merged output is saved (the recomputation's is a temporary)."""
    for name, value in (("batch", batch), ("seq_len", seq_len), ("cp", cp), ("tp", tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a whole number >= 1, got {value!r}")
    if seq_len % (2 * cp):
        raise InputError(f"context parallelism of {cp} cuts the sequence into {2 * cp} "
                         f"chunks; {seq_len} does not divide by {2 * cp}")
    s_r = seq_len // cp
    heads = (config.n_heads if repeated_kv else config.n_kv_heads) // tp
    d = config.head_dim
    layers = config.n_layers
    kv = 2 * batch * heads * s_r * d * dtype_bytes
    grad = 2 * batch * heads * s_r * d * _GRAD_BYTES
    forward = layers * (cp - 1) * kv
    backward = layers * ((cp - 1) * kv + cp * grad)
    c = seq_len // (2 * cp)
    attention = layers * cp * 8 * batch * (config.n_heads // tp) * c * c * d
    acts = activation_memory(config, batch, s_r, dtype_bytes, checkpointed, tp=tp,
                             sequence_parallel=sequence_parallel, autocast=autocast)
    tokens = batch * s_r
    copied = cp > 1 and not checkpointed
    copies = layers * tokens * (config.q_dim // tp) * dtype_bytes if copied else 0
    targets = _INDEX_BYTES * batch * (seq_len - s_r)
    return ContextParallelRank(cp=cp, tokens_per_rank=tokens, exchanged_heads=heads,
                               kv_buffer_bytes=kv, grad_buffer_bytes=grad,
                               forward_sent_bytes=forward, backward_sent_bytes=backward,
                               sent_bytes=forward + backward, attention_flops=attention,
                               activations=acts, ring_copy_bytes=copies,
                               targets_kept_bytes=targets,
                               saved_activation_bytes=acts.total_bytes + copies + targets)
