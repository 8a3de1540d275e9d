"""The loop on the CPU: smoke trains and its loss falls; events, report, manifest; non-finite steps;
early stopping."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.base.errors import StepFailed
from mw_env.trainspec.config import find_config, resolve_config

from .helpers import events, step_losses, tiny_config

pytestmark = pytest.mark.torch


def _count_host_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """Every device-to-host read of the step loop, in order: ("flags", 2) for a step's finite/stop decision,
    ("metrics", n) for n steps' metrics read at once, ("stray", where) for any other read (a tensor's item,
    tolist, float, int or bool called from step.py, steplog.py or loop.py but not through read_host)."""
    import sys

    import torch

    import mw_env.trainer.loop as loop_mod
    import mw_env.trainer.step as step_mod
    import mw_env.trainer.steplog as steplog_mod

    reads: list[tuple[str, object]] = []
    real = step_mod.read_host

    def counted(t: torch.Tensor) -> list:
        # flags: one row of 2 (finite, keep going); metrics: one row of 4 per step read
        reads.append(("flags", t.shape[1]) if t.shape[1] == 2 else ("metrics", t.shape[0]))
        return real(t)

    monkeypatch.setattr(step_mod, "read_host", counted)
    monkeypatch.setattr(steplog_mod, "read_host", counted)
    monkeypatch.setattr(steplog_mod, "FLUSH_S", float("inf"))  # log steps only, however slow the machine
    watched = {step_mod.__file__, steplog_mod.__file__, loop_mod.__file__}

    def spy(name: str) -> object:
        orig = getattr(torch.Tensor, name)

        def wrapper(self, *a, **k):
            code = sys._getframe(1).f_code
            if code.co_filename in watched and code.co_name != "read_host":
                reads.append(("stray", f"{code.co_name}: {name}"))
            return orig(self, *a, **k)

        return wrapper

    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, spy(name))
    return reads


def test_smoke_config_trains_and_loss_falls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mw_env.rundir.manifest import verify_manifest
    from mw_env.trainer.ckpt.checkpoint import list_checkpoints
    from mw_env.trainer.loop import train

    out = tmp_path / "smoke"
    resolved = resolve_config(path=find_config("smoke"), overrides=[f"runtime.out_dir={out}"])
    said: list[str] = []
    reads = _count_host_reads(monkeypatch)
    result = train(resolved=resolved, echo=said.append)
    assert (result.step, result.reason, result.precision) == (20, "max_steps", "fp32")
    # One read a step (its finite and stop flags); the metrics only on log steps (log_every 5, and step 1),
    # every step since the last read in one copy: steps 2-4 read nothing but their flags.
    flags = ("flags", 2)
    assert (
        reads
        == [flags, ("metrics", 1)] + ([flags] * 4 + [("metrics", 4)]) + ([flags] * 5 + [("metrics", 5)]) * 3
    )
    losses = [step_losses(out)[s] for s in range(1, 21)]
    assert losses == list(result.losses)  # every step's event, read late, is the step's own
    times = [e["time"] for e in events(out, "step")]
    assert times == sorted(times) and len(times) == 20  # each event keeps its step's end time, in order
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses  # it learns, not just wiggles
    evals = events(out, "eval")
    assert [e["step"] for e in evals] == [10, 20]
    assert all(0.0 <= e["entity_f1"] <= 1.0 and 0.0 <= e["token_acc"] <= 1.0 for e in evals)
    # The F1 shown is named (runtime.f1_mode, conlleval by default) and both modes are logged.
    assert all(e["f1_mode"] == "conlleval" and e["entity_f1"] == e["entity_f1_conlleval"] for e in evals)
    assert all(0.0 <= e["entity_f1_strict"] <= 1.0 for e in evals)
    assert evals[-1]["samples"] and "[" in evals[-1]["samples"][0]  # held-out addresses as tagged
    assert any(line.startswith("    [") or line.startswith("    ") for line in said)
    step = events(out, "step")[0]
    assert {"step", "loss", "lr", "grad_norm", "tokens_per_s", "time"} <= step.keys()
    phases = [(e["step"], e["phase"]) for e in events(out, "checkpoint")]
    assert phases == [(10, "start"), (10, "done"), (20, "start"), (20, "done")]
    assert events(out)[-1]["event"] == "finished" and events(out)[-1]["reason"] == "max_steps"
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == [
        "step-000000010.pt",
        "step-000000020.pt",
    ]
    for name in (
        "report.md",
        "report.html",
        "loss.png",
        "lr.png",
        "hyperparameters.json",
        "data_card.json",
        "environment.json",
        "packages.txt",
    ):
        assert (out / "report" / name).is_file(), name
    assert "torch==" in (out / "report" / "packages.txt").read_text()
    assert (
        "no native bf16" in (out / "report" / "report.md").read_text()
        or "fp32 requested" in (out / "report" / "report.md").read_text()
    )
    check = verify_manifest(out)
    assert check.ok and check.checked >= 10


def test_checkpoint_holds_resolved_config_and_loads_weights_only(tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.ckpt.checkpoint import latest_valid_checkpoint, load_checkpoint, model_from_checkpoint
    from mw_env.trainer.loop import train

    resolved = tiny_config(tmp_path / "r", "runtime.max_steps=4")
    train(resolved=resolved, echo=lambda _m: None)
    path = latest_valid_checkpoint(tmp_path / "r" / "checkpoints")
    assert path is not None and path.name == "step-000000004.pt"
    ckpt = load_checkpoint(path)
    assert ckpt["config"] == resolved.config.to_dict() and ckpt["config_sha256"] == resolved.config.sha256()
    assert ckpt["meta"]["torch"] == torch.__version__ and ckpt["loop"]["step"] == 4
    model, tok, labels = model_from_checkpoint(path)
    assert labels[0] == "O" and tok.vocab_size == 260
    out = model(torch.tensor([[1, 50, 60, 2]]), torch.ones(1, 4, dtype=torch.bool))
    assert out.shape == (1, 4, len(labels))


def test_nonfinite_steps_are_skipped_then_the_run_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    import torch.nn.functional as F

    from mw_env.trainer.ckpt.checkpoint import list_checkpoints, load_checkpoint
    from mw_env.trainer.loop import train

    real = F.cross_entropy
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("label_smoothing"):  # training calls only, not evaluation
            calls["n"] += 1
            if calls["n"] > 5:
                return out * float("nan")
        return out

    monkeypatch.setattr(F, "cross_entropy", poisoned)
    out = tmp_path / "nan"
    with pytest.raises(StepFailed) as exc:
        train(resolved=tiny_config(out, "runtime.max_nonfinite=2"), echo=lambda _m: None)
    assert "2 optimizer steps in a row" in exc.value.message and "step-000000004.pt" in (exc.value.hint or "")
    skipped = events(out, "skipped_step")
    assert [e["step"] for e in skipped] == [6, 7] and "non-finite loss" in skipped[0]["reason"]
    assert events(out)[-1] == {**events(out)[-1], "event": "finished", "reason": "nonfinite", "step": 7}
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-000000004.pt"]
    assert step_losses(out)[6] is None  # NaN is logged as JSON null, the line stays parseable
    assert torch.isfinite(
        torch.cat(
            [
                t.flatten()
                for t in load_checkpoint(out / "checkpoints" / "step-000000004.pt")["model"].values()
            ]
        )
    ).all()


def test_early_stopping(tmp_path: Path) -> None:
    from mw_env.trainer.loop import train

    out = tmp_path / "es"
    # min_delta 2.0 is unreachable for an F1, so the second evaluation already stops the run.
    resolved = tiny_config(
        out, "runtime.eval_every=2", "runtime.early_stop_patience=2", "runtime.early_stop_min_delta=2.0"
    )
    result = train(resolved=resolved, echo=lambda _m: None)
    assert (result.reason, result.step) == ("early_stop", 4)
    assert events(out)[-1]["reason"] == "early_stop"
    assert (out / "checkpoints" / "step-000000004.pt").is_file()
