"""Kernel and memory on APUs (carve-out vs GTT, Strix Halo's TTM limit) and MIOpen's kernel caches."""

from __future__ import annotations

import os

from mw_env.base.versions import version_tuple
from mw_env.checks.context import GIB, DoctorContext, human_bytes
from mw_env.checks.model import CheckResult, result

AREA = "apu"
PAGES_PER_GIB = 262144  # TTM pages are 4 KiB
# Memory-backed filesystems: caches there are gone at the next container start (overlay keeps them).
VOLATILE_FS = {"tmpfs", "ramfs"}


def check_apu(ctx: DoctorContext) -> list[CheckResult]:
    out = [_kernel(ctx)]
    gtt = _gtt(ctx)
    if gtt is not None:
        out.append(gtt)
    out.extend(_miopen(ctx))
    return out


def kernel_version(ctx: DoctorContext) -> str:
    text = (ctx.machine.read("proc/sys/kernel/osrelease") or "").strip()
    return text or ctx.hardware.os.kernel


def _kernel(ctx: DoctorContext) -> CheckResult:
    title = "kernel"
    kernel = kernel_version(ctx)
    gpu = ctx.gpu
    kv = version_tuple(kernel)
    if gpu is None or gpu.vendor != "amd" or not gpu.integrated or not kv:
        return result("apu.kernel", title, "pass", kernel)
    if gpu.gfx_target == "gfx1151" and kv < (6, 18, 4):
        cause, fix = ctx.fix("apu.strix_kernel", kernel=kernel)
        return result("apu.kernel", title, "warn", cause, fix)
    if kv < (6, 10):
        cause, fix = ctx.fix("apu.old_kernel", kernel=kernel, vram=human_bytes(gpu.memory_bytes))
        return result("apu.kernel", title, "warn", cause, fix)
    return result("apu.kernel", title, "pass", f"{kernel} (APU memory comes from GTT)")


def _pages_limit(ctx: DoctorContext) -> int | None:
    for mod in ("ttm", "amdttm"):
        text = (ctx.machine.read(f"sys/module/{mod}/parameters/pages_limit") or "").strip()
        if text.isdigit():
            return int(text)
    return None


def _gtt(ctx: DoctorContext) -> CheckResult | None:
    gpu = ctx.gpu
    if gpu is None or gpu.vendor != "amd" or not gpu.integrated or not gpu.gtt_bytes:
        return None
    title = "GPU memory (GTT)"
    ram = ctx.hardware.memory_bytes
    pages = _pages_limit(ctx)
    detail = f"VRAM carve-out {human_bytes(gpu.memory_bytes)}, GTT {human_bytes(gpu.gtt_bytes)}"
    # Strix Halo is bought for its memory: GTT at the kernel's default half of RAM is worth raising.
    if gpu.gfx_target == "gfx1151" and ram and gpu.gtt_bytes <= 0.55 * ram:
        suggest_gib = int(ram * 0.75 / GIB)
        cause, fix = ctx.fix(
            "apu.gtt_limit",
            gtt=human_bytes(gpu.gtt_bytes),
            ram=human_bytes(ram),
            pages=pages if pages is not None else "default",
            suggest_pages=suggest_gib * PAGES_PER_GIB,
            suggest_gib=suggest_gib,
        )
        return result("apu.gtt", title, "warn", f"{detail}. {cause}", fix)
    return result("apu.gtt", title, "pass", detail)


def _miopen(ctx: DoctorContext) -> list[CheckResult]:
    if ctx.selection.torch.build != "rocm":
        return []
    env = ctx.env
    home = env.get("HOME") or "/root"
    if not ctx.machine.exists(home) and not all(
        env.get(v) for v in ("MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR")
    ):
        # A HOME that is not on this machine (a fake root read from another user's shell): nothing to judge.
        return [
            result("apu.miopen", "MIOpen caches", "skip", f"HOME ({home}) does not exist on this machine")
        ]
    out = []
    for var, default in (
        ("MIOPEN_USER_DB_PATH", f"{home}/.config/miopen"),
        ("MIOPEN_CUSTOM_CACHE_DIR", f"{home}/.cache/miopen"),
    ):
        path = env.get(var) or default
        cid = f"apu.{var.lower()}"
        title = f"MIOpen cache ({var})"
        existing = _existing_ancestor(ctx, path)
        if not ctx.machine.can_access(existing, write=True):
            cause, fix = ctx.fix("apu.miopen_not_writable", path=path, var=var)
            out.append(result(cid, title, "fail", cause, fix))
            continue
        fstype = _fstype(ctx, path)
        if fstype in VOLATILE_FS:
            cause, fix = ctx.fix("apu.miopen_not_persistent", path=path, var=var, fstype=fstype)
            out.append(result(cid, title, "warn", cause, fix))
            continue
        out.append(result(cid, title, "pass", f"{path} writable ({fstype or 'filesystem unknown'})"))
    return out


def _existing_ancestor(ctx: DoctorContext, path: str) -> str:
    p = "/" + path.strip("/")
    while p != "/" and not ctx.machine.exists(p):
        p = os.path.dirname(p)
    return p


def _fstype(ctx: DoctorContext, path: str) -> str | None:
    """The filesystem type of the longest mount point above `path` (proc/self/mounts under the root)."""
    best, fstype = "", None
    for line in (ctx.machine.read("proc/self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/") or mnt == "/") and len(mnt) > len(best):
            best, fstype = mnt, parts[2]
    return fstype
