"""The run report in <run>/report/: curves (PNG + inline SVG), hyperparameters, data card, environment.

Curves are drawn without matplotlib (a small PNG rasteriser over zlib, and SVG for the HTML page),
so a report never depends on a plotting stack being installed in the training venv. The run folder's
SHA256 manifest is rewritten last, covering every artifact including this report.
"""

from __future__ import annotations

import html
import importlib.metadata
import itertools
import json
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mw_env.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from mw_env.runs.manifest import write_manifest
from mw_env.trainer.metrics import latest_by_step, read_metrics
from mw_env.trainspec.config import ResolvedConfig

W, H, PAD = 640, 320, 40


def _scale(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    return [
        (PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD), H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD))
        for x, y in points
    ]


def png_line_chart(points: Sequence[tuple[float, float]]) -> bytes:
    """A W x H RGB PNG: white ground, grey axes, the series as a blue polyline."""
    px = bytearray(b"\xff" * (W * H * 3))

    def put(x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < W and 0 <= y < H:
            i = (y * W + x) * 3
            px[i : i + 3] = bytes(rgb)

    for x in range(PAD, W - PAD + 1):
        put(x, H - PAD, (128, 128, 128))
    for y in range(PAD, H - PAD + 1):
        put(PAD, y, (128, 128, 128))
    pts = _scale(points) if points else []
    for (xa, ya), (xb, yb) in itertools.pairwise(pts):
        n = int(max(abs(xb - xa), abs(yb - ya))) + 1
        for k in range(n + 1):
            t = k / n
            x, y = round(xa + (xb - xa) * t), round(ya + (yb - ya) * t)
            for dx, dy in ((0, 0), (1, 0), (0, 1)):  # 2-pixel pen
                put(x + dx, y + dy, (31, 90, 200))
    if len(pts) == 1:
        put(round(pts[0][0]), round(pts[0][1]), (31, 90, 200))
    raw = b"".join(b"\x00" + bytes(px[y * W * 3 : (y + 1) * W * 3]) for y in range(H))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def svg_line_chart(points: Sequence[tuple[float, float]], title: str) -> str:
    if not points:
        return f"<p>{html.escape(title)}: no data</p>"
    pts = _scale(points)
    ys = [p[1] for p in points]
    xs = [p[0] for p in points]
    poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img">'
        f'<title>{html.escape(title)}</title><rect width="{W}" height="{H}" fill="white"/>'
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="grey"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="grey"/>'
        f'<polyline fill="none" stroke="#1f5ac8" stroke-width="2" points="{poly}"/>'
        f'<text x="{PAD}" y="{PAD - 8}" font-size="13">{html.escape(title)}</text>'
        f'<text x="2" y="{PAD + 4}" font-size="10">{max(ys):.4g}</text>'
        f'<text x="2" y="{H - PAD}" font-size="10">{min(ys):.4g}</text>'
        f'<text x="{PAD}" y="{H - PAD + 16}" font-size="10">step {xs[0]:g}</text>'
        f'<text x="{W - PAD - 60}" y="{H - PAD + 16}" font-size="10">step {xs[-1]:g}</text></svg>'
    )


def package_list() -> list[str]:
    """The exact distributions installed in this (the training venv's) interpreter."""
    seen = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            seen[name.lower()] = f"{name}=={dist.version}"
    return [seen[k] for k in sorted(seen)]


def _write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data, default=str)


def write_report(
    run_dir: Path,
    *,
    resolved: ResolvedConfig,
    card: dict[str, Any],
    facts: dict[str, Any],
    doctor_json: Path | None = None,
) -> Path:
    """Write report/ and MANIFEST.sha256; return the path of report.md."""
    out = Path(run_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    events = read_metrics(run_dir)
    steps = latest_by_step(events, "step")
    evals = latest_by_step(events, "eval")
    finished = [e for e in events if e.get("event") == "finished"]
    loss_pts = [(e["step"], e["loss"]) for e in steps if isinstance(e.get("loss"), (int, float))]
    lr_pts = [(e["step"], e["lr"]) for e in steps if isinstance(e.get("lr"), (int, float))]
    write_bytes_atomic(out / "loss.png", png_line_chart(loss_pts))
    write_bytes_atomic(out / "lr.png", png_line_chart(lr_pts))

    _write_json(out / "hyperparameters.json", resolved.to_dict())
    _write_json(out / "data_card.json", card)
    doctor: Any = None
    if doctor_json and Path(doctor_json).is_file():
        doctor = json.loads(Path(doctor_json).read_text(encoding="utf-8"))
        kept = Path(run_dir) / "doctor.json"
        if Path(doctor_json).resolve() != kept.resolve():
            # The launcher's pending report becomes this run's doctor.json only now, with the report.
            write_json_atomic(kept, doctor, default=str)
            if (
                Path(doctor_json).name.startswith(".")
                and Path(doctor_json).parent.resolve() == Path(run_dir).resolve()
            ):
                Path(doctor_json).unlink(missing_ok=True)
    packages = package_list()
    write_text_atomic(out / "packages.txt", "\n".join(packages) + "\n")
    _write_json(out / "environment.json", {"facts": facts, "doctor": doctor, "packages": packages})

    cfg = resolved.config.to_dict()
    last_eval = evals[-1] if evals else {}
    end = finished[-1] if finished else {}
    lines = [
        f"# Training run report: {Path(run_dir).name}",
        "",
        f"- Finished: step {end.get('step', '?')} ({end.get('reason', 'not finished')})",
        f"- Final loss: {loss_pts[-1][1]:.4f}" if loss_pts else "- Final loss: n/a",
        f"- Last eval (step {last_eval.get('step')}): loss {last_eval.get('loss', float('nan')):.4f}, "
        f"token accuracy {last_eval.get('token_acc', float('nan')):.4f}, "
        f"entity F1 {last_eval.get('entity_f1', float('nan')):.4f}"
        if evals
        else "- No evaluation ran",
        f"- Precision: {facts.get('precision')} - {facts.get('precision_reason')}",
        f"- Device: {facts.get('device_name')} ({facts.get('device')}), world size {facts.get('world_size')}, "
        f"torch {facts.get('torch')}",
        f"- Doctor: {'ok' if doctor and doctor.get('ok') else ('not run' if doctor is None else 'FAILED checks')}",
        "",
        "## Curves",
        "",
        "![loss](loss.png)",
        "",
        "![learning rate](lr.png)",
        "",
        "## Hyperparameters (resolved; source of each in hyperparameters.json)",
        "",
        "| key | value | source |",
        "|---|---|---|",
    ]
    for section, body in cfg.items():
        for key, value in body.items():
            lines.append(
                f"| {section}.{key} | `{json.dumps(value)}` | {resolved.sources.get(f'{section}.{key}')} |"
            )
    lines += ["", "## Data card", "", f"- Rows: {card['rows']}", f"- Tokenizer: {card['tokenizer']}"]
    lines += [f"- Words cut by max_len: {card['truncated_words']}", "- Sources:"]
    for src in card["sources"]:
        lines.append(f"  - {json.dumps(src)}")
    lines += ["", "| tag | train | val |", "|---|---|---|"]
    dist = card["tag_distribution"]
    for tag in card["labels"]:
        lines.append(f"| {tag} | {dist['train'].get(tag, 0)} | {dist['val'].get(tag, 0)} |")
    if last_eval.get("samples"):
        lines += ["", "## Held-out addresses as tagged (last eval)", ""]
        lines += [f"- `{s}`" for s in last_eval["samples"]]
    lines += [
        "",
        "## Environment",
        "",
        "environment.json (doctor JSON, facts), packages.txt (exact versions).",
        "",
    ]
    md = "\n".join(lines) + "\n"
    write_text_atomic(out / "report.md", md)

    body = "".join(f"<p>{html.escape(line)}</p>" for line in lines[:8] if line and not line.startswith("#"))
    table = "".join(
        f"<tr><td>{html.escape(s)}.{html.escape(k)}</td><td><code>{html.escape(json.dumps(v))}</code></td>"
        f"<td>{html.escape(str(resolved.sources.get(f'{s}.{k}')))}</td></tr>"
        for s, b in cfg.items()
        for k, v in b.items()
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(Path(run_dir).name)}</title></head>"
        f"<body><h1>Training run report</h1>{body}{svg_line_chart(loss_pts, 'training loss')}"
        f"{svg_line_chart(lr_pts, 'learning rate')}<h2>Hyperparameters</h2><table>{table}</table>"
        "<p>Data card: data_card.json · environment: environment.json · packages: packages.txt</p></body></html>"
    )
    write_text_atomic(out / "report.html", page)
    write_manifest(Path(run_dir))
    return out / "report.md"
