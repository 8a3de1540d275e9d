"""The uv wrapper: uv is a program we invoke (never reimplemented); installed from PyPI when missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mw_env.base.errors import StepFailed
from mw_env.base.lifeline import preexec
from mw_env.base.versions import version_tuple

# Constraint/override files of an mw-env venv. Inherited from an activated venv they would pin
# *that* venv's torch onto the one being built, so bootstrap's own uv calls drop them.
PIN_MARKERS = ("mw-env-constraints.txt", "mw-env-overrides.txt")
# `uv venv --relocatable` and `uv pip install --index` (both used by the plan) need this uv or newer.
MIN_UV = (0, 5, 0)


@dataclass(frozen=True)
class CommandRun:
    argv: tuple[str, ...]
    returncode: int
    output: str
    duration_s: float
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def find_uv(env: Mapping[str, str]) -> str | None:
    """uv from $UV, next to this Python (pip-installed uv), PATH, ~/.local/bin, or where install_uv put it."""
    candidates = [
        env.get("UV"),
        str(Path(sys.executable).parent / "uv"),
        shutil.which("uv", path=env.get("PATH", os.defpath)),
    ]
    if home := env.get("HOME"):  # ~/.local/bin, then install_uv's own venv
        candidates += [f"{home}/.local/bin/uv", f"{home}/.local/share/mw-env/uv/bin/uv"]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def uv_install_commands(python: str, env: Mapping[str, str]) -> list[list[str]]:
    """Ways to get uv from PyPI into the user's environment, tried in order."""
    home = Path(env.get("HOME") or Path.home())
    tools = home / ".local" / "share" / "mw-env" / "uv"
    return [
        # The user's site: works on most Pythons without a venv module.
        [python, "-m", "pip", "install", "--user", "--quiet", "uv"],
        # PEP 668 systems (Ubuntu 24.04's python3) refuse --user: a private venv instead.
        [python, "-m", "venv", str(tools)],
        [str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", "uv"],
    ]


def install_uv(*, python: str, env: Mapping[str, str], timeout: float = 300.0) -> str:
    """Install uv from PyPI; return its path or raise StepFailed saying what was tried."""
    attempts = uv_install_commands(python, env)
    errors: list[str] = []
    first = _run_quiet(attempts[0], env, timeout)
    if first.ok and (found := find_uv({**env, "PATH": _user_bin_path(env)})):
        return found
    errors.append(f"{' '.join(attempts[0])}: {first.tail(3) or 'exit ' + str(first.returncode)}")
    for argv in attempts[1:]:
        res = _run_quiet(argv, env, timeout)
        if not res.ok:
            errors.append(f"{' '.join(argv)}: {res.tail(3) or 'exit ' + str(res.returncode)}")
            break
    else:
        uv = Path(attempts[1][-1]) / "bin" / "uv"
        if uv.is_file():
            return str(uv)
    raise StepFailed(
        "uv is missing and could not be installed from PyPI:\n  " + "\n  ".join(errors),
        hint="install uv yourself (`pipx install uv`, `apt install python3-venv` then re-run, or "
        "https://docs.astral.sh/uv/getting-started/installation/), or point $UV at it",
    )


def _user_bin_path(env: Mapping[str, str]) -> str:
    home = env.get("HOME") or str(Path.home())
    return f"{home}/.local/bin:{env.get('PATH', os.defpath)}"


def _run_quiet(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> CommandRun:
    start = time.monotonic()
    try:
        proc = subprocess.run(
            list(argv),
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            preexec_fn=preexec(signal.SIGKILL),  # a killed bootstrap leaves no child behind
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CommandRun(tuple(argv), 127, str(exc), time.monotonic() - start)
    return CommandRun(
        tuple(argv), proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, stdout=proc.stdout
    )


def uv_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for bootstrap's uv calls: the user's, minus another mw-env venv's pins."""
    out = dict(env)
    for key in ("UV_CONSTRAINT", "UV_OVERRIDE", "PIP_CONSTRAINT"):
        value = out.get(key)
        if value and any(m in value for m in PIN_MARKERS):
            kept = [p for p in value.split() if not any(m in p for m in PIN_MARKERS)]
            if kept:
                out[key] = " ".join(kept)
            else:
                out.pop(key)
    # uv's own torch routing (`--torch-backend`) would override the profile's index, and it cannot read
    # gfx1103 or compute capabilities (install-anchors a): the profile decides where torch comes from.
    out.pop("UV_TORCH_BACKEND", None)
    # A venv the user has activated must not redirect uv: bootstrap always passes --python.
    out.pop("VIRTUAL_ENV", None)
    out.pop("CONDA_PREFIX", None)
    out.setdefault("UV_NO_PROGRESS", "1")  # uv's spinners are noise in a captured log
    return out


def run_streaming(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    on_line: Callable[[str], None] | None = None,
    timeout: float | None = None,
) -> CommandRun:
    """Run a command, passing each output line to `on_line` as it comes; never through a shell.

    Ctrl-C terminates the child (then kills it) before the KeyboardInterrupt propagates, so an
    interrupted bootstrap leaves no uv behind holding the venv.
    """
    start = time.monotonic()
    lines: list[str] = []
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            preexec_fn=preexec(signal.SIGKILL),  # uv/verify die with a bootstrap killed by any signal
        )
    except OSError as exc:
        return CommandRun(tuple(argv), 127, f"could not start {argv[0]}: {exc}", time.monotonic() - start)

    timer = None
    if timeout is not None:
        timer = threading.Timer(timeout, proc.kill)
        timer.daemon = True
        timer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            lines.append(line)
            if on_line is not None:
                on_line(line)
        rc = proc.wait()
    except BaseException:
        _stop(proc)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    return CommandRun(tuple(argv), rc, "\n".join(lines), time.monotonic() - start)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def find_python(uv: str | None, request: str, env: Mapping[str, str]) -> str | None:
    """The interpreter uv would use for `request` ("3.12", a path), without downloading one."""
    if os.sep in request:
        return request if os.path.isfile(request) and os.access(request, os.X_OK) else None
    if uv:
        res = _run_quiet([uv, "python", "find", "--no-python-downloads", request], uv_env(env), 20.0)
        if res.ok:
            path = res.stdout.strip().splitlines()[-1].strip() if res.stdout.strip() else ""
            if path and os.path.isfile(path):
                return path
        # uv gives up at the first broken python3.X on PATH, e.g. a pyenv shim of a version that is
        # installed but not selected ("pyenv: python3.12: command not found"): look where pyenv keeps it.
        return _pyenv_python(request, env)
    found = shutil.which(f"python{request}", path=env.get("PATH", os.defpath))
    return found or _pyenv_python(request, env)


def _pyenv_python(request: str, env: Mapping[str, str]) -> str | None:
    """`$PYENV_ROOT/versions/3.12.x/bin/python3.12` for a request "3.12" (newest patch release first)."""
    import re

    if not re.fullmatch(r"3\.\d+", request):
        return None
    home = env.get("HOME")
    root = Path(env.get("PYENV_ROOT") or (Path(home) / ".pyenv" if home else ""))
    if not str(root) or not (root / "versions").is_dir():
        return None

    def patch(path: Path) -> int:
        tail = path.name[len(request) + 1 :]
        return int(tail) if tail.isdigit() else -1

    for version_dir in sorted((root / "versions").glob(f"{request}.*"), key=patch, reverse=True):
        exe = version_dir / "bin" / f"python{request}"
        if patch(version_dir) >= 0 and exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return None


def python_version(python: str, env: Mapping[str, str]) -> tuple[str, str] | None:
    """("3.11.7", the real executable behind shims) for an interpreter, None when it does not run."""
    # -S: no site import (the version and the executable are known before it), half this start's time
    query = "import sys; print('%d.%d.%d' % sys.version_info[:3], sys.executable)"
    res = _run_quiet([python, "-S", "-c", query], env, 20.0)
    lines = res.stdout.strip().splitlines() if res.ok else []
    parts = lines[-1].strip().split(" ", 1) if lines else []
    return (parts[0], parts[1]) if len(parts) == 2 else None


def check_version(uv: str, env: Mapping[str, str]) -> str:
    """uv's version; StepFailed when it is older than MIN_UV or does not run."""
    res = _run_quiet([uv, "--version"], env, 20.0)
    words = res.stdout.split()
    version = words[1] if res.ok and len(words) >= 2 and words[0] == "uv" else None
    if version is None:
        raise StepFailed(
            f"{uv} does not run as uv ({res.tail(2) or 'no output'})",
            hint="point $UV at a working uv, or remove it so bootstrap installs one from PyPI",
        )
    parts = version_tuple(version.split("+")[0])[:3]
    if parts < MIN_UV:
        need = ".".join(map(str, MIN_UV))
        raise StepFailed(
            f"uv {version} at {uv} is too old (bootstrap needs {need} or newer)",
            hint=f"`{uv} self update`, or `pip install -U uv`",
        )
    return version
