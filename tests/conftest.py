from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MACHINES = FIXTURES / "machines"
REPO = Path(__file__).resolve().parent.parent

HAVE_TORCH = importlib.util.find_spec("torch") is not None
# The environment the suite was started with, before any test process moved HOME (tests/userstate.py).
USER_ENV = dict(os.environ)
_USER_STATE = pytest.StashKey[dict[str, dict[str, object]]]()  # what userstate.snapshot recorded at the start


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _controller(config: pytest.Config) -> bool:
    """The xdist process that runs no test itself (it hands them to the workers)."""
    return not _worker(config) and bool(getattr(config.option, "numprocesses", None))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Record the user's state (the process that sees the whole run), then move HOME, the XDG folders and
    MW_ENV_STATE_DIR of every process that runs tests into the session's temp folder, before collection."""
    import userstate

    config = session.config
    if not _worker(config):
        config.stash[_USER_STATE] = {**userstate.snapshot(USER_ENV), "repo": _repo_names()}
    if not _controller(config):
        home = config._tmp_path_factory.getbasetemp() / "home"  # type: ignore[attr-defined]
        os.environ.update(userstate.redirected_env(USER_ENV, home))


# Tool caches a developer's `make lint` (or pytest itself) may make at the top while the suite runs.
_TOOL_CACHES = frozenset({".pytest_cache", ".ruff_cache", ".mypy_cache"})


def _repo_names() -> dict[str, list[str] | None]:
    """The names at the checkout's top and in its runs/ folder, the tool caches left out."""
    out: dict[str, list[str] | None] = {}
    for folder in (REPO, REPO / "runs"):
        try:
            out[f"{folder}/"] = sorted(n for n in os.listdir(folder) if n not in _TOOL_CACHES)
        except OSError:
            out[f"{folder}/"] = None
    return out


def _new_in_checkout(before: dict[str, list[str] | None], after: dict[str, list[str] | None]) -> list[str]:
    """The names the checkout's top or runs/ gained, one line a folder. Only gained ones: a name removed
    meanwhile is the developer's doing (a `make clean`, a run deleted), never a test's leftover."""
    out = []
    for folder, names in after.items():
        made = sorted(set(names or ()) - set(before.get(folder) or ()))
        if made:
            out.append(f"{folder}: new {made}")
    if out:
        out.append(
            "  a test opened a corpus or prepared a launch with the default relative runtime.out_dir "
            "(runs/<name>, resolved against the cwd): give it a runtime.out_dir under its tmp_path, or "
            "monkeypatch.chdir(tmp_path); a left corpus-index.json names the writer (its shard paths lie under "
            "that test's tmp_path)"
        )
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session fails if the user's mw-env state changed, or a run folder was left in the checkout, while
    it ran; new names in HOME's folders are said."""
    import userstate

    config = session.config
    if _worker(config) or _USER_STATE not in config.stash:
        return
    before, after = config.stash[_USER_STATE], {**userstate.snapshot(USER_ENV), "repo": _repo_names()}
    changed = userstate.changes(before["mw-env"], after["mw-env"])
    # A run folder left in the checkout (the default runtime.out_dir is relative: runs/<name>): a test that
    # opened a corpus or prepared a launch without a runtime.out_dir under its tmp_path.
    changed += _new_in_checkout(before["repo"], after["repo"])
    elsewhere = userstate.changes(before["home"], after["home"])
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if elsewhere and reporter is not None:
        reporter.write_line(
            "\n".join(
                [
                    "note: new in HOME while the suite ran (this user's other processes write there too):",
                    *elsewhere,
                ]
            ),
            yellow=True,
        )
    if not changed:
        return
    lines = [
        "the suite changed the user's mw-env state or the checkout (tests must write only under their temp "
        "folders):",
        *changed,
    ]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _isolated_env(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every test starts without the caller's MW_ENV_* settings (profile, root, torch source, debug...).

    A developer's shell or a CI job may export them; a test that needs one sets it itself. The record of the
    venv bootstrap built last goes to a folder of the test's own (made only when written): a test's bootstrap
    never becomes the developer's default venv, nor another test's.
    """
    for var in [v for v in os.environ if v.startswith("MW_ENV_")]:
        monkeypatch.delenv(var)
    import hashlib

    tag = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv("MW_ENV_STATE_DIR", str(tmp_path_factory.getbasetemp() / "mw-env-state" / tag))


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A detached run that a test started in its tmp_path is ended when the test ends, passed or not.

    A test that fails before it stops its run (an assertion while waiting for progress) would otherwise
    leave a trainer with max_steps=100000 taking a core for the rest of the suite, which slows every later
    test on a 2-core CI machine. The run's processes are found by the run id in their environment, the
    way `train stop` finds them, so a reused pid is never hit."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    import signal

    from mw_env.rundir.occupants import marked_processes
    from mw_env.runs.runs import RUN_FILE, read_run

    for found in tmp.rglob(RUN_FILE):
        try:
            record = read_run(found.parent)
        except Exception:  # a test's deliberately broken run.json is not ours to judge here
            continue
        if record is None or not record.run_id:
            continue
        for pid in marked_processes(record.run_id):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def pytest_configure(config: pytest.Config) -> None:
    """The suite's processes take Ctrl-C as they would from a terminal, however the suite was started.

    A shell without job control starts `cmd &` with SIGINT and SIGQUIT ignored, and an ignored signal is
    inherited through fork and exec: a suite run as `CI=true bash .ci/run &` (a loaded machine's test, a
    nohup'ed CI job) gave every child SIGINT ignored, so the tests that press Ctrl-C on a bootstrap or a
    run waited for an interruption that could not come. Python's own handler here (reset to the default
    in each child at exec) gives the children the disposition a terminal's foreground job has."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


# The files whose tests start several torch processes at once: torchrun with two workers, two nodes, a
# trainer beside the report's figure pool. On the 2 cores CI has, two of them running at once (one on each
# xdist worker) each took 2-3x as long as alone (test_signals 68 s -> 184 s, 11:23 of tests instead of
# 8:23). They are one unit of the schedule: run one after another on one worker while the other worker runs
# the single-process files. A file that starts such a run belongs here (a name that is gone fails collection).
MULTIPROCESS = frozenset(
    {
        "tests/faults/test_disk_faults.py",
        "tests/faults/test_multinode_faults.py",
        "tests/faults/test_signals.py",
        "tests/faults/test_status_truth.py",
        "tests/runs/test_no_orphans.py",
        "tests/trainer/test_ddp.py",
        "tests/trainer/test_elastic.py",
        "tests/trainer/test_multinode.py",
        "tests/trainer/test_multinode_env.py",
        "tests/trainer/test_stream_resume.py",
    }
)
MULTIPROCESS_UNIT = "multiprocess"  # the unit's name in tests/durations.json's order and in xdist's log


def _unit(file: str) -> str:
    """The unit of the schedule a test file belongs to: the file itself, or the multi-process unit."""
    return MULTIPROCESS_UNIT if file in MULTIPROCESS else file


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile`, with the MULTIPROCESS files as one unit: a file still runs whole on one worker, in
    its order, and the multi-process files run one after another on one worker.

    Not `--dist loadgroup` with an xdist_group per file: that appends `@group` to every test's id, so a
    FAILED line's id no longer selects the test it names. Other --dist modes are xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    return _unit_scheduling()(config, log)


def _unit_scheduling() -> type:
    """xdist's loadfile scheduling whose unit of work is `_unit(file)` (imported here: xdist is a plugin)."""
    from xdist.scheduler import LoadFileScheduling

    class LoadUnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(super()._split_scope(nodeid))

    return LoadUnitScheduling


def _longest_files_first(items: list[pytest.Item]) -> None:
    """Collect the test files longest first (tests/durations.json, scripts/test_durations.py): `--dist
    loadfile` hands out whole units (a file, or the MULTIPROCESS files together) in collection order, and a
    long unit handed out last ran alone while the other worker idled. A unit weighs the seconds of its files;
    a file the table does not know is placed by its test count (the table's median seconds a test). The sort
    is stable, so a file's tests keep their order and stay together; every worker sorts the same collection
    the same way, as xdist requires."""
    import json

    try:
        table: dict[str, float] = json.loads((REPO / "tests" / "durations.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    _order_units(items, table)


def _order_units(items: list[pytest.Item], table: dict[str, float]) -> None:
    counts: dict[str, int] = {}
    for item in items:
        counts[item.location[0]] = counts.get(item.location[0], 0) + 1
    known = sorted(table[f] / counts[f] for f in counts if f in table and counts[f])
    each = known[len(known) // 2] if known else 0.1
    weight: dict[str, float] = {}
    for f, n in counts.items():
        weight[_unit(f)] = weight.get(_unit(f), 0.0) + table.get(f, n * each)
    items.sort(key=lambda item: (-weight[_unit(item.location[0])], _unit(item.location[0])))


def _multiprocess_files_exist() -> None:
    gone = sorted(f for f in MULTIPROCESS if not (REPO / f).is_file())
    if gone:
        raise pytest.UsageError(
            f"tests/conftest.py MULTIPROCESS names files that are gone: {', '.join(gone)}"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _multiprocess_files_exist()
    _longest_files_first(items)
    if HAVE_TORCH:
        return
    skip = pytest.mark.skip(reason="no torch in this venv (no wheelhouse held one)")
    for item in items:
        if "torch" in item.keywords:
            item.add_marker(skip)


def fake_machine(name: str, *, env: dict[str, str] | None = None):
    """A Machine over tests/fixtures/machines/<name>/, with that root's .mw-env-bin/ first on PATH.

    Fake commands (nvidia-smi, rocminfo, ...) live in <root>/.mw-env-bin/ and print captured output.
    """
    from mw_env.hardware.machine import Machine

    root = MACHINES / name
    assert root.is_dir(), f"no fake machine {name!r} under {MACHINES}"
    base = {"PATH": f"{root / '.mw-env-bin'}:/usr/bin:/bin", "HOME": "/home/agent", "USER": "agent"}
    base.update(env or {})
    base.setdefault("LANG", os.environ.get("LANG", "C.UTF-8"))
    return Machine(root=root, env=base)
