"""`--device` for every command: "auto" picks CUDA, then Apple's MPS, then the CPU; `--precision`
(fp32, or bf16 autocast where the hardware computes bf16) and the one autocast context it means.

The commands whose outputs are compared or stored (embed, index, search, evaluate, serve) default
to fp32, as sentence-transformers, TEI and infinity do: "auto" would give other numbers on another
machine. Where bf16 would run natively, `bf16_note` is the line that says so."""

from __future__ import annotations

import contextlib
import os

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


# Instruction sets PyTorch and oneDNN may be held to: at or below AVX2 they run no bf16 kernels
_NO_BF16_CAPABILITIES = ("default", "avx2", "avx", "sse41", "sse42")


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 matrix products in hardware (AVX512-BF16 or AMX), from
    Linux's /proc/cpuinfo, and PyTorch may use them: ATEN_CPU_CAPABILITY or ONEDNN_MAX_CPU_ISA
    holding it to AVX2 or below (how an older CPU is approached on a new one) says no. False where
    /proc/cpuinfo cannot be read. Without them oneDNN emulates bf16, which is slower than fp32."""
    held = os.environ.get("ATEN_CPU_CAPABILITY", "").lower(), os.environ.get("ONEDNN_MAX_CPU_ISA", "").lower()
    if any(h in _NO_BF16_CAPABILITIES for h in held):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def resolve_precision(name: str, device: torch.device) -> str:
    """"fp32" or "bf16" for a `--precision` value; "auto" takes bf16 autocast where the device
    runs it fast (a CUDA GPU that supports it, a CPU with bf16 instructions), else fp32.

    On this project's 2-core AVX512-BF16 CPU, bf16 autocast makes a tiny BERT's training step
    1.7-2.2x faster with the same validation accuracy (README, "Pretraining recipes")."""
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if device.type == "cpu" and cpu_has_bf16() else "fp32"


PRECISIONS = ("auto", "fp32", "bf16")


def autocast(precision: str, device: torch.device | str):
    """The context a forward pass runs in for a resolved precision: bf16 autocast (weights stay
    fp32; matmuls in bf16, softmax and LayerNorm in fp32), or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def inference_precision(name: str, device: torch.device, int8: bool = False, backend: str = "torch") -> str:
    """The precision an inference command runs in: `resolve_precision`'s, except that int8 and the
    ONNX backend run their own kernels, so "auto" means fp32 for them and "bf16" is refused."""
    if int8 or backend != "torch":
        if name == "bf16":
            raise UserError("bf16 runs torch models under autocast: not with int8 or the ONNX backend")
        return "fp32"
    return resolve_precision(name, device)


# bf16 against fp32 where the CPU computes bf16 (AVX512-BF16; docs/cli.md#precision): all-MiniLM-L6-v2
# served 2.1x the requests/s (bench/README.md), its vectors at a cosine of 0.99998 or more to fp32's
# (docs/embeddings.md); ALBERT's shared layer deviates more (docs/results/albert-bf16/)
BF16_NOTE = ("precision fp32 (this CPU computes bf16: --precision bf16 is about 2x faster, its vectors at a cosine "
             "of 0.9999 to fp32's; docs/cli.md#precision)")


def bf16_note(device: str, int8: bool = False, backend: str = "torch") -> str | None:
    """The line for a command left at its fp32 default on a CPU that computes bf16 natively (where
    `--precision bf16` would run: torch weights, not int8); None elsewhere."""
    if int8 or backend != "torch" or resolve_device(device).type != "cpu" or not cpu_has_bf16():
        return None
    return BF16_NOTE
