"""The venv swap's promise (a kill at any point never loses the old venv), uv failure hints, step warnings."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mw_env.provision import steps
from mw_env.provision.events import NoEvents, StepResult, StepWarning
from mw_env.provision.execute import execute
from mw_env.provision.model import Plan, Step
from mw_env.provision.state import State
from mw_env.provision.steps import Run, _hint_for, recover_swap
from mw_env.sources.wheelhouse import Sources
from mw_env.venv.venvinfo import build_path


class Killed(BaseException):
    """A SIGKILL stand-in: nothing after it runs (BaseException, so no handler in the code catches it)."""


def _plan(venv: Path, step_ids: tuple[str, ...] = ("swap",)) -> Plan:
    return Plan(
        profile="cpu",
        venv=venv,
        build_venv=build_path(venv),
        steps=tuple(Step(id=i, title=i, command=None, done=False) for i in step_ids),
        build="cpu",
        local_tag="+cpu",
        version_spec="==2.13.0",
        python=None,
        torch=None,
        uv=None,
        sources=Sources(),
        runtime_env={},
        project_args=(),
    )


def _make_venv(path: Path, marker: str, *, complete: bool = True) -> None:
    (path / "bin").mkdir(parents=True)
    (path / "marker").write_text(marker)
    (path / "lib.py").write_text("x = 1\n")
    if complete:  # the env step writes the record last: its presence means the build finished
        (path / "mw-env.json").write_text("{}")


def _marker(venv: Path) -> str:
    return (venv / "marker").read_text()


def _swap_ops(tmp_path: Path) -> int:
    """How many rename/rmtree calls a swap over an existing venv and a stale old copy makes."""
    calls = 0
    real_rename, real_rmtree = os.rename, shutil.rmtree

    def count(real):
        def wrapped(*a, **kw):
            nonlocal calls
            calls += 1
            return real(*a, **kw)

        return wrapped

    venv = tmp_path / "count" / "venv"
    _setup(venv)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "rename", count(real_rename))
        mp.setattr(shutil, "rmtree", count(real_rmtree))
        _swap(venv)
    return calls


def _setup(venv: Path) -> None:
    _make_venv(venv, "old")
    _make_venv(build_path(venv), "new")
    _make_venv(venv.parent / f".{venv.name}.mw-env-old", "stale")  # left by an earlier killed run


def _swap(venv: Path) -> None:
    plan = _plan(venv)
    run = Run(plan=plan, state=State.load(plan.build_venv), events=NoEvents(), uv=None, doctor=None)
    steps.swap_venv(run, plan.steps[0])


@pytest.mark.parametrize("when", ["before", "after", "midway"])
@pytest.mark.parametrize("op", range(4))
def test_a_kill_anywhere_in_the_swap_never_loses_the_old_venv(tmp_path, op, when):
    assert _swap_ops(tmp_path) == 4  # rmtree(stale old), rename(venv->old), rename(new->venv), rmtree(old)
    venv = tmp_path / "box" / "venv"
    _setup(venv)
    real_rename, real_rmtree = os.rename, shutil.rmtree
    calls = 0

    def killer(real):
        def wrapped(src, *args, **kwargs):
            nonlocal calls
            n, calls = calls, calls + 1
            if n != op:
                return real(src, *args, **kwargs)
            if when == "before":
                raise Killed
            if (
                when == "midway"
            ):  # a kill inside rmtree leaves a half-deleted tree; a rename is all or nothing
                if real is real_rmtree:
                    (Path(src) / "lib.py").unlink()
                raise Killed
            real(src, *args, **kwargs)
            raise Killed

        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "rename", killer(real_rename))
        mp.setattr(shutil, "rmtree", killer(real_rmtree))
        with pytest.raises(Killed):
            _swap(venv)
    recover_swap(venv)  # what the next bootstrap does first, under the lock
    old = venv.parent / f".{venv.name}.mw-env-old"
    assert not old.exists()
    assert _marker(venv) in ("old", "new") and (venv / "lib.py").is_file()  # a whole venv, never a half one
    if _marker(venv) == "old":  # killed before the old venv moved: the successor is kept for the re-run
        assert _marker(build_path(venv)) == "new"
        _swap(venv)
    assert _marker(venv) == "new" and not build_path(venv).exists() and not old.exists()


def test_recover_swap_rolls_back_when_the_successor_is_incomplete_or_gone(tmp_path):
    venv = tmp_path / "venv"
    old = tmp_path / ".venv.mw-env-old"
    _make_venv(old, "old")
    _make_venv(build_path(venv), "new", complete=False)
    recover_swap(venv)
    assert _marker(venv) == "old" and not old.exists()
    assert _marker(build_path(venv)) == "new"  # an unfinished build stays for the resume
    shutil.rmtree(venv)
    shutil.rmtree(build_path(venv))
    _make_venv(old, "old")
    recover_swap(venv)
    assert _marker(venv) == "old"


def test_recover_swap_leaves_a_plain_venv_alone(tmp_path):
    venv = tmp_path / "venv"
    _make_venv(venv, "mine")
    _make_venv(build_path(venv), "half", complete=False)
    recover_swap(venv)
    assert _marker(venv) == "mine" and _marker(build_path(venv)) == "half"
    recover_swap(tmp_path / "nothing-here")  # no venv at all: nothing to do, no error
    assert not (tmp_path / "nothing-here").exists()


@pytest.mark.parametrize(
    ("output", "extras", "expect"),
    [
        ("error: No space left on device (os error 28)", False, "the disk is full"),
        ("error: dns error: failed to lookup address information", False, "DNS failed"),
        ("Name or service not known", False, "DNS failed"),
        ("tcp connect error: Connection refused (os error 111)", False, "blocked or timed out"),
        ("error: operation timed out", False, "blocked or timed out"),
        ("No solution found when resolving dependencies", True, "torch pinned"),
        ("the requirements are unsatisfiable", False, "no torch of this build matches"),
        ("something else went wrong", False, "see the output above"),
        ("", True, "see the output above"),
    ],
)
def test_hint_for_names_the_cause_of_a_uv_failure(output, extras, expect):
    assert expect in _hint_for(output, extras=extras)


def test_the_disk_hint_wins_over_a_network_word_in_the_same_output():
    assert "disk is full" in _hint_for("Connection refused\nNo space left on device")


def test_a_step_warning_is_a_warn_outcome_with_its_message(tmp_path):
    class Recorder(NoEvents):
        def __init__(self) -> None:
            self.finished: list[StepResult] = []

        def step_finished(self, step: Step, outcome: StepResult) -> None:
            self.finished.append(outcome)

    venv = tmp_path / "venv"
    events = Recorder()
    result = execute(_plan(venv, ("doctor",)), events=events, doctor=None)
    assert result.ok
    (outcome,) = result.outcomes
    assert outcome == events.finished[0]
    assert outcome.status == "warn" and outcome.detail.startswith("the doctor is not available")
    assert isinstance(
        steps.run_doctor(Run(_plan(venv), State.load(venv), NoEvents(), None, None), None), StepWarning
    )
