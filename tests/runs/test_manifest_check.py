"""What `train verify` prints for each kind of failure, and the summary's count of them (one list of kinds)."""

from __future__ import annotations

from pathlib import Path

from mw_env.rundir.manifest import verify_manifest, write_manifest


def test_each_kind_is_named_per_item_and_counted_in_the_summary(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    write_manifest(tmp_path)
    (tmp_path / "a.txt").write_text("changed")
    (tmp_path / "b.txt").unlink()
    (tmp_path / "c.txt").write_text("new")
    check = verify_manifest(tmp_path)
    assert not check.ok
    assert check.problems() == [
        ("changed", "changed", ("a.txt",)),
        ("missing", "missing", ("b.txt",)),
        ("not listed", "not in the manifest", ("c.txt",)),
    ]
    assert check.summary(tmp_path).startswith("FAILED: 1 changed, 1 missing, 1 not listed (of 2 files listed")


def test_a_clean_folder_has_no_problems(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    write_manifest(tmp_path)
    check = verify_manifest(tmp_path)
    assert check.ok and check.problems() == []
    assert check.summary(tmp_path).startswith("ok: 1 files listed")
