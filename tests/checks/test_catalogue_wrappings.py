"""Every catalogue entry matches its message as logs carry it, not only its own quoted example (issue 40).

Each example is wrapped the common ways (a timestamp, a level, a logger's name, torchrun's rank prefix, docker
compose's service prefix, the whole line quoted, a CRLF), its paths moved elsewhere (another folder, a venv, a
folder with a space, quoted or not) and followed by the lines that come after it in a real log; each wrapping
must still be explained by the same entry, on the example's own line. A pattern fitted to its one example fails
here. The wrappings are generated, so a new entry is held to them without a line of test code."""

from __future__ import annotations

import re

import pytest

from mw_env.checks.catalogue import load_catalogue

CAT = load_catalogue()
MESSAGES = CAT.messages

PREFIXES = (
    "2026-09-07T12:00:01.123456Z ",
    "[2026-09-07 12:00:01,123] ",
    "Sep  7 12:00:01 node7 python[4242]: ",
    "[  812.123456] ",
    "E0907 12:00:01.123456  4242 logging.cpp:1234] ",
    "ERROR: ",
    "WARNING:torch.distributed.elastic.multiprocessing.api:",
    "[rank3]: ",
    "trainer-1  | ",
    "[ERROR] ",
)
# What a log holds after the message: a traceback, an abort, the next step's chatter.
FOLLOWING = (
    "Aborted (core dumped)",
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 12, in <module>',
    "step 2 loss 1.9",
)
# A path in an example that an install can move: absolute (POSIX or Windows) or elided ("..."), not a device
# node or a kernel file (/dev/kfd is where it is), not a source location (`sqlite_db.cpp:108`), not in a URL.
_PATH = re.compile(
    r"""(?<![\w\\:/.])(?:[A-Za-z]:\\|/(?!dev/|proc/|sys/)|\.\.\./)[^\s"'`:,()<>\[\]]*[/\\][^\s"'`:,()<>\[\]]+(?![^\s"'`:,()<>\[\]]|:\d)"""
)
_PLACES = (
    "/opt/rocm-7.2.1/lib",
    "/home/ana/venvs/train/lib/python3.12/site-packages/torch/lib",
    "/data/My Runs",
)


def _path_variants(example: str) -> list[str]:
    """The example with each path moved to other folders, quoted or not (the file name kept)."""
    out: list[str] = []
    for m in _PATH.finditer(example):
        path = m.group(0)
        name = re.split(r"[/\\]", path)[-1]
        quoted = m.start() > 0 and example[m.start() - 1] in "\"'"
        for place in _PLACES:
            moved = f"{place}/{name}"
            if " " in place and not quoted:
                moved = f'"{moved}"'
            out.append(example[: m.start()] + moved + example[m.end() :])
        if quoted:  # the same message from a release that printed the path bare
            q = example[m.start() - 1]
            out.append(example[: m.start() - 1] + path + example[m.end() :].replace(q, "", 1))
        else:
            out.append(example[: m.start()] + f'"{path}"' + example[m.end() :])
    return out


def _wrappings(example: str) -> list[str]:
    out = [prefix + example for prefix in PREFIXES]
    out += [f'"{example}"', example + "\r", "    " + example]
    out += _path_variants(example)
    return out


CASES = [
    (m.id, m.family, m.kind, example, wrapped)
    for m in MESSAGES
    for example in m.examples
    for wrapped in _wrappings(example)
]


@pytest.mark.parametrize(
    ("entry", "family", "kind", "example", "wrapped"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_example_is_explained_however_a_log_wraps_it(entry, family, kind, example, wrapped):
    text = "\n".join(["step 1 loss 2.0", wrapped, *FOLLOWING])
    hits = CAT.scan(text)
    on_line = [h for h in hits if h.line_no == 2]
    assert on_line, f"{entry}: {wrapped!r} is not recognised (its example: {example!r})"
    got = on_line[0].message
    if family:  # a catch-all: a specific entry of the same kind may explain it first
        assert got.kind == kind, f"{wrapped!r}: {got.id}"
    else:
        assert got.id == entry, f"{wrapped!r} is explained by {got.id}, not {entry}"
    # The lines that follow are not mistaken for the message (nor for another one).
    assert [h.line_no for h in hits if h.line_no > 2] == [], hits


def test_every_entry_has_two_or_more_real_examples_with_their_sources():
    for m in MESSAGES:
        assert len(m.examples) >= 2, (
            f"{m.id}: {len(m.examples)} example(s); two or more, quoted from its sources"
        )
        assert len(set(m.examples)) == len(m.examples), f"{m.id}: an example twice"


def test_sources_are_public_urls_only():
    # The project's seed files and research notes exist only where it is built: a user cannot follow them.
    for m in MESSAGES:
        parts = [p.strip() for p in m.source.split(";") if p.strip()]
        assert parts, m.id
        for part in parts:
            assert re.fullmatch(r"https://\S+", part), f"{m.id}: source {part!r} is not a public URL"


def test_the_wrappings_are_not_trivial():
    # The generator itself: each example yields its prefixed forms, and a path is moved and re-quoted.
    assert len(_wrappings("cuda: False")) == len(PREFIXES) + 3
    moved = _path_variants(
        'rocblaslt error: Cannot read "/x/y/TensileLibrary_lazy_gfx1151.dat": No such file'
    )
    assert (
        'rocblaslt error: Cannot read "/opt/rocm-7.2.1/lib/TensileLibrary_lazy_gfx1151.dat": No such file'
        in moved
    )
    assert "rocblaslt error: Cannot read /x/y/TensileLibrary_lazy_gfx1151.dat: No such file" in moved
