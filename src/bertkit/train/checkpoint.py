"""Training checkpoints: the model in Hugging Face's layout plus everything needed to resume.

A checkpoint is a folder `RUN_DIR/checkpoints/step-XXXXXXX/` holding
- config.json + model.safetensors (+ the tokenizer files): loadable as a model on its own;
- optimizer.safetensors: AdamW's per-parameter tensors, flattened to `state.{i}.{name}` keys;
- trainer_state.json: the step, the data position, the optimizer's group hyper-parameters and
  anything else the loop passes as scalars.
No pickles anywhere, so loading a checkpoint never runs code. The folder is written under a
temporary name and renamed into place (`bertkit.io.atomic_dir`), so a folder named `step-*` is
always complete; a crash mid-write leaves only a hidden `.step-*.tmp` folder that is ignored.
A write the disk refuses (full, over a size limit, failing) raises `bertkit.io.WriteError` naming
the file, with the checkpoint that is kept, so the CLI says both in one line; the newest complete
checkpoint stays as it was (`check_checkpoint_space` refuses a run that cannot hold `keep` of them).

`write_state` / `read_state` are the same guarantees for any training state (fine-tuning's seeds):
named tensors in one safetensors file (storage shared by several names written once) and a JSON
state written last, with `rng_state` / `set_rng_state` for every generator a step draws from.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from bertkit.errors import UserError
from bertkit.io import WriteError, atomic_dir, check_free_space, read_json, size_text, write_json, writing

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
    try:
        with atomic_dir(dest) as tmp:
            model.save_pretrained(tmp, tokenizer=tokenizer)
            with writing(tmp / "optimizer.safetensors"):
                save_file(tensors, str(tmp / "optimizer.safetensors"))
            # Written last: its presence marks a folder whose every file was written.
            write_json(tmp / "trainer_state.json", {**state, "step": step, "optimizer_groups": groups})
    except WriteError as e:
        kept = latest_checkpoint(run_dir)
        e.kept = f"the checkpoint of step {kept.step} in {kept.path}" if kept else "no checkpoint of this run yet"
        raise
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


def state_bytes(model: torch.nn.Module, copies: float = 3.0) -> int:
    """Bytes of a checkpoint of `model`: its tensors `copies` times (weights, and AdamW's two moments)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}.values()
    return int(copies * sum(t.numel() * t.element_size() for t in tensors))


def check_checkpoint_space(run_dir: str | Path, model: torch.nn.Module, keep: int, flag: str = "--out") -> None:
    """Refuse a run whose file system cannot hold its checkpoints (`keep` of them, one more while the
    next is written, and the final model): a UserError with the numbers, before the first step."""
    one = state_bytes(model)
    count = (keep if keep > 0 else 2) + 1
    needed = count * one + state_bytes(model, 1.0)
    check_free_space(run_dir, needed, f"{count} checkpoints of {size_text(one)} and the final model", flag)


# ---- any training state: named tensors + JSON ----
STATE_TENSORS = "state.safetensors"
STATE_JSON = "trainer_state.json"


def _unshared(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors safetensors can write, {name: the name it is the same tensor as}): a tensor seen
    under an earlier name (tied weights) is written once; one that only overlaps another is copied."""
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    exact: dict[tuple, str] = {}
    storages: set[int] = set()
    for name, t in tensors.items():
        t = t.detach().to("cpu")
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if t.numel() and key in exact:
            aliases[name] = exact[key]
            continue
        if t.numel() and (key[0] in storages or not t.is_contiguous()):
            t = t.contiguous().clone()
        exact[key] = name
        storages.add(t.untyped_storage().data_ptr())
        unique[name] = t
    return unique, aliases


def write_state(dest: str | Path, tensors: dict[str, torch.Tensor], state: dict) -> Path:
    """`dest` holding `tensors` (state.safetensors) and `state` (trainer_state.json, written last),
    atomically: a folder of that name is always complete."""
    dest = Path(dest)
    unique, aliases = _unshared(tensors)
    with atomic_dir(dest) as tmp, writing(tmp / STATE_TENSORS):
        save_file(unique, str(tmp / STATE_TENSORS))
        write_json(tmp / STATE_JSON, {**state, "aliases": aliases})
    return dest


def read_state(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, state) of a folder `write_state` wrote; a UserError naming a file that is unreadable."""
    path = Path(path)
    try:
        tensors = load_file(str(path / STATE_TENSORS))
    except Exception as e:  # safetensors raises several types for a corrupt file
        raise UserError(f"cannot read the saved training state: {e}", path / STATE_TENSORS) from None
    state = read_json(path / STATE_JSON, "a training state")
    for alias, name in state.pop("aliases", {}).items():
        tensors[alias] = tensors[name]
    return tensors, state


def optimizer_tensors(optimizer: torch.optim.Optimizer, prefix: str = "optimizer.") -> tuple[dict, list[dict]]:
    """AdamW's per-parameter tensors under `prefix`, and its groups' settings (JSON)."""
    tensors, groups = _flatten_optimizer(optimizer)
    return {prefix + k: v for k, v in tensors.items()}, groups


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict, groups: list[dict],
                      prefix: str = "optimizer.") -> None:
    own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    optimizer.load_state_dict(_unflatten_optimizer(own, groups))


def rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    """Every global generator a training step may draw from: torch's (CPU and each initialised CUDA
    device), numpy's and Python's; (tensors, JSON) for `write_state`."""
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors.update({f"rng.cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    tensors["rng.numpy"] = torch.from_numpy(keys.astype(np.int64))
    tensors["rng.python"] = torch.tensor(internal, dtype=torch.int64)
    return tensors, {"numpy": [kind, int(pos), int(has_gauss), float(gauss)], "python": [version, gauss_next]}


def set_rng_state(tensors: dict[str, torch.Tensor], state: dict) -> None:
    """Put back what `rng_state` saved: the next draw of every generator is the one it would have been."""
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    kind, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, tensors["rng.numpy"].numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, gauss_next = state["python"]
    random.setstate((version, tuple(tensors["rng.python"].tolist()), gauss_next))


__all__ = ["Checkpoint", "check_checkpoint_space", "checkpoint_dir", "latest_checkpoint", "list_checkpoints",
           "load_optimizer", "optimizer_tensors", "read_state", "remove_partial", "restore_optimizer", "rng_state",
           "save_checkpoint", "set_rng_state", "state_bytes", "write_model_copy", "write_state"]
