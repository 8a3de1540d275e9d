"""Warnings a user would want (issue 20 #11): warmup >= max_steps, a schedule changed on resume, a big model on
a CPU with its ETA. Torch-free; the trainer says them (tests/trainer run it end to end)."""

from __future__ import annotations

from mw_env.trainspec.advice import config_warnings, cpu_warning, resume_warnings
from mw_env.trainspec.config import resolve_config


def _config(*overrides: str):
    return resolve_config(path=None, overrides=list(overrides)).config


def test_warmup_not_shorter_than_the_run_is_warned():
    (line,) = config_warnings(_config("optim.warmup_steps=100", "runtime.max_steps=80"))
    assert "optim.warmup_steps (100) >= runtime.max_steps (80)" in line and "decay never starts" in line
    assert config_warnings(_config("optim.warmup_steps=8", "runtime.max_steps=80")) == []
    assert (
        config_warnings(_config("optim.warmup_steps=100", "runtime.max_steps=80", "optim.schedule=noam"))
        == []
    )


def test_a_resume_under_another_max_steps_names_the_jump_in_the_learning_rate():
    old = _config("runtime.max_steps=80", "optim.warmup_steps=2", "optim.lr=3e-3")
    new = _config("runtime.max_steps=40", "optim.warmup_steps=2", "optim.lr=3e-3")
    (line,) = resume_warnings(old.to_dict(), new, step=20)
    assert "runtime.max_steps 80 -> 40" in line and "learning rate for step 21" in line
    assert resume_warnings(old.to_dict(), old, step=20) == []
    assert resume_warnings({"not": "a config"}, new, step=20) == []


def test_a_big_model_on_the_cpu_gets_its_eta():
    line = cpu_warning(device="cpu", parameters=29_800_000, step_s=87.0, steps_left=20_000)
    assert line and "29.8M-parameter model on the CPU" in line and "about 483 h" in line
    assert cpu_warning(device="cuda", parameters=29_800_000, step_s=87.0, steps_left=20_000) is None
    assert (
        cpu_warning(device="cpu", parameters=100_000, step_s=87.0, steps_left=20_000) is None
    )  # smoke-sized
    assert cpu_warning(device="cpu", parameters=29_800_000, step_s=1.0, steps_left=100) is None  # done soon
