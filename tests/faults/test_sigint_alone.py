"""A SIGINT to the `mw-env train` process alone (issue 30 #5): passed on to the trainer, which stops the way a
terminal's Ctrl-C stops it; the exit code is the trainer's own, never an "interrupted" 130 after a run that
finished. The stand-in trainers signal their parent themselves, so each SIGINT arrives at a known event
(before the child exits), never after a sleep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mw_env.base.errors import EXIT_INTERRUPTED
from mw_env.runs import foreground
from mw_env.runs.rendezvous import Nodes

# The child blocks SIGINT first, so the one passed on is waited for (sigwait), never lost before a pause().
INTERRUPTED = """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
os.kill(os.getppid(), signal.SIGINT)  # `kill -INT` of mw-env train alone
signal.sigwait({signal.SIGINT})  # the SIGINT mw-env passed on
print("interrupted", file=sys.stderr)
sys.exit(130)
"""
# A trainer that finished: the SIGINT came as it ended (it ignores it, as after its first).
FINISHED = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.kill(os.getppid(), signal.SIGINT)
sys.exit(0)
"""


@dataclass
class _Launch:
    argv: list[str]
    out_dir: Path
    env: dict = field(default_factory=lambda: dict(os.environ))
    cwd: Path = Path(".")
    nodes: Nodes = field(default_factory=Nodes)


def test_a_sigint_to_mw_env_alone_reaches_the_trainer(tmp_path: Path) -> None:
    said: list[str] = []
    code = foreground.run_foreground(
        _Launch([sys.executable, "-c", INTERRUPTED], tmp_path), write=said.append
    )
    assert code == EXIT_INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # ours again after the run


def test_a_sigint_as_the_run_finished_exits_0_not_130(tmp_path: Path) -> None:
    code = foreground.run_foreground(
        _Launch([sys.executable, "-c", FINISHED], tmp_path), write=lambda _l: None
    )
    assert code == 0


def test_the_trainer_takes_one_sigint_and_ignores_a_second() -> None:
    """A terminal's Ctrl-C reaches the trainer twice (from the terminal and passed on by mw-env train)."""
    script = """
import os, signal, sys
from mw_env.trainer.__main__ import _interrupt
signal.signal(signal.SIGINT, _interrupt)
try:
    os.kill(os.getpid(), signal.SIGINT)
    signal.pause()
except KeyboardInterrupt:
    os.kill(os.getpid(), signal.SIGINT)  # the second, during the clean-up
    print("cleaned up")
"""
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0 and "cleaned up" in res.stdout, res.stderr
