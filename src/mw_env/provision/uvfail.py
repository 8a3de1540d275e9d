"""Why uv stopped at an index: the index, the project it asked for, the status, and what to do.

Matched against what uv itself prints (its source: uv-resolver pubgrub/report.rs `ForbiddenIndex` and
`UnauthorizedIndex`, uv-client's "Failed to fetch" chain with reqwest's "HTTP status server error (500 Internal
Server Error) for url (...)", its "dns error" and "Failed to download distribution due to network timeout"),
captured from uv 0.13 against the loopback indexes of tests/indexserver.py:

    hint: An index (http://host/ma/) returned a 403 Forbidden error, but uv received a successful response ...
    hint: An index URL (http://host/e401/) could not be queried due to a lack of valid authentication ...
    cause: Failed to fetch: http://host/e500/torch/
    cause: HTTP status server error (500 Internal Server Error) for url (http://host/e500/torch/)

Anything else is left to the generic reading (steps._hint_for): "no torch of this build matches" is said only
when uv found no such torch, never for an index that refused to answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mw_env.base.textsafe import redact

if TYPE_CHECKING:
    from mw_env.provision.torchindex import StepIndex

_FORBIDDEN = re.compile(r"An index \(([^)\s]+)\) returned a 403 Forbidden error")
_UNAUTHORIZED = re.compile(r"An index URL \(([^)\s]+)\) could not be queried .*?\((\d{3}) [A-Za-z ]+\)")
_FETCH = re.compile(r"Failed to fetch: `?([^`\s]+?)`?\s*$", re.M)
_STATUS = re.compile(r"HTTP status (?:client|server) error \((\d{3}) ([^)]*)\) for url \(([^)\s]+)\)")
_MISSING = re.compile(r"Because (\S+?) was not found in the package registry")
_NO_VERSION = re.compile(r"there is no version of ([A-Za-z0-9_.\-]+)")


@dataclass(frozen=True)
class IndexFailure:
    index: str  # as configured (credentials redacted when shown)
    name: str  # the index's name in the torch step ("amd-multiarch", "default"), or ""
    project: str
    status: str  # "403", "401", "500", "DNS", "timeout", "unreachable"
    message: str
    hint: str


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _owner(url: str, indexes: Sequence[StepIndex]) -> tuple[str, str]:
    """(index URL, its name) for an index or file URL uv printed (uv prints them without credentials)."""
    plain = [(redact(ix.url), ix) for ix in indexes]
    for shown, ix in plain:
        if _same(shown, url) or url.startswith(shown.rstrip("/") + "/"):
            return ix.url, ix.name
    return url, ""


def _project(output: str, url: str | None = None) -> str:
    if url:  # a project page <index>/<project>/, or a file: its name starts with the project's
        parts = [p for p in url.split("?")[0].split("#")[0].split("/") if p]
        if parts and parts[-1].endswith((".whl", ".metadata")):
            return parts[-1].split("-", 1)[0].replace("_", "-").lower()
        if parts and not parts[-1].endswith((".tar.gz", ".zip")):
            return parts[-1]
    m = _MISSING.search(output) or _NO_VERSION.search(output)
    return m.group(1) if m else "torch"


def _hint(status: str, name: str, shown: str, project: str) -> str:
    which = f"the index {name} ({shown})" if name else f"the index {shown}"
    if status == "403":
        return (
            f"{which} refused {project} (403 Forbidden). If it answers 403 for a project it does not hold, that "
            "index needs ignore-error-codes = [403] (the source catalogue's `unserved: 403`); otherwise it refuses "
            "this client: check the URL, its credentials and any proxy, then re-run (finished steps are kept)"
        )
    if status == "401":
        return (
            f"{which} wants credentials for {project} (401 Unauthorized): put them in the URL "
            "(https://user:token@host/...), in ~/.netrc, or in UV_INDEX_<NAME>_USERNAME/_PASSWORD, then re-run"
        )
    if status == "404":
        return (
            f"{which} lists a file of {project} that answers 404 (a nightly index mid-update drops files it still "
            "lists): re-run later (finished steps are kept), or choose another version or --source"
        )
    if status in ("DNS", "timeout", "unreachable"):
        return (
            f"{which} could not be reached ({status}): check the network, DNS, firewall and proxy (HTTPS_PROXY), "
            "or install from a wheelhouse with --find-links DIR [--offline]; re-run to resume"
        )
    return (
        f"{which} failed with HTTP {status} for {project}: the server (or a proxy in between) is failing, not "
        "your request. Re-run later (finished steps are kept), or install from a wheelhouse with --find-links DIR"
    )


def index_failure(output: str, indexes: Sequence[StepIndex]) -> IndexFailure | None:
    """The index failure uv's output reports, or None when uv stopped for another reason."""
    found: tuple[str, str, str | None] | None = None  # (url uv printed, status, the fetched URL)
    if m := _FORBIDDEN.search(output):
        found = (m.group(1), "403", None)
    elif m := _UNAUTHORIZED.search(output):
        found = (m.group(1), m.group(2), None)
    elif m := _STATUS.search(output):
        found = (m.group(3), m.group(1), m.group(3))
    elif m := _FETCH.search(output):
        low = output.lower()
        status = (
            "DNS"
            if "dns error" in low or "failed to lookup address" in low
            else "timeout"
            if "timed out" in low or "network timeout" in low
            else "unreachable"
        )
        found = (m.group(1), status, m.group(1))
    if found is None:
        return None
    url, status, fetched = found
    index, name = _owner(url, indexes)
    project = _project(output, fetched)
    shown = redact(index)
    label = f"{name} ({shown})" if name else shown
    what = {"DNS": "could not be resolved (DNS)", "timeout": "did not answer in time"}.get(
        status, "could not be reached" if status == "unreachable" else f"answered HTTP {status}"
    )
    return IndexFailure(
        index=index,
        name=name,
        project=project,
        status=status,
        message=f"the index {label} {what} for {project}",
        hint=_hint(status, name, shown, project),
    )
