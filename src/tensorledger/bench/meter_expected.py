"""The meter's expected MFU: what the time model of ``roofline`` and ``account`` says a
recorded step should take on the meter's chip, set beside the MFU the loop measures.

The recorded step's ops are priced by :func:`tensorledger.roofline.model.predict`, the same
function ``roofline`` and ``account`` use: on a catalog chip each op at the catalog's
expected efficiencies (published fractions of the peak by matmul size, of the bandwidth, and
a launch cost per op); on a probed profile at the rates measured on this machine; on a chip
with neither, at the datasheet (the expected time is then the roofline bound).  The expected
MFU takes the same FLOPs and the same dense peak as the measured one, over the expected time
in place of the measured: measured MFU / expected MFU = expected time / measured time.

>>> expected_mfu(flops=1024, peak_flop_per_s=100e9, expected_time_s=2.048e-6)
0.005
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tensorledger.hardware import Hardware
from tensorledger.roofline.model import BASES, predict

if TYPE_CHECKING:
    from tensorledger.trace.records import Trace

__all__ = ["EXPECTED_NAMES", "ExpectedStep", "expected_mfu", "expected_step"]

#: How the meter names the expected figure, by ``Hardware.expected_basis``.
EXPECTED_NAMES = {
    "efficiencies": "expected MFU (the catalog's expected efficiencies)",
    "probed": "expected MFU (this machine's probed profile)",
    "datasheet": "expected MFU (the datasheet alone: the roofline bound)",
}


@dataclass(frozen=True)
class ExpectedStep:
    """A recorded step priced by the roofline's time model on the meter's chip."""

    time_s: float  # expected: at the chip's expected efficiencies (or probed rates)
    bound_time_s: float  # the roofline bound: peak FLOP/s and datasheet bandwidth, no overhead
    basis: str  # "efficiencies", "probed" or "datasheet" (Hardware.expected_basis)

    @property
    def name(self) -> str:
        """The figure's name in the meter's lines."""
        return EXPECTED_NAMES[self.basis]

    @property
    def rests_on(self) -> str:
        """What the expected time rests on, in words (the roofline's own sentence)."""
        return BASES[self.basis]


def expected_step(trace: Trace, hardware: Hardware, tokens: int) -> ExpectedStep:
    """Price ``trace`` (one recorded step) on ``hardware`` as ``roofline`` does."""
    prediction = predict(trace.records, hardware, tokens=tokens)
    return ExpectedStep(time_s=prediction.time_s, bound_time_s=prediction.ideal_time_s,
                        basis=hardware.expected_basis)


def expected_mfu(flops: float, peak_flop_per_s: float, expected_time_s: float) -> float | None:
    """FLOPs over the expected time and the dense peak; None for a step of no time."""
    denominator = peak_flop_per_s * expected_time_s
    return flops / denominator if denominator > 0 else None
