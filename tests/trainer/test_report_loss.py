"""The report's loss figure says which loss is label-smoothed (issue 30 #6): the training loss (smoothed, with
its floor drawn: 0.537 nats for 13 labels at the default 0.1) beside the held-out loss (plain cross-entropy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.trainer.report_figures import loss_figure, smoothed_floor

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
