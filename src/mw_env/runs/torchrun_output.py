"""Filter torchrun's own stderr so a multi-process run fails like a single-process one.

When a worker exits non-zero, torchrun prints its agent's log lines, a Python traceback of its own
(`ChildFailedError`) and a failure table, then exits 1, whatever the workers' codes were. The workers
have already printed their `error:`/`hint:` lines, so that block is noise that looks like a crash, and
the exit 1 hides a bad input (2). This filter drops torchrun's agent output, passes everything the
workers print (their own tracebacks included), prints each identical `error:`/`hint:` line once (every
rank reports the same bad input) and reads the workers' exit codes from the failure table (or, where
torchrun died before printing one, from the workers' own WORKER_EXIT lines).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

from mw_env.rundir.contract import PEER_LOST, WORKER_EXIT

# torchrun's agent logs through glog-style lines: "W1130 05:38:07.597000 4800 torch/distributed/run.py:874] ..."
_AGENT_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ torch/distributed/")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
# torchrun's own traceback when it is stopped by a signal (it has passed the signal on to its workers).
_SIGNALLED = "torch.distributed.elastic.multiprocessing.api.SignalException"
# The rendezvous gave up (timeout, closed, connection): the nodes never all met; said as one error instead.
_RENDEZVOUS = "torch.distributed.elastic.rendezvous."
# torchrun's agent lost the rendezvous store (the node that serves it is gone): a lost node, not a crash.
_STORE_LOST = ("torch.distributed.DistNetworkError", "torch.distributed.DistStoreError")
# A worker's own word on its exit status (trainer/__main__.py), for when torchrun prints no failure table: node 0's
# torchrun, done first, takes the rendezvous store down with it, and another node's torchrun then dies of the lost
# store before it tabulates its workers' codes (a bad input on every node ended in exit 1 on all but one).
# trainer/peers.py's words for a peer that went away. After another rank's own `error:` (rank 0: the disk is
# full) it is that failure's echo on the ranks left waiting for it, not a second cause: its advice to restart
# every node would be untrue. It goes to the log then; as the first error (a node lost) it is shown.
PEER_LOST_ERROR = f"error: {PEER_LOST}"  # as the CLI prints the trainer's error


@dataclass
class TorchrunStderr:
    """Feed torchrun's stderr line by line; `feed` returns the lines to show."""

    exit_codes: list[int] = field(default_factory=list)
    root_cause: int | None = None  # the first failure's code (the others are often torchrun's SIGTERM)
    _root_next: bool = False
    _traceback: list[str] | None = None
    _in_summary: bool = False
    _said: set[str] = field(default_factory=set)
    _skip_frames: bool = False  # after a lost store: the C++ frames torch appends to its message
    signalled: bool = False  # torchrun itself ended by a signal (SIGTERM/SIGHUP passed on to the workers)
    rendezvous_error: str | None = None  # the rendezvous's final exception line, when it failed
    store_lost: bool = False  # torchrun's agent lost the rendezvous store: the node serving it is gone
    dropped: list[str] = field(default_factory=list)  # torchrun's own lines: for <run>/torchrun.log
    worker_codes: list[int] = field(default_factory=list)  # the workers' WORKER_EXIT lines
    _echo_hint: bool = False  # the next hint belongs to a dropped PEER_LOST error

    @property
    def said_error(self) -> bool:
        """Whether a worker printed an `error:` line (the run's failure is explained)."""
        return any(line.startswith("error:") for line in self._said)

    def feed(self, line: str) -> list[str]:
        if self._in_summary:  # the failure table after ChildFailedError: keep only the codes
            self.dropped.append(line)
            if line.startswith("Root Cause"):
                self._root_next = True
            m = _EXITCODE.match(line)
            if m:
                self.exit_codes.append(int(m.group(1)))
                if self._root_next and self.root_cause is None:
                    self.root_cause = int(m.group(1))
            return []
        if self._traceback is not None:
            self._traceback.append(line)
            if line[:1].isspace() or not line.strip():
                return []  # still inside the traceback's frames
            block, self._traceback = self._traceback, None
            if line.startswith(_FAILED):
                self.dropped += block
                self._in_summary = True
                return []
            if line.startswith(_SIGNALLED):
                self.dropped += block
                self.signalled = True
                return []
            if line.startswith(_RENDEZVOUS):
                self.dropped += block
                self.rendezvous_error = line.rpartition(".")[2]
                return []
            if line.startswith(_STORE_LOST) and any("torch/distributed/elastic/" in f for f in block):
                self.dropped += block  # the agent's own traceback (a worker's would be mw-env's error)
                self.store_lost = True
                self._skip_frames = True
                return []
            return block  # a worker's own traceback: the user needs it
        if self._skip_frames and (
            line.startswith(("frame #", "Exception raised from")) or "<omitting" in line
        ):
            self.dropped.append(line)
            return []
        if line.startswith("Traceback (most recent call last):"):
            self._traceback = [line]
            return []
        if line.startswith(WORKER_EXIT):
            with contextlib.suppress(ValueError):
                self.worker_codes.append(int(line[len(WORKER_EXIT) :]))
            return []
        if _AGENT_LINE.match(line):
            self.dropped.append(line)
            return []
        if line.startswith(PEER_LOST_ERROR) and self.said_error:
            self.dropped.append(line)
            self._echo_hint = True
            return []
        if line.startswith("hint:") and self._echo_hint:
            self._echo_hint = False
            self.dropped.append(line)
            return []
        if line.startswith(("error:", "hint:")):
            self._echo_hint = False
            if line in self._said:
                return []
            self._said.add(line)
        return [line]

    def flush(self) -> list[str]:
        """Whatever is still buffered (a traceback cut short by the end of the stream)."""
        block, self._traceback = self._traceback or [], None
        return block

    def exit_code(self, torchrun_code: int) -> int:
        """The run's exit code: the first failing worker's (2 for bad input) rather than torchrun's 1."""
        if torchrun_code == 0:
            return 0
        if self.root_cause is not None and self.root_cause != 0:
            return self.root_cause
        failed = [c for c in self.exit_codes if c != 0] or [c for c in self.worker_codes if c != 0]
        return failed[0] if failed else torchrun_code
