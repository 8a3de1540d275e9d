"""The run already in a run folder, against the config about to start there (torch-free).

`mw-env train` compares, before the doctor, the finished run's config (report/hyperparameters.json) and data
(report/data_card.json, its shards by path, size and the identity the trainer recorded) with this config and
the files its globs match now: other data, or another model, is refused (exit 2) with the two ways on (a new run folder, or --fresh), instead
of finding the run finished and training nothing (or continuing the old model on the new data). The same
config again is "nothing to do" (exit 0); a larger runtime.max_steps trains on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.base.typed import short
from mw_env.trainspec.config import TrainConfig, architecture_diff, config_from_dict
from mw_env.trainspec.files import expand_files

# Where a run is written and how far it goes: neither makes it another run (a larger max_steps continues it).
NOT_IDENTITY = ("runtime.out_dir", "runtime.max_steps")


def elsewhere_hint(out_dir: Path | str, *, fine_tune: bool = False) -> str:
    """The ways on when a run folder holds another run: a new folder (with `fine_tune`, where the model is
    unchanged and so loads, starting from the earlier run's weights: model.init_from), or --fresh here."""
    out = Path(out_dir)
    new = out.with_name(out.name + "-2")
    n = 2
    while new.exists() and n < 100:
        n += 1
        new = out.with_name(f"{out.name}-{n}")
    tune = (
        f" (add --set model.init_from={sh(out)} to start from the earlier run's weights, a fine-tune, where "
        "the new data's labels include its own)"
        if fine_tune
        else ""
    )
    return (
        f"train it as a new run in a new folder: --set runtime.out_dir={sh(new)}{tune}; or start over in "
        f"{sh(out)} with --fresh (the earlier run's checkpoints and metrics are kept there, renamed)"
    )


def config_changes(old: Mapping[str, object], new: TrainConfig) -> dict[str, str]:
    """Every setting that differs, but where the run is written and how far it goes: `key: old -> new`."""
    out = {}
    for section, values in new.to_dict().items():
        was = old.get(section)
        if not isinstance(was, Mapping):
            continue
        for key, value in values.items():
            dotted = f"{section}.{key}"
            if dotted not in NOT_IDENTITY and key in was and was[key] != value:
                out[dotted] = f"{dotted}: {short(was[key], 60)} -> {short(value, 60)}"
    return out


def data_changes(card: Mapping[str, object], config: TrainConfig, base: Path) -> list[str]:
    """How this config's training data differs from what the run of `card` (its data_card.json) read: the
    synthetic corpus's settings, or each shard by path and size (the files the globs match now)."""
    recorded = card.get("sources")
    if not isinstance(recorded, Sequence):
        return []
    then = [s for s in recorded if isinstance(s, Mapping)]
    was_synthetic = next((s for s in then if s.get("kind") == "synthetic"), None)
    if config.data.source == "synthetic":
        if was_synthetic is None:
            return ["the earlier run read files, this config generates the synthetic corpus"]
        now = config.data.generator()
        return [
            f"synthetic {k}: {was_synthetic.get(k)!r} -> {v!r}"
            for k, v in now.items()
            if was_synthetic.get(k) != v
        ]
    if was_synthetic is not None:
        return ["the earlier run trained on the synthetic corpus, this config reads files"]
    try:
        paths = [p for key, globs in config.data.train_globs() for p in expand_files(globs, key, base)]
    except InputError:
        return []  # the preflight says what is wrong with the globs
    recorded_train = {str(s.get("path")): s for s in then if s.get("kind") == "train"}
    out = []
    for path in paths:
        size, entry = path.stat().st_size, recorded_train.get(str(path))
        was = entry.get("size") if entry else None
        if entry is None:
            out.append(f"{path} is new")
        elif isinstance(was, int) and was != size:
            out.append(f"{path} changed size ({was:,} -> {size:,} bytes)")
        elif _rewritten(path, entry):
            out.append(f"{path} changed (the same size, other content: {_what_differs(entry)} differ)")
    listed = {str(p) for p in paths}
    return out + [f"{p} is no longer listed" for p in recorded_train if p not in listed]


def _rewritten(path: Path, entry: Mapping[str, object]) -> bool:
    """Whether a shard of the same size is not the one the run read, by the identity the trainer recorded
    for it (`footer_sha256`): a relabelled file (B- and I- swapped, a tag fixed) keeps its size. Parquet:
    its footer's hash (page sizes and statistics change with the values), read from the footer alone;
    JSONL: the line scan the trainer makes at every start. Unreadable now: the preflight says so."""
    from mw_env.trainspec.formats.footer import FooterError, parquet_footer_sha256
    from mw_env.trainspec.formats.jsonlblocks import scan_identity

    digest, kind = entry.get("footer_sha256"), entry.get("format")
    if not isinstance(digest, str) or kind not in ("parquet", "jsonl"):
        return False  # a card of an mw-env that recorded no identity: size is all there is to compare
    try:
        if kind == "parquet":
            return parquet_footer_sha256(path) != digest
        with path.open("rb") as fh:
            return scan_identity(fh)[2] != digest
    except (FooterError, OSError):
        return False


def _what_differs(entry: Mapping[str, object]) -> str:
    return "its Parquet footers" if entry.get("format") == "parquet" else "its lines"


def check_earlier_run(
    *,
    out_dir: Path,
    step: int,
    reason: str,
    hyperparameters: Mapping[str, object] | None,
    card: Mapping[str, object] | None,
    config: TrainConfig,
    base: Path,
) -> bool:
    """The finished run in `out_dir` (at `step`, with its report's hyperparameters and data card) against
    `config`: InputError when it is another run (other data, another model, or another config with nothing
    left to train), naming what differs; True when it is this run with nothing left to train (the caller says
    so), False when this config trains on from it (a larger runtime.max_steps)."""
    old = hyperparameters.get("config") if hyperparameters else None
    data = data_changes(card, config, base) if card else []
    model: dict[str, str] = {}
    others: dict[str, str] = {}
    if isinstance(old, Mapping):
        others = config_changes(old, config)
        try:
            model = architecture_diff(config_from_dict(old), config)
        except InputError:  # a report of another mw-env version: its config is not this one's to compare
            model = {}
    left = step < config.runtime.max_steps and reason != "early_stop"
    if data and config.data.allow_changed_corpus and left and not model:
        return False  # said by the trainer's resume: continuing on this corpus is what was asked for
    if data or model or (others and not left):
        what = data[:4] + list(model.values())[:4] + [v for k, v in others.items() if k not in model][:4]
        kind = "other data" if data else ("another model" if model else "another config")
        # init_from loads the weights when the network and its tokenizer are the same (data.source and the
        # seeds are architecture keys for a resume's row order, not for the weights).
        network = any(k.startswith(("model.", "data.tokenizer", "data.spm_model")) for k in model)
        raise InputError(
            f"the run in {out_dir} finished at step {step} on {kind} ({'; '.join(what)}): training here would "
            + ("continue that model on this data" if data else "not train this config")
            + ", so nothing starts",
            hint=elsewhere_hint(out_dir, fine_tune=bool(data) and not network),
        )
    return not left
