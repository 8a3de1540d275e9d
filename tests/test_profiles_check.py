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


# -- inferred facts, confirmed where the index can show them (issue 40) ------------------------------------------


def _wheel(path: Path, members: list[str]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        for name in members:
            zf.writestr(name, b"")
    return path


def _snapshot_with_wheel(tmp_path: Path, source: str, version: str, members: list[str]) -> Path:
    snaps = shutil.copytree(SNAPSHOTS, tmp_path / "indexes")
    links = []
    for py in (
        "cp310",
        "cp311",
        "cp312",
        "cp313",
        "cp314",
    ):  # every Python the row lists: only the archs differ
        name = f"torch-{version}-{py}-{py}-manylinux_2_28_x86_64.whl"
        _wheel(snaps / source / "torch" / name, members)
        links.append(f'<a href="{name}">{name}</a>')
    (snaps / source / "torch" / "index.html").write_text(f"<html><body>{''.join(links)}</body></html>\n")
    return snaps


def test_an_inferred_arch_list_that_no_index_can_show_is_reported_not_confirmed(tmp_path, capsys):
    # rocm7.14's torch bundles no per-arch files (its kernels are in libtorch_hip.so): nothing to read them from.
    snaps = _snapshot_with_wheel(
        tmp_path, "rocm7.14", "2.14.0+rocm7.14", ["torch/__init__.py", "torch/lib/libtorch_hip.so"]
    )
    code, data = _check(capsys, "--snapshots", str(snaps), "gfx1103")
    row = _by(data, "gfx1103", "rocm7.14")
    assert code == 0 and row["status"] == "fresh"
    assert row["inferred"] == [
        "arch_list is inferred and not confirmed: torch 2.14.0+rocm7.14's wheel carries no per-arch library files "
        "(its kernels are inside libtorch_hip.so; the installed wheel's arch list decides)"
    ]
    assert main(["profiles", "--check", "--snapshots", str(snaps), "gfx1103"]) == 0
    assert "inferred arch_list is inferred and not confirmed" in capsys.readouterr().out


def _doubted_rocm72(tmp_path: Path) -> Path:
    """A user catalogue whose rocm7.2 row marks its arch list inferred (as a new row would)."""
    from mw_env.profiles.torchsources import SHIPPED

    mine = tmp_path / "profiles"
    mine.mkdir()
    text = SHIPPED.read_text().replace(
        '    note: "Upstream ROCm 7.2 wheels',
        '    inferred: {arch_list: "not read"}\n    note: "Upstream ROCm 7.2 wheels',
    )
    (mine / "sources.yaml").write_text(text)
    return mine


@pytest.mark.parametrize(
    ("archs", "status", "said"),
    [
        (
            [
                "gfx900",
                "gfx906",
                "gfx908",
                "gfx90a",
                "gfx942",
                "gfx950",
                "gfx1030",
                "gfx1100",
                "gfx1101",
                "gfx1102",
                "gfx1150",
                "gfx1151",
                "gfx1200",
                "gfx1201",
            ],
            "fresh",
            "arch_list confirmed by torch 2.13.0+rocm7.2's own files",
        ),
        (["gfx1030", "gfx1100", "gfx1103"], "stale", "the wheel also has gfx1103; the wheel lacks gfx1101"),
    ],
)
def test_an_inferred_arch_list_is_confirmed_or_contradicted_by_the_wheels_own_files(
    tmp_path, capsys, archs, status, said
):
    members = [f"torch/lib/rocblas/library/TensileLibrary_lazy_{g}.dat" for g in archs]
    members += [f"torch/lib/hipblaslt/library/{g}/TensileLibrary_lazy_{g}.dat.zlib" for g in archs[:1]]
    snaps = _snapshot_with_wheel(
        tmp_path, "rocm7.2", "2.13.0+rocm7.2", ["torch/lib/libtorch_hip.so", *members]
    )
    code, data = _check(
        capsys, "--snapshots", str(snaps), "--profiles-dir", str(_doubted_rocm72(tmp_path)), "gfx1151"
    )
    row = _by(data, "gfx1151", "rocm7.2")
    assert row["status"] == status and said in row["inferred"][0]
    assert code == (1 if status == "stale" else 0)


def test_a_wheels_file_list_is_read_over_http_without_downloading_it(tmp_path):
    import http.server
    import threading

    from mw_env.sources.wheelfiles import archs_in, wheel_names

    # A wheel with a large member: the directory at its end is read by range, not the whole file.
    big = tmp_path / "torch-2.13.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl"
    import zipfile

    with zipfile.ZipFile(big, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("torch/lib/libtorch_hip.so", b"\0" * (4 * 1024 * 1024))
        zf.writestr("torch/lib/rocblas/library/TensileLibrary_lazy_gfx1151.dat", b"")
    data = big.read_bytes()
    served: list[int] = []

    class Ranges(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            first, last = (int(x) for x in self.headers["Range"].split("=")[1].split("-"))
            chunk = data[first : last + 1]
            served.append(len(chunk))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
            self.send_header("Content-Length", str(len(chunk)))
            self.end_headers()
            self.wfile.write(chunk)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ranges)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        names = wheel_names(f"http://127.0.0.1:{server.server_port}/{big.name}", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert archs_in(names) == ("gfx1151",)
    assert sum(served) < len(data) // 4  # the end of the file, not the 4 MB member
