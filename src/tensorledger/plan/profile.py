"""A model's per-block profile: what the planner needs of a model, measured rather than written.

The planner's closed form knows the reference Transformer only.  A :class:`ModelProfile` holds
the same figures for any model (a preset, a ``config.json`` of any architecture, a factory),
each measured from a trace of the real module on fake tensors at one and at two blocks
(:func:`tensorledger.ledger.profile.measure_profile`): per block = the difference, the rest =
one block's trace less a block, and ``n_layers`` blocks = the rest + n_layers · per block.
Each figure that tensor parallelism splits is measured at one rank and at two
(:class:`Split`: whole + split / t, the whole part kept on every rank).

Torch-free: the planner reads a profile as it reads a preset's closed form, tens of thousands
of layouts a second.

>>> Split(whole=10.0, split=64.0).at(4)
26.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorledger.napkin.activations import ActivationMemory

__all__ = ["INDEX_BYTES", "ModelProfile", "Split", "profile_activations", "tp_collectives"]

#: int64 token ids: the bytes a token's input holds (the closed form lists them with the
#: embedding; the traced ledger counts them as an input)
INDEX_BYTES = 8


@dataclass(frozen=True)
class Split:
    """A per-rank figure under tensor parallelism over t ranks: ``whole + split / t``; measured
    at t = 1 (``whole + split``) and t = 2 (``whole + split / 2``)."""

    whole: float
    split: float = 0.0

    def at(self, tp: int) -> float:
        return self.whole + self.split / tp

    @staticmethod
    def measured(one: float, two: float | None) -> Split:
        """From a figure at one rank and at two (None: nothing splits).

        >>> Split.measured(100.0, 60.0)     # split = 2·(100 − 60) = 80, whole = 20
        Split(whole=20.0, split=80.0)
        """
        if two is None:
            return Split(float(one))
        split = 2.0 * (one - two)
        return Split(float(one) - split, split)


@dataclass(frozen=True)
class ModelProfile:
    """What one block, the embedding and the head of a model cost, per token where it scales
    with tokens, at one sequence length and precision recipe.

    Parameters are counts (``embedding``, ``block``, ``head``: the head with the final norm,
    nothing when it is tied to the embedding); FLOPs per token are causal-halved (the
    closed form's convention) for training (forward and backward) and forward alone (what a
    full recomputation runs again); saved bytes per token are keyed by (sequence parallel,
    checkpointed).  The communication a tensor-parallel rank sends is measured at t = 2
    per token and block (``tp_sent_per_token``) with the collectives that carry it
    (``tp_collectives``): at t ranks the ring sends 2·(t−1)/t of it."""

    name: str
    source: str  # how it was measured, for the plan's assumptions
    seq_len: int
    precision: str
    n_layers: int
    d_model: int  # the residual stream's width: a pipeline stage sends it per token
    vocab_size: int  # the logits' width (the loss's temporaries)
    context_length: int  # the longest sequence it takes (a large number where unbounded)
    embedding: Split
    block: Split
    head: Split
    block_flops_per_token: float
    other_flops_per_token: float  # the embedding, the head and the loss
    block_forward_flops_per_token: float
    other_forward_flops_per_token: float
    largest_matmul_flops_per_token: float  # one block's largest matmul, forward, one rank
    #: saved bytes per token and block, by (sequence parallel, checkpointed)
    block_saved: dict[tuple[bool, bool], Split] = field(default_factory=dict)
    #: saved bytes per token outside the blocks (the final norm, the loss), by sequence parallel
    other_saved: dict[bool, Split] = field(default_factory=dict)
    #: bytes a rank of two sends per token and block, by (sequence parallel, checkpointed)
    tp_sent_per_token: dict[tuple[bool, bool], float] = field(default_factory=dict)
    tp_collectives: dict[tuple[bool, bool], float] = field(default_factory=dict)  # per block
    other_tp_sent_per_token: dict[bool, float] = field(default_factory=dict)
    #: a factory's forward's most temporaries per token (its own loss's logits and their kin),
    #: by sequence parallel; empty for a language model whose logits are priced from
    #: ``vocab_size`` as the closed form prices them
    loss_temporaries: dict[bool, Split] = field(default_factory=dict)
    #: the sizes tensor parallelism must divide, as (what, size); () where it cannot split
    tp_sizes: tuple[tuple[str, int], ...] = ()
    tensor_parallel: bool = False  # the model has a tensor-parallel plan
    sequence_parallel: bool = False  # ... and a sequence-parallel one
    checkpoints: tuple[str, ...] = ("none",)  # the checkpoint policies it was traced under
    whole: bool = False  # profiled as built (a factory): one part, one FSDP unit
    notes: tuple[str, ...] = ()

    @property
    def n_heads(self) -> int:
        """Heads, where known (eager attention's s² scores need them): 0 otherwise."""
        return dict(self.tp_sizes).get("attention heads", 0)

    def tp_indivisible(self, tp: int) -> tuple[str, int] | None:
        """The first size ``tp`` does not divide, as (what, size); ("tensor-parallel plan",
        0) for a model that has none.

        >>> _example().tp_indivisible(2)
        ('tensor-parallel plan', 0)
        """
        if tp == 1:
            return None
        if not self.tensor_parallel:
            return "tensor-parallel plan", 0
        for what, size in self.tp_sizes:
            if size % tp:
                return what, size
        return None

    def params(self) -> int:
        """The whole model's parameters.

        >>> p = _example()
        >>> p.params()   # 1,000 + 4 · 300 + 500
        2700
        """
        return round(self.embedding.at(1) + self.n_layers * self.block.at(1)
                     + self.head.at(1))

    def flops_per_token(self) -> float:
        return self.n_layers * self.block_flops_per_token + self.other_flops_per_token

    def forward_flops_per_token(self) -> float:
        return self.n_layers * self.block_forward_flops_per_token \
            + self.other_forward_flops_per_token


def _example() -> ModelProfile:
    return ModelProfile(name="example", source="by hand", seq_len=16, precision="fp32",
                        n_layers=4, d_model=8, vocab_size=100, context_length=16,
                        embedding=Split(0.0, 1000.0), block=Split(20.0, 280.0),
                        head=Split(500.0), block_flops_per_token=1800.0,
                        other_flops_per_token=3000.0, block_forward_flops_per_token=600.0,
                        other_forward_flops_per_token=1000.0,
                        largest_matmul_flops_per_token=200.0,
                        tp_sent_per_token={(False, False): 512.0},
                        tp_collectives={(False, False): 4.0})


def profile_activations(profile: ModelProfile, micro_batch: int, seq_len: int, tp: int,
                        sp: bool, checkpointed: bool, dtype_bytes: int, autocast: bool
                        ) -> ActivationMemory:
    """The closed form's :class:`ActivationMemory` of one micro-batch on one rank, from the
    profile's bytes per token (the token ids, 8 bytes a token, with the embedding; the
    final norm's and the loss's bytes together as the loss's)."""
    tokens = micro_batch * seq_len
    per_layer = round(tokens * profile.block_saved[(sp, checkpointed)].at(tp))
    loss = round(tokens * profile.other_saved[sp].at(tp))
    embedding = INDEX_BYTES * tokens
    return ActivationMemory(
        model=profile.name, batch=micro_batch, seq_len=seq_len, dtype_bytes=dtype_bytes,
        checkpointed=checkpointed, norms_bytes_per_layer=0, attention_bytes_per_layer=0,
        mlp_bytes_per_layer=0, per_layer_bytes=per_layer,
        layers_bytes=per_layer * profile.n_layers, embeddings_bytes=embedding,
        final_norm_bytes=0, loss_bytes=loss,
        total_bytes=per_layer * profile.n_layers + embedding + loss,
        korthikanti_layer_bytes=0, autocast=autocast)


def tp_collectives(profile: ModelProfile, sp: bool, checkpointed: bool, tokens: int
                   ) -> tuple[float, float]:
    """(collectives, bytes each) a block's tensor-parallel communication is priced as: the
    measured collectives of a block, each carrying an equal share of what a rank of two sent
    (an all-reduce of P sends P at two ranks; under sequence parallelism an all-gather and a
    reduce-scatter of P send P/2 each, so a pair is priced as one collective of P).

    >>> p = _example()
    >>> tp_collectives(p, False, False, 10)   # 4 all-reduces of 512·10 / 4 bytes
    (4.0, 1280.0)
    """
    key = (sp, checkpointed)
    calls = profile.tp_collectives.get(key, 0.0)
    if not calls:
        return 0.0, 0.0
    pairs = calls / 2 if sp else calls
    return pairs, profile.tp_sent_per_token[key] * tokens / pairs
