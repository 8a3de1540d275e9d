"""Which optional packages a config needs in the training venv, and the one way every hint says to add them.

The install form is `mw-env bootstrap --venv V --extras train,X`: bootstrap installs extras with torch pinned
to the build it verified (a bare `pip install` may replace torch), and records them for the next re-run.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from pathlib import Path

from mw_env.base.shellquote import sh

# extra (pyproject.toml) -> the distributions that satisfy it (any one of each tuple)
EXTRAS: dict[str, tuple[tuple[str, ...], ...]] = {
    "train": (("numpy",), ("pyarrow",), ("matplotlib",), ("safetensors",)),
    "spm": (("sentencepiece",),),
    "export": (("onnx",), ("onnxruntime", "onnxruntime-gpu", "onnxruntime-rocm"), ("onnxscript",)),
    "tracking": (("tensorboard",),),
    "mlflow": (("mlflow-skinny", "mlflow"),),
}


def bootstrap_hint(venv: Path | str, *extras: str) -> str:
    """`mw-env bootstrap --venv V --extras train,X`: the install form every hint names."""
    wanted = ["train", *[e for e in extras if e != "train"]]
    return f"`mw-env bootstrap --venv {sh(venv)} --extras {','.join(wanted)}`"


def site_packages(venv: Path) -> list[Path]:
    return sorted(Path(venv).glob("lib/python*/site-packages"))


def installed(venv: Path) -> set[str]:
    """Normalised names of the distributions installed in the venv (read from its metadata, no import)."""
    names = set()
    for dist in importlib.metadata.distributions(path=[str(p) for p in site_packages(venv)]):
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            names.add(name.lower().replace("_", "-"))
    return names


def missing(venv: Path, extra: str, have: set[str] | None = None) -> list[str]:
    """The distributions of `extra` the venv lacks (one name per alternative group)."""
    have = installed(venv) if have is None else have
    return [group[0] for group in EXTRAS[extra] if not any(g in have for g in group)]


def needed_extras(tracking: str, tokenizer: str) -> Sequence[str]:
    out = []
    if tracking in ("tensorboard", "mlflow"):
        out.append("tracking" if tracking == "tensorboard" else "mlflow")
    if tokenizer == "sentencepiece":
        out.append("spm")
    return out
