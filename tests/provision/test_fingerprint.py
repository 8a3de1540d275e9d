"""The verify key's fingerprint (venvinfo.installed_fingerprint): the files whose size differs from their RECORD.

Bootstrap reads most of it while the extras install (record_damage, from verifystep.BackgroundVerify) and passes that
read as `known`: the digest must be the one a full read gives, a package that the extras replaced or added is read
again, and the digest stays the one earlier versions recorded (a key that changed would make every finished venv
verify again after an upgrade).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.venv.venvinfo import installed_fingerprint, record_damage, site_packages

# installed_fingerprint of _venv()'s venv as mw-env 0.3.0 (before `known`) computed it.
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


def test_a_read_made_before_gives_the_digest_of_a_full_read(venv):
    known = record_damage(venv)
    assert set(known) == {str(p) for p in site_packages(venv).glob("*.dist-info/RECORD")}
    assert installed_fingerprint(venv, known) == installed_fingerprint(venv) == DIGEST_BEFORE


def test_damage_shows_and_a_repair_clears_it(venv):
    healthy = installed_fingerprint(venv)
    site = site_packages(venv)
    (site / "alpha" / "data.bin").write_bytes(b"\0" * 100)
    (site / "beta.py").write_bytes(b"print('b')\n")
    repaired = installed_fingerprint(venv)
    assert repaired != healthy
    (site / "alpha" / "__init__.py").unlink()
    assert installed_fingerprint(venv) not in (healthy, repaired)


def test_a_package_replaced_after_the_read_is_read_again(venv):
    known = record_damage(venv)
    site = site_packages(venv)
    # The extras install replaces beta (uv removes the old dist-info and writes a new RECORD): the new files
    # are whole, and the read made before must not stand for them.
    record = site / "beta-2.0.dist-info" / "RECORD"
    text = record.read_text()
    record.unlink()
    (site / "beta.py").write_bytes(b"print('b')\n")
    record.write_text(text)
    assert installed_fingerprint(venv, known) == installed_fingerprint(venv)
    assert installed_fingerprint(venv, known) != DIGEST_BEFORE


def test_a_package_added_after_the_read_is_read(venv):
    known = record_damage(venv)
    site = site_packages(venv)
    _package(site, "gamma-3.0", {"gamma.py": b"g = 3\n"})
    (site / "gamma.py").write_bytes(b"")
    assert installed_fingerprint(venv, known) == installed_fingerprint(venv) != DIGEST_BEFORE


def test_a_package_removed_after_the_read_is_gone_from_the_digest(venv):
    known = record_damage(venv)
    site = site_packages(venv)
    (site / "beta-2.0.dist-info" / "RECORD").unlink()
    assert installed_fingerprint(venv, known) == installed_fingerprint(venv) != DIGEST_BEFORE


def test_the_read_stands_for_a_record_that_is_the_same_file(venv):
    # The contract, stated: `known` is the damage as read moments before, while the extras installed (which
    # writes a new RECORD for whatever it installs). A file changed since under an unchanged RECORD is seen by
    # the next full read (the next run's done-check), not by this one.
    known = record_damage(venv)
    site = site_packages(venv)
    (site / "alpha" / "data.bin").write_bytes(b"\0" * 100)
    assert installed_fingerprint(venv, known) == DIGEST_BEFORE != installed_fingerprint(venv)


def test_an_unreadable_record_counts_as_damage(venv):
    # A RECORD that cannot be read (here a folder in its place: unreadable for root too) is itself damage.
    record = site_packages(venv) / "beta-2.0.dist-info" / "RECORD"
    record.unlink()
    record.mkdir()
    assert installed_fingerprint(venv) != DIGEST_BEFORE
    assert installed_fingerprint(venv, record_damage(venv)) == installed_fingerprint(venv)


def test_a_venv_without_site_packages_has_the_empty_digest(tmp_path):
    assert (
        installed_fingerprint(tmp_path) == installed_fingerprint(tmp_path, {})
        and record_damage(tmp_path) == {}
    )


def _script(site: Path) -> str:
    """venv/damage.py as BackgroundVerify runs it: `python -I -S damage.py SITE`, its JSON on stdout."""
    import subprocess
    import sys

    from mw_env.venv import damage

    res = subprocess.run(
        [sys.executable, "-I", "-S", damage.__file__, str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return res.stdout


def test_the_damage_child_answers_what_the_fingerprint_reads_in_process(venv):
    from mw_env.venv import damage

    site = site_packages(venv)
    (site / "gamma-3.0.dist-info").mkdir()
    (site / "gamma-3.0.dist-info" / "RECORD").write_bytes(b'\xff\xfe not utf-8 "unclosed,\n')  # read as text
    (site / "delta-4.0.dist-info").mkdir()  # no RECORD: left out, as by the glob
    known = damage.from_json(_script(site))
    assert known == record_damage(venv)
    assert any(lines for _, lines in known.values())  # the damage itself came through, byte for byte
    assert installed_fingerprint(venv, known) == installed_fingerprint(venv)


def test_a_damage_answer_of_another_shape_is_refused_not_trusted():
    from mw_env.venv import damage

    for text in ("[]", '{"p": [[1, 2, 3], []]}', '{"p": 5}', '{"p": [["a", 2, 3, 4], []]}', "not json"):
        with pytest.raises(ValueError):
            damage.from_json(text)


def test_the_damage_child_runs_only_on_cycles_nothing_else_wants(tmp_path):
    """SCHED_IDLE (or nice 19), so it takes no share of uv's cores: seen while it waits on a RECORD that is a FIFO."""
    import os
    import subprocess
    import sys

    from mw_env.venv import damage

    site = tmp_path / "site"
    (site / "slow-1.0.dist-info").mkdir(parents=True)
    fifo = site / "slow-1.0.dist-info" / "RECORD"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", damage.__file__, str(site)], stdout=subprocess.PIPE, text=True
    )
    try:
        with open(fifo, "w") as writer:  # opens once the child opened it for reading: it is blocked there now
            policy = os.sched_getscheduler(child.pid)
            nice = os.getpriority(os.PRIO_PROCESS, child.pid)
            writer.write("slow/x.py,sha256=a,5\n")
        out, _ = child.communicate(timeout=120)
    finally:
        child.kill()
    assert policy == os.SCHED_IDLE or nice == 19
    assert damage.from_json(out)[str(fifo)][1] == (b"slow/x.py\x00-1\n",)  # lost: its damage line
