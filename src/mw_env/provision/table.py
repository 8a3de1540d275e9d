"""The bootstrap's steps, one object each, in the order they run:

    preflight -> uv -> venv -> torch -> [wheel-archs] -> [repair] -> verify-torch -> pin-torch -> extras -> env
    -> lock -> [swap] -> doctor

A `StepSpec` holds everything about a step: its title, the exact command it would run, its "already done"
check, the state key that records which inputs it was done for, its action (steps.py), whether part of it
may overlap the steps after it, and whether it changes the venv. `build_steps` turns the table into the
plan's `Step`s; `execute` runs them in a loop that knows no step by name.

To add a step: write its action in steps.py (`(run, step) -> str | StepWarning`, idempotent; it marks its
state key when done), add one `StepSpec` to STEPS at its place in the order, with `command` and `done`
functions of `Facts` (the facts the done-checks share, computed once per plan). Nothing else changes:
the dry run shows it, the executor runs it, the JSON output and the state file carry its id.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from mw_env.provision import keys, repair
from mw_env.provision import pin as pinmod
from mw_env.provision import steps as act
from mw_env.provision.choose import exact_requirement
from mw_env.provision.events import StepWarning
from mw_env.provision.model import GiB, Plan, Step
from mw_env.provision.state import State
from mw_env.provision.torchindex import CONFIG_FILE
from mw_env.provision.verifystep import BackgroundVerify, verify_after_extras, verify_torch
from mw_env.sources import uv as uvmod
from mw_env.venv.integrity import Damaged, Scan, scan_venv
from mw_env.venv.lock import LOCK_FILE
from mw_env.venv.record import record_reads
from mw_env.venv.venvinfo import adopted_site, installed_version, real_venv

if TYPE_CHECKING:
    from mw_env.provision.archtruth import ArchPolicy

Command = tuple[str, ...] | None


@dataclass(frozen=True)
class Overlap:
    """A step part of which runs in the background while the steps marked `beside` after it run."""

    start: Callable[[act.Run, Step], BackgroundVerify]
    finish: Callable[[act.Run, Step, str], str]  # judge the background part's output; the step's detail


@dataclass(frozen=True)
class StepSpec:
    id: str
    title: Callable[[Facts], str]
    command: Callable[[Facts], Command]
    done: Callable[[Facts], bool]
    action: Callable[[act.Run, Step], str | StepWarning]
    # The state file's key for the inputs a finished step was done for; None: the step keeps no state.
    state_key: Callable[[Plan, str | None], str] | None = None
    detail: Callable[[Facts], str] = lambda f: ""
    applies: Callable[[Plan], bool] = lambda p: True
    # Planned only when the venv as found needs it (the repair of damaged files): a step of every plan else.
    needed: Callable[[Facts], bool] = lambda f: True
    overlap: Overlap | None = None
    beside: bool = False  # may run while an overlapping step's background part runs
    changes: bool = True  # running it counts as a change (a no-op re-run runs only the checks)
    moves_venv: bool = False  # after it the venv is at plan.venv, not plan.build_venv
    # Work the step may begin when the run starts, in the background, if it is still to do (its action
    # collects the result): e.g. reading a large file on the core that planning leaves idle.
    early: Callable[[Plan], None] | None = None

    def is_done(self, f: Facts, version: str | None) -> bool:
        return self.state_key is not None and f.state.is_done(self.id, self.state_key(f.p, version))


class Facts:
    """What the done-checks and commands share, computed once per plan (lazily)."""

    def __init__(self, p: Plan, state: State, scan: Scan | None = None) -> None:
        self.p, self.state = p, state
        # The installed files against their RECORDs (every size; the hash of a file changed since its package
        # was unpacked: venv/integrity.py) and the verify key's fingerprint, from the plan's one read of them.
        self.scan = scan_venv(p.build_venv) if scan is None else scan
        self.bv, self.py, self.uv = p.build_venv, str(p.venv_python), p.uv or "uv"
        self.offline = ["--offline"] if p.options and p.options.offline else []

    @cached_property
    def installed(self) -> str | None:
        return self.p.adopted.version if self.p.adopted else installed_version(self.bv, "torch")

    @cached_property
    def torch_damage(self) -> tuple[Damaged, ...]:
        return repair.torch_damage(self.scan, self.p)

    @cached_property
    def other_damage(self) -> tuple[Damaged, ...]:
        return repair.other_damage(self.scan, self.p)

    @cached_property
    def venv_ok(self) -> bool:
        return all((self.bv / f).exists() for f in ("pyvenv.cfg", "bin/python", "bin/activate"))

    @cached_property
    def torch_fits(self) -> bool:
        p = self.p
        return keys.torch_fits(self.bv, self.installed, p.local_tag, p.version_spec)

    @cached_property
    def pin_done(self) -> bool:
        p, installed = self.p, self.installed
        version_now = installed or (p.torch.wheel.version if p.torch and p.torch.wheel else None)
        return bool(installed) and pinmod.files_match(keys.expected_pins(p, version_now or "?"))

    @cached_property
    def env_done(self) -> bool:
        bv = self.bv
        return (
            pinmod.files_match({bv / "mw-env.env": keys.env_text(self.p)})
            and record_reads(bv)
            and pinmod.activate_is_patched(bv, self.p.venv)
            and ENV.is_done(self, self.installed)
        )

    @cached_property
    def project_whole(self) -> bool:
        return keys.project_whole(self.p)

    @cached_property
    def all_done(self) -> bool:
        extras = EXTRAS.is_done(self, self.installed or "") and self.project_whole
        whole = self.venv_ok and _torch_done(self) and self.pin_done and extras and self.env_done
        return whole and not self.torch_damage and not self.other_damage


# -- the steps' commands and done-checks ----------------------------------------------------------------


def _preflight_detail(f: Facts) -> str:
    p = f.p
    if p.problem:
        return p.problem.message
    return (
        f"needs {p.disk.text} free"
        if p.disk and p.disk.need_bytes == p.disk_need
        else (f"needs ~{p.disk_need / GiB:.1f} GiB free")
    )


def _uv_command(f: Facts) -> Command:
    if f.p.uv:
        return None
    return tuple(uvmod.uv_install_commands(f.p.python.path if f.p.python else sys.executable, f.p.env)[0])


def _venv_command(f: Facts) -> Command:
    p = f.p
    python = p.python.path if p.python else (p.options.python if p.options else "3.12")
    # A --venv that is a symbolic link is made at its target: uv refuses to create a folder through a link.
    where = real_venv(f.bv) if os.path.islink(f.bv) else f.bv
    return (f.uv, "venv", "--python", python, "--relocatable", str(where))


def _torch_title(f: Facts) -> str:
    if f.p.lock is not None:
        return f"Install the lock's packages exactly, torch {f.p.lock.meta.torch} among them (hashes checked)"
    return f"Install torch ({f.p.build}{', ' + f.p.local_tag if f.p.local_tag else ''}) first"


def _torch_command(f: Facts) -> Command:
    p = f.p
    damaged = [d.name for d in f.torch_damage]  # reinstalled from torch's own source (repair.py)
    if p.lock is not None:
        from mw_env.venv.lock.rebuild import install_command

        # The whole lock in one uv transaction: every file's sha256 is checked before any is installed.
        return repair.with_reinstall(
            install_command(f.uv, f.py, f.bv / LOCK_FILE, offline=bool(f.offline)), damaged
        )
    if p.adopted:
        return None
    # Without a usable source (preflight will stop on the problem) the plan still shows the command that
    # WOULD run: the profile's index and exact build, never a bare `torch` the default index would answer.
    req = p.torch.requirement if p.torch else exact_requirement(p.version_spec, p.local_tag)
    index = p.torch_index if p.torch is None else p.torch.location if p.torch.origin == "index" else None
    # The indexes, each with how it answers, are in the step's own uv configuration (torchindex.py): the torch
    # index first, with ignore-error-codes = [403] where it answers 403 for what it does not hold.
    args = [f.uv, "pip", "install", "--python", f.py, "--config-file", str(f.bv / CONFIG_FILE), *f.offline]
    if index:
        # first-index (uv's default, restated so a UV_INDEX_STRATEGY=unsafe-best-match cannot apply): torch
        # comes from the torch index even when another index lists a newer (CUDA) torch in the range.
        args += ["--index-strategy", "first-index"]
    args += p.sources.uv_args(indexes=False)
    if f.state.was_started("torch") or (f.installed and not f.torch_fits):
        # A killed install may have left torch half-written; a swapped one may still satisfy a range
        # requirement, which uv would then leave in place.
        damaged = sorted({"torch", *damaged})
    return repair.with_reinstall((*args, keys.with_extras(req, p.torch_extras), *p.companions), damaged)


def _torch_done(f: Facts) -> bool:
    if f.p.lock is not None:
        return f.installed == f.p.lock.meta.torch and TORCH.is_done(f, f.installed)
    if f.p.adopted:
        return f.venv_ok and adopted_site(f.bv) == f.p.adopted.site
    # The state says the step finished; the dist-info says the build is still the profile's; its files are
    # what its RECORD says.
    return f.torch_fits and TORCH.is_done(f, f.installed) and not f.torch_damage


def _policy(f: Facts) -> ArchPolicy:
    assert f.p.arch_policy is not None  # WHEEL_ARCHS applies only to a plan with a policy
    return f.p.arch_policy


def _torch_detail(f: Facts) -> str:
    p = f.p
    if p.lock is not None:
        from mw_env.venv.lock.rebuild import describe

        return f"{describe(p.lock)} from {p.lock.source}"
    if p.adopted:
        return f"reuse the image's torch {p.adopted.version} from {p.adopted.site}"
    req = p.torch.requirement if p.torch else exact_requirement(p.version_spec, p.local_tag)
    shown = f"{req} from {p.torch.origin} {p.torch.location}" if p.torch else req
    return shown + repair.damage_detail(f.torch_damage)


def _verify_command(f: Facts) -> Command:
    from mw_env.provision.verify import verify_command

    # The doctor step imports torch itself: then the verify reads the build without importing it.
    return verify_command(f.py, import_torch=not (f.p.options.doctor if f.p.options else True))


def _extras_command(f: Facts) -> tuple[str, ...]:
    p, bv = f.p, f.bv
    pin_flag = (
        ["--override", str(bv / pinmod.OVERRIDES_FILE)]
        if p.adopted
        else ["--constraint", str(bv / pinmod.CONSTRAINTS_FILE)]
    )
    user = (x for c in p.sources.constraints for x in ("--constraint", c))
    return (f.uv, "pip", "install", "--python", f.py, *f.offline, *pin_flag, *user, *p.sources.uv_args())


def _no_command(f: Facts) -> Command:
    return None


# -- the table --------------------------------------------------------------------------------------------

PREFLIGHT: StepSpec = StepSpec(
    "preflight",
    title=lambda f: "Check disk, uv, Python and the torch source",
    command=_no_command,
    done=lambda f: f.all_done,
    action=act.preflight,
    detail=_preflight_detail,
    changes=False,  # checks only
)
UV: StepSpec = StepSpec(
    "uv",
    title=lambda f: "Install uv from PyPI" if not f.p.uv else "uv is present",
    command=_uv_command,
    done=lambda f: bool(f.p.uv),
    action=act.install_uv,
    detail=lambda f: f.p.uv or "",
)
VENV: StepSpec = StepSpec(
    "venv",
    title=lambda f: f"Create the venv {f.bv}",
    command=_venv_command,
    done=lambda f: f.venv_ok,
    action=act.create_venv,
)
TORCH: StepSpec = StepSpec(
    "torch",
    title=_torch_title,
    command=_torch_command,
    done=_torch_done,
    action=act.install_torch,
    state_key=keys.torch_key,
    detail=_torch_detail,
)
WHEEL_ARCHS: StepSpec = StepSpec(
    "wheel-archs",
    # Truth from the wheel (AMD, GPU target known): the archs the installed torch carries decide the override,
    # before the pin and the env file; a re-run decided it while planning (Plan.wheel).
    title=lambda f: f"Read the installed wheel's GPU archs ({_policy(f).gfx})",
    command=_no_command,
    done=lambda f: f.all_done and f.p.wheel is not None,
    action=act.read_wheel_archs,
    detail=lambda f: _policy(f).reason,
    applies=lambda p: p.arch_policy is not None,
)
REPAIR: StepSpec = StepSpec(
    "repair",
    title=lambda f: "Reinstall the packages whose installed files are damaged",
    command=lambda f: repair.repair_command(f.p, f.other_damage),
    done=lambda f: not f.other_damage,
    action=act.repair_files,
    detail=lambda f: repair.damage_detail(f.other_damage).removeprefix("; "),
    needed=lambda f: bool(f.other_damage),
)


def _verified(f: Facts) -> bool:
    """Verified for this torch and these files (the key's fingerprint from the plan's one read of the files),
    and nothing damaged since: a repair is verified again."""
    if not f.installed or f.torch_damage or f.other_damage:
        return False
    return f.state.is_done(VERIFY.id, keys.verify_key(f.p, f.installed, fingerprint=f.scan.fingerprint))


VERIFY: StepSpec = StepSpec(
    "verify-torch",
    title=lambda f: f"Verify torch reports the {f.p.build} build",
    command=_verify_command,
    done=_verified,
    action=verify_torch,
    state_key=keys.verify_key,
    # Its build check reads torch/version.py in a child while the pin and the extras run (BackgroundVerify).
    overlap=Overlap(start=BackgroundVerify, finish=verify_after_extras),
)
PIN: StepSpec = StepSpec(
    "pin-torch",
    title=lambda f: "Pin torch for pip and uv in this venv",
    command=_no_command,
    done=lambda f: f.pin_done,
    action=act.pin_torch,
    beside=True,
)
EXTRAS: StepSpec = StepSpec(
    "extras",
    title=lambda f: "Install the project's extras with torch pinned",
    # From a lock, every dependency is installed already, exactly: the project alone (--no-deps).
    command=lambda f: (
        (*_extras_command(f), "--no-deps", *f.p.project_args)
        if f.p.lock is not None
        else (*_extras_command(f), *f.p.project_args, "pip")
    ),
    done=lambda f: f.venv_ok and EXTRAS.is_done(f, f.installed or "") and f.project_whole,
    action=act.install_extras,
    state_key=keys.extras_key,
    beside=True,
)


ENV: StepSpec = StepSpec(
    "env",
    title=lambda f: "Persist the runtime environment (activate, mw-env.env, mw-env.json)",
    command=_no_command,
    done=lambda f: f.env_done,
    action=act.write_env,
    state_key=keys.env_key,
)
LOCK: StepSpec = StepSpec(
    "lock",
    title=lambda f: (
        f"Check the venv against its lock ({LOCK_FILE})"
        if f.p.lock is not None
        else f"Write the venv's lock ({LOCK_FILE})"
    ),
    command=_no_command,
    # An adopted torch lives outside the venv: no lock is written for it (the step says so once).
    done=lambda f: (
        f.venv_ok and ((f.bv / LOCK_FILE).is_file() or bool(f.p.adopted)) and LOCK.is_done(f, f.installed)
    ),
    action=act.write_lock,
    early=act.hash_for_the_lock,
    state_key=keys.lock_key,
)
SWAP: StepSpec = StepSpec(
    "swap",
    title=lambda f: f"Replace {f.p.venv} with the new venv",
    command=_no_command,
    done=lambda f: False,
    action=act.swap_venv,
    applies=lambda p: bool(p.options and p.options.recreate),
    moves_venv=True,
)
DOCTOR: StepSpec = StepSpec(
    "doctor",
    title=lambda f: "Run the doctor",
    command=_no_command,
    done=lambda f: f.all_done and DOCTOR.is_done(f, f.installed),
    action=act.run_doctor,
    state_key=keys.doctor_key,
    applies=lambda p: not p.options or p.options.doctor,
)

STEPS: tuple[StepSpec, ...] = (
    PREFLIGHT,
    UV,
    VENV,
    TORCH,
    WHEEL_ARCHS,
    REPAIR,
    VERIFY,
    PIN,
    EXTRAS,
    ENV,
    LOCK,
    SWAP,
    DOCTOR,
)
BY_ID: dict[str, StepSpec] = {s.id: s for s in STEPS}


def build_steps(p: Plan, state: State, scan: Scan | None = None) -> list[Step]:
    """The plan's steps: each spec that applies, with its command and whether it is already done. `scan`: the
    venv's installed files as the planner read them (read here when not given)."""
    f = Facts(p, state, scan)
    return [
        Step(s.id, s.title(f), s.command(f), s.done(f), s.detail(f))
        for s in STEPS
        if s.applies(p) and s.needed(f)
    ]


def spec_of(step: Step) -> StepSpec:
    return BY_ID[step.id]
