"""The detached run's supervisor.

`python -m mw_env.runs.supervise REPORT_FD` (started by `mw-env train start`, in its own
session) reads {argv, env, cwd, run_dir} on stdin, starts the trainer as its child, reports the
child's pid on REPORT_FD, forwards SIGTERM/SIGINT to it and, when it ends, writes `state.json`
(return code or signal, and whether the cgroup's OOM killer fired). Without it an orphaned
trainer's exit status is lost: nobody would be left to tell "killed by SIGKILL" from "exited 1".
Stdlib only: it runs under mw-env's own interpreter, not the venv's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from mw_env.rundir.contract import LOG_FILE
from mw_env.rundir.runstate import record_exit, set_state
from mw_env.runs.procinfo import cgroup_oom_kills
from mw_env.runs.startup import signal_ended, stopped_at_start_up, torchrun_output

# state.json (runstate.py): the supervisor writes "running" once the trainer is started and adds the
# exit facts when it ended; the trainer moves it through stopping/finishing/finished in between.


def supervise(report_fd: int) -> int:
    """Start the trainer from the spec on stdin, forward stop signals, record how it ended."""
    spec = json.loads(sys.stdin.read())
    sys.stdin.close()
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []
    sent: list[int] = []
    torchrun = Path(spec["argv"][0]).name == "torchrun"

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)
            return
        # A detached run has no Ctrl-C: SIGINT asks it to stop, as SIGTERM does (the graceful stop, exit 0).
        # Under torchrun the workers get it themselves: torchrun, given it, would end with exit 1 and its
        # own traceback in train.log, and SIGKILL the workers 30 s later (issue 22).
        from mw_env.runs.foreground import stop_targets

        sent.append(signum)
        for pid in stop_targets(child.pid) if torchrun else [child.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    oom_before = cgroup_oom_kills()
    log_start = _size_of(1)  # this run's part of train.log (our stdout) begins here
    try:
        child = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec.get("cwd"), stdin=subprocess.DEVNULL)
    except OSError as exc:
        os.write(
            report_fd, (json.dumps({"error": f"{spec['argv'][0]}: {exc.strerror or exc}"}) + "\n").encode()
        )
        os.close(report_fd)
        print(f"mw-env: could not start {spec['argv'][0]}: {exc}", flush=True)
        return 127
    started = time.time()
    os.write(report_fd, (json.dumps({"child_pid": child.pid}) + "\n").encode())
    os.close(report_fd)
    run_dir = Path(spec["run_dir"])
    set_state(run_dir, "running", child_pid=child.pid)
    folder = _identity(run_dir)
    for early in pending:
        forward(early, None)
    returncode = child.wait()
    if _identity(run_dir) != folder:
        # Deleted or replaced under the run (the trainer stopped for it, trainer/folderwatch.py): a record
        # written now would recreate the folder, or land in another run's.
        print(
            f"mw-env: the run folder {run_dir} was deleted or replaced while the run was alive; the trainer's "
            f"exit ({returncode}) is not recorded there",
            flush=True,
        )
        return 0
    if torchrun and returncode > 0:
        from mw_env.runs.foreground import ended_cleanly

        if ended_cleanly(run_dir):
            # As in the foreground: torchrun ends 1 after a stop reached it (ours, passed to the workers, or
            # one sent to torchrun itself) even when every worker stopped or finished cleanly; the run's last
            # event says how it ended.
            how = " after the stop was passed on" if sent else ""
            print(
                f"mw-env: torchrun ended with exit {returncode}{how}; every worker ended cleanly (the run's "
                "last event is `finished`)",
                flush=True,
            )
            returncode = 0
    ours = sent and returncode != 0
    if ours and torchrun:
        ours = signal_ended(returncode, torchrun_output(run_dir / LOG_FILE, log_start))
    elif ours:
        ours = returncode < 0  # the trainer itself, killed by the signal before it could take it
    said = stopped_at_start_up(run_dir, since=started) if ours else None
    if said is not None:
        print(f"mw-env: {said}", flush=True)
        returncode = 0
    oom_after = cgroup_oom_kills()
    oom = (oom_after - oom_before) if oom_before is not None and oom_after is not None else 0
    record_exit(
        run_dir,
        returncode=returncode if returncode >= 0 else None,
        signal=-returncode if returncode < 0 else None,
        oom_kills=max(0, oom),
        child_pid=child.pid,
    )
    return 0


def _size_of(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def _identity(folder: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 1 and args[0].isdigit():
        return supervise(int(args[0]))
    print("usage: python -m mw_env.runs.supervise REPORT_FD (started by `mw-env train start`)")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
