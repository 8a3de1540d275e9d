"""A lost peer said as one: which node this is, whom it lost, the newest checkpoint, and to restart them all.

When a node of a multi-node run dies (killed, rebooted, unplugged), the others fail inside their next
collective with a transport error (gloo: `Connection reset by peer` in `barrier`; NCCL: a remote process
exited or the communicator was aborted). That RuntimeError, with its traceback, is the whole message a user
got; a restart of every node with the same command resumes correctly, but nothing said so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import StepFailed
from mw_env.rundir.contract import PEER_LOST

if TYPE_CHECKING:
    from mw_env.trainer.distributed import DistInfo

# Transport failures of gloo and NCCL that mean "the other side is gone", not a bug in the step.
_LOST = re.compile(
    r"connection reset by peer|connection closed by peer|broken pipe|read error|write error|"
    r"remote process exited|communicator was aborted|socket timeout|no route to host|connection refused|"
    r"timed out|timeout",
    re.IGNORECASE,
)
_ADDRESS = re.compile(r"\[([0-9A-Za-z.:-]+)\]:(\d+)")


def lost_peer(exc: BaseException, dist: DistInfo, ckpt_dir: Path) -> StepFailed | None:
    """The error for `exc` when it is a lost peer of a distributed run; None for anything else."""
    if not getattr(dist, "enabled", False) or not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if not _LOST.search(text):
        return None
    from mw_env.trainer.ckpt.checkpoint import latest_valid_checkpoint

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    nnodes = max(1, world // max(local, 1))
    node = int(os.environ.get("MW_ENV_NODE_RANK") or os.environ.get("GROUP_RANK") or 0)
    address = _ADDRESS.search(text)
    at = f" at {address.group(1)}:{address.group(2)}" if address else ""
    if nnodes > 1:
        others = [r for r in range(nnodes) if r != node]
        whom = (
            f"node-rank {others[0]}"
            if len(others) == 1
            else f"one of node-ranks {', '.join(map(str, others))}"
        )
        where = f"this is node {node} of {nnodes}; lost {whom}{at}"
    else:
        where = f"lost another process of this node{at}"
    try:
        newest = latest_valid_checkpoint(ckpt_dir)
    except Exception:  # a damaged folder must not hide the lost peer
        newest = None
    kept = f"the newest checkpoint is {newest}" if newest else "no checkpoint was written yet"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return StepFailed(
        f"{PEER_LOST} ({where}): {first[:200]}; {kept}",
        hint="a node or process stopped (killed, crashed or unreachable): restart every node with the same "
        "command (its own --node-rank); they resume together from the newest checkpoint",
    )
