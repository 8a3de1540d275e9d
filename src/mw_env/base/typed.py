"""One type-driven reader for frozen dataclasses: parsed YAML/TOML in, checked dataclasses out.

The field types are the schema. A `Reader` walks a dataclass's resolved type hints (int, float, bool, str,
`X | None`, `Literal[...]`, `tuple[X, ...]`, `Mapping[K, V]`, nested dataclasses, `Any`) and converts only
lossless, unambiguous cases (an integral float for an int, "1e-3" for a float: YAML 1.1 reads it as text).
Every problem becomes an `Issue` (the dotted key, the value, what was expected, the allowed values, close
matches for an unknown key) that the caller turns into its `InputError`, so the profile loader and the
trainer config keep their own wording over one set of rules. Checks a type cannot say (a pattern, a range)
are `Rule`s keyed by (dataclass, field); checks across fields stay with the caller.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mw_env.base.errors import InputError

IssueKind = Literal["type", "choice", "unknown", "required", "rule"]


@dataclass(frozen=True)
class Issue:
    """One thing wrong with the input, at `key` ("" = the top level; "sources[0].id" inside a list)."""

    key: str
    kind: IssueKind
    value: object = None
    expected: str = ""  # kind "type": what the field takes ("an integer", "a mapping")
    allowed: str | None = None  # the allowed values or keys, for the hint
    suggestions: tuple[str, ...] = ()  # kind "unknown": the close matches
    detail: str = ""  # kind "rule": the rule's own words

    @property
    def problem(self) -> str:
        if self.kind == "type":
            shown = type(self.value).__name__
            if self.expected != "a mapping":  # a whole mapping or list repr would swamp the message
                shown = f"{short(self.value)} ({shown})"
            return f"must be {self.expected}, got {shown}"
        if self.kind == "choice":
            return f"invalid value {short(self.value)}"
        if self.kind == "unknown":
            return "unknown key"
        if self.kind == "required":
            return "is required"
        return self.detail


Render = Callable[[Issue], InputError]


def short(value: object, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters: a pasted blob must not become a screenful of error."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Rule:
    """A check a type cannot express: `check(value)` returns the problem, or None when the value is fine."""

    check: Callable[[Any], str | None]
    allowed: str | None = None  # shown in the hint of every failure of this field
    each: bool = False  # on a tuple field: check every item (key[i]) instead of the whole tuple

    @classmethod
    def pattern(cls, regex: re.Pattern[str] | str, allowed: str, *, each: bool = False) -> Rule:
        compiled = re.compile(regex) if isinstance(regex, str) else regex

        def check(value: Any) -> str | None:
            return None if compiled.fullmatch(value) else f"invalid value {short(value)}"

        return cls(check, allowed, each=each)


@dataclass(frozen=True)
class Policy:
    """How forgiving a reader is, per file format (the profile loader and the trainer config differ)."""

    # YAML reads `min_hip: 6.2` as a float: a text field takes a number as its text; text is stripped,
    # and a required text field or a list item must not be empty.
    numbers_as_text: bool = False
    null_is_default: bool = False  # `key: null` (or a bare `key:`) means "not set": the field's default
    text_as_list: bool = False  # a single string where a list of strings is expected is a one-item list


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each init field of a dataclass (postponed annotations evaluated once)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def choices(tp: Any) -> tuple[Any, ...]:
    """The allowed values of a `Literal[...]` type (the one source of an allowed-values list)."""
    if typing.get_origin(tp) is not Literal:
        raise TypeError(f"{tp!r} is not a Literal type")
    return typing.get_args(tp)


def leaf_types(cls: type, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> type for every non-dataclass field below `cls` ("optim.lr" -> float)."""
    out: dict[str, Any] = {}
    for name, tp in field_types(cls).items():
        if dataclasses.is_dataclass(tp):
            out.update(leaf_types(tp, f"{prefix}{name}."))  # type: ignore[arg-type]
        else:
            out[f"{prefix}{name}"] = tp
    return out


def build(cls: type, flat: Mapping[str, object]) -> Any:
    """Construct nested dataclasses from dotted keys (missing keys take the field defaults)."""
    kwargs: dict[str, Any] = {}
    for name, tp in field_types(cls).items():
        if dataclasses.is_dataclass(tp):
            inner = {k[len(name) + 1 :]: v for k, v in flat.items() if k.startswith(name + ".")}
            kwargs[name] = build(tp, inner)  # type: ignore[arg-type]
        elif name in flat:
            kwargs[name] = flat[name]
    return cls(**kwargs)


def describe(tp: Any) -> str:
    """What a field takes, in words: "an integer", "a list of strings", "a string or null"."""
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", Any: "a value"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(c) for c in typing.get_args(tp))
    if origin is tuple:
        inner = describe(typing.get_args(tp)[0])
        plural = {"an integer": "integers", "a number": "numbers", "a string": "strings"}
        return f"a list of {plural.get(inner, 'mappings' if inner == 'a mapping' else 'values')}"
    if _is_optional(tp):
        return f"{describe(_inner(tp))} or null"
    if origin in (dict, Mapping) or dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _inner(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) != 1:
        raise TypeError(f"{tp!r}: only `X | None` unions are supported")
    return args[0]


def _leaves(value: object, key: str) -> list[tuple[str, object]]:
    """(key, value) of every item below lists and mappings (a `Rule(each=True)` checks each one)."""
    if isinstance(value, tuple):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{key}[{i}]")]
    if isinstance(value, Mapping):
        return [leaf for k, v in value.items() for leaf in _leaves(v, _join(key, k))]
    return [(key, value)]


def _join(key: str, name: object) -> str:
    return f"{key}.{name}" if key else str(name)


class Reader:
    """Checks parsed data against dataclass types; `render` turns each Issue into the caller's InputError."""

    def __init__(
        self,
        render: Render,
        *,
        policy: Policy = Policy(),
        rules: Mapping[tuple[type, str], Rule] | None = None,
        skip: Mapping[type, tuple[str, ...]] | None = None,
    ) -> None:
        self.render = render
        self.policy = policy
        self.rules = dict(rules or {})
        # Fields the file may not set (e.g. Profile.path, filled in by the loader).
        self.skip = dict(skip or {})

    def names(self, cls: type) -> list[str]:
        """The keys a file may set for `cls`, in field order."""
        return [n for n in field_types(cls) if n not in self.skip.get(cls, ())]

    def unknown(self, parent: str, name: str, known: list[str]) -> InputError:
        """An unknown key `name` below `parent`, with the close matches among `known` (as dotted keys)."""
        import difflib  # only for a "did you mean"

        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        return self.render(
            Issue(
                _join(parent, name),
                "unknown",
                name,
                allowed=", ".join(known),
                suggestions=tuple(_join(parent, c) for c in close),
            )
        )

    def _check_keys(self, cls: type, data: Mapping[Any, Any], key: str) -> list[str]:
        names = self.names(cls)
        for k in data:
            if k not in names:
                raise self.unknown(key, str(k), names)
        return names

    def _not_mapping(self, cls: type, value: object, key: str) -> InputError:
        return self.render(
            Issue(key, "type", value, "a mapping", allowed=f"keys {', '.join(self.names(cls))}")
        )

    def read(self, cls: type, data: Any, key: str = "", **extra: Any) -> Any:
        """Check `data` (a mapping) against `cls` and construct it; `extra` are fields set by the caller."""
        if data is None and self.policy.null_is_default:
            data = {}
        if not isinstance(data, Mapping):
            raise self._not_mapping(cls, data, key)
        names = self._check_keys(cls, data, key)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = dict(extra)
        for name in names:
            sub = _join(key, name)
            rule = self.rules.get((cls, name))
            raw = data.get(name)
            tp = field_types(cls)[name]
            if name not in data or (raw is None and self.policy.null_is_default):
                f = fields[name]
                if _is_optional(tp):  # `X | None` without a default: absent means None
                    kwargs[name] = None if f.default is dataclasses.MISSING else f.default
                elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    options = (
                        ", ".join(map(str, typing.get_args(tp))) if typing.get_origin(tp) is Literal else None
                    )
                    raise self.render(Issue(sub, "required", allowed=rule.allowed if rule else options))
                continue
            required = fields[name].default is dataclasses.MISSING
            kwargs[name] = self.coerce(tp, raw, sub, rule, required=required)
        return cls(**kwargs)

    def flatten(self, cls: type, data: Mapping[Any, Any], key: str = "") -> dict[str, Any]:
        """The raw leaf values of nested-dataclass data by dotted key, unknown keys and sections refused."""
        self._check_keys(cls, data, key)
        flat: dict[str, Any] = {}
        for name, raw in data.items():
            tp = field_types(cls)[name]
            sub = _join(key, name)
            if dataclasses.is_dataclass(tp):
                if raw is None:  # an empty section
                    continue
                if not isinstance(raw, Mapping):
                    raise self._not_mapping(tp, raw, sub)  # type: ignore[arg-type]
                flat.update(self.flatten(tp, raw, sub))  # type: ignore[arg-type]
            else:
                flat[sub] = raw
        return flat

    def coerce(
        self, tp: Any, value: Any, key: str, rule: Rule | None = None, *, required: bool = False
    ) -> Any:
        """`value` checked against `tp` (and `rule`), converted where that is lossless."""
        allowed = rule.allowed if rule else None
        out = self._coerce(tp, value, key, allowed)
        if out == "" and required and self.policy.numbers_as_text:
            raise self.render(Issue(key, "rule", value, allowed=allowed, detail="must not be empty"))
        if rule is not None and out is not None:
            for where, item in _leaves(out, key) if rule.each else [(key, out)]:
                problem = rule.check(item)
                if problem:
                    raise self.render(Issue(where, "rule", item, allowed=rule.allowed, detail=problem))
        return out

    def _coerce(self, tp: Any, value: Any, key: str, allowed: str | None) -> Any:
        def bad(expected: str | None = None, hint: str | None = allowed) -> InputError:
            return self.render(Issue(key, "type", value, expected or describe(tp), allowed=hint))

        if tp is Any:
            return value
        if _is_optional(tp):
            return None if value is None else self._coerce(_inner(tp), value, key, allowed)
        origin = typing.get_origin(tp)
        if origin is Literal:
            options = typing.get_args(tp)
            # `type(...) is` too: YAML's `true` must not pass as the choice 1, nor 1 as True.
            if any(value == c and type(value) is type(c) for c in options):
                return value
            shown = ", ".join(str(c) for c in options)
            raise self.render(Issue(key, "choice", value, describe(tp), allowed=allowed or shown))
        if tp is bool:
            if isinstance(value, bool):
                return value
            raise bad(hint=allowed or "true, false")
        if tp is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise bad()
        if tp is float:
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                # A str: YAML 1.1 reads "1e-3" as a string; TOML and users mean a number. An int beyond a
                # float's range (10**400) is an OverflowError: the same "must be a number" as a word.
                try:
                    return float(value)
                except (ValueError, OverflowError):
                    raise bad() from None
            raise bad()
        if tp is str:
            return self._text(value, bad)
        if origin is tuple:
            return self._tuple(typing.get_args(tp)[0], value, key, allowed, bad)
        if origin in (dict, Mapping):
            if not isinstance(value, Mapping):
                raise bad("a mapping")
            key_tp, value_tp = typing.get_args(tp)
            result = {}
            for k, v in value.items():
                if typing.get_origin(key_tp) is Literal and k not in typing.get_args(key_tp):
                    raise self.unknown(key, str(k), [str(c) for c in typing.get_args(key_tp)])
                name = self._coerce(key_tp, k, _join(key, k), allowed)
                result[name] = self._coerce(value_tp, v, _join(key, name), allowed)
            return result
        if dataclasses.is_dataclass(tp):
            return self.read(tp, value, key)  # type: ignore[arg-type]
        raise TypeError(f"mw_env.base.typed: unsupported field type {tp!r} at {key}")

    def _tuple(
        self, item_tp: Any, value: Any, key: str, allowed: str | None, bad: Callable[..., InputError]
    ) -> tuple[Any, ...]:
        if isinstance(value, str) and self.policy.text_as_list:
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise bad()
        out = []
        for i, v in enumerate(value):
            item = self._coerce(item_tp, v, f"{key}[{i}]", allowed)
            if item == "" and self.policy.numbers_as_text:
                raise self.render(
                    Issue(f"{key}[{i}]", "rule", v, allowed=allowed, detail="must not be empty")
                )
            out.append(item)
        return tuple(out)

    def _text(self, value: object, bad: Callable[..., InputError]) -> str:
        if isinstance(value, str):
            return value.strip() if self.policy.numbers_as_text else value
        if self.policy.numbers_as_text and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad()
