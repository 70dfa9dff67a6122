"""Data parallelism under `torchrun`: process-group set-up and the global-batch split.

The same command runs on one process or N. Every rank reads the same global batch indices,
masks the whole micro-batch with the same seeded generator, and keeps only its own rows, so
the numbers do not depend on N. NCCL on GPU, gloo on CPU; only rank 0 writes files.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def rows(self, n: int) -> slice:
        """This rank's share of `n` rows (n divisible by world_size)."""
        per = n // self.world_size
        return slice(self.rank * per, (self.rank + 1) * per)


def init_distributed(device_kind: str) -> Dist:
    """Join the process group that torchrun describes in the environment (WORLD_SIZE > 1)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return Dist(rank, world, local)


def close_distributed(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()
        gc.collect()  # free the group's last owners now, not in interpreter shutdown (see pretrain())


def all_sum(t: torch.Tensor, d: Dist) -> torch.Tensor:
    """The sum over ranks (the tensor itself on one process)."""
    if d.enabled:
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def agree(values: list[float], d: Dist, device: torch.device) -> list[float]:
    """The maximum of each value over ranks, so every rank takes the same decision (stop now,
    time used so far) at the same step; the values themselves on one process."""
    if not d.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()
