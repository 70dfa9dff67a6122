"""The conditions a measurement was made under, recorded with every cell: CPU model and the flags
that decide its kernels, the instruction-set limits in force, threads, and the load beside it."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

# The flags that change which kernels PyTorch and oneDNN run
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni", "avx_vnni")
LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, tuple[str, ...]]:
    name, flags = platform.processor() or platform.machine(), ()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return name, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            name = value.strip()
        elif key.strip() == "flags":
            flags = tuple(f for f in KERNEL_FLAGS if f in value.split())
            break
    return name, flags


def cpu_key() -> str:
    """What a calibration is valid for: the CPU model, its kernel flags, the limits in force and
    this process's thread count."""
    import torch

    name, flags = _cpuinfo()
    limits = ",".join(f"{k}={os.environ[k]}" for k in LIMITS if k in os.environ)
    return f"{name} [{' '.join(flags)}]" + (f" limited {limits}" if limits else "") + \
        f", {torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''}"


def machine() -> dict:
    """This process's conditions: CPU, flags, limits, cores, threads, load average."""
    name, flags = _cpuinfo()
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    import torch

    return {"cpu": name, "flags": list(flags), "limits": {k: os.environ[k] for k in LIMITS if k in os.environ},
            "cores": os.cpu_count(), "threads": torch.get_num_threads(), "load": load}
