"""A foreground run: start the trainer (python or torchrun) from `mw-env train`, relay torchrun's stderr through
its filter, and turn the outcome into the documented exit code. The CLI only renders; this owns the process.

No orphans: the child gets PR_SET_PDEATHSIG (mw_env.base.lifeline), so a SIGKILL of `mw-env train` kills it too
(torchrun's workers follow torchrun the same way); SIGTERM and SIGHUP of `mw-env train` (docker stop, systemd,
a closed terminal) are forwarded as SIGTERM, the trainer's graceful stop (finish the step, checkpoint, exit 0),
and `mw-env train` waits for it. SIGINT is passed on as SIGINT: a terminal's Ctrl-C reaches the trainer
with us (one process group) and a `kill -INT` of `mw-env train` alone reaches only us; the trainer takes
the first SIGINT and ignores a second (trainer/__main__.py), so passing every one on stops both alike.
The exit code is then the trainer's own: 130 when it was interrupted, 0 when it had finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from mw_env.base.errors import EXIT_FAILED, EXIT_INTERRUPTED, StepFailed
from mw_env.base.lifeline import preexec
from mw_env.rundir.contract import MANIFEST, checkpoints_dir, metrics_path
from mw_env.rundir.occupants import children
from mw_env.runs import rendezvous
from mw_env.runs.fit import oom_hint
from mw_env.runs.procinfo import cgroup_oom_kills, signal_name
from mw_env.runs.startup import signal_ended, stopped_at_start_up
from mw_env.runs.torchrun_output import TorchrunStderr

if TYPE_CHECKING:
    from mw_env.runs.launch import Launch


FORWARDED = (signal.SIGTERM, signal.SIGHUP)


class _StopBeforeLaunch(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stoppable_start(stopped: list[int]) -> Iterator[None]:
    """Around `mw-env train`'s own start (config, doctor): SIGTERM/SIGHUP end it cleanly, `stopped` gets the
    signal; the caller then says so and exits 0 (nothing ran, nothing to keep). After the block a signal is
    only recorded in `stopped` until run_foreground takes over (no instant where it would kill us)."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise _StopBeforeLaunch(signum)

    installed = []
    for signum in FORWARDED:
        with contextlib.suppress(ValueError):  # not the main thread (tests)
            signal.signal(signum, stop)
            installed.append(signum)
    try:
        yield
    except _StopBeforeLaunch as exc:
        stopped.append(exc.signum)
    finally:
        for signum in installed:
            signal.signal(signum, lambda s, _f: stopped.append(s))


def stopped_before_launch(signum: int) -> str:
    return (
        f"stopped by {signal_name(signum, number=True)} before the trainer started: nothing ran, nothing to keep; "
        "run the same command to start"
    )


def run_foreground(launch: Launch, *, write: Callable[[str], None], early: list[int] | None = None) -> int:
    """Run `launch` to its end; `write` receives each relayed stderr line. `early`:
    signals recorded before (stoppable_start): they stop the run before or right after its start."""
    early = early if early is not None else []
    if early:
        write(stopped_before_launch(early[0]))
        return 0
    torchrun = Path(launch.argv[0]).name == "torchrun"
    multi_nodes = launch.nodes if launch.nodes.multi else None
    started = rendezvous.started_file(launch.out_dir, launch.nodes.node_rank)
    if multi_nodes is not None:
        launch.out_dir.mkdir(parents=True, exist_ok=True)
        started.unlink(missing_ok=True)
        launch.env[rendezvous.STARTED_ENV] = str(started)
    oom_before = cgroup_oom_kills()
    forwarded: list[int] = []
    interrupted: list[int] = []  # SIGINTs passed on to the trainer
    box: list[subprocess.Popen[str]] = []
    # From before the start: a SIGTERM in between is passed on, never our death.
    handlers = contextlib.ExitStack()
    handlers.enter_context(_forwarding(box, forwarded, workers=torchrun, interrupted=interrupted))
    # Under torchrun its own failure traceback is filtered out and the workers' exit code kept.
    began = time.time()
    try:
        proc = subprocess.Popen(
            launch.argv,
            env=launch.env,
            cwd=launch.cwd,
            stderr=subprocess.PIPE if torchrun else None,
            text=True if torchrun else None,
            errors="replace" if torchrun else None,
            preexec_fn=preexec(signal.SIGKILL),
        )
    except BaseException:
        handlers.close()
        raise
    box.append(proc)
    if interrupted:  # a SIGINT came while the process started
        _pass_on(proc, signal.SIGINT, workers=torchrun)
    if early or forwarded:  # a signal came while the process started: pass it on now
        forwarded.extend(early)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    filt = None
    announcer = (
        rendezvous.Announcer(multi_nodes, started, write)
        if multi_nodes is not None
        else contextlib.nullcontext()
    )
    # Under torchrun the workers' own "interrupted" goes to torchrun's stderr: said once for them all.
    interrupted_line = (
        f"interrupted: the checkpoints in {checkpoints_dir(launch.out_dir)} stay; the same command resumes"
    )
    try:
        with handlers, announcer:
            if torchrun:
                filt = relay_torchrun_stderr(proc, write=write)
            code = proc.wait()
    except KeyboardInterrupt:
        # Where our handler could not be installed (not the main thread): the trainer shares our terminal's
        # process group, so it got the same Ctrl-C; let it exit.
        if torchrun and proc.stderr is not None:
            for _ in proc.stderr:  # keep draining, or workers writing their last lines block
                pass
        proc.wait()
        if torchrun:
            write(interrupted_line)
        return EXIT_INTERRUPTED
    if interrupted and (torchrun or code in (0, EXIT_INTERRUPTED, -signal.SIGINT)):
        # The trainer's own answer to the SIGINT: 130 interrupted, or 0 when it had finished first (torchrun
        # makes 1 of its workers' 130).
        if code != 0 and torchrun:
            write(interrupted_line)
        return 0 if code == 0 else EXIT_INTERRUPTED
    if filt is not None:
        log = rendezvous.write_log(launch.out_dir, filt.dropped)  # torchrun's tracebacks: the log, not here
        if multi_nodes is not None and filt.rendezvous_error and not started.exists():
            raise rendezvous.never_joined(multi_nodes, f"torchrun: {filt.rendezvous_error}; details in {log}")
        if multi_nodes is not None and filt.store_lost and code != 0 and not filt.said_error:
            raise rendezvous.store_lost(multi_nodes, launch.out_dir, log)
        if (forwarded or filt.signalled) and code != 0 and ended_cleanly(launch.out_dir):
            # torchrun exits 1 after passing a SIGTERM on (ours, or one sent to torchrun itself), even when
            # every worker stopped or finished cleanly (the metrics end with `finished`, the report is
            # complete): that is the documented exit 0.
            if not forwarded:
                write("torchrun was stopped by a signal and passed it on; every worker stopped cleanly")
            return 0
        ours = forwarded and code != 0 and signal_ended(code, filt)
        said = stopped_at_start_up(launch.out_dir, since=began) if ours else None
        if said is not None:
            write(said)  # our stop reached torchrun or its workers while they still imported torch
            return 0
        code = filt.exit_code(code)
        if code == EXIT_FAILED and not filt.said_error:
            # No worker said why (killed mid-write, torchrun's own failure): never an exit 1 without a word.
            raise StepFailed(
                f"the trainer's processes ended with exit 1 without an error of their own; torchrun's output is in {log}",
                hint=f"resume with the same command (the newest checkpoint in {checkpoints_dir(launch.out_dir)} is used)",
            )
    if code < 0 and forwarded and -code in (signal.SIGTERM, signal.SIGHUP):
        # Our SIGTERM reached the trainer before it could take it (its first instants): a stop before the
        # first step, which is what the user asked for, not a crash.
        write(stopped_before_launch(-code))
        return 0
    if code < 0:
        after = cgroup_oom_kills()
        oom = None if oom_before is None or after is None else after > oom_before
        raise killed(
            -code,
            launch.out_dir,
            sent=bool(forwarded),
            oom=oom,
            need=launch.memory_need,
            lower=launch.memory_lower,
        )
    if code not in (0, 1, 2, EXIT_INTERRUPTED):
        return EXIT_FAILED
    return code


def killed(
    signum: int,
    out_dir: Path,
    *,
    sent: bool,
    oom: bool | None,
    need: int | None = None,
    lower: str = "",
) -> StepFailed:
    """The error for a trainer killed by a signal: the OOM killer only when the kernel's cgroup counter
    says it killed (memory.events oom_kill went up during the run); a signal the user sent, never."""
    name = signal_name(signum, number=True)
    resume = f"resume with the same command (the newest checkpoint in {checkpoints_dir(out_dir)} is used)"
    if oom and not sent:
        return StepFailed(
            f"the trainer was killed by the kernel's out-of-memory killer ({name}; memory.events oom_kill rose)",
            hint=oom_hint(need, lower, resume),
        )
    who = "by a signal sent to it" if not sent else "after the signal mw-env passed on"
    record = (
        "the kernel recorded no out-of-memory kill"
        if oom is False
        else "the kernel's out-of-memory record is not readable here"
    )
    return StepFailed(
        f"the trainer was killed {who}: {name} (not by mw-env; {record})",
        hint=f"{resume}; a stop that keeps the step's work: SIGTERM or `mw-env train stop`",
    )


def ended_cleanly(out_dir: Path) -> bool:
    """The run folder's last event is `finished` (stopped, or the run's end with its report and manifest
    complete): a graceful end, whatever exit code torchrun made of the signal it passed on."""
    import json

    try:
        with open(metrics_path(out_dir), "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 4096))
            last = fh.read().decode(errors="replace").strip().splitlines()[-1]
        event = json.loads(last)
    except (OSError, IndexError, ValueError, RecursionError):
        return False
    if not (isinstance(event, dict) and event.get("event") == "finished"):
        return False
    if event.get("reason") == "stopped":
        return True
    try:  # any other end counts once the manifest (written last) is newer than the metrics
        return (Path(out_dir) / MANIFEST).stat().st_mtime >= (metrics_path(out_dir)).stat().st_mtime
    except OSError:
        return False


@contextlib.contextmanager
def _forwarding(
    box: list[subprocess.Popen[str]],
    forwarded: list[int],
    *,
    workers: bool,
    interrupted: list[int],
) -> Iterator[None]:
    """While the child runs, SIGTERM/SIGHUP of this process become a SIGTERM of the child (not our death),
    and a SIGINT a SIGINT of the child (recorded in `interrupted`), never a KeyboardInterrupt here: we wait
    for the trainer's own end, whose exit code says whether it was interrupted or had finished.

    Under torchrun (`workers`) the SIGTERM goes to the workers themselves: torchrun, given it, would pass it
    on and SIGKILL them 30 s later (its shutdown timeout), which can cut a stop checkpoint or the report on
    a slow disk; the workers stop on their own and torchrun then ends with them. Before the workers exist
    (the rendezvous), torchrun gets it."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        forwarded.append(signum)
        if not box:
            return  # not started yet: run_foreground passes it on once the process exists
        _pass_on(box[0], signal.SIGTERM, workers=workers)

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        interrupted.append(signum)
        if box:  # else run_foreground passes it on once the process exists
            _pass_on(box[0], signal.SIGINT, workers=workers)

    old = {}
    for signum in (*FORWARDED, signal.SIGINT):
        with contextlib.suppress(ValueError):  # not the main thread (tests): leave the handlers alone
            old[signum] = signal.signal(signum, interrupt if signum == signal.SIGINT else forward)
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _pass_on(proc: subprocess.Popen[str], signum: int, *, workers: bool) -> None:
    for pid in stop_targets(proc.pid) if workers else [proc.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def stop_targets(torchrun_pid: int) -> list[int]:
    """Who gets a stop under torchrun: the workers it runs now, else (before it started them) torchrun itself.

    Not torchrun while any worker runs: torchrun, given the signal, passes it on, ends 1 and SIGKILLs the
    workers 30 s later, which would cut rank 0's report after rank 1 has ended. (A worker torchrun starts
    after the signal does not get it; torchrun starts them all within a few milliseconds.)"""
    return children(torchrun_pid) or [torchrun_pid]


def relay_torchrun_stderr(proc: subprocess.Popen[str], *, write: Callable[[str], None]) -> TorchrunStderr:
    """Copy torchrun's stderr through the filter, line by line as it comes."""
    filt = TorchrunStderr()
    assert proc.stderr is not None
    for line in proc.stderr:
        for out in filt.feed(line.rstrip("\n")):
            write(out)
    for out in filt.flush():
        write(out)
    return filt
