"""This process's place in a sharded run: rank, world size, local rank, device.

``init_distributed`` joins torchrun's or accelerate's process group (NCCL when each rank has a
GPU, else gloo); ``context_from_environment`` reads the rank without one; ``barrier``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the job: rank, world size, local rank, device."""

    rank: int
    world_size: int
    local_rank: int
    device: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | None = None) -> DistributedContext:
    """Join the process group that torchrun / accelerate describe in RANK, WORLD_SIZE,
    LOCAL_RANK (and MASTER_ADDR/PORT); a single process without them. Each rank uses
    cuda:LOCAL_RANK when CUDA is available and ``device`` is None or "cuda"."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and world > 1:
        device = f"cuda:{local_rank}"  # one GPU per rank, not every rank on cuda:0
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        torch.distributed.init_process_group(backend=backend)
    return DistributedContext(rank, world, local_rank, device)


def barrier(context: DistributedContext) -> None:
    if context.world_size > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()


def context_from_environment() -> DistributedContext:
    """This process's rank among torchrun's (RANK, WORLD_SIZE, LOCAL_RANK), no process group."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if not 0 <= rank < world:
        raise ValueError(f"RANK {rank} is not in 0..WORLD_SIZE-1 = {world - 1}")
    return DistributedContext(rank, world, local, "")


def shard_indices(count: int, rank: int, world_size: int) -> list[int]:
    """The indices of one rank: i with i mod world_size == rank."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world_size {world_size}")
    return list(range(rank, count, world_size))
