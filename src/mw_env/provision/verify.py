"""Verify the installed torch is the profile's build: the check that catches the seed's trap
(a CUDA torch on an AMD box installs fine and then trains on the CPU)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from mw_env.base.errors import StepFailed
from mw_env.profiles.model import has_local_tag

# Runs inside the venv's python; stdlib + torch only. First the build as torch/version.py states it (what
# `torch.version` is), read WITHOUT importing torch: the verdict on the build takes a moment. Then, unless the
# doctor step will import torch anyway, `import torch` itself (seconds: loading its libraries), which runs
# while the extras install (execute.py).
_STATIC = """
import importlib.util, json, os, sys
spec = importlib.util.find_spec("torch")
if spec is None or not spec.submodule_search_locations:
    print("ModuleNotFoundError: No module named 'torch'")
    sys.exit(1)
root = list(spec.submodule_search_locations)[0]
ns = {}
with open(os.path.join(root, "version.py"), encoding="utf-8") as fh:
    exec(compile(fh.read(), os.path.join(root, "version.py"), "exec"), ns)
print(json.dumps({"version": ns.get("__version__"), "hip": ns.get("hip"), "cuda": ns.get("cuda"),
                  "file": os.path.join(root, "__init__.py"), "stage": "static", "then_import": IMPORT}))
sys.stdout.flush()
if IMPORT:
    import torch
    v = getattr(torch, "version", None)
    print(json.dumps({"version": torch.__version__, "hip": getattr(v, "hip", None),
                      "cuda": getattr(v, "cuda", None), "file": torch.__file__, "stage": "import"}))
"""


def verify_command(python: str, *, import_torch: bool = True) -> tuple[str, ...]:
    return (python, "-c", _STATIC.replace("IMPORT", "True" if import_torch else "False"))


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
    """The build the verify command reported: the import's view when it imported torch, else version.py's.

    A run that promised an import (`then_import`) and has no import line failed to import torch.
    """
    found: dict[str, dict] = {}
    for line in output.strip().splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "version" in data:
            found[str(data.get("stage", "import"))] = data
    data = found.get("import")
    if data is None and "static" in found and not found["static"].get("then_import"):
        data = found["static"]
    if data is not None and data.get("version"):
        return TorchBuild(str(data["version"]), data.get("hip"), data.get("cuda"), str(data.get("file", "")))
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
