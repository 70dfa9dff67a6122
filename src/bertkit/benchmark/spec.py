"""What a benchmark case is: its spec, the registry of cases, options and a built workload.

cases.py builds the model cases and data_cases.py the data-pipeline cases from these.
transformers is a test/bench dependency only: it is imported inside functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from bertkit.benchmark.timing import Contender
from bertkit.errors import UserError


@dataclass(frozen=True)
class CaseSpec:
    name: str
    kind: str  # "pretrain", "infer", "varlen" or "data"
    devices: tuple[str, ...]  # device types the case runs on
    batch: dict[str, int] = field(default_factory=dict)  # sequences per batch, by device type
    preset: str = "base"
    seq_len: int = 128
    task: str | None = None  # length distribution of a varlen case
    int8: bool = False  # bertkit runs dynamically quantized (CPU)
    batches: dict[str, int] = field(default_factory=dict)  # varlen: batches per timed step


CASES: dict[str, CaseSpec] = {c.name: c for c in (
    CaseSpec("pretrain-base-s128-b256", "pretrain", ("cuda",), {"cuda": 256}),
    CaseSpec("pretrain-base-s512-b64", "pretrain", ("cuda",), {"cuda": 64}, seq_len=512),
    CaseSpec("pretrain-large-s128-b128", "pretrain", ("cuda",), {"cuda": 128}, preset="large"),
    CaseSpec("pretrain-mini-s128-b32", "pretrain", ("cpu", "cuda"), {"cpu": 32, "cuda": 32}, preset="mini"),
    CaseSpec("infer-base-s128", "infer", ("cpu", "cuda"), {"cpu": 8, "cuda": 256}),
    CaseSpec("infer-base-s128-int8", "infer", ("cpu",), {"cpu": 8}, int8=True),
    *(CaseSpec(f"infer-varlen-{t}", "varlen", ("cpu", "cuda"), {"cpu": 8, "cuda": 128}, task=t,
               seq_len=384 if t == "squad" else 128, batches={"cpu": 3, "cuda": 8}) for t in ("sst2", "mrpc", "squad")),
    CaseSpec("data-prepare", "data", ("cpu",)),
    CaseSpec("data-masking", "data", ("cpu", "cuda"), {"cpu": 256, "cuda": 256}),
)}


@dataclass
class Workload:
    """A built case: its contenders (bertkit first, transformers second) and its size per step."""

    spec: CaseSpec
    contenders: list[Contender]
    sequences: int  # per step
    tokens: int  # real tokens per step
    flops: float | None  # useful FLOPs per step
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Options:
    device: torch.device
    compile: bool = False  # torch.compile bertkit (and add compiled transformers on CUDA)
    int8: bool = False  # quantize bertkit in every CPU inference case


def transformers_module():
    try:
        import transformers
    except ImportError:
        raise UserError("bench compares against transformers, which is not installed: "
                        "pip install 'bertkit[test]' (or pip install transformers)") from None
    transformers.logging.set_verbosity_error()
    return transformers


def autocast_for(device: torch.device):
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def selected(names: str | None, device: torch.device) -> list[CaseSpec]:
    """The named cases (comma-separated), or every case that runs on this device type."""
    if not names:
        return [c for c in CASES.values() if device.type in c.devices]
    out = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in CASES:
            raise UserError(f"unknown case {name!r}; cases: {', '.join(CASES)}")
        if device.type not in CASES[name].devices:
            raise UserError(f"case {name} runs on {'/'.join(CASES[name].devices)} only, not {device.type}")
        out.append(CASES[name])
    return out
