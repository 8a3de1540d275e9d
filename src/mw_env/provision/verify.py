"""Verify the installed torch is the profile's build: the check that catches the seed's trap
(a CUDA torch on an AMD box installs fine and then trains on the CPU)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mw_env.errors import StepFailed
from mw_env.profiles.model import has_local_tag

# Runs inside the venv's python; stdlib + torch only.
VERIFY_SCRIPT = (
    "import json, torch; v = getattr(torch, 'version', None); "
    "print(json.dumps({'version': torch.__version__, 'hip': getattr(v, 'hip', None), "
    "'cuda': getattr(v, 'cuda', None), 'file': torch.__file__}))"
)


def verify_command(python: str) -> tuple[str, ...]:
    return (python, "-c", VERIFY_SCRIPT)


@dataclass(frozen=True)
class TorchBuild:
    version: str
    hip: str | None
    cuda: str | None
    file: str = ""

    @property
    def build(self) -> str:
        return "rocm" if self.hip else "cuda" if self.cuda else "cpu"


def parse(output: str) -> TorchBuild:
    for line in reversed(output.strip().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "version" in data:
            return TorchBuild(
                str(data["version"]), data.get("hip"), data.get("cuda"), str(data.get("file", ""))
            )
    raise StepFailed(
        "could not import torch in the venv:\n" + "\n".join(output.strip().splitlines()[-8:]),
        hint="re-run `mw-env bootstrap` (the torch step is redone); `mw-env doctor` shows more",
    )


def check(found: TorchBuild, *, build: str, local_tag: str, adopted: bool = False) -> None:
    """Raise StepFailed unless `found` is the expected build (and carries its local tag)."""
    problems = []
    if found.build != build:
        problems.append(f"it is a {found.build} build (hip={found.hip}, cuda={found.cuda}), not {build}")
    if local_tag and not adopted and not has_local_tag(found.version, local_tag):
        problems.append(f"its version {found.version} lacks the local tag {local_tag}")
    if problems:
        raise StepFailed(
            f"the installed torch {found.version} is the wrong build: " + "; ".join(problems),
            hint="a resolver picked torch from the wrong index (a CUDA/PyPI build on an AMD box trains on the "
            "CPU). Check --torch-index/--find-links and PIP_INDEX_URL/UV_INDEX_URL, then re-run bootstrap; the "
            "venv is kept and only the torch step is redone",
        )
