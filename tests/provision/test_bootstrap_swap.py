"""A torch swapped behind bootstrap's back (outside the activated venv, so the pin does not apply) is
put back by a bootstrap re-run, even when the swapped one is inside the profile's range."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, installed_version, plan
from mw_env.venv.record import read_record
from wheelfactory import fake_torch, flat_dir

from .provision_support import ROCM


def test_rerun_restores_the_recorded_torch(tmp_path, hermetic_env, indexes):
    dist = tmp_path / "dist"
    links = flat_dir(
        tmp_path / "wheelhouse", [fake_torch(dist, "2.10.0+cpu"), fake_torch(dist, "2.11.0+cpu")]
    )
    cpu = replace(ROCM, build="cpu", version=">=2.9", local_tag="+cpu", index_url=None)
    venv = tmp_path / "venv"
    options = BootstrapOptions(
        venv=venv,
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        find_links=(str(links),),
        adopt=False,
        doctor=False,
    )
    assert execute(plan(profile="cpu", torch=cpu, runtime_env={}, options=options, env=hermetic_env)).ok
    assert read_record(venv).torch_version == "2.11.0+cpu"
    subprocess.run(
        [
            hermetic_env["UV"],
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "--find-links",
            str(links),
            "--no-index",
            "torch==2.10.0+cpu",
        ],
        env=hermetic_env,
        check=True,
    )
    assert installed_version(venv, "torch") == "2.10.0+cpu"
    again = plan(profile="cpu", torch=cpu, runtime_env={}, options=options, env=hermetic_env)
    assert not again.step("torch").done
    assert "--reinstall-package" in again.step("torch").command
    assert execute(again).ok
    assert installed_version(venv, "torch") == "2.11.0+cpu"
    third = plan(profile="cpu", torch=cpu, runtime_env={}, options=options, env=hermetic_env)
    assert all(s.done for s in third.steps), [s.id for s in third.steps if not s.done]
    # --python given as the very interpreter the venv was made from is no reason to warn.
    assert not any("keeping it" in w for w in third.warnings), third.warnings


def test_verify_overlaps_the_extras_and_still_stops_a_wrong_build(
    tmp_path, hermetic_env, indexes, monkeypatch
):
    """The verify's child runs while pin and extras run; a wrong build still fails the bootstrap at
    verify-torch, before the env file and the record are written."""
    from mw_env.provision import execute as ex
    from mw_env.provision import verifystep as steps_mod

    started: list[str] = []
    real = steps_mod.BackgroundVerify.__init__

    def spy(self, run, step):
        started.append(step.id)
        real(self, run, step)
        assert not (run.plan.build_venv / "mw-env-constraints.txt").exists()  # started before the pin

    monkeypatch.setattr(ex.BackgroundVerify, "__init__", spy)
    bad = replace(ROCM, index_url=indexes.bad_rocm.as_uri())
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        adopt=False,
        doctor=False,
    )
    the_plan = plan(profile="gfx1103", torch=bad, runtime_env={}, options=options, env=hermetic_env)
    result = execute(the_plan)
    assert started == ["verify-torch"]
    assert not result.ok and result.failed_step == "verify-torch"
    assert "wrong build" in result.error.message
    ids = [o.id for o in result.outcomes]
    assert ids.index("verify-torch") < ids.index("pin-torch")  # reported in plan order
    assert not (tmp_path / "venv" / "mw-env.json").exists()
