"""The training loop, top to bottom: setup, resume, step (accumulate, clip, check, update), eval, save.

Exactness: the rows of step s are a pure function of (seed, s) (data.Order), dropout is reseeded per
(step, rank), and model/optimizer/scheduler/early-stopping state round-trip through the checkpoint,
so on the CPU a run interrupted at step k and resumed ends bitwise equal to one that never stopped.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mw_env.errors import InputError, StepFailed
from mw_env.trainer import checkpoint as ckpt_mod
from mw_env.trainer.agree import agree_on_checkpoint, run_lock
from mw_env.trainer.data import IGNORE, Order, collate, load_corpus, micro_batch_indices
from mw_env.trainer.distributed import (
    DistInfo,
    all_reduce,
    barrier,
    gather_objects,
    init_distributed,
    shutdown,
)
from mw_env.trainer.evaluate import evaluate_and_decide
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.model import build_model, sdpa_context
from mw_env.trainer.runtime import (
    autocast,
    environment_facts,
    pick_device,
    resolve_precision,
    restore_rng_states,
    rng_states,
    set_determinism,
    step_seed,
)
from mw_env.trainer.state import LoopState
from mw_env.trainspec.config import (
    ResolvedConfig,
    architecture_diff,
    config_from_dict,
)
from mw_env.trainspec.schedule import lr_factor
from mw_env.trainspec.synthetic import LABELS

Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunResult:
    out_dir: Path
    step: int
    reason: str  # max_steps | early_stop | stopped | nonfinite
    last_checkpoint: Path | None
    best_f1: float
    skipped_steps: int
    precision: str
    losses: tuple[float, ...] = field(default=())


class _StopFlag:
    """SIGTERM: finish the current step, checkpoint, log `finished` reason "stopped", exit 0."""

    def __init__(self) -> None:
        self.requested = False
        self._old: Any = None

    def __enter__(self) -> _StopFlag:
        with contextlib.suppress(ValueError):  # not the main thread (tests): no handler
            self._old = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def _optimizer(model: torch.nn.Module, resolved: ResolvedConfig) -> torch.optim.AdamW:
    o = resolved.config.optim
    # No weight decay on biases, LayerNorm gains and embeddings: decay there only fights the scale.
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "emb" not in n)]
    groups = [{"params": decay, "weight_decay": o.weight_decay}, {"params": other, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps)


def _move_aside(out_dir: Path, echo: Echo) -> None:
    """--fresh: keep the old checkpoints and metrics, renamed, so a later resume cannot pick them up."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in ("checkpoints", "metrics.jsonl"):
        path = out_dir / name
        if path.exists():
            target = out_dir / f"{name}.old-{stamp}"
            path.rename(target)
            echo(f"--fresh: kept the previous {name} as {target}")


def train(
    *,
    resolved: ResolvedConfig,
    resume: Path | None = None,
    fresh: bool = False,
    echo: Echo = print,
    doctor_json: Path | None = None,
) -> RunResult:
    """Run (or continue) training as configured; returns how it ended. Raises MwEnvError on failure."""
    config = resolved.config
    rt, _o = config.runtime, config.optim
    out_dir = Path(rt.out_dir).expanduser().resolve()
    ckpt_dir = out_dir / "checkpoints"

    dist = init_distributed(
        backend=config.dist.backend,
        device_type="cuda" if (rt.device != "cpu" and torch.cuda.is_available()) else "cpu",
        timeout_s=config.dist.timeout_s,
    )
    try:
        with run_lock(out_dir, dist):  # multinode: rank 0 holds <run>/.lock (trainer/agree.py)
            return _run(resolved, dist, out_dir, ckpt_dir, resume, fresh, echo, doctor_json)
    finally:
        shutdown(dist)


def _run(
    resolved: ResolvedConfig,
    dist: DistInfo,
    out_dir: Path,
    ckpt_dir: Path,
    resume: Path | None,
    fresh: bool,
    echo: Echo,
    doctor_json: Path | None,
) -> RunResult:
    config = resolved.config
    rt, o = config.runtime, config.optim
    say: Echo = echo if dist.main else (lambda _msg: None)
    device = pick_device(rt, dist.local_rank)
    set_determinism(deterministic=rt.deterministic, threads=rt.threads, device=device)
    precision = resolve_precision(rt.precision, device)
    say(f"device {device}, precision {precision.name} ({precision.reason}), world size {dist.world}")

    if dist.main:
        out_dir.mkdir(parents=True, exist_ok=True)
        if fresh:
            _move_aside(out_dir, say)
        ckpt_mod.remove_stale_temporaries(ckpt_dir)
    barrier(dist)

    corpus = load_corpus(config)
    model = build_model(config, vocab_size=corpus.tokenizer.vocab_size, n_labels=len(LABELS)).to(device)
    optimizer = _optimizer(model, resolved)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, o, rt.max_steps))
    scaler = torch.amp.GradScaler(device.type, enabled=precision.name == "fp16")
    state = LoopState()

    def usable(path: Path, ckpt: dict[str, Any]) -> None:
        # A changed config or world size is the user's change, not a damaged file: an InputError that
        # stops here (every older checkpoint would differ the same way), never a silent fallback.
        diff = architecture_diff(config_from_dict(ckpt["config"]), config)
        if diff:
            raise InputError(
                f"cannot resume from {path}: the config changed where it must not ({'; '.join(diff)})",
                hint="restore those settings, or start over with --fresh",
            )
        if ckpt["world_size"] != dist.world:
            raise InputError(
                f"cannot resume from {path}: it was written by {ckpt['world_size']} process(es), this run has {dist.world}",
                hint="the data order depends on the world size; launch with the same --nproc-per-node",
            )
        ckpt_mod.check_for_run(
            path, ckpt, model=model, optimizer=optimizer, labels=list(LABELS), scheduler=scheduler
        )

    # multinode: every rank resumes the same checkpoint file (the newest usable one), or all stop with an
    # error naming each node's newest (trainer/agree.py).
    found = agree_on_checkpoint(
        ckpt_dir, dist, resume=resume, fresh=fresh, config=config, warn=say, check=usable
    )
    if found is not None:
        path, ckpt = found
        try:  # validated above; a failure here is still a clean error, never a traceback
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
            if "scaler" in ckpt:
                scaler.load_state_dict(ckpt["scaler"])
            state = LoopState(**ckpt["loop"])
            rngs = ckpt.get("rng") or []
            if dist.rank < len(rngs):
                restore_rng_states(rngs[dist.rank])
        except Exception as exc:
            raise ckpt_mod.CheckpointError(
                f"checkpoint {path} could not be restored ({type(exc).__name__}: {str(exc)[:200]})",
                hint="--resume an older step-*.pt, or --fresh to start over (the old ones are kept, renamed)",
            ) from None
        say(f"resumed from {path} at step {state.step}")
        del ckpt  # do not keep a second copy of the weights alive (nanoGPT #158)

    train_model: torch.nn.Module = model
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if rt.compile:
        train_model = torch.compile(train_model)  # type: ignore[assignment]

    facts = environment_facts(device, precision, dist.world)
    metrics = MetricsWriter(out_dir, tracking=rt.tracking, hparams=config.to_dict(), enabled=dist.main)
    if found is not None:
        metrics.log("resumed", step=state.step, path=str(found[0]))

    def save() -> Path | None:
        rng = gather_objects(rng_states(), dist)
        barrier(dist)
        path = None
        if dist.main:
            path = ckpt_mod.checkpoint_path(ckpt_dir, state.step)
            metrics.log("checkpoint", step=state.step, path=str(path), phase="start")
            payload = {
                "format_version": ckpt_mod.FORMAT_VERSION,
                "step": state.step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "loop": state.to_dict(),
                "data_position": {"samples_seen": state.step * window * dist.world, "order_seed": rt.seed},
                "world_size": dist.world,
                "rng": rng,
                "config": config.to_dict(),
                "config_sha256": config.sha256(),
                "config_sources": dict(resolved.sources),
                "tokenizer": corpus.tokenizer.to_state(),
                "labels": list(LABELS),
                "meta": json.loads(json.dumps(facts, default=str)),  # plain types only (weights_only)
            }
            if precision.name == "fp16":
                payload["scaler"] = scaler.state_dict()
            ckpt_mod.save_checkpoint(payload, ckpt_dir, keep_last=rt.keep_last)
            metrics.log("checkpoint", step=state.step, path=str(path), phase="done")
        barrier(dist)
        return path

    order = Order(len(corpus.train), rt.seed)
    window = o.batch_size * o.accumulation_steps
    reason = "max_steps"
    last_ckpt: Path | None = None
    losses: list[float] = []
    t_last = time.perf_counter()
    train_model.train()
    with _StopFlag() as stop:
        while state.step < rt.max_steps:
            step = state.step
            torch.manual_seed(step_seed(rt.seed, step, dist.world, dist.rank))
            micro = [
                collate(
                    corpus.train,
                    micro_batch_indices(
                        order,
                        step=step,
                        micro=m,
                        rank=dist.rank,
                        world=dist.world,
                        batch_size=o.batch_size,
                        accumulation=o.accumulation_steps,
                    ),
                ).to(device)
                for m in range(o.accumulation_steps)
            ]
            # Normalise by the labelled tokens of the whole window on all ranks: the update then equals
            # one big batch's, however the rows are split into micro-batches and processes.
            tokens = all_reduce(
                torch.tensor(float(sum(int((b.labels != IGNORE).sum()) for b in micro))), dist
            )
            scale = dist.world / max(float(tokens), 1.0)  # DDP averages grads over ranks; undo that
            loss_sum = torch.zeros((), device=device)
            for m, batch in enumerate(micro):
                last = m == len(micro) - 1
                # no_sync on all micro-batches but the last: one all-reduce per optimizer step.
                sync = train_model.no_sync() if dist.enabled and not last else contextlib.nullcontext()
                with sync:
                    with autocast(device, precision), sdpa_context(rt.sdpa_backend):
                        logits = train_model(batch.input_ids, batch.attention_mask)
                    loss = F.cross_entropy(
                        logits.float().flatten(0, 1),
                        batch.labels.flatten(),
                        ignore_index=IGNORE,
                        reduction="sum",
                        label_smoothing=o.label_smoothing,
                    )
                    scaler.scale(loss * scale).backward()
                loss_sum += loss.detach()
            scaler.unscale_(optimizer)
            max_norm = o.grad_clip if o.grad_clip > 0 else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            all_reduce(loss_sum, dist)
            # Finite check before the update, agreed by all ranks: a bad step changes no weight.
            finite = torch.isfinite(loss_sum) & torch.isfinite(grad_norm.to(loss_sum.device))
            finite = bool(all_reduce(finite.to(torch.float32), dist, "min") > 0)
            lr = optimizer.param_groups[0]["lr"]  # the rate this step uses (read before the schedule moves)
            if finite:
                scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            state.step = step + 1
            loss_value = float(loss_sum) / max(float(tokens), 1.0)
            losses.append(loss_value)
            now = time.perf_counter()
            tokens_per_s = float(tokens) / max(now - t_last, 1e-9)
            t_last = now
            metrics.log(
                "step",
                step=state.step,
                loss=loss_value,
                lr=lr,
                grad_norm=float(grad_norm),
                tokens_per_s=tokens_per_s,
            )
            if state.step % rt.log_every == 0 or state.step == 1:
                say(
                    f"step {state.step:>6}  loss {loss_value:.4f}  lr {lr:.2e}  grad_norm {float(grad_norm):.3f}  "
                    f"tok/s {tokens_per_s:,.0f}"
                )
            if not finite:
                state.skipped_steps += 1
                state.consecutive_nonfinite += 1
                why = f"non-finite {'loss' if not math.isfinite(loss_value) else 'gradient norm'}"
                metrics.log("skipped_step", step=state.step, reason=why)
                say(f"step {state.step}: {why}; update skipped ({state.consecutive_nonfinite} in a row)")
                if state.consecutive_nonfinite >= rt.max_nonfinite:
                    reason = "nonfinite"
                    break
            else:
                state.consecutive_nonfinite = 0

            # A skipped step left the weights as they were, so checkpointing after it is still sound.
            early_stop = False
            if finite and (state.step % rt.eval_every == 0 or state.step == rt.max_steps):
                early_stop = evaluate_and_decide(
                    model, corpus, state, rt, o, device, precision, metrics, say, dist
                )
            stop_now = all_reduce(torch.tensor(float(stop.requested)), dist, "max") > 0
            if early_stop or stop_now or state.step % rt.checkpoint_every == 0 or state.step == rt.max_steps:
                last_ckpt = save()
            if early_stop:
                reason = "early_stop"
                break
            if stop_now:
                reason = "stopped"
                break
    last_ckpt = last_ckpt or ckpt_mod.latest_valid_checkpoint(ckpt_dir)
    metrics.log("finished", step=state.step, reason=reason)
    metrics.close()
    if dist.main:
        from mw_env.trainer.report import write_report

        report = write_report(
            out_dir, resolved=resolved, card=corpus.card, facts=facts, doctor_json=doctor_json
        )
        say(f"report: {report}")
    if reason == "nonfinite":
        raise StepFailed(
            f"stopped at step {state.step}: {rt.max_nonfinite} optimizer steps in a row had a non-finite "
            f"loss or gradient norm (updates skipped, weights unchanged)",
            hint=f"the last good checkpoint is {last_ckpt}; lower optim.lr or raise optim.warmup_steps, "
            "and check the data; then resume",
        )
    say(f"finished at step {state.step} ({reason})")
    return RunResult(
        out_dir,
        state.step,
        reason,
        last_ckpt,
        state.best_f1,
        state.skipped_steps,
        precision.name,
        tuple(losses),
    )
