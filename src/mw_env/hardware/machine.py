"""The one seam to the machine.

Every probe reads files, environment variables and command output through a `Machine`, never directly.
Its root defaults to `/` and is set with `--root DIR` or `MW_ENV_ROOT`; tests point it at a fake machine
root under tests/fixtures/machines/. Fake roots live in git, which cannot store character devices,
ownership or free-space figures, so a fake root may carry `.mw-env-fake.yaml` describing them:

    user: {uid: 1000, gid: 1000, groups: [1000, 44], name: agent}
    devices:                       # what stat() reports for these paths
      /dev/kfd: {type: char, mode: "0660", uid: 0, gid: 110}
    disk:                          # what disk_usage() reports
      /dev/shm: {total: 67108864, free: 67108864}
      /: {total: 100000000000, free: 50000000000}

Missing files, unreadable files and missing commands are facts (None, an empty list, a result with
`missing=True`), never exceptions.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat as stat_mod
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.userfile import open_regular

FAKE_META = ".mw-env-fake.yaml"
DEFAULT_TIMEOUT = 10.0
_MAX_READ = 1024 * 1024  # larger reads of /proc/sys files fail with ENOMEM
_KINDS = (
    (stat_mod.S_ISCHR, "char"),
    (stat_mod.S_ISBLK, "block"),
    (stat_mod.S_ISDIR, "dir"),
    (stat_mod.S_ISREG, "file"),
)


@dataclass(frozen=True)
class CommandResult:
    """What running one external command gave. `missing` means it was not found on PATH."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    missing: bool = False
    duration_s: float = 0.0
    error: str | None = None  # OSError text when it could not be started at all

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.missing

    def describe(self) -> str:
        """One line for notes and error messages."""
        name = self.argv[0] if self.argv else "?"
        if self.missing:
            return f"{name}: not found on PATH"
        if self.timed_out:
            return f"{name}: timed out after {self.duration_s:.1f}s"
        if self.error:
            return f"{name}: could not start ({self.error})"
        if self.returncode != 0:
            tail = (self.stderr or self.stdout).strip().splitlines()[-1:] or [""]
            return f"{name}: exit {self.returncode} {tail[0]}".rstrip()
        return f"{name}: ok"


@dataclass(frozen=True)
class FileStat:
    """The parts of stat() the checks need; fake roots may override them from their meta file."""

    kind: str  # "char" | "block" | "file" | "dir" | "link" | "other"
    mode: int  # permission bits only, e.g. 0o660
    uid: int
    gid: int
    size: int = 0


@dataclass(frozen=True)
class UserIdentity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str | None = None


@dataclass(frozen=True)
class DiskUsage:
    total: int
    free: int


@dataclass
class Machine:
    """Files under `root`, environment variables and commands with timeouts."""

    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    _meta: dict | None = field(default=None, repr=False)
    # The doctor's areas read the fake meta from a dozen threads at once: one parses, the rest wait for it.
    _meta_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.env = dict(self.env)

    @classmethod
    def from_env(
        cls, root: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
    ) -> Machine:
        """The machine for a CLI invocation: `root`, else MW_ENV_ROOT, else `/`."""
        env = dict(os.environ if env is None else env)
        chosen = root or env.get("MW_ENV_ROOT") or "/"
        return cls(root=Path(chosen), env=env)

    # -- files ------------------------------------------------------------------------------------
    @property
    def is_real(self) -> bool:
        return self.root.resolve() == Path("/")

    def path(self, rel: str | os.PathLike[str]) -> Path:
        """The real path of `rel` (absolute or relative, always taken below the root)."""
        return self.root / str(rel).lstrip("/")

    def inside(self, path: str) -> str | None:
        """The machine's own (root-relative) name for a host path such as programs() gives, None outside it."""
        real = os.path.abspath(path)
        if self.is_real:
            return real
        root = str(self.root.resolve())
        return real[len(root) :] or "/" if real == root or real.startswith(root + os.sep) else None

    def read(self, rel: str | os.PathLike[str], *, max_bytes: int = _MAX_READ) -> str | None:
        """The text of a file, or None when it is missing, unreadable or not a regular file."""
        data = self.read_bytes(rel, max_bytes=max_bytes)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_bytes(self, rel: str | os.PathLike[str], *, max_bytes: int = _MAX_READ) -> bytes | None:
        """At most `max_bytes` of a regular file, or None. A FIFO under a fake root (or a device node) is
        "not available": it is opened non-blocking and refused after fstat, so a read never hangs."""
        try:
            with open_regular(self.path(rel)) as (fd, _st):
                chunks, got = [], 0
                while got < max_bytes:
                    chunk = os.read(fd, max_bytes - got)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
                return b"".join(chunks)
        except (InputError, OSError, ValueError):
            return None

    def exists(self, rel: str | os.PathLike[str]) -> bool:
        return self._meta_device(rel) is not None or os.path.lexists(self.path(rel))

    def is_dir(self, rel: str | os.PathLike[str]) -> bool:
        return self.path(rel).is_dir()

    def listdir(self, rel: str | os.PathLike[str]) -> list[str]:
        """Sorted entry names, [] when the folder is missing or unreadable. Includes meta devices."""
        names: set[str] = set()
        with contextlib.suppress(OSError):
            names.update(os.listdir(self.path(rel)))
        prefix = "/" + str(rel).strip("/") + "/"
        for dev in self._meta_devices():
            if dev.startswith(prefix) and "/" not in dev[len(prefix) :]:
                names.add(dev[len(prefix) :])
        return sorted(names)

    def glob(self, pattern: str) -> list[str]:
        """Absolute (root-relative) paths matching a glob such as `dev/dri/renderD*`, sorted."""
        import fnmatch

        pattern = "/" + pattern.lstrip("/")
        parent, _, leaf = pattern.rpartition("/")
        return [f"{parent}/{n}" for n in self.listdir(parent or "/") if fnmatch.fnmatch(n, leaf)]

    def stat(self, rel: str | os.PathLike[str]) -> FileStat | None:
        """stat() following links; fake roots may describe devices in their meta file."""
        meta = self._meta_device(rel)
        if meta is not None:
            return meta
        try:
            st = os.stat(self.path(rel))
        except OSError:
            return None
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "other")
        return FileStat(
            kind=kind, mode=stat_mod.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, size=st.st_size
        )

    def user(self) -> UserIdentity:
        """Who runs mw-env: the real process, or the user a fake root declares."""
        meta = self._load_meta().get("user")
        if isinstance(meta, dict):
            try:
                uid = int(meta.get("uid", 1000))
                gid = int(meta.get("gid", uid))
                groups = tuple(int(g) for g in meta.get("groups", [gid]))
                name = meta.get("name")
                return UserIdentity(uid=uid, gid=gid, groups=groups, name=None if name is None else str(name))
            except (TypeError, ValueError):
                pass  # a malformed fake user: fall back to the real process
        uid, gid = os.getuid(), os.getgid()
        groups = tuple(sorted({gid, *os.getgroups()}))
        name = self.env.get("USER") or self.env.get("LOGNAME")
        return UserIdentity(uid=uid, gid=gid, groups=groups, name=name)

    def can_access(self, rel: str | os.PathLike[str], *, write: bool = True) -> bool:
        """Whether the current user may open the path for reading (and writing), from its mode bits."""
        st = self.stat(rel)
        if st is None:
            return False
        who = self.user()
        if who.uid == 0:
            return True
        if st.uid == who.uid:
            bits = (st.mode >> 6) & 0o7
        elif st.gid in who.groups:
            bits = (st.mode >> 3) & 0o7
        else:
            bits = st.mode & 0o7
        need = 0o6 if write else 0o4
        return bits & need == need

    def group_name(self, gid: int) -> str | None:
        """The name of a group id according to this machine's etc/group (the container's view)."""
        return self.groups().get(gid)

    def group_id(self, name: str) -> int | None:
        return next((gid for gid, group in self.groups().items() if group == name), None)

    def groups(self) -> dict[int, str]:
        """gid -> name from etc/group under the root."""
        out: dict[int, str] = {}
        for line in (self.read("etc/group") or "").splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and parts[2].strip().isdigit():
                out.setdefault(int(parts[2]), parts[0])
        return out

    def disk_usage(self, rel: str | os.PathLike[str]) -> DiskUsage | None:
        disks = self._load_meta().get("disk") or {}
        key = "/" + str(rel).strip("/")
        if isinstance(disks, dict) and (key in disks or "/" + str(rel).lstrip("/") in disks):
            d = disks.get(key) or disks.get("/" + str(rel).lstrip("/")) or {}
            try:
                return DiskUsage(total=int(d["total"]), free=int(d["free"]))
            except (TypeError, ValueError, KeyError):
                return None  # a malformed fake entry says nothing
        try:
            du = shutil.disk_usage(self.path(rel))
        except OSError:
            return None
        return DiskUsage(total=du.total, free=du.free)

    # -- commands ---------------------------------------------------------------------------------
    def search_path(self) -> list[str]:
        """The folders commands are looked up in. The real machine: its PATH. A fake root runs only its own
        programs, the PATH folders inside the root (tests put its .mw-env-bin/ there), never the host's: the host's
        nvidia-smi, uv or Pythons would make a fake machine's facts depend on the host that reads it."""
        path = [d for d in self.env.get("PATH", os.defpath).split(os.pathsep) if d]
        if self.is_real:
            return path
        root = self.root.resolve()
        return [d for d in path if Path(d).resolve().is_relative_to(root)]

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=os.pathsep.join(self.search_path()))

    def programs(self, pattern: re.Pattern[str]) -> list[str]:
        """Executables on the search path whose names match `pattern`, in PATH order, one path per real file
        (python3 -> python3.12 is one interpreter). Listing runs nothing."""
        found: list[str] = []
        seen: set[str] = set()
        for folder in self.search_path():
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in filter(pattern.match, names):
                path = os.path.join(folder, name)
                real = os.path.realpath(path)
                if real not in seen and os.access(path, os.X_OK) and not os.path.isdir(path):
                    seen.add(real)
                    found.append(path)
        return found

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run a command (never through a shell) and capture its output; never raises."""
        argv = tuple(str(a) for a in argv)
        exe = argv[0] if os.sep in argv[0] else self.which(argv[0])
        if exe is None or not os.path.exists(exe):
            return CommandResult(argv=argv, returncode=None, missing=True)
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [exe, *argv[1:]],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                env=dict(self.env if env is None else env),
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return CommandResult(
                argv=argv,
                returncode=None,
                stdout=_text(exc.stdout),
                stderr=_text(exc.stderr),
                timed_out=True,
                duration_s=time.monotonic() - start,
            )
        except OSError as exc:
            return CommandResult(
                argv=argv, returncode=None, error=str(exc), duration_s=time.monotonic() - start
            )
        return CommandResult(
            argv=argv,
            returncode=proc.returncode,
            stdout=proc.stdout,
            stderr=proc.stderr,
            duration_s=time.monotonic() - start,
        )

    # -- fake-root meta ---------------------------------------------------------------------------
    def _load_meta(self) -> dict:
        # Published whole, once: a placeholder set before the parse let a second thread read "nothing
        # described" (no devices, the real /dev/shm) while the first was still parsing - under load, often.
        meta = self._meta
        if meta is not None:
            return meta
        with self._meta_lock:
            if self._meta is None:
                self._meta = self._parse_meta()
            return self._meta

    def _parse_meta(self) -> dict:
        if self.is_real:
            return {}
        text = self.read(FAKE_META)
        if not text:
            return {}
        from mw_env.base.userfile import load_yaml

        try:
            loaded = load_yaml(text, source=FAKE_META)
        except InputError:
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _meta_devices(self) -> dict[str, dict]:
        devices = self._load_meta().get("devices") or {}
        return devices if isinstance(devices, dict) else {}

    def _meta_device(self, rel: str | os.PathLike[str]) -> FileStat | None:
        spec = self._meta_devices().get("/" + str(rel).lstrip("/"))
        if not isinstance(spec, dict):
            return None
        try:
            return FileStat(
                kind=str(spec.get("type", "char")),
                mode=int(str(spec.get("mode", "0660")), 8),
                uid=int(spec.get("uid", 0)),
                gid=int(spec.get("gid", 0)),
            )
        except (TypeError, ValueError):
            return None  # a malformed fake entry: as if it were not described


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value
