"""Issue 11 on checkpoints: every damaged or mangled newest checkpoint falls back to the previous one with a
warning; a changed hash is caught; a full disk is error:/hint: that keeps what is on disk."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError, StepFailed

from .helpers import tiny_config

pytestmark = pytest.mark.torch

NEWEST, PREVIOUS = "step-000000008.pt", "step-000000004.pt"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mw_env.trainer.loop import train

    run = tmp_path_factory.mktemp("hostile") / "run"
    train(resolved=tiny_config(run), echo=lambda _m: None)
    assert (run / "checkpoints" / NEWEST).exists() and (run / "checkpoints" / (NEWEST + ".sha256")).exists()
    return run


def _copy(tiny_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    return run


def _rewrite(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Load, change, save back - and record the new file's hash, so only the structure check can object."""
    import torch

    from mw_env.trainer.ckpt.checkpoint import sha256_of, sidecar_path

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    change(ckpt)
    torch.save(ckpt, path)
    sidecar_path(path).write_text(f"{sha256_of(path)}  {path.name}\n")


def _shape(ckpt: dict[str, Any]) -> None:
    import torch

    key = next(iter(ckpt["model"]))
    ckpt["model"][key] = torch.zeros(3, 3)


def _opt_ids(ckpt: dict[str, Any]) -> None:
    ckpt["optimizer"]["param_groups"][0]["params"] = [0, 0]


MANGLED: dict[str, Callable[[dict[str, Any]], None]] = {
    "no loop": lambda c: c.pop("loop"),
    "no world_size": lambda c: c.pop("world_size"),
    "no model": lambda c: c.pop("model"),
    "step is a string": lambda c: c.update(step="abc"),
    "config not a dict": lambda c: c.update(config=["model"]),
    "config section not a dict": lambda c: c["config"].update(model=3),
    "config out of range": lambda c: c["config"]["model"].update(max_len=2**63),
    "loop step differs": lambda c: c["loop"].update(step=3),
    "loop unknown key": lambda c: c["loop"].update(surprise=1),
    "world_size zero": lambda c: c.update(world_size=0),
    "labels empty": lambda c: c.update(labels=[]),
    "tokenizer unknown": lambda c: c.update(tokenizer={"kind": "morse"}),
    "wrong weight shape": _shape,
    "optimizer ids": _opt_ids,
    "optimizer not a dict": lambda c: c.update(optimizer=[]),
    "scheduler without last_epoch": lambda c: c.update(scheduler={}),
    "format version": lambda c: c.update(format_version=2),
    "rng not a list": lambda c: c.update(rng="x"),
    "top level": lambda c: c.clear(),
}


@pytest.mark.parametrize("name", sorted(MANGLED))
def test_a_mangled_newest_checkpoint_falls_back_with_a_warning(
    name: str, tiny_run: Path, tmp_path: Path
) -> None:
    from mw_env.trainer.ckpt.checkpoint import find_latest

    run = _copy(tiny_run, tmp_path)
    _rewrite(run / "checkpoints" / NEWEST, MANGLED[name])
    said: list[str] = []
    found = find_latest(run / "checkpoints", warn=said.append)
    assert found is not None and found[0].name == PREVIOUS, said
    assert len(said) == 1 and NEWEST in said[0] and "falling back to the previous checkpoint" in said[0]


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "flipped", "garbage sidecar", "sidecar of another file", "directory"],
)
def test_a_damaged_newest_checkpoint_falls_back(damage: str, tiny_run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.ckpt.checkpoint import find_latest, load_checkpoint

    run = _copy(tiny_run, tmp_path)
    path = run / "checkpoints" / NEWEST
    side = path.with_name(path.name + ".sha256")
    data = path.read_bytes()
    if damage == "empty":
        path.write_bytes(b"")  # the crash-truncated file of the issue: used to be an IndexError
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes([data[mid] ^ 0x01]) + data[mid + 1 :])
    elif damage == "garbage sidecar":
        side.write_text("not a hash\n")
    elif damage == "sidecar of another file":
        side.write_text((run / "checkpoints" / (PREVIOUS + ".sha256")).read_text())
    else:
        path.unlink()
        path.mkdir()
    said: list[str] = []
    found = find_latest(run / "checkpoints", warn=said.append)
    assert found is not None and found[0].name == PREVIOUS and len(said) == 1, said
    with pytest.raises(InputError, match=r"unreadable|not a regular file"):
        load_checkpoint(path)


def test_byte_flips_anywhere_are_caught_by_the_recorded_hash(tiny_run: Path, tmp_path: Path) -> None:
    import random

    from mw_env.trainer.ckpt.checkpoint import CheckpointError, load_checkpoint

    src = tiny_run / "checkpoints" / NEWEST
    data = src.read_bytes()
    rng = random.Random(11)
    for _ in range(8):
        at = rng.randrange(len(data))
        bad = tmp_path / NEWEST
        bad.write_bytes(data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :])
        shutil.copy(src.with_name(src.name + ".sha256"), bad.with_name(bad.name + ".sha256"))
        with pytest.raises(CheckpointError, match=r"sha256|unreadable"):
            load_checkpoint(bad)
        bad.unlink()


def test_resume_falls_back_end_to_end_and_finishes(tiny_run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.loop import train

    run = _copy(tiny_run, tmp_path)
    _rewrite(run / "checkpoints" / NEWEST, MANGLED["no world_size"])
    said: list[str] = []
    result = train(resolved=tiny_config(run, "runtime.max_steps=10"), echo=said.append)
    assert any("falling back" in s and NEWEST in s for s in said)
    assert any("resumed from" in s and PREVIOUS in s for s in said)
    assert result.step == 10


def test_optimizer_moments_of_the_wrong_shape_fall_back_in_the_loop(tiny_run: Path, tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.loop import train

    def moments(ckpt: dict[str, Any]) -> None:
        entry = ckpt["optimizer"]["state"][0]
        entry["exp_avg"] = torch.zeros(entry["exp_avg"].numel() + 1)

    run = _copy(tiny_run, tmp_path)
    _rewrite(run / "checkpoints" / NEWEST, moments)
    said: list[str] = []
    train(resolved=tiny_config(run, "runtime.max_steps=9"), echo=said.append)
    assert any("optimizer state 0: exp_avg" in s for s in said), said
    assert any("resumed from" in s and PREVIOUS in s for s in said)


def test_no_usable_checkpoint_is_an_error_that_keeps_them(tiny_run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.loop import train

    run = _copy(tiny_run, tmp_path)
    for name in (NEWEST, PREVIOUS):
        (run / "checkpoints" / name).write_bytes(b"")
    with pytest.raises(InputError, match="none of the 2 checkpoint") as info:
        train(resolved=tiny_config(run), echo=lambda _m: None)
    assert "--fresh" in (info.value.hint or "")
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*.pt")) == [PREVIOUS, NEWEST]


def test_a_full_disk_while_checkpointing_is_a_clean_error_that_keeps_the_earlier_ones(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from mw_env.trainer.ckpt import checkpoint as ckpt_mod

    run = _copy(tiny_run, tmp_path)
    ckpts = run / "checkpoints"
    before = {p.name: p.read_bytes() for p in ckpts.iterdir()}
    payload = torch.load(ckpts / NEWEST, map_location="cpu", weights_only=True)
    payload["step"] = 12

    def full(obj: Any, fh: Any, *a: Any, **k: Any) -> None:
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(StepFailed) as info:
        ckpt_mod.save_checkpoint(payload, ckpts, keep_last=2)
    assert "the disk is full" in info.value.message and NEWEST in info.value.message
    assert "free space" in (info.value.hint or "")
    assert {p.name: p.read_bytes() for p in ckpts.iterdir()} == before  # no temporary left, nothing lost


def test_a_full_disk_in_the_trainer_cli_prints_error_and_hint_only(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mw_env.trainer import __main__ as entry
    from mw_env.trainer.ckpt import checkpoint as ckpt_mod

    from .helpers import TINY

    run = _copy(tiny_run, tmp_path)

    def full(path: Any, text: str, **kw: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt_mod, "write_text_atomic", full)  # the sidecar write hits the full disk
    args = ["run", "--config", "smoke"]
    for item in (*TINY, f"runtime.out_dir={run}", "runtime.max_steps=12"):
        args += ["--set", item]
    rc = entry.main(args)
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "error: cannot write checkpoint" in err and "hint: free space" in err
    assert (run / "checkpoints" / NEWEST).exists() and (run / "checkpoints" / PREVIOUS).exists()


def test_a_written_checkpoint_holds_exactly_the_parts_table(tiny_run):
    """One owner: what a run writes is ckpt.parts.PARTS (the scaler only in fp16), and every part the
    run restores is one the table names, so a key cannot be written without being validated and restored."""
    import torch

    from mw_env.trainer.ckpt.parts import PARTS, REQUIRED_KEYS

    ckpt = torch.load(tiny_run / "checkpoints" / NEWEST, map_location="cpu", weights_only=True)
    assert list(ckpt) == [p.key for p in PARTS if p.key != "scaler"]  # a fp32 run: no GradScaler state
    assert set(REQUIRED_KEYS) <= set(ckpt)
    restored = {p.key for p in PARTS if p.restore is not None}
    assert restored == {"model", "optimizer", "scheduler", "loop", "rng", "scaler", "data"}
