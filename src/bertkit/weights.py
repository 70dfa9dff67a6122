"""A model directory's tensors, read from the file as it is: `model.safetensors`, or
`pytorch_model.bin` read with `torch.load(weights_only=True)`, which unpickles only tensors and
plain containers. Names are the file's own; `bertkit.hf` maps them to ours.

torch is imported inside functions, and `weight_shapes` reads a safetensors header with numpy
alone, so `bertkit info` reads a directory without torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bertkit.errors import UserError

if TYPE_CHECKING:
    from torch import Tensor

WEIGHTS = "model.safetensors"
PICKLED_WEIGHTS = "pytorch_model.bin"


def read_state_dict(model_dir: Path) -> dict[str, Tensor]:
    st, binary = model_dir / WEIGHTS, model_dir / PICKLED_WEIGHTS
    if st.exists():
        from safetensors.torch import load_file

        try:
            return load_file(st)
        except Exception as e:  # safetensors raises several types for a corrupt file
            raise UserError(f"cannot read weights: {_first_line(e)}", st) from None
    if binary.exists():
        return _read_pickled(binary)
    raise UserError(f"no {WEIGHTS} or {PICKLED_WEIGHTS}", model_dir)


def _read_pickled(path: Path) -> dict[str, Tensor]:
    import pickle
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols would add lines to the one-line error
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError("cannot read weights safely: the file holds pickled Python objects besides tensors, "
                        "which could run code, so it is not loaded; save a checkpoint you trust as "
                        "model.safetensors where it was made (transformers' save_pretrained writes one)",
                        path) from None
    except Exception as e:
        raise UserError(f"cannot read weights: {_first_line(e)}", path) from None


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def weight_shapes(model_dir: str | Path) -> dict[str, list[int]]:
    """File key -> shape for every tensor of a model directory; safetensors needs no torch here."""
    model_dir = Path(model_dir)
    weights = model_dir / WEIGHTS
    if not weights.exists():
        return {k: list(v.shape) for k, v in read_state_dict(model_dir).items()}
    from safetensors import safe_open

    try:
        with safe_open(str(weights), "np") as f:  # "np": reading names and shapes needs no torch
            return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - safe_open is no dict
    except Exception as e:  # safetensors raises several types for a corrupt file
        raise UserError(f"cannot read weights: {_first_line(e)}", weights) from None
