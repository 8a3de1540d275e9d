"""Issue 40: every path mw-env puts into a command a shell will read is one quoted shell word (base/shellquote.sh):
the hints and fixes that show a command (a backticked span of an f-string), the host commands and their notes,
the Kubernetes manifest's shell, the catalogue's fixes."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from pathlib import Path

from mw_env.base.shellquote import sh

SRC = Path(__file__).resolve().parents[1] / "src" / "mw_env"
# No backtick in it: the tests find a command by its backticks (a backtick in a path is quoted all the same).
HOSTILE = '/srv/share$5/v $(touch MARK) "it\'s" é'

# An interpolated name that reads like a path (or a folder, a venv, an interpreter).
_PATHY = re.compile(r"(venv|path|dir|python|lock|file|root|target|folder|wheel|out)$|^(p|py|bv)$", re.I)
# Calls whose result is already quoted (or a whole quoted command).
_QUOTED_BY = {
    "sh",
    "sh_join",
    "quote",
    "_q",
    "join",
    "create_command",
    "bootstrap_command",
    "install_command",
    "bootstrap_hint",
}
# Interpolations that look like paths by name and are not: (module, expression) -> why.
_NOT_PATHS = {
    ("checks/devices.py", "target"): "a group number or a <placeholder>",
    ("cli.py", "path"): "click's command path (`mw-env train`)",
}


def _name(expr: ast.expr) -> str | None:
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None


def _unquoted_paths_in_commands(tree: ast.AST, where: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        text, holes = "", []
        for part in node.values:  # adjacent literals are one JoinedStr: a command split over lines is whole
            if isinstance(part, ast.Constant):
                text += str(part.value)
            else:
                holes.append((len(text), part))
                text += "\0"
        spans = [m.span() for m in re.finditer(r"`[^`]*`", text)]
        for pos, part in holes:
            if not any(a < pos < b for a, b in spans):
                continue  # prose, not a command
            expr = part.value  # type: ignore[attr-defined]
            if isinstance(expr, ast.Call):
                if _name(expr.func) in _QUOTED_BY:
                    continue
                if not (_name(expr.func) == "str" and expr.args):
                    continue
                expr = expr.args[0]
            name = _name(expr)
            if name and _PATHY.search(name) and (where, ast.unparse(expr)) not in _NOT_PATHS:
                found.append(f"{where}:{part.lineno}: {{{ast.unparse(part.value)}}}")  # type: ignore[attr-defined]
    return found


def test_every_path_in_a_shown_command_is_quoted():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        found += _unquoted_paths_in_commands(ast.parse(path.read_text(encoding="utf-8")), where)
    assert not found, "a path in a backticked command, not quoted with base.shellquote.sh:\n" + "\n".join(
        found
    )


def test_the_scan_finds_an_unquoted_path():
    tree = ast.parse('f"run `mw-env lock --venv {ctx.venv}` then `ls {sh(out_dir)}`; {venv} is prose"')
    assert _unquoted_paths_in_commands(tree, "x.py") == ["x.py:1: {ctx.venv}"]


def _words(command: str, tmp_path: Path) -> list[str]:
    """What a POSIX shell makes of `command`'s words (printed one a line, NUL-free), run in an empty folder:
    nothing in it may run."""
    res = subprocess.run(
        ["sh", "-c", f"set -- {command}; printf '%s\\n' \"$@\""],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert list(tmp_path.iterdir()) == [], f"{command!r} ran something"
    return res.stdout.splitlines()


def test_catalogue_fixes_take_a_path_as_one_shell_word(tmp_path):
    from mw_env.checks.catalogue import load_catalogue

    _cause, fix = load_catalogue().fix_for(
        "venv.lock_drift", lock=Path(HOSTILE) / "pylock.mw-env.toml", changes="x", venv=Path(HOSTILE)
    )
    command = re.search(r"`(mw-env bootstrap --lock [^`]*)`", fix).group(1)
    assert _words(command, tmp_path) == [
        "mw-env",
        "bootstrap",
        "--lock",
        f"{HOSTILE}/pylock.mw-env.toml",
        "--venv",
        HOSTILE,
        "--recreate",
    ]
    _, fix = load_catalogue().fix_for(
        "venv.env_not_applied", missing="X", env_file=Path("/v/e"), venv=Path(HOSTILE)
    )
    assert f"`source {sh(HOSTILE)}/bin/activate`" in fix


def test_the_host_notes_quote_the_venv_path(tmp_path):
    from mw_env.host.oci import _recreate

    for image in (None, "ubuntu:24.04"):
        _, _, notes = _recreate("docker", "box", image, HOSTILE)
        volume = sh(f"mw-env-venv:{HOSTILE}")
        assert f"(-v {volume})" in " ".join(notes)
        assert _words(f"-v {volume}", tmp_path) == ["-v", f"mw-env-venv:{HOSTILE}"]
    copy = re.search(r"`(docker cp [^`]*)`", " ".join(_recreate("docker", "box", "img:1", HOSTILE)[2])).group(
        1
    )
    assert _words(copy, tmp_path) == ["docker", "cp", f"box:{HOSTILE}/pylock.mw-env.toml", "."]


def test_fallback_lines_quote_a_container_name_read_from_the_machine(tmp_path):
    from mw_env.host.fallback import fallback_lines

    (line, _) = fallback_lines("incus", "c$(touch MARK)", "amd", 109)
    assert shlex.split(line)[4:6] == ["c$(touch MARK)", "gpu0"]
    assert _words(line, tmp_path)[4] == "c$(touch MARK)"
