"""Seeded mutation for the fuzz suite, and the one oracle every case must satisfy.

The oracle (`run_cli`): the command returns one of the documented exit codes (0 ok, 1 failed, 2 bad input),
raises nothing but what the CLI itself turns into `error:`/`hint:` (any other exception fails the test with
its traceback: that IS the bug), and finishes within a deadline (SIGALRM raises a BaseException that no
`except Exception` in the code under test can swallow, so a hang fails the test instead of the CI job).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

DOCUMENTED = (0, 1, 2)
# A hang guard, not a speed check: generous enough that a cold torch import on a machine at load 15+ (a
# fuzz case's first read imports it) stays far inside it, short enough that a real hang ends the case.
DEADLINE_S = 120

# Things that broke something somewhere (issue 11) or are known parser edge cases.
NASTY: tuple[bytes, ...] = (
    b"[" * 5000,
    b"{" * 3000,
    b"- " * 2000 + b"x",
    b"!!int x",
    b"!!float abc",
    b"!!binary ~~~~",
    b"!!timestamp 2020-13-45",
    b"!!python/object:os.system {}",
    b"&a [*a]",
    b"*undefined",
    b"<<: *nowhere",
    b"\x00",
    b"\xff\xfe\xfa",
    b"\xc3",
    b"\x1b]0;pwned\x07\x1b[2J",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"9" * 400,
    b"1e999",
    b".nan",
    b"-.inf",
    b"~",
    b"''",
    b'"unterminated',
    b": : :",
    b"? complex key",
    b"\t\t",
    b"\r\n",
    "\u202e".encode(),  # RIGHT-TO-LEFT OVERRIDE
    b"https://user:T0KEN@example.invalid/x",
)


class Hang(BaseException):
    """The deadline passed: the command under test hangs."""


@contextlib.contextmanager
def deadline(seconds: int = DEADLINE_S) -> Iterator[None]:
    def fire(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds}s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(
    args: list[str],
    capsys: pytest.CaptureFixture[str],
    *,
    stdin: bytes | None = None,
    documented: tuple[int, ...] = DOCUMENTED,
) -> tuple[int, str, str]:
    """`mw-env ARGS` in this process under the oracle; (exit code, stdout, stderr). `documented`: the
    command's own exit codes where it has more (status and watch: 10-17, one per anomaly)."""
    import io
    import sys

    from mw_env.cli import main

    capsys.readouterr()
    old_stdin = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
    try:
        with deadline():
            rc = main(args)
    finally:
        sys.stdin = old_stdin
    out, err = capsys.readouterr()
    assert rc in documented, (args, rc, err[-2000:])
    assert "Traceback" not in err, (args, err[-2000:])
    if rc == 2 and "Usage:" not in err:
        assert err.startswith("error: ") or "\nerror: " in err, (args, err[-2000:])
    return rc, out, err


def mutate(rng: random.Random, data: bytes, *, rounds: int | None = None) -> bytes:
    """A few random edits of `data`: byte flips, deleted/duplicated lines, NASTY insertions, truncation."""
    for _ in range(rounds if rounds is not None else rng.randint(1, 4)):
        op = rng.randrange(7)
        if not data:
            data = rng.choice(NASTY)
            continue
        at = rng.randrange(len(data))
        if op == 0:
            data = data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
        elif op == 1:
            lines = data.split(b"\n")
            del lines[rng.randrange(len(lines))]
            data = b"\n".join(lines)
        elif op == 2:
            lines = data.split(b"\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            data = b"\n".join(lines)
        elif op in (3, 4):
            data = data[:at] + rng.choice(NASTY) + data[at:]
        elif op == 5:
            # Replace a value: everything after the next ': ' on this line.
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end
            line = data[start:end]
            if b": " in line:
                key = line.split(b": ", 1)[0]
                data = data[:start] + key + b": " + rng.choice(NASTY) + data[end:]
        else:
            data = data[:at]
    return data


def cases(seed: int, n: int) -> list[random.Random]:
    """`n` independent generators from one seed: a failure names its case index, so it can be replayed.

    MW_FUZZ_ROUND=k (default 0) draws another set of cases: CI runs round 0; a longer hunt runs more rounds."""
    offset = int(os.environ.get("MW_FUZZ_ROUND", "0")) * 7_919
    return [random.Random(seed * 1_000_003 + offset + i) for i in range(n)]


def files_under(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and ".mw-env-bin" not in p.parts
    )
