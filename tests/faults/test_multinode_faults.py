"""Multi-node faults, two `mw-env train` nodes on 127.0.0.1 (issue 22, cases 15 and 16).

- Only node 0 comes: within seconds it says it waits for all 2 nodes at the endpoint and for how long;
  at `--rdzv-timeout` it ends with `error:` naming node-rank 1 and `hint:` with the command to run there;
  torchrun's traceback is in <run>/torchrun.log, not on the terminal.
- Node 1 is SIGKILLed after its first checkpoint: node 0 ends with `error:` naming the lost node and the
  newest checkpoint, and the hint to restart every node with the same command.
Each waits for events (a line on stderr, a checkpoint event in metrics.jsonl), never for time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from tests.faults.fault_support import record, table_path

from proctools import assert_none_left, free_port, kill_tagged, new_tag
from smokeargs import TRAIN, smoke_args

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 240


def _node(run: Path, rank: int, port: int, tag: str, *extra: str) -> subprocess.Popen[str]:
    argv = [
        *TRAIN,
        *smoke_args(
            run,
            None,
            "dist.timeout_s=30",
            "data.synthetic_rows=96",
            "data.synthetic_val_rows=16",
            "optim.batch_size=8",
            "runtime.threads=1",
            "runtime.eval_every=100000",
        ),
    ]
    argv += ["--nnodes", "2", "--node-rank", str(rank)]
    argv += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"f{port}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), "MW_ENV_TEST_TAG": tag}
    return subprocess.Popen(
        [*argv, *extra], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_only_node_0_says_whom_it_waits_for_then_names_the_missing_node(tmp_path: Path) -> None:
    tag, port = new_tag(), free_port()
    run = tmp_path / "only0"
    proc = _node(run, 0, port, tag, "--rdzv-timeout", "6")
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the events: the run's first line, then the waiting line
        first += proc.stderr.readline()
        assert f"node 0: waiting for all 2 nodes at 127.0.0.1:{port}" in first, first
        assert "giving up in" in first and "--rdzv-timeout 6" in first
        _out, rest = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
        kill_tagged(tag)
    err = first + rest
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "RendezvousTimeoutError" not in err.split("error:")[0], err
    assert "error: the rendezvous at 127.0.0.1:" in err and "node-rank 1 never joined" in err, err
    assert "hint: " in err and "--node-rank 1" in err and "--rdzv-timeout" in err, err
    assert (run / "torchrun.log").is_file() and "Rendezvous" in (run / "torchrun.log").read_text()
    assert_none_left(tag, within=5.0)
    record(
        table_path(),
        fault="node 1 never starts",
        phase="start-up (rendezvous)",
        write="-",
        mode="2 nodes",
        launch="foreground",
        outcome="exit 1, error names node-rank 1 + command",
        resume="start the node",
    )


def _checkpointed(run: Path) -> bool:
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return False
    return any(json.loads(ln).get("event") == "checkpoint" for ln in lines if ln.startswith("{"))


def test_a_lost_node_is_named_with_the_newest_checkpoint(tmp_path: Path) -> None:
    from tests.runs.runs_helpers import wait_until

    tag, port = new_tag(), free_port()
    runs = (tmp_path / "node0", tmp_path / "node1")
    extra = ("--set", "runtime.max_steps=100000", "--set", "runtime.checkpoint_every=2")
    procs = [_node(runs[0], 0, port, tag, *extra), _node(runs[1], 1, port, tag, *extra)]
    try:
        # torchrun numbers the nodes in the order they joined: global rank 0 (the writer of metrics and
        # checkpoints, in its node's run folder) may be on either node. Wait for its first checkpoint.
        try:
            wait_until(
                lambda: any(_checkpointed(r) for r in runs) or any(p.poll() is not None for p in procs),
                timeout=TIMEOUT,
                what="the first checkpoint",
            )
        except AssertionError:
            for p in procs:
                p.kill()
            raise AssertionError([p.communicate()[1][-2000:] for p in procs]) from None
        ended = [p for p in procs if p.poll() is not None]
        assert not ended, [p.communicate() for p in ended]  # a node that ended early says why
        writer = 0 if _checkpointed(runs[0]) else 1
        lost = 1 - writer
        procs[lost].send_signal(signal.SIGKILL)  # the other node is gone (its torchrun and workers with it)
        _out, err = procs[writer].communicate(timeout=TIMEOUT)
    finally:
        for p in procs:
            p.kill()
        kill_tagged(tag)
    assert procs[writer].returncode == 1, err[-3000:]
    said = f"error: a peer of the run stopped answering (this is node {writer} of 2; lost node-rank {lost}"
    assert said in err, err[-3000:]
    assert "the newest checkpoint is " in err and str(runs[writer] / "checkpoints") in err
    assert "hint: " in err and "restart every node with the same command" in err
    assert "Traceback" not in err, err[-3000:]
    assert_none_left(tag, within=10.0)
    record(
        table_path(),
        fault="SIGKILL of the other node",
        phase="steps",
        write="-",
        mode="2 nodes",
        launch="foreground",
        outcome="exit 1, error names the lost node + newest checkpoint",
        resume="restart every node",
    )
