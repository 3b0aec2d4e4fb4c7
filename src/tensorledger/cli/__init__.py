"""The ``tensorledger`` command line: a thin layer over the library.

Command modules register themselves on one typer app and import torch, if they need it, only
inside their command functions, so napkin commands answer without loading torch.
"""

from __future__ import annotations

from tensorledger.cli.main import app, main

__all__ = ["app", "main"]
