"""Terminal views of the model presets and of a model's closed-form counts."""

from __future__ import annotations

from rich import box
from rich.console import RenderableType
from rich.table import Table

from tensorledger.napkin.transformer import (
    ForwardFlops,
    ModelParams,
    ParameterCount,
    PresetSummary,
    TransformerConfig,
)
from tensorledger.units import format_count, format_sci

__all__ = ["model_detail_view", "model_params_note", "presets_view"]

View = list[RenderableType | str]


def _attention_kind(config: TransformerConfig) -> str:
    if config.mla is not None:
        return f"MLA {config.n_heads}"
    if config.n_kv_heads == config.n_heads:
        return f"MHA {config.n_heads}"
    if config.n_kv_heads == 1:
        return f"MQA {config.n_heads}/1"
    return f"GQA {config.n_heads}/{config.n_kv_heads}"


def presets_view(summaries: tuple[PresetSummary, ...]) -> View:
    table = Table(title="Model presets", title_justify="left", header_style="bold",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for column, justify in (("name", "left"), ("params", "right"), ("active", "right"),
                            ("layers", "right"), ("d_model", "right"), ("heads", "left"),
                            ("mlp", "left"), ("norm", "left"), ("pos", "left"),
                            ("head", "left"), ("vocab", "right"), ("context", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in summaries:
        c = row.config
        active = row.params.active_params
        table.add_row(row.name, format_count(row.params.total_params),
                      "" if active is None else format_count(active), str(c.n_layers),
                      str(c.d_model),
                      _attention_kind(c), _mlp_kind(c), c.norm, c.positions,
                      "tied" if c.tied_embeddings else "untied", str(c.vocab_size),
                      str(c.context_length))
    return [table, "params: closed-form total, embeddings and head included "
                   "(`tensorledger models NAME` shows exact counts by part); active: what a "
                   "token runs of a mixture of experts (k of E routed experts, shared ones "
                   "always)"]


def _mlp_kind(config: TransformerConfig) -> str:
    moe = config.moe
    if moe is None:
        return f"{config.mlp} {config.d_ff}"
    shared = f"+{moe.n_shared}" if moe.n_shared else ""
    return f"moe {moe.top_k}/{moe.n_experts}{shared}×{moe.d_expert}"


def _parts_table(count: ParameterCount) -> Table:
    table = Table(title=f"Parameters of {count.model}", title_justify="left",
                  header_style="bold")
    for column in ("part", "params", "share"):
        table.add_column(column, justify="left" if column == "part" else "right")
    shares = count.shares()
    for part, params in count.parts().items():
        table.add_row(part, f"{params:,}", f"{shares[part]:.1%}")
    table.add_row("total", f"{count.total_params:,}", "100.0%", style="bold")
    if count.active_params is not None:
        table.add_row("active per token", f"{count.active_params:,}",
                      f"{count.active_share:.1%}")
    return table


def _flops_table(full: ForwardFlops, causal: ForwardFlops) -> Table:
    table = Table(title=f"Forward matmul FLOPs per token at seq_len {full.seq_len:,}",
                  title_justify="left", header_style="bold")
    table.add_column("part")
    table.add_column(full.convention, justify="right")
    table.add_column(causal.convention, justify="right")
    rows = (("embeddings (lookup)", "embeddings_flops"),
            ("attention projections", "attention_projections_flops"),
            ("attention scores Q·Kᵀ", "attention_scores_flops"),
            ("attention softmax·V", "attention_values_flops"),
            ("mlp", "mlp_flops"), ("norms (not matmuls)", "norms_flops"),
            ("head", "head_flops"), ("total", "total_flops"))
    for label, key in rows:
        table.add_row(label, format_sci(getattr(full, key)), format_sci(getattr(causal, key)))
    return table


def model_detail_view(config: TransformerConfig, count: ParameterCount, full: ForwardFlops,
                      causal: ForwardFlops) -> View:
    view: View = [
        _parts_table(count),
        _flops_table(full, causal),
        f"{config.name}: {config.n_layers} layers, d_model {config.d_model}, "
        f"{_attention_kind(config)} heads of {config.head_dim}, {config.mlp} d_ff "
        f"{config.d_ff}, {config.norm}, {config.positions} positions, "
        f"{'tied' if config.tied_embeddings else 'untied'} head, "
        f"{'with' if config.bias else 'no'} biases",
    ]
    if config.moe is not None:
        dense = config.moe.first_dense_layers
        view.append(f"mixture of experts: {config.moe.describe()}, experts of d "
                    f"{config.moe.d_expert}" + (f", the first {dense} layers dense" if dense
                                                else "")
                    + "; the mlp FLOPs are a token's: its router, k routed and the shared "
                      "experts")
    if config.mla is not None:
        mla = config.mla
        view.append(f"latent attention: q rank {mla.q_lora_rank}, kv rank "
                    f"{mla.kv_lora_rank}, heads of {mla.qk_nope_dim} + {mla.qk_rope_dim} "
                    f"rope (query, key) and {mla.v_head_dim} (value)")
    if config.mtp_depth:
        view.append(f"multi-token prediction: {config.mtp_depth} depth(s), its parameters the "
                    "mtp part; their FLOPs are not in the per-token table")
    return view


def model_params_note(params: ModelParams) -> str:
    """The line ``time --model`` prints to say which parameter count it used."""
    active = "" if params.active_params is None else (
        f"; active per token {params.active_params:,} ({format_count(params.active_params)}: "
        f"{params.routing})")
    return (f"params of {params.model}: {params.params:,} ({format_count(params.params)}), "
            f"{params.source}{active}")
