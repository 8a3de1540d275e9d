"""Whether a run's process is alive, as `train status`, `watch` and `verify` judge it (read-only: /proc and the
run's files).

A detached run by run.json's supervisor and its exit record; a foreground run (no run.json) by its trainer's pid
in state.json while the state says it is on its way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.rundir import runstate
from mw_env.rundir.contract import MANIFEST
from mw_env.rundir.occupants import (
    DETACHED_ENV,
    RUN_DIR_ENV,
    cmdline,
    other_launches,
    proc_stat,
    processes_of_folder,
)
from mw_env.runs.anomalies import Liveness
from mw_env.runs.runs import RunRecord, is_alive, read_exit, read_run

SUPERVISOR = "mw_env.runs.supervise"  # in the supervisor's command line


def detached_processes(out_dir: Path) -> list[int]:
    """The live processes of a detached run (`train start`: DETACHED_ENV in their environment) in `out_dir`:
    found so when its run.json is gone."""
    return sorted(pid for pid, env in other_launches(out_dir, mine=None).items() if env.get(DETACHED_ENV))


def trainer_of(pids: list[int]) -> int | None:
    """The trainer (or torchrun) among a detached run's processes: not its supervisor."""
    return next((p for p in pids if SUPERVISOR not in cmdline(p)), pids[0] if pids else None)


def liveness(record: RunRecord | None, out_dir: Path) -> Liveness:
    if record is None:
        found = detached_processes(out_dir)
        if found:  # a detached run whose run.json is gone: alive, by its processes
            return Liveness(alive=True, pid=trainer_of(found))
        return foreground_liveness(out_dir)
    ended = read_exit(out_dir)
    alive = ended is None and is_alive(record)
    said = _last_words(runstate.read_state(out_dir))
    return Liveness(
        error=said[0],
        error_hint=said[1],
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
    pid = life.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
    # Only the trainer's own record of its end (runstate.record_failure, with its words): a foreground run has
    # no supervisor to record any other.
    ended = runstate.exit_facts(life) if life.get("state") == "exited" and "error" in life else None
    if ended is not None:
        # The trainer recorded its own end (runstate.record_failure): an error it printed, or a Ctrl-C.
        said = _last_words(life)
        code = ended.get("returncode")
        return Liveness(
            alive=False,
            pid=pid,
            returncode=code if isinstance(code, int) and not isinstance(code, bool) else None,
            exit_recorded=True,
            error=said[0],
            error_hint=said[1],
        )
    if life.get("state") not in ("running", "stopping", "finishing"):
        return Liveness(alive=None)
    return Liveness(alive=life_alive(life, Liveness(alive=None)), pid=pid)


def _last_words(life: Mapping[str, object] | None) -> tuple[str | None, str | None]:
    """The `error` and `hint` the trainer recorded in state.json when it stopped on an error (text, bounded)."""
    from mw_env.base.textsafe import safe_message

    life = life or {}
    error, hint = life.get("error"), life.get("hint")
    return (
        safe_message(error) if isinstance(error, str) and error else None,
        safe_message(hint) if isinstance(hint, str) and hint else None,
    )


def life_alive(life: Mapping[str, object], liveness: Liveness) -> bool:
    """The process that wrote state.json is still there (a foreground run: judged by its pid)."""
    if liveness.alive is not None:
        return liveness.alive
    pid = life.get("pid")
    stat = proc_stat(pid) if isinstance(pid, int) and pid > 0 else None
    return stat is not None and stat.alive


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


def check_verifiable(out_dir: Path) -> None:
    """InputError unless the run in `out_dir` is finished (`train verify`): MANIFEST.sha256 is the last file a
    run writes, so checking it against a run still going, or killed, lists differences that are not."""
    out_dir = Path(out_dir).resolve()
    life = runstate.read_state(out_dir)
    record = read_run(out_dir)
    current = (life or {}).get("state")
    if current == "finished" or (life is None and record is None):
        return
    if life is not None and current == "exited" and "during" not in life and life.get("returncode") == 0:
        return  # written before runs had states (the supervisor's bare exit record): judge by the manifest
    alive = is_alive(record) if record is not None else life_alive(life or {}, Liveness(alive=None))
    earlier = (
        f"; the {MANIFEST} there is from an earlier finish and does not cover this attempt's files"
        if (out_dir / MANIFEST).is_file()
        else ""
    )
    if alive:
        raise InputError(
            f"the run in {out_dir} is still {current or 'running'}: {MANIFEST} is written last, when the "
            f"report is complete{earlier}",
            hint=f"wait for it: `mw-env train watch {sh(out_dir)}` ends when it has finished; then verify",
        )
    if current == "killed":
        good = (life or {}).get("last_good_checkpoint")
        raise InputError(
            f"the run in {out_dir} was killed by `mw-env train stop` while {(life or {}).get('during', 'running')}: "
            f"this attempt wrote no report or manifest{earlier}",
            hint=f"`mw-env train start` with the same config resumes from {good or 'step 0'} and writes them "
            "when it finishes; report/stop.md says what happened",
        )
    if current in ("exited", "running", "stopping", "finishing"):
        during = (life or {}).get("during") or current
        raise InputError(
            f"the run in {out_dir} ended without finishing (it was {during}){earlier}",
            hint=f"`mw-env train status {sh(out_dir)}` says why; start it again with the same config to finish",
        )
