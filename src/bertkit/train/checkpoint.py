"""Training checkpoints: the model in Hugging Face's layout plus everything needed to resume.

A checkpoint is a folder `RUN_DIR/checkpoints/step-XXXXXXX/` holding
- config.json + model.safetensors (+ the tokenizer files): loadable as a model on its own;
- optimizer.safetensors: AdamW's per-parameter tensors, flattened to `state.{i}.{name}` keys;
- trainer_state.json: the step, the data position, the optimizer's group hyper-parameters and
  anything else the loop passes as scalars.
No pickles anywhere, so loading a checkpoint never runs code. The folder is written under a
temporary name and renamed into place (`bertkit.io.atomic_dir`), so a folder named `step-*` is
always complete; a crash mid-write leaves only a hidden `.step-*.tmp` folder that is ignored.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertkit.errors import UserError
from bertkit.io import atomic_dir, write_json

_NAME = re.compile(r"^step-(\d{7,})$")
_FILES = ("config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json")


@dataclass
class Checkpoint:
    path: Path
    step: int
    state: dict  # trainer_state.json


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:07d}"


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict]]:
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for index, per_param in sd["state"].items():
        for name, value in per_param.items():
            value = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"state.{index}.{name}"] = value.detach().to("cpu").contiguous()
    return tensors, sd["param_groups"]


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], groups: list[dict]) -> dict:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    return {"state": state, "param_groups": groups}


def save_checkpoint(run_dir: str | Path, step: int, model, optimizer: torch.optim.Optimizer,
                    state: dict, tokenizer=None, keep: int = 2) -> Path:
    """Write the checkpoint for `step` atomically, then delete all but the newest `keep`."""
    dest = checkpoint_dir(run_dir, step)
    tensors, groups = _flatten_optimizer(optimizer)
    with atomic_dir(dest) as tmp:
        model.save_pretrained(tmp, tokenizer=tokenizer)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        # Written last: its presence marks a folder whose every file was written.
        write_json(tmp / "trainer_state.json", {**state, "step": step, "optimizer_groups": groups})
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old.path, ignore_errors=True)
    return dest


def list_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """The complete checkpoints of a run, oldest first; temporary and partial folders are skipped."""
    root = Path(run_dir) / "checkpoints"
    found = []
    for p in root.iterdir() if root.is_dir() else []:
        m = _NAME.match(p.name)
        if not m or not all((p / f).is_file() for f in _FILES):
            continue
        try:
            state = json.loads((p / "trainer_state.json").read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        found.append(Checkpoint(p, int(m.group(1)), state))
    return sorted(found, key=lambda c: c.step)


def remove_partial(run_dir: str | Path) -> None:
    """Delete the hidden temporary folders a run killed mid-save left behind."""
    root = Path(run_dir) / "checkpoints"
    for p in root.glob(".step-*.tmp") if root.is_dir() else []:
        shutil.rmtree(p, ignore_errors=True)


def latest_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_optimizer(checkpoint: Checkpoint, optimizer: torch.optim.Optimizer) -> None:
    """Restore AdamW's moments and step counts (moved to the parameters' device by torch)."""
    path = checkpoint.path / "optimizer.safetensors"
    try:
        tensors = load_file(str(path))
    except Exception as e:  # safetensors raises several types for a corrupt file
        raise UserError(f"cannot read optimizer state: {e}", path) from None
    optimizer.load_state_dict(_unflatten_optimizer(tensors, checkpoint.state["optimizer_groups"]))


def write_model_copy(source_model, dest: str | Path, tokenizer=None, readme: str | None = None) -> None:
    """The final model folder, written atomically like a checkpoint; `readme`: its model card's text."""
    with atomic_dir(dest) as tmp:
        source_model.save_pretrained(tmp, tokenizer=tokenizer)
        if readme is not None:
            (tmp / "README.md").write_text(readme, encoding="utf-8")


__all__ = ["Checkpoint", "checkpoint_dir", "latest_checkpoint", "list_checkpoints",
           "load_optimizer", "remove_partial", "save_checkpoint", "write_model_copy"]
