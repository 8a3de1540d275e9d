"""Several nodes through `mw-env train --nnodes 2` (two `mw-env train` processes on 127.0.0.1, c10d rendezvous,
gloo): the same result as one node with two processes; node-local run folders that disagree on the checkpoint
stop on every node with the error that names each node's newest checkpoint; a copied checkpoint resumes.

Tolerance: relative 1e-6 per step. The ranks, their rows and the reduction are the same as one node with two
processes; only the transport differs (measured: identical).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proctools import assert_none_left, free_port, kill_tagged, new_tag

from .helpers import TINY, events, step_losses

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # the test venv: real torch and torchrun, this mw-env importable
TIMEOUT = 240  # per subprocess; the rendezvous and the process group time out well before


def _argv(run: Path, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "mw_env", "train", "--config", "smoke", "--venv", str(VENV)]
    argv += ["--skip-doctor", "--profile", "cpu"]
    for item in (*TINY, f"runtime.out_dir={run}", "dist.timeout_s=60"):
        argv += ["--set", item]
    return argv + list(extra)


def _env(tag: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), "MW_ENV_TEST_TAG": tag}


def _two_nodes(runs: tuple[Path, Path], *extra: str) -> list[subprocess.CompletedProcess[str]]:
    """Node 0 and node 1 at once, each its own `mw-env train`, joined by one rendezvous endpoint."""
    tag, port = new_tag(), free_port()
    nodes = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"t{port}"]
    procs = [
        subprocess.Popen(
            _argv(run, *nodes, "--node-rank", str(rank), *extra),
            cwd=REPO,
            env=_env(tag),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, run in enumerate(runs)
    ]
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            proc.kill()
        kill_tagged(tag)
    assert_none_left(tag, within=1.0)
    return done


@pytest.fixture(scope="module")
def two_node_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = tmp_path_factory.mktemp("multinode") / "shared"
    results = _two_nodes((shared, shared))
    for res in results:
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return shared


def test_two_nodes_end_equal_to_one_node_with_two_processes(two_node_run: Path, tmp_path: Path) -> None:
    single = tmp_path / "one-node"
    tag = new_tag()
    try:
        res = subprocess.run(
            _argv(single, "--nproc-per-node", "2"),
            cwd=REPO,
            env=_env(tag),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        kill_tagged(tag)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    nodes, one = step_losses(two_node_run), step_losses(single)
    assert sorted(nodes) == sorted(one) == list(range(1, 9))
    for step in one:
        assert nodes[step] == pytest.approx(one[step], rel=1e-6), step
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint

    a = load_checkpoint(two_node_run / "checkpoints" / "step-000000008.pt")
    b = load_checkpoint(single / "checkpoints" / "step-000000008.pt")
    assert a["world_size"] == b["world_size"] == 2
    for name, tensor in b["model"].items():
        assert (a["model"][name] - tensor).abs().max() <= 1e-6, name
    # One writer for the shared folder: one finished event, one metrics line per step.
    assert len(events(two_node_run, "finished")) == 1
    assert len(events(two_node_run, "step")) == 8


def test_disagreeing_local_checkpoints_stop_every_node(two_node_run: Path, tmp_path: Path) -> None:
    # Node-local run folders: node 0's has steps 4 and 8, node 1's a copy that lacks step 8.
    local0, local1 = tmp_path / "node0", tmp_path / "node1"
    shutil.copytree(two_node_run, local0)
    shutil.copytree(two_node_run, local1)
    (local1 / "checkpoints" / "step-000000008.pt").unlink()
    results = _two_nodes((local0, local1), "--set", "runtime.max_steps=12")
    for res in results:
        assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
        err = res.stderr
        assert "error: the nodes do not agree on the checkpoint to resume from" in err, err[-3000:]
        assert "node 0" in err and "node 1" in err
        assert str(local0 / "checkpoints" / "step-000000008.pt") in err
        assert str(local1 / "checkpoints" / "step-000000004.pt") in err
        assert "hint:" in err and "shared filesystem" in err and "Traceback" not in err
    # Nothing trained: no step past 8 anywhere.
    for run in (local0, local1):
        assert max(step_losses(run)) == 8

    # The fix the hint names: a copy of the newest checkpoint on node 1; both resume step 8 and go on.
    shutil.copy2(local0 / "checkpoints" / "step-000000008.pt", local1 / "checkpoints")
    results = _two_nodes((local0, local1), "--set", "runtime.max_steps=10")
    for res in results:
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    written = [run for run in (local0, local1) if (run / "checkpoints" / "step-000000010.pt").exists()]
    assert len(written) == 1  # rank 0's node alone writes
    assert [e["step"] for e in events(written[0], "resumed")] == [8]
