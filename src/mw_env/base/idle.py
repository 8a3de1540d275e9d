"""Work for the moments the main thread waits on a child: a bootstrap's Python runs while uv does not.

Why: bootstrap's own time is CPU time on the main thread (imports, planning, bookkeeping) between uv's runs,
and Python runs one thread at a time. Work that is not needed yet (building the console off a terminal,
reading the venv's fingerprint) is registered here with `soon()`; one daemon thread runs it only while the
main thread blocks on a child (`waiting()`, around every wait for uv and the verify child), so it takes no time
from the critical path. Whoever needs a job's result calls `Job.result()`, which runs the job on the calling
thread if it has not begun: nothing depends on the idle thread ever getting a turn.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

_cond = threading.Condition()
_queue: list[Callable[[], None]] = []  # each queued job's run method
_waits = 0  # how many main-thread waits are under way (nested waits count once each)
_worker: threading.Thread | None = None


class Job(Generic[T]):
    """One piece of deferred work and, once run, its result (or the exception it raised)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._lock = threading.Lock()  # held while it runs: result() waits for a run under way
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        with self._lock:
            if self._done:
                return
            try:
                self._value = self._fn()
            except BaseException as exc:  # kept for the caller of result(), who decides
                self._error = exc
            self._done = True

    def result(self) -> T:
        """The job's value, running it here first if the idle thread has not; its exception re-raised."""
        with _cond:
            if self.run in _queue:
                _queue.remove(self.run)
        self.run()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # T, set by run() when there was no error


def soon(fn: Callable[[], T]) -> Job[T]:
    """Run `fn` on the idle thread during the main thread's next waits on a child; Job.result() collects it."""
    global _worker
    job: Job[T] = Job(fn)
    with _cond:
        _queue.append(job.run)
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="mw-env-idle", daemon=True)
            _worker.start()
        _cond.notify_all()
    return job


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """Around a wait on a child process: the idle thread may run queued work meanwhile."""
    global _waits
    with _cond:
        _waits += 1
        _cond.notify_all()
    try:
        yield
    finally:
        with _cond:
            _waits -= 1


def _work() -> None:
    while True:
        with _cond:
            _cond.wait_for(lambda: bool(_queue) and _waits > 0)
            run = _queue.pop(0)
        run()
