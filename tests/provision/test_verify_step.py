"""The verify step: the build as torch/version.py states it (no import), and `import torch` itself unless
the doctor step will import it anyway."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mw_env.base.errors import StepFailed
from mw_env.provision import verify
from wheelfactory import fake_torch


def _site_with(tmp_path, version: str, **kw) -> str:
    import zipfile

    whl = fake_torch(tmp_path / "dist", version, **kw)
    site = tmp_path / "site"
    zipfile.ZipFile(whl).extractall(site)
    return str(site)


def _run(site: str, *, import_torch: bool, broken: bool = False) -> str:
    python, *rest = verify.verify_command(sys.executable, import_torch=import_torch)
    cmd = [python, "-S", *rest]  # no site-packages: only the fake torch on PYTHONPATH is seen
    if broken:
        with open(f"{site}/torch/__init__.py", "a") as fh:
            fh.write("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    env = {"PYTHONPATH": site, "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    return res.stdout + res.stderr


@pytest.mark.parametrize("import_torch", [False, True])
def test_the_build_is_read_with_or_without_the_import(tmp_path, import_torch):
    out = _run(_site_with(tmp_path, "2.9.1+rocm6.4", cuda="12.8"), import_torch=import_torch)
    found = verify.parse(out)
    assert found.version == "2.9.1+rocm6.4" and found.build == "cuda"  # the seed's trap, caught either way
    with pytest.raises(StepFailed, match="it is a cuda build"):
        verify.check(found, build="rocm", local_tag="+rocm6.4")
    stages = [json.loads(ln)["stage"] for ln in out.splitlines() if ln.startswith("{")]
    assert stages == (["static", "import"] if import_torch else ["static"])


def test_a_torch_that_does_not_import_fails_when_the_import_was_asked_for(tmp_path):
    site = _site_with(tmp_path, "2.13.0+cpu")
    out = _run(site, import_torch=True, broken=True)
    with pytest.raises(StepFailed, match="could not import torch") as exc:
        verify.parse(out)
    assert "libtorch_cpu.so" in exc.value.message
    # Without the import (the doctor's probe imports it next), the build is still judged.
    assert verify.parse(_run(site, import_torch=False)).build == "cpu"


def test_no_torch_at_all(tmp_path):
    out = _run(str(tmp_path), import_torch=False)
    with pytest.raises(StepFailed, match="No module named 'torch'"):
        verify.parse(out)


def test_plan_imports_in_verify_only_without_the_doctor(tmp_path, hermetic_env, indexes):
    from dataclasses import replace

    from mw_env.provision.plan import plan

    from .provision_support import ROCM, offline_options

    src = replace(ROCM, index_url=indexes.rocm.as_uri())
    for doctor, expected in ((True, "False"), (False, "True")):
        options = replace(offline_options(tmp_path / "venv", indexes.project), doctor=doctor)
        p = plan(profile="gfx1103", torch=src, runtime_env={}, options=options, env=hermetic_env)
        script = p.step("verify-torch").command[-1]
        assert f"if {expected}:" in script


def test_the_import_waits_for_the_extras_while_the_build_check_overlaps(
    tmp_path, hermetic_env, indexes, monkeypatch
):
    """`import torch` during the extras install reads a half-written numpy: only the build check overlaps."""
    from dataclasses import replace

    from mw_env.provision import steps as steps_mod
    from mw_env.provision.execute import execute
    from mw_env.provision.plan import plan

    from .provision_support import ROCM, offline_options

    order: list[tuple[str, bool]] = []
    real_command = steps_mod.Run.command

    def spy(self, step, argv, **kw):
        order.append((step.id, "import torch" in " ".join(argv)))
        return real_command(self, step, argv, **kw)

    monkeypatch.setattr(steps_mod.Run, "command", spy)
    src = replace(ROCM, index_url=indexes.rocm.as_uri())
    options = replace(offline_options(tmp_path / "venv", indexes.project), doctor=False)
    result = execute(plan(profile="gfx1103", torch=src, runtime_env={}, options=options, env=hermetic_env))
    assert result.ok, result.to_dict()
    ids = [step for step, _ in order]
    assert ids.index("extras") < ids.index("verify-torch")  # the import ran after the extras
    assert ("verify-torch", True) in order
