"""What an index actually serves: a project's files as the Simple Repository API lists them.

PEP 691 JSON when the server offers it (it carries sizes, PEP 700), else PEP 503 HTML; a local folder laid out
as an index (`<root>/<project>/index.html`, `file://`) is read the same way. uv has no command that lists versions, so this is a plain GET with a timeout, and
packaging parses the wheel names exactly as pip and uv do. Every failure is an `IndexAnswerError` that says
what the index answered (HTML that is not an index, a redirect loop, no such project, a timeout).
"""

from __future__ import annotations

import html.parser
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from mw_env.base.errors import StepFailed
from mw_env.base.textsafe import redact

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
MAX_PAGE = 64 * 1024 * 1024  # a torch page with years of nightlies is a few MB; more is not an index


class IndexAnswerError(StepFailed):
    """The index did not give a usable listing. `reason`: timeout, unreachable, missing, redirect, garbage."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    version: str
    tags: frozenset[Tag]
    size: int | None = None  # bytes, when the index states it (PEP 700 JSON, a local file)
    requires_python: str | None = None
    yanked: bool = False

    @property
    def local(self) -> str:
        return self.version.split("+", 1)[1] if "+" in self.version else ""

    def fits(self, python: str | None = None, platform: str | None = None) -> bool:
        """Whether an interpreter "3.12" on `platform` ("x86_64") can install this wheel, by its tags."""
        if python:
            major, minor = python.split(".")[:2]
            pys = {f"cp{major}{minor}", f"py{major}", f"py{major}{minor}"}
            if not any(t.interpreter in pys for t in self.tags):
                return False
        if platform:
            return any(t.platform == "any" or t.platform.endswith(platform) for t in self.tags)
        return True


@dataclass(frozen=True)
class Listing:
    index: str
    project: str
    files: tuple[IndexFile, ...]
    format: str  # "json" | "html"

    def matching(self, python: str | None = None, platform: str | None = None) -> list[IndexFile]:
        """The installable (not yanked) wheels for this Python and platform, newest version first."""
        good = [f for f in self.files if not f.yanked and f.fits(python, platform)]
        return sorted(good, key=lambda f: version_key(f.version), reverse=True)

    def versions(self, python: str | None = None, platform: str | None = None) -> list[str]:
        return list(dict.fromkeys(f.version for f in self.matching(python, platform)))

    def pythons(self) -> list[str]:
        return sorted({t.interpreter for f in self.files for t in f.tags if t.interpreter.startswith("cp")})


def version_key(v: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        return Version("0")


def _file(
    filename: str, url: str, *, size: int | None, requires_python: str | None, yanked: bool
) -> IndexFile | None:
    name = urllib.parse.unquote(filename)
    if not name.endswith(".whl"):
        return None  # sdists never give torch a GPU build
    try:
        _project, version, _build, tags = parse_wheel_filename(name)
    except InvalidWheelFilename:
        return None  # pip and uv skip a misnamed file too
    return IndexFile(name, url, str(version), frozenset(tags), size, requires_python, yanked)


def parse_json(text: str, *, base: str) -> list[IndexFile]:
    """A PEP 691 project page. Raises ValueError when it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError("a JSON document without a 'files' list")
    out = []
    for entry in data["files"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            continue
        size = entry.get("size")
        f = _file(
            entry["filename"],
            urllib.parse.urljoin(base, str(entry.get("url", ""))),
            size=size if isinstance(size, int) and size >= 0 else None,
            requires_python=entry.get("requires-python")
            if isinstance(entry.get("requires-python"), str)
            else None,
            yanked=bool(entry.get("yanked")),
        )
        if f is not None:
            out.append(f)
    return out


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str, dict[str, str | None]]] = []
        self._href: tuple[str, dict[str, str | None]] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            a = dict(attrs)
            self._href = (a.get("href") or "", a)
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append(("".join(self._text).strip(), *self._href))
            self._href = None


def parse_html(text: str, *, base: str) -> list[IndexFile] | None:
    """A PEP 503 project page: its anchors. None when the page has no anchors at all (not an index page)."""
    parser = _Anchors()
    parser.feed(text)
    parser.close()
    if not parser.links:
        return None
    out = []
    for label, href, attrs in parser.links:
        url = urllib.parse.urljoin(base, href)
        filename = label or urllib.parse.urlparse(url).path.rsplit("/", 1)[-1]
        f = _file(
            filename,
            url,
            size=None,
            requires_python=attrs.get("data-requires-python"),
            yanked="data-yanked" in attrs,
        )
        if f is not None:
            out.append(f)
    return out


def _local_root(index: str) -> Path | None:
    if index.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(index).path))
    if "://" not in index:
        return Path(index).expanduser().absolute()
    return None


def list_project(
    index: str, project: str, *, env: Mapping[str, str] | None = None, timeout: float = 10.0
) -> Listing:
    """The files `index` serves for `project`. Raises IndexAnswerError saying what went wrong."""
    norm = canonicalize_name(project)
    shown = redact(index)
    root = _local_root(index)
    if root is not None:
        page = root / norm / "index.html"
        if not page.is_file():
            if (root / "index.html").is_file() or root.is_dir():
                raise IndexAnswerError(
                    f"the index {shown} has no project {norm!r}",
                    reason="missing",
                    hint=_hint("missing", norm),
                )
            raise IndexAnswerError(f"the index folder {root} does not exist", reason="unreachable")
        base = page.as_uri()
        files = parse_html(page.read_text(encoding="utf-8", errors="replace"), base=base)
        if files is None:
            raise _garbage(shown, norm, "an HTML page without links")
        return Listing(index, norm, tuple(_with_local_sizes(files)), "html")
    ctype, text, final = _fetch(index, f"/{norm}/", norm, timeout)
    try:
        if "json" in ctype:
            return Listing(index, norm, tuple(parse_json(text, base=final)), "json")
        files = parse_html(text, base=final)
    except (ValueError, json.JSONDecodeError) as exc:
        raise _garbage(
            shown, norm, f"{ctype or 'an unknown type'} that is not an index page ({exc})"
        ) from None
    if files is None:
        raise _garbage(shown, norm, "an HTML page without links (a login or error page?)")
    return Listing(index, norm, tuple(files), "html")


def _fetch(index: str, path: str, norm: str, timeout: float) -> tuple[str, str, str]:
    """(its content type, its text, the URL it came from) of the page at `path` below the index URL
    `index`; IndexAnswerError saying what the server answered for project `norm`."""
    import socket  # the network modules (ssl, http.client) only for an index that is a URL
    import urllib.error
    import urllib.request

    shown = redact(index)
    url, auth = _split_auth(index.rstrip("/") + path)
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "mw-env", **auth})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            ctype = resp.headers.get("Content-Type", "")
            body = resp.read(MAX_PAGE + 1)
            final = resp.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise IndexAnswerError(
                f"the index {shown} wants credentials for {norm!r} (HTTP 401)",
                reason="auth",
                hint="put them in the index URL (https://user:token@host/...) or let uv's own configuration "
                "supply them",
            ) from None
        if exc.code in (404, 403, 410):
            # AMD's index answers 403 for a project it does not serve (LocalAI#10997): "not here", like a 404.
            raise IndexAnswerError(
                f"the index {shown} has no project {norm!r} (HTTP {exc.code})",
                reason="missing",
                hint=_hint("missing", norm),
            ) from None
        if 300 <= exc.code < 400:
            raise IndexAnswerError(
                f"the index {shown} redirects in a loop for {norm!r} (HTTP {exc.code})",
                reason="redirect",
                hint="the index URL is wrong or the server is misconfigured: check the URL in a browser",
            ) from None
        raise IndexAnswerError(
            f"the index {shown} answered HTTP {exc.code} for {norm!r}",
            reason="unreachable",
            hint=_hint("http", norm),
        ) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        timed_out = isinstance(reason, (TimeoutError, socket.timeout)) or "timed out" in str(reason)
        raise IndexAnswerError(
            f"the index {shown} did not answer for {norm!r}: "
            + (f"no reply within {timeout:g}s" if timed_out else str(reason)),
            reason="timeout" if timed_out else "unreachable",
            hint=_hint("timeout", norm),
        ) from None
    if len(body) > MAX_PAGE:
        raise _garbage(shown, norm, f"a page over {MAX_PAGE // 2**20} MiB")
    return ctype, body.decode("utf-8", errors="replace"), final


def _split_auth(url: str) -> tuple[str, dict[str, str]]:
    """A URL with user:password@ as (the URL without them, a Basic Authorization header): urllib sends none."""
    import base64

    parts = urllib.parse.urlsplit(url)
    if not parts.username:
        return url, {}
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {token}"}


def _with_local_sizes(files: Sequence[IndexFile]) -> list[IndexFile]:
    out = []
    for f in files:
        size = f.size
        if size is None and f.url.startswith("file://"):
            try:
                size = Path(urllib.parse.unquote(urllib.parse.urlparse(f.url).path)).stat().st_size
            except OSError:
                size = None
        out.append(
            f
            if size == f.size
            else IndexFile(f.filename, f.url, f.version, f.tags, size, f.requires_python, f.yanked)
        )
    return out


def _garbage(shown: str, project: str, what: str) -> IndexAnswerError:
    return IndexAnswerError(
        f"the index {shown} answered {what} for {project!r}",
        reason="garbage",
        hint="the URL is probably not a package index (a proxy's error page, a typo): check it, or pass "
        "--find-links DIR with the wheels",
    )


def _hint(kind: str, project: str) -> str:
    if kind == "missing":
        return f"this index does not serve {project}: check the profile's index_url (or --torch-index)"
    return (
        "check the network, firewall and proxy (HTTPS_PROXY), or install from a wheelhouse with --find-links DIR "
        "[--offline]"
    )


def list_projects(index: str, *, timeout: float = 10.0) -> set[str]:
    """The project names an index's root page lists (PEP 691 `projects`, or PEP 503 anchors)."""
    shown = redact(index)
    root = _local_root(index)
    if root is not None:
        page = root / "index.html"
        if not page.is_file():
            raise IndexAnswerError(f"the index folder {root} has no index.html", reason="unreachable")
        text, ctype = page.read_text(encoding="utf-8", errors="replace"), "text/html"
    else:
        ctype, text, _final = _fetch(index, "/", "(root)", timeout)
    if "json" in ctype:
        try:
            data = json.loads(text)
            return {canonicalize_name(p["name"]) for p in data.get("projects", []) if isinstance(p, dict)}
        except (ValueError, AttributeError, KeyError, TypeError):
            raise _garbage(shown, "(root)", "JSON that is not an index root") from None
    parser = _Anchors()
    parser.feed(text)
    if not parser.links:
        raise _garbage(shown, "(root)", "an HTML page without links")
    return {canonicalize_name(label or href.strip("/").rsplit("/", 1)[-1]) for label, href, _ in parser.links}
