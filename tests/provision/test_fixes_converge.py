"""Issue 40: the doctor's fixes converge. A fix that names a command is run here in the state its check
describes, and the check then passes (or the fix is not that command again).

The loop the issue found: a bare `uv pip install` brought in a package that needs torch>=2.11 and swapped
torch; a bootstrap re-run restored the pinned torch; the doctor then said "ModuleNotFoundError" (a version
conflict) and offered the bootstrap that had just run."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.provision.plan import installed_version
from wheelfactory import build_wheel, fake_torch, simple_index


def _mw_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mw_env", *args], env=env, capture_output=True, text=True, timeout=600
    )


def _doctor(env: dict[str, str], venv: Path, root: Path) -> dict[str, dict[str, str]]:
    res = _mw_env(
        env, "doctor", "--root", str(root), "--profile", "cpu", "--venv", str(venv), "--quick", "--json"
    )
    assert res.returncode in (0, 1), res.stderr
    return {c["id"]: c for c in json.loads(res.stdout)["checks"]}


def _commands(fix: str) -> list[list[str]]:
    """The backticked commands of a fix, as a shell would split them."""
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", fix)]


# -- every mw-env command a fix names, run in the state it describes -------------------------------------------


class World:
    """One CPU venv bootstrapped offline from the fake wheelhouse, shared by the cases below in order: each
    case breaks it, reads the doctor's fix, runs it, and leaves the venv healthy for the next."""

    def __init__(self, base: Path, env: dict[str, str], indexes) -> None:
        self.base, self.indexes = base, indexes
        self.root = base / "root"
        self.root.mkdir()
        self.venv = base / "venv"
        links = f"{indexes.cpu_links} {indexes.tools}"
        # What the fixes leave to the environment: the fake machine, the profile, the wheelhouse.
        self.env = {**env, "MW_ENV_ROOT": str(self.root), "MW_ENV_PROFILE": "cpu", "PIP_FIND_LINKS": links}
        self.env["PYTHONPATH"] = os.pathsep.join(sys.path)
        # What a bootstrap of the test world needs beyond the printed command (this Python, the demo project).
        self.bootstrap_args = ["--python", sys.executable, "--project", str(indexes.project)]
        self.bootstrap_args += ["--no-adopt-torch", "--no-doctor"]

    def run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        assert argv[0] == "mw-env", argv
        extra = self.bootstrap_args if argv[1] == "bootstrap" else []
        return _mw_env(self.env, *argv[1:], *extra)

    def doctor(self, venv: Path | None = None) -> dict[str, dict[str, str]]:
        from mw_env.checks import run_doctor
        from mw_env.profiles import resolve

        resolved = resolve(root=str(self.root), profile="cpu", interpreters=False)
        report = run_doctor(
            machine=resolved.machine, selection=resolved.selection, venv=venv or self.venv, quick=True
        )
        return {c["id"]: c for c in report.to_dict()["checks"]}  # type: ignore[union-attr]

    def uv(self, *args: str) -> None:
        res = subprocess.run(
            [self.env["UV"], *args, "--python", str(self.venv / "bin" / "python")],
            env=self.env,
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def world(tmp_path_factory, uv_bin, indexes) -> World:
    base = tmp_path_factory.mktemp("converge")
    # The "PyPI": the trap CUDA torch 2.9.1, a torch 2.11.0, `addon` 2.0 (needs torch>=2.11) and 1.0 (any
    # torch>=2.0), and the demo project's helper.
    dist = base / "dist"
    wheels = [
        fake_torch(dist, "2.9.1", cuda="12.8"),
        fake_torch(dist, "2.11.0"),
        build_wheel(dist, "addon", "2.0", requires=["torch>=2.11"]),
        build_wheel(dist, "addon", "1.0", requires=["torch>=2.0"]),
        build_wheel(dist, "demo-helper", "1.0"),
    ]
    pypi = simple_index(base / "pypi", wheels).as_uri()
    home = base / "home"
    home.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_DIRS": str(base / "xdg"),
        "UV": uv_bin,
        "UV_CACHE_DIR": str(base / "uv-cache"),  # its own: a case edits a file of the cache
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_DEFAULT_INDEX": pypi,
        "PIP_INDEX_URL": pypi,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "LANG": "C.UTF-8",
        "MW_ENV_STATE_DIR": str(base / "state"),
    }
    w = World(base, env, indexes)
    res = w.run(["mw-env", "bootstrap", "--venv", str(w.venv)])
    assert res.returncode == 0, res.stdout + res.stderr
    return w


def _edit_record(w: World, **changes: str) -> None:
    path = w.venv / "mw-env.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _drift(w: World) -> None:
    w.uv("pip", "install", "--no-deps", "demo-helper==1.0", "--reinstall")  # same version: no drift...
    w.uv("pip", "uninstall", "demo-helper")  # ...a package gone since the lock is


def _site_file(w: World, rel: str) -> Path:
    (site,) = (w.venv / "lib").glob("python3*/site-packages")
    return site / rel


def _edit_torch_in_place(w: World) -> None:
    with open(_site_file(w, "torch/version.py"), "a") as fh:  # the world's own uv cache holds this inode too
        fh.write("hip = '6.4'  # edited in place\n")


# fix (catalogue id, or the check's own text) -> (the check that reports it, how to break the venv, which
# of the fix's backticked mw-env commands to run: its position among them).
CASES: dict[str, tuple[str, object, int]] = {
    "venv.missing": ("venv.exists", lambda w: shutil.rmtree(w.venv), 0),
    "venv.python_broken": ("venv.python", lambda w: (w.venv / "pyvenv.cfg").write_bytes(b"home = \xff\n"), 0),
    "venv.no_record": ("venv.record", lambda w: (w.venv / "mw-env.json").unlink(), 0),
    "venv.record (torn)": ("venv.record", lambda w: (w.venv / "mw-env.json").write_text("{"), 0),
    "venv.record_profile": ("venv.record", lambda w: _edit_record(w, profile="cuda"), 0),
    "venv.requirements_unmet": ("venv.requirements", lambda w: w.uv("pip", "uninstall", "demo-helper"), 0),
    "venv.lock_drift (rebuild from the lock)": ("venv.lock", _drift, 0),
    "venv.lock_drift (a new lock)": ("venv.lock", _drift, 1),
    "venv.lock_invalid": ("venv.lock", lambda w: (w.venv / "pylock.mw-env.toml").write_text("not toml ["), 0),
    "venv.lock (none)": ("venv.lock", lambda w: (w.venv / "pylock.mw-env.toml").unlink(), 0),
    "torch.missing": ("torch.build", lambda w: w.uv("pip", "uninstall", "torch"), 0),
    "torch.swapped": ("torch.installed", lambda w: w.uv("pip", "install", "--no-deps", "torch==2.9.1"), 0),
    "files.damaged (a file deleted)": (
        "files.record",
        lambda w: _site_file(w, "demo_helper/__init__.py").unlink(),
        0,
    ),
    "files.damaged (torch edited in place, in uv's cache too)": ("files.record", _edit_torch_in_place, 0),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_each_mw_env_fix_ends_its_finding(world, case):
    check_id, breaks, which = CASES[case]
    healthy = False
    try:
        breaks(world)  # type: ignore[operator]
        found = world.doctor()
        assert check_id in found, (
            case,
            {k: (v["status"], v["detail"]) for k, v in found.items() if v["status"] != "pass"},
        )
        before = found[check_id]
        assert before["status"] in ("fail", "warn", "skip"), before
        fix = before["fix"] or before["detail"]
        commands = [c for c in _commands(fix) if c and c[0] == "mw-env"]
        assert commands, f"{case}: no mw-env command in {fix!r}"
        res = world.run(commands[which])
        assert res.returncode == 0, (commands[which], res.stdout[-2000:], res.stderr[-2000:])
        after = world.doctor()[check_id]
        assert after["status"] == "pass", (case, commands[which], after)
        healthy = True
    finally:
        if not healthy:  # the next case starts from a whole venv again
            shutil.rmtree(world.venv, ignore_errors=True)
            world.run(["mw-env", "bootstrap", "--venv", str(world.venv)])


@pytest.mark.slow
def test_a_repair_after_a_torch_swap_names_the_package_and_a_fix_that_is_not_the_bootstrap(world):
    venv = world.venv
    # The swap: a bare `uv pip install` (no activated venv, so no pin) takes torch 2.11.0 for addon 2.0.
    world.uv("pip", "install", "addon")
    assert installed_version(venv, "torch") == "2.11.0" and installed_version(venv, "addon") == "2.0"
    # The repair the doctor asks for (torch.swapped): bootstrap again restores the pinned torch.
    swapped = world.doctor()["torch.installed"]
    assert swapped["status"] == "fail" and "mw-env bootstrap" in swapped["fix"]
    (again,) = [c for c in _commands(swapped["fix"]) if c[0] == "mw-env"]
    res = world.run(again)
    assert res.returncode == 0, res.stdout + res.stderr
    assert installed_version(venv, "torch") == "2.10.0+cpu"

    check = world.doctor()["venv.requirements"]
    assert check["status"] == "fail"
    cause, fix = check["detail"], check["fix"]
    # The package, the torch it needs, the torch the profile pins; no ModuleNotFoundError (not what it is).
    assert "addon 2.0 requires torch>=2.11" in cause and "torch==2.10.0+cpu" in cause, cause
    assert "ModuleNotFoundError" not in cause and "cannot fix this" in cause
    # The two ways out, and not the bootstrap that just ran.
    assert "mw-env bootstrap" not in fix, fix
    uninstall, older = _commands(fix)
    assert uninstall[:3] == ["uv", "pip", "uninstall"] and uninstall[-1] == "addon"
    assert older[:3] == ["uv", "pip", "install"] and older[-1] == "addon<2.0"
    assert str(venv / "mw-env-constraints.txt") in older

    # Each way, run as printed (`uv` is this machine's uv), ends the finding and keeps the pinned torch.
    for command, addon in ((older, "1.0"), (uninstall, None)):
        res = subprocess.run([world.env["UV"], *command[1:]], env=world.env, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert installed_version(venv, "addon") == addon and installed_version(venv, "torch") == "2.10.0+cpu"
        assert world.doctor()["venv.requirements"]["status"] == "pass"


# Catalogue fixes that name an mw-env command and are not run above: where they are, or why not.
ELSEWHERE = {
    "venv.requirements_pinned": "uv commands, run by the torch-swap test above",
    "venv.requirements_other": "a uv command (tests/checks/test_requirements_kinds.py reads the finding)",
    "venv.env_not_applied": "`source VENV/bin/activate`: tests/provision/test_shell_paths.py sources it",
    "venv.not_a_folder": "two steps (move the file away, then bootstrap): the bootstrap is venv.missing's",
    "venv.not_a_venv": "names a NEW venv beside the folder (create_command): its bootstrap is venv.missing's",
    "torch.gpu_build_on_cpu": "its command is torch.missing's (`bootstrap --recreate`); the state needs the full probe",
    "torch.import_failed": "its command is torch.missing's (`bootstrap --recreate`); the state needs the full probe",
    "torch.cpu_fallback": "a GPU profile's torch build: the fake world here is the CPU profile's",
    "versions.hip_too_old": "a GPU profile's torch build: the fake world here is the CPU profile's",
    "versions.cuda_too_old": "a GPU profile's torch build: the fake world here is the CPU profile's",
    "versions.driver_too_old": "an NVIDIA driver: the fake world here is the CPU profile's",
    "arch.missing_from_wheel": "a GPU profile's torch build: the fake world here is the CPU profile's",
    "arch.missing_override": "`mw-env bootstrap` named as what persists the variable, not as the fix",
    "devices.no_gpu_for_profile": "`bootstrap --profile cpu`: the bootstrap that made this CPU world (and venv.missing's)",
    "devices.driver_without_gpu": "`bootstrap --profile cuda`: an NVIDIA torch build",
    "devices.detection_notes": "read-only commands (`mw-env profiles`, `mw-env detect`)",
    "devices.several_amd": "`mw-env bootstrap` named as what persists the variable, not as the fix",
    "torch.wheel_table_differ": "read-only `mw-env profiles --check`",
    "probe.matmul_wrong": "a GPU profile's torch build, and the full probe",
}


def test_every_catalogue_fix_that_names_an_mw_env_command_is_run_or_said_why_not():
    from mw_env.checks.catalogue import load_catalogue

    ran = {case.split(" (")[0] for case in CASES}
    named = {
        fix_id
        for fix_id, text in load_catalogue().fixes.items()
        if re.search(r"mw-env (bootstrap|lock)|\{bootstrap\}|\{install_command\}", text.fix)
    }
    assert named - ran - set(ELSEWHERE) == set(), "run these fixes in CASES, or say in ELSEWHERE why not"
    assert not (ran & set(ELSEWHERE)), "a fix is both run and said to be run elsewhere"
