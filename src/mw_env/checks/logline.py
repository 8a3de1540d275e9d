"""A log line as the library printed it: the wrapping that loggers, launchers and collectors add removed.

The catalogue's patterns describe a message as its library prints it (`rocblaslt error: Cannot read ...`,
`cuda: False`, `Killed`). In a real log the same text arrives wrapped: a timestamp (ISO, syslog, dmesg's
seconds, glog's `E0907 12:00:01.123456 1234 file.cc:12]`), a level (`ERROR:`, `[WARNING]`), a Python logger's
name (`ERROR:torch.distributed.elastic.multiprocessing.api:`), torchrun's `[rank0]:`, docker compose's
`service  | `, or the whole line quoted. A pattern is matched against the line as it is and against the line
with these prefixes peeled off, so an anchored pattern (`^Killed$`) still finds `2026-09-07T12:00:01Z Killed`.
Only prefixes are removed: a prefix carries no meaning of its own, and the message is left as it was.
"""

from __future__ import annotations

import re

_LEVEL = r"(?:CRITICAL|FATAL|ERROR|ERR|WARNING|WARN|NOTICE|INFO|DEBUG|TRACE)"
# Each alternative is one wrapper at the start of the line; `unwrap` peels them off one at a time.
_PREFIX = re.compile(
    r"""^(?:
      \s+
    | \[?\d{4}-\d{2}-\d{2}[T\ ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|\ ?[+-]\d{2}:?\d{2}|\ UTC)?\]?[:,]?\s*
    | [A-Z][a-z]{2}\ [\ \d]\d\ \d{2}:\d{2}:\d{2}\ \S+\ [\w.\-/]+(?:\[\d+\])?:\s*     # syslog / journald
    | \[\s*\d+\.\d+\]\s*                                                            # dmesg: "[   21.091872] "
    | [IWEF]\d{4}\ \d{2}:\d{2}:\d{2}\.\d+\s+\d+\ [\w.\-]+:\d+\]\s*                  # glog (c10, NCCL's C++ side)
    | \[(?:rank|default)\d+\]:\s*                                                   # torchrun --tee / log_line_prefix
    | [\w.\-]+\s+\|\s                                                               # docker compose: "trainer-1  | "
    | """
    + _LEVEL
    + r"""(?::[\w.\-]+)?:\s*                                                        # logging's LEVEL:logger.name:
    | \["""
    + _LEVEL
    + r"""\]:?\s*
    | """
    + _LEVEL
    + r"""\s+[\w.\-]+(?::\d+)?\s*[:\-\]]\s+                                         # "ERROR torch.distributed: "
    )""",
    re.VERBOSE | re.IGNORECASE,
)
_QUOTED = re.compile(r"""^(["'`])(.+)\1[.,;]?$""")


def unwrap(line: str) -> str:
    """`line` without the wrappers before the message (and without quotes around the whole of it)."""
    core = line.strip()
    for _ in range(8):  # a line carries a handful of wrappers at most; bounded whatever the input
        m = _PREFIX.match(core)
        if m is None or not m.group(0):
            quoted = _QUOTED.match(core)
            if quoted is None:
                break
            core = quoted.group(2).strip()
            continue
        core = core[m.end() :]
    return core
