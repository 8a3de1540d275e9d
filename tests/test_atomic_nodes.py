"""Writing never destroys what a path names (issue 29, class 1).

Every file mw-env writes goes through mw_env/base/atomic.py: the atomic writers (a temporary file renamed over the
path) and `open_regular`/`open_append` (logs and lock files written in place). Each refuses a path that names a
character device, a FIFO, a socket or a folder with InputError (exit 2), and leaves the node as it was. The
tests below run every writer of base/atomic.py against each kind of node, the commands that take an output path
(`lock --output`, `host-commands --out`, `train export --out`) end to end, and check on the source that no
module writes a file any other way.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mw_env.base import atomic
from mw_env.base.errors import InputError
from mw_env.cli import main

SRC = Path(__file__).resolve().parents[1] / "src" / "mw_env"
MACHINES = Path(__file__).parent / "fixtures" / "machines"
KINDS = ("character device", "FIFO", "socket", "directory")


@contextlib.contextmanager
def node(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A node of `kind` at tmp_path/"out.txt", and the test that it is still that node afterwards."""
    path = tmp_path / "out.txt"
    held: socket.socket | None = None
    if kind == "character device":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers, as the issue's
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD (root in the container)")
        check = stat.S_ISCHR
    elif kind == "FIFO":
        os.mkfifo(path)
        check = stat.S_ISFIFO
    elif kind == "socket":
        monkeypatch.chdir(tmp_path)  # AF_UNIX names are capped at 108 bytes: bind the short relative name
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held.bind(path.name)
        check = stat.S_ISSOCK
    else:
        path.mkdir()
        (path / "keep").write_text("kept\n")
        check = stat.S_ISDIR
    try:
        yield path
    finally:
        if held is not None:
            held.close()
    assert check(os.lstat(path).st_mode), f"the {kind} at {path} was replaced"
    if kind == "directory":
        assert (path / "keep").read_text() == "kept\n"
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name], "a temporary file was left"


def _open_regular(p: Path) -> None:
    os.close(atomic.open_regular(p))


def _atomic_path(p: Path) -> None:
    with atomic.atomic_path(p) as tmp:
        tmp.write_text("x")


def _atomic_open(p: Path) -> None:
    with atomic.atomic_open(p, "wb") as fh:
        fh.write(b"x")


def _open_append(p: Path) -> None:
    with atomic.open_append(p) as fh:
        fh.write("x\n")


# Every function of base/atomic.py that writes a file; test_every_writer_of_atomic_is_covered keeps this whole.
WRITERS: dict[str, Callable[[Path], None]] = {
    "write_text_atomic": lambda p: atomic.write_text_atomic(p, "x"),
    "write_bytes_atomic": lambda p: atomic.write_bytes_atomic(p, b"x"),
    "write_json_atomic": lambda p: atomic.write_json_atomic(p, {"x": 1}),
    "atomic_open": _atomic_open,
    "atomic_path": _atomic_path,
    "open_regular": _open_regular,
    "open_append": _open_append,
}


def _atomic_dir(p: Path) -> None:
    with atomic.atomic_dir(p) as tmp:
        (tmp / "file").write_text("x")


# Writers of a whole folder: a folder is their target, so they replace one (whole) and refuse the other nodes.
FOLDER_WRITERS: dict[str, Callable[[Path], None]] = {"atomic_dir": _atomic_dir}


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "directory"])
def test_a_folder_writer_refuses_a_node_and_replaces_a_folder_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    with node(tmp_path, kind, monkeypatch) as path, pytest.raises(InputError, match="regular file"):
        _atomic_dir(path)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "old").write_text("old")
    _atomic_dir(folder)
    assert [p.name for p in folder.iterdir()] == ["file"]
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_refuses_a_node_that_is_not_a_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str, kind: str
) -> None:
    with node(tmp_path, kind, monkeypatch) as path, pytest.raises(InputError) as caught:
        WRITERS[writer](path)
    err = caught.value
    assert err.exit_code == 2
    words = {"character device": "a character device", "FIFO": "a FIFO", "socket": "a socket"}
    assert f"{path} is {words.get(kind, 'a directory')}" in err.message and "regular file" in err.message
    assert err.hint and "does not exist yet or is a regular file" in err.hint


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_still_writes_a_new_file_and_over_a_regular_one(tmp_path: Path, writer: str) -> None:
    new = tmp_path / "sub" / "new.txt" if writer.startswith(("write", "atomic")) else tmp_path / "new.txt"
    WRITERS[writer](new)
    assert new.is_file()
    old = tmp_path / "old.txt"
    old.write_text("before")
    WRITERS[writer](old)
    assert old.is_file()
    # A dangling link is a name the writer may create, as it was before.
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "absent.txt")
    WRITERS[writer](link)
    assert link.exists()


def test_a_link_to_a_device_is_refused_as_the_device(tmp_path: Path) -> None:
    link = tmp_path / "out.txt"
    link.symlink_to("/dev/null")
    with pytest.raises(InputError, match="is a character device"):
        atomic.write_text_atomic(link, "x")
    assert link.is_symlink() and os.readlink(link) == "/dev/null"


@functools.cache
def _trees() -> dict[str, ast.Module]:
    """Every module of src/mw_env, parsed once for the tests below."""
    return {m.relative_to(SRC).as_posix(): ast.parse(m.read_text()) for m in sorted(SRC.rglob("*.py"))}


def test_every_writer_of_atomic_is_covered() -> None:
    """A new writer in base/atomic.py joins WRITERS (and so the node tests); every caller uses only these."""
    tree = _trees()["base/atomic.py"]
    helpers = {
        "fault_for",
        "check_faults",
        "temporary_name",
        "fsync_dir",
        "node_kind",
        "refuse_special",
        "sweep_stale_dirs",
    }
    public = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    assert public - helpers == set(WRITERS) | set(FOLDER_WRITERS)
    for module, parsed in _trees().items():
        for n in ast.walk(parsed):
            if isinstance(n, ast.ImportFrom) and n.module == "mw_env.base.atomic":
                assert {a.name for a in n.names} <= set(WRITERS) | set(FOLDER_WRITERS) | helpers, module


# Writes outside base/atomic.py, each with why it cannot name a user's node: a temporary path that
# atomic_path handed out, a folder the writer has just created, a test hook's marker.
ALLOWED = {
    ("trainer/export/onnx_export.py", "write_bytes"): "a temporary path from atomic_path",
    ("trainer/export/onnx_export.py", "write_text"): "a temporary path from atomic_path",
    ("trainer/mlflow_model.py", "write_text"): "a folder it has just created (mkdir without exist_ok)",
    ("venv/lock/make.py", "write_text"): "a tempfile.TemporaryDirectory of its own",
    ("trainer/lifecycle.py", "touch"): "MW_ENV_TEST_HOLD, the tests' hook",
    ("trainer/__main__.py", "touch"): "MW_ENV_STARTED_FILE, a marker the launcher names",
    ("provision/state.py", "os.open"): "its own S_ISREG check (the bootstrap lock)",
    ("base/streams.py", "open('w')"): "fd 2, the process's own stderr, not a path",
    ("trainer/tagout.py", "open('wb')"): "fd 1, the process's own stdout (predict's rows), not a path",
    ("trainer/predict.py", "write_text"): "--result: a file in the caller's own tempfile.TemporaryDirectory",
    ("trainer/weights/folder.py", "write_text"): "a temporary folder from atomic_dir",
    ("trainer/weights/folder.py", "write_bytes"): "a temporary folder from atomic_dir",
}


def _writes(tree: ast.AST) -> Iterator[str]:
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes", "touch"):
            yield f.attr
        elif isinstance(f, ast.Attribute) and f.attr == "open" and isinstance(f.value, ast.Name):
            if f.value.id == "os" and "O_CREAT" in ast.dump(n):
                yield "os.open"
        elif (isinstance(f, ast.Name) and f.id == "open") or (
            isinstance(f, ast.Attribute) and f.attr == "open"
        ):
            modes = [a.value for a in n.args[1:2] if isinstance(a, ast.Constant)]
            modes += [
                k.value.value for k in n.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)
            ]
            if any(isinstance(m, str) and set(m) & set("wax+") for m in modes):
                yield f"open({modes[0]!r})"


def test_no_module_writes_a_file_but_through_atomic() -> None:
    found = set()
    for rel, parsed in _trees().items():
        if rel != "base/atomic.py":
            found |= {(rel, w) for w in _writes(parsed)}
    assert found - set(ALLOWED) == set(), "write through mw_env.base.atomic (or say here why it is safe)"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("kind", KINDS)
def test_the_commands_with_an_output_path_refuse_each_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "in.txt").write_text("12 Oak Street\n")
    predict = ("train", "predict", str(tmp_path / "run"), "--input", str(tmp_path / "in.txt"))
    commands = [
        ("host-commands", "--root", str(MACHINES / "incus-780m-no-kfd"), "--out"),
        ("lock", "--venv", str(tmp_path / "venv"), "--output"),
        ("train", "export", str(tmp_path / "run"), "--venv", str(tmp_path / "venv"), "--out"),
        (*predict, "--venv", str(tmp_path / "venv"), "--output"),
    ]
    for argv in commands:
        with node(tmp_path, kind, monkeypatch) as path:
            code, err = _cli(capsys, *argv, str(path))
        assert code == 2, (argv, err)
        lines = err.splitlines()
        assert lines[0].startswith("error: ") and lines[1].startswith("hint: "), (argv, err)
        assert "out.txt" in lines[0] and "Traceback" not in err
        if kind == "directory":
            (path / "keep").unlink()
            path.rmdir()
        else:
            path.unlink()
