"""Truth from the index before installing: the newest listed torch of the source's build inside the profile's range,
for this Python; a pin the index no longer has said plainly with the nearest versions it does have."""

from __future__ import annotations

import pytest

from mw_env.provision.torchpick import pick_from_listing
from mw_env.sources.indexlist import list_project
from wheelfactory import fake_torch, simple_index


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    base = tmp_path_factory.mktemp("pick")
    wheels = [
        fake_torch(
            base / "d",
            v,
            hip="6.4",
            python_tag="cp312",
            abi_tag="cp312",
            platform_tag="manylinux_2_28_x86_64",
        )
        for v in ("2.8.0+rocm6.4", "2.9.0+rocm6.4", "2.9.1+rocm6.4", "2.10.0+rocm7.0")
    ]
    return list_project(str(simple_index(base / "idx", wheels)), "torch")


def test_the_newest_in_range_for_this_python_is_pinned_exactly(listing):
    pick = pick_from_listing(listing, version_spec=">=2.8,<2.10", local_tag="+rocm6.4", python="3.12")
    assert pick.version == "2.9.1+rocm6.4" and pick.problem is None
    assert pick.listed == ("2.9.1+rocm6.4", "2.9.0+rocm6.4", "2.8.0+rocm6.4")  # +rocm7.0 is another build
    assert "it also lists 2.9.0+rocm6.4, 2.8.0+rocm6.4" in pick.note and pick.download_bytes


def test_a_pin_the_index_no_longer_has_names_the_nearest(listing):
    pick = pick_from_listing(listing, version_spec="==2.9.2", local_tag="+rocm6.4", python="3.12")
    assert pick.version is None
    assert "has no torch ==2.9.2+rocm6.4: it lists 2.9.1+rocm6.4" in pick.problem
    assert pick.hint.startswith("the nearest the index has is 2.9.1+rocm6.4")


def test_no_wheel_for_this_python_says_which_pythons_have_one(listing):
    pick = pick_from_listing(listing, version_spec=">=2.8", local_tag="+rocm6.4", python="3.13")
    assert pick.version is None and "lists no torch+rocm6.4 wheel" in pick.problem
    assert "cp312" in pick.problem and "--python" in pick.hint
