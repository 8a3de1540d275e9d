"""Data worker processes: the encoding of each window split across `data.workers` processes.

The rank's reader thread decodes a window's rows from the shards (Arrow, C++: cheap) and hands one
slice of them to each worker; each returns its slice encoded (encode.py); the slices are joined in
order. So the work is split, nothing is read twice, and the result is the same as encoding in one
process. The workers hold no state of their own: the data position stays "the next step" (order.py),
so a run killed with workers resumes exactly like one without.

Plain child processes (`python -m mw_env.trainer.data.workers`) over pipes, not multiprocessing:
no `__main__` re-import (a training script without a main guard stays safe) and no fork of a
process that holds torch's threads. A worker exits when its stdin closes, so a killed trainer
leaves none behind; a worker that dies is an error naming its exit status.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from mw_env.base.errors import InputError
from mw_env.hardware.capacity import bounded, usable_cpus

if TYPE_CHECKING:
    import pyarrow as pa

    from mw_env.trainer.data.encode import Encoded

T = TypeVar("T")

_LEN = struct.Struct("<Q")


def default_workers(ranks_per_node: int) -> int:
    """Cores per rank minus one (the rank's own process: the step and the reader thread), at most 8. The cores
    are those this process may use (its affinity and the cgroup's cpu.max quota: mw_env.hardware.capacity)."""
    per_rank = usable_cpus().usable // max(ranks_per_node, 1)
    return max(0, min(per_rank - 1, 8))


def rank_workers(configured: int, ranks_per_node: int) -> tuple[int, str | None]:
    """data.workers for one rank: -1 = default_workers; a count above the rank's share of the usable CPUs is
    lowered to that share, with the warning to print (encoders beyond the cores only contend for them)."""
    if configured < 0:
        return default_workers(ranks_per_node), None
    cpus = usable_cpus()
    share = max(1, cpus.usable // max(ranks_per_node, 1))
    return bounded("data.workers", configured, share, cpus)


def _send(fh: IO[bytes] | None, obj: object) -> None:
    assert fh is not None  # the worker's pipe (Popen with stdin/stdout=PIPE)
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(_LEN.pack(len(data)))
    fh.write(data)
    fh.flush()


def _recv(fh: IO[bytes] | None) -> Any:
    assert fh is not None
    head = fh.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (n,) = _LEN.unpack(head)
    data = fh.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)  # frames from our own child process, over its own pipe


class WorkerPool:
    """n encoder processes; `encode(tokens, tags)` splits the rows across them, in order."""

    def __init__(self, n: int, spec: dict[str, object]) -> None:
        src = str(Path(__file__).resolve().parents[3])  # the folder holding the mw_env package
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        env["OMP_NUM_THREADS"] = "1"
        self._procs = []
        for _ in range(n):
            p = subprocess.Popen(
                [sys.executable, "-m", "mw_env.trainer.data.workers"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            _send(p.stdin, spec)
            self._procs.append(p)

    def __len__(self) -> int:
        return len(self._procs)

    def encode(self, tokens: pa.Array, tags: pa.Array) -> Encoded:
        import pyarrow as pa

        from mw_env.trainer.data.encode import Encoded

        n, rows = len(self._procs), len(tokens)
        cuts = [rows * k // n for k in range(n + 1)]
        used = []
        # One task per worker at a time, sent before any result is read: no pipe can fill both ways.
        for p, a, b in zip(self._procs, cuts, cuts[1:], strict=False):
            if b > a:
                # concat_arrays copies the slice into buffers of its own: a pickled slice would carry
                # its parent's whole buffers to every worker.
                part = (pa.concat_arrays([tokens.slice(a, b - a)]), pa.concat_arrays([tags.slice(a, b - a)]))
                self._call(p, _send, p.stdin, part)
                used.append(p)
        parts = []
        for p in used:
            reply = self._call(p, _recv, p.stdout)
            if isinstance(reply, tuple) and reply and reply[0] == "error":
                raise InputError(
                    f"a data worker failed: {reply[1]}", hint="run with data.workers=0 to see it here"
                )
            parts.append(reply)
        return Encoded.concat(parts)

    def _call(self, p: subprocess.Popen[bytes], fn: Callable[..., T], *args: object) -> T:
        try:
            return fn(*args)
        except (BrokenPipeError, EOFError, OSError):
            code = p.wait(timeout=10)
            raise InputError(
                f"a data worker (pid {p.pid}) stopped (exit status {code})",
                hint="it may have run out of memory: lower data.shuffle_rows or data.workers",
            ) from None

    def close(self) -> None:
        for p in self._procs:
            try:
                if p.stdin:
                    p.stdin.close()
            except OSError:
                pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        self._procs = []


def _serve() -> int:
    from mw_env.trainer.data.encode import VectorEncoder

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        encoder = VectorEncoder(**_recv(stdin))
    except EOFError:
        return 0
    while True:
        try:
            tokens, tags = _recv(stdin)
        except EOFError:
            return 0
        try:
            result: object = encoder.encode(tokens, tags)
        except Exception as exc:  # handed to the parent, which raises it with the worker named
            result = ("error", f"{type(exc).__name__}: {exc}")
        _send(stdout, result)


if __name__ == "__main__":
    raise SystemExit(_serve())
