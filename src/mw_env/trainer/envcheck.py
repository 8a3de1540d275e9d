"""One environment across nodes: every rank's environment compared before the process group starts (issue 38).

Each node bootstraps its own venv, and nothing in torchrun compares them (pytorch#108212): a node with another
torch build or NCCL version fails late and obscurely, in the first collective or mid-run (NVIDIA/nccl#1267).
mw-env knows what makes an environment: the venv's lock (`pylock.mw-env.toml`, its sha256), torch's version
and build (+cpu / +cuXXX / +rocmX), the CUDA or HIP runtime it was built for, NCCL/RCCL, Python and mw-env.

Before `init_process_group`, every rank publishes its fingerprint through torchrun's rendezvous store (the
agent's TCPStore at MASTER_ADDR:MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE; keys under a prefix per restart).
Rank 0 compares them with node 0's (the node the user numbered 0; torchrun's global rank 0 may be on any node)
and publishes the verdict; a difference stops every rank at once, within the
store's round trip, with one sentence naming each differing node (its node rank and host), the field, both
values, and the command that rebuilds that node from node 0's lock. `--allow-env-mismatch` (launch.py sets
ALLOW_ENV_MISMATCH) lets the run go on; the difference is then recorded in the run's data card and report.

Without the agent store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, or a launcher other than torchrun) there is no
store to meet in before the process group, and the check is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.rundir.contract import ALLOW_ENV_MISMATCH

PREFIX = "mw-env/env-check"
# What must be equal, in the order a message names them: (key, words).
FIELDS = (
    ("lock_sha256", "lock sha256"),
    ("torch", "torch"),
    ("torch_build", "torch build"),
    ("cuda", "CUDA runtime"),
    ("hip", "HIP runtime"),
    ("nccl", "NCCL/RCCL"),
    ("python", "Python"),
    ("mw_env", "mw-env"),
)

Fingerprint = dict[str, str | None]


def fingerprint() -> Fingerprint:
    """This process's environment and where it runs (node, host, venv, lock)."""
    import torch

    import mw_env
    from mw_env.venv.lock import LOCK_FILE

    lock = Path(sys.prefix) / LOCK_FILE
    try:
        lock_sha = hashlib.sha256(lock.read_bytes()).hexdigest()
    except OSError:
        lock_sha = None
    public, _, local = torch.__version__.partition("+")
    nccl = None
    try:
        if torch.distributed.is_nccl_available():
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):  # a build without NCCL/RCCL
        nccl = None
    return {
        "node": os.environ.get("MW_ENV_NODE_RANK") or os.environ.get("GROUP_RANK") or "0",
        "host": socket.gethostname(),
        "rank": os.environ.get("RANK", "0"),
        "venv": sys.prefix,
        "lock": str(lock) if lock_sha else None,
        "lock_sha256": lock_sha,
        "torch": public,
        "torch_build": f"+{local}" if local else "(none)",
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "nccl": nccl,
        "python": platform.python_version(),
        "mw_env": mw_env.__version__,
        "allow": "1"
        if os.environ.get(ALLOW_ENV_MISMATCH) == "1"
        else None,  # --allow-env-mismatch on this node
    }


def _shown(key: str, value: str | None) -> str:
    if value is None:
        return "no lock" if key == "lock_sha256" else "none"
    return f"{value[:16]}..." if key == "lock_sha256" else value


def reference(everyone: Sequence[Fingerprint]) -> Fingerprint:
    """Node 0's first rank: the environment the others are held to. (torchrun numbers the ranks in the order the
    nodes joined, so global rank 0 may run on any node; node 0 is the one the user numbered 0.)"""
    return min(everyone, key=lambda fp: (_number(fp.get("node")), _number(fp.get("rank"))))


def _number(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 1 << 30


def differences(everyone: Sequence[Fingerprint]) -> list[tuple[Fingerprint, list[str]]]:
    """Each rank whose environment differs from node 0's, once per node and environment (a node's ranks share
    one venv), with the fields that differ."""
    ref = reference(everyone)
    out: list[tuple[Fingerprint, list[str]]] = []
    said: set[tuple[str | None, ...]] = set()
    for fp in sorted(everyone, key=lambda fp: (_number(fp.get("node")), _number(fp.get("rank")))):
        differ = [key for key, _ in FIELDS if fp.get(key) != ref.get(key)]
        seen = (fp.get("node"), *(fp.get(key) for key, _ in FIELDS))
        if differ and seen not in said:
            said.add(seen)
            out.append((fp, differ))
    return out


def mismatch_sentence(everyone: Sequence[Fingerprint]) -> str | None:
    """The one sentence that says which node differs from node 0 in what, and how to rebuild it; None if none."""
    found = differences(everyone)
    if not found:
        return None
    ref = reference(everyone)
    words = dict(FIELDS)
    where0 = f"node {ref.get('node')} ({ref.get('host')})"
    parts = []
    for fp, fields in found:
        what = ", ".join(
            f"{words[k]} {_shown(k, fp.get(k))} where {where0} has {_shown(k, ref.get(k))}" for k in fields
        )
        parts.append(f"node {fp.get('node')} ({fp.get('host')}) has {what}; rebuild it: {_rebuild(ref, fp)}")
    return "the nodes run different environments, so no node starts: " + "; ".join(parts)


def _rebuild(ref: Fingerprint, fp: Fingerprint) -> str:
    install = f"`mw-env bootstrap --lock pylock.mw-env.toml --venv {sh(str(fp.get('venv')))} --recreate`"
    if ref.get("lock"):
        return f"copy {ref.get('host')}:{ref.get('lock')} to node {fp.get('node')} and run {install} there"
    return (
        f"on node {ref.get('node')} write its lock with `mw-env lock --venv {sh(str(ref.get('venv')))}`, copy it to node "
        f"{fp.get('node')} and run {install} there"
    )


def check_environments(*, rank: int, world: int, timeout_s: float) -> str | None:
    """Publish this rank's fingerprint, let rank 0 judge; raise InputError on every rank when the environments
    differ, unless node 0 was launched with --allow-env-mismatch: then the sentence is returned (for the report).
    None: the same environment everywhere, or no agent store to meet in."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or world <= 1:
        return None
    from torch.distributed import PrefixStore, TCPStore

    timeout = timedelta(seconds=timeout_s)
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = PrefixStore(f"{PREFIX}/{attempt}", TCPStore(host, port, world, False, timeout))
    store.set(f"rank/{rank}", json.dumps(fingerprint()))
    if rank == 0:
        keys = [f"rank/{r}" for r in range(world)]
        store.wait(keys, timeout)
        everyone = [json.loads(store.get(k)) for k in keys]
        sentence = mismatch_sentence(everyone)
        allowed = reference(everyone).get("allow") == "1"  # node 0's --allow-env-mismatch decides
        store.set("verdict", json.dumps({"sentence": sentence, "allowed": allowed}))
    else:
        store.wait(["verdict"], timeout)
        verdict = json.loads(store.get("verdict"))
        sentence, allowed = verdict["sentence"], bool(verdict["allowed"])
    if sentence is None:
        return None
    if not allowed:
        raise InputError(
            sentence,
            hint="every node trains in the same environment: rebuild the differing node(s) as said, or pass "
            "--allow-env-mismatch to node 0's `mw-env train` to go on knowingly (recorded in the run's report)",
        )
    if os.environ.get(ALLOW_ENV_MISMATCH) == "1" and os.environ.get("LOCAL_RANK", "0") == "0":
        print(f"warning: {sentence} (going on: --allow-env-mismatch)", file=sys.stderr, flush=True)
    return sentence
