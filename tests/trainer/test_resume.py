"""Exact resume on the CPU: interrupted (crash, SIGKILL mid-checkpoint, SIGTERM) and resumed runs end
bitwise equal to an uninterrupted one; a corrupt newest checkpoint falls back to the previous one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError

from .helpers import events, step_losses, tiny_config

pytestmark = pytest.mark.torch

# Dropout on, so the per-step RNG handling is part of what is proven.
EXTRA = ("model.dropout=0.1",)


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    import torch

    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _final_state(run_dir: Path, step: int = 8) -> dict[str, Any]:
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run_dir / "checkpoints" / f"step-{step:09d}.pt")
    return {k: ckpt[k] for k in ("model", "optimizer", "scheduler", "loop", "step", "data", "rng")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Uninterrupted 8-step runs (accumulation 1 and 2), shared by the tests below."""
    from mw_env.trainer.loop import train

    out = {}
    for acc in (1, 2):
        run = tmp_path_factory.mktemp(f"ref{acc}") / "run"
        train(resolved=tiny_config(run, *EXTRA, f"optim.accumulation_steps={acc}"), echo=lambda _m: None)
        out[acc] = run
    return out


def _crash_at(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    from mw_env.trainer.step import Trainer

    real = Trainer.step
    done = {"n": 0}

    def crashing(self, micro, *args):
        if done["n"] == step:
            raise KeyboardInterrupt("simulated crash")
        done["n"] += 1
        return real(self, micro, *args)

    monkeypatch.setattr(Trainer, "step", crashing)


@pytest.mark.parametrize("acc", [1, 2])
def test_interrupted_and_resumed_equals_uninterrupted(
    acc: int, reference: dict[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mw_env.trainer.loop import train

    run = tmp_path / "run"
    resolved = tiny_config(run, *EXTRA, f"optim.accumulation_steps={acc}")
    with monkeypatch.context() as m:
        _crash_at(m, 5)  # steps 1-5 done, checkpoint at 4: step 5 is lost and must be redone
        with pytest.raises(KeyboardInterrupt):
            train(resolved=resolved, echo=lambda _m: None)
    said: list[str] = []
    result = train(resolved=resolved, echo=said.append)
    assert result.step == 8 and any("resumed from" in s and "step-000000004.pt" in s for s in said)
    _assert_same(_final_state(reference[acc]), _final_state(run))
    assert step_losses(run) == step_losses(reference[acc])  # exact floats, every step
    assert [e["step"] for e in events(run, "resumed")] == [4]


def test_corrupt_newest_checkpoint_falls_back(reference: dict[int, Path], tmp_path: Path) -> None:
    import shutil

    from mw_env.trainer.loop import train

    run = tmp_path / "run"
    shutil.copytree(reference[1], run)
    newest = run / "checkpoints" / "step-000000008.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated by a full disk
    said: list[str] = []
    train(resolved=tiny_config(run, *EXTRA), echo=said.append)
    assert any(s.startswith("warning:") and "step-000000008.pt is unreadable" in s for s in said)
    assert any("resumed from" in s and "step-000000004.pt" in s for s in said)
    _assert_same(_final_state(reference[1]), _final_state(run))


def test_resume_refuses_a_changed_architecture(reference: dict[int, Path], tmp_path: Path) -> None:
    import shutil

    from mw_env.trainer.loop import train

    run = tmp_path / "run"
    shutil.copytree(reference[1], run)
    with pytest.raises(InputError, match=r"model.d_model: 32 -> 64"):
        train(
            resolved=tiny_config(run, *EXTRA, "model.d_model=64", "runtime.max_steps=12"),
            echo=lambda _m: None,
        )
    # --fresh starts over and keeps the old checkpoints, renamed out of the resume path.
    result = train(resolved=tiny_config(run, *EXTRA, "runtime.max_steps=4"), fresh=True, echo=lambda _m: None)
    assert result.step == 4
    assert list(run.glob("checkpoints.old-*/step-000000008.pt"))


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch
    from tests.trainer.helpers import tiny_config
    from mw_env.trainer.loop import train

    run, marker = Path(sys.argv[1]), Path(sys.argv[2])
    real_save = torch.save

    def slow_save(obj, fh, *a, **kw):
        if isinstance(obj, dict) and obj.get("step") == 8:
            fh.write(b"PK\\x03\\x04 half a checkpoint")
            fh.flush()
            marker.touch()
            time.sleep(120)
        return real_save(obj, fh, *a, **kw)

    torch.save = slow_save
    train(resolved=tiny_config(run, "model.dropout=0.1"), echo=lambda m: None)
    """
)


@pytest.mark.slow
def test_sigkill_during_checkpoint_write(reference: dict[int, Path], tmp_path: Path) -> None:
    from mw_env.trainer.loop import train

    run, marker = tmp_path / "run", tmp_path / "writing"
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run), str(marker)], cwd=repo)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, "the child died before writing its checkpoint"
            assert time.monotonic() < deadline, "the child never reached the checkpoint write"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    ckpts = run / "checkpoints"
    assert not (ckpts / "step-000000008.pt").exists()
    assert list(ckpts.glob(".step-000000008.pt.tmp-*"))  # the half-written temporary, under another name
    said: list[str] = []
    train(resolved=tiny_config(run, *EXTRA), echo=said.append)
    # stale temporaries are cleaned up
    assert not list(ckpts.glob(".*.tmp-*")) and not list(ckpts.glob("*.tmp-*"))
    assert any("resumed from" in s and "step-000000004.pt" in s for s in said)
    _assert_same(_final_state(reference[1]), _final_state(run))
    assert step_losses(run) == step_losses(reference[1])


@pytest.mark.slow
def test_sigterm_finishes_the_step_checkpoints_and_exits_0(tmp_path: Path) -> None:
    run = tmp_path / "run"
    repo = Path(__file__).resolve().parents[2]
    argv = [
        sys.executable,
        "-m",
        "mw_env.trainer",
        "run",
        "--config",
        "smoke",
        "--set",
        f"runtime.out_dir={run}",
        "--set",
        "runtime.max_steps=100000",
        "--set",
        "data.synthetic_rows=128",
        "--set",
        "data.synthetic_val_rows=16",
        "--set",
        "runtime.checkpoint_every=100000",
        "--set",
        "runtime.eval_every=100000",
        "--set",
        "runtime.threads=1",
    ]
    child = subprocess.Popen(
        argv,
        cwd=repo,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").exists() or not events(run, "step"):
        assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 0
    end = events(run)[-1]
    assert end["event"] == "finished" and end["reason"] == "stopped"
    assert (run / "checkpoints" / f"step-{end['step']:09d}.pt").is_file()


@pytest.mark.slow
def test_explicit_resume_path(reference: dict[int, Path], tmp_path: Path) -> None:
    import shutil

    from mw_env.trainer.ckpt.checkpoint import CheckpointError
    from mw_env.trainer.loop import train

    src = reference[1] / "checkpoints" / "step-000000004.pt"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    pinned = tmp_path / "pinned.pt"
    shutil.copy(src, pinned)
    said: list[str] = []
    train(resolved=tiny_config(run, *EXTRA), resume=pinned, echo=said.append)
    assert any(f"resumed from {pinned} at step 4" in s for s in said)
    _assert_same(_final_state(reference[1]), _final_state(run))
    pinned.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="unreadable"):
        train(resolved=tiny_config(tmp_path / "other", *EXTRA), resume=pinned, echo=lambda _m: None)


def test_a_resume_under_a_changed_max_steps_runs_its_first_step_at_the_rate_the_warning_names(
    reference: dict[int, Path], tmp_path: Path
) -> None:
    """Issue 30 #11: the checkpoint's optimizer held the old schedule's rate, so the first resumed step ran
    at it and the new schedule began a step after the warning said."""
    import shutil

    from mw_env.trainer.loop import train
    from mw_env.trainspec.schedule import lr_factor

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    pinned = tmp_path / "pinned.pt"
    shutil.copy(reference[1] / "checkpoints" / "step-000000004.pt", pinned)
    resolved = tiny_config(run, *EXTRA, "runtime.max_steps=12", "optim.lr=2e-3")
    said: list[str] = []
    train(resolved=resolved, resume=pinned, echo=said.append)
    (warning,) = [s for s in said if "the schedule changed" in s]
    o = resolved.config.optim
    expected = {step: o.lr * lr_factor(step - 1, o, 12) for step in range(5, 13)}
    assert (
        "runtime.max_steps 8 -> 12" in warning and f"learning rate for step 5 is {expected[5]:.3g}" in warning
    )
    logged = {e["step"]: e["lr"] for e in events(run, "step")}
    assert {s: logged[s] for s in expected} == pytest.approx(expected, rel=1e-12)
