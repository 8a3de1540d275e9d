"""Seeded mutation of a tiny real checkpoint (bytes and structure). Oracle: the resume search never raises
anything but a clean error, and whatever it accepts really resumes: the weights, optimizer, scheduler, loop
counters and RNG load into the trainer's own objects and one optimizer step runs."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from .fuzz_support import cases, deadline

pytestmark = pytest.mark.torch

NEWEST, PREVIOUS = "step-000000002.pt", "step-000000001.pt"
TINY = (
    "data.synthetic_rows=64",
    "data.synthetic_val_rows=8",
    "optim.batch_size=4",
    "runtime.max_steps=2",
    "runtime.eval_every=2",
    "runtime.checkpoint_every=1",
    "runtime.eval_samples=0",
    "runtime.threads=1",
    "runtime.report_figures=false",  # no assertion here reads a figure (tests/trainer/helpers.py TINY)
)


def tiny_config(run: Path) -> Any:
    from mw_env.trainspec.config import find_config, resolve_config

    return resolve_config(path=find_config("smoke"), overrides=(*TINY, f"runtime.out_dir={run}"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mw_env.trainer.loop import train

    run = tmp_path_factory.mktemp("fuzz-ckpt") / "run"
    train(resolved=tiny_config(run), echo=lambda _m: None)
    return run


def _trainer_objects(run: Path) -> tuple[Any, Any, Any, Any]:
    import torch

    from mw_env.trainer.data import open_corpus
    from mw_env.trainer.model import build_model
    from mw_env.trainer.setup import optimizer_for
    from mw_env.trainspec.schedule import lr_factor
    from mw_env.trainspec.synthetic import LABELS

    resolved = tiny_config(run)
    corpus = open_corpus(resolved.config, rank=0, world=1)
    model = build_model(resolved.config, vocab_size=corpus.tokenizer.vocab_size, n_labels=len(LABELS))
    opt = optimizer_for(model, resolved)
    o, rt = resolved.config.optim, resolved.config.runtime
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, o, rt.max_steps))
    return resolved, model, opt, sched


def _resume_like_the_loop(ckpts: Path, run: Path) -> str | None:
    """The loop's resume, then one optimizer step; the chosen checkpoint's name (None: none usable)."""
    import torch

    from mw_env.trainer.ckpt import checkpoint as ckpt_mod
    from mw_env.trainer.ckpt.schema import check_for_run
    from mw_env.trainer.runtime import restore_rng_states
    from mw_env.trainer.state import LoopState
    from mw_env.trainspec.synthetic import LABELS

    _resolved, model, opt, sched = _trainer_objects(run)
    warnings: list[str] = []

    def usable(path: Path, ckpt: dict[str, Any]) -> None:
        check_for_run(path, ckpt, model=model, optimizer=opt, labels=list(LABELS), scheduler=sched)

    found = ckpt_mod.find_latest(ckpts, warn=warnings.append, check=usable)
    if found is None:
        return None
    path, ckpt = found
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    sched.load_state_dict(ckpt["scheduler"])
    LoopState(**ckpt["loop"])
    for state in (ckpt.get("rng") or [])[:1]:  # rank 0, as the loop does
        restore_rng_states(state)
    ids = torch.randint(4, 200, (2, 8))
    model(ids, torch.ones_like(ids, dtype=torch.bool)).float().sum().backward()
    opt.step()
    sched.step()
    assert all(("falling back" in w) for w in warnings)
    return path.name


POOL: tuple[Any, ...] = (None, "abc", -1, 0, 2**70, 1.5, float("nan"), [], {}, [1, 2], {"x": 1}, True)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict) and len(prefix) < 4:
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list) and len(prefix) < 4:
        for i, v in enumerate(obj[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _mangle(rng: random.Random, ckpt: dict[str, Any]) -> None:
    import torch

    where = rng.choice(_paths(ckpt))
    parent = ckpt
    for k in where[:-1]:
        parent = parent[k]
    leaf = where[-1]
    choice = rng.randrange(4)
    if choice == 0 and isinstance(parent, dict):
        del parent[leaf]
    elif choice == 1 and isinstance(parent[leaf], torch.Tensor) and parent[leaf].dim() > 0:
        shape = list(parent[leaf].shape)
        shape[rng.randrange(len(shape))] += rng.choice((-1, 1))
        parent[leaf] = torch.zeros([max(s, 0) for s in shape])
    else:
        parent[leaf] = rng.choice(POOL)


@pytest.mark.parametrize("index", range(16))
def test_structure(index: int, tiny_run: Path, tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.ckpt.checkpoint import sha256_of, sidecar_path

    rng = cases(21, 16)[index]
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    path = run / "checkpoints" / NEWEST
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    for _ in range(rng.randint(1, 3)):
        _mangle(rng, ckpt)
    torch.save(ckpt, path)
    sidecar_path(path).write_text(f"{sha256_of(path)}  {path.name}\n")  # only the structure check can object
    with deadline():
        chosen = _resume_like_the_loop(run / "checkpoints", run)
    assert chosen in (NEWEST, PREVIOUS)


@pytest.mark.parametrize("index", range(12))
def test_bytes(index: int, tiny_run: Path, tmp_path: Path) -> None:
    rng = cases(22, 12)[index]
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    path = run / "checkpoints" / NEWEST
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    if index % 4 == 0:
        data = data[: rng.randrange(len(data))]  # truncated as by a crash
    path.write_bytes(bytes(data))
    keep_hash = index % 2 == 0
    if not keep_hash:
        path.with_name(path.name + ".sha256").unlink()  # a checkpoint from before hashes: structure only
    with deadline():
        chosen = _resume_like_the_loop(run / "checkpoints", run)
    if keep_hash:
        assert chosen == PREVIOUS  # the recorded sha256 catches every changed byte
    else:
        assert chosen in (NEWEST, PREVIOUS)


# -- the checkpoint reproducers, by name -------------------------------------------------------------


def _fresh_copy(tiny_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    return run


def test_regression_zero_byte_newest_checkpoint_falls_back(tiny_run: Path, tmp_path: Path) -> None:
    run = _fresh_copy(tiny_run, tmp_path)
    (run / "checkpoints" / NEWEST).write_bytes(b"")  # was: IndexError in the error handler
    assert _resume_like_the_loop(run / "checkpoints", run) == PREVIOUS


@pytest.mark.parametrize("field", ["loop", "world_size", "step", "config", "model"])
def test_regression_missing_or_mangled_fields_fall_back(field: str, tiny_run: Path, tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.ckpt.checkpoint import sha256_of, sidecar_path

    run = _fresh_copy(tiny_run, tmp_path)
    path = run / "checkpoints" / NEWEST
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if field == "step":
        ckpt["step"] = "abc"
    elif field == "config":
        ckpt["config"] = "not a dict"
    elif field == "model":
        key = next(iter(ckpt["model"]))
        ckpt["model"][key] = torch.zeros(2, 2)  # wrong shape
    else:
        del ckpt[field]
    torch.save(ckpt, path)
    sidecar_path(path).write_text(f"{sha256_of(path)}  {path.name}\n")
    assert _resume_like_the_loop(run / "checkpoints", run) == PREVIOUS


def test_regression_a_hundred_byte_flips_are_all_caught(tiny_run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.ckpt.checkpoint import CheckpointError, load_checkpoint

    src = tiny_run / "checkpoints" / NEWEST
    data = src.read_bytes()
    bad = tmp_path / NEWEST
    shutil.copy(src.with_name(src.name + ".sha256"), bad.with_name(bad.name + ".sha256"))
    rng = random.Random(100)
    caught = 0
    for _ in range(100):  # the issue: 72 of 100 loaded without a word
        at = rng.randrange(len(data))
        bad.write_bytes(data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :])
        with pytest.raises(CheckpointError):
            load_checkpoint(bad)
        caught += 1
    assert caught == 100


def test_regression_a_full_disk_is_error_and_hint_and_keeps_the_checkpoints(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    import torch

    from mw_env.trainer import __main__ as entry

    run = _fresh_copy(tiny_run, tmp_path)
    before = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}

    def full(obj: Any, fh: Any, *a: Any, **k: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    args = ["run", "--config", "smoke"]
    for item in (*TINY, f"runtime.out_dir={run}", "runtime.max_steps=3"):
        args += ["--set", item]
    rc = entry.main(args)
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "error: cannot write checkpoint" in err and "the disk is full" in err and "hint: free space" in err
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == before
