"""Permission faults as a user without CAP_DAC_OVERRIDE meets them (root's capabilities dropped with capsh;
skipped where capsh is missing): a run whose checkpoints folder cannot be read (issue 22, case 7) and a
corpus shard that cannot be read end in `error:`/`hint:` naming the path, never a traceback; nothing on disk
is touched."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.faults.fault_support import record, table_path

pytestmark = [pytest.mark.torch, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _unprivileged(argv: list[str]) -> subprocess.CompletedProcess[str]:
    capsh = shutil.which("capsh")
    if capsh is None or os.geteuid() != 0:
        pytest.skip("needs root and capsh to drop CAP_DAC_OVERRIDE (a plain user has no override anyway)")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [capsh, "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", shlex.join(argv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _trainer(run: Path, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "mw_env.trainer", "run", "--config", "smoke"]
    for item in (f"runtime.out_dir={run}", "runtime.max_steps=2", "runtime.threads=1", *extra):
        argv += ["--set", item]
    return argv


def test_a_checkpoints_folder_that_cannot_be_read(tmp_path: Path) -> None:
    run = tmp_path / "r9"
    ckpts = run / "checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "step-000000002.pt").write_bytes(b"kept")
    ckpts.chmod(0)
    try:
        res = _unprivileged(_trainer(run))
    finally:
        ckpts.chmod(0o755)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    err = res.stderr
    assert (
        "Traceback" not in err
        and f"error: cannot read the checkpoints folder {ckpts}: permission denied" in err
    )
    assert "hint:" in err and "kept" in err
    assert (ckpts / "step-000000002.pt").read_bytes() == b"kept"
    record(
        table_path(),
        fault="EACCES (no CAP_DAC_OVERRIDE)",
        phase="start-up",
        write="checkpoints folder",
        mode="single",
        launch="trainer process",
        outcome="exit 2, error names the folder",
        resume="fix the mode",
    )


def test_a_shard_that_cannot_be_read(tmp_path: Path) -> None:
    shard = tmp_path / "s.jsonl"
    shard.write_text(json.dumps({"tokens": ["1"], "tags": ["O"]}) + "\n")
    shard.chmod(0)
    res = _unprivileged(_trainer(tmp_path / "run", "data.source=files", f"data.train_files=[{shard}]"))
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr and str(shard) in res.stderr and "hint:" in res.stderr, res.stderr
    record(
        table_path(),
        fault="EACCES (no CAP_DAC_OVERRIDE)",
        phase="data discovery",
        write="a shard",
        mode="single",
        launch="trainer process",
        outcome="exit 2, error names the shard",
        resume="fix the mode",
    )
