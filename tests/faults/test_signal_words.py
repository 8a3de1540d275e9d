"""What a killed trainer is told (issue 22): a signal the user sent is never explained as running out of
memory; a SIGKILL is blamed on the OOM killer only when the cgroup's memory.events says it killed."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mw_env.base.errors import StepFailed
from mw_env.runs import foreground
from mw_env.runs.rendezvous import Nodes


def test_words_for_each_cause(tmp_path: Path) -> None:
    oom = foreground.killed(9, tmp_path, sent=False, oom=True)
    assert "out-of-memory killer" in oom.message and "memory.events" in oom.message
    none = foreground.killed(9, tmp_path, sent=False, oom=False)
    assert "recorded no out-of-memory kill" in none.message and "ran out of memory" not in none.message
    unknown = foreground.killed(9, tmp_path, sent=False, oom=None)
    assert "not readable" in unknown.message
    sent = foreground.killed(15, tmp_path, sent=True, oom=True)  # the user's signal: never memory's fault
    assert "out-of-memory killer (" not in sent.message and "SIGTERM (15)" in sent.message
    for err in (oom, none, unknown, sent):
        assert "same command" in (err.hint or "")


def test_oom_counter_reads_cgroup_v2_or_says_unknown() -> None:
    value = foreground.cgroup_oom_kills()
    assert value is None or (isinstance(value, int) and value >= 0)


@dataclass
class _Launch:
    argv: list[str]
    out_dir: Path
    env: dict = field(default_factory=dict)
    cwd: Path = Path(".")
    nodes: Nodes = field(default_factory=Nodes)
    memory_need: int | None = None
    memory_lower: str = ""


def test_a_sigkilled_trainer_is_not_blamed_on_memory_without_the_kernel_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    launch = _Launch(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], tmp_path
    )
    launch.env = dict(os.environ)
    with pytest.raises(StepFailed) as info:
        foreground.run_foreground(launch, write=lambda _line: None)
    assert "SIGKILL (9)" in info.value.message and "out-of-memory killer (" not in info.value.message
    # The same death while the cgroup's oom_kill counter rises: now the OOM killer is named.
    counts = iter([3, 4])
    monkeypatch.setattr(foreground, "cgroup_oom_kills", lambda: next(counts))
    with pytest.raises(StepFailed) as info:
        foreground.run_foreground(launch, write=lambda _line: None)
    assert "out-of-memory killer" in info.value.message
