"""Adopting an image's torch (AMD's rocm/pytorch images ship one matched to their ROCm userspace)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from mw_env.provision.execute import execute
from mw_env.provision.plan import BootstrapOptions, installed_version, plan
from mw_env.venv.record import read_record

from .provision_support import ROCM


def _image(tmp_path, env, indexes):
    """An "image" interpreter whose site-packages hold a ROCm torch, first on PATH as python3."""
    image = tmp_path / "image"
    uv = env["UV"]
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(image)], env=env, check=True)
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(image / "bin" / "python"),
            "--index",
            indexes.rocm.as_uri(),
            "torch==2.9.1+rocm6.4",
        ],
        env=env,
        check=True,
    )
    return image, {**env, "PATH": f"{image / 'bin'}:{env['PATH']}"}


@pytest.mark.slow
def test_image_torch_is_offered_then_adopted_and_kept(tmp_path, hermetic_env, indexes):
    image, env = _image(tmp_path, hermetic_env, indexes)
    venv = tmp_path / "venv"
    source = replace(ROCM, index_url="https://no-such-host.invalid/whl/rocm6.4")  # never contacted
    options = BootstrapOptions(
        venv=venv, python=sys.executable, python_explicit=True, project=indexes.project, doctor=False
    )
    offered = plan(profile="gfx1103", torch=source, runtime_env={}, options=options, env=env)
    assert offered.adoptable is not None and offered.adoptable.version == "2.9.1+rocm6.4"
    assert offered.adopted is None  # only offered: the command layer asks (or --yes / --adopt-torch)

    adopted = plan(
        profile="gfx1103", torch=source, runtime_env={}, options=replace(options, adopt=True), env=env
    )
    assert adopted.step("torch").command is None and "reuse the image's torch" in adopted.step("torch").detail
    result = execute(adopted)
    assert result.ok, result.to_dict()
    assert installed_version(venv, "torch") is None  # not downloaded again: it stays in the image
    run = subprocess.run(
        [venv / "bin" / "python", "-c", "import torch; print(torch.__version__, torch.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    version, where = run.stdout.split()
    assert version == "2.9.1+rocm6.4" and where.startswith(str(image))
    rec = read_record(venv)
    assert rec.adopted and rec.torch_version == "2.9.1+rocm6.4"
    assert installed_version(venv, "demo_helper") == "1.0"  # the extras went in, torch was left alone

    # Later installs keep it: pip refuses, uv installs the package but never a second torch.
    pip = subprocess.run(
        ["bash", "-c", f"{venv}/bin/pip install needs-newer-torch"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode != 0
    uv = subprocess.run(
        ["bash", "-c", f'source {venv}/bin/activate && "$UV" pip install needs-newer-torch'],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert uv.returncode == 0, uv.stderr
    assert installed_version(venv, "torch") is None
    again = subprocess.run(
        [venv / "bin" / "python", "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert again.stdout.strip() == "2.9.1+rocm6.4"

    # A re-run is a no-op.
    rerun = plan(
        profile="gfx1103", torch=source, runtime_env={}, options=replace(options, adopt=True), env=env
    )
    assert all(s.done for s in rerun.steps if s.id != "doctor"), [s.id for s in rerun.steps if not s.done]


def test_image_torch_of_another_build_is_not_offered(tmp_path, hermetic_env, indexes):
    _, env = _image(tmp_path, hermetic_env, indexes)
    cpu = replace(ROCM, build="cpu", local_tag="+cpu", version=">=2.9", index_url=None)
    options = BootstrapOptions(
        venv=tmp_path / "venv",
        python=sys.executable,
        python_explicit=True,
        project=indexes.project,
        find_links=(str(indexes.cpu_links),),
        doctor=False,
    )
    p = plan(profile="cpu", torch=cpu, runtime_env={}, options=options, env=env)
    assert p.adoptable is None and p.torch.origin == "wheelhouse"


def test_interpreters_without_torch_on_disk_are_not_started(tmp_path, hermetic_env, indexes, monkeypatch):
    """Probing an interpreter costs its start-up; one whose site folders hold no torch is skipped."""
    import mw_env.sources.pythons as pythons_mod
    from mw_env.sources.pythons import find_image_torch

    image, env = _image(tmp_path, hermetic_env, indexes)
    bare = tmp_path / "bare"
    subprocess.run([env["UV"], "venv", "-q", "--python", sys.executable, str(bare)], env=env, check=True)
    started: list[str] = []
    real = pythons_mod.uvmod._run_quiet

    def spy(argv, *a, **k):
        started.append(argv[0])
        return real(argv, *a, **k)

    monkeypatch.setattr(pythons_mod.uvmod, "_run_quiet", spy)
    found = find_image_torch([str(bare / "bin" / "python"), str(image / "bin" / "python")], env)
    assert [c.version for c in found] == ["2.9.1+rocm6.4"]
    assert started == [str(image / "bin" / "python")]  # the venv without torch was never started


def test_another_training_venv_is_never_an_image_torch(tmp_path):
    """Issue 20 #5: in a shell where `eval "$(mw-env env)"` activated venv1, bootstrapping venv2 found venv1's
    python3 first on PATH, offered (and with --yes adopted) its torch: venv2 then depended on venv1 by a .pth."""
    from mw_env.sources.pythons import image_pythons

    def fake_venv(name: str, *, mw_env: bool = False):
        prefix = tmp_path / name
        (prefix / "bin").mkdir(parents=True)
        (prefix / "bin" / "python3").symlink_to(sys.executable)
        (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
        if mw_env:
            (prefix / "mw-env.json").write_text("{}")
        return prefix

    active, made, image = fake_venv("active"), fake_venv("made", mw_env=True), fake_venv("image")
    for first, env_extra in ((active, {"VIRTUAL_ENV": str(active)}), (made, {})):
        found = image_pythons({"PATH": f"{first / 'bin'}:/usr/bin", **env_extra})
        assert str(first / "bin" / "python3") not in found
    found = image_pythons({"PATH": f"{image / 'bin'}:/usr/bin", "VIRTUAL_ENV": str(active)})
    assert found[0] == str(image / "bin" / "python3")  # an image's own venv is still offered


def test_yes_does_not_adopt_when_a_wheel_source_is_named():
    from mw_env.commands.bootstrap import BootstrapArgs

    fields = {f: None for f in BootstrapArgs.__dataclass_fields__}
    base = {**fields, "profiles_dirs": (), "extras": "train", "find_links": (), "offline": False, "yes": True}
    assert BootstrapArgs(**base).options({}).adopt is True  # the image question, answered yes
    assert BootstrapArgs(**{**base, "find_links": ("/srv/wheels",)}).options({}).adopt is None
    assert BootstrapArgs(**{**base, "offline": True}).options({}).adopt is None
    assert BootstrapArgs(**{**base, "offline": True, "adopt": True}).options({}).adopt is True  # on request
