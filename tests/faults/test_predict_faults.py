"""`train predict`, `train evaluate` and `train export` under faults (issue 40, "the new commands are where faults
still land"): their input streamed and decoded with a sentence for bad bytes, their output written whole or not
at all, their children ended with them, a stop signal a sentence and 128 + its number, never a traceback.

The input and output halves are tested on their own (no torch, no process); the job in-process on a tiny run
(the checkpoint being written, a damaged export, a full disk through the one writer's seam); and the real
command, as a user runs it, for what only a process shows: signals, orphans, standard output, a write that the
kernel refuses mid-file (RLIMIT_FSIZE: a real failed write(2), no privilege needed).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.base.stopsignals import Stopped, stop_on_signals
from mw_env.trainer.tagio import iter_rows
from mw_env.trainer.tagout import TaggedWriter
from proctools import MARKER, assert_none_left, kill_tagged, new_tag, wait_for
from smokeargs import TEST_VENV

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

REPO = Path(__file__).resolve().parents[2]
MW = [sys.executable, "-m", "mw_env"]


def _no_temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if ".tmp-" in p.name]


# ---------------------------------------------------------------------------------------------------------------
# The input: streamed, split at \n only, every bad byte a sentence naming the line (row)


def test_rows_end_at_newline_only(tmp_path: Path) -> None:
    """A form feed, a NEL, U+2028 or a \\r inside a line are white space, never a new row."""
    lines = ["12 Oak\x0cStreet", "9 Elm\u0085Road", "1 Main\u2028St", "4 Bay Rd\r", "", "7 High St"]
    text = tmp_path / "in.txt"
    text.write_bytes("\n".join(lines).encode() + b"\n")
    rows = list(iter_rows(text))
    assert [r.words for r in rows] == [
        ["12", "Oak", "Street"],
        ["9", "Elm", "Road"],
        ["1", "Main", "St"],
        ["4", "Bay", "Rd"],
        ["7", "High", "St"],
    ]
    assert [r.where.rpartition(" ")[2] for r in rows] == ["1", "2", "3", "4", "6"]  # the file's own lines
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"text": line}, ensure_ascii=False) + "\n" for line in lines[:3]))
    assert len(list(iter_rows(jsonl))) == 3


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "dup.jsonl",
            b'{"tokens": ["a"]}\n{"tokens": ["a"], "tokens": ["b"]}\n',
            r"line 2: .*'tokens' appears twice",
        ),
        (
            "half.jsonl",
            b'{"text": "12 Oak St \\ud800"}\n',
            r"line 1: .*\\ud800 escape without the other half",
        ),
        (
            "bytes.jsonl",
            b'{"text": "a"}\n{"text": "M\xfcnchen"}\n',
            r"line 2: not UTF-8 \(byte 0xfc at column 12\)",
        ),
        ("latin1.txt", b"12 Oak St\nM\xfcnchen 4\n", r"line 2: not UTF-8 \(byte 0xfc at column 2\)"),
        ("deep.jsonl", b"[" * 100000 + b"]" * 100000 + b"\n", r"line 1: not JSON \(nested too deeply\)"),
    ],
)
def test_bad_text_is_a_sentence_naming_the_line(tmp_path: Path, name: str, data: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError, match=message) as caught:
        list(iter_rows(path))
    assert str(path) in caught.value.message and caught.value.hint


def _unvalidated_strings(values: list[bytes]) -> pa.Array:
    """A string array holding whatever bytes (Arrow checks nothing when built from buffers), as another tool
    may write one."""
    raw = pa.array(values, pa.binary())
    return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())


@pytest.mark.parametrize("column", ["tokens", "text"])
def test_a_parquet_string_that_is_not_utf8_names_its_row(tmp_path: Path, column: str) -> None:
    good, bad = b"12 Oak St", b"\xff\xfe Road"
    if column == "tokens":
        words = _unvalidated_strings([good, bad, good])
        values = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()), words)
    else:
        values = _unvalidated_strings([good, bad, good])
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({column: values}), path)
    with pytest.raises(
        InputError, match=rf"in.parquet row 1: column '{column}' holds bytes that are not UTF-8"
    ):
        list(iter_rows(path))


def test_the_input_is_streamed_not_read_whole(tmp_path: Path) -> None:
    """A 1 GiB file (sparse: no disk used) gives its first row at once; its second line, 4 MiB of NULs with no
    end, is an error naming it after 4 MiB were read (the old reader refused the file, or read it all first)."""
    path = tmp_path / "huge.txt"
    with open(path, "wb") as fh:
        fh.write(b"12 Oak Street\n")
        fh.truncate(1 << 30)
    rows = iter_rows(path)
    assert next(rows).words == ["12", "Oak", "Street"]
    with pytest.raises(InputError, match=r"huge.txt line 2: longer than 4 MiB"):
        next(rows)


def test_an_empty_input_is_an_error_once_read_through(tmp_path: Path) -> None:
    path = tmp_path / "blank.txt"
    path.write_text("\n \n\x0c\n")
    with pytest.raises(InputError, match=r"blank\.txt: no rows"):
        list(iter_rows(path))


# ---------------------------------------------------------------------------------------------------------------
# The output: whole or nothing


ROWS = [([f"{i}", "Oak", "Street"], ["B-house", "B-street", "I-street"]) for i in range(3000)]


@pytest.mark.parametrize("name", ["out.parquet", "out.jsonl"])
def test_the_output_is_whole_or_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    out = tmp_path / name
    with TaggedWriter(out) as writer:
        for words, tags in ROWS:
            writer.write(words, tags)
    back = (
        pq.read_table(out).to_pylist()
        if name.endswith(".parquet")
        else [json.loads(line) for line in out.read_text().splitlines()]
    )
    assert len(back) == len(ROWS) and back[7] == {"tokens": ["7", "Oak", "Street"], "tags": ROWS[7][1]}
    out.unlink()

    # A full disk, from inside the write (the one writer's seam), after some bytes went out.
    monkeypatch.setenv("MW_ENV_FAULTS", f"ENOSPC:{name}")
    with pytest.raises(OSError) as caught, TaggedWriter(out) as writer:
        for words, tags in ROWS:
            writer.write(words, tags)
    assert caught.value.errno == 28
    monkeypatch.delenv("MW_ENV_FAULTS")
    # A bad row late in the input, and a stop signal: the file never appears either.
    for late in (InputError("in.jsonl line 2999: not JSON"), Stopped(signal.SIGTERM)):
        with pytest.raises(type(late)), TaggedWriter(out) as writer:
            for i, (words, tags) in enumerate(ROWS):
                if i == 2000:
                    raise late
                writer.write(words, tags)
    assert not out.exists() and _no_temporaries(tmp_path) == []


def test_a_stop_signal_is_raised_once_then_ignored() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes: it raises here, at once
                pass
            raise AssertionError("SIGTERM did not stop the job")
        except Stopped as stop:
            assert stop.signum == signal.SIGTERM
            os.kill(os.getpid(), signal.SIGINT)  # a second signal: ignored, the clean-up goes on
    assert signal.getsignal(signal.SIGINT) == before


def test_rows_to_a_pipe_whose_reader_left() -> None:
    """`predict | head -1` once head is gone: EPIPE, a StdoutFailed for the command to end quietly (exit 1),
    and fd 1 parked on /dev/null so no later flush (the interpreter's, at exit) fails again."""
    from mw_env.trainer.tagout import StdoutFailed

    read, write = os.pipe()
    os.close(read)
    saved = os.dup(1)
    try:
        os.dup2(write, 1)
        with pytest.raises(StdoutFailed) as caught, TaggedWriter(None) as out:
            for words, tags in ROWS:
                out.write(words, tags)
        assert caught.value.cause.errno == 32
        assert os.path.samefile("/proc/self/fd/1", os.devnull)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(write)


STAND_IN = """
import os, signal, sys, time
from mw_env.base.stopsignals import Stopped, exit_code, stop_on_signals
try:
    with stop_on_signals():
        open(sys.argv[1], "w").close()
        while True:
            time.sleep(0.02)
except Stopped as stop:
    open(sys.argv[1] + ".stopped", "w").write(str(stop.signum))
    sys.exit(exit_code(stop.signum))
"""

PARENT = """
import os, sys
from mw_env.base.stopsignals import run_child
end, _ = run_child([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=dict(os.environ))
print(end.returncode, end.stopped_by, flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_run_child_passes_a_stop_on_and_never_leaves_its_child(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """mw-env's side of base/stopsignals.py with a stand-in child: SIGTERM, SIGHUP and SIGINT to the parent reach
    the child as they came (its job ends with 128 + the number), and a SIGKILLed parent's child is told by the
    kernel (PR_SET_PDEATHSIG: SIGTERM, so it cleans up too)."""
    tag, ready = new_tag(), tmp_path / "ready"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, STAND_IN, str(ready)], env=_env(tag), stdout=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: ready.exists() or parent.poll() is not None, 60, "the stand-in child")
        parent.send_signal(signum)
        out, _ = parent.communicate(timeout=60)
        wait_for(lambda: Path(f"{ready}.stopped").exists(), 60, "the child's own stop")
        assert_none_left(tag, within=30)
    finally:
        kill_tagged(tag)
    expected = signal.SIGTERM if signum == signal.SIGKILL else signum
    assert Path(f"{ready}.stopped").read_text() == str(int(expected))
    if signum == signal.SIGKILL:
        assert parent.returncode == -9
    else:
        assert out.split() == [str(128 + signum), str(int(signum))]


# ---------------------------------------------------------------------------------------------------------------
# The job, in-process, on a tiny run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from tests.trainer.helpers import tiny_config

    from mw_env.trainer.loop import train

    out = tmp_path_factory.mktemp("pf") / "run"
    config = tiny_config(out, "runtime.max_steps=4", "runtime.eval_every=4", "runtime.checkpoint_every=2")
    train(resolved=config, echo=lambda _m: None)
    return out


@pytest.fixture(scope="module")
def addresses(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("in") / "addresses.jsonl"
    from tests.trainer.helpers import synthetic_rows

    path.write_text("".join(json.dumps(r) + "\n" for r in synthetic_rows(40, start=7000)))
    return path


def _job(*argv: str, tmp: Path) -> tuple[int, dict]:
    from mw_env.trainer.predict import main

    result = tmp / "result.json"
    code = main([*argv, "--device", "cpu", "--result", str(result)])
    return code, json.loads(result.read_text())


@pytest.mark.torch
@pytest.mark.parametrize("name", ["x.parquet", "x.jsonl"])
def test_a_full_disk_is_exit_1_and_no_file(
    run: Path, addresses: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("MW_ENV_FAULTS", f"ENOSPC:{name}")
    code, got = _job(
        "predict", str(run), "--input", str(addresses), "--output", str(tmp_path / name), tmp=tmp_path
    )
    assert code == 1 and "the disk is full" in got["error"] and name in got["error"], got
    assert "no partial output is left" in got["hint"]
    assert not (tmp_path / name).exists() and _no_temporaries(tmp_path) == []


def _rewritten_newest(run: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A copy of `run` whose newest step's file holds other bytes of the same size, its sidecar the old one and
    older than it (the state of a stop checkpoint written again at the same step, between the writer's two
    renames), and the next step's temporary half written: (the copy, the older and the newer checkpoint)."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    ckpts = copy / "checkpoints"
    older, newer = ckpts / "step-000000002.pt", ckpts / "step-000000004.pt"
    assert older.exists() and newer.exists()
    data = newer.read_bytes()
    newer.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))  # other bytes, same size
    side = ckpts / "step-000000004.pt.sha256"
    os.utime(side, ns=(newer.stat().st_mtime_ns - 10**9,) * 2)  # the sidecar is older than its checkpoint
    (ckpts / ".step-000000006.pt.tmp-4242-abcdef").write_bytes(data[:100])  # the next one, half written
    return copy, older, newer


@pytest.mark.torch
def test_a_checkpoint_being_written_is_passed_over(
    run: Path,
    addresses: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The run rewrites its newest step's file (a stop at the same step) while it holds the folder's lock: the
    new bytes are there, its sidecar is the old one, not yet replaced. Predict uses the previous complete
    checkpoint (was: refused, exit 2), and with no other one says the checkpoint is being written, without the
    trainer's `--resume` advice."""
    import mw_env.trainer.ckpt.newest as newest
    from mw_env.rundir.runlock import acquire

    monkeypatch.setattr(newest, "PAUSE_S", 0.0)
    copy, older, newer = _rewritten_newest(run, tmp_path)
    lock = acquire(copy)  # as the live trainer does, for its whole run
    try:
        code, got = _job("predict", str(copy), "--input", str(addresses), tmp=tmp_path)
        assert code == 0 and got["step"] == 2 and got["model"] == str(older), got
        assert "step-000000004.pt is being written" in capfd.readouterr().err
        older.unlink()
        code, got = _job("predict", str(copy), "--input", str(addresses), tmp=tmp_path)
        assert code == 2 and "the only one, step-000000004.pt, is being written" in got["error"], got
    finally:
        lock.release()
    # A named checkpoint that does not load: the way out is another file, never the trainer's --resume.
    code, got = _job("predict", str(newer), "--input", str(addresses), tmp=tmp_path)
    assert code == 2 and "--resume" not in got["hint"] and "step-*.pt" in got["hint"], got


@pytest.mark.torch
def test_a_checkpoint_newer_than_its_sidecar_with_no_trainer_is_damaged(
    run: Path, addresses: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The same files with no trainer in the folder (no lock held, no process of a launch into it): nothing
    will write that sidecar, so the checkpoint is damaged, named as such, and passed over at once (was: waited
    on as being written, and with no other one 'being written, run the same command again', exit 2)."""
    copy, older, newer = _rewritten_newest(run, tmp_path)
    code, got = _job("predict", str(copy), "--input", str(addresses), tmp=tmp_path)
    assert code == 0 and got["step"] == 2 and got["model"] == str(older), got
    err = capfd.readouterr().err
    assert f"checkpoint {newer} is unreadable (its sha256" in err and "damaged, not being written" in err, err
    assert "is being written (" not in err, err
    older.unlink()
    code, got = _job("predict", str(copy), "--input", str(addresses), tmp=tmp_path)
    assert code == 2 and "no valid checkpoint in" in got["error"] and "being written" not in got["error"], got


def _fake_export(folder: Path, onnx: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "id_layout": {"cls": 1, "sep": 2, "pad": 0, "unk": 3, "shift": 4, "word_separator": [36]},
        "max_seq_len": 64,
        "labels": ["O", "B-street"],
        "tokenizer": {"kind": "byte"},
        "onnx": "model-step-000000004.onnx",
    }
    (folder / "model-step-000000004.onnx").write_bytes(onnx)
    path = folder / "model-step-000000004.json"
    path.write_text(json.dumps(meta))
    return path


@pytest.mark.torch
def test_a_damaged_export_is_a_sentence(run: Path, addresses: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    meta = _fake_export(tmp_path / "export", b"\x08\x07\x12\x04trun")  # an ONNX protobuf cut short
    code, got = _job("predict", str(run), "--input", str(addresses), "--export", str(meta), tmp=tmp_path)
    assert code == 2 and f"--export {meta}: not a usable ONNX export" in got["error"], got
    for garbage in (b"\x00\xffnot json", b'{"labels": 1, "labels": 2}', b"[1, 2]"):
        meta.write_bytes(garbage)
        code, got = _job("evaluate", str(run), "--data", str(addresses), "--export", str(meta), tmp=tmp_path)
        assert code == 2 and str(meta) in got["error"] and got["hint"], got


# ---------------------------------------------------------------------------------------------------------------
# The real command: signals, orphans, standard output, a write the kernel refuses


def _command(run: Path, command: str, source: Path, *extra: str) -> list[str]:
    flag = "--input" if command == "predict" else "--data"
    return [
        *MW,
        "train",
        command,
        str(run),
        flag,
        str(source),
        "--venv",
        str(TEST_VENV),
        "--device",
        "cpu",
        *extra,
    ]


def _env(tag: str, **more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", MARKER: tag, **more}


# Each signal's path through mw-env and its child is proven on a stand-in child (test_run_child_*, no torch);
# the real command is run for the two the campaign saw fail: a Ctrl-C (a traceback) and a SIGKILL (an orphan).
SIGNALS = [("predict", signal.SIGINT, 130), ("evaluate", signal.SIGKILL, -9)]


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize(("command", "signum", "code"), SIGNALS, ids=[f"{c}-{s.name}" for c, s, _ in SIGNALS])
def test_a_signal_to_mw_env_ends_its_child_with_it(
    run: Path, addresses: Path, tmp_path: Path, command: str, signum: signal.Signals, code: int
) -> None:
    """Held mid-job (the first batch tagged, the output's temporary open), mw-env gets the signal (SIGINT to
    the process group, as a terminal's Ctrl-C): its sentence and 128 + the signal's number, no traceback, no
    process left, no output and no temporary (SIGKILL: the child, told by the kernel, cleans up)."""
    tag, hold = new_tag(), tmp_path / "go"
    out = tmp_path / "tagged.parquet"
    extra = ("--output", str(out)) if command == "predict" else ()
    scratch = tmp_path / "scratch"  # mw-env's TMPDIR: its result folder for the child is made here
    scratch.mkdir()
    env = _env(tag, MW_ENV_TEST_HOLD=f"predict:{hold}", TMPDIR=str(scratch))
    proc = subprocess.Popen(
        _command(run, command, addresses, *extra),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        wait_for(lambda: Path(f"{hold}.waiting").exists() or proc.poll() is not None, 180, "the job mid-way")
        assert proc.poll() is None, proc.communicate()[1]
        if command == "predict":
            assert _no_temporaries(tmp_path), "the output's temporary file is open at the hold"
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=120)
        assert_none_left(tag, within=60)
    finally:
        kill_tagged(tag)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    if signum != signal.SIGKILL:
        name = signal.Signals(signum).name
        assert f"error: train {command} was stopped by {name}" in err and "hint: " in err, err
    assert not out.exists() and _no_temporaries(tmp_path) == []
    # The folder mw-env made for the child's result is gone too (SIGKILL: the child removed it, was left).
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
@pytest.mark.torch
def test_sigterm_to_an_export_ends_it_and_keeps_nothing(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    tag = new_tag()
    proc = subprocess.Popen(
        [
            *MW,
            "train",
            "export",
            "--out-dir",
            str(copy),
            "--venv",
            str(TEST_VENV),
            "--exporter",
            "torchscript",
        ],
        env=_env(tag),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The event: the model's temporary file is being written (the export is under way).
        wait_for(
            lambda: bool(_no_temporaries(copy)) or proc.poll() is not None, 300, "the export's first file"
        )
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert_none_left(tag, within=60)
    finally:
        kill_tagged(tag)
    assert proc.returncode == 143 and "error: the export was stopped by SIGTERM" in err, err
    assert "Traceback" not in err
    assert _no_temporaries(copy) == [] and not list((copy / "export").glob("model-*"))


@pytest.mark.slow
@pytest.mark.torch
def test_sigterm_to_a_weights_export_ends_it_and_keeps_nothing(run: Path, tmp_path: Path) -> None:
    """--format safetensors runs its child as --format onnx does: held with the folder's files written but not
    committed (weights/folder.py's hold), the SIGTERM to mw-env is passed on: 143, the sentence, no process
    left, no folder and no temporary."""
    pytest.importorskip("safetensors")
    tag, hold, out = new_tag(), tmp_path / "go", tmp_path / "weights" / "step-4"
    proc = subprocess.Popen(
        [
            *MW,
            "train",
            "export",
            str(run),
            "--format",
            "safetensors",
            "--out",
            str(out),
            "--venv",
            str(TEST_VENV),
        ],
        env=_env(tag, MW_ENV_TEST_HOLD=f"weights:{hold}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: Path(f"{hold}.waiting").exists() or proc.poll() is not None, 180, "the folder written"
        )
        assert proc.poll() is None, proc.communicate()
        assert _no_temporaries(out.parent), "the folder's temporary is there at the hold"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert_none_left(tag, within=60)
    finally:
        kill_tagged(tag)
    assert proc.returncode == 143, err
    assert (
        "error: the export was stopped by SIGTERM: nothing of it was kept" in err and "Traceback" not in err
    )
    assert not out.exists() and _no_temporaries(out.parent) == []


def test_a_weights_export_stopped_after_its_commit_says_the_folder_is_whole(tmp_path: Path) -> None:
    """A stop in the read-back check (the folder renamed into place): not "nothing kept", the folder named."""
    from mw_env.trainer.weights.export import _stopped

    folder = tmp_path / "step-4"
    got = _stopped(signal.SIGINT, [folder])
    assert got["exit_code"] == 130 and f"after {folder} was written whole" in str(got["error"]), got
    assert "nothing" in str(_stopped(signal.SIGTERM, [])["error"])


@pytest.mark.slow
@pytest.mark.torch
def test_standard_output_that_cannot_take_the_rows(run: Path, addresses: Path, tmp_path: Path) -> None:
    """Closed (refused before the venv's python starts) or full (/dev/full): exit 1, the sentence of
    base/streams.py, never a traceback, no process left. (A reader that left: test_rows_to_a_pipe_whose_...)"""
    tag = new_tag()
    argv = _command(run, "predict", addresses)
    try:
        closed = subprocess.run(
            argv,
            env=_env(tag),
            capture_output=False,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.close(1),
        )
        assert closed.returncode == 1, closed.stderr
        assert "error: cannot write to standard output: it was closed" in closed.stderr
        with open("/dev/full", "w") as full:
            res = subprocess.run(
                argv, env=_env(tag), stdout=full, stderr=subprocess.PIPE, text=True, timeout=300
            )
        assert res.returncode == 1 and "error: cannot write to standard output: No space left" in res.stderr
        assert "Traceback" not in res.stderr + closed.stderr
        assert_none_left(tag, within=60)
    finally:
        kill_tagged(tag)


@pytest.mark.slow
@pytest.mark.torch
def test_a_write_the_kernel_refuses_mid_file_is_exit_1_and_no_file(run: Path, tmp_path: Path) -> None:
    """A real failed write(2), not the seam: RLIMIT_FSIZE (unprivileged, inherited by the venv's python) makes
    the kernel refuse the output's bytes past 64 KiB with EFBIG, as a disk that fills up refuses them with
    ENOSPC. Parquet is written through the writer's file object, so pyarrow's own writes meet it."""
    import random

    rng = random.Random(40)
    source = tmp_path / "many.txt"
    source.write_text(
        "".join(" ".join(f"{rng.getrandbits(64):x}" for _ in range(8)) + "\n" for _ in range(1000))
    )
    out = tmp_path / "x.parquet"
    limit = 64 << 10

    def cap() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill (the shell's `ulimit -f` does this)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    tag = new_tag()
    try:
        res = subprocess.run(
            _command(run, "predict", source, "--output", str(out)),
            env=_env(tag),
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=cap,
        )
    finally:
        kill_tagged(tag)
    assert res.returncode == 1, res.stderr
    assert f"error: cannot write the predictions {out}: File too large" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "no partial output is left" in res.stderr
    assert not out.exists() and _no_temporaries(tmp_path) == []
