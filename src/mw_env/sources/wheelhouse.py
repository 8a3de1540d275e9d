"""Where packages come from: find-links folders, indexes and constraints, as pip and uv users set them.

Sources, highest first: command-line options; UV_* variables (uv reads them itself, we only need to
know them); PIP_* variables; pip's configuration files (global, user, PIP_CONFIG_FILE; [global] then
[install]). pip settings are translated into uv arguments because bootstrap installs with uv but a
user who set PIP_INDEX_URL or a pip.conf find-links expects them honoured.
"""

from __future__ import annotations

import configparser
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from mw_env.profiles.model import has_local_tag


@dataclass(frozen=True)
class Sources:
    """Package sources in effect for this bootstrap, and where each came from."""

    find_links: tuple[str, ...] = ()
    index_url: str | None = None  # the user's default index (None: uv's default, PyPI)
    extra_index_urls: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()  # the user's own pip constraint files (kept alongside the pin)
    uv_constraints: tuple[str, ...] = ()  # the user's own UV_CONSTRAINT files (uv applies them itself)
    uv_native: tuple[str, ...] = ()  # UV_* variables set; uv applies those itself
    no_index: bool = False  # PIP_NO_INDEX / UV_NO_INDEX / pip.conf no-index: find-links only
    origins: dict[str, str] = field(default_factory=dict)  # value -> "PIP_FIND_LINKS", "/etc/pip.conf", ...

    def uv_args(self, *, indexes: bool = True) -> list[str]:
        """uv arguments for the pip-side settings (uv already reads its own UV_* variables). `indexes=False`:
        without the index ones (the torch step writes them into its own uv configuration)."""
        args: list[str] = ["--no-index"] if self.no_index else []
        for link in self.find_links:
            args += ["--find-links", link]
        if not indexes:
            return args
        if self.index_url:
            args += ["--default-index", self.index_url]
        for url in self.extra_index_urls:
            args += ["--index", url]
        return args


def _split(value: str | None) -> list[str]:
    return [v for v in re.split(r"[\s,]+", value or "") if v] if value else []


def pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """pip's config files in the order pip merges them (later wins), excluding the site file."""
    files: list[Path] = []
    xdg_dirs = env.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files += [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(":") if d]
    files.append(Path("/etc/pip.conf"))
    home = Path(env.get("HOME") or Path.home())
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def read_pip_config(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(key -> value, key -> file it came from) for the keys bootstrap cares about."""
    if env.get("PIP_CONFIG_FILE") == os.devnull or env.get("PIP_ISOLATED"):
        return {}, {}
    values: dict[str, str] = {}
    origin: dict[str, str] = {}
    for path in pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue  # pip itself would complain; a broken pip.conf must not stop bootstrap
        for section in ("global", "install"):
            if not parser.has_section(section):
                continue
            for key in ("find-links", "index-url", "extra-index-url", "constraint", "no-index"):
                if parser.has_option(section, key):
                    values[key] = parser.get(section, key)
                    origin[key] = str(path)
    return values, origin


def discover(*, env: Mapping[str, str], find_links: Sequence[str] = ()) -> Sources:
    """The sources a user of pip and uv on this machine would expect bootstrap to use."""
    conf, conf_origin = read_pip_config(env)
    origins: dict[str, str] = {}
    links: list[str] = []

    def add(values: list[str], origin: str) -> None:
        for v in values:
            if v not in links:
                links.append(v)
                origins[v] = origin

    add(list(find_links), "--find-links")
    add(_split(env.get("UV_FIND_LINKS")), "UV_FIND_LINKS")
    add(_split(env.get("PIP_FIND_LINKS")), "PIP_FIND_LINKS")
    if "PIP_FIND_LINKS" not in env and "find-links" in conf:
        add(_split(conf["find-links"]), conf_origin["find-links"])

    uv_native = tuple(
        k
        for k in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")
        if env.get(k)
    )
    index_url: str | None = None
    extra: list[str] = []
    # uv's own variables win (uv applies them); pip's are translated only when uv has none.
    if not (env.get("UV_INDEX_URL") or env.get("UV_DEFAULT_INDEX")):
        index_url = env.get("PIP_INDEX_URL") or conf.get("index-url") or None
        if index_url:
            origins[index_url] = "PIP_INDEX_URL" if env.get("PIP_INDEX_URL") else conf_origin["index-url"]
    if not (env.get("UV_EXTRA_INDEX_URL") or env.get("UV_INDEX")):
        raw = env.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url")
        extra = _split(raw)
        for url in extra:
            origins[url] = (
                "PIP_EXTRA_INDEX_URL" if env.get("PIP_EXTRA_INDEX_URL") else conf_origin["extra-index-url"]
            )
    constraints = _split(env.get("PIP_CONSTRAINT")) or _split(conf.get("constraint"))
    raw_no_index = env.get("UV_NO_INDEX") or env.get("PIP_NO_INDEX") or conf.get("no-index") or ""
    return Sources(
        find_links=tuple(links),
        index_url=index_url,
        extra_index_urls=tuple(extra),
        constraints=tuple(c for c in constraints if "mw-env-constraints" not in c),
        uv_constraints=tuple(c for c in _split(env.get("UV_CONSTRAINT")) if "mw-env-constraints" not in c),
        uv_native=uv_native,
        no_index=raw_no_index.strip().lower() in ("1", "true", "yes", "on"),
        origins=origins,
    )


@dataclass(frozen=True)
class WheelFile:
    """A wheel found in a wheelhouse."""

    path: Path
    name: str
    version: str
    python_tags: tuple[str, ...]  # "cp311", "py3"
    platform: str

    @property
    def local(self) -> str:
        """ "+cpu" for 2.13.0+cpu, "" for none."""
        return "+" + self.version.split("+", 1)[1] if "+" in self.version else ""

    def fits_python(self, version: str) -> bool:
        """Whether an interpreter of `version` ("3.11.7") can install this wheel (by its python tag)."""
        major, minor = version.split(".")[:2]
        return any(t in (f"cp{major}{minor}", f"py{major}", f"py{major}{minor}") for t in self.python_tags)

    def pythons(self) -> list[str]:
        """The "X.Y" versions its cpXY tags name (empty for py3 wheels)."""
        return [f"{m[1]}.{m[2]}" for t in self.python_tags if (m := re.fullmatch(r"cp(\d)(\d+)", t))]


def _machine_arch() -> str:
    import platform

    return platform.machine().lower()


def local_dir(link: str) -> Path | None:
    """A find-links entry as a local folder, or None for a remote URL."""
    if link.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(link).path))
    if "://" in link:
        return None
    return Path(link).expanduser()


def wheels_in(find_links: Sequence[str], name: str) -> list[WheelFile]:
    """Wheels of project `name` in the local find-links folders, newest first; other arches skipped."""
    arch = _machine_arch()
    out: list[WheelFile] = []
    norm = canonicalize_name(name)
    for link in find_links:
        folder = local_dir(link)
        if folder is None or not folder.is_dir():
            continue
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            filename = urllib.parse.unquote(entry.name)
            if not filename.endswith(".whl"):
                continue
            try:  # packaging's own reading of the name, so "Torch-2.13.0+cpu-..." and "torch_x" match as pip would
                project, version, _build, tags = parse_wheel_filename(filename)
            except InvalidWheelFilename:
                continue  # pip skips a misnamed wheel too
            if project != norm:
                continue
            platforms = sorted({t.platform for t in tags})
            if not any(p == "any" or arch in p for p in platforms):
                continue
            out.append(
                WheelFile(
                    path=entry,
                    name=project,
                    version=str(version),
                    python_tags=tuple(sorted({t.interpreter for t in tags})),
                    platform=".".join(platforms),
                )
            )
    from mw_env.sources.indexlist import version_key

    return sorted(out, key=lambda w: version_key(w.version), reverse=True)


def wheel_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a wheel file cannot be installed, in words (None: it reads as a whole zip). Its end record and
    central directory are read, not its members (a torch wheel's 12,000 entries: a few MB at its end, not the
    200 MB to inflate; zipfile's parse of them was 80 ms of a bootstrap's preflight): a download or a copy that
    stopped early ends without them (issue 40: a truncated torch in --find-links was told as "no torch of this
    build matches")."""
    import struct

    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - (22 + 0xFFFF)))  # the end record, after at most a 64 KiB comment
            tail = fh.read()
            at = tail.rfind(b"PK\x05\x06")
            if at < 0 or len(tail) - at < 22:
                return _not_whole(size, "no end of central directory")
            length, offset = struct.unpack("<II", tail[at + 12 : at + 20])
            if offset == 0xFFFFFFFF or length == 0xFFFFFFFF:
                return _zip64_problem(path, size)
            fh.seek(offset)
            directory = fh.read(length)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if len(directory) != length or not directory.startswith(b"PK\x01\x02"):
        return _not_whole(size, "its central directory is not where its end record says")
    if b".dist-info/RECORD" not in directory:
        return "it holds no .dist-info/RECORD: not a wheel"
    return None


def _not_whole(size: int, why: object) -> str:
    return (
        f"it is not a whole zip file ({size / 1e6:,.1f} MB; {why}): a download or a copy that stopped early "
        "leaves it so"
    )


def _zip64_problem(path: str | os.PathLike[str], size: int) -> str | None:
    """A zip over 4 GiB (or 65,535 entries): its directory read by zipfile."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        return _not_whole(size, exc)
    if not any(n.endswith(".dist-info/RECORD") for n in names):
        return "it holds no .dist-info/RECORD: not a wheel"
    return None


def matching_torch(
    wheels: Sequence[WheelFile], *, local_tag: str | None, specifier: str | None
) -> tuple[list[WheelFile], list[WheelFile]]:
    """(wheels of the build that satisfy the version specifier, wheels of the build that do not)."""
    try:
        spec = SpecifierSet(specifier or "")
    except InvalidSpecifier:
        spec = SpecifierSet("")
    good: list[WheelFile] = []
    other: list[WheelFile] = []
    for w in wheels:
        if local_tag and not has_local_tag(w.version, local_tag):
            continue
        if not local_tag and w.local:
            continue
        try:
            public = Version(w.version).public
        except InvalidVersion:
            continue
        (good if spec.contains(public, prereleases=True) else other).append(w)
    return good, other


@dataclass(frozen=True)
class Reach:
    ok: bool
    reason: str  # "ok" | "dns" | "refused" | "timeout" | "tls" | "http" | "missing" | "error"
    detail: str


def probe_index(url: str, *, env: Mapping[str, str], timeout: float = 4.0) -> Reach:
    """Whether an index answers: a folder that exists, or an HTTP(S) server that replies.

    Distinguishes a DNS failure (a firewall or no resolver: the seed's trap) from a refused or
    timed-out connection, because the fix differs.
    """
    folder = local_dir(url)
    if folder is not None:
        if folder.is_dir():
            return Reach(True, "ok", str(folder))
        return Reach(False, "missing", f"{folder} does not exist")
    import socket  # the network modules (ssl, http.client) only where a URL is really asked
    import urllib.error
    import urllib.request

    parsed = urllib.parse.urlparse(url)
    host = parsed.hostname or ""
    proxy = env.get("HTTPS_PROXY") or env.get("https_proxy") or env.get("ALL_PROXY") or env.get("all_proxy")
    if not proxy:
        try:
            socket.getaddrinfo(host, parsed.port or 443)
        except socket.gaierror as exc:
            return Reach(False, "dns", f"DNS lookup of {host} failed ({exc.strerror})")
    target = url.rstrip("/") + "/torch/"
    req = urllib.request.Request(target, method="GET", headers={"User-Agent": "mw-env"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read(256)
        return Reach(True, "ok", f"{host} answered")
    except urllib.error.HTTPError as exc:
        if exc.code < 500:
            return Reach(True, "ok", f"{host} answered HTTP {exc.code}")
        return Reach(False, "http", f"{host} answered HTTP {exc.code}")
    except urllib.error.URLError as exc:
        return _classify(host, exc.reason)
    except (TimeoutError, OSError) as exc:
        return _classify(host, exc)


def _classify(host: str, reason: object) -> Reach:
    import socket
    import ssl

    if isinstance(reason, socket.gaierror):
        return Reach(False, "dns", f"DNS lookup of {host} failed")
    if isinstance(reason, ConnectionRefusedError):
        return Reach(False, "refused", f"connection to {host} refused")
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return Reach(False, "timeout", f"no answer from {host} (timed out)")
    if isinstance(reason, ssl.SSLError):
        return Reach(False, "tls", f"TLS with {host} failed ({reason})")
    return Reach(False, "error", f"{host}: {reason}")


def unreachable_hint(reach: Reach) -> str:
    """What to do about an unreachable torch index."""
    base = (
        "or install from a wheelhouse: put the torch wheel in a folder and pass `--find-links DIR` "
        "(or set PIP_FIND_LINKS); `--offline` then never contacts the index"
    )
    if reach.reason == "dns":
        return (
            "name resolution failed: check the container's DNS and any firewall (OpenSnitch, a corporate "
            "proxy: set HTTPS_PROXY) that blocks it, " + base
        )
    if reach.reason in ("refused", "timeout"):
        return "the connection was blocked: check firewalls and proxies (HTTPS_PROXY), " + base
    return base
