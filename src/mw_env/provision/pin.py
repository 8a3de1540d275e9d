"""Keep the chosen torch: pins that a later `pip install x` or `uv pip install x` in the venv obeys.

- pip: `<venv>/pip.conf` (pip reads it as the site config of the venv's interpreter, activated or not)
  names `<venv>/mw-env-constraints.txt` (`torch==<exact installed version>`), plus the user's own
  constraint files so they are not lost.
- uv: uv does not read pip.conf or anything in the venv, so the env file that the venv's activate
  script sources exports UV_CONSTRAINT (and PIP_CONSTRAINT, which would otherwise override pip.conf).
- An adopted image torch lives outside the venv where uv cannot see it; there the pin is an uv
  override that removes torch from every resolution (`torch; sys_platform == 'never'`), so uv never
  installs a second torch over it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from mw_env.base.atomic import write_text_atomic as write_atomic
from mw_env.base.shellquote import list_item, sh
from mw_env.venv.record import env_file_text

CONSTRAINTS_FILE = "mw-env-constraints.txt"
OVERRIDES_FILE = "mw-env-overrides.txt"
PIP_CONF = "pip.conf"
ACTIVATE_BEGIN = "# >>> mw-env >>>"
ACTIVATE_END = "# <<< mw-env <<<"


def constraints_text(torch_version: str, companions: Mapping[str, str] | None = None) -> str:
    lines = [
        "# Written by mw-env bootstrap: keeps this venv's torch build. Re-run bootstrap to change it.",
        f"torch=={torch_version}",
    ]
    lines += [f"{name}=={ver}" for name, ver in sorted((companions or {}).items())]
    return "\n".join(lines) + "\n"


def overrides_text() -> str:
    return (
        "# Written by mw-env bootstrap: torch comes from the base image (outside this venv); never install another.\n"
        "torch; sys_platform == 'never'\n"
    )


def pip_conf_text(constraint_files: Sequence[str]) -> str:
    return (
        "# Written by mw-env bootstrap: pip in this venv keeps the chosen torch build.\n"
        "[global]\n"
        f"constraint = {' '.join(list_item(f) for f in constraint_files)}\n"
    )


def pin_env(
    venv: Path,
    *,
    user_constraints: Sequence[str] = (),
    uv_constraints: Sequence[str] = (),
    adopted: bool = False,
) -> dict[str, str]:
    """The variables that carry the pin to pip and uv in an activated shell (paths at `venv`).

    The user's own constraint files (pip's and uv's) are kept next to ours, never dropped. Both tools split
    these variables on whitespace: a venv path that holds some is written as its file:// URL (list_item).
    """
    venv = Path(venv)
    ours = list_item(venv / CONSTRAINTS_FILE)
    env = {"PIP_CONSTRAINT": " ".join([ours, *user_constraints])}
    if adopted:
        env["UV_OVERRIDE"] = list_item(venv / OVERRIDES_FILE)
        if uv_constraints:
            env["UV_CONSTRAINT"] = " ".join(uv_constraints)
    else:
        env["UV_CONSTRAINT"] = " ".join([ours, *uv_constraints])
    return env


def pin_files(
    venv: Path,
    *,
    final_venv: Path,
    torch_version: str,
    user_constraints: Sequence[str] = (),
    adopted: bool = False,
    companions: Mapping[str, str] | None = None,
) -> dict[Path, str]:
    """Pin files to write into `venv` (the folder being built), naming paths under `final_venv`."""
    venv, final_venv = Path(venv), Path(final_venv)
    files = {
        venv / CONSTRAINTS_FILE: constraints_text(torch_version, companions),
        venv / PIP_CONF: pip_conf_text([str(final_venv / CONSTRAINTS_FILE), *user_constraints]),
    }
    if adopted:
        files[venv / OVERRIDES_FILE] = overrides_text()
    return files


def write_files(files: Mapping[Path, str]) -> None:
    for path, text in files.items():
        write_atomic(path, text)


def files_match(files: Mapping[Path, str]) -> bool:
    for path, text in files.items():
        try:
            if path.read_text(encoding="utf-8") != text:
                return False
        except OSError:
            return False
    return True


# -- the activate script -------------------------------------------------------------------------------


def activate_snippet(final_venv: Path) -> str:
    # One shell word, whatever the path holds: in double quotes a `$(...)`, a backtick or a `$5` in it would
    # run or expand at every activation (issue 40).
    env_file = sh(Path(final_venv) / "mw-env.env")
    return (
        f"{ACTIVATE_BEGIN}\n"
        "# The profile's runtime environment and the torch pin (see mw-env.env; `mw-env env` prints it).\n"
        f"if [ -f {env_file} ]; then . {env_file}; fi\n"
        f"{ACTIVATE_END}\n"
    )


DEACTIVATE_SNIPPET = (
    f"    {ACTIVATE_BEGIN}\n"
    '    if [ -n "${_MW_ENV_VARS:-}" ]; then\n'
    '        for _mw_env_var in $_MW_ENV_VARS; do unset "$_mw_env_var"; done\n'
    "        unset _MW_ENV_VARS _mw_env_var\n"
    "    fi\n"
    f"    {ACTIVATE_END}\n"
)

_BLOCK = re.compile(r"[ \t]*" + re.escape(ACTIVATE_BEGIN) + r".*?" + re.escape(ACTIVATE_END) + r"\n", re.S)


def patched_activate(text: str, final_venv: Path) -> str:
    """bin/activate with our blocks: source the env file at the end, unset its variables in deactivate().

    Idempotent: old blocks are removed first, so re-running bootstrap never stacks them.
    """
    text = _BLOCK.sub("", text)
    m = re.search(r"^deactivate\s*\(\)\s*\{[^\n]*\n", text, re.M)
    if m:
        text = text[: m.end()] + DEACTIVATE_SNIPPET + text[m.end() :]
    if not text.endswith("\n"):
        text += "\n"
    return text + activate_snippet(final_venv)


def activate_path(venv: Path) -> Path:
    return Path(venv) / "bin" / "activate"


def activate_is_patched(venv: Path, final_venv: Path) -> bool:
    try:
        text = activate_path(venv).read_text(encoding="utf-8")
    except OSError:
        return False
    return patched_activate(text, final_venv) == text


def patch_activate(venv: Path, final_venv: Path) -> None:
    path = activate_path(venv)
    text = path.read_text(encoding="utf-8")
    new = patched_activate(text, final_venv)
    if new != text:
        write_atomic(path, new, mode=path.stat().st_mode & 0o777)


def env_file_content(runtime_env: Mapping[str, str], pins: Mapping[str, str]) -> str:
    return env_file_text({**runtime_env, **pins})
