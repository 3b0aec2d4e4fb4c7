"""Which experts a mixture of experts' tokens go to, fixed before the step runs.

On fake or meta tensors a router's scores have no values, so the tokens each expert receives
would be a guess; here they are a stated assumption instead (``--routing``):

- ``balanced`` (the default): every expert receives tokens · k / E token-slots (the
  remainder of an uneven division one more apiece to the first experts);
- ``skew=S`` (S ≥ 0): the first expert receives (1 + S) times the balanced share, the others
  share the rest evenly — S is the load imbalance max/mean − 1 that sizes a capacity factor;
- a JSON file holding a list of E whole numbers (``[30, 10, 4, 4]``): the token-slots each
  expert receives in the step, summing to tokens · k (batch · seq · experts per token).

No expert can receive a token twice (a token's k choices differ), so no count may exceed the
tokens.  A router that runs on fewer or more tokens than the step's (a pipeline's microbatch)
receives the same shares, rounded by largest remainder.  Every layer is routed alike.

Nothing here imports torch.

>>> r = resolve_routing("skew=0.5")
>>> r.counts(tokens=12, experts=4, chosen=2)
(9, 5, 5, 5)
>>> r.describe(tokens=12, experts=4, chosen=2)[:49]
'skew 0.5: expert 0 gets 1.5× the balanced share; '
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorledger.errors import ConfigError, InputError
from tensorledger.workload.source import ModelSource

__all__ = ["BALANCED", "MAX_EXPERTS", "Routing", "resolve_routing", "routing"]

#: The most experts a routing histogram may list: far past any model in use (DeepSeek-V3 256).
MAX_EXPERTS = 1 << 16
#: The largest routing file read.
_MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Routing:
    """The share of a step's token-slots each routed expert receives.

    ``kind`` is ``balanced``, ``skew`` or ``histogram``; ``histogram`` holds the counts a user
    gave (``source`` the file), ``skew`` the imbalance figure."""

    kind: str = "balanced"
    skew: float = 0.0
    histogram: tuple[int, ...] = ()
    source: str = ""

    def counts(self, tokens: int, experts: int, chosen: int) -> tuple[int, ...]:
        """Token-slots per expert when ``tokens`` tokens each choose ``chosen`` of ``experts``:
        whole numbers summing to tokens · chosen, none above ``tokens``.

        >>> BALANCED.counts(tokens=5, experts=4, chosen=2)   # 10 slots: 3, 3, 2, 2
        (3, 3, 2, 2)
        """
        slots = tokens * chosen
        if self.kind == "histogram" and len(self.histogram) == experts:
            if sum(self.histogram) == slots:
                return self.histogram
            return _largest_remainder([c / sum(self.histogram) for c in self.histogram], slots,
                                      tokens)
        if self.kind == "skew" and experts > 1:
            first = min(tokens, round((1 + self.skew) * slots / experts))
            rest = _even(slots - first, experts - 1)
            return (first, *rest)
        return _even(slots, experts)

    def check(self, tokens: int, experts: int, chosen: int) -> None:
        """Refuse a routing the model cannot run (``tokens`` = batch · seq of the step)."""
        slots = tokens * chosen
        what = f"{tokens:,} tokens × top-{chosen} of {experts} experts"
        if self.kind == "histogram":
            if len(self.histogram) != experts:
                raise InputError(f"--routing {self.source} lists {len(self.histogram)} experts; "
                                 f"the model routes to {experts}: give one count per expert")
            if sum(self.histogram) != slots:
                raise InputError(f"--routing {self.source} sums to {sum(self.histogram):,} "
                                 f"token-slots; {what} is {slots:,}")
            busiest = max(self.histogram)
            if busiest > tokens:
                raise InputError(f"--routing {self.source} gives an expert {busiest:,} "
                                 f"token-slots, more than the {tokens:,} tokens (a token "
                                 "chooses an expert at most once)")
        elif self.kind == "skew":
            share = (1 + self.skew) * chosen / experts
            if share > 1:
                most = experts / chosen - 1
                raise InputError(f"--routing skew={self.skew:g} gives expert 0 "
                                 f"{share:.0%} of the tokens, but a token chooses an expert at "
                                 f"most once; with top-{chosen} of {experts} experts the skew "
                                 f"is at most {most:g}")

    def describe(self, tokens: int, experts: int, chosen: int) -> str:
        """The assumption in words, with the counts it gives."""
        counts = self.counts(tokens, experts, chosen)
        shown = ", ".join(f"{c:,}" for c in counts[:8]) + (", …" if len(counts) > 8 else "")
        tail = f"token-slots per expert {shown} ({tokens:,} tokens × top-{chosen} of {experts})"
        if self.kind == "histogram":
            return f"histogram from {self.source}: {tail}"
        if self.kind == "skew":
            return (f"skew {self.skew:g}: expert 0 gets {1 + self.skew:g}× the balanced share; "
                    f"{tail}")
        return f"balanced (tokens · k / E each): {tail}"


#: Every expert the same share: the default.
BALANCED = Routing()


def _even(slots: int, experts: int) -> tuple[int, ...]:
    share, extra = divmod(slots, experts)
    return tuple(share + (1 if e < extra else 0) for e in range(experts))


def _largest_remainder(shares: list[float], slots: int, cap: int) -> tuple[int, ...]:
    exact = [s * slots for s in shares]
    counts = [min(cap, math.floor(x)) for x in exact]
    order = sorted(range(len(shares)), key=lambda e: counts[e] - exact[e])
    for e in order:
        if sum(counts) >= slots:
            break
        if counts[e] < cap:
            counts[e] += 1
    return tuple(counts)


def resolve_routing(text: str | None) -> Routing:
    """``--routing`` checked: ``balanced``, ``skew=S`` or the path of a JSON list of counts.

    >>> resolve_routing("skew=-1")
    Traceback (most recent call last):
    ...
    tensorledger.errors.InputError: --routing skew=S takes a number S ≥ 0 (0 is balanced), got '-1'
    """
    if text is None or text.strip().lower() in ("", "balanced"):
        return BALANCED
    key = text.strip()
    if key.lower().startswith("skew="):
        figure = key.split("=", 1)[1].strip()
        try:
            skew = float(figure)
        except ValueError:
            skew = -1.0
        if not math.isfinite(skew) or skew < 0:
            raise InputError(f"--routing skew=S takes a number S ≥ 0 (0 is balanced), "
                             f"got {figure!r}")
        return BALANCED if skew == 0 else Routing(kind="skew", skew=skew)
    return Routing(kind="histogram", histogram=_read_histogram(key), source=key)


def _read_histogram(path: str) -> tuple[int, ...]:
    from tensorledger.files import parse_json_text, read_text_file

    try:
        text = read_text_file(path, what="routing histogram", max_bytes=_MAX_FILE_BYTES)
    except ConfigError as error:
        raise InputError(f"--routing takes balanced, skew=S or a JSON file of counts per "
                         f"expert: {error}") from None
    raw = parse_json_text(text, where=path)
    if (not isinstance(raw, list) or not raw
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in raw)):
        raise InputError(f"--routing {path}: a routing file holds a JSON list of whole numbers "
                         "≥ 0, the token-slots each expert receives ([30, 10, 4, 4])")
    if len(raw) > MAX_EXPERTS:
        raise InputError(f"--routing {path} lists {len(raw):,} experts; at most "
                         f"{MAX_EXPERTS:,}")
    if sum(raw) == 0:
        raise InputError(f"--routing {path}: every count is 0; the tokens must go somewhere")
    return tuple(int(c) for c in raw)


_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_CHOSEN = ("num_experts_per_tok", "moe_topk", "top_k")


def routing(source: ModelSource) -> tuple[int, int] | None:
    """(routed experts, experts per token) of a mixture of experts — a reference preset's
    config or a config.json's fields —, else None.

    >>> from tensorledger.workload.source import ModelSource
    >>> routing(ModelSource("m", "config", "transformers", "m", hf_config={
    ...     "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}))
    (8, 2)
    """
    moe = source.config.moe if source.config is not None else None
    if moe is not None and source.builder == "reference":  # a reference MoE preset or config
        return moe.n_experts, moe.top_k
    raw = source.hf_config or {}
    experts = next((raw[k] for k in _EXPERTS if isinstance(raw.get(k), int)), None)
    chosen = next((raw[k] for k in _CHOSEN if isinstance(raw.get(k), int)), None)
    if experts is None or chosen is None or not 0 < chosen <= experts or experts < 2:
        return None
    return int(experts), int(chosen)
