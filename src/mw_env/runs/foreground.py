"""A foreground run: start the trainer (python or torchrun) from `mw-env train`, relay torchrun's stderr through
its filter, and turn the outcome into the documented exit code. The CLI only renders; this owns the process.

No orphans: the child gets PR_SET_PDEATHSIG (mw_env.lifeline), so a SIGKILL of `mw-env train` kills it too
(torchrun's workers follow torchrun the same way); SIGTERM and SIGHUP of `mw-env train` (docker stop, systemd,
a closed terminal) are forwarded as SIGTERM, the trainer's graceful stop (finish the step, checkpoint, exit 0),
and `mw-env train` waits for it.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mw_env.errors import EXIT_FAILED, EXIT_INTERRUPTED, StepFailed
from mw_env.lifeline import preexec
from mw_env.runs.torchrun_output import TorchrunStderr

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def run_foreground(launch: Any, *, write: Callable[[str], None]) -> int:
    """Run `launch` (a runs.launch.Launch) to its end; `write` receives each relayed stderr line."""
    torchrun = Path(launch.argv[0]).name == "torchrun"
    # Under torchrun its own failure traceback is filtered out and the workers' exit code kept.
    proc = subprocess.Popen(
        launch.argv,
        env=launch.env,
        cwd=launch.cwd,
        stderr=subprocess.PIPE if torchrun else None,
        text=True if torchrun else None,
        errors="replace" if torchrun else None,
        preexec_fn=preexec(signal.SIGKILL),
    )
    filt = None
    forwarded: list[int] = []
    try:
        with _forwarding(proc, forwarded):
            if torchrun:
                filt = relay_torchrun_stderr(proc, write=write)
            code = proc.wait()
    except KeyboardInterrupt:
        # The trainer shares our terminal's process group, so it got the same Ctrl-C; let it exit.
        if torchrun and proc.stderr is not None:
            for _ in proc.stderr:  # keep draining, or workers writing their last lines block
                pass
        proc.wait()
        return EXIT_INTERRUPTED
    if filt is not None:
        if forwarded and filt.signalled and code == 1 and _finished_stopped(launch.out_dir):
            # torchrun exits 1 after passing our SIGTERM on, even when every worker stopped cleanly (this
            # node's metrics end with the `finished` "stopped" event): that is the documented exit 0.
            return 0
        code = filt.exit_code(code)
    if code < 0:
        raise StepFailed(
            f"the trainer was killed by signal {-code}",
            hint=f"exit 137/SIGKILL often means the host ran out of memory; resume with the same command "
            f"(the newest checkpoint in {launch.out_dir / 'checkpoints'} is used)",
        )
    if code not in (0, 1, 2, EXIT_INTERRUPTED):
        return EXIT_FAILED
    return code


def _finished_stopped(out_dir: Path) -> bool:
    """The run folder's last event is `finished` with reason "stopped" (a graceful stop completed)."""
    import json

    try:
        with open(Path(out_dir) / "metrics.jsonl", "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 4096))
            last = fh.read().decode(errors="replace").strip().splitlines()[-1]
        event = json.loads(last)
    except (OSError, IndexError, ValueError):
        return False
    return isinstance(event, dict) and event.get("event") == "finished" and event.get("reason") == "stopped"


@contextlib.contextmanager
def _forwarding(proc: subprocess.Popen[Any], forwarded: list[int]) -> Iterator[None]:
    """While the child runs, SIGTERM/SIGHUP of this process become a SIGTERM of the child (not our death)."""

    def forward(signum: int, _frame: Any) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)

    old = {}
    for signum in FORWARDED:
        with contextlib.suppress(ValueError):  # not the main thread (tests): leave the handlers alone
            old[signum] = signal.signal(signum, forward)
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


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
