"""The 2026 AMD wheel world in miniature, for tests: local indexes laid out like the real ones.

- "rocm714": pytorch.org's rocm7.14 index. torch 2.14.0+rocm7.14 requires `rocm[libraries,device-all]==7.14.*`
  (pytorch#191688); `rocm` has extras `libraries`, `device-all` and `device-gfxNNNN` pulling
  `rocm-sdk-device-gfxNNNN`. torch's HIP library carries the arch-flag string the wheel reader finds.
- "multiarch": AMD's multi-arch index. torch 2.13.0/2.14.0+rocm7.14.0 with extras `device-gfxNNNN` pulling
  `amd-torch-device-gfxNNNN` (and `device-all`, every one).
- "pypi": the default index, holding higher-versioned empty placeholders with the device packages' names (and
  the demo project's dependencies): an install that lets it answer for them gets nothing that runs. It alone
  holds torch's own dependencies (`setuptools`, `filelock`): the multi-arch index lacks them (ROCm/TheRock#3332)
  and, served with `indexserver.AMD`, answers 403 for them as repo.amd.com does (LocalAI#10997).

`BEHAVIOURS` is how each index answers when served (`serve(roots, BEHAVIOURS)`).

`profiles_dir(dest, urls)` writes a source catalogue with the shipped index URLs pointed at these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from indexserver import AMD, Behaviour
from wheelfactory import build_wheel, fake_torch, simple_index

ARCHS = ("gfx942", "gfx1100", "gfx1103", "gfx1151")
# torch's dependencies only the default index holds (real torch requires setuptools and filelock).
TORCH_DEPS = ("setuptools", "filelock")
# As the real ones answer: AMD's 403 for what it does not hold; pytorch.org's 403, JSON-only here, and its files
# from another host through a redirect (download-r2.pytorch.org).
PYTORCH_LIKE = Behaviour(unserved=403, json_only=True, cdn=True)
BEHAVIOURS = {"multiarch": AMD, "rocm714": PYTORCH_LIKE, "lacking": PYTORCH_LIKE}
REAL = {
    "multiarch": "https://repo.amd.com/rocm/whl-multi-arch/",
    "rocm714": "https://download.pytorch.org/whl/rocm7.14",
}


@dataclass(frozen=True)
class World:
    rocm714: Path
    multiarch: Path
    pypi: Path
    rocm714_lacking: Path  # a rocm7.14 index whose torch lacks gfx1103, though the table lists it


def _torch_714(dest: Path, flags: Sequence[str]) -> Path:
    return fake_torch(
        dest,
        "2.14.0+rocm7.14",
        hip="7.14.0",
        requires=["rocm[libraries,device-all]==7.14.*"],
        extra_files={"torch/lib/libtorch_python.so": "\0ELF\0" + " ".join(flags) + "\0"},
    )


def build_world(base: Path, archs: Sequence[str] = ARCHS) -> World:
    d = base / "dist"
    rocm_sdk = [build_wheel(d / "sdk", f"rocm-sdk-device-{g}", "7.14.0") for g in archs]
    rocm = build_wheel(
        d / "sdk",
        "rocm",
        "7.14.0",
        extras={
            "libraries": ["rocm-sdk-libraries==7.14.0"],
            "device-all": [f"rocm-sdk-device-{g}==7.14.0" for g in archs],
            **{f"device-{g}": [f"rocm-sdk-device-{g}==7.14.0"] for g in archs},
        },
    )
    libs = build_wheel(d / "sdk", "rocm-sdk-libraries", "7.14.0")
    sdk = [rocm, libs, *rocm_sdk]
    full = _torch_714(d / "pt", archs)
    lacking = _torch_714(d / "pt-lacking", [a for a in archs if a != "gfx1103"])
    devices = [build_wheel(d / "ma", f"amd-torch-device-{g}", "2.14.0+rocm7.14.0") for g in archs]
    devices_213 = [build_wheel(d / "ma", f"amd-torch-device-{g}", "2.13.0+rocm7.14.0") for g in archs]

    def multi(version: str) -> Path:
        return fake_torch(
            d / "ma",
            version,
            hip="7.14.0",
            requires=list(TORCH_DEPS),
            # A range, not a pin: what lets a higher-versioned placeholder compete when PyPI may answer.
            extras={
                **{f"device-{g}": [f"amd-torch-device-{g}>=2.13"] for g in archs},
                "device-all": [f"amd-torch-device-{g}>=2.13" for g in archs],
            },
        )

    placeholders = [build_wheel(d / "pypi", f"amd-torch-device-{g}", "99.0.0", files={}) for g in archs]
    trap = fake_torch(d / "pypi", "2.99.0", cuda="13.2")  # PyPI's CUDA torch: must never be chosen
    helper = build_wheel(d / "pypi", "demo-helper", "1.0")
    deps = [build_wheel(d / "pypi", name, "80.0.0") for name in TORCH_DEPS]
    return World(
        rocm714=simple_index(base / "rocm714", [full, *sdk]),
        multiarch=simple_index(
            base / "multiarch",
            [multi("2.13.0+rocm7.14.0"), multi("2.14.0+rocm7.14.0"), *devices, *devices_213],
        ),
        pypi=simple_index(base / "pypi", [*placeholders, trap, helper, *deps]),
        rocm714_lacking=simple_index(base / "rocm714-lacking", [lacking, *sdk]),
    )


def profiles_dir(dest: Path, urls: Mapping[str, str]) -> Path:
    """A profiles folder whose source catalogue (sources.yaml) points the shipped indexes at local ones (`urls`:
    REAL key -> local URL): the way a user points an index at a mirror."""
    from mw_env.profiles.torchsources import SHIPPED

    dest.mkdir(parents=True, exist_ok=True)
    text = SHIPPED.read_text()
    for key, url in urls.items():
        text = text.replace(REAL[key], url)
    (dest / "sources.yaml").write_text(text)
    return dest
