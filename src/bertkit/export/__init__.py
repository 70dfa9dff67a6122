"""`bertkit export`: ONNX graphs of model directories (`writer`), the torch modules traced (`graph`),
the ONNX Runtime backend that runs them where torch models run (`backend`), and `bertkit serve`'s
backend on an export (`serving`).

This module itself imports nothing heavy: the CLI checks a folder's backend before torch loads.
"""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.errors import UserError

META_FILE = "onnx.json"
BACKENDS = ("torch", "onnx")


def is_export(folder: str | os.PathLike) -> bool:
    """Whether a folder is a `bertkit export` output (it holds onnx.json)."""
    return (Path(folder) / META_FILE).is_file()


def check_backend(folder: str | os.PathLike, backend: str) -> None:
    """A UserError when the folder does not hold what the backend runs."""
    folder = Path(folder)
    if backend == "onnx" and not is_export(folder):
        raise UserError(f"no {META_FILE}: --backend onnx runs a folder made by `bertkit export --format onnx`",
                        folder)
    if backend == "torch" and is_export(folder) and not any((folder / n).is_file() for n in
                                                            ("model.safetensors", "pytorch_model.bin")):
        raise UserError("an ONNX export without torch weights: add --backend onnx", folder)
