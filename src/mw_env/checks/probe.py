"""Run probe_script.py in the venv's python, in its own session, with a hard timeout.

A GPU fault can leave the child spinning forever in HSA error handling, so the child gets a new process
group and the whole group is killed at the deadline; what it printed until then still tells the last
stage it reached. The child also gets PR_SET_PDEATHSIG (mw_env.base.lifeline): a doctor killed by SIGTERM or
SIGKILL (docker stop, timeout, systemd) takes its hung probe with it instead of leaving it holding the GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mw_env.base.lifeline import preexec
from mw_env.checks.probe_script import PREFIX

SCRIPT = Path(__file__).with_name("probe_script.py")
# Probes still running: their sessions are killed when the doctor is interrupted or gives up on them, since
# a child in its own session does not get the terminal's Ctrl-C and would outlive the doctor.
_ACTIVE: set[subprocess.Popen[str]] = set()
_ACTIVE_LOCK = threading.Lock()
_SIGNAL_NAMES = {
    getattr(signal, n): n for n in ("SIGSEGV", "SIGABRT", "SIGKILL", "SIGBUS", "SIGILL", "SIGFPE")
}


@dataclass(frozen=True)
class ProbeResult:
    """What the probe printed per stage, and how it ended."""

    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> its JSON line
    order: tuple[str, ...] = ()  # stages in the order they were reported
    returncode: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    stderr: str = ""
    stdout_other: str = ""  # stdout lines that are not probe lines (library chatter)
    error: str | None = None  # could not start at all

    @property
    def last_stage(self) -> str:
        return self.order[-1] if self.order else "start"

    @property
    def finished(self) -> bool:
        return "done" in self.stages

    def stage(self, name: str) -> dict[str, Any] | None:
        return self.stages.get(name)

    @property
    def crashed(self) -> bool:
        """Died without reporting a failed stage (a signal, an abort, an exit from native code)."""
        if self.timed_out or self.error or self.finished or self.returncode == 0:
            return False
        last = self.stages.get(self.last_stage) or {}
        return not (last.get("ok") is False and self.returncode in (3, 4, 5))

    def how(self) -> str:
        if self.returncode is None:
            return "no exit status"
        if self.returncode < 0:
            return f"killed by {_SIGNAL_NAMES.get(-self.returncode, f'signal {-self.returncode}')}"
        if self.returncode == 134:
            return "aborted (exit 134, SIGABRT)"
        return f"exit {self.returncode}"


def parse_output(stdout: str) -> tuple[dict[str, dict[str, Any]], tuple[str, ...], str]:
    stages: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    other: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(PREFIX):
            try:
                data = json.loads(line[len(PREFIX) :])
            except json.JSONDecodeError:
                other.append(line)
                continue
            if isinstance(data, dict) and isinstance(data.get("stage"), str):
                stages[data["stage"]] = data
                order.append(data["stage"])
                continue
        other.append(line)
    return stages, tuple(order), "\n".join(other)


def run_probe(
    *,
    python: Path,
    env: Mapping[str, str],
    timeout: float,
    config: Mapping[str, object],
    progress: list[str] | None = None,
) -> ProbeResult:
    """Run the probe; never raises, never outlives `timeout` by more than the kill. `progress` receives each
    stage's name as the probe reports it (while it runs: a caller that gave up waiting can say how far it got).
    """
    start = time.monotonic()
    child_env = dict(env)
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env.pop("PYTHONPATH", None)  # the venv's own site-packages, not ours
    try:
        proc = subprocess.Popen(
            [str(python), "-X", "utf8", str(SCRIPT), json.dumps(dict(config))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=child_env,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=preexec(signal.SIGKILL),
        )
    except OSError as exc:
        return ProbeResult(error=str(exc), duration_s=time.monotonic() - start)
    with _ACTIVE_LOCK:
        _ACTIVE.add(proc)
    # Read as it comes (not communicate()): each stage line is progress the moment it is printed.
    out_lines: list[str] = []
    err_parts: list[str] = []
    readers = [
        threading.Thread(target=_read_stdout, args=(proc, out_lines, progress), daemon=True),
        threading.Thread(
            target=lambda: err_parts.append(proc.stderr.read() if proc.stderr else ""), daemon=True
        ),
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(proc)
    for reader in readers:
        reader.join(2.0)  # a grandchild that kept the pipes open: what was read until now is the answer
    out, err = "".join(out_lines), "".join(err_parts)
    stages, order, other = parse_output(out)
    return ProbeResult(
        stages=stages,
        order=order,
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        stderr=err or "",
        stdout_other=other,
    )


def _read_stdout(proc: subprocess.Popen[str], lines: list[str], progress: list[str] | None) -> None:
    if proc.stdout is None:
        return
    try:
        for line in proc.stdout:
            lines.append(line)
            if progress is not None and line.startswith(PREFIX):
                stage = parse_output(line)[1]
                progress.extend(stage)
    except (OSError, ValueError):  # the pipe closed under us: what was read stays
        return


def kill_active() -> None:
    """Kill every probe still running (their whole process groups)."""
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE)
    for proc in procs:
        if proc.poll() is None:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
