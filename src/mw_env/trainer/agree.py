"""What every rank must agree on before the first step: who owns the run folder, and which checkpoint to resume.

The run folder lock (mw_env.rundir.runlock) is taken by rank 0, the only rank that writes the folder; its outcome
is shared with every rank, so a refused run stops on all nodes at once instead of leaving the others waiting in
a collective.

The resume agreement: each rank finds the checkpoint it would load (the newest valid one in ITS run folder, or
--resume), and describes it by step, size and sha256 of the file; rank 0's choice is the run's, and every rank
must hold the very same file (and the same config). Otherwise the run stops on every rank with an `error:` that
names each node's newest checkpoint and the fix: a run folder shared by all nodes, or a copy of the checkpoint.
Without this, a node with a local run folder resumed at step 20 while another started at step 0, and they ran
collectives together on different weights and data. Every exchange is one all_gather under the process group's
timeout (dist.timeout_s), so a rank that dies on the way fails the others instead of hanging them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.errors import InputError, MwEnvError
from mw_env.rundir import runlock
from mw_env.rundir.contract import sha256_file
from mw_env.trainer.ckpt import checkpoint as ckpt_mod
from mw_env.trainer.ckpt.checkpoint import Found
from mw_env.trainer.distributed import DistInfo, gather_objects

if TYPE_CHECKING:
    from mw_env.trainspec.config import TrainConfig

# Raises (CheckpointError: skip to the previous one; InputError: stop) when a loaded checkpoint cannot serve.
Check = Callable[[Path, dict[str, Any]], None]


@contextlib.contextmanager
def run_lock(out_dir: Path, dist: DistInfo) -> Iterator[runlock.RunLock | None]:
    """Hold the run folder's lock on rank 0 for the body (yielded there; None on other ranks); every rank
    raises the same refusal."""
    lock: runlock.RunLock | None = None
    refused: tuple[str, str | None] | None = None
    if dist.main:
        try:
            lock = runlock.acquire(out_dir)
        except MwEnvError as exc:
            refused = (exc.message, exc.hint)
        except OSError as exc:
            refused = (
                f"cannot lock the run folder {out_dir}: {exc.strerror or exc}",
                "runtime.out_dir must be a writable folder",
            )
    refused = gather_objects(refused, dist)[0]
    if refused is not None:
        raise InputError(refused[0], hint=refused[1])
    from mw_env.trainer import lifecycle

    if lock is not None:
        lifecycle.own(Path(out_dir).resolve())  # its end (an error) is recorded in state.json by this process
    try:
        yield lock
    except BaseException as exc:
        if lock is not None:
            lifecycle.record_end(exc)  # while the folder is still ours
        raise
    finally:
        if lock is not None:
            lifecycle.own(None)
            lock.release()


# Settings that may differ between nodes: where each writes (a node-local folder is a layout, not a new run) and
# its CPU threads. Everything else decides what a step computes, so a difference stops the run.
PER_NODE_KEYS = (("runtime", "out_dir"), ("runtime", "threads"))


def config_fingerprint(config: TrainConfig) -> str:
    data = config.to_dict()
    for section, key in PER_NODE_KEYS:
        data.get(section, {}).pop(key, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _node_label(dist: DistInfo) -> str:
    """The node as the user numbered it (--node-rank), else torchrun's group rank."""
    node = os.environ.get("MW_ENV_NODE_RANK") or os.environ.get("GROUP_RANK") or "0"
    return f"node {node} ({socket.gethostname()}, rank {dist.rank})"


def _local(
    ckpt_dir: Path,
    *,
    resume: Path | None,
    fresh: bool,
    warn: Callable[[str], None] | None,
    check: Check | None = None,
) -> Found | None:
    """This rank's own answer: --resume (no fallback: its error is the answer), else the newest checkpoint that
    loads and passes `check` (each damaged newer one warned about and skipped), else None (step 0)."""
    if resume is not None:
        ckpt = ckpt_mod.load_checkpoint(resume)
        if check is not None:
            check(resume, ckpt)
        return resume, ckpt
    if fresh:
        return None
    found = ckpt_mod.find_latest(ckpt_dir, warn=warn, check=check)
    if found is None and (kept := ckpt_mod.list_checkpoints(ckpt_dir)):
        # Starting over here would write step-000000100.pt below the unusable newer names, and the rotation
        # would delete each new checkpoint as the oldest: refuse instead, keeping them all.
        raise ckpt_mod.CheckpointError(
            f"none of the {len(kept)} checkpoint(s) in {ckpt_dir} can be resumed (see the warnings above)",
            hint="--resume PATH names one to try, --fresh starts over (the old ones are kept, renamed)",
        )
    return found


def _describe_found(found: Found | None) -> dict[str, object] | None:
    if found is None:
        return None
    path = found[0]
    return {
        "step": int(found[1]["step"]),
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def agree_on_checkpoint(
    ckpt_dir: Path,
    dist: DistInfo,
    *,
    resume: Path | None,
    fresh: bool,
    config: TrainConfig,
    warn: Callable[[str], None] | None = None,
    check: Check | None = None,
) -> Found | None:
    """The checkpoint this rank resumes from (None: step 0), the same file on every rank; InputError if not."""
    if not dist.enabled:  # one process: nobody to agree with (and no file to hash)
        return _local(Path(ckpt_dir), resume=resume, fresh=fresh, warn=warn, check=check)
    found: Found | None = None
    mine: dict[str, Any] = {"node": _node_label(dist), "ckpt_dir": str(ckpt_dir)}
    try:
        found = _local(Path(ckpt_dir), resume=resume, fresh=fresh, warn=warn, check=check)
        mine["ckpt"] = _describe_found(found)
    except MwEnvError as exc:  # told to every rank below, so none waits for this one
        mine.update(error=exc.message, hint=exc.hint)
    except OSError as exc:
        mine.update(error=f"cannot read {exc.filename}: {exc.strerror}", hint="check the run folder")
    mine["config"] = config_fingerprint(config)
    everyone: list[dict[str, Any]] = gather_objects(mine, dist)
    failed = [r for r in everyone if "error" in r]
    if failed:
        raise InputError(
            "a rank cannot read the checkpoint it would resume from, so no rank starts: "
            + "; ".join(f"{r['node']}: {r['error']}" for r in failed),
            hint=failed[0].get("hint"),
        )
    if any(r["config"] != everyone[0]["config"] for r in everyone):
        raise InputError(
            "the nodes were launched with different configs (config sha256 "
            + ", ".join(f"{r['node']}: {r['config'][:12]}" for r in everyone)
            + ")",
            hint="launch every node with the same --config and --set values",
        )
    chosen = everyone[0]["ckpt"]
    key = (chosen["step"], chosen["sha256"]) if chosen else None
    if all(((r["ckpt"]["step"], r["ckpt"]["sha256"]) if r["ckpt"] else None) == key for r in everyone):
        return found
    raise InputError(
        "the nodes do not agree on the checkpoint to resume from, so none starts (a mixed-step run would "
        "train different weights on different data): " + "; ".join(_describe(everyone)),
        hint=_hint(everyone),
    )


def _describe(everyone: list[dict[str, Any]]) -> list[str]:
    """One entry per node and answer (the ranks of one node share a folder and say the same)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in everyone:
        node = r["node"].split(" (")[0]
        c = r["ckpt"]
        what = (
            f"newest checkpoint step {c['step']} ({c['path']}, {c['size']} bytes, sha256 {c['sha256'][:12]})"
            if c
            else f"no checkpoint in {r['ckpt_dir']}"
        )
        seen.setdefault((node, what), []).append(r["node"])
    return [f"{labels[0]}: {what}" for (_node, what), labels in seen.items()]


def _hint(everyone: list[dict[str, Any]]) -> str:
    have = [r["ckpt"] for r in everyone if r["ckpt"]]
    newest = max(have, key=lambda c: c["step"]) if have else None
    copy = (
        f"copy {newest['path']} (step {newest['step']}) into every node's checkpoints folder"
        if newest
        else "copy the checkpoint into every node's checkpoints folder"
    )
    return (
        "all nodes must load the same checkpoint: give every node the same run folder on a shared filesystem "
        f"(runtime.out_dir on NFS/CephFS/Lustre), or {copy}; --fresh on every node starts over at step 0"
    )
