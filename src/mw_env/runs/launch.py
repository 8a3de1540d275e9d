"""The hand-off from `mw-env train` to the trainer inside the provisioned venv (torch-free).

`prepare` runs the doctor's quick checks (refusing on a failure unless skipped), resolves the config
with the profile's trainer defaults, and builds the command line and environment: the venv's python
(or its torchrun for several processes) with the profile's runtime env applied. The detached-runs
commands call it too, so both paths start the trainer the same way.

Several nodes (`nnodes > 1`): each node runs its own `mw-env train` with the same rendezvous endpoint; each runs
its own doctor quick checks and gets its own profile env, and its torchrun joins the others through c10d
rendezvous (instead of --standalone). Every process of a launch carries MW_ENV_RUN_ID in its environment, so
`train stop` and the tests can find all of them, whatever session torchrun put them in.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from mw_env.base.errors import InputError, MwEnvError
from mw_env.rundir.contract import ALLOW_ENV_MISMATCH, doctor_pending_file
from mw_env.rundir.occupants import RUN_DIR_ENV, RUN_ID_ENV
from mw_env.runs.fit import check_fits
from mw_env.runs.rendezvous import Nodes, check_nodes
from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.configfile import built_on
from mw_env.trainspec.preflight import check_on_host, weights_note

if TYPE_CHECKING:
    from mw_env.profiles.model import Selection
    from mw_env.trainspec.config import TrainConfig

NODE_RANK_ENV = "MW_ENV_NODE_RANK"  # the node as the user numbered it, for the trainer's messages


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    out_dir: Path
    config_path: Path
    cwd: Path = field(default_factory=Path.cwd)
    profile: str | None = None
    venv: Path | None = None
    doctor: dict[str, object] | None = None  # the quick doctor's report (None when skipped)
    notes: tuple[str, ...] = ()  # said before the run starts (the venv's drift, the run's lock)
    built_on: str | None = None  # what a config file of one's own builds on: the first line said
    max_steps: int | None = None  # runtime.max_steps as resolved (bases included): the ETA of `train status`
    nodes: Nodes = field(default_factory=Nodes)
    run_id: str = ""  # MW_ENV_RUN_ID of every process of this launch
    # The memory the run needs (runs/fit.py: bytes, all processes of this node) and the settings that lower
    # it: an OOM-killed run's hint says both.
    memory_need: int | None = None
    memory_lower: str = ""


def profile_defaults(selection: Selection) -> dict[str, object]:
    # The profile's defaults fitted to this GPU (bf16 only where it is native), not the profile's raw ones.
    trainer = selection.trainer
    return {
        "profile": selection.profile.name,
        # A config file of one's own that names no `base:` builds on this one (trainspec/configfile.py).
        "config": trainer.config,
        "device": trainer.device,
        "precision": trainer.precision,
        "sdpa_backend": trainer.sdpa_backend,
        "compile": trainer.compile,
    }


def source_pythonpath(env: Mapping[str, str]) -> str | None:
    """Let the venv import this very mw-env when it is a source checkout (never a foreign site-packages)."""
    pkg_parent = Path(__file__).resolve().parents[2]
    if pkg_parent.name in ("site-packages", "dist-packages"):
        return None
    existing = env.get("PYTHONPATH")
    return f"{pkg_parent}{os.pathsep}{existing}" if existing else str(pkg_parent)


def training_python(venv: Path) -> Path:
    """The training venv's python, refused in a sentence when the venv is not there or its pyvenv.cfg cannot be
    read (site.py would print a traceback)."""
    from mw_env.venv.record import create_command
    from mw_env.venv.venvinfo import read_pyvenv_cfg

    python = venv / "bin" / "python"
    if not python.exists():
        raise InputError(
            f"no training venv at {venv} (no {python})",
            hint=f"create it with {create_command(venv)}, or point --venv at the venv bootstrap made",
        )
    read_pyvenv_cfg(venv)
    return python


def _check_lock(venv: Path, env: Mapping[str, str]) -> None:
    """A manifest made with `host-commands --lock` names the environment every pod must train in."""
    from mw_env.host.k8s import LOCK_ENV

    wanted = (env.get(LOCK_ENV) or "").strip().lower()
    if not wanted:
        return
    from mw_env.rundir.contract import sha256_file
    from mw_env.venv.lock import LOCK_FILE

    lock = venv / LOCK_FILE
    have = sha256_file(lock) if lock.is_file() else None
    if have != wanted:
        raise MwEnvError(
            f"{LOCK_ENV}={wanted[:16]}... names the environment to train in, but the venv {venv} "
            + (f"has the lock {have[:16]}..." if have else f"has no {LOCK_FILE}"),
            hint="build the image from that lock (`mw-env bootstrap --lock FILE`), or remove the variable "
            "(the manifest's `mw-env host-commands ... --lock FILE`) to train in this venv as it is",
        )


def _write_doctor(out_dir: Path, report: dict[str, object], node_rank: int = 0) -> Path:
    from mw_env.base.atomic import write_text_atomic as write_atomic

    # Nodes sharing a run folder each keep their own report (rank 0's goes into the run report).
    path = out_dir / doctor_pending_file(node_rank)
    write_atomic(path, json.dumps(report, indent=2, default=str) + "\n")
    return path


def _report_json(path: Path) -> dict[str, object] | None:
    """A JSON file of a run's report, or None when it is not there or not one (a foreign or damaged file)."""
    from mw_env.base import userfile
    from mw_env.base.userjson import loads

    try:
        data = loads(userfile.read_text(path, what="report file", max_bytes=64 << 20))
    except (MwEnvError, OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _refuse_finished(out_dir: Path, config: TrainConfig, base: Path) -> None:
    """A run that finished (report and manifest written) in the folder: another run there (other data, another
    model or config) is refused, naming the difference and the ways on (trainspec/earlier.py); the same run with
    nothing left to train is said as such, instead of resuming at the last step and training nothing."""
    from mw_env.base.errors import NothingToDo
    from mw_env.rundir.contract import DATA_CARD_FILE, HYPERPARAMETERS_FILE, REPORT_DIR
    from mw_env.rundir.runstate import read_state
    from mw_env.trainspec.earlier import check_earlier_run

    life = read_state(out_dir) or {}
    step = life.get("step")
    if life.get("state") != "finished" or not isinstance(step, int):
        return
    if not Path(str(life.get("last_checkpoint") or "")).is_file():
        return  # its checkpoints are gone: the run starts over, as it would anyway
    reason = str(life.get("reason") or "max_steps")
    nothing_left = check_earlier_run(
        out_dir=out_dir,
        step=step,
        reason=reason,
        hyperparameters=_report_json(out_dir / REPORT_DIR / HYPERPARAMETERS_FILE),
        card=_report_json(out_dir / REPORT_DIR / DATA_CARD_FILE),
        config=config,
        base=base,
    )
    if not nothing_left:
        return  # max_steps raised (or stopped early by the operator): resuming trains on
    max_steps = config.runtime.max_steps
    raise NothingToDo(
        f"the run in {out_dir} already finished at step {step} (runtime.max_steps {max_steps}; "
        f"{reason}) on this data and config: its report is {life.get('report') or out_dir / REPORT_DIR}",
        hint="to start again: add --fresh (the old checkpoints and metrics are kept, renamed) or "
        "--set runtime.out_dir=ANOTHER; to train on from it: --set runtime.max_steps=N (larger)",
    )


@dataclass(frozen=True)
class LaunchRequest:
    """What to train and where: everything `prepare` is asked (the config, its --set values, the venv, the
    profile options, the process and node layout). `mw-env train` and `train start` build it from their
    options (LaunchOptions: the same names but the config, as click passes them)."""

    config: str | Path
    venv: Path | None = None
    overrides: Sequence[str] = ()
    skip_doctor: bool = False
    profile: str | None = None
    profiles_dirs: Sequence[str | Path] = ()
    root: str | None = None
    gpu: int | None = None
    nproc_per_node: int = 1
    resume: Path | None = None
    fresh: bool = False
    base_env: Mapping[str, str] | None = None  # the environment to start from (default: this process's)
    source: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_timeout: int | None = None
    allow_env_mismatch: bool = (
        False  # several nodes: go on though their environments differ (trainer/envcheck.py)
    )


class LaunchOptions(TypedDict, total=False):
    """LaunchRequest's fields but the config, as the CLI passes them on (commands.train_options.prepare_launch;
    tests/trainer/test_train_cli.py holds the two to the same names)."""

    venv: Path | None
    overrides: Sequence[str]
    skip_doctor: bool
    profile: str | None
    profiles_dirs: Sequence[str | Path]
    root: str | None
    gpu: int | None
    nproc_per_node: int
    resume: Path | None
    fresh: bool
    base_env: Mapping[str, str] | None
    source: str | None
    nnodes: int
    node_rank: int
    rdzv_endpoint: str | None
    rdzv_id: str | None
    rdzv_timeout: int | None
    allow_env_mismatch: bool


def prepare(request: LaunchRequest) -> Launch:
    """Everything needed to start the trainer; raises MwEnvError when it must not start."""
    r = request
    from mw_env.profiles import resolve_for_venv
    from mw_env.venv.record import default_venv, read_record

    env_in = dict(os.environ if r.base_env is None else r.base_env)
    if r.nproc_per_node < 1:
        raise InputError(f"--nproc-per-node {r.nproc_per_node}: must be >= 1")
    if r.resume is not None and r.fresh:
        raise InputError("--resume and --fresh exclude each other", hint="pick one")
    nodes = check_nodes(
        nnodes=r.nnodes,
        node_rank=r.node_rank,
        rdzv_endpoint=r.rdzv_endpoint,
        rdzv_id=r.rdzv_id,
        rdzv_timeout=r.rdzv_timeout,
    )
    venv_path = Path(r.venv).expanduser() if r.venv else default_venv(env_in)
    python = training_python(venv_path)
    # No --config: the profile's default (trainer.config), known once the profile is.
    config_path = find_config(r.config) if r.config else None
    _check_lock(venv_path, env_in)
    record = read_record(venv_path)
    # The profile is detected (or given), never trusted from the venv: a CPU venv on a GPU machine must fail
    # the doctor's torch-build check rather than train on the CPU unnoticed.
    resolved_env = resolve_for_venv(
        record=record,
        root=r.root,
        profile=r.profile,
        profiles_dirs=r.profiles_dirs,
        gpu=r.gpu,
        env=env_in,
        source=r.source,
    )
    selection = resolved_env.selection
    if config_path is None:
        config_path = find_config(selection.trainer.config)  # the profile's own
    defaults = profile_defaults(selection)
    # Validate the config and the --set values here, before any process starts.
    resolved = resolve_config(
        path=config_path,
        overrides=r.overrides,
        profile_defaults=defaults,
        profile_name=selection.profile.name,
    )
    cwd = Path.cwd()
    # Files, columns, labels and the venv's packages: checked now, not after the doctor and a torch import.
    check_on_host(resolved.config, venv=venv_path, base=cwd)
    # Settings the machine can hold: the model's and a batch's memory against this machine's or GPU's.
    fit = check_fits(
        resolved.config,
        hardware=resolved_env.hardware,
        build=selection.torch.build,
        nproc=r.nproc_per_node,
        read=resolved_env.machine.read,
    )
    out_dir = (cwd / Path(resolved.config.runtime.out_dir).expanduser()).resolve()
    if not nodes.multi:
        # A live trainer there refuses us anyway; say so now, before the doctor runs. (Nodes of a multi-node
        # run may share the folder with rank 0, which holds the lock: the trainer's own check decides there.)
        from mw_env.rundir.runlock import check_free

        check_free(out_dir)
        if not r.fresh and r.resume is None:
            _refuse_finished(out_dir, resolved.config, cwd)

    # The environment the trainer will run with; the doctor judges that one (the override applied).
    env = dict(env_in)
    env.update(selection.env)
    if record:
        env.update(record.env)  # what bootstrap persisted for this venv wins
    env["VIRTUAL_ENV"] = str(venv_path)
    env["PATH"] = f"{venv_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONHOME", None)
    if pythonpath := source_pythonpath(env_in):
        env["PYTHONPATH"] = pythonpath
    run_id = uuid.uuid4().hex
    env[RUN_ID_ENV] = run_id
    env[RUN_DIR_ENV] = str(out_dir)  # found by its folder even when the folder is gone (train stop/status)
    if nodes.multi:
        env[NODE_RANK_ENV] = str(nodes.node_rank)
    if r.allow_env_mismatch:
        env[ALLOW_ENV_MISMATCH] = "1"

    doctor: dict[str, object] | None = None
    if not r.skip_doctor:
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

    notes: tuple[str, ...] = ()
    if not nodes.multi or nodes.node_rank == 0:
        from mw_env.venv.lock.atlaunch import lock_for_run

        told = any(c.get("id") == "venv.lock" and c.get("status") == "warn" for c in _checks(doctor))
        notes = tuple(
            lock_for_run(venv=venv_path, out_dir=out_dir, selection=selection, env=env_in).lines(
                drift_told=told
            )
        )
        notes += tuple(n for n in [weights_note(resolved.config, venv_path)] if n)

    args = ["-m", "mw_env.trainer", "run", "--config", str(config_path)]
    for item in r.overrides:
        args += ["--set", item]
    args += ["--profile-defaults", json.dumps(defaults)]
    if doctor is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        args += ["--doctor-json", str(_write_doctor(out_dir, doctor, nodes.node_rank))]
    if r.resume is not None:
        args += ["--resume", str(Path(r.resume).expanduser().resolve())]
    if r.fresh:
        args.append("--fresh")
    if r.nproc_per_node > 1 or nodes.multi:
        torchrun = venv_path / "bin" / "torchrun"
        if not torchrun.exists():
            raise MwEnvError(
                f"{torchrun} is missing", hint="the venv's torch install is incomplete; re-run bootstrap"
            )
        argv = [str(torchrun), *nodes.torchrun_args(), f"--nproc-per-node={r.nproc_per_node}", *args]
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
        notes=notes,
        nodes=nodes,
        run_id=run_id,
        memory_need=fit.needed,
        memory_lower=fit.need.what_to_lower(),
        built_on=built_on(resolved),
        max_steps=resolved.config.runtime.max_steps,
    )


def _checks(doctor: dict[str, object] | None) -> list[dict[str, object]]:
    """The checks of a doctor's JSON report (none without one: --skip-doctor)."""
    checks = doctor.get("checks") if doctor is not None else None
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []
