"""Writing tagged rows (`mw-env train predict`): JSONL `{"tokens": [...], "tags": [...]}` per row, the training
format, to stdout or a file, or Parquet with the same two columns when the file ends in `.parquet`. No torch.

Rows are written as they are tagged (memory stays flat however long the input). A file goes through the one
atomic writer (base/atomic.py): it is built under a temporary name and appears whole at the end, or not at
all: a full disk, an I/O error, a bad row found late in the input or a stop signal leaves no partial file
and no temporary (the fault seam `MW_ENV_FAULTS` meets these writes from inside, as a real disk does).
Standard output cannot be taken back: rows reach it as they are tagged, and a write that fails there (a
closed stdout, `/dev/full`, a reader that left) is `StdoutFailed`, which the command reports by the
project's rules for stdout (base/streams.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO, TextIO, cast

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

PARQUET_GROUP_ROWS = 16384  # rows per Parquet row group written: bounded memory, readable in parallel


class StdoutFailed(Exception):
    """A write of the rows to standard output failed; `cause` says why (EPIPE: the reader left)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _line(words: Sequence[str], tags: Sequence[str]) -> str:
    return json.dumps({"tokens": list(words), "tags": list(tags)}, ensure_ascii=False) + "\n"


class TaggedWriter:
    """`with TaggedWriter(path) as out: out.write(words, tags) ...`: committed when the block ends without an
    exception, nothing left otherwise. `path` None: JSONL on standard output (fd 1)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.rows = 0
        self._stack = contextlib.ExitStack()
        self._fh: BinaryIO | None = None  # stdout
        self._text: TextIO | None = None  # a JSONL file
        self._parquet: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._pending: tuple[list[list[str]], list[list[str]]] = ([], [])

    def __enter__(self) -> TaggedWriter:
        if self.path is None:
            # Bytes straight to fd 1: sys.stdout may be None (fd 1 closed at start) or a text layer whose
            # last flush at exit would fail again after a failure here.
            self._fh = self._stack.enter_context(open(1, "wb", buffering=1 << 16, closefd=False))
            return self
        from mw_env.base.atomic import atomic_open

        if self.path.suffix.lower() == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            fh = self._stack.enter_context(atomic_open(self.path, "wb"))
            schema = pa.schema([("tokens", pa.list_(pa.string())), ("tags", pa.list_(pa.string()))])
            # Through the writer's file object, so the fault seam (and a real ENOSPC) meets pyarrow's writes.
            self._parquet = pq.ParquetWriter(fh, schema)
            self._schema = schema
        else:
            self._text = cast(TextIO, self._stack.enter_context(atomic_open(self.path, "w")))
        return self

    def write(self, words: Sequence[str], tags: Sequence[str]) -> None:
        try:
            self._write(words, tags)
        except OSError as exc:
            raise self._named(exc) from None

    def _named(self, exc: OSError) -> OSError:
        """A failed write of the file, named by the file the user asked for (pyarrow's and a text layer's
        OSErrors carry no name; the temporary's would mislead)."""
        if self.path is None or exc.filename == str(self.path):
            return exc
        return OSError(exc.errno, exc.strerror or str(exc), str(self.path))

    def _write(self, words: Sequence[str], tags: Sequence[str]) -> None:
        self.rows += 1
        if self._parquet is not None:
            self._pending[0].append(list(words))
            self._pending[1].append(list(tags))
            if len(self._pending[0]) >= PARQUET_GROUP_ROWS:
                self._flush_group()
            return
        if self._text is not None:
            self._text.write(_line(words, tags))
        else:
            self._stdout(_line(words, tags).encode("utf-8"))

    def _stdout(self, data: bytes | None) -> None:
        assert self._fh is not None
        try:
            if data is None:
                self._fh.flush()
            else:
                self._fh.write(data)
        except (OSError, ValueError) as exc:
            cause = exc if isinstance(exc, OSError) else OSError(9, "it is closed")
            _park_stdout()
            raise StdoutFailed(cause) from None

    def _flush_group(self) -> None:
        import pyarrow as pa

        tokens, tags = self._pending
        if tokens and self._parquet is not None:
            self._parquet.write_table(pa.table({"tokens": tokens, "tags": tags}, schema=self._schema))
        self._pending = ([], [])

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if kind is None:
                if self._parquet is not None:
                    self._flush_group()
                    self._parquet.close()  # the footer
                elif self.path is None:
                    self._stdout(None)
        except BaseException as late:
            self._abandon()
            self._stack.__exit__(type(late), late, late.__traceback__)  # the temporary is removed
            if isinstance(late, OSError):
                raise self._named(late) from None
            raise
        if kind is not None:
            self._abandon()
        # A clean end commits the file (atomic_open: fsync, rename); a failure removes the temporary.
        try:
            self._stack.__exit__(kind, exc, tb)
        except OSError as failed:  # the commit itself (the fsync of a full disk, the seam)
            raise self._named(failed) from None

    def _abandon(self) -> None:
        """On a failure: the Parquet writer let go (the temporary file is removed after), and the rows
        already tagged out to stdout where it still takes them (a filter's rows so far, as any filter's);
        where it does not, fd 1 goes to /dev/null so no later flush fails again."""
        if self._parquet is not None:
            with contextlib.suppress(Exception):
                self._parquet.close()
            self._parquet = None
        if self.path is None and self._fh is not None:
            try:
                self._fh.flush()
            except (OSError, ValueError):
                _park_stdout()


def _park_stdout() -> None:
    """After a failed write: fd 1 onto /dev/null, so no later flush (the interpreter's at exit) fails again."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
