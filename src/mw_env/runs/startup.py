"""A stop that reaches a run before its trainer can take it: what the run's record then says (torch-free).

Under torchrun a SIGTERM in the seconds while torchrun (or its workers) still imports torch kills them by the
signal, or makes torchrun end 1 with nothing said; the detached supervisor recorded that as a crash (`dead`,
`vanished`, exit 12, with out-of-memory advice) and the foreground as "exit 1 without an error". It is the stop
asked for: the fault table's "stopped before the first step", exit 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat as stat_mod
import time
from pathlib import Path

from mw_env.base.atomic import open_append
from mw_env.base.errors import MwEnvError
from mw_env.rundir.contract import CHECKPOINT_GLOB, checkpoints_dir, metrics_path
from mw_env.runs.tail import recent_events
from mw_env.runs.torchrun_output import TorchrunStderr


def stopped_at_start_up(run_dir: Path, *, since: float) -> str | None:
    """Our stop ended the run before its first step, before the trainer could take it: a SIGTERM while torchrun
    (or its workers, or a single trainer) still imported torch kills it by the signal, or makes torchrun end 1.
    That is the stop asked for, not a crash (docs/reliability.md's fault table: "stopped before the first step",
    exit 0): the run's `finished` event (reason stopped, phase start-up) is written as the trainer would have,
    and the exit recorded as 0. Returns what to say, or None (judged as before) once a step or a `finished`
    event was written. A folder not made yet (a foreground start stopped that early) gets no event."""
    path = metrics_path(run_dir)
    if path.exists() and not path.is_file():
        return None  # a FIFO or a device planted there is never written to (it could block us)
    for event in recent_events(run_dir, 1 << 20):
        if event.get("event") in ("step", "finished"):
            moment = event.get("time")
            if not isinstance(moment, int | float) or moment >= since:
                return None
    ckpts = (
        sorted(checkpoints_dir(run_dir).glob(CHECKPOINT_GLOB)) if checkpoints_dir(run_dir).is_dir() else []
    )
    step = int(ckpts[-1].stem.split("-")[1]) if ckpts and ckpts[-1].stem.split("-")[1].isdigit() else 0
    event = {"event": "finished", "step": step, "reason": "stopped", "phase": "start-up", "time": time.time()}
    if run_dir.is_dir():
        try:
            with open_append(path) as fh:
                fh.write(json.dumps(event) + "\n")
        except (OSError, MwEnvError):  # MwEnvError: a node put where metrics.jsonl belongs is not written to
            return None
    kept = f"the checkpoints are kept (newest: {ckpts[-1].name})" if ckpts else "no checkpoint yet"
    return (
        "stopped by SIGTERM during start-up, before the trainer could take it (it was still importing torch): "
        f"nothing trained in this run; {kept}. Run the same command to start again."
    )


def signal_ended(returncode: int, torchrun: TorchrunStderr | None) -> bool:
    """The stop's own signal ended the run: a process killed by it (a negative code), or torchrun's exit 1 whose
    output says a worker was ended by a signal or torchrun itself got one; never when a worker said an error of
    its own (a real failure that happened to follow a stop keeps its exit)."""
    if torchrun is not None and torchrun.said_error:
        return False
    if returncode < 0:
        return True
    return torchrun is not None and (torchrun.signalled or any(c < 0 for c in torchrun.exit_codes))


def torchrun_output(log: Path, offset: int) -> TorchrunStderr:
    """torchrun's lines in a detached run's log from `offset` (its last MiB), read as the foreground reads them."""
    filt = TorchrunStderr()
    with contextlib.suppress(OSError):
        if stat_mod.S_ISREG(log.stat().st_mode):
            with open(log, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                fh.seek(max(offset, size - (1 << 20)))
                for line in fh.read().decode("utf-8", errors="replace").splitlines():
                    filt.feed(line)
    return filt
