"""Published training runs of dense models against `account`'s prediction of the same step.

Each row is one run a paper or a repository measured: its model, chip, layout, global batch,
sequence, and its measured throughput (tokens/s per chip, or a FLOP rate or MFU from which the
publisher's own FLOP count gives tokens/s).  The row is predicted by the library call behind
``tensorledger account`` (:func:`tensorledger.ledger.account.account_run`) with the published
layout on the catalog chip, traced on fake ranks, and the table sets predicted tokens/s per
chip beside the published figure: ``predicted / published − 1``.

Like with like: every utilisation figure is turned into tokens/s with the publisher's *own*
FLOP count (Megatron-LM's counts the recomputed forward; llm-foundry's and torchtitan's
MFU do not), so the ratio is a ratio of step times whatever the convention, and it equals
predicted MFU / published MFU (or HFU / HFU) under that convention.  The predicted figure is
``account``'s headline: the cluster's tokens/s with communication after compute (serial) and
the pipeline bubble included.

Each row is traced as its publisher ran it where the source says how: Megatron-LM's rows
with the micro-batch sizes, data parallelism and program of its published scripts (attention
with the scores written out, ``--attention eager``: the paper predates FlashAttention).  Rows
the tool cannot express or compare (context parallelism beside pipeline stages, a chip not in
the catalog, selective checkpointing, gradient accumulation under FSDP, a figure without its
FLOP count) are listed with the reason, not dropped.  Pipeline rows of many micro-batches
trace every micro-batch of the rank and take minutes each here: they run with
``--pipelines``.

Prints a table for people, then one JSON line.  Target (issue 36): median |ratio − 1| ≤ 15%,
none beyond 30%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tensorledger.napkin.transformer import TransformerConfig

MEDIAN_TARGET, WORST_TARGET = 0.15, 0.30

# --------------------------------------------------------------------------------- sources

MEGATRON = ("Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU "
            "Clusters Using Megatron-LM, arXiv:2104.04473, Table 1 (A100 80GB, Selene); the "
            "runs' settings from github.com/NVIDIA/Megatron-LM examples/sc21/run_table_1.sh "
            "and CONFIG.sh (TP, PP, micro-batch size, DDP, fp16, uniform recompute)")
TORCHTITAN = ("github.com/pytorch/torchtitan docs/performance.md (commit 0413364), "
              "'Llama 3 / Llama 2 performance numbers', FSDP2 on 64 A100 80GB")
FOUNDRY = ("github.com/mosaicml/llm-foundry scripts/train/benchmarking/README.md "
           "(commit 061f2c7), MPT training benchmarks")
LLAMA3 = ("Llama Team 2024, The Llama 3 Herd of Models, arXiv:2407.21783, §3.3.2 and "
          "Table 4")
TORCHTITAN_PAPER = ("github.com/pytorch/torchtitan docs/performance.md (Llama 3.1 on the "
                    "Grand Teton platform), Table 1")


@dataclass(frozen=True)
class Shape:
    """A dense decoder's shape, as the row's source states it."""

    name: str
    vocab: int
    d_model: int
    layers: int
    heads: int
    kv_heads: int = 0
    d_ff: int = 0
    family: str = "gpt"  # gpt: GELU, LayerNorm, learned positions; llama: SwiGLU, RMSNorm, RoPE
    bias: bool = True
    tied: bool = True


@dataclass(frozen=True)
class PublishedRun:
    """One published run: what ran, what was measured, and where it is written."""

    key: str
    source: str  # paper or repository, and the table
    shape: Shape
    chip: str  # catalog id
    chips: int
    layout: dict[str, int | str]  # dp, fsdp, zero, tp, pp, microbatches, schedule
    global_batch: int  # sequences per optimizer step
    seq: int
    checkpoint: bool | None  # full activation checkpointing (every block); None: other or
    # not stated (a row not predicted: its reason says which)
    precision: str  # tensorledger's recipe closest to the run's
    published: float  # the figure as published
    published_unit: str  # "tokens/s/chip", "TFLOP/s/chip"
    published_mfu: float | None  # as published, for the table (None: not given)
    utilisation: str  # what the published rate counts: "MFU" or "HFU" (recompute counted)
    notes: str = ""  # where the expression differs from the run
    cannot_express: str | None = None  # why account cannot take this run
    # the source's FLOP count that turns its FLOP rate into tokens/s: "megatron" (Eq. 3);
    # None where the source does not state one (then no tokens/s can be derived)
    flop_count: str | None = "megatron"
    # the attention kernel the run's program ran (tensorledger's --attention): auto is the one
    # PyTorch picks on the chip today; eager materialises the scores in the inputs' dtype
    attention: str = "auto"
    dropout: float = 0.0  # the model's dropout probability (attention and residual)
    micro_batch: int | None = None  # sequences per micro-batch, where the source states it

    @property
    def counts_recompute(self) -> bool:
        return self.utilisation == "HFU"

    @property
    def data_parallel(self) -> int:
        return int(self.layout.get("dp", 1)) * int(self.layout.get("fsdp", 1))

    @property
    def rank_batch(self) -> int:
        """Sequences one data-parallel rank steps on."""
        return self.global_batch // self.data_parallel

    @property
    def accumulated(self) -> int:
        """Micro-batches a data-parallel rank accumulates outside a pipeline (1: none)."""
        if self.micro_batch is None or "pp" in self.layout:
            return 1
        return self.rank_batch // self.micro_batch

    @property
    def published_tokens_per_s(self) -> float | None:
        """Tokens/s per chip: as published, or from a published FLOP rate by the source's own
        FLOP count; None where the source states no FLOP count."""
        if self.published_unit == "tokens/s/chip":
            return self.published
        if self.published_unit == "TFLOP/s/chip":
            if self.flop_count != "megatron":
                return None
            return self.published * 1e12 / megatron_flops_per_token(self.shape, self.seq)
        raise ValueError(f"unknown unit {self.published_unit!r}")


def megatron_flops_per_token(shape: Shape, seq: int) -> float:
    """Narayanan et al. 2021, Eq. 3 per token: 96·l·h²·(1 + s/(6h) + V/(16·l·h)), the matmul
    FLOPs of forward, backward and the recomputed forward (attention in full), as Table 1's
    TFLOP/s count them.

    >>> round(megatron_flops_per_token(Shape("x", 51200, 2304, 24, 24), 2048) / 1e10, 4)
    1.475
    """
    h, layers = shape.d_model, shape.layers
    return 96 * layers * h * h * (1 + seq / (6 * h) + shape.vocab / (16 * layers * h))


def _gpt(name: str, d_model: int, layers: int, heads: int, *, tied: bool = True) -> Shape:
    return Shape(name, 51200, d_model, layers, heads, tied=tied)


def _mpt(name: str, d_model: int, layers: int, heads: int) -> Shape:
    # llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml: vocab 50368, expansion 4, no biases,
    # learned positions (the table's parameter counts grow with the sequence), tied head
    return Shape(name, 50368, d_model, layers, heads, bias=False)


def _llama(name: str, vocab: int, d_model: int, layers: int, heads: int, kv: int,
           d_ff: int) -> Shape:
    return Shape(name, vocab, d_model, layers, heads, kv, d_ff, family="llama", bias=False,
                 tied=False)


LLAMA3_70B = _llama("llama-3-70b", 128256, 8192, 80, 64, 8, 28672)
LLAMA3_405B = _llama("llama-3-405b", 128256, 16384, 126, 128, 8, 53248)
LLAMA3_8B = _llama("llama-3-8b", 128256, 4096, 32, 32, 8, 14336)
LLAMA2_13B = _llama("llama-2-13b", 32000, 5120, 40, 40, 40, 13824)
LLAMA2_70B = _llama("llama-2-70b", 32000, 8192, 80, 64, 8, 28672)

# Megatron-LM's program in 2021 (arXiv:2104.04473 predates FlashAttention, 2022): attention
# wrote the scores out (baddbmm, a fused scale-mask-softmax kernel, dropout, bmm), traced as
# --attention eager; dropout 0.1 on attention and the residual branches (megatron/arguments.py's
# defaults, which CONFIG.sh keeps).  DDP: torch's (DDP=torch) or Megatron's own (DDP=local), both
# one gradient all-reduce over the DP ranks.
_MEGATRON_PROGRAM = {"attention": "eager", "dropout": 0.1}
_FP16_NOTE = "fp16 in the run (the same A100 peak as bf16)"
_UNTIED_NOTE = ("untied head: the run ties it to the embedding, which account's DDP beside TP "
                "cannot step yet (torch's DDP over the TP mesh localises a tied table in one "
                "slot only; the foreach optimizer then meets a DTensor beside tensors); the "
                "same FLOPs, V·h more parameters")
_ACCUMULATE_NOTE = ("4 micro-batches of 8 accumulated in the run (no_sync: one all-reduce); "
                    "the rank's 32 sequences traced as one step")
_PP_DDP_NOTE = ("Megatron's DDP as ZeRO-2 over the DP ranks (the same bytes on the wire as its "
                "all-reduce; account traces no DDP within pipeline stages)")
_PP_NOTE = ("untied head (a pipeline cannot share the table across stages); the first "
            "stage's rank is traced")

_LLAMA3_UNSTATED = ("not compared: the paper states no FLOP count behind its MFU (no tokens/s "
                    "to set beside account's), nor the virtual stages a rank, the micro-batch "
                    "size or any recomputation, each of which moves the bubble or the FLOPs")

RUNS: tuple[PublishedRun, ...] = (
    # ---- Megatron-LM, Table 1: TFLOP/s per GPU counting the recomputed forward (HFU)
    # micro-batch sizes and DDP from run_table_1.sh (MBS, DDP=torch/local)
    PublishedRun("megatron-1.7b", MEGATRON, _gpt("gpt-1.7b", 2304, 24, 24), "a100-80gb", 32,
                 {"dp": 32}, 512, 2048, True, "mixed-bf16", 137, "TFLOP/s/chip", 0.44, "HFU",
                 _FP16_NOTE, micro_batch=16, **_MEGATRON_PROGRAM),
    PublishedRun("megatron-3.6b", MEGATRON, _gpt("gpt-3.6b", 3072, 30, 32, tied=False),
                 "a100-80gb", 64, {"dp": 32, "tp": 2}, 512, 2048, True, "mixed-bf16", 138,
                 "TFLOP/s/chip", 0.44, "HFU", f"{_FP16_NOTE}; {_UNTIED_NOTE}", micro_batch=16,
                 **_MEGATRON_PROGRAM),
    PublishedRun("megatron-7.5b", MEGATRON, _gpt("gpt-7.5b", 4096, 36, 32, tied=False),
                 "a100-80gb", 128, {"dp": 32, "tp": 4}, 512, 2048, True, "mixed-bf16", 142,
                 "TFLOP/s/chip", 0.46, "HFU", f"{_FP16_NOTE}; {_UNTIED_NOTE}", micro_batch=16,
                 **_MEGATRON_PROGRAM),
    PublishedRun("megatron-18.4b", MEGATRON, _gpt("gpt-18.4b", 6144, 40, 48, tied=False),
                 "a100-80gb", 256, {"dp": 32, "tp": 8}, 1024, 2048, True, "mixed-bf16", 135,
                 "TFLOP/s/chip", 0.43, "HFU",
                 f"{_FP16_NOTE}; {_ACCUMULATE_NOTE}; {_UNTIED_NOTE}", micro_batch=8,
                 **_MEGATRON_PROGRAM),
    PublishedRun("megatron-39.1b", MEGATRON, _gpt("gpt-39.1b", 8192, 48, 64, tied=False),
                 "a100-80gb", 512, {"fsdp": 32, "zero": 2, "tp": 8, "pp": 2, "microbatches": 12},
                 1536, 2048, True, "mixed-bf16", 138, "TFLOP/s/chip", 0.44, "HFU",
                 f"{_FP16_NOTE}; {_PP_DDP_NOTE}; 1F1B; {_PP_NOTE}", micro_batch=4,
                 **_MEGATRON_PROGRAM),
    PublishedRun("megatron-145.6b", MEGATRON, _gpt("gpt-145.6b", 12288, 80, 96, tied=False),
                 "a100-80gb", 1536, {"fsdp": 24, "zero": 2, "tp": 8, "pp": 8, "microbatches": 48,
                                     "schedule": "interleaved-1f1b", "chunks": 2}, 2304, 2048,
                 True, "mixed-bf16", 148, "TFLOP/s/chip", 0.47, "HFU",
                 f"{_FP16_NOTE}; {_PP_DDP_NOTE}; interleaved 1F1B, 5 layers a virtual stage "
                 f"(--num-layers-per-virtual-pipeline-stage 5); {_PP_NOTE}", micro_batch=2,
                 **_MEGATRON_PROGRAM),
    # ---- torchtitan on 64 A100 80GB, FSDP2: WPS per GPU, MFU without recompute
    PublishedRun("torchtitan-llama3-70b", TORCHTITAN, LLAMA3_70B, "a100-80gb", 64,
                 {"fsdp": 64}, 64, 8192, True, "mixed-bf16", 331, "tokens/s/chip", 0.517,
                 "MFU", "sequence 8192 (the page: Llama 2's 4096 is half Llama 3's)"),
    PublishedRun("torchtitan-llama2-13b", TORCHTITAN, LLAMA2_13B, "a100-80gb", 64,
                 {"fsdp": 64}, 128, 4096, False, "mixed-bf16", 2162, "tokens/s/chip", 0.611,
                 "MFU"),
    PublishedRun("torchtitan-llama2-70b", TORCHTITAN, LLAMA2_70B, "a100-80gb", 64,
                 {"fsdp": 64}, 128, 4096, True, "mixed-bf16", 353, "tokens/s/chip", 0.505,
                 "MFU"),
    # ---- llm-foundry MPT benchmarks, FSDP FULL_SHARD, rows without gradient accumulation
    PublishedRun("foundry-mpt-7b-h100", f"{FOUNDRY}, 'H100 80GB BF16', 7b 2048 × 8",
                 _mpt("mpt-7b", 4096, 32, 32), "h100-sxm", 8, {"fsdp": 8}, 48, 2048, False,
                 "mixed-bf16", 10643, "tokens/s/chip", 0.4644, "MFU"),
    PublishedRun("foundry-mpt-13b-h100", f"{FOUNDRY}, 'H100 80GB BF16', 13b 2048 × 8",
                 _mpt("mpt-13b", 5120, 40, 40), "h100-sxm", 8, {"fsdp": 8}, 16, 2048, False,
                 "mixed-bf16", 4792, "tokens/s/chip", 0.3979, "MFU"),
    PublishedRun("foundry-mpt-7b-a100", f"{FOUNDRY}, 'A100 40GB', 7b 2048 × 32",
                 _mpt("mpt-7b", 4096, 32, 32), "a100-40gb", 32, {"fsdp": 32}, 576, 2048, True,
                 "bf16", 3725, "tokens/s/chip", 0.5155, "MFU",
                 "FSDP mixed precision PURE (bf16 parameters): the bf16 recipe"),
    PublishedRun("foundry-mpt-13b-a100", f"{FOUNDRY}, 'A100 40GB', 13b 2048 × 32",
                 _mpt("mpt-13b", 5120, 40, 40), "a100-40gb", 32, {"fsdp": 32}, 448, 2048, True,
                 "bf16", 1998, "tokens/s/chip", 0.5262, "MFU",
                 "FSDP mixed precision PURE (bf16 parameters): the bf16 recipe"),
    PublishedRun("foundry-mpt-30b-a100", f"{FOUNDRY}, 'A100 40GB', 30b 2048 × 32",
                 _mpt("mpt-30b", 7168, 48, 56), "a100-40gb", 32, {"fsdp": 32}, 128, 2048, True,
                 "bf16", 857, "tokens/s/chip", 0.5174, "MFU",
                 "FSDP mixed precision PURE (bf16 parameters): the bf16 recipe"),
    PublishedRun("foundry-mpt-70b-a100", f"{FOUNDRY}, 'A100 40GB', 70b 2048 × 128",
                 _mpt("mpt-70b", 8192, 80, 64), "a100-40gb", 128, {"fsdp": 128}, 512, 2048,
                 True, "bf16", 376, "tokens/s/chip", 0.4891, "MFU",
                 "FSDP mixed precision PURE (bf16 parameters): the bf16 recipe"),
    # ---- runs account cannot express: listed with the reason
    # laid out now (uneven and interleaved stages), traced once each by hand (docs/published.md:
    # 370 s and 101 s here); not compared: see _LLAMA3_UNSTATED
    PublishedRun("llama3-405b-8k", LLAMA3, LLAMA3_405B, "h100-sxm", 8192,
                 {"fsdp": 64, "zero": 2, "tp": 8, "pp": 16, "microbatches": 32,
                  "schedule": "interleaved-1f1b", "chunks": 2, "stage_layers": "first-1,last-1"},
                 2048, 8192, None, "mixed-bf16", 430, "TFLOP/s/chip", 0.43, "MFU",
                 cannot_express=f"{_LLAMA3_UNSTATED}; traced as shown (2 stages a rank, "
                                "ZeRO-2 and no recomputation assumed): account's MFU 0.250, "
                                "bubble 19% of the step", flop_count=None),
    PublishedRun("llama3-405b-16k", LLAMA3, LLAMA3_405B, "h100-sxm", 16384,
                 {"fsdp": 128, "zero": 2, "tp": 8, "pp": 16, "microbatches": 16,
                  "schedule": "interleaved-1f1b", "chunks": 2, "stage_layers": "first-1,last-1"},
                 2048, 8192, None, "mixed-bf16", 400, "TFLOP/s/chip", 0.41, "MFU",
                 cannot_express=f"{_LLAMA3_UNSTATED}; traced as shown: account's MFU 0.203, "
                                "bubble 32% of the step", flop_count=None),
    PublishedRun("llama3-405b-128k", LLAMA3, LLAMA3_405B, "h100-sxm", 16384,
                 {"fsdp": 8, "tp": 8, "pp": 16}, 128, 131072, None, "mixed-bf16", 380,
                 "TFLOP/s/chip", 0.38, "MFU",
                 cannot_express="context parallelism beside pipeline stages (CP 16 · PP 16), "
                                "which account does not lay out",
                 flop_count=None),
    PublishedRun("torchtitan-llama3-8b-a100", TORCHTITAN, LLAMA3_8B, "a100-80gb", 64,
                 {"fsdp": 64}, 64, 8192, None, "mixed-bf16", 2904, "tokens/s/chip", 0.568,
                 "MFU", cannot_express="selective activation checkpointing (per layer); "
                                       "account recomputes every block or none"),
    PublishedRun("torchtitan-llama31-8b-h100", TORCHTITAN_PAPER, LLAMA3_8B, "h100-sxm", 8,
                 {"fsdp": 8}, 16, 8192, None, "mixed-bf16", 5762, "tokens/s/chip", None,
                 "MFU", cannot_express="chip not in the catalog: H100 with 96 GB HBM2e at "
                                       "2.4 TB/s and a 500 W limit (not the 80 GB SXM5 at "
                                       "3.35 TB/s); also selective checkpointing"),
    PublishedRun("foundry-mpt-70b-h100", f"{FOUNDRY}, 'H100 80GB BF16', 70b 2048 × 64",
                 _mpt("mpt-70b", 8192, 80, 64), "h100-sxm", 64, {"fsdp": 64}, 2048, 2048, True,
                 "mixed-bf16", 1039, "tokens/s/chip", 0.4257, "MFU",
                 cannot_express="gradient accumulation (4 micro-batches of 8, parameters "
                                "gathered again for each): account traces one step"),
)


# ------------------------------------------------------------------------------ prediction

@dataclass(frozen=True)
class Prediction:
    """``account``'s figures for one row."""

    tokens_per_s: float  # per chip, the cluster's serial step (account's headline)
    overlapped_tokens_per_s: float  # per chip, communication ideally hidden
    utilisation: float  # the cluster's MFU, or HFU with checkpointing (account's convention)
    step_s: float
    pipeline_bubble: float
    communication_s: float
    shares: dict[str, float]  # of the rank's expected step, by category (matmul, attention, ...)
    wall_s: float  # time to trace and account the row here


def config_of(shape: Shape, dropout: float = 0.0) -> TransformerConfig:
    """The reference Transformer's config for ``shape``."""
    from tensorledger.napkin.transformer import TransformerConfig

    if shape.family == "llama":
        return TransformerConfig(name=shape.name, vocab_size=shape.vocab, context_length=131072,
                                 d_model=shape.d_model, n_layers=shape.layers,
                                 n_heads=shape.heads, n_kv_heads=shape.kv_heads,
                                 d_ff=shape.d_ff, mlp="swiglu", norm="rmsnorm",
                                 positions="rope", tied_embeddings=False, bias=False,
                                 dropout=dropout)
    return TransformerConfig(name=shape.name, vocab_size=shape.vocab, context_length=2048,
                             d_model=shape.d_model, n_layers=shape.layers, n_heads=shape.heads,
                             bias=shape.bias, tied_embeddings=shape.tied, dropout=dropout)


def predict(run: PublishedRun) -> Prediction:
    """Trace and account ``run`` with its published layout on its catalog chip."""
    from tensorledger.hardware import get_hardware
    from tensorledger.hardware.target import target_of
    from tensorledger.ledger.account import account_run
    from tensorledger.workload.layout import resolve_layout
    from tensorledger.workload.source import ModelSource
    from tensorledger.workload.spec import resolve_workload

    chip = get_hardware(run.chip)
    config = config_of(run.shape, run.dropout)
    source = ModelSource(label=config.name, kind="preset", builder="reference",
                         name=config.name, config=config)
    layout = resolve_layout(**run.layout)  # type: ignore[arg-type]
    if layout.count != run.chips:
        raise ValueError(f"{run.key}: layout of {layout.count} chips, published {run.chips}")
    work = resolve_workload(source, batch=run.rank_batch, seq=run.seq, step="train",
                            precision=run.precision, checkpoint=bool(run.checkpoint),
                            layout=layout,
                            target=target_of(chip).forcing(run.attention))
    start = time.perf_counter()
    ledger, _ = account_run(work, chip, count=run.chips)
    wall = time.perf_counter() - start
    cluster = ledger.cluster
    assert cluster is not None
    serial, overlapped = cluster.tokens_per_s
    return Prediction(tokens_per_s=serial / run.chips,
                      overlapped_tokens_per_s=overlapped / run.chips, utilisation=ledger.mfu,
                      step_s=cluster.step_s, pipeline_bubble=cluster.pipeline_bubble,
                      communication_s=cluster.communication_s,
                      shares={t.name: t.share_of_step for t in ledger.roofline.by_category},
                      wall_s=wall)


# ------------------------------------------------------------------------------- the table

def ratio(predicted: float, published: float) -> float:
    """predicted / published − 1.

    >>> ratio(110.0, 100.0), ratio(80.0, 100.0)
    (0.10000000000000009, -0.19999999999999996)
    """
    return predicted / published - 1


@dataclass(frozen=True)
class Verdict:
    """The ratios of the predicted rows against the issue's target."""

    ratios: dict[str, float] = field(default_factory=dict)

    @property
    def median_abs(self) -> float:
        return statistics.median(abs(r) for r in self.ratios.values())

    @property
    def worst(self) -> tuple[str, float]:
        key = max(self.ratios, key=lambda k: abs(self.ratios[k]))
        return key, self.ratios[key]

    @property
    def passed(self) -> bool:
        return self.median_abs <= MEDIAN_TARGET and abs(self.worst[1]) <= WORST_TARGET


def layout_text(layout: dict[str, int | str]) -> str:
    """``TP 8 · PP 2 · DP 32 (ZeRO-2)``, in the papers' words.

    >>> layout_text({"fsdp": 32, "zero": 2, "tp": 8, "pp": 2, "microbatches": 48})
    'TP 8 · PP 2 (48 micro-batches) · FSDP 32 (ZeRO-2)'
    >>> layout_text({"dp": 24, "tp": 8, "pp": 8, "microbatches": 48,
    ...              "schedule": "interleaved-1f1b", "chunks": 2})
    'TP 8 · PP 8 (48 micro-batches; interleaved-1f1b, 2 stages a rank) · DP 24'
    >>> layout_text({"dp": 32})
    'DP 32'
    """
    parts = []
    if "tp" in layout:
        parts.append(f"TP {layout['tp']}")
    if "pp" in layout:
        details = [f"{layout['microbatches']} micro-batches"] if "microbatches" in layout else []
        if "schedule" in layout:
            chunks = f", {layout['chunks']} stages a rank" if "chunks" in layout else ""
            details.append(f"{layout['schedule']}{chunks}")
        if "stage_layers" in layout:
            details.append(f"stages {layout['stage_layers']}")
        micro = f" ({'; '.join(details)})" if details else ""
        parts.append(f"PP {layout['pp']}{micro}")
    if "dp" in layout:
        parts.append(f"DP {layout['dp']}")
    if "fsdp" in layout:
        zero = f" (ZeRO-{layout['zero']})" if "zero" in layout else ""
        parts.append(f"FSDP {layout['fsdp']}{zero}")
    return " · ".join(parts)


def markdown(rows: list[tuple[PublishedRun, Prediction | None, str | None]]) -> str:
    """The table for the README and docs/published.md."""
    head = ("| run | chips | layout | batch × seq | ckpt | attention | published | "
            "recompute counted | published tok/s/chip | predicted tok/s/chip | "
            "predicted / published − 1 |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    lines = [head]
    for run, pred, why in rows:
        figure = (f"{run.published:g} {run.published_unit}" +
                  (f" ({run.utilisation} {run.published_mfu:.1%})" if run.published_mfu else ""))
        chips = f"{run.chips:,} × {run.chip}"
        batch = f"{run.global_batch:,} × {run.seq:,}"
        ckpt = "—" if run.checkpoint is None else "full" if run.checkpoint else "none"
        ckpt += f" | {run.attention}"
        counted = "yes" if run.counts_recompute else "no"
        published = run.published_tokens_per_s
        rate = "— (no FLOP count stated)" if published is None else f"{published:,.0f}"
        if pred is None or published is None:
            lines.append(f"| {run.key} | {chips} | {layout_text(run.layout)} | {batch} | {ckpt} "
                         f"| {figure} | {counted} | {rate} | — | not predicted: {why} |")
            continue
        off = ratio(pred.tokens_per_s, published)
        lines.append(f"| {run.key} | {chips} | {layout_text(run.layout)} | {batch} | {ckpt} | "
                     f"{figure} | {counted} | {rate} | {pred.tokens_per_s:,.0f} | {off:+.1%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", action="store_true",
                        help="also predict the pipeline rows (minutes each here)")
    parser.add_argument("--only", nargs="*", default=None, help="row keys to predict")
    parser.add_argument("--markdown", action="store_true", help="print the markdown table too")
    args = parser.parse_args()
    rows: list[tuple[PublishedRun, Prediction | None, str | None]] = []
    verdict = Verdict()
    start = time.perf_counter()
    for run in RUNS:
        if args.only is not None and run.key not in args.only:
            continue
        if run.cannot_express is not None:
            rows.append((run, None, run.cannot_express))
            print(f"{run.key:<28} cannot express: {run.cannot_express}", flush=True)
            continue
        if "pp" in run.layout and not args.pipelines:
            why = ("a pipeline of many micro-batches: every micro-batch of the rank is traced "
                   "(minutes here); run with --pipelines")
            rows.append((run, None, why))
            print(f"{run.key:<28} skipped: {why}", flush=True)
            continue
        pred = predict(run)
        published = run.published_tokens_per_s
        assert published is not None, f"{run.key}: a predicted row needs tokens/s to compare"
        r = ratio(pred.tokens_per_s, published)
        verdict.ratios[run.key] = r
        rows.append((run, pred, None))
        print(f"{run.key:<28} published {published:9,.0f} tok/s/chip  "
              f"predicted {pred.tokens_per_s:9,.0f} "
              f"(overlapped {pred.overlapped_tokens_per_s:,.0f})"
              f"  {r:+7.1%}  {'HFU' if run.checkpoint else 'MFU'} {pred.utilisation:.3f}  "
              f"bubble {pred.pipeline_bubble:.3f}  comm {pred.communication_s:.3g} s of "
              f"{pred.step_s:.3g} s  matmul {pred.shares.get('matmul', 0):.0%} attention "
              f"{pred.shares.get('attention', 0):.0%} of the rank's step  "
              f"({pred.wall_s:.0f} s to account)", flush=True)
    wall = time.perf_counter() - start
    if args.markdown:
        print(markdown(rows))
    if verdict.ratios:
        worst_key, worst = verdict.worst
        print(f"{len(verdict.ratios)} rows predicted: median |ratio − 1| "
              f"{verdict.median_abs:.1%} (target ≤ {MEDIAN_TARGET:.0%}), worst {worst_key} "
              f"{worst:+.1%} (target within ±{WORST_TARGET:.0%}); {wall:.0f} s")
    print(json.dumps({
        "benchmark": "published_runs", "rows": len(rows), "predicted": len(verdict.ratios),
        "ratios": verdict.ratios,
        "median_abs_ratio": verdict.median_abs if verdict.ratios else None,
        "worst_abs_ratio": abs(verdict.worst[1]) if verdict.ratios else None,
        "target_median": MEDIAN_TARGET, "target_worst": WORST_TARGET,
        "not_predicted": {run.key: why for run, pred, why in rows if pred is None},
        "time_s": wall, "pass": verdict.passed if verdict.ratios else False}))


if __name__ == "__main__":
    main()
