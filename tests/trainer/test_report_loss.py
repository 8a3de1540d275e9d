"""The report's loss figure says which loss is label-smoothed (issue 30 #6): the training loss (smoothed, with
its floor drawn: 0.537 nats for 13 labels at the default 0.1) beside the held-out loss (plain cross-entropy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.trainer.report.figures import loss_figure, smoothed_floor

pytest.importorskip("matplotlib")


def test_the_floor_of_the_smoothed_loss() -> None:
    assert smoothed_floor(0.1, 13) == pytest.approx(0.537, abs=5e-4)
    assert smoothed_floor(0.0, 13) == 0.0 and smoothed_floor(0.1, 1) == 0.0


def test_the_loss_figure_names_the_smoothed_and_the_plain_loss(tmp_path: Path) -> None:
    events = [{"event": "step", "step": s, "loss": 2.0 / s + 0.55} for s in range(1, 61)]
    events += [{"event": "eval", "step": s, "loss": 1.0 / s + 0.08} for s in (20, 40, 60)]
    fig = loss_figure(events, tmp_path, smoothing=0.1, n_labels=13)
    assert "label-smoothed, e=0.1" in fig.svg and "plain cross-entropy, no smoothing" in fig.svg
    assert "floor of the smoothed training loss: 0.537 (13 labels)" in fig.svg
    assert fig.title == "Loss: training (label-smoothed) and held-out (plain)" and fig.png.is_file()
    plain = loss_figure(events, tmp_path, smoothing=0.0, n_labels=13)
    assert "label-smoothed" not in plain.svg and "floor of" not in plain.svg


@pytest.mark.slow
def test_the_figure_pool_draws_the_curves_and_a_dead_worker_costs_nothing(tmp_path: Path) -> None:
    """Issue 30 #6: the curves are drawn by processes started with the run (matplotlib imported beside the
    steps), in parallel; a worker that died leaves its figures to the report, which draws them itself."""
    import json

    from mw_env.trainer.report import figure_pool
    from mw_env.trainer.report.figure_pool import FigurePool

    events = [
        {"event": "step", "step": s, "loss": 2.0 / s + 0.55, "lr": 1e-3, "grad_norm": 1.0}
        for s in range(1, 41)
    ]
    events += [{"event": "eval", "step": 40, "loss": 0.1, "entity_f1": 0.9, "token_acc": 0.95}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    out = tmp_path / "report"
    out.mkdir()
    reqs = figure_pool.run_requests(
        tmp_path / "metrics.jsonl", out, grad_clip=1.0, smoothing=0.1, n_labels=13
    )
    pool = FigurePool.start()
    assert pool is not None and len(pool.procs) == figure_pool.FIGURE_WORKERS
    try:
        drawn = pool.collect(pool.submit(reqs))
        assert set(drawn) == set(figure_pool.RUN_FIGURES)
        loss = drawn["loss"]
        assert loss is not None and "floor of the smoothed training loss" in loss.svg and loss.png.is_file()
        assert loss.svg == figure_pool.draw(reqs[0], events).svg  # the same figure as drawn here
        pool.procs[1].kill()
        pool.procs[1].wait()
        again = pool.collect(pool.submit(reqs))
        n = len(pool.procs)  # requests go round-robin: worker 1's are the caller's to draw
        assert set(again) == {r["name"] for i, r in enumerate(reqs) if i % n != 1}
    finally:
        pool.close()
    assert all(p.poll() is not None for p in pool.procs)


def test_only_a_run_long_enough_starts_the_figure_pool() -> None:
    from mw_env.trainer.report.figure_pool import MIN_STEPS, FigurePool

    assert FigurePool.for_run(main=False, max_steps=400, step=0) is None  # other ranks draw nothing
    assert FigurePool.for_run(main=True, max_steps=20, step=0) is None  # a smoke run draws its own
    assert (
        FigurePool.for_run(main=True, max_steps=400, step=400 - MIN_STEPS + 1) is None
    )  # resumed near its end
    assert (
        FigurePool.for_run(main=True, max_steps=400, step=0, figures=False) is None
    )  # runtime.report_figures


def test_no_text_of_a_figure_leaves_the_canvas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The margins are fixed, not solved per figure (figures.MARGINS_IN): every title, tick label, axis label
    and legend of each figure stays on the canvas, with the widest values a run gives (a learning rate of
    seven characters, a million rows, a long label-smoothed legend)."""
    from mw_env.trainer.report import figures as rf

    drawn = []
    save = rf._save

    def keep(fig, out_dir, name, title):  # type: ignore[no-untyped-def]
        drawn.append((name, fig))
        return save(fig, out_dir, name, title)

    monkeypatch.setattr(rf, "_save", keep)
    steps = [
        {
            "event": "step",
            "step": s,
            "loss": 2.0 / s + 0.55,
            "lr": 0.00175 * s / 400,
            "grad_norm": 123.456 / s,
        }
        for s in range(1, 401)
    ]
    evals = [
        {"event": "eval", "step": s, "loss": 0.1, "entity_f1": 0.9, "token_acc": 0.99, "f1_mode": "strict"}
        for s in (100, 400)
    ]
    events = [*steps, *evals, {"event": "resumed", "step": 200}, {"event": "skipped_step", "step": 300}]
    rf.loss_figure(events, tmp_path, smoothing=0.1, n_labels=61)
    rf.eval_figure(events, tmp_path)
    rf.lr_figure(events, tmp_path)
    rf.grad_norm_figure(events, tmp_path, clip=1.0)
    rf.histogram_figure(
        "h",
        "Input tokens per row: training",
        [5, 1_234_567, 40],
        bin_width=8,
        xlabel="tokens",
        out_dir=tmp_path,
    )
    assert [n for n, _ in drawn] == ["loss", "eval", "lr", "grad_norm", "h"]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for name, fig in drawn:
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        # Everything drawn (the tick labels matplotlib keeps beyond the axes' limits are not), in inches.
        inked = fig.get_tightbbox(canvas.get_renderer())
        width, height = fig.get_size_inches()
        assert inked.x0 >= 0 and inked.y0 >= 0, (name, inked)
        assert inked.x1 <= width and inked.y1 <= height, (name, inked)
