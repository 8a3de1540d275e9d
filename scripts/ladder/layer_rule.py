"""The layer rule that scripts/ladder_move.py appends to tests/test_layout.py (everything below the marker).

It uses test_layout's MODULES (every module of src/mw_env) and GRAPH (each module's imports, found on the AST:
lazy imports inside functions, TYPE_CHECKING imports and importlib strings included). Appended to today's
tests/test_layout.py with `python3 scripts/ladder_move.py --layer-rule`, it fails: today's folders are not the
ladder's, and envlock/provision, profiles/provision and provision/checks import each other's way.
"""

# ruff: noqa
from test_layout import GRAPH, MODULES, pytest  # type: ignore  # (only for reading this template alone)

# --- appended below ---
# -- the ladder: every folder above what it uses (issue 28) ----------------------------------------------

# Bottom up. A module of a rung imports only modules of its own rung or of rungs below it; the top-level
# modules (cli.py, __main__.py) stand above every rung, and `mw_env` itself (the version) below them all.
LADDER = (
    "base",  # errors atomic textsafe userfile userjson typed versions lifeline
    "hardware",  # machine, facts, detect and detection's parts and tables
    "profiles",  # the hardware profiles and their torch sources
    "sources",  # where packages come from: uv, indexlist, wheelhouse, pythons, freshness
    "venv",  # what a venv holds: record, venvinfo, wheelarch, lock/
    "host",  # operator-side commands
    "checks",  # the doctor
    "provision",  # the bootstrap plan and its steps
    "trainspec",  # what a run is: config, validation, preflight, formats/
    "rundir",  # the run folder's contract: names, words, events, manifest, runstate, runlock
    "runs",  # detached runs, supervision, status, stop
    "trainer",  # the loop and its wings: data/, ckpt/, report/, export/, tracking/
    "commands",  # one module per CLI command
)
TOP = len(LADDER)  # cli, __main__


def _rung(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1  # mw_env/__init__.py: the version, below everything
    if parts[1] in LADDER:
        return LADDER.index(parts[1])
    if parts[1] in ("cli", "__main__"):
        return TOP
    raise AssertionError(f"{module} is in no rung of the ladder (LADDER in tests/test_layout.py)")


def test_every_module_stands_on_a_rung() -> None:
    folders = {n.split(".")[1] for n in MODULES if n.count(".") >= 1}
    loose = sorted(folders - set(LADDER) - {"cli", "__main__"})
    assert not loose, f"folders or top-level modules outside the ladder: {loose}; give each its rung"
    assert set(LADDER) <= folders, f"rungs without a folder: {sorted(set(LADDER) - folders)}"


def _upward() -> list[str]:
    found = []
    for name, deps in GRAPH.items():
        here = _rung(name)
        for dep in deps:
            if dep in MODULES and dep != name and _rung(dep) > here:
                found.append(f"{name} ({LADDER[here] if 0 <= here < TOP else 'top'}) imports {dep}")
    return sorted(found)


def test_no_folder_imports_one_above_it() -> None:
    """Lazy imports in functions and TYPE_CHECKING imports count: a loop between two folders that only
    function-level imports make is still a loop (envlock and provision were one)."""
    up = _upward()
    assert not up, "imports up the ladder:\n  " + "\n  ".join(up)


def test_no_folder_loop() -> None:
    edges: dict[str, set[str]] = {}
    for name, deps in GRAPH.items():
        for dep in deps:
            if dep in MODULES and name.count(".") and dep.count("."):
                a, b = name.split(".")[1], dep.split(".")[1]
                if a != b:
                    edges.setdefault(a, set()).add(b)
    seen: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(folder: str, path: list[str]) -> list[str] | None:
        seen[folder] = 1
        for nxt in sorted(edges.get(folder, ())):
            if seen.get(nxt) == 1:
                return [*path, folder, nxt]
            if nxt not in seen and (loop := visit(nxt, [*path, folder])):
                return loop
        seen[folder] = 2
        return None

    for folder in sorted(edges):
        if folder not in seen:
            loop = visit(folder, [])
            assert loop is None, f"folders import each other: {' -> '.join(loop)}"
