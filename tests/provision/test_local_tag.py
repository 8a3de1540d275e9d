"""One local-tag rule for the profile, the wheelhouse, verify, the plan and the doctor.

AMD's own builds spell the ROCm stack longer than the profile does (`2.9.1+rocm7.2.0` for `+rocm7.2`); a
suffix test rejected them in verify and made a no-op re-run reinstall torch.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from mw_env.base.errors import StepFailed
from mw_env.profiles import load_profiles
from mw_env.profiles.model import has_local_tag
from mw_env.provision import verify
from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, installed_version, plan
from wheelfactory import fake_torch, flat_dir

from .provision_support import ROCM


@pytest.mark.parametrize(
    ("version", "tag", "ok"),
    [
        ("2.9.1+rocm7.2", "+rocm7.2", True),
        ("2.9.1+rocm7.2.0", "+rocm7.2", True),  # AMD's rocm/pytorch images
        ("2.9.1+rocm7.2.0.lw.git1234abcd", "+rocm7.2", True),
        ("2.9.1+rocm7.20", "+rocm7.2", False),
        ("2.9.1+rocm7.21.0", "+rocm7.2", False),
        ("2.9.1+rocm7", "+rocm7.2", False),
        ("2.9.1+rocm7.1", "+rocm7.2", False),
        ("2.9.1", "+rocm7.2", False),
        ("2.13.0+cpu", "+cpu", True),
        ("2.13.0+cpu.cxx11.abi", "+cpu", True),
        ("2.13.0+cu126", "+cu12", False),
        ("2.13.0+CU126", "+cu126", True),  # PEP 440 local parts are case-insensitive
        ("2.13.0", "", True),  # no tag asked: any build
        ("not a version", "+cpu", False),
    ],
)
def test_has_local_tag(version, tag, ok):
    assert has_local_tag(version, tag) is ok


def test_rocm72_source_accepts_amds_spelling_and_verify_agrees():
    src = load_profiles(env={})["rocm"].source("rocm7.2")
    assert src is not None and src.local_tag == "+rocm7.2"
    assert src.accepts("2.12.0+rocm7.2.0")
    assert not src.accepts("2.12.0+rocm7.20")
    found = verify.TorchBuild("2.12.0+rocm7.2.0", "7.2.26015", None, "")
    verify.check(found, build="rocm", local_tag=src.local_tag)  # no exception
    with pytest.raises(StepFailed, match="lacks the local tag"):
        verify.check(replace(found, version="2.12.0+rocm7.20"), build="rocm", local_tag=src.local_tag)


def test_wheelhouse_torch_in_amds_spelling_installs_verifies_and_reruns_as_noop(
    tmp_path, hermetic_env, indexes
):
    dist = tmp_path / "dist"
    good = fake_torch(dist, "2.9.1+rocm6.4.1", hip="6.4.43482")
    decoy = fake_torch(dist, "2.9.1+rocm6.40", hip="6.4.43482")  # another stack: never picked
    links = flat_dir(tmp_path / "wheelhouse", [good, decoy])
    source = replace(ROCM, index_url=None)
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        find_links=(str(links),),
        adopt=False,
        doctor=False,
    )
    first = plan(profile="gfx1103", torch=source, runtime_env={}, options=options, env=hermetic_env)
    assert first.torch is not None and first.torch.requirement == "torch==2.9.1+rocm6.4.1"
    result = execute(first)
    assert result.ok, result.to_dict()
    assert installed_version(tmp_path / "venv", "torch") == "2.9.1+rocm6.4.1"
    again = plan(profile="gfx1103", torch=source, runtime_env={}, options=options, env=hermetic_env)
    assert all(s.done for s in again.steps), [s.id for s in again.steps if not s.done]
