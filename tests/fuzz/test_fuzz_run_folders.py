"""Run folders as a hostile user or a broken disk leaves them, read by `train status`, `watch`, `summary` and
`export` (issue 22). Every case starts from a real finished run (two steps, two checkpoints) and spoils one
file: mangled, truncated, emptied, garbage, nested past the stack, a 5000-digit number, huge, a link out of
the folder, a link to /dev/zero, a FIFO, a folder, missing, unreadable. Oracle (fuzz_support.run_cli): a
documented exit code, `error:`/`hint:` and never a traceback, never a hang (SIGALRM deadline). Export's
reads (the newest valid checkpoint, its load, the model built from it) may raise only mw_env's own errors.

Generated cases are seeded and replayable by index (MW_FUZZ_ROUND draws another set); the named regressions
run the export's venv entry point on the worst folders in this process, and the real `mw-env train export`
command on one of them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

import pytest
from tests.fuzz.fuzz_support import NASTY, cases, deadline, mutate, run_cli
from tests.fuzz.test_fuzz_checkpoints import tiny_config
from tests.fuzz.test_regressions import mw

from mw_env.base.errors import MwEnvError

pytestmark = pytest.mark.torch

NEWEST = "checkpoints/step-000000002.pt"
TARGETS = (
    "state.json",
    "metrics.jsonl",
    "run.json",
    "config.yaml",
    NEWEST,
    NEWEST + ".sha256",
    "checkpoints/step-000000001.pt",
    "MANIFEST.sha256",
)
SPOILS = (
    "mutate",
    "truncate",
    "empty",
    "garbage",
    "deep",
    "bigint",
    "huge",
    "link-out",
    "dev-zero",
    "fifo",
    "folder",
    "missing",
    "unreadable",
)
STATUS_CODES = (0, 1, 2, *range(10, 18))  # STATUS_EPILOG in commands/train_runs.py: one code per anomaly
CONFIG = "model:\n  d_model: 32\n  n_layers: 1\noptim:\n  batch_size: 4\nruntime:\n  max_steps: 2\n"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mw_env.trainer.loop import train

    run = tmp_path_factory.mktemp("fuzz-run") / "run"
    train(resolved=tiny_config(run), echo=lambda _m: None)
    # A detached run's record and a config kept beside the run: both are read back by the commands.
    record = {"run_dir": str(run), "pid": 1, "start_ticks": 1, "argv": ["mw-env"], "log_file": "train.log"}
    (run / "run.json").write_text(json.dumps({**record, "started_at": 0.0}, indent=2) + "\n")
    (run / "config.yaml").write_text(CONFIG)
    # Warm the imports the checkpoint checks make (seconds on a loaded machine), outside every case's deadline.
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint, model_from_checkpoint

    model_from_checkpoint(load_checkpoint(run / NEWEST))
    return run


def spoil(run: Path, target: str, how: str, rng: random.Random) -> None:
    """Leave `run/target` as `how` says (outside files go beside the run, never elsewhere)."""
    path = run / target
    old = path.read_bytes() if path.is_file() else b"{}"
    path.unlink(missing_ok=True)
    if how == "mutate":
        path.write_bytes(mutate(rng, old))
    elif how == "truncate":
        path.write_bytes(old[: rng.randrange(max(1, len(old)))])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096))))
    elif how == "deep":
        path.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    elif how == "bigint":
        path.write_bytes(b'{"event": "step", "step": ' + b"9" * 5000 + b"}\n")
    elif how == "huge":
        path.write_bytes(old + rng.choice(NASTY) * (4_000_000 // 40))
    elif how == "link-out":
        outside = run.parent / "outside.txt"
        outside.write_bytes(b"not yours\n")
        path.symlink_to(outside)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "folder":
        path.mkdir()
    elif how == "unreadable":
        path.write_bytes(old)
        path.chmod(0)
    # "missing": already gone


def read_everything(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What each command reads from the folder, under the oracle."""
    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.ckpt.newest import newest_checkpoint

    run_cli(["train", "status", "--out-dir", str(run)], capsys, documented=STATUS_CODES)
    _, out, _ = run_cli(["train", "status", "--out-dir", str(run), "--json"], capsys, documented=STATUS_CODES)
    if out.strip():
        json.loads(out)
    run_cli(["train", "watch", "--out-dir", str(run), "--poll", "0.05"], capsys, documented=STATUS_CODES)
    run_cli(["train", "summary", "--config", str(run / "config.yaml")], capsys)
    with deadline():
        try:
            model_from_checkpoint(newest_checkpoint(run, warn=lambda _msg: None)[1])
        except MwEnvError as exc:  # the only way to refuse: a sentence, with the exit code the CLI uses
            assert exc.message and exc.exit_code in (1, 2), exc


GENERATED = 24


@pytest.mark.parametrize("index", range(GENERATED))
def test_generated_run_folders(
    index: int, finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = cases(seed=2203, n=GENERATED)[index]
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    for _ in range(rng.randint(1, 3)):
        spoil(run, rng.choice(TARGETS), rng.choice(SPOILS), rng)
    read_everything(run, capsys)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", ["fifo", "dev-zero", "deep", "link-out", "folder", "missing"])
def test_each_file_each_hostile_kind(
    target: str, how: str, finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    spoil(run, target, how, random.Random(f"{target}/{how}"))
    read_everything(run, capsys)


# -- named regressions: `mw-env train export`'s venv side, then the real command: exit 2 with a sentence ------


def _no_valid_checkpoint(run: Path) -> None:
    for name in ("step-000000001.pt", "step-000000002.pt"):
        (run / "checkpoints" / name).write_bytes(b"PK\x03\x04 not a checkpoint")


def _fifo_newest_only(run: Path) -> None:
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    os.mkfifo(run / "checkpoints" / "step-000000002.pt")


def _links_out(run: Path) -> None:
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    (run.parent / "elsewhere.pt").write_bytes(b"\x00" * 64)
    (run / "checkpoints" / "step-000000002.pt").symlink_to(run.parent / "elsewhere.pt")


def _empty(run: Path) -> None:
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step-000000002.pt").write_bytes(b"")


@pytest.mark.parametrize(
    "make",
    [_no_valid_checkpoint, _fifo_newest_only, _links_out, _empty],
    ids=["garbage", "fifo", "link", "empty"],
)
def test_export_on_a_run_folder_without_a_valid_checkpoint(
    make: object, finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each folder through the entry point `train export` runs in the venv (onnx_export.main), in this process:
    its one JSON line is the refusal mw-env prints. One child per folder cost an ONNX-stack import each; the
    command itself, across the process boundary, is the case below."""
    from mw_env.trainer.export.onnx_export import main as export_main

    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    make(run)  # type: ignore[operator]
    capsys.readouterr()
    with deadline():
        code = export_main([str(run)])
    answer = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == answer["exit_code"] == 2, answer
    assert answer["error"] == f"no valid checkpoint in {run / 'checkpoints'}" and answer["hint"], answer
    assert not (run / "export").exists()


@pytest.mark.slow
def test_the_export_command_on_a_run_folder_without_a_valid_checkpoint(
    finished_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, symlinks=True)
    _fifo_newest_only(run)  # the worst of the four: a reader that opened it would wait forever
    rc, _, err = mw(["train", "export", "--out-dir", str(run), "--venv", sys.prefix])
    assert rc == 2 and "error: no valid checkpoint in" in err and "hint:" in err, err
    assert not (run / "export").exists()
