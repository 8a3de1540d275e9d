"""Children that die with their parent: Linux's PR_SET_PDEATHSIG, set through ctypes (stdlib only).

A process started by mw-env (the trainer, torchrun, the doctor's probe, bootstrap's uv and verify children)
must not outlive the mw-env that started it, whoever kills that one and with what: SIGTERM can be caught and
forwarded, SIGKILL cannot. PR_SET_PDEATHSIG asks the kernel to send a signal to the child the moment its
parent thread exits, however it exits (prctl(2)). The setting survives execve (not for set-user-ID programs)
and is not inherited across fork, so every generation sets its own: torchrun starts its workers in their own
session, so the trainer sets it for itself when torchrun is its parent (`die_with_torchrun`).

The race: a parent killed between fork and prctl leaves the child orphaned with the setting in vain. So
after prctl the child checks that its parent is still the one it had, and kills itself if not.

Everything here is a no-op where prctl is not available (not Linux): mw-env then behaves as before.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctypes import _NamedFuncPointer

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_prctl: Callable[..., int] | None = None
_loaded = False
# The doctor starts its two probes from two threads at once: the first caller resolves prctl while the other
# waits, instead of seeing "loaded" before the function is there (and starting its child without the signal).
_load_lock = threading.Lock()


def _load() -> Callable[..., int] | None:
    """libc's prctl, resolved once in the parent (never inside a preexec_fn: dlopen takes locks)."""
    global _prctl, _loaded
    with _load_lock:
        if not _loaded:
            if sys.platform.startswith("linux"):
                try:
                    fn = _libc_prctl()
                    fn.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
                    fn.restype = ctypes.c_int
                    _prctl = fn
                except (OSError, AttributeError):
                    _prctl = None
            _loaded = True
    return _prctl


def _libc_prctl() -> _NamedFuncPointer:
    """prctl from the C library this interpreter runs on. CDLL(None) is the process's own symbols, libc's
    among them (glibc and musl alike), found without `ctypes.util.find_library`, which runs `ldconfig -p`
    and parses its output: some milliseconds on the start of every bootstrap."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # a static or unusual interpreter: look the library up by name
        from ctypes.util import find_library

        return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True).prctl


def supported() -> bool:
    return _load() is not None


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits; False where it cannot."""
    fn = _load()
    return fn is not None and fn(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def preexec(
    sig: int = signal.SIGKILL, *, then: Callable[[], None] | None = None
) -> Callable[[], None] | None:
    """A subprocess `preexec_fn` that makes the child die with the calling process (None where unsupported).

    Runs in the forked child before exec: no imports, no allocation beyond ints, only the prctl resolved
    here in the parent, so it is safe enough beside threads. `then` runs after it (e.g. os.setpgrp).
    """
    fn = _load()
    if fn is None:
        return then
    parent = os.getpid()
    signum = int(sig)

    def _child() -> None:
        fn(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody would send the signal
            os.kill(os.getpid(), signal.SIGKILL)
        if then is not None:
            then()

    return _child


def die_with_torchrun(env: Mapping[str, str] | None = None, *, proc: Path = Path("/proc")) -> bool:
    """In a torchrun worker: die (SIGKILL) when the torchrun agent that started it dies.

    torch elastic starts each worker with start_new_session=True, so a SIGKILL of torchrun (or of whatever
    killed torchrun's process group) leaves the workers training, holding the GPUs and the rendezvous port.
    Returns whether the signal was set. A worker whose parent is no longer a torch launcher (the agent died
    before we got here) exits at once: it would otherwise train alone until a collective times out.
    """
    seen: Mapping[str, str] = os.environ if env is None else env
    if "TORCHELASTIC_RUN_ID" not in seen or not set_parent_death_signal(signal.SIGKILL):
        return False
    try:
        cmdline = (proc / str(os.getppid()) / "cmdline").read_bytes()
    except OSError:
        return True  # cannot tell (a hardened /proc): keep the signal, do not guess
    if b"torch" not in cmdline:
        print(
            f"error: this torchrun worker's launcher is gone (its parent is now pid {os.getppid()}); exiting",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)
    return True
