"""The catalogue's GPU advice is derived from the profiles when it is printed (issue 30): `doctor --explain` on a
780M names the native source and no override for a native venv, the override with its hang warning for a
`--source rocm6.4` venv; a changed arch list changes the advice; no two entries give opposite advice for one
GPU; every placeholder a message carries is one the advice fills."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from doctor_helpers import fake_venv

from conftest import MACHINES
from mw_env.checks.catalogue import CATALOGUE_FILE, general_advice, load_catalogue
from mw_env.checks.gpuadvice import KEYS, for_machine, general
from mw_env.cli import main
from mw_env.profiles import load_profiles, resolve
from mw_env.profiles.torchsources import SHIPPED as SHIPPED_SOURCES

ROOT_780M = str(MACHINES / "incus-780m")
ARCH_ENTRIES = ("invalid-device-function", "no-binary-for-gpu")
NO_BINARY = "HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"
INVALID = "RuntimeError: HIP error: invalid device function"
TENSILE = (
    "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: No such file or directory "
    "for GPU arch : gfx1103"
)


def _venv(path: Path, source: str) -> Path:
    version = "2.9.1+rocm6.4" if source == "rocm6.4" else "2.14.0+rocm7.14"
    return fake_venv(
        path, version=version, with_torch=False, record={"profile": "gfx1103", "torch_source": source}
    )


def _explain(tmp_path: Path, capsys, venv: Path, *extra: str) -> dict[str, dict]:
    log = tmp_path / "train.log"
    log.write_text("\n".join([NO_BINARY, INVALID, TENSILE]) + "\n")
    rc = main(["doctor", "--explain", str(log), "--json", "--root", ROOT_780M, "--venv", str(venv), *extra])
    assert rc == 1  # fatal messages found
    data = json.loads(capsys.readouterr().out)
    assert "(gfx1103)" in data["advice_for"] and str(venv) in data["advice_for"]
    return {m["id"]: m for m in data["messages"]}


def test_a_native_780m_venv_gets_the_native_source_and_no_override(tmp_path, capsys):
    found = _explain(tmp_path, capsys, _venv(tmp_path / "v", "amd-multiarch"))
    for entry in (*ARCH_ENTRIES, "tensile-no-library-for-arch"):
        fix = found[entry]["fix"]
        assert "amd-multiarch" in fix and "set no HSA_OVERRIDE_GFX_VERSION" in fix, entry
        assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" not in fix and "11.0.0" not in found[entry]["cause"], entry


def test_a_rocm64_780m_venv_gets_the_override_with_its_hang_warning(tmp_path, capsys):
    found = _explain(tmp_path, capsys, _venv(tmp_path / "v", "rocm6.4"))
    for entry in (*ARCH_ENTRIES, "tensile-no-library-for-arch"):
        fix = found[entry]["fix"]
        assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in fix, entry
        assert "hang" in fix and "TheRock#1184" in fix and "rocm6.4" in fix, entry
        assert "set no HSA_OVERRIDE" not in fix


def test_the_human_rendering_carries_the_same_advice(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(NO_BINARY + "\n")
    venv = _venv(tmp_path / "v", "amd-multiarch")
    assert main(["doctor", "--explain", str(log), "--root", ROOT_780M, "--venv", str(venv)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "native gfx1103 kernels" in out and "set no HSA_OVERRIDE_GFX_VERSION" in out


def test_the_installed_wheels_archs_win_over_the_table(tmp_path, capsys):
    # bootstrap read the wheel: this amd-multiarch build lacks gfx1103 although the table lists it.
    venv = fake_venv(
        tmp_path / "v",
        version="2.14.0+rocm7.14",
        with_torch=False,
        record={"profile": "gfx1103", "torch_source": "amd-multiarch", "wheel_archs": ["gfx1100", "gfx1151"]},
    )
    found = _explain(tmp_path, capsys, venv)
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in found["no-binary-for-gpu"]["fix"]
    assert "installed wheel's arch list" in found["no-binary-for-gpu"]["fix"]


def _without(profile, gfx: str, *source_ids: str):
    return replace(
        profile,
        sources=tuple(
            replace(s, arch_list=tuple(a for a in s.arch_list if a != gfx)) if s.id in source_ids else s
            for s in profile.sources
        ),
    )


def test_changing_a_profiles_arch_list_changes_the_advice():
    profiles = load_profiles(env={})
    before = general(profiles).values["gpu_advice"]
    # rocm7.14's gfx1103 is not shown by any source (issue 40): amd-multiarch alone carries it natively.
    assert "gfx1103 (AMD Radeon 780M/760M/740M iGPU): native kernels from amd-multiarch, so" in before
    assert "11.0.0 only under rocm7.14 or rocm6.4" in before
    changed = {**profiles, "gfx1103": _without(profiles["gfx1103"], "gfx1103", "amd-multiarch")}
    after = general(changed).values["gpu_advice"]
    assert (
        "gfx1103 (AMD Radeon 780M/760M/740M iGPU): no source of profile gfx1103 ships native kernels: 11.0.0"
        in after
    )
    # For this machine: the venv's source lost gfx1103, so the override (with its warning) is the advice.
    sel = resolve(root=ROOT_780M, source="amd-multiarch", interpreters=False).selection
    native = for_machine(sel, general(profiles)).values["gpu_advice"]
    assert "set no HSA_OVERRIDE_GFX_VERSION" in native
    lacking = replace(sel, profile=changed["gfx1103"], torch=changed["gfx1103"].source("amd-multiarch"))
    text = for_machine(lacking, general(changed)).values["gpu_advice"]
    # No other source shows gfx1103 (rocm7.14's is inferred, issue 40): no `--source` with native kernels to name.
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in text and "--source" not in text


def test_a_users_profile_file_changes_what_explain_says(tmp_path, capsys):
    folder = tmp_path / "profiles"
    folder.mkdir()
    text = SHIPPED_SOURCES.read_text()
    # amd-multiarch's table without gfx1103 (the first arch list of the source catalogue is amd-multiarch's).
    first = re.search(r"arch_list: \[[^\]]*\]", text)
    assert first and "gfx1103, " in first.group(0)
    text = text[: first.start()] + first.group(0).replace("gfx1103, ", "") + text[first.end() :]
    (folder / "sources.yaml").write_text(text)
    venv = _venv(tmp_path / "v", "amd-multiarch")
    found = _explain(tmp_path, capsys, venv, "--profiles-dir", str(folder))
    assert "export HSA_OVERRIDE_GFX_VERSION=11.0.0" in found["no-binary-for-gpu"]["fix"]


SET = re.compile(r"export HSA_OVERRIDE_GFX_VERSION=([\d.]+)|Set HSA_OVERRIDE_GFX_VERSION to")
UNSET = re.compile(r"set no HSA_OVERRIDE_GFX_VERSION|`unset HSA_OVERRIDE_GFX_VERSION`")


def _stances(catalogue) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m in catalogue.messages:
        for text in (m.cause, m.fix, m.doctor_fix):
            for hit in SET.finditer(text):
                out.setdefault(m.id, set()).add(f"set {hit.group(1) or '?'}")
            if UNSET.search(text):
                out.setdefault(m.id, set()).add("unset")
    return out


AMD_MACHINES = ("incus-780m", "strix-halo-8060s", "rx7900xtx")


@pytest.mark.parametrize("machine", AMD_MACHINES)
def test_no_two_entries_give_opposite_advice_for_one_gpu(machine):
    base = resolve(root=str(MACHINES / machine), interpreters=False)
    profile = base.selection.profile
    for source in [s.id for s in profile.sources if s.channel == "stable" and not s.retired]:
        sel = resolve(root=str(MACHINES / machine), source=source, interpreters=False).selection
        cat = load_catalogue(profile=profile, advice=for_machine(sel, general_advice()))
        stances = _stances(cat)
        said = set().union(*stances.values()) if stances else set()
        assert len(said) == 1, f"{machine} under {source}: {stances}"
        expected = f"set {sel.hsa_override}" if sel.hsa_override else "unset"
        assert said <= {expected}, f"{machine} under {source}: {stances} vs the selection's {expected}"


def test_every_placeholder_in_a_message_is_one_the_advice_fills():
    import yaml

    data = yaml.safe_load(CATALOGUE_FILE.read_text())
    for entry in data["messages"]:
        for key in ("cause", "fix", "doctor_fix", "here", "title"):
            for name in re.findall(r"\{(\w+)\}", str(entry.get(key) or "")):
                assert name in KEYS and key in ("cause", "fix", "doctor_fix"), (entry["id"], key, name)
    for m in load_catalogue().messages:
        assert not re.search(r"\{(" + "|".join(KEYS) + r")\}", m.cause + m.fix + m.doctor_fix), m.id


def test_no_message_types_which_source_covers_a_gpu_or_an_override_value():
    # Facts the profiles hold, never typed into the catalogue beside them: source ids and override values.
    profiles = load_profiles(env={})
    ids = {s.id for p in profiles.values() for s in p.sources if any(c.isdigit() for c in s.id)}
    values = {p.hsa_override_when_missing for p in profiles.values() if p.hsa_override_when_missing}
    values |= {o.hsa_override for p in profiles.values() for o in p.arch_overrides}
    values |= {s.min_driver for p in profiles.values() for s in p.sources if s.min_driver}
    import yaml

    data = yaml.safe_load(CATALOGUE_FILE.read_text())
    for entry in data["messages"]:
        text = " ".join(str(entry.get(k) or "") for k in ("cause", "fix", "doctor_fix"))
        assert not [i for i in ids if re.search(rf"(?<![\w.-]){re.escape(i)}(?![\w.-])", text)], entry["id"]
        assert not [v for v in values if re.search(rf"(?<![\d.]){re.escape(v)}(?![\d.])", text)], entry["id"]


def test_troubleshooting_doc_shows_the_derived_advice():
    doc = (Path(__file__).parents[2] / "docs" / "troubleshooting.md").read_text()
    assert " ".join(general_advice().values["gpu_advice"].split()) in " ".join(doc.split())


def test_the_tensile_forms_are_told_apart():
    cat = load_catalogue()
    assert cat.first_match(TENSILE).id == "tensile-no-library-for-arch"
    assert (
        cat.first_match(
            "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek for GPU arch : gfx1035"
        ).id
        == "tensile-illegal-seek"
    )
    plain = "rocBLAS error: Cannot read /opt/rocm/rocblas/lib/rocblas/library/TensileLibrary.dat: No such file or directory"
    assert cat.first_match(plain).id == "tensile-library-not-found"
    lazy = 'rocblaslt error: Cannot read "TensileLibrary_lazy_gfx1151.dat": No such file or directory'
    assert cat.first_match(lazy).id == "rocblaslt-lazy-library"


def test_a_log_read_on_a_machine_without_an_amd_gpu_gets_every_gpus_advice(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text(NO_BINARY + "\n")
    rc = main(
        [
            "doctor",
            "--explain",
            str(log),
            "--json",
            "--root",
            str(MACHINES / "cpu-only"),
            "--venv",
            str(tmp_path / "none"),
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data["advice_for"] is None
    fix = data["messages"][0]["fix"]
    assert "For the GPUs the profiles name" in fix and "gfx1103" in fix and "gfx1151" in fix


def test_the_cuda_sentences_follow_the_cuda_table():
    profiles = load_profiles(env={})
    cause = next(m.cause for m in load_catalogue().messages if m.id == "no-kernel-image")
    assert "cu126 sm_50-sm_90" in cause and "cu128 sm_75-sm_120" in cause
    cuda = profiles["cuda"]
    newer = replace(
        cuda, sources=tuple(replace(s, min_driver="999.1") if s.id == "cu126" else s for s in cuda.sources)
    )
    advice = general({**profiles, "cuda": newer})
    cat = load_catalogue(advice=advice)
    assert "cu126 >= 999.1" in next(m.cause for m in cat.messages if m.id == "nvidia-driver-too-old")
