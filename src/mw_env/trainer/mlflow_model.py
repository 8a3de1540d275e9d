"""The trained tagger as an MLflow model: what a registry (and a promotion gate) can load and promote.

`save_model_dir(checkpoint, out)` writes an MLflow model folder:

    MLmodel              flavor python_function, loader_module mw_env.trainer.mlflow_model, data: data
    data/weights.pt      the weights, the model config, the tokenizer (state) and the labels: the part of the
                         checkpoint inference needs (no optimizer state), loadable with weights_only=True
    data/tagger.json     labels (logit order), id_layout, tokenizer scheme, max_seq_len, the checkpoint's path
                         and sha256, and the run's MANIFEST.sha256 digest (the run it came from, verifiable)

`mlflow.pyfunc.load_model("runs:/<run id>/model").predict(["10 Downing Street London SW1A 2AA"])` returns one
list of labels per address (a string is split on whitespace; a list of words is taken as it is), encoded
exactly as the trainer encodes (tokenize.encode_row); words that do not fit in max_len are dropped, as training
did. The loader needs mw-env and torch in the loading environment (the training venv has both), and
mlflow.pyfunc itself needs pandas (not in mlflow-skinny); without it, `_load_pyfunc(<model>/data)` is the
same loader, called directly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LOADER = "mw_env.trainer.mlflow_model"
WEIGHTS = "weights.pt"
META = "tagger.json"


def save_model_dir(
    checkpoint: Path, out: Path, *, manifest_sha256: str | None = None, model_id: str | None = None
) -> Path:
    """Write the MLflow model folder for `checkpoint` into `out` (which must not exist yet); `model_id`: the
    MLflow 3 LoggedModel it is uploaded to (named in MLmodel, as mlflow's own writer does)."""
    import torch

    from mw_env.rundir.contract import sha256_file
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint, model_from_checkpoint
    from mw_env.trainer.export.bundle import id_layout, tokenizer_entry

    ckpt = load_checkpoint(Path(checkpoint))  # validated: a damaged checkpoint is never logged as the model
    _model, tokenizer, labels = model_from_checkpoint(ckpt)
    data = Path(out) / "data"
    data.mkdir(parents=True)
    keep = {k: ckpt[k] for k in ("config", "tokenizer", "labels", "model")}
    torch.save(keep, data / WEIGHTS)
    meta = {
        "format": "mw-env-mlflow-tagger/1",
        "labels": list(labels),
        "id_layout": id_layout(tokenizer),
        "tokenizer": tokenizer_entry(tokenizer, "weights"),
        "max_seq_len": int(ckpt["config"]["model"]["max_len"]),
        "step": int(ckpt["step"]),
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": sha256_file(Path(checkpoint)),
        "manifest_sha256": manifest_sha256,
    }
    (data / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    _write_mlmodel(Path(out) / "MLmodel", model_id)
    return Path(out)


def _write_mlmodel(path: Path, model_id: str | None = None) -> None:
    """MLmodel by hand: mlflow.pyfunc's own writer imports pandas, which mlflow-skinny does not bring."""
    import platform
    import time
    import uuid

    import yaml

    try:
        from mlflow.version import VERSION as mlflow_version
    except ImportError:
        mlflow_version = None
    doc = {
        "flavors": {
            "python_function": {
                "loader_module": LOADER,
                "data": "data",
                "python_version": platform.python_version(),
            }
        },
        "mlflow_version": mlflow_version,
        "model_uuid": uuid.uuid4().hex,
        **({"model_id": model_id} if model_id else {}),
        "utc_time_created": time.strftime("%Y-%m-%d %H:%M:%S.000000", time.gmtime()),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


class TaggerModel:
    """What `mlflow.pyfunc.load_model` hands back (through _load_pyfunc): addresses in, labels out."""

    def __init__(self, data_path: Path) -> None:
        import torch

        from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
        from mw_env.trainer.decoding import Decoder
        from mw_env.trainspec.config import config_from_dict

        state = torch.load(Path(data_path) / WEIGHTS, map_location="cpu", weights_only=True)
        self.model, self.tokenizer, self.labels = model_from_checkpoint(state)
        # Tags read as the run's evaluation read them (model.decode; argmax for a model from before the key).
        self.decoder = Decoder(self.labels, config_from_dict(state["config"]).model.decode)
        self.meta = json.loads((Path(data_path) / META).read_text(encoding="utf-8"))
        self.max_len = int(self.meta["max_seq_len"])

    def _words(self, item: Any) -> list[str]:
        return item.split() if isinstance(item, str) else [str(w) for w in item]

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> list[list[str]]:
        if hasattr(model_input, "iloc"):  # a pandas DataFrame: its first column holds the addresses
            model_input = list(model_input.iloc[:, 0])
        rows = [model_input] if isinstance(model_input, str) else list(model_input)
        return [self._tag(self._words(row)) for row in rows]

    def _tag(self, words: Sequence[str]) -> list[str]:
        import torch

        from mw_env.trainer.data.tokenize import encode_row

        ids, _labels, dropped = encode_row(self.tokenizer, words, None, self.max_len)
        starts, pos = [], 1  # after [CLS]
        for i, word in enumerate(words[: len(words) - dropped]):
            pos += len(self.tokenizer.separator()) if i else 0
            starts.append(pos)
            pos += len(self.tokenizer.encode_word(word))
        with torch.no_grad():
            logits = self.model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool))[0]
        return self.decoder.tags(logits[starts].numpy())


def _load_pyfunc(data_path: str) -> TaggerModel:
    """MLflow's hook for a loader_module model (mlflow.pyfunc.load_model calls it with data/)."""
    return TaggerModel(Path(data_path))


__all__ = ["TaggerModel", "save_model_dir"]
