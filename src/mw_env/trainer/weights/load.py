"""Read a portable weights folder back in mw-env: `train predict --weights DIR` and `model.init_from`.

mw-env builds the network with its own trainer/network.py, never by running the folder's modeling file (as it
never unpickles code from a checkpoint): a folder from another version of the network fails the strict
state-dict load with a sentence, not a traceback. The files are checked against the sha256 that config.json
records before safetensors reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError
from mw_env.rundir.contract import CONFIG_FILE, MODEL_FILE, STEP_FOLDER_GLOB, sha256_file, weights_dir
from mw_env.trainer.weights.folder import FORMAT

if TYPE_CHECKING:
    import torch

    from mw_env.trainer.data import Tokenizer
    from mw_env.trainer.network import TaggerNet
    from mw_env.trainspec.config import TrainConfig

CONFIG_MAX_BYTES = 16 << 20
_FORMAT_FAMILY = FORMAT.rpartition("/")[0]


@dataclass(frozen=True)
class Weights:
    """A folder read and checked: its config.json, tensors, tokenizer and labels."""

    folder: Path
    meta: dict[str, object]
    state: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    labels: list[str]
    config: TrainConfig  # the training config it was trained with (its max_len, columns, f1 mode)

    @property
    def step(self) -> int | None:
        step = self.meta.get("step")
        return step if isinstance(step, int) else None


def resolve_weights(path: Path, *, what: str) -> Path:
    """A weights folder as given, or the newest complete one of a run folder (<run>/weights/step-N)."""
    path = Path(path).expanduser().resolve()
    if (path / CONFIG_FILE).is_file():
        return path
    folders = sorted(p for p in weights_dir(path).glob(STEP_FOLDER_GLOB) if (p / CONFIG_FILE).is_file())
    if folders:
        return folders[-1]
    if not path.exists():
        raise InputError(f"{what} {path} does not exist", hint="name a weights folder or a run folder")
    raise InputError(
        f"{what} {path} is neither a weights folder (no {CONFIG_FILE}) nor a run folder with weights "
        f"(no {weights_dir(path).name}/{STEP_FOLDER_GLOB}/{CONFIG_FILE})",
        hint=f"write them with `mw-env train export --format safetensors RUN`, or name a folder holding {CONFIG_FILE} "
        f"and {MODEL_FILE}",
    )


def read_weights(path: Path, *, what: str = "--weights") -> Weights:
    """Read and check a weights folder (or a run folder's newest); InputError naming the file when it is not one."""
    from safetensors.torch import load_file

    from mw_env.base import userfile
    from mw_env.trainspec.config import config_from_dict

    folder = resolve_weights(path, what=what)
    cfg_path = folder / CONFIG_FILE
    try:
        meta = json.loads(userfile.read_text(cfg_path, what=f"{what} config", max_bytes=CONFIG_MAX_BYTES))
    except ValueError as exc:
        raise InputError(f"{cfg_path} is not JSON ({exc})", hint="write the folder again") from None
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if not isinstance(fmt, str) or fmt.rpartition("/")[0] != _FORMAT_FAMILY:
        raise InputError(
            f"{cfg_path} is not an mw-env weights folder's config (format {fmt!r}, expected {FORMAT})",
            hint="name a folder `mw-env train export --format safetensors` or a run wrote",
        )
    recorded = meta.get("sha256") if isinstance(meta.get("sha256"), dict) else {}
    for name, digest in recorded.items():
        file = folder / str(name)
        if not file.is_file():
            raise InputError(f"{what} {folder}: {name} is missing", hint="write the folder again")
        if sha256_file(file) != digest:
            raise InputError(
                f"{what} {folder}: {name} was changed since it was written (its sha256 differs from config.json's)",
                hint="write the folder again from its run: `mw-env train export --format safetensors RUN`",
            )
    try:
        state = load_file(str(folder / MODEL_FILE))
    except Exception as exc:  # a missing file, a truncated header: the folder's fault, said as such
        raise InputError(
            f"{what} {folder}: {MODEL_FILE} cannot be read ({exc})", hint="write the folder again"
        ) from None
    labels = meta.get("labels")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise InputError(f"{cfg_path}: `labels` must be a list of label names")
    try:
        config = config_from_dict(meta["training_config"])
    except (KeyError, TypeError, InputError) as exc:
        why = exc.message if isinstance(exc, InputError) else "no training_config"
        raise InputError(f"{cfg_path}: {why}", hint="write the folder again with this mw-env") from None
    return Weights(folder, meta, state, _tokenizer(meta, folder, cfg_path), list(labels), config)


def _tokenizer(meta: dict[str, object], folder: Path, cfg_path: Path) -> Tokenizer:
    from mw_env.base import userfile
    from mw_env.trainer.data import ByteTokenizer, SentencePieceTokenizer
    from mw_env.trainer.data.tokenize import SPM_MAX_BYTES

    tok = meta.get("tokenizer")
    kind = tok.get("kind") if isinstance(tok, dict) else None
    if kind == "byte":
        return ByteTokenizer()
    if kind == "sentencepiece" and isinstance(tok, dict):
        spm = folder / str(tok.get("model"))
        proto = userfile.read_bytes(spm, what="the weights' SentencePiece model", max_bytes=SPM_MAX_BYTES)
        return SentencePieceTokenizer(proto, source=str(spm))
    raise InputError(
        f"{cfg_path}: tokenizer kind {kind!r} is not one this mw-env knows (byte, sentencepiece)"
    )


def build(weights: Weights) -> TaggerNet:
    """mw-env's own network for the folder, with its weights, in eval mode on the CPU."""
    from mw_env.trainer.network import from_config

    try:
        model = from_config(weights.meta)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{weights.folder / CONFIG_FILE}: its model is not one this mw-env builds ({exc})",
            hint="load it with the folder's own modeling file (docs/training.md, Portable weights), or with "
            "the mw-env version that wrote it",
        ) from None
    try:
        model.load_state_dict(weights.state)
    except RuntimeError as exc:
        raise InputError(
            f"{weights.folder / MODEL_FILE} does not fit this mw-env's network: {str(exc).splitlines()[0]}",
            hint="load it with the folder's own modeling file (docs/training.md, Portable weights), or with "
            "the mw-env version that wrote it",
        ) from None
    return model.eval()


def model_from_weights(path: Path) -> tuple[TaggerNet, Tokenizer, list[str], TrainConfig, str, int | None]:
    """(model in eval mode, tokenizer, labels, training config, the folder, its step): what `train predict
    --weights` tags with, as model_from_checkpoint gives it for a checkpoint."""
    weights = read_weights(path)
    return (
        build(weights),
        weights.tokenizer,
        weights.labels,
        weights.config,
        str(weights.folder),
        weights.step,
    )
