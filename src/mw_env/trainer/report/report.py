"""The run report in <run>/report/: summary, figures, hyperparameters, data card, environment.

Files: report.md (figures as PNG beside it), report.html (one self-contained page: figures inlined as
SVG, a little CSS), hyperparameters.json, data_card.json, environment.json, packages.txt, *.png.
The content is built once as blocks (report.doc) and rendered to both formats. Figures need
matplotlib (the `train` extra); without it the report is still written and says so - a report must
never be what fails at the end of hours of training. The run folder's MANIFEST.sha256 is rewritten
last, covering every artifact including this report; then, for runtime.tracking=mlflow, the report,
the manifest, the final checkpoint's path and the model (mlflow_model.py) go to the MLflow run.
"""

from __future__ import annotations

import importlib.metadata
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mw_env.base.atomic import write_json_atomic, write_text_atomic
from mw_env.base.errors import os_error_in
from mw_env.base.textsafe import duration
from mw_env.rundir import contract as rd
from mw_env.rundir.manifest import read_manifest, write_manifest
from mw_env.trainer.lifecycle import hold
from mw_env.trainer.metrics import latest_by_step, read_metrics
from mw_env.trainer.report import figure_pool
from mw_env.trainer.report.card import HistogramDrawer, card_blocks
from mw_env.trainer.report.doc import (
    Bullets,
    Cell,
    Code,
    DocBlock,
    Fig,
    Heading,
    Para,
    Table,
    kv_table,
    to_html,
    to_markdown,
)
from mw_env.trainer.report.figure_pool import FigurePool
from mw_env.trainer.report.figures import Figure, f1_mode
from mw_env.trainer.scoring import eval_scope
from mw_env.trainspec.advice import inapplicable
from mw_env.trainspec.config import ResolvedConfig
from mw_env.trainspec.extras import bootstrap_hint


def package_list() -> list[str]:
    """The exact distributions installed in this (the training venv's) interpreter."""
    seen = {}
    for dist in importlib.metadata.distributions():
        name, version = _name_version(dist)
        if name:
            seen[name.lower()] = f"{name}=={version}"
    return [seen[k] for k in sorted(seen)]


def _name_version(dist: importlib.metadata.Distribution) -> tuple[str | None, str | None]:
    """Name and Version from the metadata's header lines: `dist.metadata` parses the whole file as an email
    message (0.6 s for a training venv's ~110 distributions, at the run's end); the header gives the same
    two fields. Anything unexpected falls back to the full parse."""
    head: dict[str, str] = {}
    for line in (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").splitlines():
        if not line.strip():
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in head:
            head[key] = value.strip()
    if "Name" in head and "Version" in head:
        return head["Name"], head["Version"]
    return dist.metadata["Name"], dist.version


def display_source(source: str | None, run_dir: Path) -> str:
    """A value's source without the training machine's absolute paths: `file:smoke.yaml (shipped)`."""
    if not source or not source.startswith("file:"):
        return str(source)
    path = Path(source[5:])
    shipped = Path(__file__).resolve().parents[2] / "trainspec" / "configs"
    for base, suffix in ((shipped, " (shipped)"), (run_dir.resolve(), ""), (run_dir.resolve().parent, "")):
        try:
            return f"file:{path.resolve().relative_to(base).as_posix()}{suffix}"
        except ValueError:
            continue
    return f"file:{path.name}"


def _num(value: object, spec: str = ".4f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def final_checkpoint(run_dir: Path) -> Path | None:
    from mw_env.trainer.ckpt.checkpoint import list_checkpoints

    found = list_checkpoints(Path(run_dir) / rd.CHECKPOINTS_DIR)
    return found[-1] if found else None


_FACTS = ("precision", "precision_reason", "device_name", "device", "world_size", "torch")


def summary_pairs(
    run_dir: Path,
    events: Sequence[dict[str, Any]],
    facts: dict[str, Any],
    doctor: dict[str, object] | None,
    resolved: ResolvedConfig,
) -> list[tuple[str, Cell]]:
    steps = latest_by_step(events, "step")
    evals = latest_by_step(events, "eval")
    finished = [e for e in events if e.get("event") == "finished"]
    end = finished[-1] if finished else {}
    losses = [e for e in steps if isinstance(e.get("loss"), (int, float))]
    pairs: list[tuple[str, Cell]] = [
        (
            "Finished",
            f"step {end['step']} ({end.get('reason')})" if end else "not finished (no `finished` event)",
        ),
        ("Final training loss", f"{losses[-1]['loss']:.4f} (step {losses[-1]['step']})" if losses else "n/a"),
    ]
    if evals:
        last = evals[-1]
        mode = f1_mode(last)
        other = "strict" if mode == "conlleval" else "conlleval"
        pairs += [
            (
                f"Last eval (step {last.get('step')})",
                f"loss {_num(last.get('loss'))}, word accuracy (BIO tag per word) "
                f"{_num(last.get('token_acc'))}, entity F1 ({mode}) {_num(last.get('entity_f1'))}"
                + (
                    f", entity F1 ({other}) {_num(last.get(f'entity_f1_{other}'))}"
                    if f"entity_f1_{other}" in last
                    else ""
                ),
            ),
            (
                f"Entity precision / recall ({mode})",
                f"{_num(last.get('entity_precision'))} / {_num(last.get('entity_recall'))}",
            ),
        ]
        rows, val_rows = last.get("rows"), last.get("val_rows")
        if isinstance(rows, int) and isinstance(val_rows, int):
            pairs.append(("Evaluated", eval_scope(rows, val_rows)))
        scored = [e for e in evals if isinstance(e.get("entity_f1"), (int, float))]
        if scored:
            best = max(scored, key=lambda e: e["entity_f1"])
            pairs.append((f"Best entity F1 ({mode})", f"{best['entity_f1']:.4f} (step {best['step']})"))
    else:
        pairs.append(("Evaluation", "no evaluation ran"))
    times = [e["time"] for e in events if isinstance(e.get("time"), (int, float))]
    if len(times) >= 2:
        pairs.append(("Wall time (first to last event)", duration(max(times) - min(times))))
    rates = [e["tokens_per_s"] for e in steps if isinstance(e.get("tokens_per_s"), (int, float))]
    if rates:
        pairs.append(("Throughput (median)", f"{statistics.median(rates):,.0f} tokens/s"))
    skipped = {e.get("step") for e in events if e.get("event") == "skipped_step"}
    pairs.append(("Skipped steps (non-finite)", str(len(skipped))))
    fact = {k: "unknown" if facts.get(k) is None else str(facts[k]) for k in _FACTS}
    pairs += [
        ("Precision", f"{fact['precision']} ({fact['precision_reason']})"),
        ("Device", f"{fact['device_name']} ({fact['device']}), world size {fact['world_size']}"),
        ("torch", fact["torch"]),
        ("Doctor", _doctor_words(doctor)),
        (
            "Config",
            f"{display_source('file:' + str(resolved.path), run_dir)[5:] if resolved.path else 'defaults'}, "
            f"sha256 {resolved.config.sha256()[:12]}",
        ),
    ]
    lock = facts.get("env_lock")
    if isinstance(lock, dict) and lock.get("sha256"):
        pairs.append(("Environment lock", Code(f"{lock.get('file')} sha256 {lock['sha256']}")))
    else:
        pairs.append(("Environment lock", "none (the venv has no lock; `mw-env lock` writes one)"))
    mismatch = facts.get("env_mismatch")
    if mismatch:  # trainer/envcheck.py: the nodes differ, and --allow-env-mismatch let the run go on
        pairs.append(("Node environments", f"DIFFERENT (--allow-env-mismatch): {mismatch}"))
    drift = facts.get("venv_drift")
    if isinstance(drift, dict) and drift.get("changes"):
        changes = "; ".join(map(str, drift["changes"]))
        pairs.append(
            ("Venv drift", f"{changes} (since the venv's lock); the run's lock: {drift.get('run_lock')}")
        )
    init = facts.get("init_from")
    if isinstance(init, dict):  # model.init_from (trainer/weights/initfrom.py)
        new = ", ".join(map(str, init.get("new_labels") or [])) or "none"
        pairs.append(
            (
                "Started from",
                f"{init.get('path')} ({init.get('kind')}, step {init.get('step')}; new labels: {new})",
            )
        )
    ckpt = final_checkpoint(run_dir)
    pairs.append(("Final checkpoint", Code(ckpt.relative_to(run_dir).as_posix()) if ckpt else "none"))
    weights = sorted(rd.weights_dir(run_dir).glob(f"{rd.STEP_FOLDER_GLOB}/{rd.CONFIG_FILE}"))
    if weights:  # the portable folder beside it (runtime.portable_weights; docs/training.md)
        pairs.append(("Portable weights", Code(weights[-1].parent.relative_to(run_dir).as_posix())))
    return pairs


def _doctor_words(doctor: dict[str, object] | None) -> str:
    if doctor is None:
        return "not run"
    from mw_env.checks.model import doctor_warnings

    warned = doctor_warnings(doctor)
    if not doctor.get("ok"):
        return "FAILED checks"
    return f"ok with {len(warned)} warning(s): {'; '.join(warned)}" if warned else "ok"


def _draw_figures(
    events: Sequence[dict[str, Any]],
    out: Path,
    resolved: ResolvedConfig,
    n_labels: int = 0,
    have: dict[str, Figure | None] | None = None,
) -> tuple[list[Figure], str | None, HistogramDrawer]:
    """The run figures (or a note instead: figures need matplotlib) and the histogram drawer. `have`: the
    figures a FigurePool drew (trainer/report/figure_pool.py); any it lacks are drawn here."""
    import importlib.util

    have = have or {}
    if not resolved.config.runtime.report_figures:
        return (
            [],
            "Figures not drawn: runtime.report_figures is false (metrics.jsonl has every value).",
            _none,
        )
    if importlib.util.find_spec("matplotlib") is None and not have:
        note = (
            "Figures skipped: matplotlib is not installed in this venv; add the `train` extra "
            f"({bootstrap_hint(sys.prefix, 'train')}) for figures in the next report."
        )
        return [], note, _none

    def draw(name: str, title: str, counts: Sequence[float], width: float) -> Figure | None:
        if name in have:
            return have[name]
        try:
            return figure_pool.draw(figure_pool.histogram_request(name, title, counts, width, out), [])
        except (
            Exception
        ) as exc:  # an odd histogram is shown as a table instead; a full disk is no odd histogram
            if os_error_in(exc) is not None:
                raise
            return None

    o = resolved.config.optim
    try:
        reqs = figure_pool.run_requests(
            Path(), out, grad_clip=o.grad_clip, smoothing=o.label_smoothing, n_labels=n_labels
        )
        found = [have[r["name"]] if r["name"] in have else figure_pool.draw(r, events) for r in reqs]
        return [f for f in found if f is not None], None, draw
    except Exception as exc:  # a plotting failure must not cost the rest of the report (a disk fault does)
        if os_error_in(exc) is not None:
            raise
        return [], f"Figures failed: {type(exc).__name__}: {exc} (metrics.jsonl has every value).", draw


def _none(*_args: object) -> None:
    return None  # the histogram drawer where no figure is drawn: the data card shows its bins as a table


def submit_figures(
    pool: FigurePool, run_dir: Path, out: Path, resolved: ResolvedConfig, card: object
) -> Callable[[], dict[str, Figure | None]]:
    """Every figure of the report handed to the pool now (the curves, and the data card's histograms found
    by a dry pass over its blocks); returns the collector, called when the blocks are built."""
    labels = card.get("labels") if isinstance(card, dict) else None
    o = resolved.config.optim
    reqs = figure_pool.run_requests(
        Path(run_dir) / rd.METRICS_FILE,
        out,
        grad_clip=o.grad_clip,
        smoothing=o.label_smoothing,
        n_labels=len(labels) if isinstance(labels, list) else 0,
    )

    def record(name: str, title: str, counts: Sequence[float], width: float) -> None:
        reqs.append(figure_pool.histogram_request(name, title, counts, width, out))

    card_blocks(card, record)
    lanes = pool.submit(reqs)
    return lambda: pool.collect(lanes)


def build_blocks(
    run_dir: Path,
    *,
    resolved: ResolvedConfig,
    card: object,
    facts: dict[str, Any],
    doctor: dict[str, object] | None,
    events: Sequence[dict[str, Any]],
    out: Path,
    drawn: Callable[[], dict[str, Figure | None]] | None = None,
) -> list[DocBlock]:
    labels = card.get("labels") if isinstance(card, dict) else None
    n_labels = len(labels) if isinstance(labels, list) else 0
    figures, note, draw = _draw_figures(events, out, resolved, n_labels, drawn() if drawn else None)
    blocks: list[DocBlock] = [
        Heading("Summary"),
        kv_table(summary_pairs(run_dir, events, facts, doctor, resolved), "kv summary"),
    ]
    blocks.append(Heading("Curves"))
    blocks += [Fig(f) for f in figures] if figures else [Para(note or "No figures.")]
    evals = latest_by_step(events, "eval")
    samples = evals[-1].get("samples") if evals else None
    if samples:
        blocks += [
            Heading(f"Held-out addresses as tagged (eval at step {evals[-1].get('step')})"),
            Bullets(tuple(Code(str(s)) for s in samples)),
        ]
    cfg = resolved.config.to_dict()
    hidden = inapplicable(resolved.config)  # a files corpus has no synthetic settings, and vice versa
    rows: list[tuple[Cell, ...]] = [
        (
            f"{section}.{key}",
            Code(json.dumps(value)),
            display_source(resolved.sources.get(f"{section}.{key}"), run_dir),
        )
        for section, body in cfg.items()
        for key, value in body.items()
        if f"{section}.{key}" not in hidden
    ]
    blocks += [
        Heading("Hyperparameters"),
        Para(
            "Resolved values and where each came from (default < profile < file < --set); settings that do "
            "not apply to this data source are left out. The full record, absolute paths included, is in "
            "hyperparameters.json."
        ),
        Table(header=("key", "value", "source"), rows=tuple(rows)),
        Heading("Data card"),
        *card_blocks(card, draw),
        Heading("Environment"),
        Bullets(
            (
                "environment.json: the doctor's JSON report and the run's facts",
                "packages.txt: the exact version of every package in the training venv",
                "pylock.mw-env.toml (run folder, when the venv has a lock): every package's file and sha256, "
                "for this hardware; `mw-env bootstrap --lock RUN/pylock.mw-env.toml` rebuilds the venv",
                "hyperparameters.json, data_card.json: the tables above as data",
                f"{rd.MANIFEST} (run folder): sha256 of every artifact; `mw-env train verify RUN` checks it",
            )
        ),
    ]
    return blocks


def _read_doctor(run_dir: Path, doctor_json: Path | None) -> dict[str, object] | None:
    if not (doctor_json and Path(doctor_json).is_file()):
        return None
    doctor = json.loads(Path(doctor_json).read_text(encoding="utf-8"))
    kept = Path(run_dir) / rd.DOCTOR_FILE
    if Path(doctor_json).resolve() != kept.resolve():
        # The launcher's pending report becomes this run's doctor.json only now, with the report.
        write_json_atomic(kept, doctor, default=str)
        if (
            Path(doctor_json).name.startswith(".")
            and Path(doctor_json).parent.resolve() == Path(run_dir).resolve()
        ):
            Path(doctor_json).unlink(missing_ok=True)
    return doctor


def write_report(
    run_dir: Path,
    *,
    resolved: ResolvedConfig,
    card: dict[str, Any],
    facts: dict[str, Any],
    doctor_json: Path | None = None,
    pool: FigurePool | None = None,
) -> Path:
    """Write report/ and MANIFEST.sha256 (then the MLflow artifacts, if tracked); return report.md's path."""
    run_dir = Path(run_dir)
    out = run_dir / rd.REPORT_DIR
    out.mkdir(exist_ok=True)  # never the run folder itself: a deleted one is not recreated
    events = read_metrics(run_dir)
    # The figures first, to the pool's processes (drawn while this one writes the files below).
    drawn = submit_figures(pool, run_dir, out, resolved, card) if pool is not None else None
    write_json_atomic(out / rd.HYPERPARAMETERS_FILE, resolved.to_dict(), default=str)
    write_json_atomic(out / rd.DATA_CARD_FILE, card, default=str)
    doctor = _read_doctor(run_dir, doctor_json)
    packages = package_list()
    write_text_atomic(out / rd.PACKAGES_FILE, "\n".join(packages) + "\n")
    write_json_atomic(
        out / rd.ENVIRONMENT_FILE, {"facts": facts, "doctor": doctor, "packages": packages}, default=str
    )

    blocks = build_blocks(
        run_dir, resolved=resolved, card=card, facts=facts, doctor=doctor, events=events, out=out, drawn=drawn
    )
    title = f"Training run report: {run_dir.name}"
    write_text_atomic(out / rd.REPORT_MD, to_markdown(title, blocks, base=out))
    write_text_atomic(out / rd.REPORT_HTML, to_html(title, blocks))
    # A forced stop's note (runs/stop.py) was about an attempt this complete report supersedes.
    (out / rd.STOP_NOTE).unlink(missing_ok=True)
    hold("manifest")  # the fault harness's manifest phase (trainer/lifecycle.py)
    write_manifest(run_dir)
    if resolved.config.runtime.tracking == "mlflow":
        _log_to_mlflow(run_dir)
    return out / rd.REPORT_MD


def _log_to_mlflow(run_dir: Path) -> None:
    from mw_env.trainer.tracking.mlflow_tracker import log_run_artifacts

    ckpt = final_checkpoint(run_dir)
    digest = read_manifest(run_dir)[0].get(ckpt.relative_to(run_dir).as_posix()) if ckpt else None
    warning = log_run_artifacts(run_dir, checkpoint=ckpt, checkpoint_sha256=digest)
    if warning:
        print(warning, file=sys.stderr, flush=True)
