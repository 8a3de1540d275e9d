"""The report's figures drawn beside the run, not after it (issue 30 #6).

Drawing the figures (matplotlib's import, a constrained layout and a PNG and an SVG per figure) took 6.3 s
after the last step of a 400-step CPU run, one figure after another, while the run waited. Now the trainer
starts FIGURE_WORKERS small processes when the run starts (rank 0, where matplotlib is installed): each
imports matplotlib and draws a throwaway figure while the steps run, then waits. At the end the run's
curves are handed out among them as requests (the metrics file's path, never the events themselves) and
drawn in parallel, with the data card's histograms, while the trainer writes the rest of the report; the
report then waits only for the slowest figure. Each figure has fixed margins (figures.MARGINS_IN): no layout
pass, about 80 ms a figure instead of 130.

A worker is `python -m mw_env.trainer.report.figure_pool` with JSON lines on stdin/stdout. It dies with the
trainer (PR_SET_PDEATHSIG), ignores SIGINT (a terminal's Ctrl-C reaches the whole group: the trainer is the
one that answers it), and anything that fails (a worker that died, a reply that is not JSON) makes the
report draw that figure itself, as before: the pool only ever saves time.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

from mw_env.trainer.report.figures import Figure

MetricEvents = Sequence[dict]  # metrics.jsonl's events as read_metrics returns them


class Request(TypedDict, total=False):
    """One figure to draw: a curve (name in RUN_FIGURES, the metrics file) or a data card histogram
    (kind "histogram": its counts and bin width), and where the files go."""

    name: str
    out: str
    metrics: str
    grad_clip: float
    smoothing: float
    n_labels: int
    kind: str
    title: str
    counts: list[float]
    bin_width: float


FIGURE_WORKERS = 3  # 4 curves and the data card histograms (2 for a smoke run): 2 figures each
RUN_FIGURES = ("loss", "eval", "lr", "grad_norm")
HIST_XLABEL = "input tokens per row"  # the data card's histograms are token lengths


MIN_STEPS = 100  # a shorter run draws its figures itself: its end is short, and the processes cost CPU


class FigurePool:
    def __init__(self, procs: list[subprocess.Popen[str]]) -> None:
        self.procs = procs

    @classmethod
    def for_run(cls, *, main: bool, max_steps: int, step: int, figures: bool = True) -> FigurePool | None:
        """A pool for rank 0 of a run with at least MIN_STEPS steps to go (max_steps 0: no limit) that draws
        figures (runtime.report_figures): three imports of matplotlib cost a few CPU seconds, which a run of a few
        steps (a smoke run) would pay for a second saved at its end."""
        if not main or not figures or 0 < max_steps < step + MIN_STEPS:
            return None
        return cls.start()

    @classmethod
    def start(cls, workers: int = FIGURE_WORKERS) -> FigurePool | None:
        """Started at the run's start; None where matplotlib is missing or a process cannot start."""
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            return None
        from mw_env.base.lifeline import preexec

        procs = []
        try:
            for _ in range(workers):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "mw_env.trainer.report.figure_pool"],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                        preexec_fn=preexec(signal.SIGKILL),
                    )
                )
        except OSError:
            cls(procs).close()
            return None
        return cls(procs)

    def submit(self, requests: Sequence[Request]) -> list[list[Request]]:
        """Hand the requests out round-robin (written now, answered in order); the per-worker lists."""
        lanes: list[list[Request]] = [[] for _ in self.procs]
        for i, req in enumerate(requests):
            lanes[i % len(self.procs)].append(req)
        for proc, lane in zip(self.procs, lanes, strict=True):
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.write("".join(json.dumps(r) + "\n" for r in lane))
                proc.stdin.flush()
        return lanes

    def collect(self, lanes: list[list[Request]]) -> dict[str, Figure | None]:
        """Each request's figure by name (None: the worker had none to draw, e.g. no evaluation); a name
        missing from the result failed here and is drawn by the caller."""
        out: dict[str, Figure | None] = {}
        for proc, lane in zip(self.procs, lanes, strict=True):
            for req in lane:
                try:
                    assert proc.stdout is not None
                    reply = json.loads(proc.stdout.readline())
                except (OSError, ValueError):
                    break  # this worker is gone: the caller draws the rest of its lane
                if "error" in reply:
                    continue
                fig = reply.get("figure")
                out[req["name"]] = (
                    None
                    if fig is None
                    else Figure(name=fig["name"], title=fig["title"], png=Path(fig["png"]), svg=fig["svg"])
                )
        return out

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError, ValueError):
                if proc.stdin is not None:
                    proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            with contextlib.suppress(OSError, ValueError):
                if proc.stdout is not None:
                    proc.stdout.close()


def run_requests(
    metrics: Path, out: Path, *, grad_clip: float, smoothing: float, n_labels: int
) -> list[Request]:
    return [
        Request(
            name=n,
            metrics=str(metrics),
            out=str(out),
            grad_clip=grad_clip,
            smoothing=smoothing,
            n_labels=n_labels,
        )
        for n in RUN_FIGURES
    ]


def histogram_request(name: str, title: str, counts: Sequence[float], width: float, out: Path) -> Request:
    return Request(
        kind="histogram", name=name, title=title, counts=list(counts), bin_width=width, out=str(out)
    )


def draw(req: Request, events: MetricEvents) -> Figure | None:
    """One request, drawn here (the worker, or the report when the pool could not)."""
    from mw_env.trainer.report import figures as rf

    out, name = Path(req["out"]), req["name"]
    if req.get("kind") == "histogram":
        return rf.histogram_figure(
            name, req["title"], req["counts"], bin_width=req["bin_width"], xlabel=HIST_XLABEL, out_dir=out
        )
    if name == "loss":
        return rf.loss_figure(events, out, smoothing=req["smoothing"], n_labels=req["n_labels"])
    if name == "eval":
        return rf.eval_figure(events, out)
    if name == "lr":
        return rf.lr_figure(events, out)
    return rf.grad_norm_figure(events, out, clip=req["grad_clip"])


def _serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure as MplFigure

    from mw_env.trainer.metrics import read_metrics

    warm = MplFigure(figsize=(2, 1))  # the fonts and the Agg and SVG backends, loaded now
    warm.add_subplot().plot([0, 1], [0, 1], label="x")
    warm.savefig(io.BytesIO(), format="png")  # rendered in memory: the warm-up writes no file
    warm.savefig(io.StringIO(), format="svg")
    events: dict[str, MetricEvents] = {}
    for line in sys.stdin:
        try:
            req = json.loads(line)
            path = req.get("metrics", "")
            if path and path not in events:
                events[path] = read_metrics(Path(path).parent)
            fig = draw(req, events.get(path, []))
            reply: dict[str, object] = {
                "figure": None
                if fig is None
                else {"name": fig.name, "title": fig.title, "png": str(fig.png), "svg": fig.svg}
            }
        except Exception as exc:  # the report draws it itself (and says what failed there)
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
