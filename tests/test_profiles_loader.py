"""Profile loading and strict validation: shipped files, user folders, and bad files with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.profiles import (
    PROFILES_ENV,
    SHIPPED_DIR,
    TorchSource,
    get_profile,
    load_profile_file,
    load_profiles,
)

FIXTURES = Path(__file__).parent / "fixtures" / "profiles"
BAD = FIXTURES / "bad"
USER = FIXTURES / "user"


def test_shipped_profiles_load_and_are_the_five():
    profiles = load_profiles(env={})
    assert set(profiles) == {"gfx1103", "gfx1151", "rocm", "cuda", "cpu"}
    for p in profiles.values():
        assert p.shipped and p.path is not None and p.path.parent == SHIPPED_DIR
        assert p.sources, p.name
        assert p.description


def test_shipped_sources_have_the_documented_values():
    p = load_profiles(env={})
    g3 = p["gfx1103"].default_source
    assert (g3.id, g3.index_url, g3.local_tag) == (
        "amd-multiarch",
        "https://repo.amd.com/rocm/whl-multi-arch/",
        "+rocm7.14",
    )
    assert (
        "gfx1103" in g3.arch_list
        and g3.per_gpu
        and g3.devices.package_for("gfx1103") == "amd-torch-device-gfx1103"
    )
    old = p["gfx1103"].source("rocm6.4")
    assert "gfx1103" not in old.arch_list and "gfx1100" in old.arch_list
    # The per-family indexes are retired, each naming its replacement (a venv built from one still resolves).
    for name, sid in (("gfx1103", "therock-gfx110x"), ("gfx1151", "amd-gfx1151"), ("rocm", "amd-gfx1152")):
        retired = p[name].source(sid)
        assert retired.retired and retired.replaced_by == "amd-multiarch" and not retired.default
    pt = p["gfx1151"].source("rocm7.14")
    assert pt.index_url.endswith("/rocm7.14") and not pt.per_gpu and pt.devices.all_extra == "device-all"
    assert p["gfx1151"].source("rocm7.2").version == ">=2.11,<2.14"
    assert p["gfx1151"].source("amd-multiarch-nightly").channel == "nightly"
    cpu = p["cpu"].default_source
    assert cpu.index_url == "https://download.pytorch.org/whl/cpu" and cpu.local_tag == "+cpu"
    # This project's wheelhouse holds torch 2.13.0+cpu: the cpu profile must accept it.
    assert cpu.accepts("2.13.0+cpu")
    assert p["gfx1103"].trainer.sdpa_backend == "math"
    assert p["cpu"].trainer.device == "cpu" and p["cpu"].trainer.precision == "fp32"
    cu = {s.id: s for s in p["cuda"].sources}
    assert (
        cu["cu132"].version == ">=2.12,<2.15"
        and cu["cu132"].min_driver == cu["cu130"].min_driver == "580.65.06"
    )
    assert "sm_70" not in cu["cu128"].arch_list and "sm_70" in cu["cu126"].arch_list


def test_no_shipped_profile_sets_the_hsa_override_in_env():
    for p in load_profiles(env={}).values():
        assert "HSA_OVERRIDE_GFX_VERSION" not in p.env
    assert load_profiles(env={})["gfx1151"].hsa_override_when_missing is None


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("2.9.1+rocm6.4", True),
        ("2.9.1+rocm6.4.1", True),  # AMD's longer spelling of the same stack
        ("2.9.1+rocm6.40", False),
        ("2.9.1", False),  # a PyPI build: no local tag
        ("2.9.1+cu126", False),
        ("2.9.0+rocm6.4", False),
        ("not a version", False),
    ],
)
def test_source_accepts_only_its_build(version, ok):
    src = load_profiles(env={})["gfx1103"].source("rocm6.4")
    assert src.accepts(version) is ok
    assert isinstance(src, TorchSource) and src.requirement == "torch==2.9.1"


@pytest.mark.parametrize(
    ("name", "must_contain"),
    [
        ("unknown-key", ["trainer.precison", "unknown key", "precision"]),
        ("bad-build", ["sources[0].build", "'rocn'", "rocm, cuda, cpu"]),
        ("bad-precision", ["trainer.precision", "'fp8'", "fp32, bf16, fp16"]),
        ("hsa-in-env", ["env.HSA_OVERRIDE_GFX_VERSION", "derived", "hsa_override_when_missing"]),
        ("bad-specifier", ["sources[0].version", "2.13.0", "=="]),
        ("tag-mismatch", ["sources[0].local_tag", "+rocm6.4", "'+cu'"]),
        ("bad-yaml", ["invalid YAML", "line"]),
        ("name-mismatch", ["name", "something-else", "name-mismatch"]),
        ("bad-gfx", ["match.gfx[0]", "navi31", "gfx1103"]),
        ("no-sources", ["sources", "at least one"]),
        ("cuda-no-driver", ["sources[0].min_driver", "required"]),
        ("two-defaults", ["sources", "more than one"]),
        ("list-not-map", ["must be a mapping"]),
    ],
)
def test_bad_profile_error_names_file_key_and_allowed_values(name, must_contain):
    path = BAD / f"{name}.yaml"
    with pytest.raises(InputError) as err:
        load_profile_file(path)
    text = f"{err.value.message} {err.value.hint}"
    assert str(path) in err.value.message
    for piece in must_contain:
        assert piece in text, (piece, text)
    assert err.value.exit_code == 2


def test_bad_file_in_a_profiles_dir_fails_the_load(tmp_path):
    (tmp_path / "bad-build.yaml").write_text((BAD / "bad-build.yaml").read_text())
    with pytest.raises(InputError, match=r"bad-build\.yaml"):
        load_profiles(extra_dirs=[tmp_path], env={})


def test_user_profiles_override_shipped_ones_and_add_new(tmp_path):
    profiles = load_profiles(extra_dirs=[USER], env={})
    assert not profiles["gfx1103"].shipped
    assert profiles["gfx1103"].default_source.id == "mirror"
    assert profiles["lab-cpu"].path == USER / "lab-cpu.yaml"
    assert profiles["cuda"].shipped


def test_env_folders_load_and_cli_folders_win(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "gfx1103.yaml").write_text((USER / "gfx1103.yaml").read_text().replace("mirror", "cli-mirror"))
    from_env = load_profiles(env={PROFILES_ENV: f"{USER}:"})
    assert from_env["gfx1103"].default_source.id == "mirror"
    both = load_profiles(extra_dirs=[mine], env={PROFILES_ENV: str(USER)})
    assert both["gfx1103"].default_source.id == "cli-mirror"


def test_missing_profiles_dir_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_profiles(extra_dirs=[tmp_path / "nope"], env={})


def test_two_files_for_one_name_in_a_folder_is_an_error(tmp_path):
    text = (USER / "lab-cpu.yaml").read_text()
    (tmp_path / "lab-cpu.yaml").write_text(text)
    (tmp_path / "lab-cpu.yml").write_text(text)
    with pytest.raises(InputError, match="both define 'lab-cpu'"):
        load_profiles(extra_dirs=[tmp_path], env={})


def test_unknown_profile_name_lists_the_names_and_aliases_resolve():
    profiles = load_profiles(env={})
    with pytest.raises(InputError) as err:
        get_profile(profiles, "gfx1102")
    assert "cpu, cuda, gfx1103, gfx1151, rocm" in err.value.message
    # captures/amd-mi300x-x4-gfx942/expect.yaml calls it rocm-other.
    assert get_profile(profiles, "rocm-other").name == "rocm"


def test_profile_to_dict_is_json_serialisable():
    import json

    for p in load_profiles(env={}).values():
        data = json.loads(json.dumps(p.to_dict()))
        assert data["name"] == p.name and data["sources"]


def test_doctor_catalogue_entries_are_carried_and_checked(tmp_path):
    base = (USER / "lab-cpu.yaml").read_text()
    good = base + "doctor:\n  catalogue:\n    - {id: lab-1, pattern: 'lab warning', severity: harmless}\n"
    (tmp_path / "lab-cpu.yaml").write_text(good)
    profile = load_profiles(extra_dirs=[tmp_path], env={})["lab-cpu"]
    assert profile.doctor.catalogue == ({"id": "lab-1", "pattern": "lab warning", "severity": "harmless"},)
    (tmp_path / "lab-cpu.yaml").write_text(base + "doctor:\n  catalogue: [just a string]\n")
    with pytest.raises(InputError, match=r"doctor\.catalogue\[0\]: must be a mapping"):
        load_profiles(extra_dirs=[tmp_path], env={})


def test_a_file_that_is_not_a_mapping_names_the_top_level(tmp_path):
    (tmp_path / "x.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(InputError) as err:
        load_profile_file(tmp_path / "x.yaml")
    assert f"profile {tmp_path / 'x.yaml'}: (top level): must be a mapping, got list" == err.value.message
    assert "name" in err.value.hint and "sources" in err.value.hint


def test_an_unknown_key_suggests_the_close_name_and_a_number_reads_as_text(tmp_path):
    base = (USER / "lab-cpu.yaml").read_text()
    (tmp_path / "lab-cpu.yaml").write_text(base + "trainer:\n  precison: bf16\n")
    with pytest.raises(InputError) as err:
        load_profiles(extra_dirs=[tmp_path], env={})
    assert "trainer.precison: unknown key" in err.value.message
    assert "(did you mean trainer.precision?)" in err.value.hint
    # YAML reads 6.2 as a float; a version field means the text.
    (tmp_path / "lab-cpu.yaml").write_text(base + "doctor:\n  min_hip: 6.2\n")
    assert load_profiles(extra_dirs=[tmp_path], env={})["lab-cpu"].doctor.min_hip == "6.2"
    (tmp_path / "lab-cpu.yaml").write_text(base + "doctor:\n  expected_tflops: {fp32: 0}\n")
    with pytest.raises(InputError, match=r"doctor\.expected_tflops\.fp32: must be a positive number"):
        load_profiles(extra_dirs=[tmp_path], env={})


def test_the_shipped_index_is_current():
    # profiles/shipped.json is the parsed copy every command reads instead of the YAML; a stale entry would
    # only cost speed (the text is compared), so staleness is this test's to catch.
    import json

    from mw_env.profiles import index

    assert json.loads(index.INDEX.read_text(encoding="utf-8")) == index.build(SHIPPED_DIR), (
        "run: python -m mw_env.profiles.index"
    )


def test_a_shipped_file_edited_in_place_is_parsed_from_its_yaml(tmp_path, monkeypatch):
    from mw_env.profiles import index, loader

    text = (SHIPPED_DIR / "cpu.yaml").read_text(encoding="utf-8")
    assert index.cached("cpu.yaml", text) is not None
    edited = text.replace("CPU only", "CPU only, edited")
    assert edited != text and index.cached("cpu.yaml", edited) is None
    # The loader on a copy of the shipped folder whose cpu.yaml was edited: the edit is what loads.
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for f in SHIPPED_DIR.glob("*.yaml"):
        (shipped / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    (shipped / "cpu.yaml").write_text(edited, encoding="utf-8")
    monkeypatch.setattr(loader, "SHIPPED_DIR", shipped)
    assert loader.load_profiles(env={})["cpu"].description.startswith("CPU only, edited")


def test_loading_the_shipped_profiles_imports_neither_yaml_nor_packaging():
    # The start-up cost `mw-env detect` saves (docs/benchmarks.md): both imports are ~10 ms each.
    import subprocess
    import sys

    code = (
        "import sys; from mw_env.profiles import load_profiles; load_profiles(env={}); "
        "print(sorted(m for m in ('yaml', 'packaging') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
