"""A timeout on an overloaded machine is told apart from a hung device: the load average against the CPUs,
and how far the probe got."""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace

import pytest
from doctor_helpers import GPU_780M, by_id, hardware, selection

from conftest import MACHINES
from mw_env.checks.load import Load, read_load, timeout_verdict
from mw_env.hardware.facts import CpuInfo
from mw_env.hardware.machine import Machine


def _root_with_load(tmp_path, load1: float, fixture: str = "doctor-cpu-docker-shm64m") -> Machine:
    root = tmp_path / "root"
    shutil.copytree(MACHINES / fixture, root, symlinks=True)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc" / "loadavg").write_text(f"{load1:.2f} 9.00 4.00 17/512 4242\n")
    return Machine(root=root, env={"PATH": f"{root / '.mw-env-bin'}", "HOME": "/home/agent"})


def test_the_verdict_tells_a_busy_machine_from_an_idle_one():
    busy, how = timeout_verdict(67, Load(16.0, 2), "the probe reached stage 'import' (2 stages in 66s)")
    assert "on an overloaded machine (load average 16.0 on 2 CPUs, 8.0 per CPU)" in busy
    assert "stage 'import'" in busy
    assert "busy" in how and "--timeout" in how and "idle machine" in how
    idle, fix = timeout_verdict(67, Load(0.4, 2), None)
    assert idle == "check did not finish within 67s (load average 0.4 on 2 CPUs: not a busy machine)"
    assert "hung device" in fix
    unknown, _ = timeout_verdict(10, None, None)
    assert unknown == "check did not finish within 10s"


def test_the_load_is_read_through_the_machine(tmp_path):
    machine = _root_with_load(tmp_path, 16.0)
    assert read_load(machine, 2) == Load(16.0, 2) and read_load(machine, 2).overloaded
    assert not read_load(machine, 16).overloaded  # 1 per CPU: busy, not overloaded
    (machine.root / "proc" / "loadavg").write_text("garbage\n")
    assert read_load(machine, 2) is None
    assert read_load(Machine(root=tmp_path / "empty"), 2) is None


@pytest.mark.parametrize(("load1", "needle"), [(16.0, "overloaded machine"), (0.3, "not a busy machine")])
def test_a_check_that_times_out_says_whether_the_machine_was_busy(tmp_path, monkeypatch, load1, needle):
    from mw_env.checks import run_doctor, runner

    gate, released = threading.Event(), threading.Event()

    def stuck(ctx):
        gate.wait(120)
        released.set()
        return []

    areas = tuple(replace(a, check=stuck) if a.key == "network" else a for a in runner.AREAS)
    monkeypatch.setattr(runner, "AREAS", areas)
    hw = replace(hardware(None, container="docker"), cpu=CpuInfo(cores=2))
    report = run_doctor(
        machine=_root_with_load(tmp_path, load1),
        selection=selection(hw),
        venv=tmp_path / "v",
        quick=True,
        hardware=hw,
        check_timeout=0.5,
    )
    assert not released.is_set()  # the doctor gave up on the stuck check, it did not wait it out
    gate.set()
    timeout = by_id(report)["network.timeout"]
    assert timeout.status == "fail" and needle in timeout.detail
    assert ("usually means a hung device" in timeout.fix) == (load1 < 1)


def test_a_probe_stuck_in_a_gpu_stage_on_a_busy_machine_is_not_called_a_gpu_fault(tmp_path):
    from test_verdicts import IMPORT, RUNTIME_780M, ctx_for, probe_of

    from mw_env.checks.compute import check_compute

    alloc = {"stage": "alloc", "ok": True, "device": "cuda", "bytes": 64 * 1024 * 1024}
    probe = replace(probe_of(IMPORT, RUNTIME_780M, alloc), timed_out=True, returncode=None)
    ctx = ctx_for("doctor-incus-780m-nokfd", GPU_780M, probe)
    ctx.hardware = replace(ctx.hardware, cpu=CpuInfo(cores=2))
    ctx.machine = _root_with_load(tmp_path, 16.0, "doctor-incus-780m-nokfd")
    found = check_compute(ctx)[0]
    assert found.status == "fail"
    assert "hung after" not in found.detail and "stopped after stage 'alloc'" in found.detail
    assert "load average 16.0 on 2 CPUs" in found.detail and "not (yet) a hung GPU" in found.detail
    assert "--timeout" in found.fix
    # The same hang on an idle machine is the GPU fault it was (test_doctor_audit).
    ctx.machine = _root_with_load(tmp_path / "idle", 0.2, "doctor-incus-780m-nokfd")
    assert "GPU fault" in check_compute(ctx)[0].detail


def test_the_doctor_runs_none_of_the_pythons_on_path(tmp_path, monkeypatch):
    # No check reads them, and running each one (pyenv shims are bash pipelines) took half a second of every
    # doctor: detection without interpreters, as bootstrap's planning does.
    from mw_env.checks import run_doctor
    from mw_env.hardware import detect as detect_mod
    from mw_env.hardware import system

    ran: list[str] = []
    asked: list[bool] = []
    monkeypatch.setattr(system, "pythons", lambda *a, **k: ran.append("pythons") or ())
    real = detect_mod.detect

    def spy(machine, *, gpu=None, interpreters=True):
        asked.append(interpreters)
        return real(machine, gpu=gpu, interpreters=interpreters)

    monkeypatch.setattr(detect_mod, "detect", spy)
    hw = replace(hardware(None, container="docker"), cpu=CpuInfo(cores=2))
    report = run_doctor(
        machine=Machine(root=MACHINES / "cpu-only"), selection=selection(hw), venv=tmp_path / "v", quick=True
    )
    assert asked == [False] and ran == [] and report.checks
