"""The program a chip runs: which attention kernel and which optimizer kernels PyTorch picks there.

A step traced on meta or fake tensors runs on this machine's CPU, and left alone PyTorch would
record the CPU's program: scaled-dot-product attention on its math path or its CPU flash kernel,
the optimizer as a per-parameter loop.  A :class:`Target` says what the chip the step is
predicted for runs instead, so the trace can record that program (``trace.kernels`` routes
attention, ``workload.optimizers`` builds the optimizer with the target's kernels).

The attention rules are PyTorch's own (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``,
``select_sdp_backend``): flash first, then memory-efficient, then math.

- **flash** needs compute capability 8.0 or later, no ``attn_mask``, fp16 or bf16, query, key and
  value of one head size of at most 256, ``is_causal`` only with as many queries as keys, and on
  8.6, 8.9 and 12.x no gradient through a head size above 192; dropout is allowed, and grouped
  query attention too.
- **memory-efficient** needs capability 5.0 or later, an arbitrary mask is allowed; fp32, fp16
  (and bf16 from 8.0); query and key of one head size and both head sizes a multiple of the
  kernel's alignment (8 for half types, 4 for fp32 from 8.0; 8 and 1 before); grouped query
  attention is allowed on CUDA, not on ROCm.
- **math** otherwise: the scores are materialised (bmm, softmax), and saved for backward.

PyTorch on sm90/sm100 with a recent cuDNN may prefer cuDNN's attention where flash applies; it
keeps the same saved tensors (output and log-sum-exp) and the same FLOPs, so flash stands for it.

A program that chose its kernel itself is traced with :meth:`Target.forcing` (``--attention``):
``flash``, ``efficient`` or ``math`` as ``torch.nn.attention.sdpa_kernel`` forces them (a forced
kernel the inputs do not admit is refused, with the reason, rather than replaced; the math
kernel computes half-precision inputs in fp32, PyTorch's default), or ``eager``: the scores
materialised in the inputs' dtype (the math kernel with
``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp``), as attention written out by hand
runs them: Megatron-LM's of 2021, which predates FlashAttention (Narayanan et al. 2021,
arXiv:2104.04473: QKᵀ by baddbmm, a fused scale-mask-softmax kernel, dropout, ·V), or
Hugging Face's ``eager`` attention.

>>> h100 = Target("h100-sxm", "cuda", (9, 0))
>>> h100.attention_kernel("bf16", head_dims=(128, 128, 128), mask=False)
('flash', 'bf16, no mask, head size 128')
>>> h100.attention_kernel("bf16", head_dims=(128, 128, 128), mask=True)[0]
'efficient'
>>> Target("v100-sxm", "cuda", (7, 0)).attention_kernel("bf16", head_dims=(64, 64, 64),
...                                                     mask=False)
('math', 'flash needs compute capability 8.0 (this is 7.0); memory-efficient attention takes fp16 and fp32 on compute capability 7.0, not bf16')
>>> h100.forcing("math").attention_kernel("bf16", head_dims=(128, 128, 128), mask=False)
('math', 'forced: --attention math')
>>> h100.optimizer_kernel, CPU.optimizer_kernel
('foreach', 'for-loop')
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from tensorledger.errors import InputError, UnknownNameError
from tensorledger.hardware.catalog import LOCAL, Hardware

__all__ = ["ATTENTION_CHOICES", "CPU", "OPTIMIZER_KERNELS", "Target", "TargetKind",
           "default_target", "resolve_attention", "target_of"]

TargetKind = Literal["cuda", "rocm", "cpu", "xla"]

#: How an optimizer's step runs: torch's per-parameter loop, its multi-tensor (``foreach``)
#: kernels, or one fused kernel per parameter group.
OPTIMIZER_KERNELS = ("for-loop", "foreach", "fused")

#: The largest head size flash attention takes (both ``sdp_utils`` builds).
FLASH_HEAD_DIM_MAX = 256
#: The head size above which flash refuses a gradient on sm86, sm89 and sm12x.
FLASH_GRAD_HEAD_DIM_MAX_SMALL_SM = 192
_HALF = ("fp16", "bf16")

#: What ``--attention`` takes: ``auto`` (the kernel PyTorch picks on the target) or one forced.
ATTENTION_CHOICES = ("auto", "flash", "efficient", "math", "eager")


def resolve_attention(name: str) -> str:
    """``--attention`` checked: one of :data:`ATTENTION_CHOICES`.

    >>> resolve_attention(" Math "), resolve_attention("eager")
    ('math', 'eager')
    """
    key = name.strip().lower()
    if key not in ATTENTION_CHOICES:
        raise UnknownNameError("attention kernel", name, ATTENTION_CHOICES)
    return key


@dataclass(frozen=True)
class Target:
    """The chip a step is predicted for, as far as the program it runs is concerned.

    ``native``: the step runs on real tensors of this device, so PyTorch chooses every kernel
    itself and nothing is routed (``--device cpu``/``cuda``, and the CPU as its own target).
    """

    name: str
    kind: TargetKind
    capability: tuple[int, int] | None = None  # NVIDIA's compute capability
    native: bool = False
    # the attention kernel forced (flash, efficient, math, eager), or auto: PyTorch's choice
    attention: str = "auto"

    def forcing(self, attention: str) -> Target:
        """This target with its attention kernel forced (``auto``: PyTorch's choice again), as
        ``torch.nn.attention.sdpa_kernel`` would force it on the chip."""
        kernel = resolve_attention(attention)
        if self.native and kernel != "auto":
            raise InputError(f"--attention {kernel} forces the kernel a target chip runs, traced "
                             f"on fake tensors; on {self.name} PyTorch chooses its own: drop "
                             "--attention, or trace on fake tensors")
        return replace(self, attention=kernel)

    @property
    def optimizer_kernel(self) -> str:
        """torch.optim's default there: ``foreach`` on a GPU, the per-parameter loop on a CPU
        (``_default_to_fused_or_foreach``: foreach only where every parameter is on a device
        with foreach kernels, and the CPU has none)."""
        return "for-loop" if self.kind == "cpu" else "foreach"

    @property
    def caveat(self) -> str:
        """Where the trace cannot be this target's program, why; else empty."""
        if self.kind == "xla":
            return (f"{self.name} runs the step as one XLA program that PyTorch does not "
                    "dispatch op by op: the trace records a CUDA GPU's program in its place "
                    "(flash attention, foreach optimizer)")
        return ""

    def describe(self) -> str:
        """One phrase for the output: the chip and how its kernels are chosen.

        >>> Target("h100-sxm", "cuda", (9, 0)).describe(), CPU.describe()
        ('h100-sxm (CUDA, compute capability 9.0)', 'cpu (PyTorch chooses its kernels)')
        """
        if self.native:
            return f"{self.name} (PyTorch chooses its kernels)"
        where = {"cuda": "CUDA", "rocm": "ROCm", "xla": "XLA", "cpu": "CPU"}[self.kind]
        if self.capability:
            where += f", compute capability {self._capability_text()}"
        return f"{self.name} ({where})"

    def _at_least(self, major: int, minor: int = 0) -> bool:
        if self.kind in ("rocm", "xla"):
            return True
        return self.capability is not None and self.capability >= (major, minor)

    def attention_kernel(self, dtype: str, *, head_dims: tuple[int, int, int], mask: bool,
                         causal: bool = False, queries: int = 1, keys: int = 1,
                         grouped: bool = False, grad: bool = True) -> tuple[str, str]:
        """The kernel scaled-dot-product attention runs here, and why: ``flash``,
        ``efficient`` or ``math`` (``native`` on a target that chooses for itself).

        ``dtype`` is the inputs' (``bf16``, ``fp16``, ``fp32``...), ``head_dims`` the query's,
        key's and value's head sizes, ``grouped`` whether keys have fewer heads than queries.
        """
        if self.native:
            return "native", "PyTorch chooses on this device"
        qk, _, v = head_dims
        why_not_flash = self._why_not_flash(dtype, head_dims, mask, causal, queries, keys, grad)
        if self.attention != "auto":
            why_not = {"flash": why_not_flash, "math": "", "eager": "",
                       "efficient": self._why_not_efficient(dtype, qk, v, grouped)}
            if why_not[self.attention]:
                raise InputError(f"--attention {self.attention}: {self.name} cannot run it on "
                                 f"these inputs ({why_not[self.attention]}); drop --attention "
                                 "or force another kernel")
            return self.attention, f"forced: --attention {self.attention}"
        if not why_not_flash:
            return "flash", f"{dtype}, {'causal' if causal else 'no mask'}, head size {qk}"
        why_not_efficient = self._why_not_efficient(dtype, qk, v, grouped)
        if not why_not_efficient:
            return "efficient", f"not flash: {why_not_flash}"
        return "math", f"{why_not_flash}; {why_not_efficient}"

    def _why_not_flash(self, dtype: str, head_dims: tuple[int, int, int], mask: bool,
                       causal: bool, queries: int, keys: int, grad: bool) -> str:
        qk, k, v = head_dims
        if not self._at_least(8):
            return f"flash needs compute capability 8.0 (this is {self._capability_text()})"
        if mask:
            return "an attention mask"
        if dtype not in _HALF:
            return f"{dtype} (flash takes fp16 and bf16)"
        if not qk == k == v or qk > FLASH_HEAD_DIM_MAX:
            return f"head sizes {qk}, {k}, {v} (flash: one size, at most {FLASH_HEAD_DIM_MAX})"
        if causal and queries != keys:
            return f"causal with {queries} queries and {keys} keys"
        small = self.capability is not None and (self.capability in ((8, 6), (8, 9))
                                                 or self.capability[0] == 12)
        if small and grad and qk > FLASH_GRAD_HEAD_DIM_MAX_SMALL_SM:
            return (f"a gradient through head size {qk} on compute capability "
                    f"{self._capability_text()} (at most {FLASH_GRAD_HEAD_DIM_MAX_SMALL_SM})")
        return ""

    def _why_not_efficient(self, dtype: str, qk: int, v: int, grouped: bool) -> str:
        if not self._at_least(5):
            return f"memory-efficient attention needs compute capability 5.0 " \
                   f"({self._capability_text()})"
        allowed = ("fp16", "fp32", "bf16") if self._at_least(8) else ("fp16", "fp32")
        if dtype not in allowed:
            return (f"memory-efficient attention takes {' and '.join(allowed)} on compute "
                    f"capability {self._capability_text()}, not {dtype}")
        if self.kind == "rocm" and grouped:
            return "grouped-query attention (ROCm's memory-efficient kernel takes none)"
        alignment = 8 if dtype in _HALF else (4 if self._at_least(8) else 1)
        if qk % alignment or v % alignment:
            return (f"head sizes {qk} and {v} (memory-efficient attention: multiples of "
                    f"{alignment} in {dtype})")
        return ""

    def _capability_text(self) -> str:
        return "?" if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"


#: This machine's CPU: PyTorch chooses its own kernels.
CPU = Target("cpu", "cpu", native=True)


def target_of(chip: Hardware) -> Target:
    """The target of a catalog chip or a hardware file: NVIDIA chips by compute capability
    (a chip that states none, of any other vendor too, is taken as 8.0, the oldest that runs
    flash attention in bf16), AMD as ROCm, Google's TPUs as XLA; a probed profile (``local``)
    as the device it was probed on: this machine's CPU, or a CUDA GPU."""
    vendor = chip.vendor.strip().lower()
    if chip.id == LOCAL or chip.name.endswith("(probed)"):
        probed_on = chip.sources.get("*", "")
        return Target(chip.id, "cuda", (8, 0)) if " on cuda" in probed_on else CPU
    if vendor == "amd":
        return Target(chip.id, "rocm")
    if vendor == "google":
        return Target(chip.id, "xla")
    capability = (8, 0)
    if chip.compute_capability is not None:
        major, minor = chip.compute_capability.split(".")
        capability = (int(major), int(minor))
    return Target(chip.id, "cuda", capability)


def default_target() -> Target:
    """The target when none is named: an H100 (``account``'s default chip too)."""
    from tensorledger.hardware.catalog import get_hardware

    return target_of(get_hardware("h100"))
