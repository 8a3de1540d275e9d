"""Issue 40: the venv's identity. The bootstrap lock was keyed on the path as typed, so a symbolic link alias
ran a second bootstrap beside the first; `--recreate` of a symlinked venv renamed the link (not the venv), and
a second one failed forever ("Cannot call rmtree on a symbolic link") leaving a 1 GB `.mw-env-new`; a venv
mw-env made was refused by `--recreate` once its pyvenv.cfg was gone, with no way forward.

Now one venv has one lock and one swap, at its own folder (the link's target), the link is left leading to
the new venv, what an older swap left beside a link is cleared, and a folder bootstrap made is rebuilt.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import MwEnvError
from mw_env.provision.events import NoEvents
from mw_env.provision.model import Plan
from mw_env.provision.state import State, lock_path, venv_lock
from mw_env.provision.steps import Run, recover_swap, swap_venv
from mw_env.sources.wheelhouse import Sources
from mw_env.venv.record import create_command, not_a_venv
from mw_env.venv.venvinfo import build_path, old_path

from .provision_support import cpu_bootstrap_args


def _venv(path: Path, marker: str) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "marker").write_text(marker)
    (path / "mw-env.json").write_text("{}")  # complete: the env step writes the record last
    return path


def _marker(venv: Path) -> str:
    return (venv / "marker").read_text()


def _plan(venv: Path) -> Plan:
    return Plan(
        profile="cpu",
        venv=venv,
        build_venv=build_path(venv),
        steps=(),
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


def _swap(venv: Path) -> None:
    recover_swap(venv)  # what execute runs first, under the lock
    swap_venv(Run(_plan(venv), State.load(venv), NoEvents(), None, None), None)  # type: ignore[arg-type]


@pytest.fixture
def aliased(tmp_path: Path) -> tuple[Path, Path]:
    real = _venv(tmp_path / "disk" / "venv", "first")
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    return real, alias


def test_a_symlink_alias_is_refused_while_another_bootstrap_holds_the_venv(aliased):
    real, alias = aliased
    assert lock_path(alias) == lock_path(real) == real.parent / ".venv.mw-env.lock"
    holder = venv_lock(real, argv=["mw-env", "bootstrap", "--venv", str(real)])
    with holder, pytest.raises(MwEnvError) as exc, venv_lock(alias):
        pass
    assert f"another bootstrap of {alias} (the venv at {real}, which {alias} leads to) is running" in (
        exc.value.message
    )
    assert "mw-env bootstrap --venv" in exc.value.message  # the holder's command line
    assert not (alias.parent / ".alias.mw-env.lock").exists()
    # A link whose target does not exist yet: still the target's lock (the venv will be made there).
    dangling = alias.parent / "later"
    dangling.symlink_to(real.parent / "new-venv")
    assert lock_path(dangling) == real.parent / ".new-venv.mw-env.lock"


def test_recreate_through_a_link_swaps_the_venv_and_keeps_the_link_twice(aliased):
    real, alias = aliased
    for n in ("second", "third"):  # the second --recreate failed forever before
        new = _venv(build_path(alias), n)
        assert new.parent == real.parent  # built beside the venv's own folder: the renames are atomic
        _swap(alias)
        assert alias.is_symlink() and alias.resolve() == real and _marker(alias) == n
        assert sorted(p.name for p in real.parent.iterdir()) == ["venv"], "no copy left behind"
        assert sorted(p.name for p in alias.parent.iterdir()) == ["alias", "disk"]


def test_what_an_older_swap_left_beside_a_link_is_cleared(tmp_path):
    # The state an earlier mw-env left: its swap renamed the link `alias` to `.alias.mw-env-old` and put the
    # new venv in its place; the next --recreate built `.alias.mw-env-new` and failed at the link, for ever.
    original = _venv(tmp_path / "disk" / "venv", "original")
    alias = _venv(tmp_path / "alias", "first recreate")
    (tmp_path / ".alias.mw-env-old").symlink_to(original)
    _venv(build_path(alias), "second recreate")
    _swap(alias)
    assert _marker(alias) == "second recreate" and _marker(original) == "original"  # never through the link
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias", "disk"]

    # A link that is still a link, with a build an older mw-env made beside it (not where builds go now).
    link = tmp_path / "link"
    link.symlink_to(original)
    stale = _venv(tmp_path / ".link.mw-env-new", "half built")
    (stale / ".mw-env-state.json").write_text("{}")
    recover_swap(link)
    assert not stale.exists() and _marker(link) == "original"


def test_a_swap_killed_between_its_renames_through_a_link_is_finished(aliased):
    real, alias = aliased
    _venv(build_path(alias), "new")
    os.rename(real, old_path(alias))  # killed here: the link dangles
    recover_swap(alias)
    assert _marker(alias) == "new" and not old_path(alias).exists() and alias.is_symlink()


def test_a_folder_mw_env_made_is_rebuilt_with_recreate_once_its_pyvenv_cfg_is_gone(tmp_path):
    ours = _venv(tmp_path / "ours", "x")
    refused = not_a_venv(ours, recreate=False)
    assert (
        refused is not None
        and "made by mw-env" in refused.message
        and "pyvenv.cfg is gone" in refused.message
    )
    assert f"mw-env bootstrap --recreate --venv {ours}" in (refused.hint or "")
    assert not_a_venv(ours, recreate=True) is None
    assert create_command(ours).startswith(f"`mw-env bootstrap --recreate --venv {ours}`")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    still = not_a_venv(theirs, recreate=True)
    assert still is not None and "bootstrap never deletes a folder it did not make" in (still.hint or "")


@pytest.mark.slow
def test_recreate_of_a_symlinked_venv_twice_and_of_one_without_pyvenv_cfg(tmp_path, hermetic_env, indexes):
    root = tmp_path / "root"
    root.mkdir()
    real = tmp_path / "disk" / "venv"
    alias = tmp_path / "alias"
    alias.symlink_to(real)  # the link first: the first bootstrap makes the venv through it
    env = {**hermetic_env, "PYTHONPATH": os.pathsep.join(sys.path)}

    def bootstrap(*extra: str) -> subprocess.CompletedProcess[str]:
        opts = [
            "--find-links",
            str(indexes.cpu_links),
            "--offline",
            "--no-adopt-torch",
            "--no-doctor",
            *extra,
        ]
        args = cpu_bootstrap_args(alias, indexes, root, *opts)
        return subprocess.run(
            [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True
        )

    def built() -> None:
        assert alias.is_symlink() and (real / "pyvenv.cfg").is_file() and (real / "mw-env.json").is_file()
        assert sorted(p.name for p in real.parent.iterdir()) == [".venv.mw-env.lock", "venv"]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["alias", "disk", "home", "root"]

    for extra in ((), ("--recreate",)):
        res = bootstrap(*extra)
        assert res.returncode == 0, (extra, res.stdout[-2000:], res.stderr[-2000:])
        built()

    # The second --recreate through the link (was "Cannot call rmtree on a symbolic link", for ever), of a venv
    # whose pyvenv.cfg is gone (refused without --recreate, with the way forward).
    (real / "pyvenv.cfg").unlink()
    refused = bootstrap()
    assert refused.returncode == 2 and "pyvenv.cfg is gone" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "--recreate" in refused.stderr
    rebuilt = bootstrap("--recreate")
    assert rebuilt.returncode == 0, rebuilt.stdout[-2000:] + rebuilt.stderr[-2000:]
    built()
