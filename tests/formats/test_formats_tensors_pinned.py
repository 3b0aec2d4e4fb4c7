"""Pins for ``formats/tensors.py``: ``load_tensor`` and its readers, called directly.

The CLI tests read files through a subprocess or the whole ``quantize`` command; these call
``load_tensor`` with small files (a few bytes to a few hundred) and check what each refusal
says, which suffixes each reader takes, and that a pickle is never run.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tensorledger.errors import ConfigError, InputError
from tensorledger.formats import tensors
from tensorledger.formats.tensors import MAX_TENSOR_FILE_BYTES, load_tensor


class _NotAllowed:
    """A class no weights-only unpickler knows: a file holding one must be refused."""


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".PTH", ".Bin"])
def test_torch_files_are_read_under_each_of_their_suffixes(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"w{suffix}"
    torch.save(torch.tensor([1.5, -2.0]), path)
    name, tensor = load_tensor(path)
    assert name == "w"  # a bare tensor goes by the file's stem
    assert tensor.tolist() == [1.5, -2.0]


def _saved_on_cuda(path: Path) -> None:
    """A tensor file whose storage is tagged ``cuda:0``, as ``torch.save`` writes it on a GPU
    machine: a CPU save with the location string in its pickle rewritten."""
    buffer = io.BytesIO()
    torch.save(torch.tensor([1.5, -2.0]), buffer)
    with zipfile.ZipFile(buffer) as saved, zipfile.ZipFile(path, "w") as out:
        for name in saved.namelist():
            data = saved.read(name)
            if name.endswith("data.pkl"):  # BINUNICODE: 'X', a 4-byte length, the text
                assert b"X\x03\x00\x00\x00cpu" in data
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            out.writestr(name, data)


def test_a_file_saved_on_a_gpu_is_read_onto_the_cpu(tmp_path: Path) -> None:
    path = tmp_path / "gpu.pt"
    _saved_on_cuda(path)
    # map_location="cpu": without it a CPU-only machine refuses the file and a GPU machine
    # loads the tensor onto its GPU
    name, tensor = load_tensor(path)
    assert (name, tensor.device.type, tensor.tolist()) == ("gpu", "cpu", [1.5, -2.0])


def test_a_pickle_holding_more_than_tensors_is_refused_not_run(tmp_path: Path) -> None:
    path = tmp_path / "w.pt"
    torch.save({"w": torch.ones(2), "other": _NotAllowed()}, path)
    # weights_only=True: the unpickler refuses the unknown class instead of building it
    with pytest.raises(ConfigError, match=r"cannot read tensors from .*UnpicklingError"):
        load_tensor(path, "w")


def test_weights_only_holds_under_the_environment_switch(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD turns weights_only off wherever a caller left it unset
    # (torch.serialization); an explicit weights_only=True still refuses
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    path = tmp_path / "w.pt"
    torch.save({"w": torch.ones(2), "other": _NotAllowed()}, path)
    with pytest.raises(ConfigError, match=r"cannot read tensors from .*UnpicklingError"):
        load_tensor(path, "w")


def test_an_object_array_is_refused_by_numpy_not_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "w.npy"
    np.save(path, np.array([1.0, "a"], dtype=object), allow_pickle=True)
    # allow_pickle=False: numpy itself refuses (ValueError), before torch sees an object array
    with pytest.raises(ConfigError, match=r"ValueError: Object arrays cannot be loaded"):
        load_tensor(path)


def test_a_folder_and_a_fifo_are_named_as_such(tmp_path: Path) -> None:
    folder = tmp_path / "d.npy"
    folder.mkdir()
    with pytest.raises(ConfigError, match=re.escape(f"{str(folder)!r} is a folder; expected")):
        load_tensor(folder)
    fifo = tmp_path / "f.npy"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError,
                       match=re.escape(f"{str(fifo)!r} is not a regular file; expected")):
        load_tensor(fifo)


def test_a_file_of_exactly_the_largest_size_is_read(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []
    monkeypatch.setattr(tensors, "check_fits_in_memory", lambda *args: asked.append(args))
    path = tmp_path / "big.npy"
    with path.open("wb") as file:  # sparse: 4 GiB long, no block written
        file.truncate(MAX_TENSOR_FILE_BYTES)
    # not refused for its size: numpy reads its (zero) header and refuses that instead
    with pytest.raises(ConfigError, match="cannot read tensors from"):
        load_tensor(path)
    # the memory check asks for twice the file: loaders copy
    assert asked == [(2 * MAX_TENSOR_FILE_BYTES, "reading big.npy (twice its size, as loaders "
                      "copy)", "quantize a smaller file")]
    with path.open("r+b") as file:
        file.truncate(MAX_TENSOR_FILE_BYTES + 1)  # one byte more than 4 GiB
    with pytest.raises(ConfigError, match="at most 4 GiB are read"):
        load_tensor(path)


def test_a_reader_error_is_reported_on_one_line_of_at_most_200_characters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.npy"
    path.write_bytes(b"x")
    words = "header  broken\n\tat byte 7 " + "y" * 300  # 2 spaces, a newline and a tab

    def broken(_: Path) -> dict[str, torch.Tensor]:
        raise RuntimeError(words)

    monkeypatch.setattr(tensors, "_read", broken)
    with pytest.raises(ConfigError) as raised:
        load_tensor(path)
    # whitespace runs become one space, and the text is cut to 200 characters
    reason = ("header broken at byte 7 " + "y" * 300)[:200]
    assert str(raised.value) == f"cannot read tensors from {path}: RuntimeError: {reason}"


def test_a_one_element_tensor_is_read_and_an_empty_one_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "one.npy", np.array([2.5], dtype=np.float32))
    assert load_tensor(tmp_path / "one.npy")[1].tolist() == [2.5]
    np.save(tmp_path / "none.npy", np.zeros(0, dtype=np.float32))
    with pytest.raises(InputError, match=re.escape("'none' in none.npy is empty")):
        load_tensor(tmp_path / "none.npy")

