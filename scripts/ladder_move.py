#!/usr/bin/env python3
"""Issue 28's folder move, "the house as a ladder", as one replayable operation (stdlib only).

Seven developers change the code in parallel, so the move cannot be a commit made today: it is this script,
applied to whatever main is when they stop. It reads the tree, maps every module of src/mw_env to its place in
the target ladder, and refuses to guess: a new top-level module that no rule maps is reported and nothing is
moved. Then, in one step:

1. `git mv` of every mapped file (data files such as catalogue.yaml, amdgpu.ids and *.json go with their folder),
   and a docstring `__init__.py` for each new package (base/, hardware/, sources/, venv/, host/, rundir/, ...);
2. every reference rewritten in src/, tests/, bench/, docs/, README.md, Makefile, pyproject.toml, .ci/:
   `from mw_env import x` / `from mw_env.pkg import mod` statements whose names moved apart (split, keeping the
   local names), absolute and relative imports, and every dotted module string (`python -m ...`,
   `mock.patch("mw_env....")`, importlib strings, mypy overrides), by the longest old module that prefixes the
   dotted name, so `mw_env.hardware.Gpu` becomes `mw_env.hardware.facts.Gpu` and nothing is rewritten twice;
   file paths (`src/mw_env/detection/amdgpu.ids`, `provision/uv.py` in prose and comments) likewise;
   `Path(__file__).parents[N]` in a module that moved deeper is deepened by as many levels;
3. the fixups a mechanical rewrite cannot know (each must apply, or the script stops and says which);
4. the new layer rule appended to tests/test_layout.py, docs/design.md's layout section replaced by the new
   tree (scripts/ladder/), the "to add ..." recipes in the packages where a contributor lands;
5. `ruff check --fix` and `ruff format` over src, tests, bench, scripts.

Usage (from the repository root, on a clean work tree, on a branch of its own):

    python3 scripts/ladder_move.py --plan        # print the mapping and any unmapped module; change nothing
    python3 scripts/ladder_move.py --apply       # do it (then: make lint, the layout test, same_json, make test)
    python3 scripts/ladder_move.py --layer-rule  # only append the layer rule to tests/test_layout.py (to show
                                                 # that today's tree breaks it); `git checkout` it afterwards

To finish the move (the integrator, on main once nobody else lands):

    git switch -c ladder main
    python3 scripts/same_json.py capture /tmp/before.json    # needs .venv (make install)
    python3 scripts/ladder_move.py --apply                    # stops, changing nothing, on an unmapped module
    make install && make lint                                 # the editable install sees the new tree
    .cache/test-venv/bin/python -m pytest tests/test_layout.py tests/test_ladder_move.py -q
    python3 scripts/same_json.py compare /tmp/before.json    # byte-identical, or each difference shown
    make test && git commit -m "the house as a ladder (scripts/ladder_move.py)"

An unmapped module stops the script before it changes anything: add it to FILES or RULES (or STAY_TOP /
STAY_FOLDERS) and apply again. A fixup that no longer applies stops it half-way (the code it names changed):
`git reset -q --hard && git clean -fdq src`, update FIXUPS to the new text, apply again.

No compatibility shims: "no behaviour change" means the CLI and the files it reads and writes, not the old
import paths.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = "src/mw_env"
HERE = Path(__file__).resolve().parent / "ladder"

# The target ladder, bottom up: a folder imports only folders at or below its own rung (tests/test_layout.py).
LADDER = (
    "base",
    "hardware",
    "profiles",
    "sources",
    "venv",
    "host",
    "checks",
    "provision",
    "trainspec",
    "rundir",
    "runs",
    "trainer",
    "commands",
)

# Exact moves: a path under src/mw_env -> its new path.
FILES: dict[str, str] = {
    # base/: what every rung uses
    **{f"{m}.py": f"base/{m}.py" for m in ("errors", "atomic", "textsafe", "userfile", "userjson", "typed")},
    "versions.py": "base/versions.py",
    "lifeline.py": "base/lifeline.py",
    "streams.py": "base/streams.py",  # the standard streams, guarded (issue 29)
    # hardware/: the machine seam, the facts, detection
    "machine.py": "hardware/machine.py",
    "hardware.py": "hardware/facts.py",
    "detect.py": "hardware/detect.py",
    "capacity.py": "hardware/capacity.py",  # the CPUs and memory this process may use (cgroup limits)
    # sources/: where packages come from
    "provision/uv.py": "sources/uv.py",
    "provision/indexlist.py": "sources/indexlist.py",
    "provision/wheelhouse.py": "sources/wheelhouse.py",
    "provision/pythons.py": "sources/pythons.py",
    "profiles/freshness.py": "sources/freshness.py",
    # venv/: what a venv holds
    "provision/record.py": "venv/record.py",
    "provision/venvinfo.py": "venv/venvinfo.py",
    "provision/wheelarch.py": "venv/wheelarch.py",
    # host/: operator-side commands
    "host.py": "host/commands.py",
    # trainspec/formats/: the file-format readers
    "trainspec/footer.py": "trainspec/formats/footer.py",
    "trainspec/varint.py": "trainspec/formats/varint.py",
    "trainspec/spm_vocab.py": "trainspec/formats/spm_vocab.py",
    "trainspec/tagdict.py": "trainspec/formats/tagdict.py",
    # rundir/: the run folder's contract
    "runs/manifest.py": "rundir/manifest.py",
    "runs/runstate.py": "rundir/runstate.py",
    "runs/runlock.py": "rundir/runlock.py",
    # trainer/ wings whose module has no prefix of its wing
    "trainer/checkpoint.py": "trainer/ckpt/checkpoint.py",
    "trainer/report.py": "trainer/report/report.py",
    "trainer/export.py": "trainer/export/onnx_export.py",
    "trainer/tracking.py": "trainer/tracking/tracking.py",
    # Not onnx.py / mlflow.py: a module named like the library it imports is one sys.path entry away from
    # shadowing it (export/runtime.py is also run as a script from its own folder).
    "trainer/tracking_mlflow.py": "trainer/tracking/mlflow_tracker.py",
}

# Prefix rules, tried in order after FILES: (regex over the path under src/mw_env, replacement). A module
# another developer adds to a moved folder (envlock/x.py, detection/x.py, trainer/report_x.py) moves too.
RULES: tuple[tuple[str, str], ...] = (
    (r"detection/(.+)", r"hardware/\1"),
    (r"envlock/(.+)", r"venv/lock/\1"),
    (r"host_(\w+)\.py", r"host/\1.py"),
    (r"runs/rundir_(\w+)\.py", r"rundir/\1.py"),  # the contract's modules, landed in runs/ before the move
    (r"trainer/checkpoint_(\w+)\.py", r"trainer/ckpt/\1.py"),
    (r"trainer/report_(\w+)\.py", r"trainer/report/\1.py"),
    (r"trainer/export_(\w+)\.py", r"trainer/export/\1.py"),
    (r"trainer/tracking_(\w+)\.py", r"trainer/tracking/\1.py"),
)
# runs/rundir.py itself: the contract's file names, the cross-process words, sha256_file.
FILES["runs/rundir.py"] = "rundir/contract.py"

# Not moved, on purpose: trainer/mlflow_model.py. Its dotted name is the `loader_module` written into every
# MLmodel the trainer logs to a registry (mlflow_model.LOADER): moved, models logged before would no longer load.

# What stays where it is: the top-level entry modules, and folders that are rungs already (a new module in
# one of them stays with it).
STAY_TOP = {"__init__.py", "__main__.py", "cli.py"}
STAY_FOLDERS = {"profiles", "checks", "provision", "trainspec", "runs", "trainer", "commands"}

# Renamed modules whose new last name differs: `from mw_env import hardware` keeps its local name this way.
NEW_PACKAGES = {
    "base": "What every rung of the ladder uses: errors, the atomic writer, safe text, user files and JSON, the"
    " typed reader, versions, process lifelines.",
    "hardware": "The machine seam (machine.py), the frozen facts (facts.py) and their detection (detect.py over"
    " amd, nvidia, pci, container, system and the shipped tables).",
    "sources": "Where packages come from: uv, the package indexes (indexlist, freshness), wheelhouses, Pythons.",
    "venv": "What a venv holds: the bootstrap record, what is installed, the wheel's GPU archs, and lock/ (the"
    " environment lock per hardware).",
    "host": "Operator-side commands for the host: incus, docker/podman (oci), Kubernetes (k8s), and the fallback"
    " lines the doctor quotes when no plan can be made.",
    "trainspec/formats": "File formats read without their libraries: the Parquet footer and tags dictionary,"
    " Protocol Buffers/Thrift varints, the SentencePiece model's piece count.",
    "trainer/export": "ONNX export (onnx_export.py), its verification, the serving bundle and its runtime helper.",
    "trainer/tracking": "Experiment tracking: TensorBoard and MLflow, and the values they are fed (the MLflow model"
    " stays trainer/mlflow_model.py: its dotted name is written into every logged MLmodel).",
}

TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".cfg", ".ini", ""}


@dataclass(frozen=True)
class Plan:
    moves: dict[str, str]  # old path -> new path, under src/mw_env
    unmapped: list[str]  # top-level files and folders no rule maps
    modules: dict[str, str]  # old dotted module/package -> new dotted name
    paths: dict[str, str]  # old path (file or folder/) under mw_env -> new


def _dotted(path: str) -> str:
    parts = path[: -len(".py")].split("/") if path.endswith(".py") else path.rstrip("/").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["mw_env", *parts])


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", PKG], cwd=REPO, capture_output=True, check=True).stdout
    return sorted(p[len(PKG) + 1 :] for p in out.decode().split("\0") if p)


def make_plan(files: list[str]) -> Plan:
    moves: dict[str, str] = {}
    unmapped: set[str] = set()
    for rel in files:
        if "__pycache__" in rel:
            continue
        new = FILES.get(rel)
        if new is None:
            for pattern, repl in RULES:
                if re.fullmatch(pattern, rel):
                    new = re.sub(pattern, repl, rel)
                    break
        if new is not None:
            moves[rel] = new
            continue
        top = rel.split("/")[0]
        if "/" not in rel and rel not in STAY_TOP:
            unmapped.add(rel)
        elif "/" in rel and top not in STAY_FOLDERS:
            unmapped.add(top + "/")
    # Modules: every moved .py, and every package whose files all moved to one new package.
    modules = {_dotted(o): _dotted(n) for o, n in moves.items() if o.endswith(".py")}
    paths = dict(moves)
    for folder in ("detection", "envlock"):
        inside = [n for o, n in moves.items() if o.startswith(folder + "/")]
        if inside:
            new_folder = inside[0].rsplit("/", 1)[0]
            paths[folder + "/"] = new_folder + "/"
    return Plan(moves=moves, unmapped=sorted(unmapped), modules=modules, paths=paths)


# -- rewriting ------------------------------------------------------------------------------------------------

_DOTTED = re.compile(r"(?<![\w.])mw_env(?:\.\w+)+")


def rewrite_dotted(text: str, modules: dict[str, str]) -> str:
    """Each dotted name that starts with a moved module: that prefix replaced, the attribute path kept."""

    def one(m: re.Match[str]) -> str:
        name = m.group(0)
        parts = name.split(".")
        for k in range(len(parts), 1, -1):
            new = modules.get(".".join(parts[:k]))
            if new is not None:
                return ".".join([new, *parts[k:]])
        return name

    return _DOTTED.sub(one, text)


def _path_regex(paths: dict[str, str]) -> re.Pattern[str]:
    # Longest first, so "trainer/report_doc.py" wins over nothing shorter; a folder ends with "/".
    olds = sorted(paths, key=len, reverse=True)
    alt = "|".join(re.escape(o) + ("" if o.endswith("/") else r"(?![\w])") for o in olds)
    return re.compile(r"(?<![\w./-])(?P<pre>(?:src/)?mw_env/|)(?P<old>" + alt + ")")


def rewrite_paths(text: str, paths: dict[str, str], regex: re.Pattern[str]) -> str:
    def one(m: re.Match[str]) -> str:
        old = m.group("old")
        # A bare top-level name ("hardware.py", "errors.py") is only taken with the package prefix, or as
        # the path of a moved file in prose ("host.py"): a short name inside another folder is not ours.
        return m.group("pre") + paths[old]

    return regex.sub(one, text)


# New names written by rewrite_from_imports carry this instead of "mw_env" until every pass is done: the dotted
# pass would read the new `mw_env.hardware` (a package now) as the old module hardware.py and rewrite it again.
SHIELD = "mw\x00env"


def short_names(moves: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Renamed modules as prose names them: `checkpoint_parts` -> (`ckpt.parts`, `trainer/ckpt/parts.py`), the
    dotted name relative to the old module's folder and the new path."""
    out: dict[str, tuple[str, str]] = {}
    for old, new in moves.items():
        if not old.endswith(".py") or old.rsplit("/", 1)[-1] == "__init__.py":
            continue
        stem = old.rsplit("/", 1)[-1][:-3]
        if (
            "_" not in stem
        ):  # only distinctive names: "report" or "checkpoint" alone mean other things in prose
            continue
        parent = old.rsplit("/", 1)[0] + "/" if "/" in old else ""
        rel = new[len(parent) :] if new.startswith(parent) else new
        out[stem] = (rel[:-3].replace("/", "."), new)
    return out


def rewrite_prose(text: str, names: dict[str, tuple[str, str]]) -> str:
    """Renamed modules in prose: `report_doc.DocBlock` -> `report.doc.DocBlock`, `export_runtime.py` ->
    `trainer/export/runtime.py`. Never in code or a quoted string (a local name may still be spelled so)."""
    if not names:
        return text
    alt = "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))
    regex = re.compile(r"(?<![\w./\"'-])(" + alt + r")(\.py\b)?(?![\w/])")

    def one(m: re.Match[str]) -> str:
        dotted, path = names[m.group(1)]
        return path if m.group(2) else dotted

    return regex.sub(one, text)


def rewrite_python_prose(text: str, names: dict[str, tuple[str, str]]) -> str:
    """rewrite_prose over a Python file's comments and docstrings only."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for tok in tokens:
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))
        ):
            new = rewrite_prose(tok.string, names)
            if new != tok.string:
                start = offsets[tok.start[0] - 1] + tok.start[1]
                end = offsets[tok.end[0] - 1] + tok.end[1]
                edits.append((start, end, new))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def rewrite_from_imports(text: str, modules: dict[str, str]) -> str:
    """`from mw_env[.pkg] import a, b` where a or b is a moved module: one statement per new parent."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if not (node.module == "mw_env" or node.module.startswith("mw_env.")):
            continue
        moved = [a for a in node.names if f"{node.module}.{a.name}" in modules]
        if not moved:
            continue
        groups: dict[str, list[str]] = {}
        for a in node.names:
            full = f"{node.module}.{a.name}"
            if full in modules:
                new_parent, _, new_name = modules[full].rpartition(".")
                local = a.asname or a.name
                groups.setdefault(new_parent, []).append(
                    new_name if new_name == local else f"{new_name} as {local}"
                )
            else:
                parent = rewrite_dotted(node.module, modules) if node.module != "mw_env" else "mw_env"
                groups.setdefault(parent, []).append(
                    a.name if a.asname is None else f"{a.name} as {a.asname}"
                )
        line = lines[node.lineno - 1]
        indent = line[: len(line) - len(line.lstrip())]
        # Written with the new names already: shielded from the dotted pass that follows (see SHIELD).
        new = "".join(
            f"{indent}from {parent.replace('mw_env', SHIELD, 1)} import {', '.join(names)}\n"
            for parent, names in groups.items()
        )
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    return "".join(lines)


def relative_to_absolute(text: str, module: str, is_package: bool) -> str:
    """`from .x import y` / `from . import x` -> absolute (the move changes what `.` means)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    package = module if is_package else module.rpartition(".")[0]
    edits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            target = ".".join([*base, node.module] if node.module else base)
            seg = ast.get_source_segment(text, node) or ""
            new = re.sub(r"^from\s+\.+\s*[\w.]*\s+import", f"from {target} import", seg)
            edits.append((node.lineno - 1, node.end_lineno or node.lineno, node.col_offset, new))
    for start, end, col, new in sorted(edits, reverse=True):
        lines[start:end] = [lines[start][:col] + new + "\n"]
    return "".join(lines)


def deepen_file_parents(text: str, levels: int) -> str:
    """`Path(__file__)...parents[N]` in a module now `levels` folders deeper: the same folder as before."""
    if levels == 0:
        return text
    return re.sub(
        r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]",
        lambda m: f"{m.group(1)}{int(m.group(2)) + levels}]",
        text,
    )


# Rewrites a mechanical pass cannot know: (file after the move, old text, new text). Each must apply.
FIXUPS: tuple[tuple[str, str, str], ...] = (
    # The serving bundle copies its runtime helper by file name (a sibling in trainer/export/ now).
    ("src/mw_env/trainer/export/bundle.py", 'with_name("export_runtime.py")', 'with_name("runtime.py")'),
    # Detection reaches the machine only through Machine: machine.py is that seam, in hardware/ now.
    (
        "tests/test_layout.py",
        'n.startswith("mw_env.hardware") or n == "mw_env.hardware.detect"',
        '(n.startswith("mw_env.hardware") and n != "mw_env.hardware.machine")',
    ),
)


def apply(plan: Plan, ruff_path: str | None = None) -> None:
    root = REPO / PKG
    for old, new in plan.moves.items():
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "mv", f"{PKG}/{old}", f"{PKG}/{new}"], cwd=REPO, check=True)
    regex = _path_regex(plan.paths)
    prose = short_names(plan.moves)
    profiles_changed = False
    depth_change = {new: new.count("/") - old.count("/") for old, new in plan.moves.items()}
    for path in _text_files():
        rel = path.relative_to(REPO).as_posix()
        if (
            rel.startswith("scripts/ladder") or rel == "tests/test_ladder_move.py"
        ):  # made-up input of the script
            continue
        text = path.read_text(encoding="utf-8")
        new = text
        if path.suffix == ".py":
            if rel.startswith(PKG + "/"):
                under = rel[len(PKG) + 1 :]
                new = relative_to_absolute(new, _dotted(under), path.name == "__init__.py")
                new = deepen_file_parents(new, depth_change.get(under, 0))
            new = rewrite_from_imports(new, plan.modules)
            new = rewrite_python_prose(new, prose)
        elif path.suffix == ".md":
            new = rewrite_prose(new, prose)
        new = rewrite_dotted(new, plan.modules)
        new = rewrite_paths(new, plan.paths, regex).replace(SHIELD, "mw_env")
        if new != text:
            path.write_text(new, encoding="utf-8")
            if rel.startswith(f"{PKG}/profiles/") and path.suffix == ".yaml":
                profiles_changed = True
    # New files after the rewrite: they are written with the new names already.
    for folder, doc in NEW_PACKAGES.items():
        init = root / folder / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{doc}"""\n', encoding="utf-8")
    for folder in ("rundir", "trainer/ckpt", "trainer/report"):
        init = root / folder / "__init__.py"
        if not init.exists():
            init.write_text(_recipe_doc(folder), encoding="utf-8")
    _fill_recipes(root)
    _remove_emptied(root)
    for rel, old, new in FIXUPS:
        path = REPO / rel
        text = path.read_text(encoding="utf-8")
        if old not in text:
            sys.exit(
                f"ladder_move: fixup not applicable in {rel}: {old!r} is not there (the code changed: update FIXUPS)"
            )
        path.write_text(text.replace(old, new), encoding="utf-8")
    append_layer_rule()
    replace_design_layout()
    if (
        profiles_changed
    ):  # shipped.json holds each shipped profile's text: a stale copy is parsed as YAML again
        python = REPO / ".venv" / "bin" / "python"
        if python.exists():
            subprocess.run([str(python), "-m", "mw_env.profiles.index"], cwd=REPO, check=True)
        else:
            print("ladder_move: a shipped profile changed: run `python -m mw_env.profiles.index`")
    # The new packages' files, with the moves (the integrator commits what `git status` shows).
    subprocess.run(["git", "add", "-u"], cwd=REPO, check=True)
    subprocess.run(["git", "add", "-A", PKG], cwd=REPO, check=True)
    ruff = _ruff(ruff_path)
    if ruff is None:
        print(
            "ladder_move: no ruff (.venv/bin/ruff, PATH, --ruff): run `ruff check --fix` and `ruff format` now"
        )
        return
    for argv in (["check", "--fix", "--quiet"], ["format", "--quiet"]):
        subprocess.run([ruff, *argv, "src", "tests", "bench", "scripts"], cwd=REPO, check=False)
    subprocess.run(["git", "add", "-u"], cwd=REPO, check=True)  # what ruff changed


def _remove_emptied(root: Path) -> None:
    """Old folders left holding only bytecode caches: gone, or `import mw_env.detection` would still work (as a
    namespace package) and hide a reference the rewrite missed."""
    import shutil

    for folder in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and folder.name != "__pycache__":
            rest = [p for p in folder.iterdir() if p.name != "__pycache__"]
            if not rest:
                shutil.rmtree(folder)


def _ruff(given: str | None) -> str | None:
    import shutil

    local = REPO / ".venv" / "bin" / "ruff"
    return given or (str(local) if local.exists() else shutil.which("ruff"))


def _text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    found = []
    for rel in out.decode().split("\0"):
        if not rel or rel.startswith("tests/fixtures/"):  # fake machine roots: captured files, never ours
            continue
        path = REPO / rel
        if (
            path.is_file()
            and path.suffix in TEXT_SUFFIXES
            and (rel.split("/")[0] in ("src", "tests", "bench", "docs", ".ci") or "/" not in rel)
        ):
            try:
                path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            found.append(path)
    return found


def _recipe_doc(folder: str) -> str:
    return (HERE / f"{folder.replace('/', '_')}_init.py").read_text(encoding="utf-8")


def _fill_recipes(root: Path) -> None:
    """The "to add ..." recipes where a contributor lands: profiles/ and checks/ keep their __init__ and get a
    README.md beside it; ckpt/, report/ and rundir/ got theirs with their __init__ above."""
    for folder in ("profiles", "checks"):
        src = HERE / f"{folder}_README.md"
        (root / folder / "README.md").write_text(src.read_text(encoding="utf-8"), encoding="utf-8")


def append_layer_rule() -> None:
    path = REPO / "tests" / "test_layout.py"
    text = path.read_text(encoding="utf-8")
    rule = (HERE / "layer_rule.py").read_text(encoding="utf-8").split("# --- appended below ---\n", 1)[1]
    if "LADDER = (" not in text:
        path.write_text(text.rstrip("\n") + "\n\n\n" + rule, encoding="utf-8")


def replace_design_layout() -> None:
    path = REPO / "docs" / "design.md"
    text = path.read_text(encoding="utf-8")
    start = text.index("## Layout\n")
    end = text.index("\n## ", start + 1) + 1
    path.write_text(
        text[:start] + (HERE / "design_layout.md").read_text(encoding="utf-8") + "\n" + text[end:],
        encoding="utf-8",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--plan", action="store_true")
    group.add_argument("--apply", action="store_true")
    group.add_argument("--layer-rule", action="store_true")
    ap.add_argument("--ruff", help="the ruff to run after the move (default: .venv/bin/ruff, else PATH)")
    args = ap.parse_args()
    if args.layer_rule:
        append_layer_rule()
        print("appended the layer rule to tests/test_layout.py (git checkout tests/test_layout.py to undo)")
        return 0
    if any(f.startswith("base/") for f in tracked_files()):
        print("ladder_move: src/mw_env/base/ exists: the move was applied already", file=sys.stderr)
        return 2
    plan = make_plan(tracked_files())
    if plan.unmapped:
        print(
            "ladder_move: no rule maps these (add them to FILES/RULES, or to STAY_TOP/STAY_FOLDERS):",
            file=sys.stderr,
        )
        for u in plan.unmapped:
            print(f"  src/mw_env/{u}", file=sys.stderr)
        return 2
    if args.plan:
        for old, new in sorted(plan.moves.items()):
            print(f"{old:40} -> {new}")
        return 0
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if dirty.strip():
        print(
            "ladder_move: the work tree has changes; apply on a clean tree (a branch of its own)",
            file=sys.stderr,
        )
        return 2
    apply(plan, args.ruff)
    print(
        f"moved {len(plan.moves)} files; next: make lint, the layout test, scripts/same_json.py compare, make test"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
