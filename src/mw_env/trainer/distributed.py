"""DDP from torchrun's environment; a single-process launch creates no process group.

`RANK`/`WORLD_SIZE`/`LOCAL_RANK` come from torchrun. Backend: gloo on CPU, nccl on GPUs (the ROCm
build of torch maps "nccl" to RCCL). Helpers are no-ops when not distributed, so the loop is one code path.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from mw_env.base.errors import StepFailed
from mw_env.trainer.envcheck import check_environments

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    enabled: bool
    rank: int = 0
    local_rank: int = 0
    world: int = 1
    backend: str | None = None
    env_mismatch: str | None = None  # the nodes' environments differ and --allow-env-mismatch let it go on

    @property
    def main(self) -> bool:
        return self.rank == 0


def env_world() -> tuple[int, int, int] | None:
    """(rank, local_rank, world) when launched by torchrun with more than one process."""
    if "RANK" not in os.environ:
        return None
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), world


def init_distributed(*, backend: str, device_type: str, timeout_s: int) -> DistInfo:
    found = env_world()
    if found is None:
        return DistInfo(enabled=False)
    rank, local_rank, world = found
    chosen = backend if backend != "auto" else ("nccl" if device_type == "cuda" else "gloo")
    if chosen == "nccl" and device_type != "cuda":
        raise StepFailed(
            "dist.backend is nccl but the device is the CPU", hint="use dist.backend=gloo (or auto)"
        )
    # Every node in the same environment, or none starts (trainer/envcheck.py): before NCCL/RCCL meets a peer.
    mismatch = check_environments(rank=rank, world=world, timeout_s=timeout_s)
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    try:
        dist.init_process_group(chosen, timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as exc:
        raise StepFailed(
            f"could not start the {chosen} process group (rank {rank} of {world}): {exc}",
            hint="check MASTER_ADDR/MASTER_PORT and that every rank was launched (mw-env train --nproc-per-node N)",
        ) from None
    return DistInfo(
        enabled=True, rank=rank, local_rank=local_rank, world=world, backend=chosen, env_mismatch=mismatch
    )


def all_reduce(tensor: torch.Tensor, info: DistInfo, op: str = "sum") -> torch.Tensor:
    """In place over all ranks (sum | min | max); returns the tensor."""
    if not info.enabled:
        return tensor
    ops = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
    if info.backend == "nccl" and tensor.device.type != "cuda":
        # NCCL/RCCL reduce only device tensors: round-trip the small host scalars we sync.
        moved = tensor.to(torch.device("cuda", torch.cuda.current_device()))
        dist.all_reduce(moved, op=ops[op])
        tensor.copy_(moved.cpu())
        return tensor
    dist.all_reduce(tensor, op=ops[op])
    return tensor


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def gather_objects(obj: T, info: DistInfo) -> list[T]:
    """Every rank's `obj`, in rank order (picklable objects)."""
    if not info.enabled:
        return [obj]
    out = [obj] * info.world  # placeholders: all_gather_object fills every rank's slot
    dist.all_gather_object(out, obj)
    return out


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
