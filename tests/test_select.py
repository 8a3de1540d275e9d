"""Profile selection over constructed Hardware: profile, torch source, derived env, reason, warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.hardware.facts import DeviceNode, Gpu, Hardware
from mw_env.profiles import load_profiles, select

USER = Path(__file__).parent / "fixtures" / "profiles" / "user"
OK_AMD = (
    DeviceNode("/dev/kfd", True, True, True, True),
    DeviceNode("/dev/dri/renderD128", True, True, True, True),
)
OK_NV = (DeviceNode("/dev/nvidia0", True, True, True, True),)


@pytest.fixture(scope="module")
def profiles():
    return load_profiles(env={})


def amd(gfx, name="AMD Radeon Graphics", *, index=0, pci=None, nodes=OK_AMD, kfd_node=None):
    return Gpu(
        index=index,
        vendor="amd",
        name=name,
        gfx_target=gfx,
        pci_id=pci,
        device_nodes=nodes,
        kfd_node=kfd_node,
    )


def nv(cc, name="NVIDIA GPU", *, index=0):
    return Gpu(index=index, vendor="nvidia", name=name, compute_capability=cc, device_nodes=OK_NV)


def hw(*gpus, selected=0, driver=None, reason=""):
    return Hardware(
        gpus=gpus, selected_gpu=selected if gpus else None, nvidia_driver=driver, selection_reason=reason
    )


def test_cpu_only(profiles):
    s = select(Hardware(selection_reason="no GPU detected"), profiles)
    assert s.profile.name == "cpu" and s.torch.build == "cpu" and s.env == {}
    assert "no GPU detected" in s.reason and s.required_arch is None


def test_780m_gets_the_newest_native_torch_from_the_smallest_install(profiles):
    s = select(hw(amd("gfx1103", "AMD Radeon 780M")), profiles)
    assert s.profile.name == "gfx1103"
    assert s.torch.id == "amd-multiarch" and s.torch.index_url == "https://repo.amd.com/rocm/whl-multi-arch/"
    assert s.env == {} and s.hsa_override is None and s.required_arch == "gfx1103" and not s.warnings
    # Why it won, in the plan's own words: same torch as pytorch.org's rocm7.14, but one GPU's package.
    assert "amd-multiarch won: the newest torch (2.14) with native gfx1103 kernels" in s.reason
    # rocm7.14 is no rival: no source shows gfx1103 in its arch list (pytorch#179653 was closed unmerged and
    # unsloth#9829 found gfx1103 in no release branch's build.sh), so it is not listed as carrying it.
    assert "rocm7.14" not in s.reason
    assert s.device_targets == ("gfx1103",)
    assert s.trainer.sdpa_backend == "math" and s.trainer.precision == "fp32"


def test_780m_forced_onto_rocm714_gets_the_override_until_the_wheel_says_otherwise(profiles):
    # The corrected fact: rocm7.14's (inferred) arch list has no gfx1103, so a forced rocm7.14 gets the override
    # and the hang warning; the installed wheel's own arch list decides after install (provision reads it).
    s = select(hw(amd("gfx1103", "AMD Radeon 780M")), profiles, source="rocm7.14")
    assert s.torch.id == "rocm7.14" and s.env == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    assert s.required_arch == "gfx1100"
    assert any("hang" in w and "--source amd-multiarch" in w for w in s.warnings)
    assert any("arch list is inferred" in w and "installed wheel" in w for w in s.warnings)


def test_an_inferred_arch_list_never_decides_the_default(profiles):
    from dataclasses import replace

    # Were amd-multiarch's gfx1103 inferred too, no source would carry it by a shown fact: the default source
    # (the profile's `default: true`) with the override, never a source chosen on an inferred list.
    gfx1103 = profiles["gfx1103"]
    multi = gfx1103.source("amd-multiarch")
    rocm714 = gfx1103.source("rocm7.14")
    assert multi is not None and rocm714 is not None and "arch_list" in rocm714.inferred
    with_gfx1103 = replace(rocm714, arch_list=(*rocm714.arch_list, "gfx1103"))  # as the old row claimed
    doubted = replace(multi, inferred={"arch_list": "not shown"}, default=False)
    sources = tuple(
        with_gfx1103 if s.id == "rocm7.14" else doubted if s.id == "amd-multiarch" else s
        for s in gfx1103.sources
    )
    s = select(
        hw(amd("gfx1103", "AMD Radeon 780M")), {**profiles, "gfx1103": replace(gfx1103, sources=sources)}
    )
    assert s.torch.id != "rocm7.14"  # an inferred gfx1103 is not a reason to pick it
    assert "no source of profile 'gfx1103' ships native gfx1103 kernels" in s.reason


def test_780m_forced_onto_a_source_without_gfx1103_gets_the_override_and_the_hang_warning(profiles):
    s = select(hw(amd("gfx1103", "AMD Radeon 780M")), profiles, source="rocm6.4")
    assert s.torch.id == "rocm6.4" and s.env == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    assert s.hsa_override == "11.0.0" and s.required_arch == "gfx1100" and "lacks gfx1103" in s.reason
    assert any("hang" in w and "--source amd-multiarch" in w for w in s.warnings)


def test_a_retired_source_is_never_chosen_and_says_its_replacement_when_forced(profiles):
    s = select(hw(amd("gfx1103", "AMD Radeon 780M")), profiles, source="therock-gfx110x")
    assert s.torch.id == "therock-gfx110x" and "HSA_OVERRIDE_GFX_VERSION" not in s.env
    assert any("retired" in w and "--source amd-multiarch" in w for w in s.warnings)


def test_override_follows_the_wheel_not_the_profile_name(profiles):
    # A user profile whose default wheel ships gfx1103 kernels: same profile name, no override.
    user = load_profiles(extra_dirs=[USER], env={})
    s = select(hw(amd("gfx1103", "AMD Radeon 780M")), user)
    assert s.profile.name == "gfx1103" and not s.profile.shipped
    assert s.torch.id == "mirror" and "HSA_OVERRIDE_GFX_VERSION" not in s.env


def test_780m_matched_by_pci_id_when_kfd_cannot_tell(profiles):
    s = select(hw(amd(None, "AMD Radeon 780M", pci="1002:15BF")), profiles)
    assert s.profile.name == "gfx1103" and "PCI id 1002:15bf" in s.reason
    assert s.torch.id == "amd-multiarch" and "HSA_OVERRIDE_GFX_VERSION" not in s.env


def test_780m_without_kfd_still_selects_gfx1103_and_says_so(profiles):
    nodes = (
        DeviceNode("/dev/kfd", False),
        DeviceNode("/dev/dri/renderD128", True, True, False, False, "0660", 0, 0),
    )
    s = select(hw(amd("gfx1103", "AMD Radeon 780M", nodes=nodes)), profiles)
    assert s.profile.name == "gfx1103"
    assert "/dev/kfd missing" in s.reason and "bootstrap can still prepare the venv" in s.reason
    assert "host-commands" in s.reason


@pytest.mark.parametrize("source", [None, "rocm7.14", "rocm7.2", "amd-gfx1151"])
def test_gfx1151_never_gets_an_override(profiles, source):
    s = select(hw(amd("gfx1151", "AMD Radeon 8060S")), profiles, source=source)
    assert s.profile.name == "gfx1151" and "HSA_OVERRIDE_GFX_VERSION" not in s.env
    assert s.required_arch == "gfx1151" and s.trainer.precision == "bf16"
    assert s.expected_tflops == {"fp32": 2.45, "bf16": 23.7, "fp16": 22.9}


def test_mi300x_x4_is_rocm_with_every_gpu_visible(profiles):
    gpus = tuple(amd("gfx942", "AMD Instinct MI300X", index=i, kfd_node=i + 2) for i in range(4))
    s = select(hw(*gpus), profiles)
    assert s.profile.name == "rocm" and s.torch.id == "amd-multiarch" and s.device_targets == ("gfx942",)
    assert s.env == {} and s.hsa_override is None  # captures/amd-mi300x-x4-gfx942/expect.yaml
    assert s.expected_tflops["bf16"] > 100


def test_igpu_next_to_dgpu_hides_the_other_arch(profiles):
    gpus = (
        amd("gfx1103", "AMD Radeon 780M", index=0, kfd_node=1),
        amd("gfx1100", "AMD Radeon RX 7900 XTX", index=1, kfd_node=2),
    )
    s = select(hw(*gpus, selected=1, reason="discrete over integrated"), profiles)
    assert s.profile.name == "rocm" and s.env == {"HIP_VISIBLE_DEVICES": "1"}
    assert s.reason.startswith("discrete over integrated; AMD Radeon RX 7900 XTX (gfx1100) matches")
    assert s.device_targets == ("gfx1100",)  # only the visible GPU's kernels
    # Choosing the iGPU instead (--gpu 0) hides the dGPU; its own kernels, still no override.
    s = select(hw(*gpus, selected=0), profiles)
    assert s.profile.name == "gfx1103" and s.env == {"HIP_VISIBLE_DEVICES": "0"}
    assert s.device_targets == ("gfx1103",)


def test_rdna2_gets_native_kernels_and_the_override_only_on_a_source_without_them(profiles):
    s = select(hw(amd("gfx1031", "AMD Radeon RX 6700 XT")), profiles)
    assert s.profile.name == "rocm" and s.torch.id == "amd-multiarch" and s.env == {}
    assert s.required_arch == "gfx1031" and not s.warnings
    assert s.trainer.precision == "fp32"  # RDNA2 has no bf16 matrix units
    forced = select(hw(amd("gfx1031", "AMD Radeon RX 6700 XT")), profiles, source="rocm7.2")
    assert forced.env["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0" and forced.required_arch == "gfx1030"
    assert any("hang" in w for w in forced.warnings)


def test_gfx1152_gets_the_multi_arch_wheel_not_the_retired_per_arch_one(profiles):
    s = select(hw(amd("gfx1152", "AMD Radeon 860M")), profiles)
    assert s.profile.name == "rocm" and s.torch.id == "amd-multiarch" and s.env == {}


def test_arch_without_wheel_or_safe_override_falls_back_to_cpu(profiles):
    s = select(hw(amd("gfx1033", "AMD Custom GPU 0405")), profiles)
    assert s.profile.name == "cpu"
    assert "gfx1033" in s.reason and "--profile rocm" in s.reason
    forced = select(hw(amd("gfx1033", "AMD Custom GPU 0405")), profiles, name="rocm")
    assert forced.profile.name == "rocm" and forced.explicit
    # AMD's multi-arch index has gfx1033 kernels, but the profile excludes it: forced, it says why.
    assert any("excludes gfx1033" in w and "wrong results" in w for w in forced.warnings)
    assert "HSA_OVERRIDE_GFX_VERSION" not in forced.env


@pytest.mark.parametrize(
    ("cc", "driver", "source", "precision"),
    [
        ("6.1", "580.82.07", "cu126", "fp32"),  # Pascal: no bf16, cu126 only
        ("12.0", "580.65.06", "cu132", "bf16"),  # CUDA 13.x: one driver floor (580) for 13.0 and 13.2
        ("8.6", "560.35.03", "cu126", "bf16"),
    ],
)
def test_nvidia(profiles, cc, driver, source, precision):
    s = select(
        hw(nv(cc, "NVIDIA GeForce GTX 1080 Ti" if cc == "6.1" else "NVIDIA GPU"), driver=driver), profiles
    )
    assert s.profile.name == "cuda" and s.torch.id == source, s.reason
    assert s.required_arch == f"sm_{cc.replace('.', '')}" and s.trainer.precision == precision
    assert s.env == {}


def test_nvidia_without_a_fitting_wheel_falls_back_to_cpu_with_a_driver_hint(profiles):
    s = select(hw(nv("7.0", "Tesla V100"), driver="418.67"), profiles)
    assert s.profile.name == "cpu"
    assert "no CUDA torch wheel fits driver 418.67" in s.reason and "525.60.13" in s.reason
    forced = select(hw(nv("7.0", "Tesla V100"), driver="418.67"), profiles, name="cuda")
    assert forced.profile.name == "cuda" and forced.torch.id == "cu126" and forced.warnings


def test_a_driver_older_than_525_gets_the_cpu_build_and_says_how_to_force_cu118(profiles):
    # Was cu118 (torch 2.7). cu118's arch list for 2.5-2.7 is inferred (issue 40: an inferred fact never decides a
    # default), so the automatic choice is the CPU build; `--source cu118` still installs it.
    s = select(hw(nv("7.5", "Tesla T4"), driver="470.82.01"), profiles)
    assert s.profile.name == "cpu"
    assert "cu118: its arch_list is inferred" in s.reason and "525.60.13" in s.reason
    forced = select(hw(nv("7.5", "Tesla T4"), driver="470.82.01"), profiles, name="cuda", source="cu118")
    assert forced.torch.id == "cu118" and forced.torch.version == ">=2.5,<2.8"


def test_forced_cuda_without_gpu_uses_the_broadest_source(profiles):
    s = select(Hardware(), profiles, name="cuda")
    assert s.torch.id == "cu126" and s.explicit and "no NVIDIA GPU visible" in s.reason


def test_forced_cpu_on_a_gpu_box_warns(profiles):
    s = select(hw(nv("8.6"), driver="560.35.03"), profiles, name="cpu")
    assert s.profile.name == "cpu" and any("ignores the NVIDIA GPU" in w for w in s.warnings)


def test_intel_gpu_is_cpu(profiles):
    s = select(hw(Gpu(index=0, vendor="intel", name="Intel Arc A770")), profiles)
    assert s.profile.name == "cpu" and "intel" in s.reason


def test_unknown_names_are_input_errors_listing_choices(profiles):
    with pytest.raises(InputError, match="known profiles: cpu, cuda, gfx1103, gfx1151, rocm"):
        select(Hardware(), profiles, name="gfx9000")
    with pytest.raises(
        InputError, match=r"its sources: amd-multiarch, rocm7\.14, amd-multiarch-nightly, rocm6"
    ):
        select(hw(amd("gfx1103")), profiles, source="rocm7.2")


def test_user_cpu_profile_with_higher_priority_wins_on_cpu(profiles):
    user = load_profiles(extra_dirs=[USER], env={})
    assert select(Hardware(), user).profile.name == "lab-cpu"


def test_arch_supported_matches_what_torch_reports(profiles):
    s = select(hw(amd("gfx1103", "AMD Radeon 780M")), profiles, source="rocm6.4")  # the override: gfx1100
    assert s.arch_supported(["gfx90a", "gfx1100"]) and not s.arch_supported(["gfx1030", "gfx1101"])
    n = select(hw(nv("6.1"), driver="580.82.07"), profiles)
    assert n.arch_supported(["sm_50", "sm_60", "sm_70"]) and not n.arch_supported(["sm_75", "sm_80"])
    assert select(Hardware(), profiles).arch_supported([])


def test_expected_tflops_per_gpu_name(profiles):
    s = select(hw(nv("8.9", "NVIDIA L4"), driver="550.90.07"), profiles)
    assert s.expected_tflops["bf16"] == 60.0
    s = select(hw(nv("8.9", "NVIDIA L40S"), driver="550.90.07"), profiles)
    assert s.expected_tflops == {}  # "L4" must not match an L40S


def test_selection_to_dict_is_json(profiles):
    data = json.loads(json.dumps(select(hw(amd("gfx1103")), profiles).to_dict()))
    assert data["torch"]["index_url"].endswith("whl-multi-arch/") and data["env"] == {}
    assert data["device_targets"] == ["gfx1103"] and data["torch"]["device_packages"] == [
        "amd-torch-device-gfx1103"
    ]


@pytest.mark.parametrize(
    ("name", "source", "env"),
    [
        ("gfx1103", "rocm6.4", {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}),  # a forced wheel without gfx1103
        ("gfx1103", None, {}),  # native gfx1103 kernels: no override
        ("gfx1151", None, {}),  # native kernels: never an override
    ],
)
def test_forced_profile_without_a_gpu_gets_its_targets_env(profiles, name, source, env):
    # `docker build` sees no GPU: the image must still carry the env its target GPU needs.
    s = select(Hardware(selection_reason="no GPU detected"), profiles, name=name, source=source)
    assert dict(s.env) == env
    assert f"no AMD GPU visible: the env is derived for the profile's target {name}" in s.reason
    assert not any("gfx target is unknown" in w for w in s.warnings)


def test_forced_wildcard_profile_without_a_gpu_derives_nothing(profiles):
    s = select(Hardware(), profiles, name="rocm")
    assert s.env == {} and s.required_arch is None and "derived" not in s.reason


def test_forced_profile_on_another_amd_gpu_keeps_that_gpus_arch(profiles):
    s = select(hw(amd("gfx1100", "AMD Radeon RX 7900 XTX")), profiles, name="gfx1103")
    assert "HSA_OVERRIDE_GFX_VERSION" not in s.env and s.required_arch == "gfx1100"
