"""Held-out evaluation: loss, token accuracy, entity-level F1, a few addresses as tagged; early stopping."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from mw_env.trainer.data import IGNORE, Corpus, ValSource
from mw_env.trainer.distributed import DistInfo, all_reduce
from mw_env.trainer.metrics import MetricsWriter, spans
from mw_env.trainer.model import sdpa_context
from mw_env.trainer.runtime import Precision, autocast
from mw_env.trainspec.config import OptimConfig, RuntimeConfig

if TYPE_CHECKING:
    from mw_env.trainer.state import LoopState


@dataclass(frozen=True)
class EvalResult:
    loss: float
    token_acc: float
    entity_f1: float
    entity_precision: float
    entity_recall: float
    rows: int
    samples: tuple[str, ...]


def render_tagged(words: list[str], tags: list[str]) -> str:
    """`12 Oak Street, Leeds` -> `[12]house_number [Oak Street]street , [Leeds]locality`."""
    out: list[str] = []
    current: list[str] = []
    kind = ""

    def flush() -> None:
        nonlocal current, kind
        if current:
            out.append(f"[{' '.join(current)}]{kind}")
        current, kind = [], ""

    for word, tag in zip(words, tags, strict=False):
        prefix, _, typ = tag.partition("-")
        if prefix == "I" and typ == kind:
            current.append(word)
        elif prefix in ("B", "I"):
            flush()
            current, kind = [word], typ
        else:
            flush()
            out.append(word)
    flush()
    return " ".join(out)


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    val: ValSource,
    labels: Sequence[str],
    *,
    batch_size: int,
    max_batches: int,
    device: torch.device,
    precision: Precision,
    sdpa_backend: str,
    n_samples: int,
) -> EvalResult:
    """Streams the validation split (one batch in memory); entity counts accumulate as it goes."""
    was_training = model.training
    model.eval()
    loss_sum, correct, counted, rows = 0.0, 0, 0, 0
    tp = n_gold = n_pred = 0
    samples: list[str] = []
    for cpu_batch, words_rows in val.batches(batch_size, max_batches):
        batch = cpu_batch.to(device)
        with autocast(device, precision), sdpa_context(sdpa_backend):
            logits = model(batch.input_ids, batch.attention_mask)
        logits = logits.float()
        loss_sum += float(
            F.cross_entropy(
                logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE, reduction="sum"
            )
        )
        pred = logits.argmax(-1)
        keep = batch.labels != IGNORE
        correct += int((pred[keep] == batch.labels[keep]).sum())
        counted += int(keep.sum())
        for g_row, p_row, k_row, words in zip(
            batch.labels.cpu(), pred.cpu(), keep.cpu(), words_rows, strict=True
        ):
            gold = [labels[i] for i in g_row[k_row].tolist()]
            guess = [labels[i] for i in p_row[k_row].tolist()]
            gs, ps = spans(gold), spans(guess)
            tp, n_gold, n_pred = tp + len(gs & ps), n_gold + len(gs), n_pred + len(ps)
            if len(samples) < n_samples and words:
                samples.append(render_tagged(words, guess))
            rows += 1
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    if was_training:
        model.train()
    return EvalResult(
        loss=loss_sum / max(counted, 1),
        token_acc=correct / max(counted, 1),
        entity_f1=f1,
        entity_precision=p,
        entity_recall=r,
        rows=rows,
        samples=tuple(samples),
    )


def evaluate_and_decide(
    model: torch.nn.Module,
    corpus: Corpus,
    state: LoopState,  # updated in place: best F1, evaluations without a gain
    rt: RuntimeConfig,
    o: OptimConfig,
    device: torch.device,
    precision: Precision,
    metrics: MetricsWriter,
    say: Callable[[str], None],
    dist: DistInfo,
) -> bool:
    """Rank 0 evaluates; all ranks learn whether early stopping fired."""
    stop = 0.0
    if dist.main:
        result = evaluate(
            model,
            corpus.val,
            corpus.labels.names,
            batch_size=o.batch_size,
            max_batches=rt.eval_batches,
            device=device,
            precision=precision,
            sdpa_backend=rt.sdpa_backend,
            n_samples=rt.eval_samples,
        )
        metrics.log(
            "eval",
            step=state.step,
            loss=result.loss,
            token_acc=result.token_acc,
            entity_f1=result.entity_f1,
            entity_precision=result.entity_precision,
            entity_recall=result.entity_recall,
            rows=result.rows,
            samples=list(result.samples),
        )
        say(
            f"eval step {state.step}: loss {result.loss:.4f}  token acc {result.token_acc:.4f}  "
            f"entity F1 {result.entity_f1:.4f}"
        )
        for line in result.samples:
            say(f"    {line}")
        if result.entity_f1 > state.best_f1 + rt.early_stop_min_delta:
            state.best_f1, state.best_step, state.bad_evals = result.entity_f1, state.step, 0
        else:
            state.bad_evals += 1
        if rt.early_stop_patience and state.bad_evals >= rt.early_stop_patience:
            say(
                f"early stop: entity F1 has not improved on {state.best_f1:.4f} (step {state.best_step}) "
                f"for {state.bad_evals} evaluations"
            )
            stop = 1.0
    # Only rank 0's early-stopping state is meaningful; share the decision so every rank stops together.
    return bool(all_reduce(torch.tensor(stop), dist, "max") > 0)
