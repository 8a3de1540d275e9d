"""The one way to read a file a user names, and the one way to parse YAML from a user.

A user-supplied path may be a FIFO (open() blocks until a writer appears), /dev/zero (read() never ends),
a directory, a 10 GB file or bytes that are not UTF-8. Every such case is an InputError naming the file,
never a hang, a traceback or unbounded memory: the path is stat()ed, opened with O_NONBLOCK (so a FIFO
cannot block the open), fstat()ed again on the descriptor (the file may have been swapped in between)
and read up to a cap.

YAML from a user (a profile, a trainer config, a `--set` value) goes through `load_yaml`, which maps every
loader failure (syntax, a bad tag such as `!!int x`, nesting so deep it would overflow the stack, an
alias bomb) to an InputError naming the source.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import IO, Any

from mw_env.base.errors import InputError

MiB = 1024 * 1024
# Config files (profiles, trainer configs) are a few KiB; 4 MiB is generous and still cheap to parse.
CONFIG_MAX_BYTES = 4 * MiB
# YAML shapes no config needs: deeper nesting is refused before the composer recurses, more nodes (after
# alias expansion, which is how a "billion laughs" document grows) before a validator walks them.
YAML_MAX_DEPTH = 64
YAML_MAX_NODES = 200_000

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO (named pipe)")."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


@contextmanager
def open_regular(path: str | os.PathLike[str], *, what: str = "file") -> Iterator[tuple[int, os.stat_result]]:
    """An fd open for reading on `path` and its fstat, or InputError when it is missing or not a regular file.

    O_NONBLOCK makes opening a FIFO return at once instead of waiting for a writer; the fstat on the
    descriptor is the check that counts (the path may have been replaced after the first stat)."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise InputError(
            f"cannot read {what} {p}: {exc.strerror or exc}", hint="check the path and its permissions"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(p, what, st.st_mode)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(
            f"cannot read {what} {p}: {exc.strerror or exc}", hint="check the path and its permissions"
        ) from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):
            raise _not_regular(p, what, fst.st_mode)
        yield fd, fst
    finally:
        os.close(fd)


def _not_regular(p: str, what: str, mode: int) -> InputError:
    return InputError(
        f"cannot read {what} {p}: it is {kind_of(mode)}, not a regular file", hint="pass a regular file"
    )


def _read_checked(fd: int, st: os.stat_result, limit: int, path: str | os.PathLike[str], what: str) -> bytes:
    """_read_fd, where a read that fails on a "regular" file of size 0 is bad input: that is a kernel
    pseudo-file (/proc/self/mem: EIO; /proc/PID/... of a process gone: ESRCH), no file a user writes, and
    not a fault of the disk (exit 1 with "check the disk" sent the user to smartctl). A read that fails on a
    file with bytes on disk stays the machine's fault."""
    try:
        return _read_fd(fd, limit)
    except OSError as exc:
        if st.st_size != 0:
            raise
        raise InputError(
            f"cannot read {what} {os.fspath(path)}: it is a kernel pseudo-file, not a regular file "
            f"(reading it fails: {exc.strerror or exc})",
            hint="pass a regular file",
        ) from None


def _read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(MiB, limit - got))  # a regular file never blocks: the others were refused
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_bytes(
    path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = CONFIG_MAX_BYTES
) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError for anything else."""
    with open_regular(path, what=what) as (fd, st):
        if st.st_size > max_bytes:
            raise _too_big(path, what, max_bytes, st.st_size)
        data = _read_checked(fd, st, max_bytes + 1, path, what)  # /proc-style files report size 0
    if len(data) > max_bytes:
        raise _too_big(path, what, max_bytes, None)
    return data


def _too_big(path: str | os.PathLike[str], what: str, limit: int, size: int | None) -> InputError:
    actual = f"{size} bytes" if size is not None else "more"
    return InputError(
        f"{what} {os.fspath(path)} is {actual}; at most {limit} bytes are read",
        hint=f"is this really the {what}? pass a smaller file",
    )


def decode(data: bytes, *, source: str) -> str:
    """UTF-8 text, or InputError naming the source and the byte offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{source}: not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})",
            hint="save the file as UTF-8",
        ) from None


def read_text(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = CONFIG_MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`; InputError for anything else."""
    return decode(read_bytes(path, what=what, max_bytes=max_bytes), source=f"{what} {os.fspath(path)}")


def read_tail(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int) -> tuple[bytes, int]:
    """The last `max_bytes` of a regular file (from a line start when it was cut) and how many bytes were
    skipped before them. For logs, whose end is where the failure is."""
    with open_regular(path, what=what) as (fd, st):
        skipped = max(0, st.st_size - max_bytes)
        if skipped:
            os.lseek(fd, skipped, os.SEEK_SET)
        data = _read_checked(fd, st, max_bytes, path, what)
    if skipped and b"\n" in data:
        cut = data.index(b"\n") + 1  # drop the partial first line
        skipped += cut
        data = data[cut:]
    return data, skipped


def read_stream_tail(stream: IO[Any], *, max_bytes: int, max_total: int) -> tuple[bytes, int, bool]:
    """The last `max_bytes` of a stream (stdin), reading at most `max_total` bytes: (data, skipped, stopped).

    `stopped` is True when the stream had more than `max_total` bytes (stdin from /dev/zero ends here)."""
    from collections import deque

    chunks: deque[bytes] = deque()
    held = total = 0
    stopped = False
    while True:
        if total >= max_total:
            stopped = bool(stream.read(1))
            break
        chunk = stream.read(min(MiB, max_total - total))
        if isinstance(chunk, str):  # a text stream (a test's StringIO, a wrapped stdin)
            chunk = chunk.encode("utf-8", errors="surrogateescape")
        if not chunk:
            break
        chunks.append(chunk)
        held += len(chunk)
        total += len(chunk)
        while held - len(chunks[0]) >= max_bytes:  # whole chunks that fall out of the tail
            held -= len(chunks.popleft())
    data = b"".join(chunks)[-max_bytes:] if held > max_bytes else b"".join(chunks)
    return data, total - len(data), stopped


# -- YAML -------------------------------------------------------------------------------------------------


_RAISE: Any = object()


@lru_cache(maxsize=2)
def _yaml_classes(shipped: bool = False) -> tuple[Any, type[Exception]]:
    """(loader class, the error it raises for nesting too deep); built on first use (yaml is imported lazily).

    `shipped`: for mw-env's own package files (the shipped profiles), libyaml's C parser when PyYAML has it
    (ten times faster: `detect` parses every profile) with the same repeated-key check; their nesting is
    ours and fixed, so the depth bound (a Python composer's) is for what users write."""
    import yaml

    class TooDeep(yaml.composer.ComposerError):
        """Nesting past YAML_MAX_DEPTH: never a "syntax error" a caller may take as a plain string."""

    class StrictKeys(yaml.constructor.SafeConstructor):
        """A repeated key is an error (the constructor half, shared by both loaders)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            # SafeLoader keeps the last of two equal keys silently: `model:` twice would drop the first
            # section. A repeated key is bad input, named with both lines. (`<<` merge keys are flattened
            # by SafeLoader before this runs, so an override through a merge is still allowed.)
            if isinstance(node, yaml.MappingNode):
                own = {id(k) for k, _ in node.value}  # keys written here, not merged in by `<<`
                self.flatten_mapping(node)
                seen: dict[Any, Any] = {}
                for key_node, _value in node.value:
                    if id(key_node) not in own:
                        continue
                    try:
                        key = self.construct_object(key_node, deep=True)
                        hash(key)
                    except Exception:
                        continue  # an unhashable key: SafeLoader's own error says it
                    if key in seen:
                        raise Duplicate(seen[key].start_mark, key_node.start_mark, key)
                    seen[key] = key_node
            return super().construct_mapping(node, deep=deep)

    class BoundedLoader(StrictKeys, yaml.SafeLoader):
        """SafeLoader that refuses nesting deeper than YAML_MAX_DEPTH while composing (the composer
        recurses once per level, so `[[[[...` would otherwise end in RecursionError)."""

        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth += 1
            try:
                if self._depth > YAML_MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise TooDeep(None, None, f"nested deeper than {YAML_MAX_DEPTH} levels", mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    class Duplicate(yaml.constructor.ConstructorError):
        def __init__(self, first: Any, second: Any, key: Any) -> None:
            super().__init__(
                None,
                None,
                f"the key {key!r} appears twice (lines {first.line + 1} and {second.line + 1})",
                second,
            )

    if shipped and getattr(yaml, "__with_libyaml__", False):

        class ShippedLoader(StrictKeys, yaml.CSafeLoader):
            pass

        return ShippedLoader, TooDeep

    return BoundedLoader, TooDeep


def load_yaml(text: str, *, source: str, syntax_fallback: Any = _RAISE, shipped: bool = False) -> Any:
    """Parse YAML from a user; any failure is an InputError that names `source` (a file, or `--set key`).

    `syntax_fallback`, when given, is returned for text that is not YAML syntax at all (a `--set` value
    such as `a: b: c` means that string); tags, nesting and size are checked all the same. `shipped`: a file
    of mw-env's own package (see _yaml_classes)."""
    import yaml

    loader, too_deep = _yaml_classes(shipped)
    try:
        data = yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        if syntax_fallback is not _RAISE and not isinstance(
            exc, (too_deep, yaml.constructor.ConstructorError)
        ):
            return syntax_fallback
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or str(exc).splitlines()[0]
        hint = "keep one of them: a repeated key drops the first" if "appears twice" in problem else None
        raise InputError(
            f"{source}: invalid YAML{where}: {problem}", hint=hint or "fix the YAML syntax"
        ) from None
    except RecursionError:
        raise InputError(f"{source}: YAML nested too deeply", hint="flatten the structure") from None
    except Exception as exc:
        raise InputError(
            f"{source}: invalid YAML: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            hint="fix the value (a tag such as !!int needs a value of that type)",
        ) from None
    check_size(data, source=source)
    return data


def check_size(data: Any, *, source: str) -> None:
    """InputError when parsed config data has more than YAML_MAX_NODES values (aliases expanded), or a
    string that is not text: a `"\\ud800"` escape without the other half of its surrogate pair parses,
    but no path, file or Arrow column can hold it (a traceback far from the line it came from)."""
    # Count nodes as a validator would see them: aliases expanded, so a document that refers to one list a
    # million times is refused here rather than when something walks or prints it.
    count = 0
    stack = [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > YAML_MAX_NODES:
            raise InputError(
                f"{source}: YAML too large (more than {YAML_MAX_NODES} values after expanding aliases)",
                hint="a config needs far fewer values; remove repeated aliases",
            )
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                from mw_env.base.textsafe import safe

                raise InputError(
                    f"{source}: the string {safe(item, limit=80)} holds {item[exc.start]!a}, half of a "
                    "surrogate pair: not text",
                    hint="write the character itself (or, in YAML, its code point: \\U0001F600, not a \\uD83D\\uDE00 pair)",
                ) from None
