"""A torch swapped behind bootstrap's back (outside the activated venv, so the pin does not apply) is
put back by a bootstrap re-run, even when the swapped one is inside the profile's range."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, installed_version, plan
from mw_env.provision.record import read_record
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
