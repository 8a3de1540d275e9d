"""The type-driven reader: every field type it supports, each kind of bad value, and the policies."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from mw_env.base.errors import InputError
from mw_env.base.typed import Issue, Policy, Reader, Rule, build, choices, describe, field_types, leaf_types

Color = Literal["red", "green"]


@dataclass(frozen=True)
class Inner:
    size: int = 1
    ratio: float = 0.5


@dataclass(frozen=True)
class Outer:
    name: str
    color: Color = "red"
    shade: Color | None = None
    on: bool = False
    tags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)
    items: tuple[Inner, ...] = ()
    extra: Any = None


class Raised(InputError):
    def __init__(self, issue: Issue) -> None:
        super().__init__(f"{issue.key}: {issue.problem}", hint=issue.allowed)
        self.issue = issue


def reader(**kwargs: Any) -> Reader:
    return Reader(Raised, **kwargs)


def issue_of(data: Any, **kwargs: Any) -> Issue:
    with pytest.raises(Raised) as err:
        reader(**kwargs).read(Outer, data)
    return err.value.issue


def test_reads_every_supported_type() -> None:
    data = {
        "name": "a",
        "color": "green",
        "shade": None,
        "on": True,
        "tags": ["x", "y"],
        "env": {"K": "v"},
        "inner": {"size": 3.0, "ratio": "1e-3"},  # lossless: 3.0 -> 3; YAML 1.1 reads 1e-3 as text
        "items": [{"size": 2}],
        "extra": [1, {"a": 2}],
    }
    got = reader().read(Outer, data)
    assert got == Outer(
        name="a",
        color="green",
        on=True,
        tags=("x", "y"),
        env={"K": "v"},
        inner=Inner(size=3, ratio=1e-3),
        items=(Inner(size=2),),
        extra=[1, {"a": 2}],
    )
    assert isinstance(got.inner.size, int)


@pytest.mark.parametrize(
    ("data", "key", "kind", "problem"),
    [
        ({"name": "a", "color": "blue"}, "color", "choice", "invalid value 'blue'"),
        ({"name": "a", "shade": "blue"}, "shade", "choice", "invalid value 'blue'"),
        ({"name": "a", "on": "yes"}, "on", "type", "must be true or false, got 'yes' (str)"),
        ({"name": "a", "on": 1}, "on", "type", "must be true or false, got 1 (int)"),
        ({"name": "a", "inner": {"size": 1.5}}, "inner.size", "type", "must be an integer, got 1.5 (float)"),
        ({"name": "a", "inner": {"size": True}}, "inner.size", "type", "must be an integer, got True (bool)"),
        (
            {"name": "a", "inner": {"ratio": "fast"}},
            "inner.ratio",
            "type",
            "must be a number, got 'fast' (str)",
        ),
        ({"name": "a", "inner": 3}, "inner", "type", "must be a mapping, got int"),
        ({"name": "a", "tags": "x"}, "tags", "type", "must be a list of strings, got 'x' (str)"),
        ({"name": "a", "tags": ["x", 2]}, "tags[1]", "type", "must be a string, got 2 (int)"),
        ({"name": "a", "env": {"K": 1}}, "env.K", "type", "must be a string, got 1 (int)"),
        ({"name": "a", "items": [{"sise": 1}]}, "items[0].sise", "unknown", "unknown key"),
        ({"color": "red"}, "name", "required", "is required"),
        ({"name": 5}, "name", "type", "must be a string, got 5 (int)"),
        ([1], "", "type", "must be a mapping, got list"),
    ],
)
def test_each_bad_value_names_the_dotted_key(data: Any, key: str, kind: str, problem: str) -> None:
    issue = issue_of(data)
    assert (issue.key, issue.kind, issue.problem) == (key, kind, problem)


def test_literal_does_not_confuse_bools_and_numbers() -> None:
    @dataclass(frozen=True)
    class Numbered:
        level: Literal[0, 1] = 0

    with pytest.raises(Raised):
        reader().read(Numbered, {"level": True})  # True == 1, but it is not the choice 1
    assert reader().read(Numbered, {"level": 1}).level == 1


def test_unknown_key_suggests_the_close_dotted_names_and_lists_all() -> None:
    issue = issue_of({"name": "a", "inner": {"szie": 2}})
    assert issue.key == "inner.szie" and issue.suggestions == ("inner.size",)
    assert issue.allowed == "size, ratio"
    top = issue_of({"name": "a", "inenr": {}})
    assert top.suggestions[0] == "inner"


def test_choice_and_required_issues_carry_the_allowed_values() -> None:
    assert issue_of({"name": "a", "color": "blue"}).allowed == "red, green"
    assert choices(Color) == ("red", "green")
    with pytest.raises(TypeError):
        choices(int)


def test_rules_check_values_and_each_item() -> None:
    rules = {
        (Outer, "name"): Rule.pattern(r"^[a-z]+$", "lower-case letters"),
        (Outer, "tags"): Rule(lambda t: None if t != "bad" else "a bad tag", "good tags", each=True),
        (Inner, "size"): Rule(lambda v: None if v > 0 else f"must be positive, got {v}"),
    }
    named = issue_of({"name": "A1"}, rules=rules)
    assert (named.key, named.problem, named.allowed) == ("name", "invalid value 'A1'", "lower-case letters")
    tagged = issue_of({"name": "a", "tags": ["ok", "bad"]}, rules=rules)
    assert (tagged.key, tagged.problem, tagged.allowed) == ("tags[1]", "a bad tag", "good tags")
    sized = issue_of({"name": "a", "items": [{"size": 0}]}, rules=rules)
    assert (sized.key, sized.problem) == ("items[0].size", "must be positive, got 0")
    # A type failure of a ruled field shows the rule's allowed text too.
    assert issue_of({"name": 1}, rules=rules).allowed == "lower-case letters"


def test_lenient_policy_takes_numbers_as_text_and_null_as_default() -> None:
    lenient = Policy(numbers_as_text=True, null_is_default=True)
    got = reader(policy=lenient).read(Outer, {"name": " a ", "tags": [6.2], "on": None, "inner": None})
    assert (got.name, got.tags, got.on, got.inner) == ("a", ("6.2",), False, Inner())
    empty = issue_of({"name": "  "}, policy=lenient)
    assert (empty.key, empty.problem) == ("name", "must not be empty")
    assert issue_of({"name": "a", "tags": [""]}, policy=lenient).key == "tags[0]"
    # The strict default: null is a value, and a number is not text.
    assert issue_of({"name": "a", "on": None}).problem == "must be true or false, got None (NoneType)"


def test_text_as_list_policy() -> None:
    got = reader(policy=Policy(text_as_list=True)).read(Outer, {"name": "a", "tags": "x"})
    assert got.tags == ("x",)


def test_skipped_fields_are_unknown_to_the_file_but_settable_by_the_caller() -> None:
    @dataclass(frozen=True)
    class Loaded:
        name: str
        path: Path | None = None

    r = reader(skip={Loaded: ("path",)})
    assert r.read(Loaded, {"name": "a"}, path=Path("f")).path == Path("f")
    with pytest.raises(Raised) as err:
        r.read(Loaded, {"name": "a", "path": "x"})
    assert err.value.issue.kind == "unknown"


def test_flatten_and_build_round_trip_by_dotted_key() -> None:
    @dataclass(frozen=True)
    class Config:
        inner: Inner = field(default_factory=Inner)
        other: Inner = field(default_factory=Inner)

    assert leaf_types(Config) == {
        "inner.size": int,
        "inner.ratio": float,
        "other.size": int,
        "other.ratio": float,
    }
    flat = reader().flatten(Config, {"inner": {"size": 4}, "other": None})
    assert flat == {"inner.size": 4}
    assert build(Config, flat) == Config(inner=Inner(size=4))
    with pytest.raises(Raised) as err:
        reader().flatten(Config, {"iner": {}})
    assert err.value.issue.suggestions == ("inner",)
    with pytest.raises(Raised) as err:
        reader().flatten(Config, {"inner": [1]})
    assert (err.value.issue.key, err.value.issue.expected) == ("inner", "a mapping")


def test_describe_and_field_types() -> None:
    assert describe(tuple[str, ...]) == "a list of strings"
    assert describe(int | None) == "an integer or null"
    assert describe(Color) == "one of red, green"
    assert field_types(Inner) == {"size": int, "ratio": float}


def test_an_unsupported_field_type_is_a_programming_error() -> None:
    @dataclass(frozen=True)
    class Odd:
        when: set[str] = field(default_factory=set)

    with pytest.raises(TypeError, match="unsupported field type"):
        reader().read(Odd, {"when": ["a"]})


def test_a_long_value_is_cut_in_the_message() -> None:
    issue = issue_of({"name": "a", "on": "x" * 500})
    assert len(issue.problem) < 120 and issue.problem.endswith("... (str)")
