"""`mw-env profiles --check`: the tables compared with recorded index snapshots (tests/fixtures/indexes), a stale
row found and named, and the live indexes when they answer (skipped cleanly when they do not)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mw_env.cli import main

SNAPSHOTS = Path(__file__).parent / "fixtures" / "indexes"


def _check(capsys, *args: str) -> tuple[int, dict]:
    code = main(["profiles", "--check", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def _by(data: dict, profile: str, source: str) -> dict:
    return next(s for s in data["sources"] if profile in s["profiles"] and s["source"] == source)


def test_recorded_snapshots_match_the_shipped_tables(capsys):
    code, data = _check(capsys, "--snapshots", str(SNAPSHOTS))
    assert code == 0 and data["ok"], [s for s in data["sources"] if s["status"] == "stale"]
    multi = _by(data, "gfx1103", "amd-multiarch")
    assert multi["status"] == "fresh" and multi["versions"][0] == "2.14.0+rocm7.14.0"
    assert _by(data, "cuda", "cu132")["status"] == "fresh"
    # A source without a snapshot is "not checked", never a failure.
    assert _by(data, "gfx1103", "amd-multiarch-nightly")["status"] == "not checked"


def _add(snap: Path, project: str, names: list[str]) -> None:
    page = snap / project / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    old = page.read_text() if page.exists() else "<html><body>\n</body></html>\n"
    links = "".join(f'<a href="x/{n}">{n}</a>\n' for n in names)
    page.write_text(old.replace("</body>", links + "</body>"))


def test_a_stale_row_in_a_snapshot_is_found_and_named(tmp_path, capsys):
    snaps = shutil.copytree(SNAPSHOTS, tmp_path / "indexes")
    multi = snaps / "amd-multiarch"
    _add(multi, "torch", ["torch-2.15.0+rocm7.14.0-cp315-cp315-manylinux_2_28_x86_64.whl"])
    _add(multi, "", ["amd-torch-device-gfx1250"])  # the root page: a new arch's device package
    rocm64 = snaps / "rocm6.4" / "torch" / "index.html"
    rocm64.write_text(
        rocm64.read_text().replace("2.9.1+rocm6.4", "2.9.0+rocm6.4")
    )  # the pinned release is gone
    code, data = _check(capsys, "--snapshots", str(snaps), "gfx1103")
    assert code == 1 and not data["ok"]
    findings = " | ".join(_by(data, "gfx1103", "amd-multiarch")["findings"])
    assert "the index has torch 2.15.0, newer than the row's newest_torch 2.14 (outside its range" in findings
    assert "device packages for gfx1250, missing from arch_list" in findings
    assert "also has wheels for cp315" in findings
    gone = _by(data, "gfx1103", "rocm6.4")
    assert gone["status"] == "stale" and "no torch in the row's range ==2.9.1" in gone["findings"][0]
    # The human report names the same rows.
    assert main(["profiles", "--check", "--snapshots", str(snaps), "gfx1103"]) == 1
    out = capsys.readouterr().out
    assert "stale amd-multiarch (gfx1103)" in out and "stale rocm6.4 (gfx1103)" in out


def test_a_source_named_by_several_profiles_is_checked_once(capsys):
    _code, data = _check(capsys, "--snapshots", str(SNAPSHOTS))
    rows = [s for s in data["sources"] if s["source"] == "amd-multiarch"]
    assert len(rows) == 1 and rows[0]["profiles"] == ["gfx1103", "gfx1151", "rocm"]


def test_an_unknown_profile_is_bad_input(capsys):
    assert main(["profiles", "--check", "--snapshots", str(SNAPSHOTS), "gfx9999"]) == 2
    assert "unknown profile 'gfx9999'" in capsys.readouterr().err


@pytest.mark.slow
def test_live_indexes_when_they_answer(capsys):
    code, data = _check(capsys, "--timeout", "3", "gfx1151")
    checked = [s for s in data["sources"] if s["status"] != "not checked"]
    if not checked:
        pytest.skip("no index answered from this machine")
    assert code in (0, 1) and all(s["status"] in ("fresh", "stale") for s in checked)
