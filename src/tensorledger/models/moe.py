"""A mixture of experts in place of a block's MLP: a router, E routed SwiGLU experts stored
stacked, and the shared experts, built from a :class:`~tensorledger.napkin.moe.MoEConfig`.

Named dimensions: ``t`` tokens (batch · seq), ``e`` experts, ``k`` experts per token, ``n``
token-slots (t · k), ``c`` one expert's capacity, ``d`` d_model, ``f`` an expert's width.

- :class:`Router`: logits (t, e) by a d × E matrix; scores by softmax (Mixtral, Qwen) or a
  sigmoid (DeepSeek-V3); ``torch.topk`` of the scores (plus the expert bias, which chooses
  but does not weigh) picks k experts a token.  A fake step's routing is stated, not guessed:
  :class:`tensorledger.workload.routed.RoutedMode` answers exactly this ``topk`` — its last
  dimension E, its k the config's — with the routing's token-slots per expert.
- :class:`RoutedExperts`: weights ``gate`` and ``up`` (E, d, f), ``down`` (E, f, d), so an
  expert-parallel layout shards dim 0.  Dropless, the token-slots are sorted by expert and run
  as one ``torch._grouped_mm`` per matrix (``grouped``) or one matmul per expert over
  ``split`` sizes (``loop``); with a capacity factor they fill an (E, C, d) buffer, the slots
  past an expert's capacity dropped, which runs as one ``bmm`` per matrix or a matmul per
  expert.  Both paths multiply the same rows: their FLOPs agree, and equal
  :func:`tensorledger.napkin.moe.moe_layer_flops`.
- The load-balancing loss α · E · Σ_e f_e · P_e (f_e the share of token-slots expert e
  receives, P_e its mean score) joins the step's loss through :func:`with_aux_loss`, which
  passes the hidden state on unchanged and gives the loss a gradient of 1 in backward, so the
  model's output stays its logits.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from tensorledger.napkin.moe import MoEConfig
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["MoE", "RoutedExperts", "Router", "SharedExperts", "with_aux_loss"]

#: torch._grouped_mm exists from torch 2.8; before it the grouped path runs the loop.
_GROUPED_MM = hasattr(torch, "_grouped_mm")


class _AuxLoss(torch.autograd.Function):
    """x ↦ x in forward; in backward x's gradient as given and 1 for the loss."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        ctx.loss_dtype = loss.dtype
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad.new_ones((), dtype=ctx.loss_dtype)


def with_aux_loss(x: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
    """``x``, with ``loss`` (a scalar) added to whatever loss is later taken of it.

    >>> x = torch.ones(2, requires_grad=True); w = torch.ones(1, requires_grad=True)
    >>> with_aux_loss(x, 3 * w.sum()).sum().backward()
    >>> x.grad.tolist(), w.grad.tolist()
    ([1.0, 1.0], [3.0])
    """
    return cast(torch.Tensor, _AuxLoss.apply(x, loss))  # type: ignore[no-untyped-call]


class Router(nn.Module):
    """Tokens (t, d) → the k experts each runs (t, k), their weights (t, k), every score (t, e).
    """

    def __init__(self, d_model: int, moe: MoEConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.moe = moe
        self.proj = nn.Linear(d_model, moe.n_experts, bias=False, dtype=dtype)
        if moe.expert_bias:
            # chooses, never weighs; moved by the load after each step, not by a gradient
            self.register_buffer("expert_bias", torch.zeros(moe.n_experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        moe = self.moe
        logits = self.proj(x).float()
        scores = logits.softmax(dim=-1) if moe.router == "softmax" else logits.sigmoid()
        choice = scores + self.expert_bias if moe.expert_bias else scores
        _, experts = torch.topk(choice, moe.top_k, dim=-1)
        weights = scores.gather(-1, experts)
        if moe.norm_topk and moe.top_k > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if moe.routed_scale != 1.0:
            weights = weights * moe.routed_scale
        return experts, weights, scores


class RoutedExperts(nn.Module):
    """E SwiGLU experts, their matrices stacked on a first dimension of E."""

    def __init__(self, d_model: int, moe: MoEConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.moe = moe
        e, d, f = moe.n_experts, d_model, moe.d_expert
        self.gate = nn.Parameter(torch.empty(e, d, f, dtype=dtype))
        self.up = nn.Parameter(torch.empty(e, d, f, dtype=dtype))
        self.down = nn.Parameter(torch.empty(e, f, d, dtype=dtype))
        for weight in (self.gate, self.up, self.down):
            nn.init.normal_(weight, mean=0.0, std=0.02)

    def forward(self, x: torch.Tensor, counts: torch.Tensor | None = None) -> torch.Tensor:
        """Token-slots (n, d) sorted by expert with ``counts`` (e,) of them each → (n, d);
        or, without counts, an (e, c, d) buffer of each expert's slots padded to its
        capacity → (e, c, d)."""
        if counts is None:
            return self._padded(x)
        if self.moe.experts_impl == "loop" or not _GROUPED_MM:
            sizes = [int(c) for c in counts.tolist()]
            chunks = torch.split(x, sizes)
            outs = [self._one(chunk, e) for e, chunk in enumerate(chunks)]
            return torch.cat(outs)
        offs = counts.cumsum(0).to(torch.int32)
        gate, up, down, x = _same_dtype(self.gate, self.up, self.down, x)
        hidden = (F.silu(torch._grouped_mm(x, gate, offs=offs))
                  * torch._grouped_mm(x, up, offs=offs))
        return torch._grouped_mm(hidden, down, offs=offs)

    def _padded(self, buffer: torch.Tensor) -> torch.Tensor:
        if self.moe.experts_impl == "loop":
            return torch.stack([self._one(buffer[e], e) for e in range(buffer.shape[0])])
        hidden = F.silu(torch.bmm(buffer, self.gate)) * torch.bmm(buffer, self.up)
        return torch.bmm(hidden, self.down)

    def _one(self, x: torch.Tensor, e: int) -> torch.Tensor:
        return (F.silu(x @ self.gate[e]) * (x @ self.up[e])) @ self.down[e]


def _same_dtype(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """The grouped kernel takes one dtype: autocast's where it is on (it has no autocast rule
    of its own, pytorch/pytorch#174763), else the weights'."""
    device = tensors[0].device.type
    autocast = device != "meta" and torch.is_autocast_enabled(device)  # none on meta
    dtype = torch.get_autocast_dtype(device) if autocast else tensors[0].dtype
    return [t.to(dtype) for t in tensors]


class SharedExperts(nn.Module):
    """The S shared experts every token runs, as one SwiGLU of S · d_shared."""

    def __init__(self, d_model: int, width: int, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, width, bias=False, dtype=dtype)
        self.up = nn.Linear(d_model, width, bias=False, dtype=dtype)
        self.down = nn.Linear(width, d_model, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.down(F.silu(self.gate(x)) * self.up(x)))


class MoE(nn.Module):
    """(b, s, d) → (b, s, d): each token through its k routed experts, weighted, plus the
    shared experts.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> layer = MoE(get_preset("tiny-moe"))
    >>> tuple(layer(torch.randn(2, 5, 64)).shape)
    (2, 5, 64)
    """

    def __init__(self, config: TransformerConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        assert config.moe is not None
        moe = self.moe = config.moe
        self.router = Router(config.d_model, moe, dtype)
        self.experts = RoutedExperts(config.d_model, moe, dtype)
        self.shared = (SharedExperts(config.d_model, moe.n_shared * moe.d_shared, dtype)
                       if moe.n_shared else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        moe = self.moe
        batch = x.shape[0]
        tokens = rearrange(x, "b s d -> (b s) d")
        chosen, weights, scores = self.router(tokens)
        flat = rearrange(chosen, "t k -> (t k)")
        order = torch.argsort(flat, stable=True)  # token-slots grouped by expert
        counts = torch.bincount(flat, minlength=moe.n_experts)
        slot_token = order // moe.top_k
        slot_weight = rearrange(weights, "t k -> (t k)")[order]
        routed_in = tokens[slot_token]
        if moe.dropless:
            routed_out = self.experts(routed_in, counts)
        else:
            routed_out = self._with_capacity(routed_in, flat[order], counts)
        weighted = routed_out * slot_weight.unsqueeze(-1).to(routed_out.dtype)
        out = tokens.new_zeros(tokens.shape, dtype=weighted.dtype).index_add(
            0, slot_token, weighted)
        if self.shared is not None:
            out = out + self.shared(tokens)
        out = rearrange(out, "(b s) d -> b s d", b=batch)
        if self.training and moe.bias_update_rate:
            self._update_bias(counts)
        if moe.aux_loss_coef:
            out = with_aux_loss(out, self._balance_loss(counts, scores))
        return out

    def _with_capacity(self, slots: torch.Tensor, experts: torch.Tensor,
                       counts: torch.Tensor) -> torch.Tensor:
        """Slots (n, d) sorted by expert → their outputs, 0 for those past the capacity."""
        moe = self.moe
        n, d = slots.shape
        capacity = moe.capacity(n // moe.top_k)
        first = counts.cumsum(0) - counts  # each expert's first slot in the sorted order
        position = torch.arange(n, device=slots.device) - first[experts]
        # a dropped slot goes to one spare row past the buffer, cut off before the experts
        spare = moe.n_experts * capacity
        row = torch.where(position < capacity, experts * capacity + position, spare)
        buffer = slots.new_zeros(spare + 1, d).index_add(0, row, slots)
        padded = rearrange(buffer[:spare], "(e c) d -> e c d", c=capacity)
        out = self.experts(padded)
        out = torch.cat([rearrange(out, "e c d -> (e c) d"), out.new_zeros(1, d)])
        return out[row]

    def _balance_loss(self, counts: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """α · E · Σ_e f_e · P_e (Switch Transformer, eq. 4): f_e the share of token-slots
        expert e receives, P_e its mean routing probability (sigmoid scores normalised)."""
        moe = self.moe
        share = counts.float() / counts.sum()
        probs = scores if moe.router == "softmax" else scores / scores.sum(-1, keepdim=True)
        return moe.aux_loss_coef * moe.n_experts * (share * probs.mean(0)).sum()

    @torch.no_grad()
    def _update_bias(self, counts: torch.Tensor) -> None:
        """DeepSeek-V3's auxiliary-loss-free balancing: an overloaded expert's bias down by γ,
        an underloaded one's up."""
        load = counts.float()
        bias = cast(torch.Tensor, self.router.expert_bias)
        bias.add_(self.moe.bias_update_rate * (load.mean() - load).sign())
