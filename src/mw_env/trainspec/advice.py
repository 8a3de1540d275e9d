"""Warnings a user would want before hours go by: settings that are valid but almost surely not meant.

Torch-free: `train summary` shows them, and the trainer says them at start (in the log of a detached
run) and after its first steps (the CPU estimate, which needs a measured step).
"""

from __future__ import annotations

from typing import Any

from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.schedule import lr_factor
from mw_env.trainspec.schema import SETTINGS, keys_that, value_of

BIG_ON_CPU = 10_000_000  # parameters: the 30M address tagger takes minutes a step on a CPU
CPU_ETA_WARN_S = 6 * 3600.0


def config_warnings(config: TrainConfig) -> list[str]:
    """Warnings about the config alone."""
    o, r = config.optim, config.runtime
    out = []
    if o.schedule != "noam" and o.warmup_steps >= r.max_steps > 0:
        out.append(
            f"optim.warmup_steps ({o.warmup_steps}) >= runtime.max_steps ({r.max_steps}): the learning rate only "
            f"ever rises (it reaches {o.lr * lr_factor(r.max_steps - 1, o, r.max_steps):.3g} of {o.lr:g} at the "
            f"last step) and the {o.schedule} decay never starts; lower warmup_steps (e.g. "
            f"{max(1, r.max_steps // 10)}) or raise max_steps"
        )
    return out


def resume_warnings(old: dict[str, Any], config: TrainConfig, step: int) -> list[str]:
    """A resume under another schedule: the rate jumps between two steps. `old` is the checkpoint's config."""
    from mw_env.trainspec.config import config_from_dict

    if not isinstance(old, dict) or not {"optim", "runtime"} <= set(old):
        return []  # a checkpoint without its config: nothing to compare against
    try:
        before = config_from_dict(old)
    except Exception:  # an older checkpoint's config: nothing to compare against
        return []
    changed = [
        f"{k} {value_of(before, k)} -> {value_of(config, k)}"
        for k in keys_that("schedule")
        if value_of(before, k) != value_of(config, k)
    ]
    if not changed:
        return []
    lr_then = before.optim.lr * lr_factor(step, before.optim, before.runtime.max_steps)
    lr_now = config.optim.lr * lr_factor(step, config.optim, config.runtime.max_steps)
    return [
        f"the schedule changed since the checkpoint at step {step} ({'; '.join(changed)}): the learning rate "
        f"for step {step + 1} is {lr_now:.3g} where the old schedule had {lr_then:.3g}; to keep the old "
        "schedule, resume with its settings (the checkpoint's config is in report/hyperparameters.json)"
    ]


def cpu_warning(*, device: str, parameters: int, step_s: float, steps_left: int) -> str | None:
    """A big model on a CPU, said with the estimate once a step was measured."""
    if device != "cpu" or parameters < BIG_ON_CPU or steps_left <= 0:
        return None
    eta = step_s * steps_left
    if eta < CPU_ETA_WARN_S:
        return None
    hours = eta / 3600
    return (
        f"a {parameters / 1e6:.1f}M-parameter model on the CPU: {step_s:.1f} s a step, so the {steps_left} steps "
        f"left take about {hours:.0f} h; use a GPU profile (`mw-env detect` shows what this machine has), or "
        "the smoke config to try things out"
    )


def inapplicable(config: TrainConfig) -> set[str]:
    """Keys (`data.noise`) that do nothing for this config: a files corpus's report does not list the
    synthetic generator's settings, nor a synthetic run the shard settings."""
    d = config.data
    out = {s.key for s in SETTINGS if s.applies not in (None, d.source)}
    if d.tokenizer != "sentencepiece":
        out.add("data.spm_model")
    return out
