from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mw_env.runs.runs import RunRecord

from .runs_helpers import kill_group, launch


@pytest.fixture
def start_child(tmp_path: Path) -> Iterator[Callable[..., RunRecord]]:
    """Start a stand-in trainer (body of Python code) detached into tmp_path/run; killed at teardown."""
    started: list[RunRecord] = []

    def _start(body: str, run_dir: Path | None = None, **kwargs) -> RunRecord:
        record = launch(run_dir or tmp_path / "run", body, **kwargs)
        started.append(record)
        return record

    yield _start
    for record in started:
        kill_group(record)
