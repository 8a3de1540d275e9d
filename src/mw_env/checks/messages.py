"""Known messages in the probe's output: harmless ones as info, fatal ones mapped to cause and fix."""

from __future__ import annotations

from mw_env.checks.context import DoctorContext
from mw_env.checks.model import CheckResult, CheckStatus, result

AREA = "messages"
# Entries that only make sense in a log read without context: the doctor judges the torch build itself
# (torch.build), so a "+cu130" in a library's chatter on an NVIDIA box is no finding.
EXPLAIN_ONLY = frozenset({"cuda-build-version"})


def check_messages(ctx: DoctorContext) -> list[CheckResult]:
    title = "known messages"
    if ctx.quick:
        return [result("messages.known", title, "skip", "skipped with --quick")]
    probe = ctx.probe()
    if probe is None:
        return [result("messages.known", title, "skip", "no probe output")]
    hits = ctx.catalogue.scan(probe.stderr + "\n" + probe.stdout_other)
    out: list[CheckResult] = []
    seen: set[str] = set()
    harmless: list[str] = []
    for hit in hits:
        msg = hit.message
        if msg.id in EXPLAIN_ONLY:
            continue
        if msg.severity == "harmless":
            harmless.append(f"{msg.title} - {msg.cause} ({msg.fix})")
            continue
        if msg.id in seen:
            continue
        seen.add(msg.id)
        status: CheckStatus = "fail" if msg.severity == "fatal" else "warn"
        out.append(
            result(
                f"messages.{msg.id}",
                msg.title,
                status,
                # The line itself only when the title (an example of the text) does not already say it.
                msg.cause if _same_text(msg.title, hit.line) else f"{hit.line[:240]} - {msg.cause}",
                msg.doctor_fix or msg.fix,
            )
        )
    harmless = list(dict.fromkeys(harmless))
    if not out:
        detail = f"{len(harmless)} known-harmless message(s)" if harmless else "none in the probe's output"
        out.append(result("messages.known", title, "pass", detail, info=tuple(harmless)))
    elif harmless:
        out.append(
            result(
                "messages.harmless",
                "known-harmless messages",
                "pass",
                f"{len(harmless)} found",
                info=tuple(harmless),
            )
        )
    return out


def _same_text(title: str, line: str) -> bool:
    head = " ".join(title.split())[:40].lower()
    return bool(head) and head in " ".join(line.split()).lower()
