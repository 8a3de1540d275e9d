"""The verify key's fingerprint (integrity.installed_fingerprint): the files whose size differs from their RECORD.

The digest stays the one earlier versions recorded (a key that changed would make every finished venv verify again
after an upgrade).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.venv.integrity import installed_fingerprint
from mw_env.venv.venvinfo import site_packages

# installed_fingerprint of _venv()'s venv as mw-env 0.3.0 computed it.
DIGEST_BEFORE = "ba1beb12c65679f5"


def _package(site: Path, name: str, files: dict[str, bytes]) -> Path:
    d = site / f"{name}.dist-info"
    d.mkdir(parents=True)
    rows = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},sha256=x,{len(data)}")
    # RECORD itself, a file outside site-packages and byte-code carry no size that counts
    rows += [f"{name}.dist-info/RECORD,,", "../../../bin/tool,sha256=y,10", "alpha/__pycache__/x.pyc,,"]
    (d / "RECORD").write_text("\n".join(rows) + "\n")
    return d / "RECORD"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """Two packages: alpha with a half-written file, beta with a lost one."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    _package(site, "alpha-1.0", {"alpha/__init__.py": b"x = 1\n", "alpha/data.bin": b"\0" * 100})
    _package(site, "beta-2.0", {"beta.py": b"print('b')\n"})
    (site / "alpha" / "data.bin").write_bytes(b"\0" * 50)
    (site / "beta.py").unlink()
    return venv


def test_the_digest_is_the_one_earlier_versions_recorded(venv):
    assert installed_fingerprint(venv) == DIGEST_BEFORE


def test_damage_shows_and_a_repair_clears_it(venv):
    healthy = installed_fingerprint(venv)
    site = site_packages(venv)
    (site / "alpha" / "data.bin").write_bytes(b"\0" * 100)
    (site / "beta.py").write_bytes(b"print('b')\n")
    repaired = installed_fingerprint(venv)
    assert repaired != healthy
    (site / "alpha" / "__init__.py").unlink()
    assert installed_fingerprint(venv) not in (healthy, repaired)


def test_a_file_with_bytes_appended_is_no_damage(tmp_path):
    # A file that is its installed bytes with more appended (a CA bundle extended for a proxy) is kept on
    # purpose: the verify key does not change with it (a re-run stays a no-op); any other size does.
    import base64
    import hashlib

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    data = b"-----BEGIN CERTIFICATE-----\n"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    (site / "certifi").mkdir(parents=True)
    (site / "certifi" / "cacert.pem").write_bytes(data)
    (site / "certifi-1.0.dist-info").mkdir()
    (site / "certifi-1.0.dist-info" / "RECORD").write_text(
        f"certifi/cacert.pem,sha256={digest},{len(data)}\n"
    )
    healthy = installed_fingerprint(tmp_path / "venv")
    (site / "certifi" / "cacert.pem").write_bytes(data + b"corp proxy\n")
    assert installed_fingerprint(tmp_path / "venv") == healthy
    (site / "certifi" / "cacert.pem").write_bytes(b"X" + data)
    assert installed_fingerprint(tmp_path / "venv") != healthy


def test_an_unreadable_record_counts_as_damage(venv):
    # A RECORD that cannot be read (here a folder in its place: unreadable for root too) is itself damage.
    record = site_packages(venv) / "beta-2.0.dist-info" / "RECORD"
    record.unlink()
    record.mkdir()
    assert installed_fingerprint(venv) != DIGEST_BEFORE


def test_a_record_not_utf8_is_read_and_a_dist_info_without_one_is_left_out(venv):
    site = site_packages(venv)
    (site / "delta-4.0.dist-info").mkdir()  # no RECORD: nothing to compare, nothing digested
    assert installed_fingerprint(venv) == DIGEST_BEFORE
    (site / "gamma-3.0.dist-info").mkdir()
    (site / "gamma-3.0.dist-info" / "RECORD").write_bytes(b'\xff\xfe not utf-8 "unclosed,\n')  # read as text
    assert installed_fingerprint(venv) == DIGEST_BEFORE  # no row with a size: no damage


def test_a_venv_without_site_packages_has_the_empty_digest(tmp_path):
    import hashlib

    assert installed_fingerprint(tmp_path) == hashlib.sha256().hexdigest()[:16]
