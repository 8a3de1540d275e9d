"""The doctor's probe: runs INSIDE the venv's python (stdlib + torch only; mw-env may not be installed there).

    python probe_script.py '{"mode": "full", "sizes": {...}, "sdpa_backend": "math"}'

Prints one JSON line per stage, prefixed with `MWENV-PROBE `, flushed at once, so when the process hangs
or dies the parent still knows the last stage reached. Stages: static (no torch import) -> import ->
runtime (device init) -> alloc -> matmul.<dtype> (correctness vs a float64 CPU reference, then TFLOP/s)
-> train_step (Linear + SDPA forward/backward) -> done. mode "static" stops after the first stage.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import math
import os
import re
import sys
import time

PREFIX = "MWENV-PROBE "
# Relative Frobenius error vs float64 that a correct product stays under, per dtype. Measured CPU GEMM
# errors: fp32 2.5e-7, bf16 1.7e-3, fp16 2.1e-4 (independent of K); reduced-precision reductions are
# allowed for bf16/fp16 by default, hence the slack. fp32 between 1e-5 and 5e-3 is TF32-class precision.
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3}
TF32_BAND = 5e-3
CPU_SIZES = {"check": 256, "bench": 512, "check_fp16": 128, "bench_fp16": 128}


def emit(stage: str, ok: bool, **data: object) -> None:
    sys.stdout.write(PREFIX + json.dumps({"stage": stage, "ok": ok, **data}, default=str) + "\n")
    sys.stdout.flush()


def static_info() -> dict:
    """What the venv holds, without importing torch (cheap; used by --quick)."""
    info: dict = {"python": sys.version.split()[0], "executable": sys.executable, "prefix": sys.prefix}
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        info["torch_found"] = False
        return info
    torch_dir = next(iter(spec.submodule_search_locations))
    info.update(torch_found=True, torch_dir=torch_dir)
    try:
        with open(os.path.join(torch_dir, "version.py"), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and value is not None:
                with contextlib.suppress(ValueError):
                    info[f"version_{target.id.strip('_')}"] = ast.literal_eval(value)
    except (OSError, SyntaxError) as exc:
        info["version_error"] = str(exc)
    # rocBLAS/hipBLASLt kernel files name the gfx targets the wheel ships (TensileLibrary_lazy_gfx1100.dat).
    gfx: set[str] = set()
    for sub in ("lib/rocblas/library", "lib/hipblaslt/library"):
        try:
            names = os.listdir(os.path.join(torch_dir, sub))
        except OSError:
            continue
        gfx.update(m.group(1) for n in names for m in [re.search(r"(gfx[0-9a-f]+)", n)] if m)
    info["blas_gfx"] = sorted(gfx)
    try:
        from importlib import metadata

        dists = {(d.metadata["Name"] or "").lower() for d in metadata.distributions()}
        info["triton_dists"] = sorted(n for n in dists if n and "triton" in n)
    except Exception as exc:  # a broken dist-info must not stop the probe
        info["triton_dists_error"] = str(exc)
    return info


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1]) if len(argv) > 1 else {}
    t0 = time.perf_counter()
    emit("static", True, **static_info())
    if cfg.get("mode") == "static":
        return 0

    try:
        import torch
    except BaseException as exc:
        emit("import", False, error=f"{type(exc).__name__}: {exc}", t=time.perf_counter() - t0)
        return 3
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    arch_flags = (flags() or "").split() if callable(flags) else []
    emit(
        "import",
        True,
        t=time.perf_counter() - t0,
        version=torch.__version__,
        hip=getattr(torch.version, "hip", None),
        cuda=getattr(torch.version, "cuda", None),
        arch_flags=arch_flags,
        allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
        fp32_precision=torch.get_float32_matmul_precision(),
        threads=torch.get_num_threads(),
    )

    # -- runtime: device init. A GPU build that cannot see a GPU is measured on the CPU, so the report can
    # say "2% of expected": that is what training would get.
    rt: dict = {"available": False}
    try:
        rt["available"] = bool(torch.cuda.is_available())
        if rt["available"]:
            props = torch.cuda.get_device_properties(0)
            rt.update(
                device_count=torch.cuda.device_count(),
                name=torch.cuda.get_device_name(0),
                capability=list(torch.cuda.get_device_capability(0)),
                gcn_arch=getattr(props, "gcnArchName", None),
                total_memory=int(props.total_memory),
                is_integrated=bool(getattr(props, "is_integrated", False)),
                arch_list=list(torch.cuda.get_arch_list()),
            )
    except BaseException as exc:
        emit("runtime", False, error=f"{type(exc).__name__}: {exc}", **rt)
        return 4
    if rt["available"]:
        # Nice to know, not fatal: some stacks cannot report free memory or the driver version.
        try:
            free, total = torch.cuda.mem_get_info(0)
            rt.update(free_memory=int(free), total_visible=int(total))
        except Exception as exc:
            rt["mem_info_error"] = f"{type(exc).__name__}: {exc}"
        driver = getattr(torch._C, "_cuda_getDriverVersion", None)
        try:
            rt["driver_version"] = driver() if callable(driver) else None
        except Exception:
            rt["driver_version"] = None
    device = "cuda" if rt["available"] else "cpu"
    emit("runtime", True, device=device, **rt)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    # -- alloc: the stage that separates plumbing (IPC, SELinux) from compute failures.
    try:
        torch.zeros(1, device=device)
        sync()
        buf = torch.empty(16 * 1024 * 1024, dtype=torch.float32, device=device)  # 64 MiB
        buf.fill_(1.0)
        total = float(buf.sum().item())
        sync()
        del buf
        if total != 16 * 1024 * 1024:
            raise RuntimeError(f"64 MiB fill read back {total}, expected {16 * 1024 * 1024}")
    except BaseException as exc:
        emit("alloc", False, device=device, error=f"{type(exc).__name__}: {exc}")
        return 5
    emit("alloc", True, device=device, bytes=64 * 1024 * 1024)

    # Sizes per device: a GPU build that fell back to the CPU must not try 4096^3 fp16 products there
    # (CPU fp16 GEMM runs at ~1 GFLOP/s).
    sizes = CPU_SIZES if device == "cpu" else cfg.get("gpu_sizes") or {}
    budget = float(cfg.get("bench_seconds", 0.5))
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for name, dt in dtypes.items():
        n_check = int(sizes.get(f"check_{name}", sizes.get("check", 1024)))
        n_bench = int(sizes.get(f"bench_{name}", sizes.get("bench", 4096)))
        try:
            gen = torch.Generator().manual_seed(1234)
            a = torch.randn(n_check, n_check, generator=gen).to(dt)
            b = torch.randn(n_check, n_check, generator=gen).to(dt)
            # The reference uses the SAME rounded inputs, so only the product's own error is measured.
            ref = a.double() @ b.double()
            out = (a.to(device) @ b.to(device)).double().cpu()
            sync()
            finite = bool(torch.isfinite(out).all().item())
            err = float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)) if finite else float("nan")
            del a, b, ref, out
            tflops, iters, secs = bench(torch, dt, n_bench, device, sync, budget)
        except BaseException as exc:
            emit(f"matmul.{name}", False, device=device, error=f"{type(exc).__name__}: {exc}")
            continue
        emit(
            f"matmul.{name}",
            True,
            device=device,
            n=n_check,
            rel_err=err,
            finite=finite,
            tolerance=TOLERANCE[name],
            tf32_band=TF32_BAND if name == "fp32" else None,
            bench_n=n_bench,
            iters=iters,
            seconds=secs,
            tflops=tflops,
        )

    try:
        emit(
            "train_step",
            True,
            device=device,
            **train_step(torch, device, cfg.get("sdpa_backend", "math"), sync),
        )
    except BaseException as exc:
        emit(
            "train_step",
            False,
            device=device,
            backend=cfg.get("sdpa_backend"),
            error=f"{type(exc).__name__}: {exc}",
        )
    emit("done", True, t=time.perf_counter() - t0)
    return 0


def bench(torch, dt, n: int, device: str, sync, budget: float) -> tuple[float, int, float]:
    """TFLOP/s of an n x n x n product: warm-up (kernel selection, JIT), then enough iterations to fill
    `budget` seconds, timed between synchronize() calls so queued GPU work is counted."""
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    for _ in range(2):
        a @ b
    sync()
    start = time.perf_counter()
    a @ b
    sync()
    one = max(time.perf_counter() - start, 1e-6)
    iters = max(3, min(200, int(budget / one)))
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync()
    secs = time.perf_counter() - start
    return 2.0 * n**3 * iters / secs / 1e12, iters, secs


def train_step(torch, device: str, backend: str, sync) -> dict:
    """One Linear + SDPA forward/backward, its attention checked against a float64 softmax reference."""
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(7)
    b, h, s, d = 2, 4, 64, 32
    x = torch.randn(b, s, h * d, generator=gen).to(device)
    lin = torch.nn.Linear(h * d, 3 * h * d).to(device)
    q, k, v = lin(x).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
    ctx = _sdpa_context(torch, backend)
    with ctx:
        att = F.scaled_dot_product_attention(q, k, v)
    loss = att.float().pow(2).mean()
    loss.backward()
    sync()
    qd, kd, vd = (t.detach().double().cpu() for t in (q, k, v))
    ref = torch.softmax(qd @ kd.transpose(-1, -2) / math.sqrt(d), dim=-1) @ vd
    err = float(torch.linalg.norm(att.detach().double().cpu() - ref) / torch.linalg.norm(ref))
    grad_ok = bool(torch.isfinite(lin.weight.grad).all().item())
    loss_value = float(loss.detach().item())
    if not math.isfinite(loss_value) or not grad_ok:
        raise RuntimeError(f"non-finite loss or gradient (loss={loss_value}, grads finite={grad_ok})")
    if err > 1e-3:
        raise RuntimeError(f"attention output differs from the float64 reference: relative error {err:.2e}")
    return {"backend": backend, "loss": loss_value, "attn_rel_err": err}


def _sdpa_context(torch, backend: str):
    """The profile's SDPA backend, forced; "auto" lets torch choose."""
    if backend == "auto":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch < 2.3
        return contextlib.nullcontext()
    chosen = {
        "math": SDPBackend.MATH,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    return sdpa_kernel([chosen[backend]])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
