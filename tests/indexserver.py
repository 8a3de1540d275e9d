"""A loopback package index for tests: folders laid out by wheelfactory.simple_index, served over HTTP on
127.0.0.1 with an ephemeral port, answering PEP 691 JSON (with sizes) or PEP 503 HTML as the client asks, plus
the bad answers real servers give (a login page, a redirect loop, a 404, one that never answers).

Each index may answer the way a real one does (`Behaviour`): AMD's indexes and pytorch.org's answer 403, not 404,
for a project they do not hold (mudler/LocalAI#10997; uv's IndexStatusCodeStrategy special-cases
download.pytorch.org for it); an index may speak only PEP 691 JSON; pytorch.org's files come from another host
(download-r2.pytorch.org) through a redirect, here "localhost" instead of "127.0.0.1"; a nightly index may list
a wheel that is gone (404, Comfy-Org/ComfyUI#12427); `status` makes every request answer one code (401, 500).

    with serve({"rocm7.14": idx_a, "whl-multi-arch": idx_b}, {"whl-multi-arch": AMD}) as srv:
        srv.url("rocm7.14")          # http://127.0.0.1:PORT/rocm7.14/
"""

from __future__ import annotations

import contextlib
import hashlib
import html.parser
import json
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Behaviour:
    """How one loopback index answers (the defaults: a plain PEP 503/691 index that says 404 for "not here")."""

    unserved: int = 404  # the status for a project the index does not hold (AMD's and pytorch.org's: 403)
    json_only: bool = False  # PEP 691 JSON whatever the client accepts
    cdn: bool = False  # files answer a 302 to the same path on "localhost" (another host name)
    gone: frozenset[str] = frozenset()  # listed file names that answer 404
    status: int | None = None  # every request answers this (401 without credentials, 500)
    html_only: bool = False  # PEP 503 HTML whatever the client accepts (no PEP 691 JSON)


AMD = Behaviour(unserved=403)  # repo.amd.com/rocm/whl-multi-arch: 403 for a project it does not hold
# A company's mirror (Nexus, Artifactory, pypiserver): the PEP 503 HTML pages only, no PEP 691 JSON
# (pypiserver/pypiserver#508; Nexus and Artifactory "only support the Simple API",
# hierynomus/jython-gradle-plugin#22; no PEP 658 metadata either, sonatype/nexus-public#296), 404 for a project
# it does not hold. PyPI answers JSON or HTML as asked: the default Behaviour.
MIRROR = Behaviour(html_only=True)
PYTORCH = Behaviour(unserved=403, cdn=True)  # download.pytorch.org: 403, files from download-r2.pytorch.org


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that hangs up mid-answer (uv drops a connection it no longer needs) is not an error."""
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")


class Server:
    def __init__(self, roots: Mapping[str, Path], behaviours: Mapping[str, Behaviour] | None = None) -> None:
        self.roots = dict(roots)
        self.behaviours = dict(behaviours or {})
        self.hung = threading.Event()  # set when a /hang/ request arrived (the test's event, not a sleep)
        self.release = threading.Event()
        self.requests: list[str] = []
        handler = self._handler()
        self.httpd = _Quiet(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}/"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(
                self, code: int, body: bytes, ctype: str, headers: Mapping[str, str] | None = None
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    with contextlib.suppress(ConnectionError):  # the client hung up: nothing to answer
                        self.wfile.write(body)

            def do_HEAD(self) -> None:  # uv asks a wheel's size and range support first
                self.do_GET()

            def do_GET(self) -> None:
                path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
                server.requests.append(path)
                parts = [p for p in path.split("/") if p]
                if not parts:
                    return self._send(404, b"", "text/plain")
                name, rest = parts[0], parts[1:]
                if name == "cdn":  # the other host of a Behaviour(cdn=True) index: its files only
                    name, rest, cdn = rest[0], rest[1:], True
                else:
                    cdn = False
                how = server.behaviours.get(name, Behaviour())
                if how.status is not None:
                    return self._send(how.status, b"", "text/plain", _challenge(how.status))
                if name == "garbage":
                    return self._send(200, b"<html><body><h1>Please log in</h1></body></html>", "text/html")
                if name == "loop":
                    return self._send(302, b"", "text/html", {"Location": self.path})
                if name == "hang":
                    server.hung.set()
                    server.release.wait(30)
                    return self._send(503, b"", "text/plain")
                if name == "private":  # an index behind Basic auth (user "u", token "t")
                    if self.headers.get("Authorization") != "Basic dTp0":
                        return self._send(401, b"", "text/plain", {"WWW-Authenticate": 'Basic realm="x"'})
                    name = "simple"  # serves the "simple" root's pages
                if name == "forbidden":
                    return self._send(403, b"Forbidden", "text/plain")
                root = server.roots.get(name) or (
                    server.roots.get("simple") if parts[0] == "private" else None
                )
                if root is None:
                    return self._send(404, b"not found", "text/plain")
                target = root.joinpath(*rest)
                if target.is_file():
                    if target.name in how.gone:
                        return self._send(404, b"not found", "text/plain")
                    if how.cdn and not cdn:
                        where = f"http://localhost:{server.port}/cdn{self.path}"
                        return self._send(302, b"", "text/plain", {"Location": where})
                    return self._send(200, target.read_bytes(), "application/octet-stream")
                page = target / "index.html"
                if not page.is_file():
                    # A project the index does not hold (AMD, pytorch.org: 403), or a path that is no page.
                    code = how.unserved if len(rest) == 1 else 404
                    return self._send(code, b"Forbidden" if code == 403 else b"not found", "text/plain")
                text = page.read_text()
                accept = self.headers.get("Accept") or ""
                wants_json = how.json_only or "application/vnd.pypi.simple.v1+json" in accept
                if rest and wants_json and not how.html_only:
                    return self._send(
                        200, _as_json(rest[0], text, page.parent), "application/vnd.pypi.simple.v1+json"
                    )
                return self._send(200, text.encode(), "text/html")

        return Handler


def _challenge(status: int) -> dict[str, str]:
    return {"WWW-Authenticate": 'Basic realm="x"'} if status == 401 else {}


def _as_json(project: str, page: str, folder: Path) -> bytes:
    """PEP 691 (+ PEP 700 sizes) for a PEP 503 page of wheelfactory.simple_index."""
    parser = _Links()
    parser.feed(page)
    files = []
    for href in parser.hrefs:
        url, _, frag = href.partition("#")
        local = (folder / urllib.parse.unquote(url)).resolve()
        data = local.read_bytes()
        files.append(
            {
                "filename": local.name,
                "url": url,
                "hashes": {
                    "sha256": frag.split("=", 1)[1] if "=" in frag else hashlib.sha256(data).hexdigest()
                },
                "size": len(data),
            }
        )
    return json.dumps(
        {"meta": {"api-version": "1.1"}, "name": project, "files": files, "versions": []}
    ).encode()


@contextlib.contextmanager
def serve(roots: Mapping[str, Path], behaviours: Mapping[str, Behaviour] | None = None) -> Iterator[Server]:
    srv = Server(roots, behaviours)
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.httpd.shutdown()
        srv.httpd.server_close()
