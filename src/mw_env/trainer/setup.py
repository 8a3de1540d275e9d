"""Setting up a run before its first step: the model and optimizer, the run folder, the checkpoint to resume
(checked and restored), the environment facts for the report."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

from mw_env.rundir.contract import checkpoints_dir
from mw_env.trainer.agree import agree_on_checkpoint
from mw_env.trainer.ckpt import checkpoint as ckpt_mod
from mw_env.trainer.ckpt.parts import restore as restore_parts
from mw_env.trainer.ckpt.schema import check_for_run
from mw_env.trainer.data import Corpus, open_corpus
from mw_env.trainer.distributed import DistInfo, barrier
from mw_env.trainer.lifecycle import hold
from mw_env.trainer.model import build_model
from mw_env.trainer.resume import batch_note, check_compatible, in_checkpoint_lanes, move_aside
from mw_env.trainer.runtime import (
    cpu_bounds,
    environment_facts,
    pick_device,
    resolve_precision,
    seed_host_rngs,
    set_determinism,
)
from mw_env.trainer.session import Echo, Session
from mw_env.trainer.step import Trainer
from mw_env.trainspec.advice import resume_warnings
from mw_env.trainspec.config import ResolvedConfig
from mw_env.trainspec.schedule import lr_factor


def optimizer_for(model: torch.nn.Module, resolved: ResolvedConfig) -> torch.optim.AdamW:
    o = resolved.config.optim
    # No weight decay on biases, LayerNorm gains and embeddings: decay there only fights the scale.
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "emb" not in n)]
    groups = [{"params": decay, "weight_decay": o.weight_decay}, {"params": other, "weight_decay": 0.0}]
    if o.fused:
        try:
            return torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=True)
        except RuntimeError:  # no fused kernel for this device or dtype: the loop
            pass
    return torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps)


def build(*, resolved: ResolvedConfig, dist: DistInfo, say: Echo) -> tuple[Corpus, Trainer]:
    config = resolved.config
    rt, o = config.runtime, config.optim
    device = pick_device(rt, dist.local_rank)
    threads, clamped = cpu_bounds(config)
    for warning in clamped:
        say(f"warning: {warning}")
    set_determinism(deterministic=rt.deterministic, threads=threads, device=device)
    precision = resolve_precision(rt.precision, device)
    say(f"device {device}, precision {precision.name} ({precision.reason}), world size {dist.world}")
    seed_host_rngs(rt.seed, dist.rank)
    t0 = time.perf_counter()
    hold("discovery")  # the fault harness's data-discovery phase (trainer/lifecycle.py)
    corpus = open_corpus(config, rank=dist.rank, world=dist.world)
    say(
        f"corpus: {corpus.source}, {corpus.train_rows:,} train rows, {corpus.val.rows:,} validation rows, "
        f"{len(corpus.labels)} labels ({corpus.labels.origin}); opened in {time.perf_counter() - t0:.2f} s"
    )
    if corpus.weighted is not None:
        say(f"sources (share of the rows drawn): {corpus.weighted.describe()}")
    if corpus.labels.note:
        say(f"warning: {corpus.labels.note}")
    model = build_model(config, vocab_size=corpus.tokenizer.vocab_size, n_labels=len(corpus.labels))
    model = model.to(device)
    optimizer = optimizer_for(model, resolved)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, o, rt.max_steps))
    trainer = Trainer(
        model=model,
        train_model=model,  # wrapped (DDP, torch.compile) once the checkpoint is restored: _wrap
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=torch.amp.GradScaler(device.type, enabled=precision.name == "fp16"),
        optim=o,
        sdpa_backend=rt.sdpa_backend,
        device=device,
        precision=precision,
        dist=dist,
    )
    return corpus, trainer


def restore(s: Session, *, path: Path, ckpt: dict[str, Any], accepted_changes: list[str]) -> None:
    """Load a checkpoint that passed the resume checks into the session (`accepted_changes`: the corpus
    changes data.allow_changed_corpus let through, said once here)."""
    s.accepted_changes = accepted_changes
    for line in accepted_changes:
        s.say(f"warning: corpus changed ({line}); continuing because data.allow_changed_corpus is true")
    try:  # validated when it was picked; a failure here is still a clean error, never a traceback
        restore_parts(s, ckpt)  # model, optimizer, scheduler, scaler, loop counters, this rank's RNG, counts
    except Exception as exc:
        raise ckpt_mod.CheckpointError(
            f"checkpoint {path} could not be restored ({type(exc).__name__}: {str(exc)[:200]})",
            hint="--resume an older step-*.pt, or --fresh to start over (the old ones are kept, renamed)",
        ) from None
    s.trainer.schedule_from(s.resolved.config, s.state.step)
    for line in [f"resumed from {path} at step {s.state.step}", *batch_note(s.corpus, s.resolved.config)]:
        s.say(line)
    for line in resume_warnings(ckpt.get("config") or {}, s.resolved.config, s.state.step):
        s.say(f"warning: {line}")
    s.metrics.log("resumed", step=s.state.step, path=str(path))
    if accepted_changes:
        s.metrics.log("corpus_changed", step=s.state.step, changes=accepted_changes)


def wrap(trainer: Trainer, *, compile_model: bool) -> None:
    if trainer.dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        dev = trainer.device
        trainer.train_model = DDP(trainer.model, device_ids=[dev.index] if dev.type == "cuda" else None)
    if compile_model:
        trainer.train_model = torch.compile(trainer.train_model)


def prepare_folder(out_dir: Path, *, dist: DistInfo, fresh: bool, say: Echo) -> None:
    """Rank 0 makes the run folder (--fresh: the old run moved aside) and clears a crashed save's temporaries."""
    if dist.main:
        out_dir.mkdir(parents=True, exist_ok=True)
        if fresh:
            move_aside(out_dir, say)
        ckpt_mod.remove_stale_temporaries(checkpoints_dir(out_dir))
    barrier(dist)


def find_checkpoint(
    *,
    resolved: ResolvedConfig,
    dist: DistInfo,
    out_dir: Path,
    resume: Path | None,
    fresh: bool,
    corpus: Corpus,
    trainer: Trainer,
    say: Echo,
) -> tuple[tuple[Path, dict[str, Any]] | None, list[str]]:
    """The checkpoint to resume (None: a fresh start) and the corpus changes data.allow_changed_corpus let
    through for it. multinode: every rank resumes the same file (the newest usable one), or all stop with an
    error naming each node's newest (trainer/agree.py)."""
    accepted: dict[Path, list[str]] = {}

    def usable(path: Path, ckpt: dict[str, Any]) -> None:
        # A changed config, label set or corpus (or a world size the global batch does not split over) is the
        # user's change, not a damaged file: an InputError that stops the search (every older checkpoint would
        # differ the same way). A checkpoint this trainer's objects cannot take is damaged: CheckpointError, the
        # previous one is tried.
        in_lanes = in_checkpoint_lanes(ckpt, corpus)  # a resume keeps the run's lanes and global batch
        accepted[path] = check_compatible(path, ckpt, config=resolved.config, dist=dist, corpus=in_lanes)
        check_for_run(
            path,
            ckpt,
            model=trainer.model,
            optimizer=trainer.optimizer,
            labels=list(corpus.labels.names),
            scheduler=trainer.scheduler,
        )

    found = agree_on_checkpoint(
        checkpoints_dir(out_dir),
        dist,
        resume=resume,
        fresh=fresh,
        config=resolved.config,
        warn=say,
        check=usable,
    )
    return found, (accepted.get(found[0], []) if found is not None else [])


def run_facts(
    *, resolved: ResolvedConfig, dist: DistInfo, out_dir: Path, trainer: Trainer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The environment facts for the report and the hyperparameters for the trackers."""
    facts = environment_facts(trainer.device, trainer.precision, dist.world)
    if dist.env_mismatch:  # the nodes' environments differ; --allow-env-mismatch (trainer/envcheck.py)
        facts["env_mismatch"] = dist.env_mismatch
    hparams = resolved.config.to_dict()
    if dist.main:
        # The run carries the venv's lock (copied once; a resume keeps the first): its hash goes to the
        # report and MLflow's params, and `mw-env bootstrap --lock RUN/pylock.mw-env.toml` rebuilds the venv.
        from mw_env.venv.lock import carry
        from mw_env.venv.lock.atlaunch import drift_fact

        carried = carry(Path(sys.prefix), out_dir)  # written from the venv at launch where it drifted
        if carried is not None:
            facts["env_lock"] = {"file": carried[0].name, "sha256": carried[1]}
            hparams["env"] = {"lock": carried[0].name, "lock_sha256": carried[1]}
        # A venv changed since its lock: the report and the data card name it, and what the run's lock holds.
        facts["venv_drift"] = drift_fact(Path(sys.prefix), carried[1] if carried else None)
    return facts, hparams
