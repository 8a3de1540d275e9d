"""Device, precision, determinism, RNG state and environment facts for the training process."""

from __future__ import annotations

import contextlib
import os
import platform
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from mw_env.base.errors import StepFailed
from mw_env.trainspec.schema import RuntimeConfig, TrainConfig


def pick_device(runtime: RuntimeConfig, local_rank: int) -> torch.device:
    want = runtime.device
    if want == "cpu":
        return torch.device("cpu")
    has_gpu = torch.cuda.is_available()
    if want == "auto":
        return torch.device("cuda", local_rank) if has_gpu else torch.device("cpu")
    if not has_gpu:
        raise StepFailed(
            f"runtime.device is {want!r} but torch sees no GPU (torch {torch.__version__})",
            hint="run `mw-env doctor` to see why, or train on the CPU with --set runtime.device=cpu",
        )
    index = int(want.split(":")[1]) if ":" in want else local_rank
    if index >= torch.cuda.device_count():
        raise StepFailed(f"runtime.device {want!r}: only {torch.cuda.device_count()} GPU(s) visible")
    return torch.device("cuda", index)


def _cpu_native_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


@dataclass(frozen=True)
class ChosenPrecision:
    name: str  # "fp32" | "bf16" | "fp16"
    reason: str

    @property
    def dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.name)


def resolve_precision(requested: str, device: torch.device) -> ChosenPrecision:
    """bf16 autocast only where the device has native bf16; fp16 (with loss scaling) only on GPUs."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.version.hip:
            arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "?")
            native, what = torch.cuda.is_bf16_supported(), f"{name} ({arch}, ROCm {torch.version.hip})"
        else:
            cap = torch.cuda.get_device_capability(device)
            try:
                emulated_ok = torch.cuda.is_bf16_supported(including_emulation=False)
            except TypeError:  # torch < 2.4 has no including_emulation
                emulated_ok = torch.cuda.is_bf16_supported()
            # is_bf16_supported() alone answers True on a T4 by emulation; native needs sm_80+.
            native, what = emulated_ok and cap >= (8, 0), f"{name} (sm_{cap[0]}{cap[1]})"
    else:
        native, what = _cpu_native_bf16(), f"CPU ({platform.processor() or platform.machine()})"
    if requested == "fp32":
        return ChosenPrecision("fp32", "fp32 requested")
    if requested == "fp16":
        if device.type == "cuda":
            return ChosenPrecision("fp16", f"fp16 requested on {what}; dynamic loss scaling on")
        return ChosenPrecision("fp32", f"fp16 requested but {what} runs fp16 autocast poorly; using fp32")
    if native:
        return ChosenPrecision("bf16", f"{requested}: {what} has native bf16")
    return ChosenPrecision(
        "fp32", f"{requested}: {what} has no native bf16, so fp32 (bf16 would be emulated)"
    )


def autocast(device: torch.device, precision: ChosenPrecision) -> contextlib.AbstractContextManager[object]:
    if precision.dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=precision.dtype)


def cpu_bounds(config: TrainConfig) -> tuple[int, list[str]]:
    """runtime.threads (0 = torch's default) and data.workers bounded by this rank's share of the CPUs the
    process may use (affinity, cgroup cpu.max): `runtime.threads=4096` started 8,193 threads on 2 cores.
    Returns the threads to set and a warning per setting lowered."""
    from mw_env.hardware.capacity import bounded, usable_cpus
    from mw_env.trainer.data.corpus import ranks_per_node
    from mw_env.trainer.data.workers import rank_workers

    ranks = ranks_per_node()
    warnings: list[str] = []
    threads = config.runtime.threads
    if threads:
        cpus = usable_cpus()
        threads, warning = bounded("runtime.threads", threads, max(1, cpus.usable // ranks), cpus)
        warnings += [warning] if warning else []
    if config.data.source == "files":
        _, warning = rank_workers(config.data.workers, ranks)
        warnings += [warning] if warning else []
    return threads, warnings


def set_determinism(*, deterministic: bool, threads: int, device: torch.device) -> None:
    if threads:
        torch.set_num_threads(threads)
    if deterministic:
        if device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.backends.cudnn.benchmark = False
        # warn_only on GPUs: some kernels (ROCm attention) have no deterministic version; on CPU
        # every op we use has one, so the strict mode is what makes resume bitwise.
        torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")


def step_seed(seed: int, step: int, world: int, rank: int) -> int:
    """The dropout RNG seed of (step, rank): collision-free, so a resume needs no RNG replay."""
    return seed * 1_000_003 + step * world + rank


def seed_host_rngs(seed: int, rank: int) -> None:
    """Seed Python's and numpy's global generators per (seed, rank), so an uninterrupted and a resumed
    run hold (and checkpoint) the same states; user code that draws from them is reproducible too."""
    import numpy as np

    value = (seed * 1_000_003 + rank) % 2**32
    random.seed(value)
    np.random.seed(value)


def rng_states() -> dict[str, Any]:
    """RNG states as tensors and plain containers (weights_only-loadable)."""
    import numpy as np

    # The legacy form is a tuple (name, keys, pos, has_gauss, cached_gaussian); numpy's stubs type it as the
    # union with the dict form, which mypy sees where numpy is installed beside it (seqeval brings it).
    np_state = cast("tuple[Any, ...]", np.random.get_state(legacy=True))
    py_version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype("int64")),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {"version": py_version, "state": list(py_state), "gauss": py_gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_states(state: dict[str, Any]) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        ("MT19937", n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def environment_facts(device: torch.device, precision: ChosenPrecision, world: int) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),  # TorchVersion would not load weights_only
        "torch_hip": torch.version.hip,
        "torch_cuda": torch.version.cuda,
        "platform": platform.platform(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "precision": precision.name,
        "precision_reason": precision.reason,
        "world_size": world,
        "threads": torch.get_num_threads(),
        "hsa_override_gfx_version": os.environ.get("HSA_OVERRIDE_GFX_VERSION"),
    }
    if device.type == "cuda" and torch.version.hip:
        facts["gcn_arch"] = getattr(torch.cuda.get_device_properties(device), "gcnArchName", None)
    return facts
