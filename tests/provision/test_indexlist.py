"""Truth from the index: a project's files as a loopback index lists them (PEP 691 JSON with sizes, PEP 503 HTML,
a file:// folder, a wheelhouse), and every bad answer a real server gives, as an error naming what it got."""

from __future__ import annotations

import pytest

from indexserver import serve
from mw_env.sources.indexlist import IndexAnswerError, list_project
from wheelfactory import build_wheel, fake_torch, simple_index

LINUX = {"abi_tag": "cp312", "platform_tag": "manylinux_2_28_x86_64"}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    base = tmp_path_factory.mktemp("idx")
    dist = base / "dist"
    wheels = [
        fake_torch(dist, "2.14.0+rocm7.14.0", hip="7.14", python_tag="cp312", **LINUX),
        fake_torch(dist, "2.13.0+rocm7.14.0", hip="7.14", python_tag="cp312", **LINUX),
        fake_torch(
            dist,
            "2.14.0+rocm7.14.0",
            hip="7.14",
            python_tag="cp311",
            abi_tag="cp311",
            platform_tag="manylinux_2_28_x86_64",
        ),
        fake_torch(
            dist,
            "2.14.0+rocm7.14.0",
            hip="7.14",
            python_tag="cp312",
            abi_tag="cp312",
            platform_tag="manylinux_2_28_aarch64",
        ),
        build_wheel(dist, "amd-torch-device-gfx1103", "2.14.0+rocm7.14.0"),
    ]
    return simple_index(base / "simple", wheels), wheels


def test_json_listing_has_versions_for_this_python_and_platform_and_sizes(index):
    root, wheels = index
    with serve({"simple": root}) as srv:
        listing = list_project(srv.url("simple"), "Torch")
    assert listing.format == "json" and listing.project == "torch"
    assert listing.versions("3.12", "x86_64") == ["2.14.0+rocm7.14.0", "2.13.0+rocm7.14.0"]
    assert listing.versions("3.11", "x86_64") == ["2.14.0+rocm7.14.0"]
    assert listing.versions("3.13", "x86_64") == []
    assert listing.pythons() == ["cp311", "cp312"]
    newest = listing.matching("3.12", "x86_64")[0]
    assert newest.size == wheels[0].stat().st_size and newest.url.startswith("http://127.0.0.1:")


def test_html_listing_from_a_local_index_folder(index):
    root, wheels = index
    for where in (str(root), root.as_uri()):
        listing = list_project(where, "amd_torch_device_gfx1103")
        assert listing.format == "html" and listing.versions() == ["2.14.0+rocm7.14.0"]
        assert listing.files[0].size == wheels[-1].stat().st_size  # a local file states its size


@pytest.mark.parametrize(
    ("name", "reason", "needle"),
    [
        ("garbage", "garbage", "an HTML page without links"),
        ("loop", "redirect", "redirects in a loop"),
        ("forbidden", "missing", "has no project 'torch' (HTTP 403)"),
        ("nowhere", "missing", "has no project 'torch' (HTTP 404)"),
    ],
)
def test_bad_answers_are_named(index, name, reason, needle):
    root, _ = index
    with serve({"simple": root}) as srv, pytest.raises(IndexAnswerError) as err:
        list_project(srv.url(name), "torch", timeout=10)
    assert err.value.reason == reason and needle in err.value.message and err.value.hint
    assert "Traceback" not in err.value.message


def test_a_server_that_never_answers_is_a_timeout(index):
    root, _ = index
    with serve({"simple": root}) as srv:
        with pytest.raises(IndexAnswerError) as err:
            list_project(srv.url("hang"), "torch", timeout=0.5)
        assert srv.hung.is_set()  # the request did reach the server: this is the timeout, not a refusal
    assert err.value.reason == "timeout" and "no reply within 0.5s" in err.value.message


def test_a_missing_project_in_a_local_index(index):
    root, _ = index
    with pytest.raises(IndexAnswerError, match="has no project 'numpy'") as err:
        list_project(str(root), "numpy")
    assert err.value.reason == "missing"


def test_credentials_in_the_url_are_sent_and_their_absence_named(index):
    root, _ = index
    with serve({"simple": root}) as srv:
        authed = srv.url("private").replace("http://", "http://u:t@")
        assert list_project(authed, "torch").versions("3.12", "x86_64")[0] == "2.14.0+rocm7.14.0"
        with pytest.raises(IndexAnswerError) as err:
            list_project(srv.url("private"), "torch")
    assert err.value.reason == "auth" and "wants credentials" in err.value.message
