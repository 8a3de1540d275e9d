"""expand_files resolves each match as Path.resolve(strict=True) would, with one lstat a plain file."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.files import expand_files


def test_matches_resolve_as_a_full_resolve_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    for name in ("a.parquet", "b.jsonl", "sub/c.parquet"):
        (real / name).write_bytes(b"x")
    (tmp_path / "via").symlink_to(real)  # a linked folder: its files resolve into real/
    (real / "link.parquet").symlink_to("sub/c.parquet")  # a linked file: resolves to its target
    monkeypatch.chdir(tmp_path)
    patterns = ["via/*.parquet", str(tmp_path / "via/sub/../*.jsonl"), "real/sub/*.parquet"]
    want = [Path(m).resolve(strict=True) for p in patterns for m in sorted(glob.glob(os.path.expanduser(p)))]
    got = expand_files(patterns, "data.train_files")
    assert got == want
    assert real / "sub" / "c.parquet" in got and not any("via" in str(p) for p in got)
    assert expand_files(["*.parquet"], "k", base=real / "sub") == [real / "sub" / "c.parquet"]


def test_a_dangling_link_and_a_folder_are_named(tmp_path: Path) -> None:
    (tmp_path / "gone.parquet").symlink_to(tmp_path / "nowhere.parquet")
    with pytest.raises(InputError, match=r"cannot read .*gone\.parquet"):
        expand_files([str(tmp_path / "*.parquet")], "data.train_files")
    (tmp_path / "gone.parquet").unlink()
    (tmp_path / "dir.parquet").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        expand_files([str(tmp_path / "*.parquet")], "data.train_files")


def test_a_folder_named_as_a_file_gets_the_glob_to_paste(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "part-0.parquet").write_bytes(b"")
    with pytest.raises(InputError) as exc:
        expand_files(["data/"], "data.train_files", base=tmp_path)
    assert (
        exc.value.message
        == f"data.train_files: {tmp_path / 'data'} is a folder (not a regular file), holding its .parquet files"
    )
    assert exc.value.hint == "name the files in it with a glob: --set 'data.train_files=[data/*.parquet]'"
