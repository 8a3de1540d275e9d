"""Network (for bootstrap/train downloads): the torch index host resolves (DNS) and accepts a connection."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from mw_env.base.textsafe import redact
from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, result

AREA = "network"
CONNECT_TIMEOUT = 4.0


def resolve(host: str, port: int) -> list[tuple]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def connect(address: tuple, family: int, timeout: float) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(address)


def check_network(ctx: DoctorContext) -> list[CheckResult]:
    title = "torch index reachable"
    if not ctx.network:
        return [result("network.index", title, "skip", "not checked (network checks off)")]
    # A venv whose torch came from a wheelhouse (or the image) needs no remote index: re-provisioning uses
    # the same local source, so an unreachable download.pytorch.org is not worth a warning.
    installed_from = ctx.record.torch_index if ctx.record is not None else None
    if installed_from and not installed_from.startswith(("http://", "https://")):
        return [
            result(
                "network.index", title, "skip", f"not needed: this venv's torch came from {installed_from}"
            )
        ]
    url = ctx.selection.torch.index_url or "https://pypi.org/simple"
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return [result("network.index", title, "skip", f"{redact(url)} names no host (a local index)")]
    port = parts.port or (80 if parts.scheme == "http" else 443)
    try:
        infos = resolve(host, port)
    except OSError as exc:
        cause, fix = ctx.fix("network.dns", host=host, error=exc.strerror or str(exc))
        return [result("network.index", title, "warn", cause, fix)]
    errors = []
    for family, _, _, _, address in infos[:3]:
        try:
            connect(address, family, CONNECT_TIMEOUT)
        except OSError as exc:
            errors.append(f"{address[0]}: {exc.strerror or exc}")
            continue
        return [result("network.index", title, "pass", f"{host}:{port} ({redact(url)})")]
    cause, fix = ctx.fix("network.refused", host=host, port=port, error="; ".join(errors) or "no address")
    return [result("network.index", title, "warn", cause, fix)]
