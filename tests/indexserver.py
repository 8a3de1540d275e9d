"""A loopback package index for tests: folders laid out by wheelfactory.simple_index, served over HTTP on
127.0.0.1 with an ephemeral port, answering PEP 691 JSON (with sizes) or PEP 503 HTML as the client asks, plus
the bad answers real servers give (a login page, a redirect loop, a 404, one that never answers).

    with serve({"rocm7.14": idx_a, "whl-multi-arch": idx_b}) as srv:
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs).get("href") or "")


class Server:
    def __init__(self, roots: Mapping[str, Path]) -> None:
        self.roots = dict(roots)
        self.hung = threading.Event()  # set when a /hang/ request arrived (the test's event, not a sleep)
        self.release = threading.Event()
        self.requests: list[str] = []
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
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
                    return self._send(200, target.read_bytes(), "application/octet-stream")
                page = target / "index.html"
                if not page.is_file():
                    return self._send(404, b"not found", "text/plain")
                text = page.read_text()
                if "application/vnd.pypi.simple.v1+json" in (self.headers.get("Accept") or "") and rest:
                    return self._send(
                        200, _as_json(rest[0], text, page.parent), "application/vnd.pypi.simple.v1+json"
                    )
                return self._send(200, text.encode(), "text/html")

        return Handler


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
def serve(roots: Mapping[str, Path]) -> Iterator[Server]:
    srv = Server(roots)
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.httpd.shutdown()
        srv.httpd.server_close()
