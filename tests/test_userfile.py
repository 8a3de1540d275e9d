"""mw_env.base.userfile (bounded non-blocking reads, the YAML entry point) and mw_env.base.textsafe (escape, cap, redact)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.base.textsafe import redact, safe, safe_message
from mw_env.base.userfile import load_yaml, read_bytes, read_stream_tail, read_tail, read_text
from mw_env.hardware.machine import Machine


def test_read_text_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"pipe\.yaml: it is a FIFO"):
        read_text(fifo, what="profile")  # returns at once: O_NONBLOCK, then fstat
    with pytest.raises(InputError, match="character device"):
        read_text("/dev/zero", what="config")
    with pytest.raises(InputError, match="directory"):
        read_text(tmp_path, what="config")
    with pytest.raises(InputError, match=r"cannot read config .*nope"):
        read_text(tmp_path / "nope", what="config")


def test_read_text_caps_the_size_and_names_the_first_bad_byte(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="101 bytes; at most 100"):
        read_bytes(big, what="config", max_bytes=100)
    assert read_bytes(big, max_bytes=101) == b"x" * 101
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"ok: M\xfcnchen\n")
    with pytest.raises(InputError, match=r"config .*bad\.yaml: not UTF-8 text \(byte 5: b'\\xfc'\)"):
        read_text(bad, what="config")


def test_read_tail_keeps_the_end_from_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    data, skipped = read_tail(log, max_bytes=100)
    assert data.startswith(b"line ") and data.endswith(b"line 999\n") and len(data) <= 100
    assert skipped + len(data) == log.stat().st_size


def test_read_stream_tail_stops_an_endless_stream() -> None:
    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            return b"z" * max(n, 1)

    data, skipped, stopped = read_stream_tail(Endless(), max_bytes=10, max_total=5_000_000)
    assert data == b"z" * 10 and skipped == 5_000_000 - 10 and stopped
    data, skipped, stopped = read_stream_tail(io.BytesIO(b"abc\ndef\n"), max_bytes=4, max_total=100)
    assert (data, skipped, stopped) == (b"def\n", 4, False)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("[" * 5000, "nested deeper than 64 levels"),
        ("a: !!int x", "ValueError"),
        ("a: !!python/object:os.system {}", "could not determine a constructor"),
        ("a: [1, 2", "invalid YAML at line 1"),
        (None, "too large"),  # the alias bomb below
    ],
)
def test_load_yaml_maps_every_failure_to_an_input_error(text: str | None, expect: str) -> None:
    if text is None:  # "billion laughs": each level refers twice to the one before, 10 * 2**20 values
        levels = ["l0: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
        levels += [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, 21)]
        text = "\n".join(levels)
    with pytest.raises(InputError, match=expect) as info:
        load_yaml(text, source="profile p.yaml")
    assert info.value.message.startswith("profile p.yaml")


def test_load_yaml_syntax_fallback_only_for_plain_syntax() -> None:
    assert load_yaml("a: b: c", source="--set k", syntax_fallback="a: b: c") == "a: b: c"
    with pytest.raises(InputError):
        load_yaml("!!int x", source="--set k", syntax_fallback="!!int x")
    with pytest.raises(InputError):
        load_yaml("[" * 100, source="--set k", syntax_fallback="raw")
    assert load_yaml("[1, {a: 2}]", source="x") == [1, {"a": 2}]


def test_machine_read_of_a_fifo_is_not_available(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    os.mkfifo(tmp_path / "proc" / "meminfo")
    (tmp_path / "big").write_bytes(b"y" * 5000)
    m = Machine(root=tmp_path, env={})
    assert m.read("proc/meminfo") is None and m.read_bytes("proc/meminfo") is None
    assert m.read("big", max_bytes=10) == "y" * 10


def test_machine_tolerates_a_broken_fake_meta_file(tmp_path: Path) -> None:
    (tmp_path / ".mw-env-fake.yaml").write_text(
        "user: {uid: abc}\ndevices:\n  /dev/kfd: {mode: zz}\ndisk:\n  /: {total: x, free: 1}\n"
    )
    m = Machine(root=tmp_path, env={})
    assert m.user().uid == os.getuid() and m.stat("/dev/kfd") is None
    assert m.disk_usage("/") is None


def test_fake_meta_read_by_a_second_thread_during_the_parse_is_the_described_one(
    tmp_path: Path, monkeypatch
) -> None:
    """The doctor's areas read the fake meta from many threads at once. A thread that arrived while the first
    was still parsing it read an empty description (the real /dev/shm, no device nodes): the doctor test of a
    64 MiB /dev/shm failed under load. Here the second reader arrives while the parse is held."""
    import threading

    import mw_env.base.userfile as userfile

    (tmp_path / ".mw-env-fake.yaml").write_text("disk:\n  /dev/shm: {total: 67108864, free: 67108864}\n")
    m = Machine(root=tmp_path, env={})
    parsing, release, second_waits = threading.Event(), threading.Event(), threading.Event()
    real_load = userfile.load_yaml

    def held_load(text: str, **kw: object) -> object:
        parsing.set()
        assert release.wait(60), "the test never released the parse"
        return real_load(text, **kw)  # type: ignore[arg-type]

    class SeenLock:
        """The machine's lock, telling the test when a second reader queues on it."""

        def __init__(self) -> None:
            self.lock, self.entered = threading.Lock(), 0

        def __enter__(self) -> None:
            self.entered += 1
            if self.entered > 1:
                second_waits.set()
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    monkeypatch.setattr(userfile, "load_yaml", held_load)
    m._meta_lock = SeenLock()  # type: ignore[assignment]
    seen: dict[str, object] = {}

    def second() -> None:
        seen["du"] = m.disk_usage("/dev/shm")
        second_waits.set()  # done without waiting: the bug (it read the placeholder)

    first = threading.Thread(target=m.disk_usage, args=("/dev/shm",))
    first.start()
    assert parsing.wait(60)
    reader = threading.Thread(target=second)
    reader.start()
    assert second_waits.wait(60)
    release.set()
    first.join(60)
    reader.join(60)
    du = seen["du"]
    assert du is not None and du.total == 64 * 1024**2  # type: ignore[attr-defined]


def test_safe_escapes_controls_and_caps() -> None:
    assert safe("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert safe("x\u202ey") == "x\\u202ey"  # a bidi override would reorder what the terminal shows
    assert safe("\x9b2J") == "\\x9b2J"  # C1 CSI
    assert safe("é ok") == "é ok"
    assert safe("a" * 600) == "a" * 500 + "… (100 more)"
    assert safe("line1\nline2", newlines=True) == "line1\nline2" and safe("l1\nl2") == "l1\\nl2"


def test_redact_hides_url_credentials() -> None:
    assert redact("https://user:TOKEN@host/simple") == "https://user:***@host/simple"
    assert (
        redact("see https://TOKEN@host/x and http://a:b@c/") == "see https://***@host/x and http://a:***@c/"
    )
    assert redact("user@example.com https://host/x") == "user@example.com https://host/x"
    assert "TOKEN" not in safe_message("failed: https://u:TOKEN@h/ \x1b[2J")


def test_a_token_in_a_user_profiles_index_url_is_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from mw_env.cli import main

    shipped = Path(__file__).resolve().parents[1] / "src" / "mw_env" / "profiles" / "sources.yaml"
    folder = tmp_path / "profiles"
    folder.mkdir()
    # A mirror with credentials in its URL, the documented way: the user's own sources.yaml replaces the
    # shipped `cpu` entry (the shipped cpu profile names that id).
    (cpu,) = [s for s in yaml.safe_load(shipped.read_text())["sources"] if s["id"] == "cpu"]
    cpu["index_url"] = "https://me:S3CRET@mirror.example/cpu"
    (folder / "sources.yaml").write_text(yaml.safe_dump({"sources": [cpu]}))
    root = Path(__file__).resolve().parent / "fixtures" / "machines" / "cpu-only"
    for args in (["detect", "--json"], ["detect"], ["profiles", "cpu"], ["profiles", "--json"]):
        extra = ["--root", str(root)] if args[0] == "detect" else []
        assert main([*args, *extra, "--profiles-dir", str(folder)]) == 0
        out, err = capsys.readouterr()
        assert "S3CRET" not in out + err and "me:***@mirror.example" in out, args


def test_bounded_makes_every_string_of_json_data_safe() -> None:
    from mw_env.base.textsafe import bounded

    data = {"event": "step", "reason": "\x1b[2J" + "x" * 1000, "n": [1, "\x07"], "ok": 1.5}
    out = bounded(data)
    assert (
        out["reason"].startswith("\\x1b[2J") and out["reason"].endswith("more)") and len(out["reason"]) < 520
    )
    assert out["n"] == [1, "\\x07"] and out["ok"] == 1.5 and out["event"] == "step"


@pytest.mark.parametrize("shipped", [False, True])
def test_a_repeated_key_is_refused_by_both_loaders(shipped):
    """The shipped profiles' fast (libyaml) loader keeps the repeated-key rule of the users' loader."""
    from mw_env.base.userfile import load_yaml

    with pytest.raises(InputError) as info:
        load_yaml("model:\n  d: 1\nmodel:\n  d: 2\n", source="profile x.yaml", shipped=shipped)
    assert "the key 'model' appears twice (lines 1 and 3)" in info.value.message
    assert load_yaml("a: [1, 2]\nb: {c: 3}\n", source="x", shipped=shipped) == {"a": [1, 2], "b": {"c": 3}}


@pytest.mark.parametrize(
    "text",
    ['out: "/tmp/x\\ud800"', 'labels: [O, "B-\\udfff"]', '"k\\ud83d": 1', 'emoji: "\\ud83d\\ude00"'],
    ids=["value", "in-a-list", "key", "a-pair-yaml-does-not-join"],
)
def test_a_lone_surrogate_escape_is_not_text(text: str) -> None:
    """Issue 22 (a variant of cases 3 and 8): `"\\ud800"` parses as YAML but no path, file or Arrow column can
    hold it; refused naming the source, never a UnicodeEncodeError later."""
    with pytest.raises(InputError, match="half of a surrogate pair: not text") as info:
        load_yaml(text, source="config c.yaml")
    assert info.value.message.startswith("config c.yaml") and info.value.hint
    assert load_yaml('emoji: "\\U0001F600 \\u00e9"', source="x") == {"emoji": "\U0001f600 \u00e9"}


@pytest.mark.parametrize(
    "text",
    ['{"a": "\\ud800"}', '{"a": ["x\\uDFFFy"]}', '{"\\udc80": 1}', b'{"a": "\\ud800"}'],
    ids=["value", "in-a-list", "key", "bytes"],
)
def test_json_with_a_lone_surrogate_escape_is_refused(text: str | bytes) -> None:
    from mw_env.base.userjson import NotText, json_refusal, load_json, loads

    with pytest.raises(NotText) as info:
        loads(text)
    assert "surrogate pair: not text" in json_refusal(info.value)
    assert loads('{"a": "\\ud83d\\ude00 \\u00e9"}') == {"a": "\U0001f600 \u00e9"}  # a pair is one character
    if isinstance(text, str):
        with pytest.raises(InputError, match=r"run\.json: not valid JSON .*surrogate pair"):
            load_json(text, source="run.json")
