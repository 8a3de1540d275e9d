"""base/idle.py: deferred work runs while the main thread waits on a child, else where its result is needed.

Every wait here is on an event set by the job itself: no test depends on how fast this machine is."""

from __future__ import annotations

import threading

import pytest

from mw_env.base import idle


def test_a_job_nobody_waited_for_runs_where_its_result_is_asked():
    ran_on: list[str] = []
    job = idle.soon(lambda: ran_on.append(threading.current_thread().name) or 42)
    assert job.result() == 42
    assert ran_on == [threading.current_thread().name]  # here: no wait came, the idle thread never ran it
    assert job.result() == 42 and len(ran_on) == 1  # run once, whoever asks again


def test_a_job_runs_on_the_idle_thread_while_the_main_thread_waits():
    started = threading.Event()
    ran_on: list[str] = []

    def work() -> str:
        ran_on.append(threading.current_thread().name)
        started.set()
        return "read"

    job = idle.soon(work)
    with idle.waiting():  # as around uv's run: the idle thread takes the job
        assert started.wait(timeout=60)
    assert job.result() == "read" and ran_on == ["mw-env-idle"]


def test_jobs_run_in_the_order_given_and_a_failure_reaches_whoever_asks():
    order: list[int] = []
    last = threading.Event()

    def boom() -> None:
        order.append(2)
        raise OSError("the venv vanished")

    jobs = [
        idle.soon(lambda: order.append(1)),
        idle.soon(boom),
        idle.soon(lambda: (order.append(3), last.set())),
    ]
    with idle.waiting():
        assert last.wait(timeout=60)
    assert order == [1, 2, 3]
    jobs[0].result()
    with pytest.raises(OSError, match="vanished"):
        jobs[1].result()


def test_asking_for_a_job_the_idle_thread_is_running_waits_for_that_run():
    inside, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow() -> int:
        runs.append(threading.current_thread().name)
        inside.set()
        assert release.wait(timeout=60)
        return 7

    job = idle.soon(slow)
    with idle.waiting():
        assert inside.wait(timeout=60)
    asker = threading.Thread(target=lambda: runs.append(f"got {job.result()}"))
    asker.start()
    release.set()
    asker.join(timeout=60)
    assert runs == ["mw-env-idle", "got 7"]  # not run a second time by the asker
