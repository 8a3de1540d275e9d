"""The training loop, top to bottom: setup, resume, the steps (trainer/step.py), eval, save, report.

Exactness: the rows of step s are a pure function of (seed, s) (data/order.py), dropout is reseeded
per (step, rank), Python's and numpy's generators are seeded per rank and restored, and
model/optimizer/scheduler/early-stopping/data-card state round-trip through the checkpoint, so on
the CPU a run interrupted at step k and resumed ends bitwise equal to one that never stopped.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mw_env.rundir.contract import checkpoints_dir
from mw_env.trainer.agree import run_lock
from mw_env.trainer.data import Counts, Prefetcher, StepData, trace
from mw_env.trainer.distributed import DistInfo, init_distributed, shutdown
from mw_env.trainer.evaluate import evaluate_and_decide
from mw_env.trainer.finish import RunResult, finish
from mw_env.trainer.folderwatch import watching
from mw_env.trainer.lifecycle import StopFlag, hold, mark
from mw_env.trainer.metrics import MetricsWriter
from mw_env.trainer.peers import lost_peer
from mw_env.trainer.report.figure_pool import FigurePool
from mw_env.trainer.resume import corpus_lines, in_checkpoint_lanes
from mw_env.trainer.runtime import step_seed
from mw_env.trainer.session import Echo, Session
from mw_env.trainer.setup import build, find_checkpoint, prepare_folder, restore, run_facts, wrap
from mw_env.trainer.step import StepOutcome
from mw_env.trainer.steplog import PROGRESS_S, StepLog
from mw_env.trainspec.advice import config_warnings
from mw_env.trainspec.config import ResolvedConfig


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
    prepare_folder(out_dir, dist=dist, fresh=fresh, say=say)
    corpus, trainer = build(resolved=resolved, dist=dist, say=say)
    for line in config_warnings(resolved.config):
        say(f"warning: {line}")
    found, accepted = find_checkpoint(
        resolved=resolved,
        dist=dist,
        out_dir=out_dir,
        resume=resume,
        fresh=fresh,
        corpus=corpus,
        trainer=trainer,
        say=say,
    )
    facts, hparams = run_facts(resolved=resolved, dist=dist, out_dir=out_dir, trainer=trainer)
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
        metrics=MetricsWriter(out_dir, tracking=rt.tracking, hparams=hparams, enabled=dist.main),
        facts=facts,
    )
    if found is not None:
        restore(session, path=found[0], ckpt=found[1], accepted_changes=accepted)
        del found  # do not keep a second copy of the weights alive (nanoGPT #158)
    elif resolved.config.model.init_from:  # a fine-tune's start (weights/initfrom.py); a resume skips it
        session.init_from()
    session.counts = session.counts or Counts(len(corpus.labels))
    if dist.main and corpus.source == "files" and resolved.config.data.hash_shards:
        from mw_env.trainer.data.digest import ShardHasher

        session.hasher = ShardHasher(corpus.sources, out_dir)
    session.figures = FigurePool.for_run(
        main=dist.main, max_steps=rt.max_steps, step=session.state.step, figures=rt.report_figures
    )
    wrap(trainer, compile_model=rt.compile)
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
