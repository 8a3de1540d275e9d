"""A FIFO named as a shard is refused at start with an error naming it (never a hang on the footer read)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mw_env.base.errors import InputError

pytestmark = pytest.mark.torch


def test_a_fifo_as_a_shard_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from mw_env.trainspec.files import expand_files

    fifo = tmp_path / "shard-000.parquet"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file") as info:
        expand_files([str(tmp_path / "*.parquet")], "data.train_files")
    assert str(fifo) in info.value.message and info.value.hint
