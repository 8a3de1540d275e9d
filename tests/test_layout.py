"""The layout's rules, checked on the source (AST, so lazy, TYPE_CHECKING and importlib imports count too).

- Where code runs: only `mw_env.trainer` runs inside the training venv; nothing else imports it or torch
  (mw-env's own interpreter may have no torch). Probe scripts that are *sent* to the venv's python are text.
- No import cycles, however the import is hidden.
- One atomic writer: `os.replace` appears only in `mw_env.base.atomic` (and the venv swap).
- No module over 450 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "mw_env"
IN_VENV = "mw_env.trainer"
# Modules whose torch imports live in code that runs in the venv's python (sent there as a script file).
VENV_SCRIPTS = {"mw_env.checks.probe_script"}
MAX_LINES = 450


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, anywhere in the file (resolved to modules of the package where possible)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                found.add(sub if sub in MODULES else mod)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _in_venv(name: str) -> bool:
    return name == IN_VENV or name.startswith(IN_VENV + ".")


def test_the_layout_is_what_the_rule_talks_about() -> None:
    # A rename of the packages must update this test, not silently pass it.
    for pkg in ("mw_env.trainer", "mw_env.trainspec", "mw_env.runs", "mw_env.base.atomic"):
        assert pkg in MODULES, pkg
    assert {"mw_env.trainer.loop", "mw_env.runs.launch", "mw_env.trainspec.config"} <= set(MODULES)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not _in_venv(n) and n not in VENV_SCRIPTS))
def test_host_side_never_imports_the_trainer_or_torch(name: str) -> None:
    bad = sorted(m for m in GRAPH[name] if _in_venv(m) or m == "torch" or m.startswith("torch."))
    assert not bad, f"{name} (runs in mw-env's own interpreter) imports {bad}"


def _cycles() -> list[list[str]]:
    internal = {n: sorted(m for m in deps if m in MODULES and m != n) for n, deps in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def strong(v: str) -> None:  # Tarjan's strongly connected components
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in internal[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in internal:
        if v not in index:
            strong(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_os_replace_only_in_the_atomic_writer() -> None:
    allowed = {
        "mw_env.base.atomic",
        "mw_env.provision.steps",
    }  # steps: the venv swap (two renames, recoverable)
    users = sorted(n for n, p in MODULES.items() if "os.replace(" in p.read_text(encoding="utf-8"))
    assert set(users) <= allowed, users


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_small(name: str) -> None:
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it (docs/design.md)"


# -- the bootstrap's steps (provision/table.py) -----------------------------------------------------------


def _function(module: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize(
    ("module", "name", "limit"),
    [
        ("mw_env.provision.execute", "execute", 40),
        ("mw_env.provision.choose", "choose", 60),
        # Its one Plan(...) names every field where it is set (issue 39: no `**fields`), ~45 of its lines.
        ("mw_env.provision.plan", "plan", 75),
    ],
)
def test_the_bootstrap_functions_stay_short(module: str, name: str, limit: int) -> None:
    fn = _function(module, name)
    lines = (fn.end_lineno or fn.lineno) - fn.lineno + 1
    assert lines <= limit, (
        f"{module}.{name} has {lines} lines (at most {limit}): give the new part its own object"
    )


def test_the_executor_knows_no_step_by_name() -> None:
    """What a step does, and how it runs beside others, is its StepSpec's: the executor never asks `step.id ==`."""
    from mw_env.provision.table import STEPS

    ids = {s.id for s in STEPS}
    assert {"preflight", "torch", "verify-torch", "pin-torch", "extras", "doctor"} <= ids  # the rule is live
    tree = ast.parse(MODULES["mw_env.provision.execute"].read_text(encoding="utf-8"))
    # The JSON output's keys ("venv", "torch", "doctor") are field names, not steps.
    keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys if k is not None}
    strings = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in keys
    }
    named = sorted(strings & ids)
    assert not named, f"mw_env.provision.execute names steps {named}: move that to their StepSpec"


def test_every_step_is_one_object_in_the_table() -> None:
    """StepSpec objects are made in provision/table.py only, and each id is there once."""
    from mw_env.provision.table import STEPS

    assert len({s.id for s in STEPS}) == len(STEPS)
    makers = sorted(
        n
        for n, p in MODULES.items()
        if n != "mw_env.provision.table" and "StepSpec(" in p.read_text(encoding="utf-8")
    )
    assert not makers, f"steps defined outside provision/table.py: {makers}"


# -- the machine seam -------------------------------------------------------------------------------------

_HOST_CALLS = {
    ("os", "listdir"),
    ("os", "scandir"),
    ("os", "walk"),
    ("os", "access"),
    ("os", "stat"),
    ("shutil", "which"),
    ("glob", "glob"),
}


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if (n.startswith("mw_env.hardware") and n != "mw_env.hardware.machine"))
)
def test_detection_reaches_the_machine_only_through_machine(name: str) -> None:
    """Detection lists folders and runs programs through `Machine` (which keeps a fake root's to itself),
    never itself: no subprocess, no os.listdir/scandir/access, no shutil.which on host paths."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    bad = sorted(
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and (n.value.id, n.attr) in _HOST_CALLS
    )
    imports = GRAPH[name] & {"subprocess", "glob"}
    assert not bad and not imports, f"{name} reaches the host directly: {bad or sorted(imports)}"


# -- names and types --------------------------------------------------------------------------------------


def _type_names() -> dict[str, list[tuple[str, str]]]:
    """Top-level classes and type aliases (`Name = ...`, capitalised, not a CONSTANT) -> (module, definition)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((name, "class"))
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                alias = node.targets[0].id
                if alias[:1].isupper() and not alias.isupper():
                    found.setdefault(alias, []).append((name, ast.unparse(node.value)))
    return found


def test_a_type_name_has_one_meaning() -> None:
    """A class is defined once, and a name given in several modules means the same everywhere: `Block` was a
    transformer block, a shard's block and a report block, `Tagger` the network and the exported runtime,
    `Precision` a trainer class and two different lists of values (now TransformerBlock, DocBlock, TaggerNet,
    ChosenPrecision, PrecisionChoice...). The same alias written out twice (`Echo`) is allowed."""
    names = _type_names()
    assert "Block" in names and "Tagger" in names and "Echo" in names  # the rule is live
    clashes = {
        n: where
        for n, where in names.items()
        if len(where) > 1 and (len({d for _, d in where}) > 1 or any(d == "class" for _, d in where))
    }
    assert not clashes, f"one name, several meanings: {clashes}; rename all but one"


# The count of `Any` in src/ (issue 19: 441 when measured first, 632 at its peak, then the seams were typed).
# Raise it only with a reason in the same change: a new seam gets a dataclass, a TypedDict, a Protocol or the
# real class under TYPE_CHECKING instead.
ANY_BUDGET = 363


def test_the_count_of_any_does_not_rise() -> None:
    import re

    count = sum(len(re.findall(r"\bAny\b", p.read_text(encoding="utf-8"))) for p in MODULES.values())
    assert count <= ANY_BUDGET, (
        f"src/ has {count} `Any` (budget {ANY_BUDGET}): type the new seam instead "
        "(a dataclass, TypedDict, Protocol, or the real class under TYPE_CHECKING)"
    )
    # Lower the budget when the count falls, so a later rise is caught from there.
    assert count > ANY_BUDGET - 20, (
        f"src/ has {count} `Any`: lower ANY_BUDGET in tests/test_layout.py to {count}"
    )


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


# -- the command layer ------------------------------------------------------------------------------------


def test_the_venv_option_is_declared_once() -> None:
    """Every command's `--venv` is commands.common.venv_option: its help and its default say the same everywhere."""
    declared = sorted(
        name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "option"
        and any(isinstance(a, ast.Constant) and a.value == "--venv" for a in node.args)
    )
    assert declared == ["mw_env.commands.common"], f"--venv declared in {declared}: use common.venv_option"


def test_commands_get_a_plan_only_from_plan_for() -> None:
    """provision.plan.plan_for is the one way a command gets a bootstrap plan (the selection's warnings, reason,
    GPU kernels and a lock's torch are applied there, once)."""
    direct = sorted(
        name
        for name, path in MODULES.items()
        if name.startswith(("mw_env.commands", "mw_env.cli"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and node.module in ("mw_env.provision.plan", "mw_env.provision.table", "mw_env.provision.venvchoice")
        and any(a.name not in ("plan_for",) for a in node.names)
    )
    assert not direct, f"commands that plan by themselves: {direct}; ask provision.plan.plan_for"


# -- the run folder's names (issue 39) -------------------------------------------------------------------

# Where a literal is a path: an operand of `/`, or an argument of these calls (Path(...), p.glob(...)...).
_PATH_CALLS = {"Path", "PurePath", "joinpath", "glob", "rglob", "with_name", "with_suffix", "join"}


def _contract_names() -> dict[str, str]:
    """Every string of rundir/contract.py (value -> its constant): the run folder's names and the words one
    process prints and another matches, spelled there only."""
    from mw_env.rundir import contract

    return {v: k for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}


def _in_a_path(node: ast.AST, parent: ast.AST | None) -> bool:
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        f = parent.func
        return (
            f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        ) in _PATH_CALLS
    return False


def _spelled_names(source: str, names: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, literal, constant) for each literal of `source` that spells a run-folder name. A name with a dot or
    a dash ("train.log", "step-*.pt", ".lock") is refused anywhere; a plain word ("report", "weights",
    "export", "checkpoints") only where it is a path, for the same word is also a command (`train export`),
    an event (`weights`), a JSON key (`{"report": ...}`), a fault-harness hold point (`hold("report")`) and a
    tracker kind (`tensorboard`). A literal with a `/` and no space is a path spelled as text: each part counts."""
    tree = ast.parse(source)
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        value, parent = node.value, parents.get(id(node))
        parts = value.strip("/").split("/") if "/" in value and not any(c.isspace() for c in value) else []
        for part in (value, *parts):
            if part in names and (not part.isalpha() or parts or _in_a_path(node, parent)):
                found.append((node.lineno, value, names[part]))
                break
    return sorted(found)


def test_the_spelled_name_check_is_live() -> None:
    names = {"report": "REPORT_DIR", "train.log": "LOG_FILE", ".pt": "CHECKPOINT_SUFFIX"}
    source = (
        'a = run / "report"\nb = Path("report")\nc = f"{run}/train.log"\nd = "report/stop.md"\n'
        'e = f"step-{n:09d}.pt"\nf = "train.log"\n'
        # not names: a command, a JSON key, a hold point, prose
        'click.command("report")\ng = {"report": 1}\nhold("report")\nh = "see train.log for more"\n'
    )
    assert [line for line, _, _ in _spelled_names(source, names)] == [1, 2, 3, 4, 5, 6]


def test_the_run_folders_names_are_spelled_in_rundir_only() -> None:
    """rundir/contract.py names every file and folder of a run (and the words between the processes that share
    it); elsewhere in src a module imports the name, so a rename is one edit and no reader of the folder
    keeps an old spelling."""
    names = _contract_names()
    assert {"metrics.jsonl", "report", "export", "weights", "train.log", "MANIFEST.sha256"} <= set(names)
    bad = [
        f"{MODULES[name].relative_to(SRC.parent)}:{line}: {value!r} spells rundir.contract.{const}: import it"
        for name in sorted(MODULES)
        if not name.startswith("mw_env.rundir")
        for line, value, const in _spelled_names(MODULES[name].read_text(encoding="utf-8"), names)
    ]
    assert not bad, "run-folder names spelled outside rundir/:\n  " + "\n  ".join(bad)
