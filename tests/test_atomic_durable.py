"""Durable and merely atomic writes: which fsyncs each makes (a power cut is not testable here, its syscalls are)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mw_env.base import atomic
from mw_env.base.errors import InputError
from mw_env.provision.state import State


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fsync made, as "file" or "dir" (what the descriptor names)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_a_durable_write_syncs_the_file_before_the_rename_and_the_folder_after(tmp_path: Path, fsyncs):
    target = tmp_path / "record.json"
    atomic.write_text_atomic(target, "one\n")
    assert target.read_text() == "one\n"
    # once each: the file while open (its data before the rename), the folder (the rename itself)
    assert fsyncs == ["file", "dir"]
    fsyncs.clear()
    with atomic.atomic_path(tmp_path / "model.bin") as tmp:  # a library's writer closes the file itself
        tmp.write_bytes(b"\0" * 8)
    assert fsyncs == ["file", "dir"]


def test_a_write_that_need_not_survive_a_power_cut_makes_no_fsync_and_is_still_atomic(tmp_path: Path, fsyncs):
    target = tmp_path / "state.json"
    target.write_text("old\n")
    atomic.write_text_atomic(target, "new\n", durable=False)
    assert target.read_text() == "new\n" and fsyncs == []
    # a failing writer leaves the old file and no temporary, durable or not
    with pytest.raises(RuntimeError), atomic.atomic_open(target, durable=False) as fh:
        fh.write("half")
        raise RuntimeError("writer died")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    # a node at the path is refused as by a durable write, and left as it is
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="fifo"):
        atomic.write_text_atomic(fifo, "x", durable=False)
    assert fifo.is_fifo()


def test_bootstraps_step_state_is_written_without_fsync(tmp_path: Path, fsyncs):
    # A dozen marks per bootstrap, each right after uv wrote gigabytes: an fsync would wait for that writeback,
    # and a lost state only makes the next run check its steps again.
    state = State.load(tmp_path)
    state.mark("torch", "done", "k1")
    assert fsyncs == []
    assert State.load(tmp_path).is_done("torch", "k1")


def test_a_torn_or_empty_state_file_is_read_as_nothing_done(tmp_path: Path):
    # What a power cut may leave of a state written without fsync: every step checks itself again.
    for text in ("", '{"steps": {"torch": {"status": "do', "\0\0\0\0"):
        (tmp_path / ".mw-env-state.json").write_text(text)
        assert State.load(tmp_path).steps == {}
