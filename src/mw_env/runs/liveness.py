"""Whether a run's process is alive, as `train status` and `watch` judge it (read-only: /proc and the run's files).

A detached run by run.json's supervisor and its exit record; a foreground run (no run.json) by its trainer's pid
in state.json while the state says it is on its way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.rundir import runstate
from mw_env.runs.anomalies import Liveness
from mw_env.runs.runs import RunRecord, is_alive, read_exit
from mw_env.runs.supervise import RUN_DIR_ENV, proc_stat, processes_of_folder


def liveness(record: RunRecord | None, out_dir: Path) -> Liveness:
    if record is None:
        return foreground_liveness(out_dir)
    ended = read_exit(out_dir)
    alive = ended is None and is_alive(record)
    return Liveness(
        alive=alive,
        pid=record.child_pid or record.pid,
        returncode=ended.returncode if ended else None,
        signal=ended.signal if ended else None,
        oom_kills=ended.oom_kills if ended else 0,
        exit_recorded=ended is not None,
        stop_requested=bool(record.stop),
        memory_need=record.memory_need,
        memory_lower=record.memory_lower,
    )


def foreground_liveness(out_dir: Path) -> Liveness:
    """A foreground run (no run.json): its trainer's pid from state.json while on its way; gone from there is
    `vanished` (docs/runs.md, exit 12), which a SIGKILLed foreground run was not (`dead`, exit 0)."""
    life = runstate.read_state(out_dir) or {}
    if life.get("state") not in ("running", "stopping", "finishing"):
        return Liveness(alive=None)
    pid = life.get("pid")
    return Liveness(alive=life_alive(life, Liveness(alive=None)), pid=pid if isinstance(pid, int) else None)


def life_alive(life: Mapping[str, object], liveness: Liveness) -> bool:
    """The process that wrote state.json is still there (a foreground run: judged by its pid)."""
    if liveness.alive is not None:
        return liveness.alive
    pid = life.get("pid")
    stat = proc_stat(pid) if isinstance(pid, int) and pid > 0 else None
    return stat is not None and stat[0] not in ("Z", "X", "x")


def orphan_run(out_dir: Path) -> None:
    """No run record in `out_dir`: InputError (exit 2) naming the processes of a run started there, if any are
    alive (its folder deleted or replaced under it), so `status`/`watch` never say "no run" of a live one."""
    pids = processes_of_folder(out_dir)
    if pids:
        raise InputError(
            f"no run record in {out_dir}, but {len(pids)} process(es) of a run started there are alive (pids "
            f"{', '.join(map(str, pids[:8]))}, found by {RUN_DIR_ENV} in their environment): its folder was "
            "deleted or replaced under it",
            hint=f"`mw-env train stop {sh(out_dir)}` stops them",
        )


__all__ = ["foreground_liveness", "life_alive", "liveness", "orphan_run"]
