"""Run report and manifest (no torch needed): matplotlib figures, a real HTML page, any data card, verify."""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.cli import main
from mw_env.rundir.manifest import MANIFEST, add_to_manifest, verify_manifest, write_manifest
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.report.report import display_source, write_report
from mw_env.trainspec.config import find_config, resolve_config

CARD = {
    "rows": {"train": 10, "val": 2},
    "tag_distribution": {"train": {"B-street": 10}, "val": {"B-street": 2}},
    "truncated_words": 0,
    "sources": [{"kind": "synthetic", "seed": 1}],
    "tokenizer": "byte",
    "labels": ["O", "B-street"],
}
# The streamed pipeline's card (issue 9): per-shard rows, a length histogram, what was consumed, and
# shapes nobody planned for. The report renders them by shape and must not fail on any of them.
STREAM_CARD = {
    **CARD,
    "shards": [
        {"path": "oa/us-000.parquet", "rows": 1_250_000, "row_groups": 10, "size_bytes": 61_000_000},
        {"path": "nad/part-001.parquet", "rows": 980_123, "row_groups": 8, "size_bytes": 47_500_000},
    ],
    "consumed": {"rows": 4_460_246, "tokens": 180_000_000, "epochs": 2.0},
    "token_lengths": {"bin_width": 8, "counts": [0, 120, 900, 400, 50, 3], "mean": 27.5},
    "bio_examples": ["oa/us-000.parquet row 17: I-street after O"],
    "odd": {"nested": {"deeper": [1, {"x": None}]}, "empty": {}, "flag": True},
}


def _png_chunks(data: bytes) -> dict[bytes, list[bytes]]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        chunks.setdefault(kind, []).append(body)
        pos += 12 + length
    return chunks


def _fake_run(run: Path, card: dict = CARD, *, skipped: bool = True, **resolve) -> Path:
    m = MetricsWriter(run)
    for s in range(1, 6):
        m.log(
            "step", step=s, loss=3.0 - 0.1 * s, lr=1e-3 * s / 5, grad_norm=1.5 - 0.1 * s, tokens_per_s=100.0
        )
        if s in (2, 4):
            m.log(
                "eval",
                step=s,
                loss=2.5 - 0.2 * s,
                token_acc=0.5 + 0.05 * s,
                entity_f1=0.1 * s,
                entity_precision=0.12 * s,
                entity_recall=0.09 * s,
                samples=[f"[12]house_number [Oak St]street {s}"],
            )
    if skipped:
        m.log("step", step=5, loss=float("nan"), lr=1e-3, grad_norm=float("inf"), tokens_per_s=1.0)
        m.log("skipped_step", step=5, reason="non-finite loss")
    m.log("finished", step=5, reason="max_steps")
    m.close()
    doctor = run / "doctor.json"
    doctor.write_text(json.dumps({"profile": "cpu", "ok": True, "checks": []}))
    resolved = resolve_config(
        path=find_config("smoke"), overrides=["optim.lr=1e-3", *resolve.get("overrides", ())]
    )
    return write_report(
        run,
        resolved=resolved,
        card=card,
        facts={"precision": "fp32", "precision_reason": "cpu"},
        doctor_json=doctor,
    )


class _Page(HTMLParser):
    """Counts the elements of report.html and keeps the text of table cells, list items and paragraphs."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.stack: list[str] = []
        self.cells: list[str] = []
        self.items: list[str] = []
        self.paras: list[str] = []
        self.svg_text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.stack.append(tag)

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        if "svg" in self.stack:
            self.svg_text.append(data)
        elif self.stack and self.stack[-1] in ("td", "code") and "td" in self.stack:
            self.cells.append(data)
        elif "li" in self.stack:
            self.items.append(data)
        elif self.stack and self.stack[-1] == "p":
            self.paras.append(data)


def test_report_contents(tmp_path: Path) -> None:
    md = _fake_run(tmp_path).read_text()
    assert "- Finished: step 5 (max_steps)" in md and "entity F1 (conlleval) 0.4000" in md
    assert "- Best entity F1 (conlleval): 0.4000 (step 4)" in md and "- Skipped steps (non-finite): 1" in md
    assert "| optim.lr | `0.001` | --set |" in md and "- Doctor: ok" in md
    assert "| model.d_model | `32` | file:smoke.yaml (shipped) |" in md
    assert "[12]house_number" in md and "| B-street | 10 | 2 |" in md
    env = json.loads((tmp_path / "report" / "environment.json").read_text())
    assert env["doctor"]["profile"] == "cpu" and any(
        p.startswith("pyyaml==") for p in map(str.lower, env["packages"])
    )
    hyper = json.loads((tmp_path / "report" / "hyperparameters.json").read_text())
    assert hyper["sources"]["optim.lr"] == "--set" and hyper["sources"]["model.d_model"].startswith("file:/")
    assert verify_manifest(tmp_path).ok


def test_sources_never_show_the_training_machines_paths(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    assert display_source("file:/home/alice/work/configs/tagger.yaml", run) == "file:tagger.yaml"
    assert display_source(f"file:{run}/cfg.toml", run) == "file:cfg.toml"
    assert display_source(f"file:{tmp_path}/runs/base.yaml", run) == "file:base.yaml"
    assert display_source("profile:cpu", run) == "profile:cpu" and display_source("--set", run) == "--set"


def test_figures_are_matplotlibs_with_axes_and_the_eval_metrics(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    md = _fake_run(tmp_path).read_text()
    report = tmp_path / "report"
    for name in ("loss", "eval", "lr", "grad_norm"):
        data = (report / f"{name}.png").read_bytes()
        chunks = _png_chunks(data)
        text = dict(c.split(b"\0", 1) for c in chunks.get(b"tEXt", []))
        assert b"Matplotlib" in text[b"Software"], text
        assert struct.unpack(">II", chunks[b"IHDR"][0][:8]) == (960, 480)
        assert f"]({name}.png)" in md
        # Axes drawn: a near-full-height dark column (the y spine) and a near-full-width dark row (x spine).
        dark = imread(report / f"{name}.png")[..., :3].sum(axis=-1) < 0.6
        assert dark.sum(axis=0).max() > 0.6 * dark.shape[0] and dark.sum(axis=1).max() > 0.6 * dark.shape[1]
    page = _Page()
    page.feed((report / "report.html").read_text())
    svg_text = " ".join(page.svg_text)
    for words in (
        "held-out loss",
        "training loss",
        "entity F1",
        "entity precision",
        "entity recall",
        "word accuracy",
        "optimizer step",
        "learning rate",
        "clip at 1",
        "Held-out metrics",
    ):
        assert words in svg_text, words


def test_report_html_is_a_real_page(tmp_path: Path) -> None:
    _fake_run(tmp_path, STREAM_CARD)
    html_text = (tmp_path / "report" / "report.html").read_text()
    page = _Page()
    page.feed(html_text)
    assert page.tags["ul"] >= 3 and page.tags["li"] >= 8 and page.tags["table"] >= 5
    assert html_text.count("<style>") == 1 and page.tags["h2"] >= 5  # our CSS (each SVG has its own)
    assert not [p for p in page.paras if p.lstrip().startswith("- ")]  # no Markdown bullets as paragraphs
    # The summary comes first: the first table after the title is the run summary.
    assert html_text.index("Summary") < html_text.index("<svg") < html_text.index("Hyperparameters")
    assert "Finished" in page.cells and "step 5 (max_steps)" in page.cells
    assert not [c for c in page.cells if c.startswith("file:/")]  # sources relative, not the machine's paths
    # The streamed card: the shard table, the consumed counts, the histogram, the odd keys - all rendered.
    assert "nad/part-001.parquet" in page.cells and "980,123" in page.cells
    assert "rows 4,460,246, tokens 180,000,000, epochs 2" in page.cells
    assert "oa/us-000.parquet row 17: I-street after O" in page.items
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| oa/us-000.parquet | 1,250,000 | 10 | 61,000,000 |" in md
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "report" / "data_token_lengths.png").is_file()
        assert "![Token lengths: rows per bin of 8](data_token_lengths.png)" in md
    assert verify_manifest(tmp_path).ok


def test_without_matplotlib_the_report_is_still_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    md = _fake_run(tmp_path, STREAM_CARD).read_text()
    assert "Figures skipped: matplotlib is not installed" in md
    assert not list((tmp_path / "report").glob("*.png"))
    assert "| 16 to 24 | 900 |" in md  # the histogram as a table instead
    assert "<svg" not in (tmp_path / "report" / "report.html").read_text()
    assert verify_manifest(tmp_path).ok


def test_runtime_report_figures_false_writes_the_report_without_figures(tmp_path: Path, monkeypatch) -> None:
    """Not drawn, not attempted: matplotlib is never imported, the histograms are tables."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it would raise
    md = _fake_run(tmp_path, STREAM_CARD, overrides=["runtime.report_figures=false"]).read_text()
    assert "Figures not drawn: runtime.report_figures is false" in md
    assert not list((tmp_path / "report").glob("*.png"))
    assert "| 16 to 24 | 900 |" in md and "| runtime.report_figures | `false` |" in md
    assert "<svg" not in (tmp_path / "report" / "report.html").read_text()
    assert verify_manifest(tmp_path).ok


def test_a_plotting_failure_costs_only_the_figures(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("matplotlib")
    from mw_env.trainer.report import figure_pool
    from mw_env.trainer.report import figures as report_figures

    def broken(*_args, **_kwargs):
        raise ValueError("bad data")

    monkeypatch.setattr(figure_pool, "draw", broken)  # each curve, drawn here or by the figure pool
    monkeypatch.setattr(report_figures, "histogram_figure", broken)
    md = _fake_run(tmp_path, STREAM_CARD).read_text()
    assert "Figures failed: ValueError: bad data" in md and "| 16 to 24 | 900 |" in md
    assert verify_manifest(tmp_path).ok


def test_an_empty_run_still_reports(tmp_path: Path) -> None:
    resolved = resolve_config(path=find_config("smoke"))
    md = write_report(tmp_path, resolved=resolved, card={}, facts={}).read_text()
    assert "not finished" in md and "no evaluation ran" in md and "No data card" in md


def test_verify_catches_changes(tmp_path: Path) -> None:
    _fake_run(tmp_path)
    (tmp_path / "train.log").write_text("a detached run's log keeps growing; it is not an artifact\n")
    (tmp_path / "mlruns").mkdir()
    (tmp_path / "mlruns" / "meta.yaml").write_text("MLflow's own store changes after the report\n")
    assert verify_manifest(tmp_path).ok
    (tmp_path / "report" / "report.md").write_text("edited")
    (tmp_path / "report" / "hyperparameters.json").unlink()
    (tmp_path / "extra.txt").write_text("x")
    check = verify_manifest(tmp_path)
    assert not check.ok
    assert check.mismatched == ("report/report.md",) and check.missing == ("report/hyperparameters.json",)
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


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium (Debian: apt-get install chromium)")
def test_report_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    """The page as a browser draws it: not blank, and the figures' colours are on it (inline SVG rendered)."""
    mpl_image = pytest.importorskip("matplotlib.image")
    _fake_run(tmp_path / "run", STREAM_CARD)
    shot = tmp_path / "shot.png"
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    argv += [f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2400"]
    proc = subprocess.run(
        [*argv, (tmp_path / "run" / "report" / "report.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert shot.is_file(), proc.stderr
    rgb = mpl_image.imread(shot)[..., :3]
    assert (rgb.sum(axis=-1) < 2.9).mean() > 0.03  # text, tables and figures, not an empty page
    orange = (abs(rgb[..., 0] - 1.0) < 0.08) & (abs(rgb[..., 1] - 0.5) < 0.08) & (rgb[..., 2] < 0.15)
    assert orange.sum() > 200  # the held-out loss line (matplotlib's tab:orange) is drawn


def test_the_small_things_of_issue_20(tmp_path: Path) -> None:
    """Issue 20 #15: no `window blocks null`, no empty BIO-examples heading, no synthetic settings in a files
    corpus's report, the resume point on the loss curve, tables that scroll in their own box (not the page)."""
    card = {**STREAM_CARD, "streaming": {"window_blocks": None, "prefetch_steps": 4}, "bio_examples": []}
    run = tmp_path / "run"
    m = MetricsWriter(run)
    m.log("resumed", step=3, path="checkpoints/step-000000003.pt")
    m.close()
    report = _fake_run(
        run,
        card,
        overrides=["data.source=files", "data.train_files=[a.jsonl]", "runtime.out_dir=" + str(run)],
    )
    md = report.read_text()
    assert "window blocks" not in md and "prefetch steps 4" in md
    assert "### bio examples" not in md and "bio examples: none" in md  # said, not an empty heading
    hyper = md.split("## Hyperparameters")[1].split("## Data card")[0]
    assert "data.train_files" in hyper and "data.synthetic_rows" not in hyper and "data.noise" not in hyper
    html = (run / "report" / "report.html").read_text()
    assert html.count("<table") == html.count('<div class="table"><table') > 3
    assert "div.table { max-width: 100%; overflow-x: auto; }" in html
    svg = html[html.index("Loss: training (label-smoothed) and held-out (plain)") :]
    assert "resumed from a checkpoint" in svg[: svg.index("</svg>")]  # the legend of the loss figure
