"""The torch source catalogue (profiles/sources.yaml, profiles/torchsources.py): every index described once,
profiles naming ids; what the loaded profiles carry is what they carried before (whole TorchSource objects)."""

from __future__ import annotations

import re

import pytest

from mw_env.base.errors import InputError
from mw_env.profiles import load_profiles
from mw_env.profiles.loader import SHIPPED_DIR, load_profile_file
from mw_env.profiles.torchsources import SHIPPED, load, read_file

CPU_ENTRY = """  - id: cpu
    build: cpu
    index_url: https://download.pytorch.org/whl/cpu
    version: ">=2.9,<2.15"
    local_tag: "+cpu"
"""


def _profile(folder, sources: str, name: str = "mine") -> None:
    (folder / f"{name}.yaml").write_text(
        f"name: {name}\nmatch: {{vendor: null, priority: 0}}\nsources:\n{sources}"
        "doctor: {device_nodes: []}\ntrainer: {device: cpu, precision: fp32}\nhost: {kind: none}\n"
    )


def test_the_shipped_catalogue_describes_each_index_once_and_every_shipped_profile_names_only_ids():
    entries = read_file(SHIPPED, shipped=True)  # raises on an id described twice
    ids = re.findall(r"^  - id: (\S+)$", SHIPPED.read_text(), flags=re.M)
    assert sorted(ids) == sorted(entries) and len(ids) == len(set(ids))
    urls = [e["index_url"] for e, _ in entries.values()]
    assert len(urls) == len(set(urls)), "an index URL in two entries"
    named: set[str] = set()
    for path in SHIPPED_DIR.glob("*.yaml"):
        if path.name == SHIPPED.name:
            continue
        block = path.read_text().split("\nsources:\n", 1)[1]
        # Only `- id`, `- {id: X, default: true}`, or an id with a note of the profile's own.
        for line in block.splitlines():
            if not line.startswith((" ", "#")) or not line.strip():
                break
            assert not re.match(r"^\s+(index_url|build|version|local_tag|arch_list):", line), (path, line)
        named |= {s.id for s in load_profile_file(path, shipped=True).sources}
    assert named == set(entries), "a catalogue entry no profile names, or the reverse"


def test_every_amd_and_pytorch_org_index_answers_403_for_what_it_does_not_hold():
    for entry, _ in load().values():
        host = re.sub(r"^https?://([^/]+)/.*$", r"\1", str(entry["index_url"]))
        if host.endswith(("amd.com", "pytorch.org")):
            assert entry.get("unserved") == 403, entry["id"]
        assert "torch" in entry["serves"], entry["id"]  # type: ignore[operator]


def test_a_source_described_twice_in_a_catalogue_is_refused(tmp_path):
    path = tmp_path / "sources.yaml"
    path.write_text("sources:\n" + CPU_ENTRY + CPU_ENTRY.replace("whl/cpu", "whl/cpu-mirror"))
    with pytest.raises(InputError) as err:
        read_file(path)
    assert f"source catalogue {path}: sources[1]: source 'cpu' is described twice (also sources[0])" in str(
        err.value.message
    )
    assert "describe each index once" in (err.value.hint or "")


def test_a_profile_naming_an_id_the_catalogue_lacks_is_refused_with_the_close_ids(tmp_path):
    _profile(tmp_path, "  - {id: amd-multiarc, default: true}\n")
    with pytest.raises(InputError) as err:
        load_profiles(extra_dirs=[tmp_path], env={})
    assert "sources[0]: unknown source id 'amd-multiarc'" in err.value.message
    assert "did you mean amd-multiarch" in (err.value.hint or "")


def test_a_shipped_profile_that_describes_a_source_itself_is_refused(tmp_path):
    _profile(tmp_path, CPU_ENTRY)
    with pytest.raises(InputError) as err:
        load_profile_file(tmp_path / "mine.yaml", shipped=True)
    assert "source 'cpu' is described in a shipped profile and in the source catalogue" in err.value.message


def test_a_catalogue_entry_is_checked_like_a_source(tmp_path):
    (tmp_path / "sources.yaml").write_text("sources:\n" + CPU_ENTRY.replace('"+cpu"', '"+cu126"'))
    with pytest.raises(InputError) as err:
        load_profiles(extra_dirs=[tmp_path], env={})
    assert f"source catalogue {tmp_path / 'sources.yaml'}: sources[0].local_tag" in err.value.message


def test_a_users_catalogue_adds_an_index_and_points_a_shipped_one_at_a_mirror(tmp_path):
    mirror = SHIPPED.read_text().replace(
        "https://repo.amd.com/rocm/whl-multi-arch/", "https://mirror.lan/amd/"
    )
    (tmp_path / "sources.yaml").write_text(mirror)
    _profile(tmp_path, "  - {id: cpu, default: true}\n  - amd-multiarch\n")
    profiles = load_profiles(extra_dirs=[tmp_path], env={})
    assert (
        profiles["gfx1103"].default_source.index_url == "https://mirror.lan/amd/"
    )  # every profile naming it
    assert [s.id for s in profiles["mine"].sources] == ["cpu", "amd-multiarch"]
    assert profiles["mine"].default_source.id == "cpu" and "sources" not in {
        p.name for p in profiles.values()
    }


def test_a_profile_keeps_its_own_default_and_note_and_the_loaded_api_is_whole():
    profiles = load_profiles(env={})
    gfx1103, rocm = profiles["gfx1103"].source("rocm6.4"), profiles["rocm"].source("rocm6.4")
    assert gfx1103 is not None and rocm is not None
    assert "without gfx1103 kernels" in gfx1103.note and "without gfx1103" not in rocm.note
    assert gfx1103.arch_list == rocm.arch_list and gfx1103.index_url == rocm.index_url
    assert profiles["gfx1103"].default_source.id == "amd-multiarch"
    assert profiles["cuda"].default_source.id == "cu126"
    multi = profiles["gfx1151"].default_source
    assert multi.devices is not None and multi.devices.extra == "device-{gfx}" and multi.unserved == 403


def test_the_docs_table_is_the_catalogue():
    from pathlib import Path

    from mw_env.profiles.torchsources import markdown_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "profiles.md").read_text()
    shown = doc.split("<!-- catalogue:begin (generated from sources.yaml) -->\n", 1)[1].split(
        "<!-- catalogue:end"
    )[0]
    assert shown == markdown_table(), "regenerate the table in docs/profiles.md (the command is above it)"


# -- facts with their evidence (issue 40) and public sources only (issue 39) --------------------------------------

_REQUIRED_FACTS = ("version", "local_tag")


def _shipped_sources():
    return [(sid, e) for sid, (e, _path) in load().items()]


def test_every_fact_of_every_shipped_source_has_evidence_or_is_marked_inferred():
    for sid, entry in _shipped_sources():
        evidence, inferred = entry.get("evidence") or {}, entry.get("inferred") or {}
        facts = list(_REQUIRED_FACTS)
        if entry["build"] != "cpu":
            facts.append("arch_list")
        facts += [f for f in ("download_gb", "installed_gb") if entry.get(f) is not None]
        for fact in facts:
            assert fact in evidence or fact in inferred, (
                f"{sid}: {fact} cites no source and is not marked inferred"
            )


def test_shipped_profiles_and_sources_cite_public_urls_only():
    url = re.compile(r"https://\S+")
    for sid, entry in _shipped_sources():
        cited = [
            *(entry.get("refs") or []),
            *(u for urls in (entry.get("evidence") or {}).values() for u in urls),
        ]
        assert cited, f"{sid}: no source at all"
        for ref in cited:
            assert url.fullmatch(ref), f"source {sid}: {ref!r} is not a public URL"
    for profile in load_profiles(env={}).values():
        assert profile.refs, profile.name
        for ref in profile.refs:
            assert url.fullmatch(ref), f"profile {profile.name}: {ref!r} is not a public URL"
        assert "/work/" not in profile.path.read_text() if profile.path else True


def test_rocm714_does_not_claim_gfx1103_and_its_arch_list_is_marked_inferred():
    # It listed gfx1103 "inferred from pytorch#179653 (added to the wheel arch list in April 2026)": that PR was
    # closed, not merged, and unsloth#9829 (2026-08-31) found gfx1103 in no release branch's build.sh.
    entry = load()["rocm7.14"][0]
    assert "gfx1103" not in entry["arch_list"]
    assert "unsloth#9829" in entry["inferred"]["arch_list"]  # type: ignore[index]
    assert "179653" not in str(entry["note"])


def test_a_default_source_resting_on_an_inferred_fact_is_refused(tmp_path):
    (tmp_path / "sources.yaml").write_text(
        "sources:\n" + CPU_ENTRY + '    inferred: {version: "no listing read"}\n'
    )
    _profile(tmp_path, "  - {id: cpu, default: true}\n")
    with pytest.raises(InputError) as err:
        load_profiles(extra_dirs=[tmp_path], env={})
    assert "an inferred fact never decides a default" in err.value.message and "version" in err.value.message


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("    evidence: {arch_list: [/work/shared/research/x.md]}\n", "is not an http(s) URL"),
        ("    evidence: {colour: [https://example.org]}\n", "colour"),
        ('    inferred: {version: ""}\n', "say why it is inferred"),
    ],
)
def test_evidence_and_inferred_are_checked(tmp_path, extra, needle):
    (tmp_path / "sources.yaml").write_text("sources:\n" + CPU_ENTRY + extra)
    with pytest.raises(InputError) as err:
        load_profiles(extra_dirs=[tmp_path], env={})
    assert needle in err.value.message + (err.value.hint or "")
