"""The run report's figures, drawn with matplotlib (Agg canvas: no display, no pyplot global state).

Each figure is written as a PNG (for report.md and for anyone's image viewer) and returned as inline
SVG text (for report.html, which then needs no files beside it). Long runs are thinned to at most
MAX_POINTS per series by averaging consecutive steps (the legend says so), so a 100k-step run still makes
small files; the training loss also gets a centred moving average, computed before thinning.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.atomic import write_bytes_atomic
from mw_env.trainer.metrics import latest_by_step

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

MAX_POINTS = 2000
SIZE_IN = (8.0, 4.0)  # inches; PNGs at 120 dpi are 960 x 480
# The axes' margins, in inches (left, right, bottom, top): fixed, not solved per figure. A layout engine
# (constrained or tight) draws the whole figure once more to measure its text, 45 ms of a figure's 130 ms;
# these fit a 12 pt title, 10 pt tick labels of up to 8 characters and the axis labels (tests/trainer
# checks that no text of the report's figures leaves the canvas).
MARGINS_IN = (1.0, 0.2, 0.6, 0.45)
PNG_DPI = 120
EVAL_METRICS = (
    ("entity_f1", "entity F1"),
    ("entity_precision", "entity precision"),
    ("entity_recall", "entity recall"),
    ("token_acc", "word accuracy"),
)


@dataclass(frozen=True)
class Figure:
    name: str  # file stem: <name>.png
    title: str
    png: Path
    svg: str  # an <svg> element, ready to inline


Points = list[tuple[float, float]]


def series(events: Sequence[dict[str, Any]], kind: str, key: str) -> Points:
    """(step, value) of one field, last event per step, finite values only."""
    out = []
    for e in latest_by_step(events, kind):
        v = e.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((float(e["step"]), float(v)))
    return out


def thin(points: Points, limit: int = MAX_POINTS) -> tuple[Points, int]:
    """At most `limit` points - means of runs of `size` consecutive points - and that size (1: untouched)."""
    if len(points) <= limit:
        return list(points), 1
    size = math.ceil(len(points) / limit)
    out = []
    for i in range(0, len(points), size):
        chunk = points[i : i + size]
        out.append((sum(p[0] for p in chunk) / len(chunk), sum(p[1] for p in chunk) / len(chunk)))
    return out, size


def moving_average(points: Points, window: int) -> Points:
    """Centred mean over `window` points (odd), so the curve does not lag behind the data it smooths."""
    half = window // 2
    prefix = [0.0]
    for _, y in points:
        prefix.append(prefix[-1] + y)
    return [
        (points[i][0], (prefix[i + half + 1] - prefix[i - half]) / window)
        for i in range(half, len(points) - half)
    ]


def f1_mode(event: dict[str, Any]) -> str:
    """The entity F1 mode an eval event shows; events from before f1_mode was logged were conlleval's."""
    mode = event.get("f1_mode")
    return mode if mode in ("conlleval", "strict") else "conlleval"


def _new_figure(title: str, xlabel: str, ylabel: str) -> tuple[MplFigure, Axes]:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=SIZE_IN)
    (w, h), (left, right, bottom, top) = SIZE_IN, MARGINS_IN
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=12, loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))  # whole steps: 0, 20, 40
    ax.grid(True, color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    return fig, ax


def _save(fig: MplFigure, out_dir: Path, name: str, title: str) -> Figure:
    import matplotlib

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=PNG_DPI, facecolor="white")
    write_bytes_atomic(out_dir / f"{name}.png", png.getvalue())
    svg = io.StringIO()
    # Text as text (small, selectable), no timestamp, ids salted per figure so inlined SVGs never clash.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"mw-env-{name}"}):
        fig.savefig(svg, format="svg", metadata={"Date": None}, facecolor="white")
    text = svg.getvalue()
    return Figure(name=name, title=title, png=out_dir / f"{name}.png", svg=text[text.index("<svg") :])


def _plot(ax: Axes, points: Points, **style: object) -> None:
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], **style)


def smoothed_floor(smoothing: float, n_labels: int) -> float:
    """The lowest label-smoothed cross-entropy a model can reach: the entropy of the smoothed target
    (1 - e + e/K on the gold label, e/K on each other), 0.537 nats for 13 labels at e = 0.1."""
    if smoothing <= 0 or n_labels < 2:
        return 0.0
    gold, other = 1 - smoothing + smoothing / n_labels, smoothing / n_labels
    return -(gold * math.log(gold) + (n_labels - 1) * other * math.log(other))


def loss_figure(
    events: Sequence[dict[str, Any]], out_dir: Path, *, smoothing: float = 0.0, n_labels: int = 0
) -> Figure:
    """Training loss as the step computes it (label-smoothed when optim.label_smoothing > 0, so it cannot go
    below its floor, drawn) beside the held-out loss, which is plain cross-entropy: the legend says which."""
    title = (
        "Loss: training (label-smoothed) and held-out (plain)"
        if smoothing > 0
        else "Loss: training and held-out"
    )
    fig, ax = _new_figure(title, "optimizer step", "cross-entropy (nats per labelled token)")
    kind = f"label-smoothed, e={smoothing:g}, " if smoothing > 0 else ""
    raw = series(events, "step", "loss")
    train, size = thin(raw)
    evals = series(events, "eval", "loss")
    smooth = len(raw) >= 40
    per = "per step" if size == 1 else f"mean of every {size} steps"
    _plot(
        ax,
        train,
        color="tab:blue",
        linewidth=0.8,
        alpha=0.35 if smooth else 1.0,
        label=f"training loss ({kind}{per})" if smooth else f"training loss ({kind.rstrip(', ') or 'plain'})",
    )
    if smooth:
        window = max(5, len(raw) // 50) | 1
        _plot(
            ax,
            thin(moving_average(raw, window))[0],
            color="tab:blue",
            linewidth=1.8,
            label=f"training loss ({window}-step centred moving average)",
        )
    _plot(
        ax,
        evals,
        color="tab:orange",
        marker="o",
        markersize=4,
        linewidth=1.5,
        label="held-out loss (plain cross-entropy, no smoothing)",
    )
    floor = smoothed_floor(smoothing, n_labels)
    if floor > 0 and train:
        ax.axhline(
            floor,
            color="tab:blue",
            linestyle=":",
            linewidth=1.0,
            label=f"floor of the smoothed training loss: {floor:.3f} ({n_labels} labels)",
        )
    # Where the run skipped a step (non-finite) and where it was stopped and continued: one legend entry each.
    marks = (
        ("skipped_step", {"color": "tab:red", "linewidth": 0.8, "alpha": 0.6}, "skipped step (non-finite)"),
        (
            "resumed",
            {"color": "tab:green", "linestyle": "--", "linewidth": 1.0, "alpha": 0.8},
            "resumed from a checkpoint",
        ),
    )
    for kind, style, label in marks:
        steps = {e["step"] for e in events if e.get("event") == kind and isinstance(e.get("step"), int)}
        for i, step in enumerate(sorted(steps)):
            ax.axvline(step, **style, label=label if i == 0 else None)
    if not (train or evals):
        ax.text(0.5, 0.5, "no finite loss recorded", transform=ax.transAxes, ha="center", va="center")
    else:
        ax.legend(loc="upper right", fontsize=9)
    return _save(fig, out_dir, "loss", title)


def eval_figure(events: Sequence[dict[str, Any]], out_dir: Path) -> Figure | None:
    """Entity F1 / precision / recall and token accuracy per evaluation; None when no eval ran."""
    evals = [e for e in events if e.get("event") == "eval"]
    mode = f1_mode(evals[-1]) if evals else "conlleval"
    curves = [
        (f"{label} ({mode})" if key == "entity_f1" else label, series(events, "eval", key))
        for key, label in EVAL_METRICS
    ]
    if not any(points for _, points in curves):
        return None
    title = "Held-out metrics"
    fig, ax = _new_figure(title, "optimizer step", "score (0 to 1)")
    styles = ("o-", "s--", "^--", "d-")
    for (label, points), style in zip(curves, styles, strict=True):
        if points:
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                style,
                markersize=4,
                linewidth=1.4,
                label=label,
            )
    ax.set_ylim(0.0, 1.02)
    ax.legend(loc="lower right", fontsize=9)
    return _save(fig, out_dir, "eval", title)


def lr_figure(events: Sequence[dict[str, Any]], out_dir: Path) -> Figure:
    title = "Learning rate"
    fig, ax = _new_figure(title, "optimizer step", "learning rate")
    _plot(ax, thin(series(events, "step", "lr"))[0], color="tab:green", linewidth=1.6, label="learning rate")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))  # 0.0003, not an offset label
    return _save(fig, out_dir, "lr", title)


def grad_norm_figure(events: Sequence[dict[str, Any]], out_dir: Path, *, clip: float) -> Figure:
    title = "Gradient norm (before clipping)"
    fig, ax = _new_figure(title, "optimizer step", "global L2 norm of the gradients")
    _plot(
        ax,
        thin(series(events, "step", "grad_norm"))[0],
        color="tab:purple",
        linewidth=0.9,
        label="gradient norm",
    )
    if clip > 0:
        ax.axhline(clip, color="black", linestyle=":", linewidth=1.0, label=f"clip at {clip:g}")
    ax.legend(loc="upper right", fontsize=9)
    return _save(fig, out_dir, "grad_norm", title)


def histogram_figure(
    name: str, title: str, counts: Sequence[float], *, bin_width: float, xlabel: str, out_dir: Path
) -> Figure:
    """Bars of counts[k] over [k * bin_width, (k + 1) * bin_width) (the data card's length histograms)."""
    fig, ax = _new_figure(title, xlabel, "rows")
    lefts = [k * bin_width for k in range(len(counts))]
    ax.bar(
        lefts, list(counts), width=bin_width, align="edge", color="tab:blue", edgecolor="white", linewidth=0.5
    )
    from matplotlib.ticker import MultipleLocator

    ax.xaxis.set_major_locator(MultipleLocator(bin_width * max(1, math.ceil(len(counts) / 12))))  # bin edges
    return _save(fig, out_dir, name, title)
