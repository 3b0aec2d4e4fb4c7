"""Memory a device keeps for itself: what "fits" leaves beside the step's own peak.

A step whose traced peak equals the device's memory does not run: the CUDA context (the
driver's state, the kernels loaded, cuBLAS and cuDNN handles), the communicators' buffers of
NCCL, and the caching allocator's fragmentation take their share first.  Each figure has a
source; the fragmentation share is an assumption, stated wherever a fit is printed, and
``--budget`` replaces the whole reserve with the usable bytes a user measured.

>>> h = device_headroom(ranks=8)
>>> round(h.reserve_bytes(60e9) / 1e9, 2)   # 0.76 + 1.06 + 5% of 60 GB
4.82
>>> device_headroom(ranks=1).communicator_bytes
0.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CUDA_CONTEXT_BYTES", "FRAGMENTATION", "NCCL_BYTES", "Headroom", "device_headroom"]

#: The CUDA context PyTorch's first CUDA call creates: 723 MiB.
CUDA_CONTEXT_BYTES = 723 * 2**20
#: NCCL's own device memory once a communicator has run a collective on an H100: 1.06 GB.
NCCL_BYTES = 1.06e9
#: The caching allocator's fragmentation, as a share of the step's peak: an assumption.
FRAGMENTATION = 0.05

SOURCES = {
    "cuda_context": "PyTorch forums, 'What is the reason for pytorch's GPU memory floor?' "
                    "(discuss.pytorch.org t/73021): the first CUDA call creates the context, "
                    "723 MiB before any tensor",
    "communicator": "NVIDIA/nccl#1685: NCCL's own memory on each of 8 H100s, PyTorch's "
                    "excluded, 1.06 GB after communicator set-up and collectives (4.34 GB once "
                    "all-to-all opens a channel to every peer); NVIDIA/nccl#986: rings keep two "
                    "connections whatever the scale, so it does not grow with the ranks",
    "fragmentation": "assumed: 5% of the peak for blocks the caching allocator holds split "
                     "or rounded (the 512-byte rounding alone is shown beside the peak); "
                     "--budget replaces the reserve with a measured figure",
}


@dataclass(frozen=True)
class Headroom:
    """The bytes a device keeps beside a step's peak, and where each figure comes from."""

    cuda_context_bytes: float
    communicator_bytes: float  # none on one device
    fragmentation: float  # a share of the step's peak
    sources: dict[str, str] = field(default_factory=lambda: dict(SOURCES))

    def reserve_bytes(self, peak_bytes: float) -> float:
        """What the device keeps beside a step of ``peak_bytes``."""
        return (self.cuda_context_bytes + self.communicator_bytes
                + self.fragmentation * peak_bytes)

    def largest_peak(self, device_bytes: float) -> float:
        """The largest step peak that fits ``device_bytes`` with this reserve beside it."""
        return max(0.0, (device_bytes - self.cuda_context_bytes - self.communicator_bytes)
                   / (1.0 + self.fragmentation))

    def describe(self) -> str:
        """One phrase for the output: each part of the reserve."""
        parts = [f"CUDA context {self.cuda_context_bytes / 1e9:.2f} GB"]
        if self.communicator_bytes:
            parts.append(f"NCCL buffers {self.communicator_bytes / 1e9:.2f} GB")
        parts.append(f"allocator fragmentation {self.fragmentation:.0%} of the peak (assumed)")
        return ", ".join(parts)


def device_headroom(ranks: int) -> Headroom:
    """The reserve of one device of a job of ``ranks`` devices (communicators beyond one)."""
    return Headroom(cuda_context_bytes=float(CUDA_CONTEXT_BYTES),
                    communicator_bytes=NCCL_BYTES if ranks > 1 else 0.0,
                    fragmentation=FRAGMENTATION)
