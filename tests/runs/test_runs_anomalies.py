"""The anomaly rules as pure functions: log signatures, numerics, liveness, silence, exit codes."""

from __future__ import annotations

import pytest

from mw_env.runs.anomalies import (
    KINDS,
    Liveness,
    Thresholds,
    analyze,
    check_divergence,
    check_liveness,
    check_log,
    check_numerics,
    check_silence,
    exit_code_for,
)
from mw_env.runs.logscan import scan_log

HIP_OOM = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "512.00 MiB of which 0 bytes is free. Of the allocated memory 498.21 MiB is allocated by PyTorch"
)


def steps(losses, start=1):
    return [{"event": "step", "step": start + i, "loss": x, "time": 1000.0 + i} for i, x in enumerate(losses)]


def test_exit_codes_are_distinct_and_avoid_the_common_ones():
    codes = [code for code, _ in KINDS.values()]
    assert len(set(codes)) == len(codes)
    assert not set(codes) & {0, 1, 2, 130}


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (HIP_OOM, "oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "oom"),
        ("RuntimeError: CUDA error: out of memory", "oom"),
        ("Killed", "oom"),
        ("[12345.678] Out of memory: Killed process 4242 (python3) total-vm:1234kB", "oom"),
        (
            "Memory access fault by GPU node-1 (Agent handle: 0x55d) on address 0x7f. Reason: Page not present",
            "gpu_fault",
        ),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "gpu_fault"),
        ("HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid.", "gpu_fault"),
        ("HW Exception by GPU node-1 (Agent handle: 0x5f) reason :GPU Hang", "gpu_fault"),
        ("RuntimeError: HIP error: invalid device function", "gpu_fault"),
        (
            "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
            "comms",
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, ncclRemoteError",
            "comms",
        ),
    ],
)
def test_log_signatures(line, kind):
    findings = scan_log(["step 10 loss 2.3", line, "more"])
    assert [f.kind for f in findings] == [kind]
    assert findings[0].line_no == 2


@pytest.mark.parametrize(
    "line",
    [
        "UserWarning: Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas",
        "/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory",
        "step 40 loss 1.2 lr 3e-4 tokens/s 50000",
        "MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1030_40.kdb Performance may degrade.",
        "Killed 3 stale checkpoint files",  # 'Killed' alone on a line is the shell's; this is not
    ],
)
def test_harmless_lines_are_not_anomalies(line):
    assert scan_log([line]) == []


def test_traceback_reports_its_exception_line():
    log = [
        "step 1",
        "Traceback (most recent call last):",
        '  File "loop.py", line 3, in <module>',
        "    raise ValueError('bad shard')",
        "ValueError: bad shard",
    ]
    findings = scan_log(log)
    assert [(f.kind, f.text, f.line_no) for f in findings] == [("traceback", "ValueError: bad shard", 5)]


def test_torchrun_told_to_stop_is_not_a_crash():
    log = [
        "Traceback (most recent call last):",
        '  File ".../torch/distributed/elastic/multiprocessing/api.py", line 86, in _terminate_process_handler',
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15",
    ]
    assert scan_log(log) == []
    killed = [
        *log[:2],
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 6",
    ]
    assert [f.kind for f in scan_log(killed)] == ["traceback"]


def test_torchrun_relaying_a_worker_failure_is_not_a_second_crash():
    """torchrun's ChildFailedError only relays a worker's exit; the worker's own lines say why."""
    log = [
        "error: shard.jsonl line 6: 2 tokens but 1 tags",
        "hint: every token needs exactly one BIO tag",
        "Traceback (most recent call last):",
        '  File ".../torch/distributed/launcher/api.py", line 383, in launch_agent',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "  exitcode  : 2 (pid: 4807)",
    ]
    findings = scan_log(log)
    assert [f.kind for f in findings] == ["error", "hint"]
    dead = Liveness(alive=False, returncode=1, exit_recorded=True)
    (gone,) = analyze(events=[], log_findings=findings, liveness=dead, last_output=None, now=0.0)
    assert gone.code == 12 and "2 tokens but 1 tags" in gone.message


def test_chained_traceback_counts_once_and_keeps_the_last_exception():
    log = [
        "Traceback (most recent call last):",
        "  File 'a.py', line 1",
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "  File 'a.py', line 2",
        "RuntimeError: config broken",
    ]
    assert [f.text for f in scan_log(log)] == ["RuntimeError: config broken"]


def test_oom_traceback_is_one_oom_not_also_a_traceback():
    log = [
        "[rank0]: Traceback (most recent call last):",
        "[rank0]:   File 'x.py', line 1",
        f"[rank0]: {HIP_OOM}",
    ]
    findings = scan_log(log)
    assert [f.kind for f in findings] == ["oom"]
    assert "HIP out of memory" in findings[0].text


def test_nan_and_inf_losses_and_grad_norms():
    events = [*steps([2.0, 1.5]), {"event": "step", "step": 3, "loss": float("nan")}]
    (anomaly,) = check_numerics(events)
    assert anomaly.kind == "nonfinite" and anomaly.step == 3 and "loss" in anomaly.message
    assert check_numerics([{"event": "step", "step": 1, "loss": "inf"}])[0].kind == "nonfinite"
    assert check_numerics([{"event": "step", "step": 1, "loss": None}])[0].kind == "nonfinite"
    grad = check_numerics([{"event": "step", "step": 9, "loss": 1.0, "grad_norm": float("inf")}])
    assert "grad_norm" in grad[0].message
    assert check_numerics(steps([2.0, 1.0, 0.5])) == []


def test_skipped_steps_and_nonfinite_finish_are_nonfinite():
    events = [*steps([2.0]), {"event": "skipped_step", "step": 2, "reason": "non-finite loss"}]
    assert "skipped" in check_numerics(events)[0].message
    finished = [{"event": "finished", "step": 7, "reason": "nonfinite"}]
    assert check_numerics(finished)[0].kind == "nonfinite"


def test_divergence_vs_running_minimum():
    good = steps([3.0, 2.5, 2.0, 1.6, 1.3, 1.1, 1.0, 0.9, 0.85, 0.8, 0.82, 0.79, 0.81])
    assert check_divergence(good) == []
    # A single spike is not a divergence: the median of the window ignores it.
    assert check_divergence([*good, *steps([9.0], start=14), *steps([0.8, 0.79], start=15)]) == []
    diverging = [*good, *steps([2.0, 3.5, 6.0, 9.0, 14.0], start=14)]
    (anomaly,) = check_divergence(diverging)
    assert anomaly.kind == "divergence" and anomaly.step == 18
    assert "running minimum 0.8" in anomaly.message
    # Near convergence a 5x ratio of tiny losses is noise, not divergence (min_delta).
    tiny = steps([0.5, 0.2, 0.05, 0.02, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.05, 0.05, 0.06, 0.05, 0.05])
    assert check_divergence(tiny) == []
    assert check_divergence(diverging[:8]) == []  # too few steps to judge


def test_liveness_without_finished():
    assert check_liveness([], Liveness(alive=True), "train.log") == []
    assert check_liveness([], Liveness(alive=None), "train.log") == []
    done = [{"event": "finished", "step": 20, "reason": "max_steps"}]
    assert check_liveness(done, Liveness(alive=False), "train.log") == []
    (killed,) = check_liveness([], Liveness(alive=False, pid=77, signal=9, exit_recorded=True), "train.log")
    assert killed.kind == "vanished" and "SIGKILL" in killed.message and "77" in killed.message
    (oom,) = check_liveness([], Liveness(alive=False, signal=9, oom_kills=1, exit_recorded=True), "train.log")
    assert oom.kind == "oom" and "OOM killer" in oom.message
    (crashed,) = check_liveness([], Liveness(alive=False, returncode=1, exit_recorded=True), "train.log")
    assert "exited with code 1" in crashed.message
    (gone,) = check_liveness([], Liveness(alive=False), "train.log")
    assert "no exit record" in gone.message
    assert check_liveness([], Liveness(alive=False, signal=15, stop_requested=True), "train.log") == []


def test_silence_allowances_by_phase():
    th = Thresholds(silence_s=900, first_step_silence_s=3600, checkpoint_silence_s=2700)
    alive = Liveness(alive=True)
    running = steps([2.0, 1.0])
    assert check_silence(running, alive, last_output=0.0, now=899.0, thresholds=th) == []
    (stalled,) = check_silence(running, alive, last_output=0.0, now=901.0, thresholds=th)
    assert stalled.kind == "stalled" and "between steps" in stalled.message
    # Before the first step: an hour.
    assert check_silence([], alive, last_output=0.0, now=3000.0, thresholds=th) == []
    assert (
        "before the first step"
        in check_silence([], alive, last_output=0.0, now=3601.0, thresholds=th)[0].message
    )
    # During a checkpoint write (start without done): 45 minutes.
    saving = [*running, {"event": "checkpoint", "step": 2, "phase": "start", "path": "x"}]
    assert check_silence(saving, alive, last_output=0.0, now=2000.0, thresholds=th) == []
    assert "checkpoint" in check_silence(saving, alive, last_output=0.0, now=2701.0, thresholds=th)[0].message
    saved = [*saving, {"event": "checkpoint", "step": 2, "phase": "done", "path": "x"}]
    assert check_silence(saved, alive, last_output=0.0, now=901.0, thresholds=th)[0].kind == "stalled"
    # A dead process is "vanished", not "stalled"; a finished run is silent by right.
    assert check_silence(running, Liveness(alive=False), last_output=0.0, now=1e9, thresholds=th) == []
    done = [*running, {"event": "finished", "step": 2, "reason": "max_steps"}]
    assert check_silence(done, alive, last_output=0.0, now=1e9, thresholds=th) == []


def test_analyze_orders_by_priority_and_picks_the_exit_code():
    findings = scan_log(["Traceback (most recent call last):", "  File 'x'", HIP_OOM])
    anomalies = analyze(
        events=steps([2.0, float("nan")]),
        log_findings=findings,
        liveness=Liveness(alive=False, returncode=1, exit_recorded=True),
        last_output=0.0,
        now=10.0,
    )
    assert [a.kind for a in anomalies] == ["oom", "nonfinite", "vanished"]
    assert exit_code_for(anomalies) == KINDS["oom"][0] == 14
    assert exit_code_for(()) == 0


def test_a_run_that_exited_on_its_own_error_quotes_it():
    """A detached run refused its input (exit 2): status quotes the trainer's error, not an OOM guess."""
    log = [
        "device cpu, precision fp32 (fp32 requested), world size 1",
        "error: shard.jsonl line 6: 2 tokens but 1 tags",
        "hint: every token needs exactly one BIO tag",
    ]
    findings = scan_log(log)
    assert [f.kind for f in findings] == ["error", "hint"]
    assert check_log(findings, "train.log") == []  # an error line alone is no log anomaly
    dead = Liveness(alive=False, pid=5, returncode=2, exit_recorded=True)
    (gone,) = check_liveness([], dead, "train.log", findings)
    assert gone.kind == "vanished" and gone.code == 12
    assert "exited with code 2" in gone.message and "shard.jsonl line 6: 2 tokens but 1 tags" in gone.message
    assert gone.hint.startswith("every token needs exactly one BIO tag") and "OOM" not in gone.hint
    # Without the trainer's own report the generic hint stays.
    (generic,) = check_liveness([], dead, "train.log", ())
    assert "journalctl" in generic.hint
    # An "error:" inside a traceback's frames is not the trainer's report.
    assert [f.kind for f in scan_log(["Traceback (most recent call last):", "error: x", "  y", "E: z"])] == [
        "traceback"
    ]
