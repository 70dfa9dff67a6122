"""Shared pieces of the pretraining tests: a tiny model's flags and ways to run the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

# A model of ~20K parameters: hidden 32, 2 layers, intermediate 37, 32 positions.
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
        "max_position_embeddings": 32}


def tiny_args(data: Path, out: Path, *extra: str, **config) -> list[str]:
    return ["pretrain", "--data", str(data), "--out", str(out), "--preset", "tiny", "--batch-size", "13",
            "--lr", "2e-3", "--config-json", json.dumps({**TINY, **config}), *extra]


def env() -> dict:
    # One thread per process (OpenMP and MKL: either may be set by the caller): the same
    # arithmetic in every run, and no oversubscribed CPU.
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def start(args: list[str], *launcher: str) -> subprocess.Popen:
    """`bertkit ARGS` as a user would type it, in a child process."""
    command = [sys.executable, *(launcher or ("-m",)), "bertkit.cli", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())


def run(args: list[str], *launcher: str, timeout: float = 120) -> subprocess.CompletedProcess:
    p = start(args, *launcher)
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(Path(model_dir) / "model.safetensors"))


def assert_bit_identical(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    differing = [k for k in wa if not torch.equal(wa[k], wb[k])]
    worst = max(((wa[k] - wb[k]).abs().max().item(), k) for k in differing) if differing else None
    assert not differing, f"{len(differing)} tensors differ, largest |diff| {worst}"
