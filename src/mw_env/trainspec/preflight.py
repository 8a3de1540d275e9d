"""The whole config checked on the host, before the doctor and before anything imports torch.

A glob that matches nothing, a column the shards do not have, a label listed twice, a tracker or
tokenizer whose package the venv lacks: each used to surface 40-70 s later (after the doctor and a
torch import) and a missing tracker as exit 1. Here each is an `error:`/`hint:` naming the key and
value, exit 2, in well under a second: the Parquet columns come from the footers (footer.py, stdlib),
a JSONL shard's from its first row, the packages from the venv's metadata (nothing is imported).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.userjson import json_refusal, loads
from mw_env.trainspec.columns import STRING_LIST, require_string_lists
from mw_env.trainspec.config import TrainConfig
from mw_env.trainspec.extras import bootstrap_hint, installed, missing, needed_extras
from mw_env.trainspec.files import expand_files
from mw_env.trainspec.formats.footer import FooterError, parquet_column_kinds

FIRST_LINE_MAX = 16 << 20  # a JSONL shard's first row longer than this is not a row


def column_kinds(path: Path, key: str) -> dict[str, str | None]:
    """The columns of one shard with their kinds in trainspec.columns' words (a Parquet footer's; None for
    a JSONL row's keys, whose values the trainer checks row by row)."""
    if path.suffix == ".parquet":
        try:
            return dict(parquet_column_kinds(path))
        except (FooterError, OSError) as exc:
            raise InputError(
                f"{key}: {path} is not a readable Parquet file ({exc})",
                hint="re-export the shard, or drop it from the file list",
            ) from None
    with open(path, "rb") as fh:
        for raw in iter(lambda: fh.readline(FIRST_LINE_MAX), b""):
            if raw.strip():
                try:
                    row = loads(raw)
                except (
                    ValueError,
                    RecursionError,
                ) as exc:  # not JSON, or JSON Python refuses (depth, digits)
                    raise InputError(
                        f"{key}: {path} line 1 is not a usable JSON row ({json_refusal(exc)})",
                        hint="each line of a .jsonl shard is one JSON object",
                    ) from None
                if not isinstance(row, dict):
                    raise InputError(
                        f"{key}: {path} line 1 is not a JSON object", hint="each line is one object"
                    )
                return dict.fromkeys(row)
    raise InputError(f"{key}: {path} is empty", hint="drop it from the file list")


_TOKEN_WORDS = ("token", "word", "text")  # a column named so holds the words (the --set to paste guesses)


def column_error(path: Path, kinds: dict[str, str | None], tokens: str, tags: str) -> InputError:
    """A shard without the tokens or the tags column: both columns named, what the file has, and the `--set`
    to paste when the file's list-of-strings columns say which is which."""
    named = (("data.tokens_column", tokens), ("data.tags_column", tags))
    lacking = [f"{name!r} ({key})" for key, name in named if name not in kinds]
    has = ", ".join(f"{c} ({k})" if k else c for c, k in kinds.items()) or "none"
    lists = [c for c, k in kinds.items() if k in (STRING_LIST, None)]
    if len(lists) == 2:
        words = next((c for c in lists if any(w in c.lower() for w in _TOKEN_WORDS)), lists[0])
        other = lists[1] if words == lists[0] else lists[0]
        hint = f"name the file's columns: --set data.tokens_column={words} --set data.tags_column={other}"
    else:
        hint = (
            "set data.tokens_column to the column of words and data.tags_column to the column of BIO tags "
            "(each a list of strings per row)"
        )
    return InputError(
        f"{path} has no column {' or '.join(lacking)}: the trainer reads the words from data.tokens_column "
        f"({tokens!r}) and the BIO tags from data.tags_column ({tags!r}); the file's columns: {has}",
        hint=hint,
    )


def check_columns(config: TrainConfig, base: Path, venv: Path | None = None, *, tags: bool = True) -> None:
    """Every shard has both columns, each a list of strings; with `tags`, the tags are data.labels' (when set)
    and IOB2 (when discovered). `train check` leaves the tags to its full read (every problem at once)."""
    d = config.data
    labelled: list[tuple[Path, str]] = []
    shards: list[Path] = []
    for key, patterns in (*d.train_globs(), ("data.val_files", d.val_files)):
        for path in expand_files(patterns, key, base):
            shards.append(path)
            kinds = column_kinds(path, key)
            if d.tokens_column not in kinds or d.tags_column not in kinds:
                raise column_error(path, kinds, d.tokens_column, d.tags_column)
            # The trainer's rule, on the footer: a struct or a list of numbers is refused here, as there.
            known = {c: k for c, k in kinds.items() if k is not None}
            require_string_lists(path, known, (d.tokens_column, d.tags_column))
            if tags and d.labels and d.unknown_tags == "error":
                labelled.append((path, key))
    _check_tags(labelled, d.tags_column, d.labels, venv)
    if tags and not d.labels:
        check_corpus_bio(shards, d.tags_column, venv)


def check_corpus_bio(shards: Sequence[Path], column: str, venv: Path | None) -> None:
    """The tags the trainer will discover (labelscan.py: every row group's dictionary, or a JSONL shard's first
    rows) are IOB2: plain tags are refused here, in a second, with the conversion to paste, not at the trainer's
    start after the doctor and a torch import. Unreadable here (no pyarrow, no venv): the trainer says it."""
    from mw_env.trainspec.labelscan import corpus_found, not_bio, not_bio_error

    found = corpus_found(shards, column, venv=venv)
    if found is None:
        return
    if plain := not_bio(found.tags):
        with_plain = [p for p in shards if p.suffix == ".jsonl"]
        raise not_bio_error(
            plain,
            f"the corpus's tags ({len(shards)} shard(s), column {column!r})",
            column=column,
            jsonl=bool(with_plain) and len(with_plain) == len(shards),
        )


def _check_tags(
    shards: list[tuple[Path, str]], column: str, labels: Sequence[str], venv: Path | None
) -> None:
    """The tags of each shard the trainer's label sample reads (labelscan.py: a JSONL shard's first rows, each
    Parquet row group's dictionary or first rows) are data.labels'. Unreadable here: the trainer then reports
    the tag with its shard and row."""
    from mw_env.trainspec.labelscan import corpus_found

    for path, key in shards:
        found = corpus_found([path], column, venv=venv)
        unknown = sorted((found.tags if found else set()) - set(labels))
        if unknown:
            raise InputError(
                f"data.labels does not list {', '.join(map(repr, unknown[:8]))}, found in {path} ({key})",
                hint="add them to data.labels, leave data.labels empty to take the corpus's, or "
                "--set data.unknown_tags=ignore to train without them",
            )


def check_labels(config: TrainConfig) -> None:
    from mw_env.trainspec.labelscan import not_bio, not_bio_error

    labels = list(config.data.labels or [])
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise InputError(f"data.labels lists {', '.join(dup)} more than once", hint="list each tag once")
    if plain := not_bio(labels):
        raise not_bio_error(plain, "data.labels")


def check_packages(config: TrainConfig, venv: Path) -> None:
    """The packages the config's tracker and tokenizer need, installed in the venv (by its metadata)."""
    extras = needed_extras(config.runtime.tracking, config.data.tokenizer)
    if not extras and not config.model.init_from:
        return
    have = installed(venv)
    if (
        config.model.init_from and "safetensors" not in have
    ):  # a venv bootstrapped before the train extra had it
        raise InputError(
            f"model.init_from={config.model.init_from} needs safetensors, which the training venv {venv} does not have",
            hint=f"add it with the train extra again: {bootstrap_hint(venv)}",
        )
    for extra in extras:
        lacking = missing(venv, extra, have)
        if lacking:
            key = "data.tokenizer" if extra == "spm" else "runtime.tracking"
            value = config.data.tokenizer if extra == "spm" else config.runtime.tracking
            raise InputError(
                f"{key}={value} needs {', '.join(lacking)}, which the training venv {venv} does not have",
                hint=f"add the `{extra}` extra: {bootstrap_hint(venv, extra)}",
            )


def weights_note(config: TrainConfig, venv: Path) -> str | None:
    """The line `mw-env train` says when the run will write no portable weights for lack of safetensors (a venv
    bootstrapped before the train extra had it): the run goes on, the trainer skips the folder and says so."""
    if config.runtime.portable_weights == "none" or "safetensors" in installed(venv):
        return None
    return (
        f"note: the training venv {venv} lacks safetensors, so this run writes no portable weights "
        f"(runtime.portable_weights={config.runtime.portable_weights}); add it: {bootstrap_hint(venv)}"
    )


def check_on_host(config: TrainConfig, *, venv: Path | None, base: Path) -> None:
    """Everything about the config that can be known before the doctor; InputError (exit 2) on the first problem."""
    check_labels(config)
    if config.data.source == "files":
        check_columns(config, base, venv)
    if config.model.init_from and not (base / Path(config.model.init_from).expanduser()).is_dir():
        raise InputError(
            f"model.init_from={config.model.init_from}: no such folder (from {base})",
            hint="name a portable weights folder (<run>/weights/step-N) or a run folder",
        )
    if venv is not None:
        check_packages(config, venv)
