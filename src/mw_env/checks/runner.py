"""Run every area's checks concurrently, each with its own timeout; a crash becomes a failed check.

Areas that need the venv's torch wait on the shared background probe (started first, bounded by the
probe timeout), so a hung GPU costs the probe timeout plus a moment, never a hung doctor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mw_env.base.errors import MwEnvError
from mw_env.checks import (
    apu,
    arch,
    compute,
    device,
    devices,
    disk,
    files,
    ipc,
    messages,
    network,
    torch_build,
    venv,
    versions,
)
from mw_env.checks.catalogue import general_advice, load_catalogue
from mw_env.checks.context import Background, DoctorContext
from mw_env.checks.explain import machine_kind
from mw_env.checks.gpuadvice import for_machine
from mw_env.checks.load import timeout_verdict
from mw_env.checks.model import CheckResult, DoctorReport, result
from mw_env.checks.probe import kill_active

if TYPE_CHECKING:
    from mw_env.hardware.facts import Hardware
    from mw_env.hardware.machine import Machine
    from mw_env.profiles.model import Selection
    from mw_env.venv.record import VenvRecord

AreaFn = Callable[[DoctorContext], list[CheckResult]]
FILES_TIMEOUT = 180.0  # the installed files read (and with -v hashed): a ROCm torch is 5.7 GB
Needs = Literal["", "static", "probe"]


@dataclass(frozen=True)
class Area:
    """One area of the report: its key (the check module's AREA, each result's `area`), its title, the
    function that checks it, and what it waits for: "" nothing, "static" the venv inspection, "probe" the
    full probe (its deadline follows from that)."""

    key: str
    title: str
    check: AreaFn
    needs: Needs = ""
    limit_s: float | None = None  # its own deadline, where its work is neither a probe's nor a quick read


# The doctor's areas, in report order: the first failure explains the later ones (no device node -> no GPU
# in torch). The one table of them: the renderer's titles and the runner's order both come from here.
AREAS: tuple[Area, ...] = (
    Area(devices.AREA, "Device nodes", devices.check_devices),
    Area(venv.AREA, "Training venv", venv.check_venv, "static"),
    # Hashing every file of a ROCm torch (`-v`) is ~15 s of CPU on an idle machine (bench/bench_integrity.py).
    Area(files.AREA, "Installed files", files.check_files, limit_s=FILES_TIMEOUT),
    Area(torch_build.AREA, "PyTorch build", torch_build.check_torch, "probe"),
    Area(versions.AREA, "Runtime versions", versions.check_versions, "probe"),
    Area(arch.AREA, "GPU architecture", arch.check_arch, "probe"),
    # The probe's GPU allocation tells a real IPC/SELinux block from a risk.
    Area(ipc.AREA, "Shared memory and confinement", ipc.check_ipc, "probe"),
    Area(apu.AREA, "Kernel, memory and caches", apu.check_apu),
    Area(device.AREA, "GPU as torch sees it", device.check_device, "probe"),
    Area(compute.AREA, "Compute probe", compute.check_compute, "probe"),
    Area(messages.AREA, "Known messages", messages.check_messages, "probe"),
    Area(network.AREA, "Network", network.check_network),
    Area(disk.AREA, "Disk", disk.check_disk),
)


def area_title(key: str) -> str:
    """The report title of an area (the key itself for one not in the table)."""
    return next((a.title for a in AREAS if a.key == key), key)


# The venv record as read once per command: (record or None, the reason it could not be read).
RecordRead = tuple["VenvRecord | None", "str | None"]
CHECK_TIMEOUT = 10.0
STATIC_TIMEOUT = 35.0  # the venv's python answering without importing torch


def run_doctor(
    *,
    machine: Machine,
    selection: Selection,
    venv: Path,
    quick: bool = False,
    probe_timeout: float = 60.0,
    hardware: Hardware | None = None,
    network: bool | None = None,
    check_timeout: float = CHECK_TIMEOUT,
    run_env: Mapping[str, str] | None = None,
    record: RecordRead | None = None,
    hash_files: bool = False,
) -> DoctorReport:
    """Check the machine, the venv and its torch against the selection; never raises for a finding.

    `run_env` is the environment training will run with (the trainer passes its own); by default this
    process's environment with the venv's env file (mw-env.env) on top, as `source bin/activate` gives.
    `network` None checks the torch index host only in a full run on the real machine (a quick pre-flight
    must not wait on a broken DNS; a fake root has no network of its own). `record` is the venv record as
    the caller already read it (`read_venv_record`), so a command reads it once. `hash_files` hashes every
    installed file against its RECORD (seconds for a torch: `doctor -v`), not only those changed since unpacked.
    """
    start = time.monotonic()
    venv = Path(venv).expanduser().absolute()
    if hardware is None:
        from mw_env.hardware.detect import detect

        # No interpreters: no check reads the Pythons on PATH, and each real one listed is a start.
        hardware = detect(
            machine, gpu=selection.gpu.index if selection.gpu is not None else None, interpreters=False
        )
    venv_record, record_error = record if record is not None else read_venv_record(venv)
    ctx = DoctorContext(
        machine=machine,
        hardware=hardware,
        selection=selection,
        venv=venv,
        catalogue=load_catalogue(
            profile=selection.profile,
            advice=for_machine(selection, general_advice(), venv_record, str(venv)),
            machine=machine_kind(selection.gpu if selection.gpu is not None else hardware.gpu),
        ),
        quick=quick,
        probe_timeout=probe_timeout,
        network=(not quick and machine.is_real) if network is None else network,
        record=venv_record,
        record_error=record_error,
        run_env=dict(run_env) if run_env is not None else None,
        hash_files=hash_files,
    )
    try:
        return _run(ctx, start=start, quick=quick, probe_timeout=probe_timeout, check_timeout=check_timeout)
    finally:
        # Done, interrupted or given up on: no probe may outlive the doctor.
        kill_active()


def _run(
    ctx: DoctorContext, *, start: float, quick: bool, probe_timeout: float, check_timeout: float
) -> DoctorReport:
    ctx.start_background()
    running = []
    for area in AREAS:
        job: Background[tuple[list[CheckResult], float]] = Background(_timed(area.check, ctx))
        running.append((area, job))
    checks: list[CheckResult] = []
    for area, job in running:
        needs = area.needs
        # Every area started at `start`; deadlines count from there, so timeouts do not add up.
        # The static inspection and the probe run side by side, so waiting on the probe covers both.
        if area.limit_s is not None:
            limit = area.limit_s
        elif needs == "probe" and not quick:
            limit = max(probe_timeout + 5, STATIC_TIMEOUT) + 2
        elif needs:
            limit = STATIC_TIMEOUT + 2
        else:
            limit = check_timeout
        remaining = max(0.0, start + limit - time.monotonic())
        try:
            results, took = job.get(remaining)
        except TimeoutError:
            # A busy machine and a hung device both end here: the load and the probe's progress tell which.
            detail, fix = timeout_verdict(
                limit, ctx.load(), ctx.probe_progress() if needs == "probe" else None
            )
            checks.append(result(f"{area.key}.timeout", area.title, "fail", detail, fix))
            continue
        except Exception as exc:
            checks.append(
                result(
                    f"{area.key}.crashed",
                    area.title,
                    "fail",
                    f"check crashed: {type(exc).__name__}: {exc}",
                    "This is a bug in mw-env's doctor; please report it with `mw-env doctor -v --json`.",
                )
            )
            continue
        checks.extend(r.with_duration(took) for r in results)
    return DoctorReport(
        profile=ctx.selection.profile.name,
        checks=tuple(checks),
        duration_s=time.monotonic() - start,
        venv=str(ctx.venv),
        facts=_facts(ctx),
    )


def _timed(fn: AreaFn, ctx: DoctorContext) -> Callable[[], tuple[list[CheckResult], float]]:
    def call() -> tuple[list[CheckResult], float]:
        t0 = time.monotonic()
        out = fn(ctx)
        return out, time.monotonic() - t0

    return call


def read_venv_record(venv: Path) -> RecordRead:
    """(the venv's bootstrap record or None, why it could not be read): a broken record is a finding."""
    from mw_env.venv.record import read_record

    try:
        return read_record(venv), None
    except MwEnvError as exc:
        return None, exc.message


def _facts(ctx: DoctorContext) -> dict[str, object]:
    """Figures for --json: the torch build and, when the probe ran, device and TFLOP/s per dtype."""
    facts: dict[str, object] = {}
    try:
        info = ctx.torch_info()
        probe = ctx.probe()
    except Exception:  # facts are a bonus; the checks already reported what went wrong
        return facts
    if info:
        facts["torch"] = {k: info.get(k) for k in ("version", "build", "hip", "cuda", "arch_list")}
    if probe is not None:
        rt = probe.stage("runtime") or {}
        facts["device"] = rt.get("device")
        facts["device_name"] = rt.get("name")
        facts["tflops"] = {d: (probe.stage(f"matmul.{d}") or {}).get("tflops") for d in compute.DTYPES}
        facts["probe_s"] = round(probe.duration_s, 3)
        facts["probe_last_stage"] = probe.last_stage
    return facts
