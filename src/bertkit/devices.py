"""`--device` for every command: "auto" picks CUDA, then Apple's MPS, then the CPU."""

from __future__ import annotations

import torch

from bertkit.errors import UserError


def resolve_device(name: str, allowed: tuple[str, ...] = ("cpu", "cuda", "mps")) -> torch.device:
    """The torch.device a `--device` value names; a UserError for an unknown or absent one."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if "mps" in allowed and mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in allowed:
        raise UserError(f"unknown device {name!r}; use auto, {', '.join(allowed)} (or cuda:N)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA GPU is available")
    return device
