"""docs/troubleshooting.md, rendered from the catalogue: every known message and every finding, cause and fix.

`python -m mw_env.checks.catalogue_doc > docs/troubleshooting.md` regenerates it; tests/checks/test_catalogue.py keeps
the page and the catalogue in step.
"""

from __future__ import annotations

from mw_env.checks.catalogue import Catalogue, load_catalogue

_MARKS = {"fatal": "✗ fatal", "warning": "! warning", "harmless": "• harmless"}
_MACHINE_NAMES = {"amd": "an AMD GPU", "nvidia": "an NVIDIA GPU", "cpu": "no GPU"}
_HEAD = [
    "# Troubleshooting",
    "",
    "Generated from `src/mw_env/checks/catalogue.yaml` by `python -m mw_env.checks.catalogue_doc` (a test keeps",
    "this page and the catalogue in step). `mw-env doctor` reports these findings for your machine;",
    "`mw-env doctor --explain train.log` finds the known messages in a log and prints their cause and fix.",
    "Text in `{braces}` is filled in by the doctor for your machine. The GPU advice (which torch source",
    "carries a GPU's kernels, when HSA_OVERRIDE_GFX_VERSION applies) is derived from the profiles' source",
    "tables when it is printed: here for every GPU they name; on the machine, `mw-env doctor --explain LOG",
    "--venv V` gives it for that GPU and that venv (the source it was built from, its wheel's archs).",
    "A message whose meaning depends on the hardware (a CUDA torch's 'Found no NVIDIA driver' on an AMD",
    "machine is the wrong build, not a missing driver) is explained for the machine `--explain` runs on",
    "(or `--root`); each such variant is listed under its entry ('on a machine with ...').",
    "A message is recognised however its log wraps it: a timestamp, a level (`ERROR:`), a logger's name, a",
    "rank prefix (`[rank0]:`), quotes around the whole line.",
    "",
    "## Known messages",
    "",
]


def _code(text: str) -> str:
    """Markdown inline code for `text`, whatever backticks it holds."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_troubleshooting(cat: Catalogue | None = None) -> str:
    """docs/troubleshooting.md: every known message and every finding, with cause and fix."""
    cat = cat or load_catalogue()
    out = list(_HEAD)
    for msg in cat.messages:
        out += [
            f"### {msg.title}",
            "",
            f"- severity: {_MARKS[msg.severity]} · id `{msg.id}` · pattern {_code(msg.pattern)}",
            f"- cause: {msg.cause}",
            f"- fix: {msg.fix}",
        ]
        if msg.here:
            out.append(f"- on this machine: {msg.here}")
        for machine, variant in msg.machines.items():
            said = "; ".join(f"{key}: {text}" for key, text in variant.items())
            out.append(f"- on a machine with {_MACHINE_NAMES.get(machine, machine)}: {said}")
        if msg.kind:
            out.append(f"- `mw-env train status` reports it as `{msg.kind}`")
        for example in msg.examples:
            out.append(f"- seen as: {_code(example)}")
        if msg.source:
            out.append(f"- source: {msg.source}")
        out.append("")
    out += ["## Doctor findings", ""]
    for key, fix in cat.fixes.items():
        out += [
            f"### {fix.title}",
            "",
            f"- check finding `{key}`",
            f"- cause: {fix.cause}",
            f"- fix: {fix.fix}",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_troubleshooting())
