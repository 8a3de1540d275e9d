"""NVIDIA source choice: driver version AND compute capability (install-anchors b4, b5)."""

from __future__ import annotations

import pytest

from mw_env.base.versions import version_tuple
from mw_env.profiles import load_profiles
from mw_env.profiles.cuda import choose_cuda_source, covers, minimum_driver_hint, parse_cc


@pytest.fixture(scope="module")
def sources():
    return load_profiles(env={})["cuda"].sources


@pytest.mark.parametrize(
    ("text", "cc"),
    [
        ("8.6", (8, 6)),
        ("12.0", (12, 0)),
        ("sm_86", (8, 6)),
        ("sm_120", (12, 0)),
        ("90", (9, 0)),
        ("", None),
        ("x", None),
    ],
)
def test_parse_cc(text, cc):
    assert parse_cc(text) == cc


def test_version_tuple():
    assert version_tuple("550.144.03") == (550, 144, 3)
    assert version_tuple("580") == (580,)
    assert version_tuple("6.8.0-45-generic") == (6, 8, 0) and version_tuple("6.2.41133-abc") == (6, 2, 41133)
    assert version_tuple("N/A") == () and version_tuple(None) == ()


def test_cuda_binary_compatibility_rules():
    assert covers(["sm_60"], (6, 1))  # same major, lower minor
    assert covers(["sm_86"], (8, 9))  # Ada runs Ampere SASS
    assert not covers(["sm_86"], (8, 0))  # never a higher minor
    assert not covers(["sm_75", "sm_90"], (6, 1))
    assert not covers(["sm_90"], (12, 0))  # no PTX: Blackwell cannot JIT
    assert covers(["sm_90"], (12, 0), ptx=True)
    assert not covers(["sm_90"], (8, 6), ptx=True)  # PTX only serves newer GPUs


@pytest.mark.parametrize(
    ("driver", "ccs", "expected"),
    [
        ("580.82.07", ["6.1"], "cu126"),  # Pascal: cu13x have no sm_6x, newest torch on cu126
        ("535.183.01", ["6.1"], "cu126"),
        ("580.65.06", ["12.0"], "cu132"),  # Blackwell: cu126 lacks sm_120; 580 runs every CUDA 13.x
        ("575.51.03", ["12.0"], "cu128"),  # below 580: cu128 is the newest that runs
        ("596.10", ["8.6"], "cu132"),  # equal torch: newest CUDA the driver runs
        ("560.35.03", ["8.6", "8.6"], "cu126"),  # captures/nvidia-rtx3090x2-560
        ("555.42.02", ["8.0"], "cu126"),  # captures/nvidia-a100sxm-x4-555
        ("565.57.01", ["9.0"], "cu126"),  # captures/nvidia-h100sxm-x8-565
        ("550.90.07", ["8.9"], "cu126"),  # captures/nvidia-l4-550
        ("580.82.07", ["6.1", "8.6"], "cu126"),  # mixed box: the wheel must cover every GPU
    ],
)
def test_choice(sources, driver, ccs, expected):
    choice = choose_cuda_source(sources, driver=driver, capabilities=ccs)
    assert choice.source is not None, choice.reason
    assert choice.source.id == expected, choice.reason
    assert expected in choice.reason and driver in choice.reason


def test_an_old_driver_gets_no_source_whose_arch_list_is_inferred(sources):
    # cu118 (torch <= 2.7) is the only index a driver older than 525 runs, but no source read shows 2.7's cu118 arch
    # list (pytorch#95648 shows torch 2.0's): an inferred fact never decides, so only `--source cu118` installs it.
    cu118 = next(s for s in sources if s.id == "cu118")
    assert "arch_list" in cu118.inferred and cu118.version == ">=2.5,<2.8"
    choice = choose_cuda_source(sources, driver="470.82.01", capabilities=["7.5"])
    assert choice.source is None
    assert (
        "cu118: its arch_list is inferred" in choice.reason
        and "cu126: needs driver >= 525.60.13" in choice.reason
    )


@pytest.mark.parametrize(
    ("driver", "ccs", "why"), [("418.67", ["7.0"], "needs driver"), ("580.82.07", ["3.7"], "sm_37")]
)
def test_no_wheel_fits_says_why(sources, driver, ccs, why):
    choice = choose_cuda_source(sources, driver=driver, capabilities=ccs)
    assert choice.source is None
    assert "no CUDA torch wheel fits" in choice.reason and why in choice.reason


def test_unknown_driver_prefers_the_oldest_cuda_among_newest_torch(sources):
    choice = choose_cuda_source(sources, driver=None, capabilities=["8.6"])
    assert choice.source.id == "cu126"
    assert "driver version unknown" in choice.reason


def test_unknown_cc_is_said(sources):
    choice = choose_cuda_source(sources, driver="560.35.03", capabilities=[None])
    assert choice.source.id == "cu126" and "compute capability unknown" in choice.reason


def test_minimum_driver_hint(sources):
    # cu118's arch list is inferred, so the hint names the lowest driver of a source a source shows.
    assert minimum_driver_hint(sources, ["7.0"]).startswith("525.60.13")
    assert minimum_driver_hint(sources, ["12.0"]).startswith("570.26")
    assert minimum_driver_hint(sources, ["3.7"]) is None
