"""The training loop, top to bottom: setup, resume, the steps (trainer/step.py), eval, save, report.

Exactness: the rows of step s are a pure function of (seed, s) (data/order.py), dropout is reseeded
per (step, rank), Python's and numpy's generators are seeded per rank and restored, and
model/optimizer/scheduler/early-stopping/data-card state round-trip through the checkpoint, so on
the CPU a run interrupted at step k and resumed ends bitwise equal to one that never stopped.

The checkpoint's payload is written by session.py (its docstring lists the keys).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mw_env.rundir.contract import checkpoints_dir
from mw_env.trainer.agree import run_lock
from mw_env.trainer.ckpt import checkpoint as ckpt_mod
from mw_env.trainer.ckpt.parts import restore as restore_parts
from mw_env.trainer.data import Corpus, Counts, Prefetcher, StepData, open_corpus, trace
from mw_env.trainer.distributed import (
    DistInfo,
    barrier,
    init_distributed,
    shutdown,
)
from mw_env.trainer.evaluate import evaluate_and_decide
from mw_env.trainer.finish import RunResult, finish
from mw_env.trainer.folderwatch import watching
from mw_env.trainer.lifecycle import StopFlag, hold, mark
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.model import build_model
from mw_env.trainer.peers import lost_peer
from mw_env.trainer.report.figure_pool import FigurePool
from mw_env.trainer.resume import (
    batch_note,
    check_compatible,
    corpus_lines,
    in_checkpoint_lanes,
    move_aside,
    pick_checkpoint,
)
from mw_env.trainer.runtime import (
    cpu_bounds,
    environment_facts,
    pick_device,
    resolve_precision,
    seed_host_rngs,
    set_determinism,
    step_seed,
)
from mw_env.trainer.session import Echo, Session
from mw_env.trainer.step import StepOutcome, Trainer
from mw_env.trainer.steplog import PROGRESS_S, StepLog
from mw_env.trainspec.advice import config_warnings, resume_warnings
from mw_env.trainspec.config import ResolvedConfig
from mw_env.trainspec.schedule import lr_factor


def _optimizer(model: torch.nn.Module, resolved: ResolvedConfig) -> torch.optim.AdamW:
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
    rt = config.runtime
    out_dir = Path(rt.out_dir).expanduser().resolve()
    dist = init_distributed(
        backend=config.dist.backend,
        device_type="cuda" if (rt.device != "cpu" and torch.cuda.is_available()) else "cpu",
        timeout_s=config.dist.timeout_s,
    )
    try:
        # multinode: rank 0 holds <run>/.lock (trainer/agree.py) and watches the folder (folderwatch.py)
        with run_lock(out_dir, dist) as lock, watching(out_dir, enabled=dist.main, keep=lock):
            return _run(
                resolved=resolved,
                dist=dist,
                out_dir=out_dir,
                resume=resume,
                fresh=fresh,
                echo=echo,
                doctor_json=doctor_json,
            )
    except RuntimeError as exc:  # a node or process that died shows here as a transport error
        lost = lost_peer(exc, dist, checkpoints_dir(out_dir))
        if lost is None:
            raise
        raise lost from None
    finally:
        shutdown(dist)


def _build(*, resolved: ResolvedConfig, dist: DistInfo, say: Echo) -> tuple[Corpus, Trainer]:
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
    optimizer = _optimizer(model, resolved)
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


def _restore(s: Session, *, path: Path, ckpt: dict[str, Any], accepted_changes: list[str]) -> None:
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


def _wrap(trainer: Trainer, *, compile_model: bool) -> None:
    if trainer.dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        dev = trainer.device
        trainer.train_model = DDP(trainer.model, device_ids=[dev.index] if dev.type == "cuda" else None)
    if compile_model:
        trainer.train_model = torch.compile(trainer.train_model)


def _run(
    *,
    resolved: ResolvedConfig,
    dist: DistInfo,
    out_dir: Path,
    resume: Path | None,
    fresh: bool,
    echo: Echo,
    doctor_json: Path | None,
) -> RunResult:
    rt = resolved.config.runtime
    say: Echo = echo if dist.main else (lambda _msg: None)
    ckpt_dir = checkpoints_dir(out_dir)
    if dist.main:
        out_dir.mkdir(parents=True, exist_ok=True)
        if fresh:
            move_aside(out_dir, say)
        ckpt_mod.remove_stale_temporaries(ckpt_dir)
    barrier(dist)
    corpus, trainer = _build(resolved=resolved, dist=dist, say=say)
    for line in config_warnings(resolved.config):
        say(f"warning: {line}")

    accepted: dict[Path, list[str]] = {}  # per checked checkpoint: the corpus changes allowed through

    def usable(path: Path, ckpt: dict[str, Any]) -> None:
        # A changed config, label set or corpus (or a world size the global batch does not split over) is the
        # user's change, not a damaged file: an InputError that stops the search (every older checkpoint would
        # differ the same way). A checkpoint this trainer's objects cannot take is damaged: CheckpointError, the
        # previous one is tried.
        in_lanes = in_checkpoint_lanes(ckpt, corpus)  # a resume keeps the run's lanes and global batch
        accepted[path] = check_compatible(path, ckpt, config=resolved.config, dist=dist, corpus=in_lanes)
        ckpt_mod.check_for_run(
            path,
            ckpt,
            model=trainer.model,
            optimizer=trainer.optimizer,
            labels=list(corpus.labels.names),
            scheduler=trainer.scheduler,
        )

    # multinode: every rank resumes the same checkpoint file (the newest usable one), or all stop with an
    # error naming each node's newest (trainer/agree.py, through resume.pick_checkpoint).
    found = pick_checkpoint(
        ckpt_dir, dist, resume=resume, fresh=fresh, config=resolved.config, warn=say, check=usable
    )
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
    metrics = MetricsWriter(out_dir, tracking=rt.tracking, hparams=hparams, enabled=dist.main)
    corpus = in_checkpoint_lanes(found[1], corpus) if found is not None else corpus
    for line in corpus_lines(corpus):  # the split, the units, the lanes it reads (a resume: the run's)
        say(line)
    session = Session(
        resolved=resolved,
        dist=dist,
        out_dir=out_dir,
        say=say,
        corpus=corpus,
        trainer=trainer,
        metrics=metrics,
        facts=facts,
    )
    if found is not None:
        resumed_from = found[0]
        _restore(session, path=resumed_from, ckpt=found[1], accepted_changes=accepted.get(resumed_from, []))
        del found  # do not keep a second copy of the weights alive (nanoGPT #158)
        metrics.log("resumed", step=session.state.step, path=str(resumed_from))
        if session.accepted_changes:
            metrics.log("corpus_changed", step=session.state.step, changes=session.accepted_changes)
    elif resolved.config.model.init_from:  # a fine-tune's start (weights/initfrom.py); a resume skips it
        session.init_from()
    session.counts = session.counts or Counts(len(corpus.labels))
    if dist.main and corpus.source == "files" and resolved.config.data.hash_shards:
        from mw_env.trainer.data.digest import ShardHasher

        session.hasher = ShardHasher(corpus.sources, out_dir)
    session.figures = FigurePool.for_run(
        main=dist.main, max_steps=rt.max_steps, step=session.state.step, figures=rt.report_figures
    )
    _wrap(trainer, compile_model=rt.compile)
    mark(out_dir, "running", main=dist.main, step=session.state.step)
    if 0 < rt.max_steps <= session.state.step:
        say(
            f"the run in {out_dir} is already at step {session.state.step} (runtime.max_steps {rt.max_steps}): "
            "nothing left to train; writing its report. To start again: --fresh (the old checkpoints are kept, "
            "renamed) or another runtime.out_dir; to train on: --set runtime.max_steps=N"
        )
    try:
        reason, last_ckpt, losses = _train_loop(session)
        return finish(session, reason=reason, last_ckpt=last_ckpt, losses=losses, doctor_json=doctor_json)
    finally:
        for closing in (session.hasher, session.figures):
            if closing is not None:
                closing.close()


@dataclass
class _Steps:
    """What the loop carries from step to step besides session.state (the counters a checkpoint keeps)."""

    reader: Prefetcher  # the steps' rows, read and encoded in the background from state.step on
    tracer: trace.TraceWriter | None  # MW_ENV_TRACE_ROWS: each step's rows, by rank
    log: StepLog  # the steps' events, held on the device until a log step (trainer/steplog.py)
    last_ckpt: Path | None = None
    # Data wait in two figures: the first fill (the first window read and encoded before step 1 can run)
    # and the steady state (every later step), so a slow start does not hide in, or inflate, the share.
    first_fill: float | None = None
    waited: float = 0.0
    t_first: float = field(default_factory=time.perf_counter)  # where the steady state starts
    t_last: float = field(default_factory=time.perf_counter)  # the last step's end

    def next_data(self, step: int) -> tuple[StepData, float]:
        """Step `step`'s rows and the seconds spent waiting for them."""
        data, waited = self.reader.get(step)
        if self.first_fill is None:
            self.first_fill, self.t_first = waited, time.perf_counter()
        else:
            self.waited += waited
        return data, waited


def _train_loop(s: Session) -> tuple[str, Path | None, list[float]]:
    """The steps up to runtime.max_steps; returns why the loop ended (max_steps, nonfinite, early_stop or
    stopped), the last checkpoint it wrote and every step's loss."""
    rt, dist, state = s.resolved.config.runtime, s.dist, s.state
    ended: str | None = None  # why the loop ends before max_steps
    s.trainer.train_model.train()
    with _opened(s) as run, StopFlag() as stop:
        while state.step < rt.max_steps:
            data, waited = run.next_data(state.step)
            hold(f"step-{state.step}")  # the fault harness's step phase (trainer/lifecycle.py)
            torch.manual_seed(step_seed(rt.seed, state.step, dist.world, dist.rank))  # dropout's, per rank
            out = s.trainer.step(data.micro, lambda: stop.requested)
            if ended := _after_step(s, run=run, out=out, data=data, waited=waited):
                break
            early_stop = _maybe_evaluate(s, run=run, out=out)
            if ended := _maybe_save_or_stop(s, run=run, out=out, early_stop=early_stop, stop=stop):
                break
    steady_s = time.perf_counter() - run.t_first
    s.metrics.log(
        "data_wait",
        step=state.step,
        first_fill_s=run.first_fill or 0.0,
        seconds=run.waited,  # steady state: every step after the first
        share=run.waited / max(steady_s, 1e-9),
    )
    return ended or "max_steps", run.last_ckpt, run.log.losses


@contextlib.contextmanager
def _opened(s: Session) -> Iterator[_Steps]:
    """The loop's reader (and row trace) open while it runs; its held step events flushed when it ends."""
    rt = s.resolved.config.runtime
    producer = s.corpus.producer(stop=rt.max_steps)
    reader = Prefetcher(
        producer,
        start=s.state.step,
        stop=rt.max_steps,
        depth=s.resolved.config.data.prefetch_steps,
        pin=s.trainer.device.type == "cuda",
    )
    log = StepLog(
        metrics=s.metrics,
        say=s.say,
        log_every=rt.log_every,
        max_steps=rt.max_steps,
        device=s.trainer.device.type,
        parameters=lambda: sum(p.numel() for p in s.trainer.model.parameters()),
        rows_per_step=s.corpus.layout.global_rows,  # the global batch: the run's lanes x their rows a step
        progress_every=PROGRESS_S if s.dist.main and sys.stdout.isatty() else None,
    )
    tracer = trace.TraceWriter(s.out_dir, s.dist.rank) if trace.enabled() else None
    run = _Steps(reader=reader, tracer=tracer, log=log)
    try:
        yield run
        log.flush()
    except BaseException:
        with contextlib.suppress(Exception):  # the steps done before the error keep their events; the
            log.flush()  # error itself is the one to report, not a second one from reading the device
        raise
    finally:
        reader.close()
        producer.close()
        if run.tracer is not None:
            run.tracer.close()


def _after_step(s: Session, *, run: _Steps, out: StepOutcome, data: StepData, waited: float) -> str | None:
    """The step's bookkeeping: its label counts, its rows traced, its event held, a skipped (non-finite) step
    counted and said; "nonfinite" when runtime.max_nonfinite came in a row."""
    state = s.state
    assert s.counts is not None  # set (fresh, or from the checkpoint) before the first step
    s.counts.merge(data.counts)
    if run.tracer is not None:
        run.tracer.write(state.step, data.ids)
    state.step += 1
    now = time.perf_counter()
    run.log.add(state.step, out, waited, now - run.t_last)  # its metrics are read on log steps only
    run.t_last = now
    if out.finite:
        state.consecutive_nonfinite = 0
        return None
    state.skipped_steps += 1
    state.consecutive_nonfinite += 1
    why = run.log.nonfinite_reason()
    s.metrics.log("skipped_step", step=state.step, reason=why)
    s.say(f"step {state.step}: {why}; update skipped ({state.consecutive_nonfinite} in a row)")
    return "nonfinite" if state.consecutive_nonfinite >= s.resolved.config.runtime.max_nonfinite else None


def _maybe_evaluate(s: Session, *, run: _Steps, out: StepOutcome) -> bool:
    """Every runtime.eval_every steps and at the last (not after a skipped step): evaluate; True when early
    stopping says stop."""
    rt, step = s.resolved.config.runtime, s.state.step
    if not out.finite or (step % rt.eval_every and step != rt.max_steps):
        return False
    run.log.flush()  # the steps' events before the evaluation's
    return evaluate_and_decide(s)


def _maybe_save_or_stop(
    s: Session, *, run: _Steps, out: StepOutcome, early_stop: bool, stop: StopFlag
) -> str | None:
    """Every runtime.checkpoint_every steps, at the last and before the loop stops: a checkpoint (a skipped step
    left the weights as they were, so one after it is still sound); "early_stop" or "stopped" to stop now."""
    rt, dist, step = s.resolved.config.runtime, s.dist, s.state.step
    # Agreed by all ranks inside the step's one synchronisation; a single process also takes a SIGTERM that
    # came after that point, instead of computing one more (maybe long) step.
    stopped = out.stop or (not dist.enabled and stop.requested)
    if stopped:
        mark(s.out_dir, "stopping", main=dist.main, step=step)
    final = early_stop or stopped or step == rt.max_steps
    if final or step % rt.checkpoint_every == 0:
        run.log.flush()  # the steps' events before the checkpoint's
        run.last_ckpt = s.save(final=final)
    return "early_stop" if early_stop else "stopped" if stopped else None
