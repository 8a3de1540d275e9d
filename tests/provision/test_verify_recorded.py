"""A verified step is one that passed (issue 22, case 11): bootstrap records `verify-torch` done only after
every check it owns passed, and "ready" / "already complete" are said only over a venv whose torch imports.
A file lost after the verify (a disk that filled during an install, an `rm`) changes the installed files'
fingerprint, so the next bootstrap verifies again instead of trusting the record."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from mw_env.provision.execute import execute
from mw_env.provision.plan import plan
from mw_env.venv.integrity import installed_fingerprint, scan_venv
from mw_env.venv.venvinfo import site_packages

from .provision_support import ROCM, offline_options


def _bootstrap(tmp_path: Path, hermetic_env, indexes):
    src = replace(ROCM, index_url=indexes.rocm.as_uri())
    options = offline_options(tmp_path / "venv", indexes.project)  # doctor off: verify imports torch itself
    return execute(plan(profile="gfx1103", torch=src, runtime_env={}, options=options, env=hermetic_env))


def _verify_state(venv: Path) -> str:
    return json.loads((venv / ".mw-env-state.json").read_text())["steps"]["verify-torch"]["status"]


def test_a_torch_whose_files_are_damaged_is_reinstalled_and_verified_again(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    first = _bootstrap(tmp_path, hermetic_env, indexes)
    assert first.ok, first.to_dict()
    assert _verify_state(venv) == "done"
    before = installed_fingerprint(venv)

    # Damage torch the way a half-written install does: a module torch imports now fails.
    cuda = site_packages(venv) / "torch" / "cuda.py"
    text = cuda.read_text()
    cuda.unlink()  # never write through: uv installs by hard links to its cache
    cuda.write_text(text + "raise ImportError('cannot import name version (half-written)')\n")
    # Bytes appended are outside the verify key's fingerprint (a CA bundle extended on purpose: venv/integrity.py),
    # but torch's own files are never kept changed: the plan's scan names it.
    assert installed_fingerprint(venv) == before and scan_venv(venv).of(["torch"])

    # The plan reads the files against torch's RECORD: torch is reinstalled from its index, then verified.
    second = _bootstrap(tmp_path, hermetic_env, indexes)
    steps = {s["id"]: s for s in second.to_dict()["steps"]}
    assert second.ok, second.to_dict()
    assert (
        steps["torch"]["status"] == "done"
        and "torch/cuda.py extended (its installed bytes with more appended): reinstalled"
        in steps["torch"]["detail"]
    )
    assert steps["verify-torch"]["status"] == "done"
    assert "half-written" not in cuda.read_text() and installed_fingerprint(venv) == before


def _break_the_import(venv: Path) -> None:
    """torch's import fails through a file its RECORD does not list (a package folder wins over the module
    cuda.py): nothing the file check can see, so only the verify's import says it; the verify is asked for
    again (its state dropped) as after any change of its inputs."""
    shadow = site_packages(venv) / "torch" / "cuda"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('cannot import name version (half-written)')\n")
    state = venv / ".mw-env-state.json"
    data = json.loads(state.read_text())
    del data["steps"]["verify-torch"]
    state.write_text(json.dumps(data))


def test_a_torch_that_stops_importing_is_never_called_complete(tmp_path, hermetic_env, indexes):
    venv = tmp_path / "venv"
    assert _bootstrap(tmp_path, hermetic_env, indexes).ok
    _break_the_import(venv)
    second = _bootstrap(tmp_path, hermetic_env, indexes)
    assert not second.ok and second.failed_step == "verify-torch", second.to_dict()
    assert "could not import torch" in second.error.message
    # The static build check passed in this run; the failed import check still leaves the step not done.
    assert _verify_state(venv) != "done"
    # The next run trusts nothing the failed verify touched: it reinstalls torch (and verifies again).
    third = _bootstrap(tmp_path, hermetic_env, indexes)
    steps = {s["id"]: s["status"] for s in third.to_dict()["steps"]}
    assert steps["torch"] != "skipped" and steps["verify-torch"] != "skipped", steps


def test_an_unchanged_venv_is_still_a_no_op(tmp_path, hermetic_env, indexes):
    assert _bootstrap(tmp_path, hermetic_env, indexes).ok
    again = _bootstrap(tmp_path, hermetic_env, indexes)
    assert again.ok and not again.changed, again.to_dict()


def test_a_failed_verify_on_a_nearly_full_disk_names_it(tmp_path, hermetic_env, indexes, monkeypatch):
    from mw_env.venv import venvinfo

    venv = tmp_path / "venv"
    assert _bootstrap(tmp_path, hermetic_env, indexes).ok
    _break_the_import(venv)  # a file the full disk left half-written
    monkeypatch.setattr(venvinfo, "free_bytes", lambda _path: 850 * 1024 * 1024)  # 850 MB left, as reported
    res = _bootstrap(tmp_path, hermetic_env, indexes)
    assert not res.ok and res.error is not None
    assert "0.83 GiB free" in (res.error.hint or "") and "--recreate" in (res.error.hint or ""), res.to_dict()
