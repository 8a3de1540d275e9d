"""Each setting's declaration (trainspec/schema.py `setting(...)`) against what the setting does.

Every setting is changed alone, on a synthetic and on a files corpus; the corpus is reopened the way a resume
opens it (in the checkpoint's lanes) and the rows of its first steps are read. Where they differ from the
unchanged run's, the resume must say so (check_compatible refuses or names a corpus change): a setting that
changes the data order but is declared as nothing would let a resume go on silently, and fails here. A
setting declared `order=` must change the corpus's order record, one declared "architecture" the
architecture diff, and one declared `order=` must change the rows read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError
from mw_env.trainer.data import BUNDLED, Corpus, open_corpus
from mw_env.trainer.distributed import DistInfo
from mw_env.trainer.resume import check_compatible, in_checkpoint_lanes
from mw_env.trainspec.config import TrainConfig, architecture_diff
from mw_env.trainspec.schema import SETTINGS, WeightedSource, value_of
from mw_env.trainspec.validate import CHOICES, FLOAT_RANGES, INT_RANGES, validate

from .helpers import files_config, tiny_config, write_parquet_corpus

STEPS = 3
SMALL = ("data.synthetic_rows=48", "data.synthetic_val_rows=8", "optim.batch_size=4", "data.shuffle_rows=24")

# Values the generic perturbation cannot find (lists, paths, pairs of keys), from the files corpus's folder.
EXPLICIT: dict[str, Callable[[Path], dict[str, Any]]] = {
    "data.train_files": lambda corpus: {"data.train_files": (str(corpus / "shard-00.parquet"),)},
    "data.sources": lambda corpus: {
        "data.train_files": (),
        "data.sources": tuple(
            WeightedSource(files=(str(corpus / f"shard-0{k}.parquet"),), weight=1.0 + 2 * k, name=f"s{k}")
            for k in (0, 1)
        ),
    },
    "data.val_files": lambda corpus: {"data.val_files": (str(corpus.parent / "val" / "shard-00.parquet"),)},
    "data.labels": lambda _: {"data.labels": tuple(reversed(BUNDLED.names))},
    "data.countries": lambda _: {"data.countries": ("US",)},
    "data.spm_model": lambda _: {"data.spm_model": "tokenizer.model"},
    "runtime.device": lambda _: {"runtime.device": "cpu"},
    "model.words": lambda _: {"model.words": "none"},  # "ngrams" is what "auto" builds with bytes
}


def _replace(config: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    for key, value in values.items():
        section, _, name = key.partition(".")
        part = dataclasses.replace(getattr(config, section), **{name: value})
        config = dataclasses.replace(config, **{section: part})
    return config


# Settings no change of which opens a corpus here, and why that is fine.
UNCHANGEABLE = {
    "data.tokenizer": "sentencepiece needs a trained model file; declared architecture (refused on a resume)",
    "data.source": "the other kind is the other corpus; declared architecture (refused on a resume)",
}


def _candidates(key: str, value: Any) -> list[Any]:
    """Other values of `key`, in order of preference (the first one validate accepts is used)."""
    if key in CHOICES:
        return [v for v in CHOICES[key] if v != value]
    if isinstance(value, bool):
        return [not value]
    if key in INT_RANGES:
        lo, hi = INT_RANGES[key]
        return [v for v in (value * 2, value + 1, lo, value - 1) if v != value and lo <= v <= hi]
    if key in FLOAT_RANGES:
        lo, hi = FLOAT_RANGES[key][:2]
        return [v for v in (value / 2, (value + min(hi, 1.0)) / 2) if v != value]
    if isinstance(value, str):
        return [value + "x"]
    return []


def _changed(config: TrainConfig, key: str, corpus: Path) -> TrainConfig | None:
    if key in EXPLICIT:
        options = [_replace(config, EXPLICIT[key](corpus))]
    else:
        options = [_replace(config, {key: v}) for v in _candidates(key, value_of(config, key))]
    for option in options:
        try:
            validate(option)
        except InputError:
            continue
        return option
    return None


def _rows(corpus: Corpus) -> list[list[tuple[Any, ...]]]:
    """Each step's rows: where each came from and its tokens and targets (padding cut off)."""
    producer = corpus.producer(stop=STEPS)
    out = []
    try:
        for step in range(STEPS):
            data = producer(step)
            ids = iter(data.ids or [])
            rows: list[tuple[Any, ...]] = []
            for b in data.micro:
                for i in range(b.input_ids.shape[0]):
                    n = int(b.attention_mask[i].sum())
                    rows.append((tuple(next(ids)), b.input_ids[i, :n].tolist(), b.labels[i, :n].tolist()))
            out.append(rows)
    finally:
        producer.close()
    return out


def _reopened(base: TrainConfig, corpus: Corpus, config: TrainConfig) -> tuple[Corpus | None, bool]:
    """The corpus as a resume of the base run under `config` lays it out (None: it cannot be opened, which
    refuses the resume), and whether that resume would speak (refuse, or name a corpus change)."""
    ckpt = {"config": base.to_dict(), "labels": list(corpus.labels.names), "data": corpus.identity}
    try:
        now = in_checkpoint_lanes(ckpt, open_corpus(config))
    except InputError:
        return None, True
    try:
        changes = check_compatible(
            Path("ckpt.pt"), ckpt, config=config, dist=DistInfo(enabled=False), corpus=now
        )
    except InputError:
        return now, True
    return now, bool(changes)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["synthetic", "files"])
def test_a_setting_that_changes_the_rows_read_is_declared(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MW_ENV_TRACE_ROWS", "1")  # each row's (shard, row in file)
    corpus_dir = tmp_path / "corpus"
    write_parquet_corpus(corpus_dir, shards=2, rows=48, row_group=16)
    write_parquet_corpus(tmp_path / "val", shards=1, rows=16, row_group=16, seed=9)
    out = tmp_path / "run"
    resolved = (
        tiny_config(out, *SMALL, "data.workers=0")
        if kind == "synthetic"
        else files_config(out, corpus_dir, *SMALL, "data.workers=0")
    )
    base = resolved.config
    corpus = open_corpus(base)
    rows = _rows(corpus)
    silent, undeclared, unchanged = [], [], []
    for s in SETTINGS:
        if s.key in UNCHANGEABLE:
            continue
        config = _changed(base, s.key, corpus_dir)
        if config is None:
            if s.applies in (None, kind):  # else validate refuses it on this kind: it applies to the other
                unchanged.append(s.key)
            continue
        now, spoke = _reopened(base, corpus, config)
        try:  # None: the corpus cannot be opened or read with it (the run stops, naming why)
            changed_rows = None if now is None else _rows(now) != rows
        except InputError:
            changed_rows = None
        if changed_rows and not spoke:
            silent.append(s.key)  # the rows changed and the resume would go on without a word
        if s.changes == "architecture" and not architecture_diff(base, config):
            undeclared.append(f"{s.key}: declared architecture, but the architecture diff is empty")
        applies = s.applies in (None, kind) and not (s.key == "data.val_fraction" and base.data.val_files)
        old_order = corpus.identity["order"].get(s.order)
        if s.order and applies and now is not None and now.identity["order"].get(s.order) == old_order:
            undeclared.append(f"{s.key}: declared order={s.order!r}, but the order record did not change")
        if s.order and applies and changed_rows is False:  # a needless refusal of a resume
            undeclared.append(f"{s.key}: declared order={s.order!r}, but the rows read are the same")
    assert not unchanged, f"no valid other value for {unchanged}: add one to EXPLICIT"
    assert not silent, f"changing {silent} changes the rows read, and a resume would not say so: declare it"
    assert not undeclared, undeclared
