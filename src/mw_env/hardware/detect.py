"""Hardware facts without ROCm or torch: `detect(machine) -> Hardware`.

Sources, all read through the Machine seam (so fake roots work): AMD KFD topology + PCI sysfs + device
nodes (hardware/amd.py), NVIDIA procfs/sysfs + nvidia-smi (hardware/nvidia.py), CPU/memory/OS/Python/uv
(hardware/system.py), container kind (hardware/container.py). Detection never raises on a broken
machine: whatever cannot be read becomes a line in Hardware.notes naming the file. The one error is a
`--gpu N` that names no GPU.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TypeVar

from mw_env.base.errors import InputError
from mw_env.hardware.amd import amd_gpus
from mw_env.hardware.container import container_info
from mw_env.hardware.facts import ContainerInfo, CpuInfo, Gpu, Hardware, OsInfo, PythonInfo
from mw_env.hardware.machine import Machine
from mw_env.hardware.nvidia import nvidia_gpus
from mw_env.hardware.pci import VENDOR_AMD, VENDOR_NAMES, VENDOR_NVIDIA, PciDevice, display_devices
from mw_env.hardware.probe import Probe
from mw_env.hardware.system import cpu_info, memory_limit, memory_total, os_info, pythons, uv_info

_GIB = 1024**3
T = TypeVar("T")


def detect(machine: Machine, *, gpu: int | None = None, interpreters: bool = True) -> Hardware:
    """Everything mw-env needs to know about this machine; `gpu` chooses the GPU explicitly.

    `interpreters=False` skips listing the Pythons (each real one on PATH is run; pyenv's are read from its
    versions folder): callers that find their own interpreter (bootstrap) or need none (env, doctor) keep a
    no-op run fast.
    """
    probe = Probe(machine)
    no_gpus: list[Gpu] = []
    pci = _guard(probe, "PCI devices", lambda: display_devices(probe), list[PciDevice]())
    found = _guard(probe, "AMD GPUs", lambda: amd_gpus(probe, pci), no_gpus)
    no_driver: tuple[list[Gpu], str | None] = (no_gpus, None)
    nvidia, driver = _guard(probe, "NVIDIA GPUs", lambda: nvidia_gpus(probe, pci), no_driver)
    gpus = _numbered([*found, *nvidia])
    selected, reason = select_gpu(gpus, gpu=gpu)
    if not gpus and driver:
        # The kernel module is the host's (one kernel for every container): it has an NVIDIA GPU, this
        # container was just not given it. Say so, instead of a bare "no GPU".
        reason = (
            f"no GPU visible, but the NVIDIA kernel driver {driver} is loaded (/proc/driver/nvidia/version): "
            "the host has an NVIDIA GPU that was not passed into this container (docker/podman: `--gpus all` "
            "with the NVIDIA Container Toolkit; incus: a gpu device and nvidia.runtime=true; `mw-env "
            "host-commands` prints the commands): CPU only until then"
        )
    uv = _guard(probe, "uv", lambda: uv_info(probe), None)
    cpu = _guard(probe, "CPU", lambda: cpu_info(probe), CpuInfo())
    memory = _guard(probe, "memory", lambda: memory_total(probe), None)
    limit = _guard(probe, "memory limit", lambda: memory_limit(probe), None)
    os_facts = _guard(probe, "OS", lambda: os_info(probe), OsInfo())
    container = _guard(probe, "container", lambda: container_info(probe), ContainerInfo())
    found_pythons = (
        _guard(probe, "Python interpreters", lambda: pythons(probe, uv), tuple[PythonInfo, ...]())
        if interpreters
        else ()
    )
    return Hardware(  # every part has run: probe.notes is complete
        gpus=gpus,
        selected_gpu=selected,
        selection_reason=reason,
        cpu=cpu,
        memory_bytes=memory,
        os=os_facts,
        container=container,
        pythons=found_pythons,
        uv=uv,
        nvidia_driver=driver,
        notes=tuple(probe.notes),
        memory_limit_bytes=limit,
        ignored_devices=tuple(
            f"{d.slot} {d.pci_id or '?'} ({VENDOR_NAMES.get(d.vendor or '', 'unknown vendor')} display adapter)"
            for d in pci
            if d.vendor not in (VENDOR_AMD, VENDOR_NVIDIA)
        ),
    )


def _numbered(found: list[Gpu]) -> tuple[Gpu, ...]:
    """Set `index` (position, what --gpu N names) and `runtime_index` (the torch device index)."""
    out = []
    seen: dict[str, int] = {}
    for i, g in enumerate(found):
        runtime = None
        if _reachable(g):
            runtime = seen.get(g.vendor, 0)
            seen[g.vendor] = runtime + 1
        out.append(dataclasses.replace(g, index=i, runtime_index=runtime))
    return tuple(out)


def _guard(probe: Probe, what: str, read: Callable[[], T], default: T) -> T:
    """Run one part of detection; an unexpected failure becomes a note, so one odd file never stops detect.

    The parts already turn every expected problem into a specific note: this is the backstop for the
    machine nobody anticipated (tests assert the notes are empty on good fixtures, so bugs still show).
    """
    try:
        return read()
    except Exception as exc:
        probe.note(f"{what}: detection failed ({type(exc).__name__}: {exc}); skipped")
        return default


def describe_gpu(g: Gpu) -> str:
    """`1 AMD Radeon RX 7900 XTX (gfx1100, discrete, 24.0 GiB, 0000:03:00.0)` for lists and messages."""
    parts = [g.gfx_target or (f"CC {g.compute_capability}" if g.compute_capability else None)]
    parts.append("integrated" if g.integrated else "discrete")
    if g.memory_bytes:
        parts.append(f"{g.memory_bytes / _GIB:.1f} GiB")
    if g.pci_slot:
        parts.append(g.pci_slot)
    return f"{g.index} {g.name} ({', '.join(p for p in parts if p)})"


def select_gpu(gpus: tuple[Gpu, ...], *, gpu: int | None = None) -> tuple[int | None, str]:
    """Which GPU profiles are chosen for, and why in words.

    Explicit `gpu` wins (out of range -> InputError listing the GPUs). Otherwise, in order: a GPU this
    container can reach (its render/nvidia node exists) over one it cannot; one mw-env can compute on
    (a known gfx target for AMD) over one it cannot; discrete over integrated; more memory; lower index.
    """
    if gpu is not None:
        if not gpus:
            raise InputError(
                f"--gpu {gpu}: no GPU was detected on this machine",
                hint="omit --gpu to use the CPU, or run `mw-env doctor` to see why no GPU is visible",
            )
        if not 0 <= gpu < len(gpus):
            listing = "; ".join(describe_gpu(g) for g in gpus)
            raise InputError(
                f"--gpu {gpu}: no such GPU; this machine has {len(gpus)}: {listing}",
                hint=f"choose --gpu 0..{len(gpus) - 1} (see `mw-env detect`)",
            )
        return gpu, f"GPU {gpu} ({gpus[gpu].name}) chosen with --gpu {gpu}"
    if not gpus:
        return (
            None,
            "no GPU detected (no KFD GPU node, AMD/NVIDIA PCI display device or nvidia-smi GPU): CPU only",
        )
    if len(gpus) == 1:
        return 0, f"{gpus[0].name} is the only GPU"
    ranked = sorted(gpus, key=_rank_key)
    best, runner = ranked[0], ranked[1]
    why = _why(best, runner, len(gpus))
    return best.index, f"{best.name} (GPU {best.index}) chosen: {why}; use --gpu N to choose another"


# The node that belongs to one GPU: /dev/kfd, /dev/nvidiactl and /dev/nvidia-uvm are shared by all GPUs,
# so only these say whether this particular GPU was passed into the container (/dev/dxg: WSL2).
_OWN_NODE = re.compile(r"/dev/dri/renderD\d+|/dev/nvidia\d+|/dev/dxg")


def _reachable(g: Gpu) -> bool:
    return any(n.exists for n in g.device_nodes if _OWN_NODE.fullmatch(n.path))


def _computable(g: Gpu) -> bool:
    return g.vendor == "nvidia" or (g.vendor == "amd" and g.gfx_target is not None)


def _rank_key(g: Gpu) -> tuple:
    return (
        not _reachable(g),
        not _computable(g),
        g.integrated,
        -(g.memory_bytes or 0),
        -(g.gtt_bytes or 0),
        g.index,
    )


def _why(best: Gpu, runner: Gpu, count: int) -> str:
    other = f"{runner.name} (GPU {runner.index})"
    if _reachable(best) != _reachable(runner):
        return f"its device node is present in this container, {other}'s is not"
    if _computable(best) != _computable(runner):
        return f"{other} has no known gfx target for ROCm"
    if best.integrated != runner.integrated:
        return f"a discrete GPU is preferred over the integrated {other}"
    if (best.memory_bytes or 0) != (runner.memory_bytes or 0) or (best.gtt_bytes or 0) != (
        runner.gtt_bytes or 0
    ):
        mem = best.memory_bytes or best.gtt_bytes or 0
        return f"the most memory ({mem / _GIB:.1f} GiB) of {count} GPUs"
    return f"the first of {count} equally ranked GPUs"
