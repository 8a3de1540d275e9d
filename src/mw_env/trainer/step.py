"""One optimizer step: accumulate micro-batches, clip, agree on finiteness and stop, update.

Host synchronisation: one per step, `read_host(flags)`: two numbers (all ranks' finite flag, and
whether some rank was asked to stop), after the backward pass and before the update, because skipping a
non-finite update and stopping are decisions the host takes. The step's metrics (loss sum, gradient
norm, labelled words, input tokens) stay on the device in `StepOutcome.stats`: the loop reads them
only on log steps, all steps since the last read in one copy (trainer/steplog.py). Everything before
the flags read is queued without waiting for the device: the batches come from pinned memory with
non_blocking copies (the reader pins them), the token counts (counted by the reader on the host) are
copied the same way, and the stop flag is built on the device (`torch.full`), never copied from a
fresh CPU tensor (a blocking copy there would wait for the whole backward pass). fp16 adds
GradScaler's own check of its inf flag (bf16 and fp32 do not use it). Every device-to-host read of the
step and of its logging goes through `read_host` (tests/trainer/test_loop.py counts them; an evaluation,
every `eval_every` steps, reads its own results).
Not verified under `torch.cuda.set_sync_debug_mode` here: the machines that wrote this had no GPU.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mw_env.trainer.data import IGNORE, Batch
from mw_env.trainer.distributed import DistInfo, all_reduce
from mw_env.trainer.model import sdpa_context
from mw_env.trainer.runtime import ChosenPrecision, autocast
from mw_env.trainspec.schedule import lr_factor
from mw_env.trainspec.schema import OptimConfig, TrainConfig


def read_host(t: torch.Tensor) -> list[list[float]]:
    """A 2-D device tensor's rows on the host: a synchronisation (the only kind the step loop makes)."""
    rows: list[list[float]] = t.tolist()
    return rows


def balance_weights(labels: torch.Tensor, n_labels: int, power: float) -> torch.Tensor:
    """optim.label_balance: a weight per position [N] (0 where IGNORE), (label count in `labels`)^-power,
    rescaled to sum to the labelled positions. No data-dependent shapes: no host sync on a GPU."""
    keep = (labels != IGNORE).float()
    safe = labels.clamp(min=0)
    counts = (F.one_hot(safe, n_labels).float() * keep[:, None]).sum(0)
    weights = counts[safe].clamp(min=1.0).pow(-power) * keep
    return weights * keep.sum() / weights.sum().clamp(min=1e-12)


def word_loss(logits: torch.Tensor, labels: torch.Tensor, o: OptimConfig) -> torch.Tensor:
    """The summed cross-entropy of a micro-batch over its labelled positions (weighted by label_balance)."""
    flat, target = logits.float().flatten(0, 1), labels.flatten()
    if o.label_balance <= 0:
        return F.cross_entropy(
            flat, target, ignore_index=IGNORE, reduction="sum", label_smoothing=o.label_smoothing
        )
    per_word = F.cross_entropy(
        flat, target, ignore_index=IGNORE, reduction="none", label_smoothing=o.label_smoothing
    )
    return (per_word * balance_weights(target, flat.shape[-1], o.label_balance)).sum()


@dataclass(frozen=True)
class StepOutcome:
    finite: bool  # all ranks' loss and gradient norm were finite: the update was applied
    lr: float  # the rate this step used
    stats: torch.Tensor  # on the device, all ranks: loss sum, gradient norm, labelled words, input tokens
    stop: bool = False  # some rank was asked to stop (SIGTERM): all ranks stop after this step


@dataclass(kw_only=True)
class Trainer:
    """What a step needs; built once by the loop."""

    model: torch.nn.Module  # the unwrapped module (clipping, state)
    train_model: torch.nn.Module  # DDP / compiled wrapper that runs forward/backward
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    optim: OptimConfig
    sdpa_backend: str
    device: torch.device
    precision: ChosenPrecision
    dist: DistInfo

    def schedule_from(self, config: TrainConfig, step: int) -> None:
        """This run's schedule from the first resumed step on. The checkpoint's optimizer holds the rate its
        own schedule gave step `step`, and LambdaLR applies a lambda only at its next step(): under a changed
        max_steps or lr the first resumed step would run at the old rate, one step after the warning said
        the rate changed. Unchanged settings give the same float as before (bitwise resume)."""
        o = config.optim
        self.scheduler.base_lrs = [o.lr for _ in self.optimizer.param_groups]
        factor = lr_factor(step, o, config.runtime.max_steps)
        for group in self.optimizer.param_groups:
            group["initial_lr"] = o.lr
            group["lr"] = o.lr * factor
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def step(self, micro: list[Batch], stop_requested: Callable[[], bool] = lambda: False) -> StepOutcome:
        o, dist, device = self.optim, self.dist, self.device
        cuda = device.type == "cuda"
        host_counts = torch.tensor(
            [float(sum(b.n_labelled for b in micro)), float(sum(b.n_tokens for b in micro))],
            dtype=torch.float64,
        )
        counts = (host_counts.pin_memory() if cuda else host_counts).to(device, non_blocking=cuda)
        # Normalise by the labelled tokens of the whole window on all ranks: the update then equals
        # one big batch's, however the rows are split into micro-batches and processes.
        all_reduce(counts, dist)
        scale = (dist.world / counts[0].clamp(min=1.0)).float()  # DDP averages grads over ranks; undo that
        loss_sum = torch.zeros((), device=device)
        for m, cpu_batch in enumerate(micro):
            batch = cpu_batch.to(device, non_blocking=cuda)
            last = m == len(micro) - 1
            # no_sync on all micro-batches but the last: one all-reduce per optimizer step.
            sync = self.train_model.no_sync() if dist.enabled and not last else contextlib.nullcontext()
            with sync:
                with autocast(device, self.precision), sdpa_context(self.sdpa_backend):
                    logits = self.train_model(batch.input_ids, batch.attention_mask)
                loss = word_loss(logits, batch.labels, o)
                self.scaler.scale(loss * scale).backward()
            loss_sum += loss.detach()
        self.scaler.unscale_(self.optimizer)
        max_norm = o.grad_clip if o.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        all_reduce(loss_sum, dist)
        # Finite check before the update, agreed by all ranks: a bad step changes no weight. The stop
        # request rides in the same MIN all-reduce (1 - stop: min over ranks = 1 - any rank's stop).
        finite = (torch.isfinite(loss_sum) & torch.isfinite(grad_norm.to(loss_sum.device))).to(torch.float32)
        keep_going = torch.full((), 0.0 if stop_requested() else 1.0, dtype=torch.float32, device=device)
        flags = torch.stack([finite, keep_going])
        all_reduce(flags, dist, "min")
        # Queued before the update (which does not touch these tensors); read by the loop on log steps.
        stats = torch.cat([torch.stack([loss_sum.double(), grad_norm.to(loss_sum.device).double()]), counts])
        ((ok, go_on),) = read_host(flags[None])  # the step's one host synchronisation
        lr = self.optimizer.param_groups[0]["lr"]  # the rate this step uses (read before the schedule moves)
        if ok > 0:
            self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return StepOutcome(finite=ok > 0, lr=lr, stats=stats, stop=go_on < 1)
