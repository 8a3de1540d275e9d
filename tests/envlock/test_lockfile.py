"""The lock reader: a valid lock reads back; every hostile shape is an InputError naming the file and entry."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.venv.lock.drift import compare, installed
from mw_env.venv.lock.lockfile import LOCK_MAX_BYTES, parse_lock, read_lock

from .lock_support import SYMPY_SHA, lock_text

WH = Path("/srv/wheels")


def _parse(text: str, wheelhouses=(WH,)):
    return parse_lock(text, source="lock L", wheelhouses=list(wheelhouses))


def test_a_valid_lock_reads_back():
    lock = _parse(lock_text(WH))
    assert lock.versions() == {"torch": "2.13.0+cpu", "sympy": "1.14.0"}
    assert (
        lock.package("torch").wheels[0].local == WH / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    )
    assert lock.package("SymPy").wheels[0].sha256 == SYMPY_SHA
    assert lock.meta.hardware() == "profile cpu (no GPU)"
    assert len(lock.sha256) == 64


def _edit(old: str, new: str, count: int = 1) -> str:
    text = lock_text(WH)
    assert old in text, old
    return text.replace(old, new, count)


HOSTILE = {
    "not toml": ("lock-version = \n[[", "not valid TOML"),
    "truncated": (lock_text(WH)[: lock_text(WH).index('name = "sympy"') + 8], "not valid TOML"),
    "cut after a package": (lock_text(WH).split("[tool.mw-env]")[0], "no [tool.mw-env] table"),
    "lock version 2": (_edit('lock-version = "1.0"', 'lock-version = "2.0"'), "lock-version = '2.0'"),
    "no packages": (_edit("[[packages]]", "[[other]]", 2), "no [[packages]] entries"),
    "credentials": (
        _edit("https://files.pythonhosted.org/packages/a2", "https://bob:s3cret@files.example/packages/a2"),
        "packages[1] (sympy) wheels[0]: the URL https://bob:***@files.example",
    ),
    "token": (_edit("https://files.pythonhosted.org/packages/a2", "https://TOKEN@files.example/a2"), "***@"),
    "outside the wheelhouse": (_edit(f"file://{WH}/torch", "file:///etc/torch"), "outside the wheelhouse"),
    "dotdot": (_edit(f"file://{WH}/torch", f"file://{WH}/../../etc/torch"), "outside the wheelhouse"),
    "relative path": (
        _edit(f'url = "file://{WH}/torch', 'path = "wheels/torch'),
        "packages[0] (torch) wheels[0]: path = wheels/torch",
    ),
    "bad scheme": (_edit("https://files.pythonhosted.org/packages/a2", "ftp://x/a2"), "only https://"),
    "bad sha": (_edit(SYMPY_SHA, SYMPY_SHA[:-1] + "G"), "packages[1] (sympy) wheels[0]: needs hashes.sha256"),
    "no hash": (_edit(f'hashes = {{ sha256 = "{SYMPY_SHA}" }}', "size = 3"), "needs hashes.sha256"),
    "bad version": (_edit('version = "1.14.0"', 'version = "latest"'), "version = 'latest' is not a PEP 440"),
    "bad name": (_edit('name = "sympy"', 'name = "../../x"'), "is not a package name"),
    "vcs": (_edit('name = "sympy"', 'name = "sympy"\nvcs = { type = "git" }'), "vcs source has no file hash"),
    "twice": (_edit('name = "sympy"', 'name = "torch"'), "packages[1] (torch) is locked twice"),
    "no torch": (_edit('name = "torch"', 'name = "torchx"'), "no torch among the packages"),
    "torch edited": (_edit('torch = "2.13.0+cpu"', 'torch = "2.12.0+cpu"'), "the locked torch is 2.13.0+cpu"),
    "build": (_edit('build = "cpu"', 'build = "metal"'), "build = metal"),
    "format": (_edit("format = 1", "format = 7"), "format = 7"),
    "env name": (lock_text(WH, env='"A B" = "1"'), "env: A B"),
    "env value": (lock_text(WH, env="X = 3"), "env: X = 3"),
    "table as package": (_edit('[[packages]]\nname = "sympy"', "[[packages]]\nname = 3"), "name = 3"),
    "deep": ('lock-version = "1.0"\nx = ' + "[" * 5000 + "]" * 5000, "lock L"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_locks_are_refused_by_name(case: str):
    text, expected = HOSTILE[case]
    with pytest.raises(InputError) as info:
        _parse(text)
    assert info.value.message.startswith("lock L"), info.value.message
    assert expected in info.value.message, info.value.message
    assert info.value.hint
    assert "s3cret" not in info.value.message + (info.value.hint or "")


def test_huge_fifo_and_folder_locks_are_input_errors(tmp_path: Path):
    big = tmp_path / "big.toml"
    with big.open("wb") as fh:
        fh.truncate(LOCK_MAX_BYTES + 1)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path in (big, fifo, tmp_path, tmp_path / "missing.toml"):
        with pytest.raises(InputError) as info:
            read_lock(path)
        assert str(path) in info.value.message


def _dist(site: Path, name: str, version: str, *, folder: bool = False) -> None:
    d = site / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    if folder:
        (d / "direct_url.json").write_text('{"url": "file:///src/mw-env", "dir_info": {"editable": true}}')


def test_drift_names_each_package_with_both_versions(tmp_path: Path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    _dist(site, "torch", "2.13.0+cpu")
    _dist(site, "sympy", "1.13.0")
    _dist(site, "six", "1.17.0")
    _dist(site, "mw_env", "0.1.0", folder=True)  # the project itself is never in a lock
    drift = compare(_parse(lock_text(WH)), installed(tmp_path / "venv"))
    assert drift.lines() == ["sympy 1.14.0 -> 1.13.0 (changed)", "six 1.17.0 (added, not in the lock)"]
    (site / "six-1.17.0.dist-info" / "METADATA").unlink()
    _dist(site, "sympy2", "1")
    (site / "sympy-1.13.0.dist-info" / "METADATA").unlink()
    drift = compare(_parse(lock_text(WH)), installed(tmp_path / "venv"))
    assert "sympy 1.14.0 (removed, the lock has it)" in drift.lines()


def test_freeze_lines_become_exact_pins_and_the_project_is_left_out():
    from mw_env.venv.lock.make import parse_freeze

    frozen = parse_freeze(
        "Using Python 3.11.7 environment at: /v\n"
        "Jinja2==3.1.6\n"
        "-e file:///src/mw-env\n"
        "mw-env @ file:///src/mw-env\n"
        "torch @ file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl\n"
    )
    assert frozen.pins == {"jinja2": "3.1.6", "torch": "2.13.0+cpu"}
    assert frozen.wheel_dirs == ("/opt/wheels",) and len(frozen.skipped) == 2


def test_uvs_refusals_are_said_in_the_locks_words():
    from mw_env.venv.lock.rebuild import install_failure

    lock = _parse(lock_text(WH))
    mismatch = (
        "error: Failed to download `sympy==1.14.0`\n  cause: Hash mismatch for `sympy==1.14.0`\n\n"
        f"         Expected:\n           sha256:{'0' * 64}\n\n         Computed:\n           sha256:{SYMPY_SHA}\n"
    )
    err = install_failure(mismatch, lock, returncode=1)
    assert (
        f"the wheel of sympy==1.14.0 does not match the lock: the lock says sha256:{'0' * 64}" in err.message
    )
    assert f"the file is sha256:{SYMPY_SHA}; nothing was installed" in err.message
    offline = (
        "error: Failed to download `sympy==1.14.0`\n  cause: Network connectivity is disabled, but the requested "
        "data wasn't found in the cache: https://files.example/sympy-1.14.0-py3-none-any.whl\n"
    )
    err = install_failure(offline, lock, returncode=1)
    assert "not available offline: https://files.example/sympy-1.14.0-py3-none-any.whl" in err.message
    assert "uv's cache" in err.message and "without --offline" in (err.hint or "")
