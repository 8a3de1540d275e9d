"""The hand-off from `mw-env train` to the trainer inside the provisioned venv (torch-free).

`prepare` runs the doctor's quick checks (refusing on a failure unless skipped), resolves the config
with the profile's trainer defaults, and builds the command line and environment: the venv's python
(or its torchrun for several processes) with the profile's runtime env applied. The detached-runs
commands call it too, so both paths start the trainer the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.errors import InputError, MwEnvError
from mw_env.trainspec.config import find_config, resolve_config

DOCTOR_FILE = "doctor.json"
# The launcher's doctor report waits here (a dotfile: outside the manifest) until the run writes its
# report, which moves it to DOCTOR_FILE; a launch that fails before that leaves a finished run's
# doctor.json, and so its manifest, untouched.
DOCTOR_PENDING = ".doctor-pending.json"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    out_dir: Path
    config_path: Path
    cwd: Path = field(default_factory=Path.cwd)
    profile: str | None = None
    venv: Path | None = None
    doctor: dict[str, Any] | None = None  # the quick doctor's report (None when skipped)


def profile_defaults(selection: Any) -> dict[str, Any]:
    # The profile's defaults fitted to this GPU (bf16 only where it is native), not the profile's raw ones.
    trainer = getattr(selection, "trainer", None) or selection.profile.trainer
    return {
        "profile": selection.profile.name,
        "device": trainer.device,
        "precision": trainer.precision,
        "sdpa_backend": trainer.sdpa_backend,
        "compile": trainer.compile,
    }


def _python_path(env: Mapping[str, str]) -> str | None:
    """Let the venv import this very mw-env when it is a source checkout (never a foreign site-packages)."""
    pkg_parent = Path(__file__).resolve().parents[2]
    if pkg_parent.name in ("site-packages", "dist-packages"):
        return None
    existing = env.get("PYTHONPATH")
    return f"{pkg_parent}{os.pathsep}{existing}" if existing else str(pkg_parent)


def _write_doctor(out_dir: Path, report: dict[str, Any]) -> Path:
    from mw_env.atomic import write_text_atomic as write_atomic

    path = out_dir / DOCTOR_PENDING
    write_atomic(path, json.dumps(report, indent=2, default=str) + "\n")
    return path


def prepare(
    *,
    venv: Path | None,
    config: str | Path,
    overrides: Sequence[str] = (),
    skip_doctor: bool = False,
    profile: str | None = None,
    profiles_dirs: Sequence[str | Path] = (),
    root: str | None = None,
    gpu: int | None = None,
    nproc_per_node: int = 1,
    resume: Path | None = None,
    fresh: bool = False,
    base_env: Mapping[str, str] | None = None,
    source: str | None = None,
) -> Launch:
    """Everything needed to start the trainer; raises MwEnvError when it must not start."""
    from mw_env.profiles import resolve_for_venv
    from mw_env.provision.record import default_venv, read_record

    env_in = dict(os.environ if base_env is None else base_env)
    if nproc_per_node < 1:
        raise InputError(f"--nproc-per-node {nproc_per_node}: must be >= 1")
    if resume is not None and fresh:
        raise InputError("--resume and --fresh exclude each other", hint="pick one")
    venv_path = Path(venv).expanduser() if venv else default_venv(env_in)
    python = venv_path / "bin" / "python"
    if not python.exists():
        raise InputError(
            f"no training venv at {venv_path} (no {python})",
            hint=f"create it with `mw-env bootstrap --venv {venv_path}`, or point --venv at the venv bootstrap made",
        )
    config_path = find_config(config)
    record = read_record(venv_path)
    # The profile is detected (or given), never trusted from the venv: a CPU venv on a GPU machine must fail
    # the doctor's torch-build check rather than train on the CPU unnoticed.
    resolved_env = resolve_for_venv(
        record=record,
        root=root,
        profile=profile,
        profiles_dirs=profiles_dirs,
        gpu=gpu,
        env=env_in,
        source=source,
    )
    selection = resolved_env.selection
    defaults = profile_defaults(selection)
    # Validate the config and the --set values here, before any process starts.
    resolved = resolve_config(
        path=config_path, overrides=overrides, profile_defaults=defaults, profile_name=selection.profile.name
    )
    cwd = Path.cwd()
    out_dir = (cwd / Path(resolved.config.runtime.out_dir).expanduser()).resolve()

    # The environment the trainer will run with; the doctor judges that one (the override applied).
    env = dict(env_in)
    env.update(selection.env)
    if record:
        env.update(record.env)  # what bootstrap persisted for this venv wins
    env["VIRTUAL_ENV"] = str(venv_path)
    env["PATH"] = f"{venv_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONHOME", None)
    pythonpath = _python_path(env_in)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath

    doctor: dict[str, Any] | None = None
    if not skip_doctor:
        from mw_env.checks import run_doctor

        report = run_doctor(
            machine=resolved_env.machine,
            selection=selection,
            venv=venv_path,
            quick=True,
            hardware=resolved_env.hardware,
            run_env=env,
        )
        doctor = report.to_dict()
        failed = [c for c in report.checks if c.status == "fail"]
        if failed:
            lines = "; ".join(f"{c.id}: {c.title} - {c.detail}" for c in failed)
            raise MwEnvError(
                f"the doctor's quick checks failed, so training does not start: {lines}",
                hint="fix them (`mw-env doctor` shows how), or pass --skip-doctor to start anyway",
            )

    args = ["-m", "mw_env.trainer", "run", "--config", str(config_path)]
    for item in overrides:
        args += ["--set", item]
    args += ["--profile-defaults", json.dumps(defaults)]
    if doctor is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        args += ["--doctor-json", str(_write_doctor(out_dir, doctor))]
    if resume is not None:
        args += ["--resume", str(Path(resume).expanduser().resolve())]
    if fresh:
        args.append("--fresh")
    if nproc_per_node > 1:
        torchrun = venv_path / "bin" / "torchrun"
        if not torchrun.exists():
            raise MwEnvError(
                f"{torchrun} is missing", hint="the venv's torch install is incomplete; re-run bootstrap"
            )
        argv = [str(torchrun), "--standalone", f"--nproc-per-node={nproc_per_node}", *args]
    else:
        argv = [str(python), *args]
    return Launch(
        argv=argv,
        env=env,
        out_dir=out_dir,
        config_path=config_path,
        cwd=cwd,
        profile=selection.profile.name,
        venv=venv_path,
        doctor=doctor,
    )
