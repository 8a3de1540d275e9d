"""`mw-env train` as the hand-off: doctor gate, venv + profile env, the real CLI against the test venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import MwEnvError
from mw_env.cli import main
from smokeargs import TRAIN, smoke_args

REPO = Path(__file__).resolve().parents[2]
TEST_VENV = Path(sys.executable).parent.parent  # the venv running the tests has torch and mw-env


def _fake_venv(tmp_path: Path, env: dict[str, str]) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "torchrun").write_text("#!/bin/sh\n")
    record = {
        "profile": "cpu",
        "torch_requirement": "torch==2.13.0+cpu",
        "torch_version": "2.13.0+cpu",
        "torch_build": "cpu",
        "torch_index": None,
        "python": "3.11",
        "env": env,
    }
    (venv / "mw-env.json").write_text(json.dumps(record))
    return venv


def _doctor(monkeypatch: pytest.MonkeyPatch, status: str) -> list[dict]:
    import mw_env.checks
    from mw_env.checks.model import CheckResult, DoctorReport

    calls: list[dict] = []

    def fake_run_doctor(**kwargs):
        calls.append(kwargs)
        check = CheckResult(
            id="devices.kfd",
            area="devices",
            title="/dev/kfd",
            status=status,
            detail="/dev/kfd is missing",
            fix="incus config device add ...",
        )
        return DoctorReport(profile="cpu", checks=(check,))

    monkeypatch.setattr(mw_env.checks, "run_doctor", fake_run_doctor)
    return calls


def test_prepare_builds_the_venv_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mw_env.runs.launch import LaunchRequest, prepare

    calls = _doctor(monkeypatch, "pass")
    venv = _fake_venv(tmp_path, {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    monkeypatch.chdir(tmp_path)
    launch = prepare(
        LaunchRequest(venv=venv, config="smoke", overrides=["runtime.out_dir=runs/x"], profile="cpu")
    )
    assert calls and calls[0]["quick"] is True and calls[0]["venv"] == venv
    assert launch.argv[:4] == [str(venv / "bin" / "python"), "-m", "mw_env.trainer", "run"]
    assert launch.argv[launch.argv.index("--set") + 1] == "runtime.out_dir=runs/x"
    defaults = json.loads(launch.argv[launch.argv.index("--profile-defaults") + 1])
    assert defaults["profile"] == "cpu" and defaults["device"] == "cpu"
    assert launch.env["HSA_OVERRIDE_GFX_VERSION"] == "11.0.0"  # the venv's recorded runtime env
    assert launch.env["PATH"].startswith(str(venv / "bin")) and launch.env["VIRTUAL_ENV"] == str(venv)
    assert launch.out_dir == tmp_path / "runs" / "x"
    # The doctor's report waits as a dotfile; doctor.json (a manifest artifact) appears with the report.
    assert not (launch.out_dir / "doctor.json").exists()
    doctor = json.loads((launch.out_dir / ".doctor-pending.json").read_text())
    assert doctor["profile"] == "cpu" and doctor["ok"] is True
    ddp = prepare(
        LaunchRequest(
            venv=venv, config="smoke", skip_doctor=True, profile="cpu", nproc_per_node=2, fresh=True
        )
    )
    assert ddp.argv[:3] == [str(venv / "bin" / "torchrun"), "--standalone", "--nproc-per-node=2"]
    assert ddp.argv[3:5] == ["-m", "mw_env.trainer"] and ddp.argv[-1] == "--fresh" and ddp.doctor is None


def test_doctor_failure_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mw_env.runs.launch import LaunchRequest, prepare

    _doctor(monkeypatch, "fail")
    venv = _fake_venv(tmp_path, {})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MwEnvError) as exc:
        prepare(LaunchRequest(venv=venv, config="smoke", profile="cpu"))  # the doctor runs (skip_doctor off)
    assert "devices.kfd" in exc.value.message and "--skip-doctor" in (exc.value.hint or "")
    assert main(["train", "--config", "smoke", "--venv", str(venv), "--profile", "cpu"]) == 1
    assert "--skip-doctor" in capsys.readouterr().err


def test_bad_input_is_exit_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv = _fake_venv(tmp_path, {})
    base = ["train", "--venv", str(venv), "--skip-doctor", "--profile", "cpu"]
    assert main([*base, "--config", "smoke", "--set", "optim.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'optim.lrr'" in err and "optim.lr" in err and "Traceback" not in err
    assert main([*base, "--config", "smoke", "--set", "runtime.max_steps=ten"]) == 2
    assert "must be an integer" in capsys.readouterr().err
    assert main([*base, "--config", "nope"]) == 2
    assert "no shipped config" in capsys.readouterr().err
    assert main(["train", "--venv", str(tmp_path / "none"), "--skip-doctor", "--config", "smoke"]) == 2
    assert "no training venv" in capsys.readouterr().err


def test_config_and_summary_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "config", "--profile", "cpu", "--config", "smoke", "--set", "optim.lr=1e-3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["optim"]["lr"] == 1e-3 and out["sources"]["optim.lr"] == "--set"
    assert out["sources"]["runtime.sdpa_backend"] == "profile:cpu"
    assert main(["train", "summary", "--json", "--profile", "cpu", "--config", "address-tagger"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len([r for r in info["model"]["parameters"] if r["part"].startswith("block")]) == 6
    assert main(["train", "summary", "--profile", "cpu", "--config", "smoke"]) == 0
    assert "total" in capsys.readouterr().out
    # --json is accepted on every read-only command (config always prints JSON).
    assert main(["train", "config", "--json", "--profile", "cpu", "--config", "smoke"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["model"]["d_model"] == 32


def test_without_config_the_profile_names_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    """cpu.yaml trains address-tagger-cpu, the GPU profiles address-tagger (profiles' trainer.config)."""
    from mw_env.profiles import load_profiles
    from mw_env.trainspec.config import find_config

    defaults = {name: p.trainer.config for name, p in load_profiles().items()}
    assert defaults["cpu"] == "address-tagger-cpu"
    assert {n for n, c in defaults.items() if c == "address-tagger"} == set(defaults) - {"cpu"}
    assert all(find_config(c).is_file() for c in defaults.values())
    assert main(["train", "config", "--profile", "cpu"]) == 0
    cpu = json.loads(capsys.readouterr().out)["config"]
    assert (cpu["model"]["d_model"], cpu["runtime"]["out_dir"]) == (128, "runs/address-tagger-cpu")
    assert main(["train", "summary", "--json", "--profile", "cuda"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len([r for r in info["model"]["parameters"] if r["part"].startswith("block")]) == 6


@pytest.mark.torch
@pytest.mark.slow
def test_mw_env_train_runs_smoke_in_the_venv(tmp_path: Path) -> None:
    """The real hand-off: mw-env train -> the venv's python -m mw_env.trainer, then verify."""
    mw_env = TEST_VENV / "bin" / "mw-env"
    run = tmp_path / "run"
    sets = [
        "data.synthetic_rows=128",
        "data.synthetic_val_rows=16",
        "runtime.max_steps=6",
        "runtime.eval_every=3",
        "runtime.checkpoint_every=3",
        "runtime.threads=1",
        f"runtime.out_dir={run}",
    ]
    argv = [
        str(mw_env),
        "train",
        "--config",
        "smoke",
        "--venv",
        str(TEST_VENV),
        "--skip-doctor",
        "--profile",
        "cpu",
    ]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished at step 6 (max_steps)" in proc.stdout
    assert subprocess.run([str(mw_env), "train", "verify", str(run)], capture_output=True).returncode == 0
    # Missing data file: the trainer's own error comes through with exit 2.
    bad = [*argv, "--set", "data.source=files", "--set", f"data.train_files={tmp_path}/missing.jsonl"]
    proc = subprocess.run(bad, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "no file matches" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_train_in_a_venv_built_by_bootstrap(tmp_path: Path) -> None:
    """The product provisions its own test environment: bootstrap --profile cpu, then train with the doctor.

    The venv running the tests is that venv when `make test-env` built it (`bootstrap --profile cpu`, its record
    beside it): trained in as it is. Otherwise one is bootstrapped here (tests/provision/test_bootstrap_e2e.py
    bootstraps a fresh one in every run)."""
    import shutil

    from mw_env.sources.wheelhouse import discover, matching_torch, wheels_in
    from mw_env.venv.record import read_record

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("VIRTUAL_ENV", None)
    record = read_record(TEST_VENV)
    if record is not None and record.profile == "cpu" and (TEST_VENV / "bin" / "mw-env").is_file():
        venv = TEST_VENV
    else:
        good, _ = matching_torch(
            wheels_in(discover(env=os.environ).find_links, "torch"), local_tag="+cpu", specifier=">=2.4"
        )
        uv = shutil.which("uv") or str(REPO / ".tools" / "bin" / "uv")
        if not good or not Path(uv).exists():
            pytest.skip("no wheelhouse holds a CPU torch wheel (or uv is missing)")
        venv = tmp_path / "training-venv"
        env["UV"] = uv
        boot = subprocess.run(
            [sys.executable, "-m", "mw_env", "bootstrap", "--profile", "cpu", "--venv", str(venv), "--yes"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert boot.returncode == 0, boot.stdout[-3000:] + boot.stderr[-3000:]
    run = tmp_path / "run"
    args = smoke_args(run, 4, "runtime.eval_every=2", "data.synthetic_rows=128", venv=venv, skip_doctor=False)
    argv = [*TRAIN, *args]
    proc = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "doctor: quick checks passed" in proc.stderr and "finished at step 4" in proc.stdout
    env_json = json.loads((run / "report" / "environment.json").read_text())
    assert env_json["doctor"]["ok"] is True
    assert any(p.lower().startswith("torch==") for p in env_json["packages"])


@pytest.mark.torch
def test_a_cpu_venv_on_a_gpu_machine_is_refused_not_trained_on_the_cpu(tmp_path: Path) -> None:
    """The seed's trap: the venv holds a CPU torch but the machine has a 780M. The profile comes from detection,
    not from the venv's record, so the doctor's torch-build check fails and training does not start."""
    from mw_env.runs.launch import LaunchRequest, prepare

    root = REPO / "tests" / "fixtures" / "machines" / "incus-780m"
    env = {**os.environ, "PATH": f"{root / '.mw-env-bin'}:/usr/bin:/bin"}
    run = [f"runtime.out_dir={tmp_path / 'run'}"]  # the doctor's pending report goes there, not into the repo
    with pytest.raises(MwEnvError) as err:
        prepare(LaunchRequest(venv=TEST_VENV, config="smoke", root=str(root), base_env=env, overrides=run))
    assert "torch" in err.value.message and "quick checks failed" in err.value.message
    assert "--skip-doctor" in (err.value.hint or "")
    # Said explicitly, the CPU profile is what the user asked for: it prepares.
    launch = prepare(
        LaunchRequest(
            venv=TEST_VENV, config="smoke", root=str(root), base_env=env, profile="cpu", overrides=run
        )
    )
    assert launch.profile == "cpu"


def test_torchrun_failure_is_the_workers_error_and_exit_code(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under --nproc-per-node, torchrun's own traceback is hidden and the workers' exit 2 kept."""
    from runs.test_torchrun_output import FAILED_RUN  # tests/runs (tests/ is on sys.path)

    venv = _fake_venv(tmp_path, {})
    replay = tmp_path / "torchrun-output.txt"
    replay.write_text(FAILED_RUN + "\n")
    torchrun = venv / "bin" / "torchrun"
    torchrun.write_text(f"#!/bin/sh\ncat '{replay}' >&2\nexit 1\n")
    torchrun.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    base = ["train", "--venv", str(venv), "--skip-doctor", "--profile", "cpu", "--config", "smoke"]
    code = main([*base, "--nproc-per-node", "2", "--set", "runtime.out_dir=runs/ddp"])
    err = capfd.readouterr().err
    assert code == 2
    assert err.count("error: cannot resume from") == 1 and err.count("hint: the data order") == 1
    assert "Traceback" not in err and "ChildFailedError" not in err and "torch/distributed" not in err


def test_the_cli_options_are_the_launch_requests_fields() -> None:
    # LaunchOptions is what click passes on; LaunchRequest what prepare reads: the same names, one list each
    # side of the type checker (a field added to one and not the other fails here).
    import dataclasses

    from mw_env.runs.launch import LaunchOptions, LaunchRequest

    fields = {f.name for f in dataclasses.fields(LaunchRequest)}
    assert fields - {"config"} == set(LaunchOptions.__annotations__)
