"""What this process may use (mw_env.hardware.capacity), its preflight use (runs/fit.py) and the trainer's bounds on
threads and data workers (issue 29, class 3: settings the machine can hold)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mw_env.cli import main
from mw_env.hardware import capacity

GIB = 1 << 30


def _reader(files: dict[str, str]) -> capacity.Read:
    return files.get


def test_cgroup_limits_are_read_at_every_level_and_the_smallest_wins() -> None:
    read = _reader(
        {
            "proc/self/cgroup": "0::/box/job\n",
            "proc/meminfo": "MemTotal: 67108864 kB\nMemAvailable: 8388608 kB\n",  # 8 GiB
            "sys/fs/cgroup/box/job/cpu.max": "max 100000",
            "sys/fs/cgroup/box/cpu.max": "150000 100000",  # 1.5 CPUs, a level up
            "sys/fs/cgroup/box/job/memory.max": "max",
            "sys/fs/cgroup/box/memory.max": str(4 * GIB),
            "sys/fs/cgroup/box/memory.current": str(GIB),
            "sys/fs/cgroup/memory.max": "garbage",
        }
    )
    assert capacity.cgroup_dirs(read) == ["sys/fs/cgroup/box/job", "sys/fs/cgroup/box", "sys/fs/cgroup"]
    assert capacity.cpu_quota(read) == 1.5
    cpus = capacity.usable_cpus(read)
    assert cpus.usable == min(cpus.affinity, 2) and "cgroup cpu.max 1.5 CPUs" in cpus.describe()
    memory = capacity.available_memory(read)
    assert memory.available == 3 * GIB and "/sys/fs/cgroup/box/memory.max 4.0 GiB" in memory.source


def test_no_limits_is_memavailable_and_the_affinity_mask() -> None:
    read = _reader({"proc/meminfo": "MemAvailable: 1048576 kB\n", "sys/fs/cgroup/cpu.max": "max 100000"})
    assert capacity.available_memory(read) == capacity.Memory(GIB, "MemAvailable in /proc/meminfo")
    assert capacity.usable_cpus(read).usable == len(os.sched_getaffinity(0))
    assert capacity.available_memory(_reader({})).available is None  # nothing readable: nothing judged


def test_bounded_says_what_it_lowered() -> None:
    cpus = capacity.Cpus(usable=2, affinity=2, quota=None)
    assert capacity.bounded("runtime.threads", 2, 2, cpus) == (2, None)
    value, warning = capacity.bounded("runtime.threads", 4096, 2, cpus)
    assert value == 2 and warning is not None
    assert (
        "runtime.threads=4096" in warning
        and "2 CPUs in its affinity mask" in warning
        and "using 2" in warning
    )


def test_the_trainer_bounds_threads_and_workers_by_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from mw_env.trainer.runtime import cpu_bounds
    from mw_env.trainspec.schema import DataConfig, RuntimeConfig, TrainConfig

    monkeypatch.setattr(capacity, "cpu_quota", lambda read: 1.5)  # a container's cpu.max of 1.5 CPUs
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    usable = min(len(os.sched_getaffinity(0)), 2)
    config = TrainConfig(
        runtime=replace(RuntimeConfig(), threads=4096),
        data=replace(DataConfig(), source="files", workers=512),
    )
    threads, warnings = cpu_bounds(config)
    assert threads == usable and len(warnings) == 2
    assert "runtime.threads=4096" in warnings[0] and "data.workers=512" in warnings[1]
    assert cpu_bounds(TrainConfig()) == (0, [])  # torch's default and the synthetic corpus: nothing to say


def _fake_venv(tmp_path: Path) -> Path:
    import json
    import sys

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    record = {
        "profile": "cpu",
        "torch_requirement": "torch==2.13.0+cpu",
        "torch_version": "2.13.0+cpu",
        "torch_build": "cpu",
        "torch_index": None,
        "python": "3.11",
        "env": {},
    }
    (venv / "mw-env.json").write_text(json.dumps(record))
    return venv


def test_a_model_no_machine_holds_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's reproducer: it passed validation and died in the allocator (256 GiB asked)."""
    venv = _fake_venv(tmp_path)
    monkeypatch.chdir(tmp_path)
    base = ["train", "--config", "smoke", "--venv", str(venv), "--profile", "cpu"]  # the doctor would run
    big = ["--set", "model.d_model=65536", "--set", "model.n_heads=1", "--set", "model.max_len=1048576"]
    assert main([*base, *big]) == 2
    err = capsys.readouterr().err
    assert "error: this run needs about" in err and "Traceback" not in err
    assert "parameters" in err and ("MemAvailable" in err or "memory.max" in err)
    assert "hint: lower model.d_model" in err
    assert not (tmp_path / "runs").exists()  # refused before the run folder or the doctor
    huge_batch = ["--set", "optim.batch_size=1048576", "--set", "model.max_len=1048576"]
    assert main([*base, *huge_batch]) == 2
    assert "optim.batch_size" in capsys.readouterr().err


def test_the_check_judges_a_discrete_gpu_by_its_own_memory() -> None:
    from dataclasses import replace

    from mw_env.hardware.facts import Gpu, Hardware
    from mw_env.runs.fit import judge
    from mw_env.trainspec.schema import ModelConfig, OptimConfig, RuntimeConfig, TrainConfig

    cfg = TrainConfig(
        model=replace(ModelConfig(), d_model=1024, n_layers=12, d_ff=4096, max_len=512),
        optim=replace(OptimConfig(), batch_size=64),
        runtime=replace(RuntimeConfig(), device="cuda"),
    )
    card = Gpu(index=0, vendor="nvidia", name="Tesla T4", pci_id="10de:1eb8", memory_bytes=16 * GIB)
    hw = Hardware(gpus=(card,), selected_gpu=0)
    roomy = _reader({"proc/meminfo": "MemAvailable: 268435456 kB\n"})  # 256 GiB of host RAM does not help
    fit = judge(cfg, hardware=hw, build="cuda", nproc=2, read=roomy)
    assert fit.where.startswith("GPU Tesla T4") and fit.processes == 1 and not fit.fits
    apu = Hardware(gpus=(replace(card, integrated=True, memory_bytes=512 << 20),), selected_gpu=0)
    shared = judge(cfg, hardware=apu, build="rocm", nproc=2, read=roomy)
    assert shared.where.startswith("this machine") and shared.processes == 2 and shared.fits
    unknown = judge(
        cfg,
        hardware=Hardware(gpus=(replace(card, memory_bytes=None),), selected_gpu=0),
        build="cuda",
        nproc=1,
        read=roomy,
    )
    assert unknown.fits and unknown.have is None  # memory detection could not read: not judged


def test_an_oom_killed_runs_hint_says_what_it_needed_and_what_to_lower(tmp_path: Path) -> None:
    """It said only "resume with the same command", which is killed again."""
    from mw_env.runs import foreground
    from mw_env.runs.anomalies import Liveness, check_liveness

    err = foreground.killed(9, tmp_path, sent=False, oom=True, need=5 * GIB, lower="lower optim.batch_size")
    hint = err.hint or ""
    # A lower batch size goes to the resume itself (the global batch is kept); no --fresh for it.
    assert "about 5.0 GiB" in hint and "same command" in hint and "--fresh" not in hint, hint
    assert "or resume with a lower --set optim.batch_size=N (a resume keeps the run's global batch" in hint
    # The model's sizes cannot change on a resume: they take --fresh.
    model = foreground.killed(9, tmp_path, sent=False, oom=True, lower="lower model.d_model, model.n_layers")
    assert "--fresh and model.d_model, model.n_layers lowered (they cannot change on a resume)" in (
        model.hint or ""
    )
    assert "optim.batch_size" not in (model.hint or "")
    alive = Liveness(alive=False, pid=7, signal=9, oom_kills=1, exit_recorded=True, memory_need=3 * GIB)
    (oom,) = check_liveness([], alive, "train.log")
    assert oom.kind == "oom" and "about 3.0 GiB" in oom.hint and "optim.batch_size" in oom.hint
