"""Held-out evaluation: loss, word accuracy, entity-level F1 (runtime.f1_mode, both modes logged), a few addresses
as tagged; early stopping.

"token_acc" is over words: each word's BIO tag (read at its first sub-token) against the gold one; the
sub-tokens after a word's first carry no label and are not counted. "entity_f1" is the F1 of the mode
runtime.f1_mode names (scoring.py: conlleval by default, or strict IOB2); the eval event carries both
modes and names the one it shows (`f1_mode`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, astuple, dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from mw_env.trainer.data import IGNORE, Batch, ValSource
from mw_env.trainer.decoding import Decoder
from mw_env.trainer.distributed import all_reduce
from mw_env.trainer.model import sdpa_context
from mw_env.trainer.runtime import ChosenPrecision, autocast
from mw_env.trainer.scoring import F1Mode, entity_counts, eval_scope, evaluated_rows, prf
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.schema import DecodeChoice

if TYPE_CHECKING:
    import numpy as np

    from mw_env.trainer.session import Session


@dataclass(frozen=True)
class EvalResult:
    """An evaluation, its fields in the order the `eval` event has them."""

    loss: float
    token_acc: float
    entity_f1: float
    entity_precision: float
    entity_recall: float
    f1_mode: F1Mode  # which mode entity_* are in
    entity_f1_conlleval: float
    entity_f1_strict: float
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


@dataclass
class EvalSums:
    """What one process's share adds up to; summed over processes by one all-reduce."""

    loss: float = 0.0
    correct: int = 0
    counted: int = 0
    tp: int = 0
    gold: int = 0
    pred: int = 0
    rows: int = 0
    # the same three counts with entities read in strict IOB2 mode (tp, gold, pred above: conlleval)
    strict_tp: int = 0
    strict_gold: int = 0
    strict_pred: int = 0

    def result(self, samples: tuple[str, ...], mode: F1Mode = "conlleval") -> EvalResult:
        conll = prf(self.tp, self.gold, self.pred)
        strict = prf(self.strict_tp, self.strict_gold, self.strict_pred)
        p, r, f1 = strict if mode == "strict" else conll
        return EvalResult(
            loss=self.loss / max(self.counted, 1),
            token_acc=self.correct / max(self.counted, 1),
            entity_f1=f1,
            entity_precision=p,
            entity_recall=r,
            rows=self.rows,
            samples=samples,
            f1_mode=mode,
            entity_f1_conlleval=conll[2],
            entity_f1_strict=strict[2],
        )


def batch_logits(
    model: torch.nn.Module, batch: Batch, device: torch.device, precision: ChosenPrecision, sdpa_backend: str
) -> torch.Tensor:
    """The model's float32 logits [rows, tokens, labels] for a batch on `device`: the one forward pass of
    evaluation, `train evaluate` and `train predict` (what the model reads from a batch is said here once)."""
    with autocast(device, precision), sdpa_context(sdpa_backend):
        logits = model(batch.input_ids, batch.attention_mask)
    return logits.float()


def word_scores(logits: torch.Tensor, labels: torch.Tensor) -> list[np.ndarray]:
    """Each row's logits at its words' first sub-tokens (where `labels` is not IGNORE) as float32 [words,
    labels] arrays on the host: what decoding.Decoder reads. One copy per batch, of the word positions only."""
    keep = (labels != IGNORE).to(logits.device)
    flat = logits[keep].float().cpu().numpy()
    ends = keep.sum(1).cumsum(0).cpu().tolist()
    return [flat[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


@torch.no_grad()
def evaluate_share(
    model: torch.nn.Module,
    val: ValSource,
    labels: Sequence[str],
    *,
    batch_size: int,
    max_batches: int,
    device: torch.device,
    precision: ChosenPrecision,
    sdpa_backend: str,
    n_samples: int,
    decode: DecodeChoice = "argmax",
) -> tuple[EvalSums, tuple[str, ...]]:
    """This process's share of the validation split (one batch in memory); sums, not means. Each row's tags
    are read by `decode` (decoding.py), as `train evaluate` and `train predict` read them."""
    decoder = Decoder(labels, decode)
    was_training = model.training
    model.eval()
    sums = EvalSums()
    samples: list[str] = []
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    for cpu_batch, words_rows in val.batches(batch_size, max_batches):
        batch = cpu_batch.to(device, non_blocking=device.type == "cuda")
        logits = batch_logits(model, batch, device, precision, sdpa_backend)
        loss = F.cross_entropy(
            logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        loss_sum += loss.double()  # on the device: no host sync per batch for the loss
        gold_cpu = cpu_batch.labels
        keep = gold_cpu != IGNORE
        for g_row, scores, k_row, words in zip(
            gold_cpu, word_scores(logits, batch.labels), keep, words_rows, strict=True
        ):
            gold_ids = g_row[k_row].tolist()
            guess_ids = decoder.decode(scores)
            sums.correct += sum(g == p for g, p in zip(gold_ids, guess_ids, strict=True))
            sums.counted += len(gold_ids)
            gold = [labels[i] for i in gold_ids]
            guess = [labels[i] for i in guess_ids]
            tp, n_gold, n_pred = entity_counts(gold, guess, "conlleval")
            sums.tp, sums.gold, sums.pred = sums.tp + tp, sums.gold + n_gold, sums.pred + n_pred
            tp, n_gold, n_pred = entity_counts(gold, guess, "strict")
            sums.strict_tp += tp
            sums.strict_gold += n_gold
            sums.strict_pred += n_pred
            if len(samples) < n_samples and words:
                samples.append(render_tagged(words, guess))
            sums.rows += 1
    sums.loss = float(loss_sum)
    if was_training:
        model.train()
    return sums, tuple(samples)


def evaluate_and_decide(s: Session) -> bool:
    """Every rank evaluates its share of the split; one all-reduce sums them (and carries no decision:
    rank 0 decides early stopping and shares it in a second, tiny reduce). s.state is updated in place:
    the best F1, the evaluations without a gain."""
    from mw_env.trainer.lifecycle import hold

    corpus, state, dist, device, say = s.corpus, s.state, s.dist, s.trainer.device, s.say
    rt, o = s.resolved.config.runtime, s.resolved.config.optim
    if not corpus.val.rows:  # no validation split (data.val_fraction 0): said at start, skipped here
        return False
    hold("eval")  # the fault harness's eval phase
    stop = 0.0
    sums, samples = evaluate_share(
        s.trainer.model,
        corpus.val,
        corpus.labels.names,
        batch_size=o.batch_size,
        max_batches=rt.eval_batches,
        device=device,
        precision=s.trainer.precision,
        sdpa_backend=rt.sdpa_backend,
        n_samples=rt.eval_samples,
        decode=s.resolved.config.model.decode,
    )
    if dist.enabled:
        total = torch.tensor(astuple(sums), dtype=torch.float64, device=device)
        all_reduce(total, dist)
        vals = total.tolist()
        sums = EvalSums(vals[0], *(round(v) for v in vals[1:]))
    if dist.main:
        result = sums.result(samples, rt.f1_mode)
        fields = asdict(result)
        samples = fields.pop("samples")
        s.metrics.log("eval", step=state.step, **fields, val_rows=corpus.val.rows, samples=list(samples))
        say(
            f"eval step {state.step}: loss {result.loss:.4f}  token acc {result.token_acc:.4f}  "
            f"entity F1 ({result.f1_mode}) {result.entity_f1:.4f} {eval_scope(result.rows, corpus.val.rows)}"
        )
        for line in result.samples:
            say(f"    {line}")
        if result.entity_f1 > state.best_f1 + rt.early_stop_min_delta:
            state.best_f1, state.best_step, state.bad_evals = result.entity_f1, state.step, 0
        else:
            state.bad_evals += 1
        if rt.early_stop_patience and state.bad_evals >= rt.early_stop_patience:
            say(
                f"early stop: entity F1 ({result.f1_mode}) has not improved on {state.best_f1:.4f} (step {state.best_step}) "
                f"for {state.bad_evals} evaluations"
            )
            stop = 1.0
    # Only rank 0's early-stopping state is meaningful; share the decision so every rank stops together.
    return bool(all_reduce(torch.tensor(stop), dist, "max") > 0)


def evaluation_card(val_rows: int, config: TrainConfig, world: int) -> dict[str, object]:
    """The data card's `evaluation`: how many validation rows each evaluation read, of how many."""
    rt, o = config.runtime, config.optim
    rows = evaluated_rows(val_rows, world=world, batch_size=o.batch_size, eval_batches=rt.eval_batches)
    return {
        "rows": rows,
        "val_rows": val_rows,
        "share": rows / val_rows if val_rows else 0.0,
        "eval_batches": rt.eval_batches,
        "said": eval_scope(rows, val_rows),
    }
