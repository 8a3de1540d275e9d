"""What every check reads: the machine, its hardware, the selection, the venv, and the shared probe runs.

The static venv inspection and the full probe are started once, in the background, as soon as the
doctor starts; checks that need them wait (bounded) for their result.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mw_env.base.errors import MwEnvError
from mw_env.checks.catalogue import Catalogue
from mw_env.checks.load import Load, read_load
from mw_env.checks.probe import ProbeResult, run_probe

if TYPE_CHECKING:
    from mw_env.hardware.facts import Gpu, Hardware
    from mw_env.hardware.machine import Machine
    from mw_env.profiles.model import Profile, Selection
    from mw_env.venv.record import VenvRecord

T = TypeVar("T")
GIB = 1024**3
BUILD_LABEL = {"rocm": "ROCm", "cuda": "CUDA", "cpu": "CPU"}  # a torch build as the findings name it
_CONTAINER_KINDS = ("incus", "lxc", "docker", "podman", "kubernetes")


class Background(Generic[T]):
    """A value computed once in a daemon thread, started at once; `get` waits at most `timeout` seconds.

    Daemon threads, not an executor: a check stuck in a syscall must never keep the doctor from exiting.
    """

    def __init__(self, fn: Callable[[], T]) -> None:
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(fn,), daemon=True, name="mw-env-doctor-bg").start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # handed to whoever waits
            self._error = exc
        finally:
            self._done.set()

    def get(self, timeout: float) -> T:
        if not self._done.wait(timeout):
            raise TimeoutError(f"no result within {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


@dataclass
class DoctorContext:
    machine: Machine
    hardware: Hardware
    selection: Selection
    venv: Path
    catalogue: Catalogue
    quick: bool = False
    probe_timeout: float = 60.0
    network: bool = False
    record: VenvRecord | None = None
    record_error: str | None = None
    run_env: dict[str, str] | None = None  # the environment training runs with, when the caller knows it
    hash_files: bool = False  # every installed file's sha256 against its RECORD (`doctor -v`), not only sizes
    _static: Background[ProbeResult] | None = field(default=None, repr=False)
    _probe: Background[ProbeResult] | None = field(default=None, repr=False)
    # The full probe's stages as it reports them, and when it started (how far it got, if it never returns).
    probe_stages: list[str] = field(default_factory=list, repr=False)
    probe_started: float | None = field(default=None, repr=False)

    # -- facts ------------------------------------------------------------------------------------
    @property
    def profile(self) -> Profile:
        return self.selection.profile

    @property
    def gpu(self) -> Gpu | None:
        return self.selection.gpu if self.selection.gpu is not None else self.hardware.gpu

    @property
    def vendor(self) -> str | None:
        return self.gpu.vendor if self.gpu else None

    @property
    def gpu_build(self) -> str | None:
        """The torch build the GPU needs ("rocm" / "cuda"); None when this run trains on the CPU - no GPU,
        or a CPU profile chosen for a GPU (by --profile, or because no wheel supports it)."""
        if self.selection.torch.build == "cpu":
            return None
        return {"amd": "rocm", "nvidia": "cuda"}.get(self.vendor or "")

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def container_kind(self) -> str:
        return self.hardware.container.kind

    @property
    def in_container(self) -> bool:
        return self.container_kind in _CONTAINER_KINDS

    @property
    def env(self) -> dict[str, str]:
        """The environment training gets: the caller's `run_env`, else this process's with the venv's env
        file on top (what `source <venv>/bin/activate` gives)."""
        if self.run_env is not None:
            return dict(self.run_env)
        merged = dict(self.machine.env)
        if self.record is not None:
            merged.update(self.record.env)
        return merged

    def load(self) -> Load | None:
        return read_load(self.machine, self.hardware.cpu.cores or os.cpu_count() or 1)

    def fix(self, fix_id: str, **values: object) -> tuple[str, str]:
        return self.catalogue.fix_for(fix_id, **values)

    def bootstrap_command(self, *, recreate: bool = False) -> str:
        """`mw-env bootstrap` for this venv (and the profile, when it was chosen by name), as one fix."""
        argv = ["mw-env", "bootstrap", "--venv", str(self.venv)]
        if self.selection.explicit:
            argv += ["--profile", self.profile.name]
        if recreate:
            argv.append("--recreate")
        return "`" + shlex.join(argv) + "`"

    def install_command(self) -> str:
        """The one command that puts the selection's torch into the venv.

        A venv bootstrap made pins its torch (UV_CONSTRAINT, pip.conf) and refuses another build in place,
        so there the fix is `bootstrap --recreate` (torch, env file and pin together); any other venv gets
        the uv command that replaces torch alone.
        """
        src = self.selection.torch
        if self.record is not None:
            where = f" from {src.index_url}" if src.index_url else ""
            spec = src.version or ""
            if spec.startswith("==") and src.local_tag and not spec.endswith(src.local_tag):
                spec += src.local_tag
            return f"{self.bootstrap_command(recreate=True)} (torch{spec}{where}, with the profile's env and pin)"
        argv = ["uv", "pip", "install", "--python", str(self.python), "--reinstall-package", "torch"]
        if src.index_url:
            argv += ["--index-url", src.index_url]
        # A multi-arch source installs this GPU's kernels through torch's extra (torch[device-gfx1103]).
        devices = src.devices if src.per_gpu else None
        extras = [devices.extra_for(g) for g in self.selection.device_targets] if devices else []
        name = f"torch[{','.join(extras)}]" if extras else "torch"
        argv.append(f"{name}{src.version}" if src.version else name)
        return "`" + shlex.join(argv) + "`"

    def host_fix(self) -> str:
        """The operator-side commands for this container's runtime and name, joined for one fix line."""
        lines = host_lines(self)
        return "; ".join(f"`{line}`" for line in lines) if lines else "`mw-env host-commands` on the host"

    # -- background probes ------------------------------------------------------------------------
    def start_background(self) -> None:
        if not self.python.exists():
            return
        self._static = Background(
            lambda: run_probe(python=self.python, env=self.env, timeout=30, config={"mode": "static"})
        )
        if not self.quick:
            self.probe_started = time.monotonic()
            self._probe = Background(
                lambda: run_probe(
                    python=self.python,
                    env=self.env,
                    timeout=self.probe_timeout,
                    config=self.probe_config(),
                    progress=self.probe_stages,
                )
            )

    def probe_progress(self) -> str | None:
        """How far the full probe got, in words (None when none was started)."""
        if self.probe_started is None:
            return None
        took = time.monotonic() - self.probe_started
        if not self.probe_stages:
            return f"the probe reported no stage in {took:.0f}s (still starting its interpreter)"
        return f"the probe reached stage '{self.probe_stages[-1]}' ({len(self.probe_stages)} stages in {took:.0f}s)"

    def probe_config(self) -> dict[str, Any]:
        gpu = self.gpu
        big = 2048 if (gpu is not None and gpu.integrated) else 4096
        return {
            "mode": "full",
            "sdpa_backend": self.profile.trainer.sdpa_backend,
            # Timing only informs on a CPU profile (never judged there): a shorter window keeps the doctor quick.
            "bench_seconds": 0.25 if self.selection.torch.build == "cpu" else 0.5,
            "gpu_sizes": {"check": 1024, "bench": big},  # the CPU's are the probe's own
        }

    def static(self) -> ProbeResult | None:
        """The no-torch-import inspection of the venv (None when the venv has no python)."""
        return self._static.get(35) if self._static else None

    def probe(self) -> ProbeResult | None:
        """The full probe (None with --quick or without a venv python)."""
        return self._probe.get(self.probe_timeout + 5) if self._probe else None

    def torch_info(self) -> dict[str, Any]:
        """version / hip / cuda / build / arch_list / source, from the probe when it ran, else static files."""
        info: dict[str, Any] = {}
        static = self.static()
        st = static.stage("static") if static else None
        if st and st.get("torch_found"):
            info.update(
                version=st.get("version_version"), hip=st.get("version_hip"), cuda=st.get("version_cuda")
            )
            info["arch_list"] = list(st.get("blas_gfx") or [])
            info["arch_source"] = "rocBLAS kernel files" if info["arch_list"] else None
            if not info["arch_list"] and st.get("version_hip"):
                # ROCm 7.14+ wheels carry each GPU's kernels as packages (amd-torch-device-gfxNNNN): a listing.
                from mw_env.venv.wheelarch import read_wheel_archs

                found = read_wheel_archs(self.venv, scan=False)
                if found.known:
                    info.update(arch_list=list(found.archs), arch_source=f"installed {found.how}")
            info["source"] = "static"
        probe = self.probe()
        imp = probe.stage("import") if probe else None
        if imp and imp.get("ok"):
            info.update(version=imp.get("version"), hip=imp.get("hip"), cuda=imp.get("cuda"), source="probe")
            rt = probe.stage("runtime") if probe else None
            arch = (rt or {}).get("arch_list") or imp.get("arch_flags") or []
            if arch:
                info.update(arch_list=list(arch), arch_source="torch.cuda.get_arch_list()")
        if info:
            info["build"] = "rocm" if info.get("hip") else "cuda" if info.get("cuda") else "cpu"
        return info


def host_lines(ctx: DoctorContext) -> list[str]:
    """mw_env.host.commands.host_commands for the detected runtime; a minimal built-in list if that is unavailable."""
    kind = ctx.container_kind
    container = ctx.hardware.container
    # docker/podman rarely show a container its own name, but its id works wherever the name does.
    name = container.name or (container.id[:12] if container.id and kind in ("docker", "podman") else None)
    runtime = (
        kind if kind in ("incus", "docker", "podman", "kubernetes") else ("incus" if kind == "lxc" else None)
    )
    render_gid = ctx.machine.group_id("render")
    from mw_env.host.fallback import fallback_lines

    if runtime is None:  # an unknown container or none: host_commands would assume incus
        return fallback_lines(kind, name, ctx.vendor, render_gid)
    from mw_env.host.commands import host_commands

    try:
        return list(
            host_commands(
                runtime=runtime,
                container=name,
                hardware=ctx.hardware,
                selection=ctx.selection,
                machine=ctx.machine,
            )
        )
    except MwEnvError:  # e.g. the container's name is not visible from inside: still say what to run
        return fallback_lines(kind, name, ctx.vendor, render_gid)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB", "MiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
