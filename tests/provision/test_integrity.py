"""venv/integrity.py: a venv's installed files against their RECORD (issue 40: a venv's files checked, not only
its records). Synthetic site-packages with real RECORD hashes: what is found always (a missing or resized
file), what only when its mtime says it changed (an edit that keeps the size), what only with `full`, the
file appended to that is kept (a CA bundle extended on purpose), a file linked from elsewhere (uv's cache),
and the verify key's fingerprint read in the same pass."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from mw_env.venv import installtimes
from mw_env.venv.integrity import (
    CHANGED,
    EXTENDED,
    MISSING,
    SIZE,
    canonical,
    installed_fingerprint,
    scan,
    scan_venv,
)


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _package(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """A package as an installer leaves it: its files, then its dist-info (METADATA last: the unpack time)."""
    rows = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},{_digest(data)},{len(data)}")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    rows += [f"{info.name}/METADATA,{_digest(b'm')},1", f"{info.name}/RECORD,,", "../../../bin/x,sha256=y,1"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    (info / "METADATA").write_bytes(b"m")
    # Every file of the package as old as its METADATA (uv's cache keeps the unpack time).
    stamp = os.stat(info / "METADATA").st_mtime_ns
    for rel in files:
        os.utime(site / rel, ns=(stamp, stamp))


def _later(path: Path) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("version_info = 3.11.7\n")
    _package(site, "torch", "2.10.0+cpu", {"torch/__init__.py": b"x = 1\n", "torch/version.py": b"v = 1\n"})
    _package(site, "numpy", "2.4.6", {"numpy/__init__.py": b"n = 1\n", "numpy/version.py": b"nv = 1\n"})
    _package(site, "certifi", "2026.7.22", {"certifi/cacert.pem": b"-----CERT-----\n"})
    return venv


def _site(venv: Path) -> Path:
    return venv / "lib" / "python3.11" / "site-packages"


def test_a_whole_venv_has_no_damage_and_hashes_nothing(venv):
    found = scan_venv(venv)
    assert found.damaged == () and found.packages == 3 and found.files == 8 and found.hashed == 0


def test_a_missing_or_resized_file_is_found_by_its_size_alone(venv):
    site = _site(venv)
    (site / "numpy" / "version.py").unlink()
    with open(site / "torch" / "version.py", "ab") as fh:  # appended in place: a damaged torch stays damaged
        fh.write(b"hip = '6.4'\n")
    found = scan_venv(venv)
    (numpy,) = found.of(["numpy"])
    (torch,) = found.of(["Torch"])
    assert [(f.path, f.kind) for f in numpy.faults] == [("numpy/version.py", MISSING)]
    assert [(f.path, f.kind) for f in torch.faults] == [("torch/version.py", EXTENDED)]
    assert numpy.words() == "numpy 2.4.6: numpy/version.py missing" and numpy.requirement == "numpy==2.4.6"
    assert not torch.extended_only or torch.faults[0].kind == EXTENDED


def test_an_edit_of_the_same_size_is_found_by_its_mtime_and_hashed(venv):
    path = _site(venv) / "torch" / "version.py"
    path.write_bytes(b"v = 2\n")  # same size, a later mtime than its package's METADATA
    found = scan_venv(venv)
    (torch,) = found.damaged
    assert [(f.path, f.kind) for f in torch.faults] == [("torch/version.py", CHANGED)]
    assert found.hashed == 1  # only the file whose mtime moved


def test_an_edit_that_keeps_size_and_mtime_is_found_by_a_full_scan_only(venv):
    path = _site(venv) / "numpy" / "__init__.py"
    st = os.stat(path)
    path.write_bytes(b"n = 9\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # a bit flip on the disk, `touch -r`
    assert scan_venv(venv).damaged == ()
    full = scan_venv(venv, full=True)
    assert [d.name for d in full.damaged] == ["numpy"] and full.hashed == full.files
    # ... and by a recheck of the files a repair was about (their mtime is the cache's, not the edit's)
    assert scan_venv(venv, recheck={"numpy": ["numpy/__init__.py"]}).of(["numpy"])


def test_bytes_appended_to_a_file_are_told_apart_from_damage(venv):
    pem = _site(venv) / "certifi" / "cacert.pem"
    with open(pem, "ab") as fh:
        fh.write(b"-----CORPORATE PROXY CERT-----\n")
    (certifi,) = scan_venv(venv).damaged
    assert certifi.extended_only and "extended" in certifi.words()
    pem.write_bytes(b"-----CERX-----\n-----X-----\n")  # longer, but not the original with more after it
    (certifi,) = scan_venv(venv).damaged
    assert not certifi.extended_only and certifi.faults[0].kind == SIZE


def test_a_changed_file_linked_from_elsewhere_is_shared_as_uvs_cache_links_it(venv, tmp_path):
    path = _site(venv) / "torch" / "version.py"
    cache = tmp_path / "cache-copy"
    os.link(path, cache)  # uv installs by hard links from its cache: one inode, two names
    with open(path, "r+b") as fh:  # an edit in place: both names see it
        fh.write(b"v = 3\n")
    _later(path)
    (torch,) = scan_venv(venv).damaged
    assert torch.shared and cache.read_bytes() == b"v = 3\n"
    # A file deleted and written anew is this venv's own: nothing else holds the change.
    path.unlink()
    path.write_bytes(b"v = 4\n")
    (torch,) = scan_venv(venv).damaged
    assert not torch.shared


def test_the_fingerprint_is_the_verify_keys_read_in_the_same_pass(venv):
    site = _site(venv)
    assert scan_venv(venv).fingerprint == installed_fingerprint(venv)
    (site / "numpy" / "version.py").unlink()
    (site / "torch" / "version.py").write_bytes(b"much longer now\n")
    (site / "certifi-2026.7.22.dist-info" / "RECORD").chmod(0o000)
    if os.access(site / "certifi-2026.7.22.dist-info" / "RECORD", os.R_OK):  # root reads it anyway
        (site / "certifi-2026.7.22.dist-info" / "RECORD").write_bytes(b"\xff\x00,\n")
    assert scan_venv(venv).fingerprint == installed_fingerprint(venv)
    assert scan_venv(venv, only=["numpy"]).fingerprint == ""  # a partial scan has none
    assert scan_venv(venv.parent / "nowhere").fingerprint == installed_fingerprint(venv.parent / "nowhere")


def test_only_reads_the_named_packages_by_their_canonical_name(venv):
    (_site(venv) / "numpy" / "version.py").unlink()
    assert scan(_site(venv), only=["torch"]).damaged == ()
    assert [d.name for d in scan(_site(venv), only=["NumPy"]).damaged] == ["numpy"]
    assert canonical("Torch_Audio.x") == "torch-audio-x"


def test_files_written_while_bootstraps_uv_ran_are_not_hashed_and_an_edit_outside_is(venv):
    """uv unpacks a wheel's files in parallel: on a fresh install many are later than their METADATA. Written
    inside one of bootstrap's install windows (venv/installtimes.py), they are trusted without a hash; an edit
    after the install, or one made in uv's cache before a NEW venv linked the file, is outside every window."""
    site = _site(venv)
    s = 1_000_000_000
    unpacked = os.stat(site / "torch-2.10.0+cpu.dist-info" / "METADATA").st_mtime_ns - 100 * s  # in the past
    for info in ("torch-2.10.0+cpu", "numpy-2.4.6"):
        os.utime(site / f"{info}.dist-info" / "METADATA", ns=(unpacked, unpacked))
    for path in site.glob("*/*.py"):  # unpacked after METADATA, as uv's parallel unzip leaves a share of them
        os.utime(path, ns=(unpacked + 2 * s, unpacked + 2 * s))
    assert scan_venv(venv).hashed == 4  # no window recorded: hashed as before
    installtimes.add((unpacked + s, unpacked + 3 * s))  # the install that wrote them
    clean = scan_venv(venv)
    assert clean.damaged == () and clean.hashed == 0
    assert scan_venv(venv, full=True).hashed == clean.files  # `doctor -v` still hashes every file

    # An edit of the same size after the install (in this venv, or in the cache it is linked to): hashed, found.
    (site / "torch" / "version.py").write_bytes(b"v = 2\n")
    # One made in uv's cache before the install that linked it (unpacked earlier, edited, then linked): the
    # mtime is between the unpack and the install, outside the window.
    numpy = site / "numpy" / "version.py"
    numpy.write_bytes(b"nv = 9\n")
    os.utime(numpy, ns=(unpacked + s // 2, unpacked + s // 2))
    found = scan_venv(venv)
    assert [(d.name, [f.kind for f in d.faults]) for d in found.damaged] == [
        ("numpy", [CHANGED]),
        ("torch", [CHANGED]),
    ]
    assert found.hashed == 2


def test_install_windows_merge_and_survive_a_torn_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MW_ENV_STATE_DIR", str(tmp_path / "state"))
    assert installtimes.load() == ()
    with installtimes.recorded():
        pass
    ((start, end),) = installtimes.load()
    assert start < end and installtimes.within(end, installtimes.load())
    installtimes.add((10, 20))
    installtimes.add((15, 30))
    assert installtimes.load()[0] == (10, 30) and not installtimes.within(31, installtimes.load()[:1])
    (tmp_path / "state" / installtimes.FILE).write_text('{"windows": [[1, "x"')
    assert installtimes.load() == ()  # torn: every later file is hashed, as without windows
