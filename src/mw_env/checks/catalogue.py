"""Known messages and the causes + fixes of every finding, loaded from catalogue.yaml (data, not code).

Profiles extend it: `doctor.harmless_messages` (substrings reported as info) and an optional
`doctor.catalogue` (extra message entries, same keys as the YAML). `python -m mw_env.checks.catalogue_doc`
prints docs/troubleshooting.md.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Literal

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.checks.logline import unwrap

if TYPE_CHECKING:
    from mw_env.checks.gpuadvice import Advice
    from mw_env.profiles.model import Profile

CATALOGUE_FILE = Path(__file__).with_name("catalogue.yaml")
Severity = Literal["harmless", "warning", "fatal"]
SEVERITIES: tuple[str, ...] = ("harmless", "warning", "fatal")
# The anomaly kinds of `mw-env train status/watch` a known message can stand for (mw_env.runs.anomalies.KINDS).
KINDS: tuple[str, ...] = ("oom", "gpu_fault", "comms")
_FIX_KEYS = ("title", "cause", "fix")
# The machines a message can mean something else on (checks/explain.py `machine_kind`): an AMD GPU, an NVIDIA
# GPU, or none. "Found no NVIDIA driver" is a missing driver on an NVIDIA box and a wrong torch build on a 780M.
MACHINES: tuple[str, ...] = ("amd", "nvidia", "cpu")
_MACHINE_KEYS = ("cause", "fix", "here")


@dataclass(frozen=True)
class Message:
    """A known message: a regex over log lines, how bad it is, what causes it and how to fix it."""

    id: str
    pattern: str
    severity: Severity
    title: str
    cause: str
    fix: str
    source: str = ""
    # The fix as the doctor's own report gives it, where `fix` says "run mw-env doctor": there the staged
    # checks have already run and their findings name the cause for this machine.
    doctor_fix: str = ""
    examples: tuple[str, ...] = ()  # verbatim lines from the sources (the tests match each one)
    here: str = ""  # what on this machine confirms or rules the cause out
    kind: str = ""  # "oom" | "gpu_fault" | "comms": what `train status` calls a run that printed it
    family: bool = False  # a catch-all behind specific entries of the same kind
    # machine kind -> {cause, fix, here} for the machine the log is explained on (MACHINES); the rest of the
    # entry is what it says when the machine is not known or has no variant of its own.
    machines: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern)

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(u.rstrip(";,") for u in re.findall(r"https?://\S+", self.source))

    def on(self, machine: str) -> Message:
        """This message as it reads on a machine of kind `machine` (its `machines` variant, if it has one)."""
        variant = self.machines.get(machine)
        if not variant:
            return self
        return replace(
            self,
            cause=variant.get("cause") or self.cause,
            fix=variant.get("fix") or self.fix,
            here=variant.get("here") or self.here,
            # Inside the doctor the machine-specific fix is the finding's fix (doctor_fix is the general one's).
            doctor_fix="" if variant.get("fix") else self.doctor_fix,
        )


# The keys of a catalogue entry: the fields of Message, in its order.
_MESSAGE_KEYS = tuple(f.name for f in fields(Message))


@dataclass(frozen=True)
class FixText:
    title: str
    cause: str
    fix: str


@dataclass(frozen=True)
class Hit:
    """A known message found in a text: the entry, the 1-based line number and the line itself."""

    message: Message
    line_no: int
    line: str


@dataclass(frozen=True)
class Catalogue:
    messages: tuple[Message, ...]
    fixes: Mapping[str, FixText]

    def fix_for(self, fix_id: str, **values: object) -> tuple[str, str]:
        """(cause, fix) for a finding, with its placeholders filled; unknown placeholders stay visible."""
        entry = self.fixes.get(fix_id)
        if entry is None:  # a programming error, but never lose the finding over it
            return (fix_id, "")
        return (_fill(entry.cause, values), _fill(entry.fix, values))

    def scan(self, text: str) -> list[Hit]:
        """Every line of `text` that matches a known message, first entry wins per line."""
        lines = text.splitlines()
        return self.scan_lines(lines, self.candidates(lines))

    def candidates(self, lines: Sequence[str]) -> list[int]:
        """The indexes of the lines that can match an entry (the one prefilter: `scan`, and the run-log
        scanner of `train status`, try only these entry by entry; see screen.py): a long log in a blink."""
        from mw_env.checks.screen import candidate_lines

        return candidate_lines(lines, [m.pattern for m in self.messages]) if lines else []

    def scan_lines(self, lines: Sequence[str], indexes: Iterable[int] | None = None) -> list[Hit]:
        """The per-line match of `scan` over `indexes` (every line when None): the exact definition."""
        hits: list[Hit] = []
        for i in range(len(lines)) if indexes is None else indexes:
            msg = self.first_match(lines[i])
            if msg is not None:
                hits.append(Hit(message=msg, line_no=i + 1, line=lines[i].strip()))
        return hits

    def first_match(self, line: str) -> Message | None:
        """The entry that explains one line: the first matching it as it is, or as its library printed it
        (checks/logline.py). A long log's lines are screened first (`candidates`)."""
        core = unwrap(line)
        for msg in self.messages:
            if msg.regex.search(line) or (core != line and msg.regex.search(core)):
                return msg
        return None

    def advised(self, advice: Advice) -> Catalogue:
        """Every message with its GPU placeholders filled (checks/gpuadvice.py): the advice of the moment."""
        from mw_env.checks.gpuadvice import fill

        return Catalogue(
            messages=tuple(
                replace(
                    m,
                    cause=fill(m.cause, advice),
                    fix=fill(m.fix, advice),
                    doctor_fix=fill(m.doctor_fix, advice),
                    machines={
                        k: {key: fill(text, advice) for key, text in v.items()} for k, v in m.machines.items()
                    },
                )
                for m in self.messages
            ),
            fixes=self.fixes,
        )

    def on(self, machine: str | None) -> Catalogue:
        """Every message as it reads on a machine of this kind (MACHINES; None: unknown, the general text)."""
        if machine is None:
            return self
        return Catalogue(messages=tuple(m.on(machine) for m in self.messages), fixes=self.fixes)

    def extended(self, extra: Iterable[Message]) -> Catalogue:
        """Profile entries first, so a profile can re-classify a shipped message."""
        return Catalogue(messages=(*extra, *self.messages), fixes=self.fixes)


def _fill(template: str, values: Mapping[str, object]) -> str:
    class _Keep(dict):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    # A path is filled in as one shell word: a fix's command with it runs as pasted, whatever the path holds
    # (issue 40: `source {venv}/bin/activate` with a `$(...)` in the path); a plain path reads unchanged.
    return string.Formatter().vformat(
        template,
        (),
        _Keep({k: "" if v is None else sh(v) if isinstance(v, PurePath) else v for k, v in values.items()}),
    )


@lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _message(entry: Any, where: str) -> Message:
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: each message must be a mapping with keys {', '.join(_MESSAGE_KEYS)}")
    unknown = sorted(set(entry) - set(_MESSAGE_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r}", hint=f"allowed: {', '.join(_MESSAGE_KEYS)}")
    for key in ("id", "pattern", "severity", "cause", "fix"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise InputError(f"{where}: {key!r} must be a non-empty string")
    if entry["severity"] not in SEVERITIES:
        raise InputError(
            f"{where}: severity {entry['severity']!r} is not allowed",
            hint=f"allowed: {', '.join(SEVERITIES)}",
        )
    try:
        re.compile(entry["pattern"])
    except re.error as exc:
        raise InputError(f"{where}: pattern {entry['pattern']!r} is not a valid regex ({exc})") from exc
    examples = entry.get("examples") or []
    if not isinstance(examples, list) or not all(isinstance(e, str) and e.strip() for e in examples):
        raise InputError(f"{where}: 'examples' must be a list of non-empty strings (verbatim log lines)")
    kind = entry.get("kind") or ""
    if kind not in ("", *KINDS):
        raise InputError(f"{where}: kind {kind!r} is not allowed", hint=f"allowed: {', '.join(KINDS)}")
    machines = _machines(entry.get("machines"), where)
    return Message(
        id=entry["id"],
        pattern=entry["pattern"],
        severity=entry["severity"],
        title=str(entry.get("title") or entry["id"]),
        cause=" ".join(entry["cause"].split()),
        fix=" ".join(entry["fix"].split()),
        source=str(entry.get("source") or ""),
        doctor_fix=" ".join(str(entry.get("doctor_fix") or "").split()),
        examples=tuple(examples),
        here=" ".join(str(entry.get("here") or "").split()),
        kind=kind,
        family=bool(entry.get("family")),
        machines=machines,
    )


def _machines(raw: object, where: str) -> dict[str, dict[str, str]]:
    """An entry's `machines:` mapping, checked: a machine kind -> {cause, fix, here}, each a non-empty string."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputError(
            f"{where}: 'machines' must map a machine kind to {{cause, fix, here}}",
            hint=f"machine kinds: {', '.join(MACHINES)}",
        )
    out: dict[str, dict[str, str]] = {}
    for name, variant in raw.items():
        if name not in MACHINES:
            raise InputError(
                f"{where}: machines: {name!r} is not a machine kind", hint=f"allowed: {', '.join(MACHINES)}"
            )
        if not isinstance(variant, Mapping) or not variant or set(variant) - set(_MACHINE_KEYS):
            raise InputError(
                f"{where}: machines.{name} must be a mapping of {', '.join(_MACHINE_KEYS)}",
                hint="each a sentence for that machine",
            )
        for key, text in variant.items():
            if not isinstance(text, str) or not text.strip():
                raise InputError(f"{where}: machines.{name}.{key} must be a non-empty string")
        out[str(name)] = {str(k): " ".join(str(v).split()) for k, v in variant.items()}
    return out


def parse_catalogue(data: Any, *, source: str) -> Catalogue:
    """Validate a loaded YAML document; InputError names the file, the entry and the key."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: must be a mapping with 'messages' and 'fixes'")
    messages = []
    ids: set[str] = set()
    for i, entry in enumerate(data.get("messages") or []):
        msg = _message(entry, f"{source}: messages[{i}]")
        if msg.id in ids:
            raise InputError(f"{source}: messages[{i}]: duplicate id {msg.id!r}")
        ids.add(msg.id)
        messages.append(msg)
    fixes: dict[str, FixText] = {}
    raw_fixes = data.get("fixes") or {}
    if not isinstance(raw_fixes, Mapping):
        raise InputError(f"{source}: 'fixes' must map ids to {{title, cause, fix}}")
    for key, entry in raw_fixes.items():
        if not isinstance(entry, Mapping) or any(not isinstance(entry.get(k), str) for k in _FIX_KEYS):
            raise InputError(f"{source}: fixes.{key} needs string keys {', '.join(_FIX_KEYS)}")
        fixes[str(key)] = FixText(**{k: " ".join(entry[k].split()) for k in _FIX_KEYS})
    return Catalogue(messages=tuple(messages), fixes=fixes)


@lru_cache(maxsize=1)
def _shipped() -> Catalogue:
    from mw_env.base.userfile import load_yaml

    # libyaml's parser: 6 ms instead of PyYAML's 85 for these 110 KB, on every doctor run (bootstrap's last
    # step, `mw-env train`'s pre-flight).
    data = load_yaml(CATALOGUE_FILE.read_text(encoding="utf-8"), source=str(CATALOGUE_FILE), shipped=True)
    return parse_catalogue(data, source=str(CATALOGUE_FILE))


def profile_messages(profile: Profile) -> list[Message]:
    """A profile's additions: `doctor.harmless_messages` substrings and optional `doctor.catalogue` entries."""
    name = profile.name
    out = [
        _message(e, f"profile {name}: doctor.catalogue[{i}]") for i, e in enumerate(profile.doctor.catalogue)
    ]
    for i, text in enumerate(profile.doctor.harmless_messages):
        out.append(
            Message(
                id=f"{name}-harmless-{i + 1}",
                pattern=re.escape(str(text)),
                severity="harmless",
                title=str(text),
                cause=f"Known harmless on profile {name}.",
                fix="Nothing to do.",
                source=f"profile {name}",
            )
        )
    return out


@lru_cache(maxsize=1)
def general_advice() -> Advice:
    """The GPU advice of the shipped profiles, for every GPU they name (a log read away from its machine)."""
    from mw_env.checks.gpuadvice import general
    from mw_env.profiles.loader import load_profiles

    return general(load_profiles(env={}))


def load_catalogue(
    *, profile: Profile | None = None, advice: Advice | None = None, machine: str | None = None
) -> Catalogue:
    """The shipped catalogue, extended by the profile's entries, its GPU advice derived from the profiles
    (`advice`: this machine's, from checks.gpuadvice.for_machine; default: every GPU's), each message as it
    reads on `machine` (MACHINES; None: the general text, for a log read away from its machine)."""
    cat = _shipped()
    if profile is not None:
        shipped = [m for m in cat.messages if m.severity == "harmless"]
        # A profile's harmless substring that a shipped harmless entry already covers adds nothing but a
        # poorer explanation; one that re-classifies a warning or a fatal entry goes first and wins.
        extra = [m for m in profile_messages(profile) if not any(s.regex.search(m.title) for s in shipped)]
        cat = cat.extended(extra)
    return cat.advised(advice or general_advice()).on(machine)
