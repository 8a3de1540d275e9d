"""The compute probe's verdicts: stages reached, matmul correctness and TFLOP/s per dtype, a training step.

"Memory critical error by agent node-0 ... Memory in use" has several causes; the stage the probe reached
and the machine's facts tell them apart, not the string.
"""

from __future__ import annotations

import math

from mw_env.checks.context import DoctorContext
from mw_env.checks.ipc import selinux_enforcing, shm_private
from mw_env.checks.model import CheckResult, result
from mw_env.checks.probe import ProbeResult

AREA = "probe"
DTYPES = ("fp32", "bf16", "fp16")
SLOW_PCT = 10.0  # below this share of the expected figure: CPU fallback or a wrong kernel
PLUMBING_STAGES = ("start", "static", "import", "runtime", "alloc")
# What the probe does after each reported stage: where a hung probe was stuck.
NEXT_STEP = {
    "start": "starting the venv's python",
    "static": "`import torch`",
    "import": "device init (torch.cuda.is_available, device properties)",
    "runtime": "the first device allocation",
    "alloc": "the fp32 matrix product",
    "matmul.fp32": "the bf16 matrix product",
    "matmul.bf16": "the fp16 matrix product",
    "matmul.fp16": "the Linear + SDPA forward/backward step",
    "train_step": "shutting down",
}


def check_compute(ctx: DoctorContext) -> list[CheckResult]:
    if ctx.quick:
        return [result("probe.run", "compute probe", "skip", "skipped with --quick")]
    probe = ctx.probe()
    if probe is None:
        return [result("probe.run", "compute probe", "skip", "no venv python")]
    out = [_run(ctx, probe)]
    for dtype in DTYPES:
        out.append(_matmul(ctx, probe, dtype))
    out.append(_train_step(ctx, probe))
    return out


def _memory_critical(ctx: DoctorContext, probe: ProbeResult) -> tuple[str, str]:
    """Name the cause of 'Memory critical error ... Memory in use' from evidence, most specific first."""
    stage = probe.last_stage
    # The last stage REPORTED: a crash after "alloc ok" happened in compute; one after "runtime ok" in the allocation.
    early = stage in ("start", "static", "import", "runtime") or (
        stage == "alloc" and not (probe.stage("alloc") or {}).get("ok")
    )
    if early and shm_private(ctx.machine) and ctx.in_container:
        return (
            f"Failed at stage '{stage}' (before any compute) in a container with a private 64 MiB /dev/shm: the cause is IPC, not memory.",
            "Restart the container with `--ipc=host`.",
        )
    if early and selinux_enforcing(ctx.machine):
        return (
            f"Failed at stage '{stage}' (before any compute) with SELinux enforcing: SELinux denies the `map` of /dev/kfd.",
            "On the host: `sudo setsebool -P container_use_devices true`, or `--security-opt label=disable`.",
        )
    gpu = ctx.gpu
    if gpu is not None and gpu.gfx_target == "gfx1151":
        dkms = ctx.machine.exists("sys/module/amdgpu/version")
        driver = "the out-of-tree amdgpu-dkms driver is loaded" if dkms else "IPC and SELinux are ruled out"
        return (
            f"Failed at stage '{stage}' on Strix Halo; {driver}: a board/BIOS or driver bug (ROCm#6182).",
            "On the host: remove amdgpu-dkms (`amdgpu-install --usecase=rocm --no-dkms`), use the distribution kernel, update the BIOS.",
        )
    if not early:
        return (
            f"Allocation worked and the failure came at stage '{stage}', so IPC and SELinux are ruled out: a GPU/driver fault.",
            "On the host: check `journalctl -k | grep amdgpu`; update kernel and linux-firmware.",
        )
    return (
        f"Failed at stage '{stage}'; /dev/shm is not the docker default and SELinux is not enforcing.",
        "Try `--ipc=host` and `--security-opt label=disable` to rule them out; then update the host kernel and firmware.",
    )


def _run(ctx: DoctorContext, probe: ProbeResult) -> CheckResult:
    title = "compute probe"
    stderr = probe.stderr
    if probe.error:
        return result(
            "probe.run",
            title,
            "fail",
            f"could not start the venv's python: {probe.error}",
            # --recreate: a re-run in place keeps a venv whose python does not start.
            f"Recreate the venv: {ctx.bootstrap_command(recreate=True)}",
        )
    if "Memory critical error" in stderr:
        cause, fix = _memory_critical(ctx, probe)
        c, f = ctx.fix("probe.memory_critical", cause=cause, fix_hint=fix)
        return result("probe.run", title, "fail", c, f)
    if probe.timed_out:
        stage = probe.last_stage
        on_cpu = (probe.stage("runtime") or {}).get("device") == "cpu"
        # Stuck before torch touched a device (or computing on the CPU): slowness, not a GPU fault. Nor is it
        # one on an overloaded machine, where every stage waits its turn for a CPU.
        load = ctx.load()
        fix_id = "probe.timeout_slow" if stage in ("start", "static") or on_cpu else "probe.timeout"
        if fix_id == "probe.timeout" and load is not None and load.overloaded:
            fix_id = "probe.timeout_overloaded"
        cause, fix = ctx.fix(
            fix_id,
            timeout=f"{ctx.probe_timeout:g}",
            stage=stage,
            doing=NEXT_STEP.get(stage, "the next stage"),
            python=ctx.python,
            load=load.describe() if load else "",
        )
        return result("probe.run", title, "fail", cause, fix)
    if probe.crashed:
        hits = [h for h in ctx.catalogue.scan(stderr) if h.message.severity == "fatal"]
        message = f": {hits[0].line[:200]}" if hits else ""
        hint = (
            hits[0].message.fix
            if hits
            else "Run the probe stage by hand in the venv to see the full error; check the host kernel log for GPU faults."
        )
        cause, fix = ctx.fix(
            "probe.crashed", how=probe.how(), stage=probe.last_stage, message=message, fix_hint=hint
        )
        return result("probe.run", title, "fail", cause, fix)
    failed = [s for s in probe.order if not probe.stages[s].get("ok")]
    if failed and failed[0] in PLUMBING_STAGES:
        err = probe.stages[failed[0]].get("error")
        return result(
            "probe.run",
            title,
            "fail",
            f"stage '{failed[0]}' failed: {err}",
            "See the torch and device findings above.",
        )
    device = (probe.stage("runtime") or {}).get("device", "?")
    return result("probe.run", title, "pass", f"all stages on {device} in {probe.duration_s:.1f}s")


def _matmul(ctx: DoctorContext, probe: ProbeResult, dtype: str) -> CheckResult:
    cid, title = f"probe.matmul.{dtype}", f"{dtype} matmul"
    st = probe.stage(f"matmul.{dtype}")
    if st is None:
        return result(cid, title, "skip", f"not reached (probe stopped at '{probe.last_stage}')")
    device = st.get("device", "?")
    if not st.get("ok"):
        hint = "An 'invalid device function' means the wheel lacks kernels for the GPU: see GPU architecture above."
        cause, fix = ctx.fix(
            "probe.matmul_failed", dtype=dtype, device=device, error=st.get("error"), fix_hint=hint
        )
        # fp32 and the profile's training precision must work; another dtype failing (bf16 on an old GPU)
        # only rules that dtype out.
        needed = dtype in ("fp32", ctx.profile.trainer.precision)
        return result(cid, title, "fail" if needed else "warn", cause, fix)
    err = st.get("rel_err")
    tol = float(st.get("tolerance") or 0)
    band = st.get("tf32_band")
    finite = bool(st.get("finite")) and err is not None and math.isfinite(err)
    limit = float(band) if band else tol
    speed = f"{st.get('tflops', 0):.3g} TFLOP/s ({st.get('bench_n')}^3 x {st.get('iters')})"
    if not finite or err is None or err > limit:
        cause, fix = ctx.fix(
            "probe.matmul_wrong",
            dtype=dtype,
            device=device,
            err=f"{err:.2e}" if finite else "nan",
            tol=f"{tol:.0e}",
            nonfinite="" if finite else " - the result holds NaN/Inf",
            install_command=ctx.install_command(),
        )
        return result(cid, title, "fail", cause, fix)
    detail = f"rel. error {err:.1e} (tol {tol:.0e}), {speed} on {device}"
    info: tuple[str, ...] = ()
    if band and err is not None and err > tol:
        imp = probe.stage("import") or {}
        if imp.get("allow_tf32") or imp.get("fp32_precision") not in (None, "highest"):
            detail += "; TF32 active (allow_tf32 / float32_matmul_precision), as configured"
        else:
            cause, fix = ctx.fix("probe.reduced_precision", err=f"{err:.1e}")
            return result(cid, title, "warn", cause, fix)
    expected = ctx.profile.doctor.tflops_for(ctx.gpu.name if ctx.gpu else None).get(dtype)
    tflops = float(st.get("tflops") or 0)
    if expected and device == "cpu" and ctx.selection.torch.build == "cpu":
        # A CPU profile has no fallback to detect: its figure is a 2-vCPU floor, and a CPU's speed follows
        # its cores and whatever else runs on them. Report it; do not judge it.
        pct = 100.0 * tflops / expected
        load = ctx.load()
        floor = f"{pct:.0f}% of the profile's {expected:g} TFLOP/s (a 2-vCPU floor)"
        return result(cid, title, "pass", detail, info=(floor + (f"; {load.describe()}" if load else ""),))
    if expected:
        pct = 100.0 * tflops / expected
        info = (f"{pct:.0f}% of the {expected:g} TFLOP/s expected for this profile",)
        # Torch ran the products on the CPU although the profile wants the GPU: "GPU as torch sees it" above
        # holds the reason; this finding only shows what that costs. Judged by the device, not the speed: a CPU
        # with AMX reaches a sizeable share of an iGPU's bf16 figure.
        fallback = device == "cpu" and ctx.selection.torch.build != "cpu"
        if pct < SLOW_PCT or fallback:
            cause, fix = ctx.fix(
                "probe.slow_cpu_fallback" if fallback else "probe.slow",
                dtype=dtype,
                tflops=f"{tflops:.3g}",
                pct=f"{pct:.0f}" if pct >= 1 else f"{pct:.2g}",
                expected=f"{expected:g}",
                gpu=ctx.gpu.name if ctx.gpu else "this CPU",
            )
            return result(cid, title, "warn", f"{detail}. {cause}", fix)
    return result(cid, title, "pass", detail, info=info)


def _train_step(ctx: DoctorContext, probe: ProbeResult) -> CheckResult:
    cid, title = "probe.train_step", "Linear + SDPA forward/backward"
    st = probe.stage("train_step")
    backend = ctx.profile.trainer.sdpa_backend
    if st is None:
        return result(cid, title, "skip", f"not reached (probe stopped at '{probe.last_stage}')")
    if not st.get("ok"):
        hint = (
            "Use the math SDPA backend (`--set model.sdpa_backend=math`); flash/efficient kernels are experimental on RDNA3."
            if backend in ("flash", "efficient")
            else "See the matmul findings above; a failing backward pass on a GPU points to the driver or the wheel."
        )
        cause, fix = ctx.fix(
            "probe.train_step_failed",
            backend=backend,
            device=st.get("device"),
            error=st.get("error"),
            fix_hint=hint,
        )
        return result(cid, title, "fail", cause, fix)
    return result(
        cid,
        title,
        "pass",
        f"{backend} SDPA on {st.get('device')}: attention rel. error {st.get('attn_rel_err', 0):.1e}, loss finite",
    )
