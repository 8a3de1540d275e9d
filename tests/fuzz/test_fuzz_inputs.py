"""Seeded mutation over every user-input surface: profiles, trainer configs, `--set`, machine roots, logs.

Each case must end with a documented exit code, no traceback and no hang (fuzz_support.run_cli). A
failing case prints its index; `cases(SEED, N)[i]` replays it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .fuzz_support import NASTY, cases, files_under, mutate, run_cli

REPO = Path(__file__).resolve().parents[2]
SHIPPED_PROFILES = REPO / "src" / "mw_env" / "profiles"
SMOKE = REPO / "src" / "mw_env" / "trainspec" / "configs" / "smoke.yaml"
MACHINES = REPO / "tests" / "fixtures" / "machines"


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No real GPU tools, no user profile folders, no network checks: only the input under test varies.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("MW_ENV_PROFILES", raising=False)
    monkeypatch.delenv("MW_ENV_ROOT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("index", range(30))
def test_profiles(index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = cases(11, 30)[index]
    source = rng.choice(sorted(SHIPPED_PROFILES.glob("*.yaml")))
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / f"fuzzed-{index}.yaml").write_bytes(
        mutate(
            rng,
            source.read_bytes().replace(f"name: {source.stem}".encode(), f"name: fuzzed-{index}".encode()),
        )
    )
    rc, _out, err = run_cli(["profiles", "--profiles-dir", str(folder)], capsys)
    assert rc in (0, 2)
    if rc == 2:
        assert f"fuzzed-{index}" in err or str(folder) in err  # the error names the file


@pytest.mark.parametrize("index", range(30))
def test_trainer_configs(index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = cases(12, 30)[index]
    config = tmp_path / "fuzzed.yaml"
    config.write_bytes(mutate(rng, SMOKE.read_bytes()))
    rc, _out, err = run_cli(["train", "config", "--config", str(config), "--json"], capsys)
    assert rc in (0, 2)
    if rc == 2:
        assert "config" in err


def _set_value(rng) -> str:
    parts = [rng.choice(NASTY).decode("utf-8", errors="surrogateescape") for _ in range(rng.randint(1, 3))]
    value = "".join(parts)
    # Command-line arguments cannot hold NUL or lone surrogates; what a shell can pass, we test.
    return value.replace("\x00", "").encode("utf-8", errors="replace").decode("utf-8", errors="replace")


@pytest.mark.parametrize("index", range(40))
def test_set_values(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    from mw_env.trainspec.config import all_keys

    rng = cases(13, 40)[index]
    key = rng.choice([*all_keys(), "model", "nosuch.key", "model.", ".x"])
    rc, _out, err = run_cli(
        ["train", "config", "--config", "smoke", "--set", f"{key}={_set_value(rng)}"], capsys
    )
    assert rc in (0, 2)
    if rc == 2:
        assert "--set" in err or "config" in err


def _vandalise(rng, root: Path, index: int) -> None:
    targets = files_under(root)
    for path in rng.sample(targets, k=min(len(targets), rng.randint(1, 4))):
        kind = rng.randrange(9)
        if kind == 0:
            path.write_bytes(os.urandom(rng.randint(0, 64)))
        elif kind == 1:
            path.write_bytes(b"")
        elif kind == 2:
            path.write_bytes(rng.choice(NASTY))
        elif kind == 3:
            path.write_bytes(mutate(rng, path.read_bytes()))
        elif kind == 4:
            path.unlink()
            os.mkfifo(path)  # a FIFO where a file was: must read as "not available", never block
        elif kind == 5:
            path.unlink()
            path.mkdir()
        elif kind == 6:
            path.unlink()
            path.symlink_to("/dev/zero")  # an endless file
        elif kind == 7:
            path.unlink()
            path.symlink_to(path.name)  # a symlink loop
        else:
            path.unlink()


ROOTS = ("incus-780m", "nvidia-l4-550", "strix-halo-8060s", "igpu-780m-dgpu-7900xtx", "cpu-only", "mi300x-x4")


@pytest.mark.parametrize("index", range(24))
def test_machine_roots(
    index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = cases(14, 24)[index]
    name = ROOTS[index % len(ROOTS)]
    root = tmp_path / "root"
    shutil.copytree(MACHINES / name, root, symlinks=True)
    monkeypatch.setenv("PATH", f"{root / '.mw-env-bin'}:/usr/bin:/bin")
    _vandalise(rng, root, index)
    run_cli(["detect", "--root", str(root), "--json"], capsys)
    run_cli(["host-commands", "--root", str(root)], capsys)
    if index % 5 == 0:  # the doctor is slower: every fifth root
        run_cli(["doctor", "--root", str(root), "--venv", str(tmp_path / "no-venv"), "--json"], capsys)


LOG_LINES = (
    b"step 10 loss 1.23",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    b"HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
    b"RuntimeError: HIP error: invalid device function",
    b"NCCL WARN Connect to 10.0.0.2<43481> failed : Connection refused",
    b"Memory access fault by GPU node-1 (Agent handle: 0x5a) on address 0x7f. Reason: Page not present",
)


@pytest.mark.parametrize("index", range(16))
def test_explain_logs(index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = cases(15, 16)[index]
    lines = [rng.choice(LOG_LINES) for _ in range(rng.randint(0, 30))]
    log = mutate(rng, b"\n".join(lines) + b"\n", rounds=rng.randint(0, 6))
    if index % 4 == 0:
        log += rng.choice(LOG_LINES) + b" \x1b[2J" + b"x" * 200_000 + b"\n"  # a huge matching line
    path = tmp_path / "train.log"
    path.write_bytes(log)
    for args in (["doctor", "--explain", str(path)], ["doctor", "--explain", str(path), "--json"]):
        rc, out, _err = run_cli(args, capsys)
        assert rc in (0, 1)
        assert "\x1b" not in out  # escapes are shown escaped, never sent to the terminal
        assert max((len(line) for line in out.splitlines()), default=0) < 2000  # every quoted line is capped
    rc, out, _err = run_cli(["doctor", "--explain", "-"], capsys, stdin=log)
    assert rc in (0, 1) and "\x1b" not in out


RUN_FILES = {
    "run.json": b'{"pid": 999999, "start_ticks": 1, "argv": ["x"], "log_file": "train.log", "started_at": 1.0}\n',
    "state.json": b'{"state": "exited", "returncode": 0, "oom_kills": 0, "time": 2.0}\n',
    "metrics.jsonl": b'{"event": "step", "step": 1, "loss": 2.5, "lr": 0.001, "time": 1.0}\n'
    b'{"event": "eval", "step": 1, "loss": 2.4, "token_acc": 0.5, "entity_f1": 0.4, "time": 1.5}\n',
    "train.log": b"step 1 loss 2.5\ntorch.OutOfMemoryError: CUDA out of memory\n",
}


@pytest.mark.parametrize("index", range(16))
def test_run_folders(index: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mw_env.runs.anomalies import KINDS

    rng = cases(16, 16)[index]
    run = tmp_path / "run"
    run.mkdir()
    for name, data in RUN_FILES.items():
        choice = rng.randrange(6)
        if choice == 0:
            os.mkfifo(run / name)  # `status` must not block on it
        elif choice == 1:
            continue
        else:
            (run / name).write_bytes(mutate(rng, data) if choice < 4 else data)
    codes = {0, 1, 2, *(code for code, _ in KINDS.values())}
    for args in (
        ["train", "status", "--out-dir", str(run)],
        ["train", "status", "--out-dir", str(run), "--json"],
    ):
        from mw_env.cli import main

        from .fuzz_support import deadline

        capsys.readouterr()
        with deadline():
            rc = main(args)
        out, err = capsys.readouterr()
        assert rc in codes and "Traceback" not in err, (rc, err[-2000:])
        assert "\x1b" not in out
