"""`model.init_from`: a new run starts from trained weights instead of random ones (a fine-tune on new data).

The source is a portable weights folder, or a run folder (its newest weights folder, else its newest valid
checkpoint). Its network must be this run's: every model key but dropout equal (so every tensor has the same
shape and means the same), and the same tokenizer (a SentencePiece model byte for byte). The label set may grow:
the classification head's rows are mapped by label name (the order may differ), and a label the source lacks
keeps the fresh row this run's seeded initialisation gave it. A label the source has and this run lacks
(removed, or renamed) is refused with its name: its trained rows would be dropped without a word.

Every rank loads the same source into the same freshly built model (build_model seeds it from runtime.seed), so
the ranks start equal, as they do from random weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError
from mw_env.rundir.contract import CHECKPOINTS_DIR, CONFIG_FILE, STEP_FOLDER_GLOB, WEIGHTS_DIR
from mw_env.trainer.weights.folder import NOT_ARCHITECTURE

if TYPE_CHECKING:
    import torch

    from mw_env.trainer.data import Tokenizer
    from mw_env.trainspec.config import TrainConfig

KEY = "model.init_from"
# Model keys a fine-tune may change: they shape no tensor and change no forward pass at inference.
MAY_DIFFER = ("dropout", *NOT_ARCHITECTURE)
HEAD = ("head.weight", "head.bias")


@dataclasses.dataclass(frozen=True)
class Source:
    """What a fine-tune starts from, however it was stored."""

    where: str  # the folder or checkpoint file read
    kind: str  # "weights" | "checkpoint"
    step: int | None
    state: dict[str, torch.Tensor]
    labels: list[str]
    model: dict[str, object]  # its config's model section
    tokenizer: Tokenizer


def read_source(path: str | Path) -> Source:
    """The weights `model.init_from` names, read and checked (InputError naming the path otherwise)."""
    from mw_env.trainer.weights.load import read_weights

    path = Path(path).expanduser().resolve()
    has_weights = (path / CONFIG_FILE).is_file() or any(
        (path / WEIGHTS_DIR).glob(f"{STEP_FOLDER_GLOB}/{CONFIG_FILE}")
    )
    if has_weights or not (path / CHECKPOINTS_DIR).is_dir():
        w = read_weights(path, what=KEY)
        model = w.meta.get("model")
        return Source(
            str(w.folder),
            "weights",
            w.step,
            w.state,
            w.labels,
            dict(model) if isinstance(model, Mapping) else {},
            w.tokenizer,
        )
    from mw_env.trainer.ckpt.checkpoint import find_latest
    from mw_env.trainer.data import tokenizer_from_state
    from mw_env.trainspec.config import config_from_dict

    found = find_latest(path / CHECKPOINTS_DIR)
    if found is None:
        raise InputError(
            f"{KEY}={path}: the run folder has no weights folder and no valid checkpoint",
            hint="name a weights folder (<run>/weights/step-N) or a run with a checkpoint",
        )
    ckpt_path, ckpt = found
    config = config_from_dict(ckpt["config"])
    return Source(
        str(ckpt_path),
        "checkpoint",
        int(ckpt["step"]),
        dict(ckpt["model"]),
        list(ckpt["labels"]),
        dataclasses.asdict(config.model),
        tokenizer_from_state(ckpt["tokenizer"]),
    )


def _tokenizer_id(tok: Tokenizer) -> str:
    proto = getattr(tok, "proto", None)
    return (
        tok.kind
        if proto is None
        else f"{tok.kind} model sha256 {hashlib.sha256(bytes(proto)).hexdigest()[:12]}"
    )


def check_fits(source: Source, *, config: TrainConfig, tokenizer: Tokenizer, labels: list[str]) -> None:
    """Refuse (InputError) a source whose network, tokenizer or labels this run cannot start from."""
    mine = dataclasses.asdict(config.model)
    differ = [
        f"model.{k}: {source.model.get(k)!r} there, {v!r} here"
        for k, v in mine.items()
        if k not in MAY_DIFFER and source.model.get(k) != v
    ]
    if differ:
        raise InputError(
            f"{KEY}={source.where} is another network than this run's ({'; '.join(differ)})",
            hint="a fine-tune keeps the model's sizes: set these model keys to the source's values, or train "
            "from scratch without model.init_from",
        )
    if _tokenizer_id(source.tokenizer) != _tokenizer_id(tokenizer):
        raise InputError(
            f"{KEY}={source.where} was trained with the {_tokenizer_id(source.tokenizer)} tokenizer; this run "
            f"uses {_tokenizer_id(tokenizer)}",
            hint="a fine-tune reads text as its source did: use the source's data.tokenizer and data.spm_model",
        )
    dropped = [name for name in source.labels if name not in labels]
    if dropped:
        raise InputError(
            f"{KEY}={source.where} has label(s) {', '.join(dropped)} that this run's label set lacks (removed or "
            f"renamed; this run has {', '.join(labels)})",
            hint="a fine-tune keeps every label of the model it starts from and may add new ones: add them to "
            "data.labels (a label the new data never uses is kept, unused)",
        )


def start_from(
    model: torch.nn.Module,
    *,
    config: TrainConfig,
    tokenizer: Tokenizer,
    labels: list[str],
    say: Callable[[str], None],
) -> dict[str, object]:
    """Load model.init_from into the freshly built `model` (head rows by label name); the fact for the report."""
    import torch

    source = read_source(config.model.init_from)
    check_fits(source, config=config, tokenizer=tokenizer, labels=labels)
    state = model.state_dict()
    strange = sorted(set(source.state) ^ set(state))
    if strange:  # the same model section always gives the same keys; another mw-env's network may not
        raise InputError(
            f"{KEY}={source.where} does not fit this mw-env's network (tensors {', '.join(strange[:6])} are in "
            "one and not the other)",
            hint="start it with the mw-env version that wrote it, or train from scratch",
        )
    index = {name: i for i, name in enumerate(source.labels)}
    new = [name for name in labels if name not in index]
    with torch.no_grad():
        for name, tensor in state.items():
            src = source.state[name].to(tensor.dtype)
            if name in HEAD:
                for row, label in enumerate(labels):
                    if label in index:
                        tensor[row] = src[index[label]]
            else:
                tensor.copy_(src)
    model.load_state_dict(state)
    say(
        f"{KEY}: started from {source.where} ({source.kind}, step {source.step}); "
        + (f"new labels with fresh head rows: {', '.join(new)}" if new else "the same labels")
    )
    return {"path": source.where, "kind": source.kind, "step": source.step, "new_labels": new}
