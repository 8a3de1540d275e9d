"""The learning-rate schedule, torch-free: the trainer's LambdaLR and `train summary` use the same function."""

from __future__ import annotations

import math

from mw_env.trainspec.schema import OptimConfig


def lr_factor(step: int, optim: OptimConfig, max_steps: int) -> float:
    """The LR multiplier for optimizer step `step` (0-based): linear warmup, then the decay."""
    warm = optim.warmup_steps
    if optim.schedule == "noam":
        # Vaswani et al.: rises linearly for `warm` steps, then decays as 1/sqrt(step); peak = 1.
        s, w = step + 1, max(warm, 1)
        return min(s / w, math.sqrt(w / s))
    if warm and step < warm:
        return (step + 1) / warm
    if optim.schedule == "constant":
        return 1.0
    span = max(max_steps - warm, 1)
    progress = min(max(step - warm, 0) / span, 1.0)
    floor = optim.min_lr_ratio
    if optim.schedule == "linear":
        return floor + (1.0 - floor) * (1.0 - progress)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))  # cosine
