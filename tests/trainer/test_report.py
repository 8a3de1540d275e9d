"""Run report and manifest (no torch needed): files, PNG validity, verify catching every change."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from mw_env.cli import main
from mw_env.errors import InputError
from mw_env.runs.manifest import MANIFEST, add_to_manifest, verify_manifest, write_manifest
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.report import png_line_chart, write_report
from mw_env.trainspec.config import find_config, resolve_config

CARD = {
    "rows": {"train": 10, "val": 2},
    "tag_distribution": {"train": {"B-street": 10}, "val": {"B-street": 2}},
    "truncated_words": 0,
    "sources": [{"kind": "synthetic", "seed": 1}],
    "tokenizer": "byte",
    "labels": ["O", "B-street"],
}


def _png_size(data: bytes) -> tuple[int, int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, len(zlib.decompress(idat))


def test_png_is_valid() -> None:
    w, h, raw = _png_size(png_line_chart([(1, 3.0), (2, 2.5), (3, 2.0)]))
    assert raw == h * (1 + 3 * w)
    assert _png_size(png_line_chart([]))[:2] == (w, h)  # an empty series still draws the axes


def _fake_run(run: Path) -> Path:
    m = MetricsWriter(run)
    for s in range(1, 6):
        m.log("step", step=s, loss=3.0 - 0.1 * s, lr=1e-3, grad_norm=1.0, tokens_per_s=100.0)
    m.log("eval", step=5, loss=2.0, token_acc=0.7, entity_f1=0.6, samples=["[12]house_number [Oak St]street"])
    m.log("step", step=5, loss=float("nan"), lr=1e-3, grad_norm=float("inf"), tokens_per_s=1.0)
    m.log("finished", step=5, reason="max_steps")
    m.close()
    doctor = run / "doctor.json"
    doctor.write_text(json.dumps({"profile": "cpu", "ok": True, "checks": []}))
    resolved = resolve_config(path=find_config("smoke"), overrides=["optim.lr=1e-3"])
    return write_report(
        run,
        resolved=resolved,
        card=CARD,
        facts={"precision": "fp32", "precision_reason": "cpu"},
        doctor_json=doctor,
    )


def test_report_contents(tmp_path: Path) -> None:
    md = _fake_run(tmp_path).read_text()
    assert "step 5 (max_steps)" in md and "entity F1 0.6000" in md
    assert "| optim.lr | `0.001` | --set |" in md and "Doctor: ok" in md
    assert "[12]house_number" in md and "| B-street | 10 | 2 |" in md
    env = json.loads((tmp_path / "report" / "environment.json").read_text())
    assert env["doctor"]["profile"] == "cpu" and any(
        p.startswith("pyyaml==") for p in map(str.lower, env["packages"])
    )
    assert (
        json.loads((tmp_path / "report" / "hyperparameters.json").read_text())["sources"]["optim.lr"]
        == "--set"
    )
    assert "<svg" in (tmp_path / "report" / "report.html").read_text()
    assert verify_manifest(tmp_path).ok


def test_verify_catches_changes(tmp_path: Path) -> None:
    _fake_run(tmp_path)
    (tmp_path / "train.log").write_text("a detached run's log keeps growing; it is not an artifact\n")
    assert verify_manifest(tmp_path).ok
    (tmp_path / "report" / "report.md").write_text("edited")
    (tmp_path / "report" / "lr.png").unlink()
    (tmp_path / "extra.txt").write_text("x")
    check = verify_manifest(tmp_path)
    assert not check.ok
    assert check.mismatched == ("report/report.md",) and check.missing == ("report/lr.png",)
    assert check.unlisted == ("extra.txt",)
    add_to_manifest(tmp_path, [tmp_path / "extra.txt"])
    assert "extra.txt" not in verify_manifest(tmp_path).unlisted
    write_manifest(tmp_path)
    assert verify_manifest(tmp_path).ok
    with (tmp_path / MANIFEST).open("a") as fh:
        fh.write("not a manifest line\n")
    assert verify_manifest(tmp_path).malformed == ("not a manifest line",)
    with pytest.raises(InputError, match=r"no MANIFEST\.sha256"):
        verify_manifest(tmp_path / "report")


def test_verify_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_run(tmp_path)
    assert main(["train", "verify", str(tmp_path)]) == 0
    assert "ok:" in capsys.readouterr().out
    (tmp_path / "metrics.jsonl").write_text("tampered\n")
    assert main(["train", "verify", "--json", str(tmp_path)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["mismatched"] == ["metrics.jsonl"]


def test_pending_doctor_report_becomes_doctor_json(tmp_path: Path) -> None:
    """A launch's doctor report lands in doctor.json only with the report, so a failed launch changes nothing."""
    _fake_run(tmp_path)
    (tmp_path / ".doctor-pending.json").write_text(json.dumps({"profile": "next", "ok": True, "checks": []}))
    assert verify_manifest(tmp_path).ok  # the pending dotfile is not an artifact
    resolved = resolve_config(path=find_config("smoke"))
    write_report(
        tmp_path, resolved=resolved, card=CARD, facts={}, doctor_json=tmp_path / ".doctor-pending.json"
    )
    assert json.loads((tmp_path / "doctor.json").read_text())["profile"] == "next"
    assert not (tmp_path / ".doctor-pending.json").exists()
    assert verify_manifest(tmp_path).ok
