"""The lock entry mw-env writes for a wheelhouse file (venv/lock/localwheel.py), against uv's own.

The entry must be what `uv pip compile --format pylock.toml` writes for the same file (compared byte for
byte with the real uv, in a folder whose name holds every character uv encodes or keeps), and it is
written only where it is certain: the installed distribution has that file's tags, and no other wheel of
the version could have been uv's choice.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import StepFailed
from mw_env.sources import wheelhash
from mw_env.venv.lock.localwheel import entry, file_url, installed_from, local_entries, sole_candidate
from mw_env.venv.lock.make import compile_lock
from provision.provision_support import find_uv_binary
from wheelfactory import build_wheel as _build

PY = f"{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}"
CP = f"cp{sys.version_info[0]}{sys.version_info[1]}"
# Every printable ASCII character uv keeps or encodes in a file URL, but `#` and `,` (uv reads a
# --find-links value up to them), a space and a non-ASCII letter.
ODD = "a b+c%d ü[y]{z}@~'!;=&$()`^|<>\"?"


def build_wheel(dest: Path, name: str, version: str, *, tag: str) -> Path:
    py, abi, plat = tag.split("-")
    return _build(dest, name, version, python_tag=py, abi_tag=abi, platform_tag=plat)


def _uv() -> str:
    uv = find_uv_binary()
    if uv is None:
        pytest.skip("uv is not installed here")
    return uv


def _uv_lock(uv: str, folder: Path, req: str, tmp: Path) -> str:
    (tmp / "req.txt").write_text(req + "\n")
    out = tmp / "pylock.toml"
    res = subprocess.run(
        [
            *(
                uv,
                "pip",
                "compile",
                "-q",
                "--format",
                "pylock.toml",
                "--no-header",
                "--no-deps",
                "--no-index",
            ),
            *("--python", sys.executable, "--find-links", str(folder), str(tmp / "req.txt"), "-o", str(out)),
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))},
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return out.read_text()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("folder_name", ["plain", ODD])
def test_the_entry_is_uvs_byte_for_byte(tmp_path, folder_name):
    uv = _uv()
    folder = tmp_path / folder_name
    folder.mkdir()
    wheel = build_wheel(folder, "demo-pkg", "1.0+cpu", tag=f"{CP}-{CP}-manylinux_2_28_x86_64")
    text = _uv_lock(uv, folder, "demo-pkg==1.0+cpu", tmp_path)
    theirs = "[[packages]]" + text.split("[[packages]]", 1)[1]
    assert entry("demo-pkg", "1.0+cpu", wheel, _sha(wheel)) == theirs
    assert file_url(wheel) in theirs


def test_file_url_keeps_what_uv_keeps_and_encodes_the_rest():
    assert file_url(Path("/w/torch-2.13.0+cpu-cp311.whl")) == "file:///w/torch-2.13.0+cpu-cp311.whl"
    assert file_url(Path("/w/a b/%/ü/#?")) == "file:///w/a%20b/%25/%C3%BC/%23%3F"


def test_sole_candidate_ignores_other_pythons_and_machines_only(tmp_path, monkeypatch):
    from mw_env.sources import wheelhouse

    monkeypatch.setattr(wheelhouse, "_machine_arch", lambda: "x86_64")
    chosen = build_wheel(tmp_path, "torch", "2.13.0+cpu", tag=f"{CP}-{CP}-manylinux_2_28_x86_64")
    build_wheel(tmp_path, "torch", "2.13.0+cpu", tag="cp39-cp39-manylinux_2_28_x86_64")
    build_wheel(tmp_path, "torch", "2.13.0+cpu", tag=f"{CP}-{CP}-manylinux_2_28_aarch64")
    build_wheel(tmp_path, "torch", "2.12.0+cpu", tag=f"{CP}-{CP}-manylinux_2_28_x86_64")
    assert sole_candidate(chosen, [str(tmp_path)], PY)
    # Another build of the same version this Python could take: uv's choice, not ours to guess.
    other = tmp_path / "more"
    other.mkdir()
    build_wheel(other, "torch", "2.13.0+cpu", tag=f"{CP}-{CP}-manylinux_2_17_x86_64")
    assert not sole_candidate(chosen, [str(tmp_path), str(other)], PY)
    assert not sole_candidate(chosen, [str(tmp_path), "https://example.org/wheels/"], PY)
    abi3 = tmp_path / "abi3"
    abi3.mkdir()
    build_wheel(abi3, "torch", "2.13.0+cpu", tag="cp39-abi3-manylinux_2_28_x86_64")  # fits 3.9 and later
    assert not sole_candidate(chosen, [str(tmp_path), str(abi3)], PY)
    build_wheel(tmp_path, "torch", "2.13.0+cpu", tag="py3-none-any")
    assert not sole_candidate(chosen, [str(tmp_path)], PY)


def _site_with(tmp_path: Path, name: str, version: str, tags: list[str]) -> Path:
    site = tmp_path / "site"
    d = site / f"{name}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (d / "WHEEL").write_text("Wheel-Version: 1.0\n" + "".join(f"Tag: {t}\n" for t in tags))
    return site


def test_installed_from_needs_the_same_version_and_tags(tmp_path):
    wheel = build_wheel(tmp_path, "torch", "2.13.0+cpu", tag=f"{CP}-{CP}-manylinux_2_28_x86_64")
    same = _site_with(tmp_path / "a", "torch", "2.13.0+cpu", [f"{CP}-{CP}-manylinux_2_28_x86_64"])
    other_tag = _site_with(tmp_path / "b", "torch", "2.13.0+cpu", [f"{CP}-{CP}-manylinux_2_17_x86_64"])
    other_version = _site_with(tmp_path / "c", "torch", "2.13.1+cpu", [f"{CP}-{CP}-manylinux_2_28_x86_64"])
    assert installed_from(same, wheel)
    assert not installed_from(other_tag, wheel)
    assert not installed_from(other_version, wheel)
    assert not installed_from(None, wheel)
    pins = {"torch": "2.13.0+cpu"}
    assert local_entries(pins, [wheel], site=same, folders=[], python=PY) == {"torch": wheel}
    assert local_entries(pins, [wheel], site=other_tag, folders=[], python=PY) == {}
    assert local_entries({"torch": "2.13.1+cpu"}, [wheel], site=same, folders=[], python=PY) == {}


def _house(tmp_path: Path, *others: tuple[str, str]) -> tuple[Path, Path]:
    """A wheelhouse with a torch build for this Python and `others` (name, version) as py3 wheels."""
    house = tmp_path / "house"
    house.mkdir()
    torch = build_wheel(house, "torch", "2.13.0+cpu", tag=f"{CP}-{CP}-manylinux_2_28_x86_64")
    for name, version in others:
        build_wheel(house, name, version, tag="py3-none-any")
    return house, torch


def _lock(house: Path, pins: dict[str, str], **kw: object) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    args = ["--no-index", "--find-links", str(house)]
    return compile_lock(uv=_uv(), python=Path(sys.executable), pins=pins, env=env, source_args=args, **kw)


def test_compile_lock_with_a_local_entry_equals_uvs_lock(tmp_path):
    """The whole lock text: uv's for both packages, and ours with torch's entry written by mw-env."""
    house, torch = _house(tmp_path, ("zeta", "1.0"), ("alpha", "2.0"))
    pins = {"torch": "2.13.0+cpu", "zeta": "1.0", "alpha": "2.0"}
    ours = _lock(house, pins, companions=["zeta"], local={"torch": torch})
    assert ours == _lock(house, pins, companions=["zeta"])
    assert ours.index('name = "torch"') < ours.index('name = "zeta"') < ours.index('name = "alpha"')


def test_a_wheel_gone_before_the_lock_is_a_step_failure_naming_it(tmp_path):
    house, torch = _house(tmp_path, ("alpha", "2.0"))
    torch.unlink()
    with pytest.raises(StepFailed, match=r"cannot read .*torch-2\.13\.0"):
        _lock(house, {"torch": "2.13.0+cpu", "alpha": "2.0"}, local={"torch": torch})


def test_wheelhash_answers_for_the_file_as_it_is_now(tmp_path):
    f = tmp_path / "w.whl"
    f.write_bytes(b"one" * 1000)
    wheelhash.start(f)
    assert wheelhash.sha256(f) == _sha(f)
    f.write_bytes(b"two, longer" * 1000)  # rewritten: another size, mtime and ctime
    assert wheelhash.sha256(f) == _sha(f)
    g = tmp_path / "fresh.whl"
    g.write_bytes(b"never started")
    assert wheelhash.sha256(g) == _sha(g)
    with pytest.raises(OSError):
        wheelhash.sha256(tmp_path / "missing.whl")


def test_the_run_starts_hashing_only_a_wheelhouse_torch_it_will_lock(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from mw_env.provision.steps import hash_for_the_lock
    from mw_env.provision.table import STEPS

    started: list[Path] = []
    monkeypatch.setattr(wheelhash, "start", started.append)
    wheel = SimpleNamespace(path=tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")

    def plan(origin: str, lock: object = None) -> SimpleNamespace:
        return SimpleNamespace(torch=SimpleNamespace(origin=origin, wheel=wheel), lock=lock)

    hash_for_the_lock(plan("wheelhouse"))
    hash_for_the_lock(plan("index"))  # its hashes come with the index's listing
    hash_for_the_lock(plan("wheelhouse", lock=object()))  # rebuilt from a lock: checked against it instead
    hash_for_the_lock(SimpleNamespace(torch=None, lock=None))
    assert started == [wheel.path]
    assert [s.id for s in STEPS if s.early is hash_for_the_lock] == ["lock"]


def test_a_hash_still_running_when_the_run_ends_is_stopped(tmp_path):
    """The child that hashes (SCHED_IDLE, dying with its parent) is killed by stop(): a FIFO with no writer
    keeps it reading until then."""
    fifo = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    os.mkfifo(fifo)
    wheelhash.start(fifo)
    children = list(wheelhash._children.values())
    assert len(children) == 1 and children[0].poll() is None
    # Opening the FIFO to write returns once the child opened it to read, after it chose its policy: it runs
    # only on a core nothing else wants (SCHED_IDLE), so it never takes a share of uv's unpacking.
    with open(fifo, "wb"):
        assert os.sched_getscheduler(children[0].pid) == os.SCHED_IDLE
        wheelhash.stop()
    assert children[0].returncode is not None and not wheelhash._children


def test_the_folders_searched_are_those_uv_is_given(tmp_path):
    """A --find-links folder from the command line (not pip's configuration) holding another build of the
    same torch: uv may take either, so the entry is left to uv."""
    from mw_env.venv.lock import make

    house, torch = _house(tmp_path)
    cli = tmp_path / "cli-wheels"
    cli.mkdir()
    build_wheel(cli, "torch", "2.13.0+cpu", tag=f"{CP}-{CP}-manylinux_2_17_x86_64")
    args = ["--find-links", str(house), "--index", "https://example.org/simple", "--find-links", str(cli)]
    assert make._folders(args) == [str(house), str(cli)]
    assert sole_candidate(torch, make._folders(args[:2]), PY)
    assert not sole_candidate(torch, make._folders(args), PY)
