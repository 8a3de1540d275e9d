"""A multi-node run: its options checked together (`check_nodes` -> `Nodes`), what it waits for, and who never
came.

torchrun's c10d rendezvous waits silently (join_timeout, 600 s by default) and then prints a 40-line
traceback. Here each node says within a second that it waits for the other nodes, at which endpoint and for
how long, and repeats it while it waits; the trainer touches a file when it starts (the rendezvous is then
complete). If torchrun gives up first, the error names the node ranks that did not join and the command to
run on them. torchrun's own tracebacks go to `<run>/torchrun.log`, not to the terminal.
"""

from __future__ import annotations

import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mw_env.base.atomic import open_append
from mw_env.base.errors import InputError, StepFailed
from mw_env.rundir import contract as rd
from mw_env.rundir.contract import CHECKPOINT_GLOB, PEER_LOST, TORCHRUN_LOG, checkpoints_dir

STARTED_ENV = "MW_ENV_STARTED_FILE"  # the trainer touches it when it starts: the rendezvous completed
# The first line comes at once, then one every REPEAT_S: often enough to see it is alive, rarely enough
# not to bury the rest of the terminal.
REPEAT_S = 15.0
DEFAULT_RDZV_TIMEOUT = 600


@dataclass(frozen=True)
class Nodes:
    """Where this node sits in a multi-node run (one node: the defaults, torchrun --standalone)."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_timeout: int = DEFAULT_RDZV_TIMEOUT  # seconds the nodes wait for each other at the rendezvous

    @property
    def multi(self) -> bool:
        return self.nnodes > 1

    def torchrun_args(self) -> list[str]:
        if not self.multi:
            return ["--standalone"]
        assert self.rdzv_endpoint is not None
        return [
            f"--nnodes={self.nnodes}",
            f"--node-rank={self.node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={self.rdzv_endpoint}",
            f"--rdzv-id={self.rdzv_id or default_rdzv_id(self.rdzv_endpoint)}",
            # join_timeout: how long this node waits for all the others (torchrun's default is 600 s, said
            # nowhere); mw-env says it while waiting (runs/rendezvous.py) and names the missing nodes after.
            f"--rdzv-conf=join_timeout={self.rdzv_timeout}",
        ]


_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))$")
_RDZV_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_nodes(
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    rdzv_timeout: int | None = None,
) -> Nodes:
    """Validate the multi-node options together; InputError naming the option and what is allowed."""
    if nnodes < 1:
        raise InputError(f"--nnodes {nnodes}: must be >= 1")
    if nnodes == 1:
        given = [n for n, v in (("--rdzv-endpoint", rdzv_endpoint), ("--rdzv-id", rdzv_id)) if v]
        if node_rank:
            given.insert(0, "--node-rank")
        if given:
            raise InputError(
                f"{', '.join(given)} need --nnodes N with N > 1",
                hint="one node needs no rendezvous; for several, pass --nnodes N --node-rank R "
                "--rdzv-endpoint HOST:PORT on every node",
            )
        return Nodes()
    if not 0 <= node_rank < nnodes:
        raise InputError(
            f"--node-rank {node_rank}: must be between 0 and {nnodes - 1} for --nnodes {nnodes}",
            hint="number the nodes 0, 1, ... N-1, each once",
        )
    if not rdzv_endpoint:
        raise InputError(
            f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT",
            hint="the same on every node: node 0's address and a free TCP port, e.g. 10.0.0.1:29500",
        )
    host, sep, port = rdzv_endpoint.rpartition(":")
    if not sep or not _HOST.match(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(
            f"--rdzv-endpoint {rdzv_endpoint!r} is not HOST:PORT",
            hint="a host name or IP address (IPv6 in brackets) and a TCP port 1-65535, e.g. node0.example:29500",
        )
    if rdzv_id is not None and not _RDZV_ID.match(rdzv_id):
        raise InputError(
            f"--rdzv-id {rdzv_id!r}: use 1-128 letters, digits, '_', '.' and '-', starting with a letter or digit",
            hint="the same id on every node of one run (default: derived from the endpoint)",
        )
    if rdzv_timeout is not None and not 1 <= rdzv_timeout <= 7 * 24 * 3600:
        raise InputError(
            f"--rdzv-timeout {rdzv_timeout}: must be 1 to {7 * 24 * 3600} seconds",
            hint="how long each node waits for the others at the rendezvous, e.g. --rdzv-timeout 300",
        )
    return Nodes(
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        rdzv_timeout=rdzv_timeout or DEFAULT_RDZV_TIMEOUT,
    )


def default_rdzv_id(endpoint: str) -> str:
    """The same on every node without being told: it depends only on the shared endpoint."""
    import hashlib

    return "mw-env-" + hashlib.sha256(endpoint.encode()).hexdigest()[:12]


def started_file(out_dir: Path, node_rank: int) -> Path:
    return Path(out_dir) / rd.node_started_file(node_rank)


def waiting_line(nodes: Nodes, left_s: float) -> str:
    return (
        f"node {nodes.node_rank}: waiting for all {nodes.nnodes} nodes at {nodes.rdzv_endpoint} "
        f"(rendezvous id {nodes.rdzv_id or 'default'}); giving up in {max(0, round(left_s))} s "
        f"(--rdzv-timeout {nodes.rdzv_timeout})"
    )


class Announcer:
    """While the rendezvous is open: say so now, and again every REPEAT_S, until the trainer starts."""

    def __init__(self, nodes: Nodes, started: Path, write: Callable[[str], None]) -> None:
        self.nodes, self.started, self.write = nodes, started, write
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rendezvous-announcer", daemon=True)

    def __enter__(self) -> Announcer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        deadline = time.monotonic() + self.nodes.rdzv_timeout
        next_say = 0.0
        while not self._done.is_set() and not self.started.exists():
            now = time.monotonic()
            if now >= next_say:
                self.write(waiting_line(self.nodes, deadline - now))
                next_say = now + REPEAT_S
            self._done.wait(0.5)  # a product wait: how often to look for the trainer's start


def node_command(argv: Sequence[str], node_rank: int) -> str:
    """This node's `mw-env train ...` command with --node-rank replaced: what to run on another node."""
    args = iter(argv)
    out: list[str] = []
    for a in args:
        if a == "--node-rank":
            next(args, None)  # its value
        elif not a.startswith("--node-rank="):
            out.append(a)
    return shlex.join(["mw-env", *out, "--node-rank", str(node_rank)])


def never_joined(nodes: Nodes, reason: str, *, argv: Sequence[str] | None = None) -> StepFailed:
    """The error when the rendezvous timed out or failed: the missing node ranks and what to run there."""
    others = [r for r in range(nodes.nnodes) if r != nodes.node_rank]
    who = (
        f"node-rank {others[0]} never joined"
        if len(others) == 1
        else f"not all of node-ranks {', '.join(map(str, others))} joined"
    )
    cmd = node_command(argv if argv is not None else sys.argv[1:], others[0])
    return StepFailed(
        f"the rendezvous at {nodes.rdzv_endpoint} did not complete within {nodes.rdzv_timeout} s: this is "
        f"node {nodes.node_rank} of {nodes.nnodes}; {who} ({reason})",
        hint=f"start the missing node(s) with the same command and their own --node-rank, e.g. `{cmd}`; "
        "they must reach the endpoint (firewall, address); more time: --rdzv-timeout SECONDS",
    )


def store_lost(nodes: Nodes, out_dir: Path, log: Path | None) -> StepFailed:
    """This node's torchrun lost the rendezvous store: node 0, which serves it at the endpoint, is gone."""
    ckpts = sorted(checkpoints_dir(out_dir).glob(CHECKPOINT_GLOB))
    kept = f"the newest checkpoint is {ckpts[-1]}" if ckpts else "no checkpoint was written here"
    return StepFailed(
        f"{PEER_LOST} (this is node {nodes.node_rank} of {nodes.nnodes}; lost node-rank 0, "
        f"which serves the rendezvous at {nodes.rdzv_endpoint}); {kept}; torchrun's output is in {log}",
        hint="a node stopped (killed, crashed or unreachable): restart every node with the same command (its own "
        "--node-rank); they resume together from the newest checkpoint",
    )


def write_log(out_dir: Path, lines: Sequence[str]) -> Path | None:
    """Append torchrun's own output (tracebacks, agent lines) to <run>/torchrun.log; None when nothing."""
    if not lines:
        return None
    path = Path(out_dir) / TORCHRUN_LOG
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_append(path) as fh:
            fh.write("\n".join(lines) + "\n")
    except (OSError, InputError):  # InputError: not a regular file there
        return None
    return path
