"""Tensors to quantize: drawn from a named distribution, or read from a user's file."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import torch

from tensorledger.errors import ConfigError, InputError, UnknownNameError
from tensorledger.hostmemory import check_fits_in_memory

__all__ = ["DISTRIBUTIONS", "MAX_TENSOR_FILE_BYTES", "load_tensor", "random_tensor"]

DISTRIBUTIONS = ("normal", "uniform", "laplace")
#: The largest tensor file read whole: 4 GiB (one 2^28-element fp32 tensor is 1 GiB).
MAX_TENSOR_FILE_BYTES = 4 * 2**30


def random_tensor(dist: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """fp32 samples: ``normal`` is N(0, 1), ``uniform`` U(-1, 1), ``laplace`` Laplace(0, 1).

    ``seed`` seeds a fresh generator, which draws the same stream as ``torch.manual_seed(seed)``.
    """
    generator = torch.Generator().manual_seed(seed)
    if dist == "normal":
        return torch.randn(shape, generator=generator)
    if dist == "uniform":
        return torch.rand(shape, generator=generator) * 2 - 1
    if dist == "laplace":
        u = torch.rand(shape, generator=generator, dtype=torch.float64) - 0.5
        return (-torch.sign(u) * torch.log1p(-2 * u.abs())).float()
    raise UnknownNameError("distribution", dist, DISTRIBUTIONS)


def _read(path: Path) -> dict[str, torch.Tensor]:
    suffix = path.suffix.lower()
    if suffix == ".npy":
        array = np.load(path, allow_pickle=False)
        return {path.stem: torch.from_numpy(np.ascontiguousarray(array))}
    if suffix in (".pt", ".pth", ".bin"):
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(loaded, torch.Tensor):
            return {path.stem: loaded}
        if isinstance(loaded, dict):
            return {str(k): v for k, v in loaded.items() if isinstance(v, torch.Tensor)}
        raise ConfigError(f"{path} holds a {type(loaded).__name__}, not a tensor or a dict of "
                          "tensors")
    if suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ConfigError("reading .safetensors needs the safetensors package "
                              "(pip install safetensors)") from None
        return dict(load_file(str(path)))
    raise InputError(f"cannot read {path.name!r}: expected a .safetensors, .pt or .npy file")


def load_tensor(path: str | Path, name: str | None = None) -> tuple[str, torch.Tensor]:
    """One floating-point tensor from a file, and the name it goes by.  A file holding several
    tensors needs ``name``; the error lists the names it holds."""
    file = Path(path)
    try:
        info = file.stat()
    except FileNotFoundError:
        raise ConfigError(f"tensor file {str(file)!r} does not exist") from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read tensor file {str(file)!r}: "
                          f"{getattr(error, 'strerror', None) or error}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise ConfigError(f"tensor file {str(file)!r} is {kind}; expected a .safetensors, .pt "
                          "or .npy file")
    if info.st_size > MAX_TENSOR_FILE_BYTES:
        raise ConfigError(f"tensor file {str(file)!r} has {info.st_size / 2**30:.3g} GiB; at "
                          f"most {MAX_TENSOR_FILE_BYTES / 2**30:.0f} GiB are read")
    check_fits_in_memory(2 * info.st_size, f"reading {file.name} (twice its size, as loaders "
                         "copy)", "quantize a smaller file")
    try:
        tensors = _read(file)
    except (ConfigError, InputError):
        raise
    except Exception as error:  # each reader has its own exceptions for a damaged file
        reason = " ".join(str(error).split())[:200]
        raise ConfigError(f"cannot read tensors from {file}: {type(error).__name__}: "
                          f"{reason}") from None
    if not tensors:
        raise ConfigError(f"{file} holds no tensors")
    if name is None:
        if len(tensors) > 1:
            raise InputError(f"{file} holds {len(tensors)} tensors; choose one with --tensor "
                             f"({', '.join(sorted(tensors)[:10])}"
                             f"{', ...' if len(tensors) > 10 else ''})")
        name = next(iter(tensors))
    if name not in tensors:
        raise UnknownNameError(f"tensor in {file.name}", name, tensors)
    tensor = tensors[name]
    if not tensor.is_floating_point():
        raise InputError(f"tensor {name!r} in {file.name} is {tensor.dtype}; quantization needs "
                         "a floating-point tensor")
    if tensor.numel() == 0:
        raise InputError(f"tensor {name!r} in {file.name} is empty")
    return name, tensor
