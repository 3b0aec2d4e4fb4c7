"""tensorledger: resource accounting for language-model training in PyTorch.

Importing the package does not import torch: the napkin math, units, hardware catalog and
format metadata answer without it.  Subpackages that need torch load it when first used.
"""

from __future__ import annotations

from tensorledger.errors import TensorLedgerError
from tensorledger.hardware import Hardware, get_hardware

__version__ = "0.1.0"

__all__ = ["Hardware", "TensorLedgerError", "__version__", "get_hardware"]
