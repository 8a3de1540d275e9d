"""A wheel's file names without downloading the wheel, and the GPU archs they show.

A wheel is a zip: its central directory, at the end of the file, lists every member. Over HTTP the end is read
with range requests (the index serves multi-GB torch wheels; the directory is a few MB), a local file (a
wheelhouse, a recorded snapshot) is opened directly. pytorch.org's bundling ROCm wheels copy into
`torch/lib/{rocblas,hipblaslt}/library/` only the Tensile files of the archs they were built for (the release's
`.ci/manywheel/build_rocm.sh` greps them by PYTORCH_ROCM_ARCH), so those names are the wheel's own arch list.
`mw-env profiles --check` uses it to confirm a row's inferred arch list.
"""

from __future__ import annotations

import io
import re
import urllib.parse
import zipfile
from pathlib import Path

MAX_DIRECTORY = 64 * 1024 * 1024  # a torch wheel's central directory is a few MB; more is not a wheel we read
_ARCH_FILE = re.compile(r"^torch/lib/(?:rocblas|hipblaslt)/library/(?:.*/)?[^/]*?(gfx[0-9a-f]{3,4})", re.I)


class WheelFilesError(Exception):
    """The wheel's file list could not be read (the server, the file or the zip said why)."""


class _Ranged(io.RawIOBase):
    """A read-only file over HTTP range requests: what zipfile needs to read a central directory."""

    def __init__(self, url: str, *, timeout: float) -> None:
        self.url, self.timeout, self.pos, self.requests = url, timeout, 0, 0
        self.size = self._size()

    def _get(self, first: int, last: int) -> tuple[bytes, str]:
        import urllib.error
        import urllib.request

        self.requests += 1
        if self.requests > 8:  # EOCD, perhaps the zip64 records, the directory: never a crawl of the file
            raise WheelFilesError(f"{self.url}: too many reads for a file list")
        req = urllib.request.Request(
            self.url, headers={"Range": f"bytes={first}-{last}", "User-Agent": "mw-env"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                if resp.status != 206:
                    raise WheelFilesError(f"{self.url}: the server does not answer range requests")
                return resp.read(last - first + 1), resp.headers.get("Content-Range", "")
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise WheelFilesError(f"{self.url}: {getattr(exc, 'reason', exc)}") from None

    def _size(self) -> int:
        _data, content_range = self._get(0, 0)
        m = re.search(r"/(\d+)\s*$", content_range)
        if m is None:
            raise WheelFilesError(f"{self.url}: no size in the server's Content-Range")
        return int(m.group(1))

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        n = min(n, self.size - self.pos)
        if n <= 0:
            return b""
        if n > MAX_DIRECTORY:
            raise WheelFilesError(f"{self.url}: a read of {n} bytes is more than a file list")
        data, _ = self._get(self.pos, self.pos + n - 1)
        self.pos += len(data)
        return data


def wheel_names(url: str, *, timeout: float = 10.0) -> list[str]:
    """Every member name of the wheel at `url` (http(s), file://, or a path). Raises WheelFilesError."""
    try:
        if url.startswith(("http://", "https://")):
            # Unbuffered: zipfile's few seeks and reads (the end record, the zip64 locator, the directory) are
            # one request each.
            with zipfile.ZipFile(_Ranged(url, timeout=timeout)) as zf:
                return zf.namelist()
        path = (
            Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
            if url.startswith("file://")
            else Path(url)
        )
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise WheelFilesError(f"{url}: not a readable wheel ({exc})") from None


def archs_in(names: list[str]) -> tuple[str, ...]:
    """The gfx targets a bundling ROCm wheel's Tensile files name ("" = none: not a bundling wheel)."""
    return tuple(sorted({m.group(1).lower() for n in names if (m := _ARCH_FILE.match(n))}))
