"""Choices a plan makes before any step runs: the interpreter and the torch source.

The rule the seeds teach: torch must come from the profile's build (never the resolver's default).
A wheelhouse that already holds a wheel of that build wins over the remote index; when the index
cannot be reached, the interpreter is chosen to fit the wheel that is at hand, with a warning.

`choose` asks an ordered list of strategies (STRATEGIES); the first that answers decides. Each is a small
function of one `_Search`, whose costly facts (the wanted interpreter, the index's reachability, the
fallback interpreters) are looked up once, and only when a strategy needs them. A problem is a typed
`Problem` (input or preflight), never a loose string.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from mw_env.base.errors import InputError, MwEnvError, StepFailed
from mw_env.sources.pythons import (
    AdoptCandidate,
    Interpreter,
    find_image_torch,
    find_interpreter,
    image_pythons,
    read_project_meta,
    supported,
)
from mw_env.sources.wheelhouse import Reach, Sources, WheelFile, matching_torch, probe_index, wheels_in

__all__ = [
    "AdoptCandidate",
    "Choice",
    "ChoiceRequest",
    "Interpreter",
    "Problem",
    "TorchChoice",
    "choose",
    "exact_requirement",
    "find_image_torch",
    "image_pythons",
    "read_project_meta",
    "supported",
    "version_fits",
]

FALLBACK_PYTHONS = ("3.12", "3.13", "3.11", "3.10")


@dataclass(frozen=True)
class TorchChoice:
    """Where torch comes from and the requirement that installs it."""

    requirement: str  # "torch==2.13.0+cpu" (a wheelhouse pins exactly) or "torch>=2.9,<2.15"
    origin: str  # "wheelhouse" | "index" | "image" | "installed"
    location: str | None  # the wheel's path, the index URL, or the image's site-packages
    wheel: WheelFile | None = None
    image_version: str | None = None  # adoption: the image's torch version


def torch_spec_requirement(version_spec: str) -> str:
    return f"torch{version_spec}" if version_spec else "torch"


def exact_requirement(version_spec: str, local_tag: str) -> str:
    """`torch==2.9.1+rocm6.4` when the profile names one release, else the range (the index decides)."""
    m = re.fullmatch(r"\s*==\s*([0-9][^,;\s]*)\s*", version_spec or "")
    if m and local_tag and "+" not in m.group(1) and "*" not in m.group(1):
        return f"torch=={m.group(1)}{local_tag}"
    return torch_spec_requirement(version_spec)


def version_fits(version: str, spec: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # here: planning seldom needs it
    from packaging.version import InvalidVersion, Version

    try:
        return SpecifierSet(spec or "").contains(Version(version).public, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


@dataclass(frozen=True)
class Problem:
    """Why no workable (interpreter, torch source) was found. An input problem (an explicit --python that
    cannot be used) is bad input, exit 2, raised by the plan; any other stops the bootstrap at preflight."""

    message: str
    hint: str | None = None
    input: bool = False

    def error(self) -> MwEnvError:
        return (
            InputError(self.message, hint=self.hint)
            if self.input
            else StepFailed(self.message, hint=self.hint)
        )


@dataclass(frozen=True)
class Choice:
    python: Interpreter | None
    torch: TorchChoice | None
    warnings: tuple[str, ...] = ()
    problem: Problem | None = None  # why nothing workable was found
    reach: Reach | None = None
    notes: tuple[str, ...] = ()  # choices worth a line, not a warning (the wheelhouse decided the Python)


@dataclass(frozen=True)
class ChoiceRequest:
    """What the plan asks for: an interpreter (`request`, explicit or a default) and the profile's torch."""

    uv: str | None
    env: Mapping[str, str]
    request: str
    explicit: bool
    build: str
    version_spec: str
    local_tag: str
    index_url: str | None
    sources: Sources
    offline: bool
    requires_python: str | None


class _Search:
    """The facts the strategies decide on; each costly one is looked up at most once, when first needed."""

    def __init__(self, req: ChoiceRequest) -> None:
        self.req = req
        wheels = wheels_in(req.sources.find_links, "torch")
        self.good, self.other_versions = matching_torch(
            wheels, local_tag=req.local_tag or None, specifier=req.version_spec
        )
        self.wheel_pythons = [p for w in self.good for p in w.pythons()]
        # A wheelhouse whose torch names its Pythons (cp311) and not the default one answers the question
        # alone: looking the default up (a second or more behind pyenv shims) would only be thrown away.
        self.skip_wanted = (
            not req.explicit
            and bool(self.good)
            and all(w.pythons() for w in self.good)
            and req.request not in self.wheel_pythons
        )
        self.found = None if self.skip_wanted else find_interpreter(req.uv, req.request, req.env)
        fits = self.found is not None and supported(self.found.version, req.requires_python)
        self.wanted = self.found if fits else None

    @cached_property
    def reach(self) -> Reach | None:
        if self.req.index_url and not self.req.offline:
            return probe_index(self.req.index_url, env=self.req.env)
        return None

    @property
    def index_ok(self) -> bool:
        return self.reach is not None and self.reach.ok

    def why_index(self) -> str:
        if self.req.offline:
            return "--offline was given"
        return (
            f"{self.req.index_url} is unreachable ({self.reach.detail})"
            if self.reach
            else "the profile names no index"
        )

    @cached_property
    def candidates(self) -> list[Interpreter]:
        """The wanted interpreter, then (unless --python was explicit) every other supported one found."""
        out: list[Interpreter] = [self.wanted] if self.wanted else []
        if self.req.explicit:
            return out
        pythons = (*(p for w in self.good + self.other_versions for p in w.pythons()), *FALLBACK_PYTHONS)
        requests = [r for r in dict.fromkeys(pythons) if not (self.wanted and r == self.wanted.minor)]
        # Each lookup starts uv (and, behind pyenv shims, several interpreters): side by side, in order.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=4) as pool:
            looked_up = list(pool.map(lambda r: find_interpreter(self.req.uv, r, self.req.env), requests))
        for found in looked_up:
            if found and supported(found.version, self.req.requires_python) and found not in out:
                out.append(found)
        return out

    def index_torch(self) -> TorchChoice:
        return TorchChoice(
            exact_requirement(self.req.version_spec, self.req.local_tag), "index", self.req.index_url
        )


def _wheel_for(py: Interpreter, pool: Sequence[WheelFile]) -> WheelFile | None:
    return next((w for w in pool if w.fits_python(py.version)), None)


def _from_wheel(w: WheelFile) -> TorchChoice:
    return TorchChoice(f"torch=={w.version}", "wheelhouse", str(w.path), wheel=w)


def _explicit_python_unsupported(s: _Search) -> Choice | None:
    if not (s.req.explicit and s.found is not None and s.wanted is None):
        return None
    return Choice(
        None,
        None,
        problem=Problem(
            f"--python {s.req.request}: Python {s.found.version} does not satisfy the project's "
            f"requires-python {s.req.requires_python}",
            "pass another --python, or omit it to use an available supported Python",
            input=True,
        ),
    )


def _wanted_python_in_the_wheelhouse(s: _Search) -> Choice | None:
    w = _wheel_for(s.wanted, s.good) if s.wanted else None
    return Choice(s.wanted, _from_wheel(w)) if w else None


def _a_python_the_wheelhouse_fits(s: _Search) -> Choice | None:
    """The operator's wheelhouse satisfies the profile: take a Python it fits, found one request at a time
    (not every Python on PATH), and never ask the torch index to decide (no network at all)."""
    if s.req.explicit or not s.good:
        return None
    for minor in dict.fromkeys(s.wheel_pythons):
        if s.wanted is not None and minor == s.wanted.minor:
            continue
        py = find_interpreter(s.req.uv, minor, s.req.env)
        if py is None or not supported(py.version, s.req.requires_python):
            continue
        w = _wheel_for(py, s.good)
        if w is None:
            continue
        why = "has no wheel there" if s.skip_wanted or s.wanted is not None else "is not available"
        note = (
            f"Python {py.version} ({py.path}) for the venv: the wheelhouse's torch {w.version} fits Python "
            f"{', '.join(w.pythons())}, and the default Python {s.req.request} {why} (--python chooses another)"
        )
        return Choice(py, _from_wheel(w), notes=(note,))
    return None


def _wanted_python_from_the_index(s: _Search) -> Choice | None:
    if s.wanted is None or not s.index_ok:
        return None
    return Choice(s.wanted, s.index_torch(), reach=s.reach)


def _explicit_python_missing(s: _Search) -> Choice | None:
    if not (s.req.explicit and s.wanted is None):
        return None
    message = f"--python {s.req.request}: Python {s.req.request} was not found"
    return Choice(
        None, None, problem=Problem(message, _python_hint(s.req.request), input=True), reach=s.reach
    )


def _another_python_for_a_wheel(s: _Search) -> Choice | None:
    """The wanted interpreter is missing or the index cannot be used: a wheel at hand decides (warned)."""
    for pool, note in ((s.good, ""), (s.other_versions, " (outside the profile's range {spec})")):
        for py in s.candidates:
            w = _wheel_for(py, pool)
            if w is None:
                continue
            warnings: list[str] = []
            if py != s.wanted:
                fits = ", ".join(w.pythons()) or "any"
                missing = (
                    f"Python {s.req.request} is not available; the wheelhouse's torch {w.version} fits Python {fits}"
                    if s.wanted is None
                    else f"the wheelhouse's torch {w.version} fits only Python {fits}, and {s.why_index()}"
                )
                warnings.append(f"using Python {py.version} ({py.path}): {missing}")
            if note:
                warnings.append(
                    f"using the wheelhouse's torch {w.version}{note.format(spec=s.req.version_spec)}: {s.why_index()}"
                )
            return Choice(py, _from_wheel(w), tuple(warnings), reach=s.reach)
    return None


def _another_python_from_the_index(s: _Search) -> Choice | None:
    if not (s.index_ok and s.candidates):
        return None
    py = s.candidates[0]
    warning = f"using Python {py.version} ({py.path}): Python {s.req.request} is not available"
    return Choice(py, s.index_torch(), (warning,), reach=s.reach)


def _no_python(s: _Search) -> Choice | None:
    if s.candidates:
        return None
    problem = Problem(
        f"no Python interpreter satisfying {s.req.requires_python or 'the project'} was found",
        _python_hint(s.req.request),
    )
    return Choice(None, None, problem=problem, reach=s.reach)


def _no_torch_source(s: _Search) -> Choice:
    """The last word: an interpreter, but neither a wheel nor a reachable index."""
    from mw_env.sources.wheelhouse import unreachable_hint

    tag, reach = s.req.local_tag, s.reach
    if s.req.offline:
        message = f"--offline, and no wheelhouse holds a torch{tag} wheel for Python {s.candidates[0].minor}"
    elif not s.req.index_url:
        message = f"the profile names no torch index and no wheelhouse holds a torch{tag} wheel"
    else:
        message = f"the torch index {s.req.index_url} is unreachable: {reach.detail if reach else '?'}"
    hint = unreachable_hint(reach) if reach else "pass --find-links DIR with a folder holding the torch wheel"
    return Choice(s.candidates[0], None, problem=Problem(message, hint), reach=reach)


# In order: the first strategy that answers decides. The last always answers.
STRATEGIES: tuple[Callable[[_Search], Choice | None], ...] = (
    _explicit_python_unsupported,
    _wanted_python_in_the_wheelhouse,
    _a_python_the_wheelhouse_fits,
    _wanted_python_from_the_index,
    _explicit_python_missing,
    _another_python_for_a_wheel,
    _another_python_from_the_index,
    _no_python,
    _no_torch_source,
)


def choose(request: ChoiceRequest) -> Choice:
    """Pick (interpreter, torch source) so that the install can succeed, warning about every fallback."""
    search = _Search(request)
    for strategy in STRATEGIES:
        choice = strategy(search)
        if choice is not None:
            return choice
    raise AssertionError("the last strategy always answers")  # pragma: no cover


def _python_hint(request: str) -> str:
    if os.sep in request:
        return "pass --python with the path of an existing interpreter, or a version such as 3.12"
    return (
        f"install it (`uv python install {request}`, or your distribution's python{request} package) or "
        "pass --python with a version or path that exists"
    )
