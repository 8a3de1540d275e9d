"""Write a portable weights folder (the layout: trainer/weights/__init__.py), atomically.

The whole folder is one commit: its files are written into a hidden temporary folder beside it, fsynced, and
the folder renamed onto `step-XXXXXXXXX` (base/atomic.atomic_dir). A kill at any point leaves the folder
complete or absent, never a config.json without its weights; the next write sweeps the dead writer's
temporary. config.json is derived, not listed: the training config's whole `model` section (a new model key
flows in with no change here) and `net_init`'s constructor arguments, so `from_config` in the shipped
modeling file builds exactly the network that was trained.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.atomic import atomic_dir, sweep_stale_dirs
from mw_env.base.errors import StepFailed, os_error_in, os_words
from mw_env.base.shellquote import sh
from mw_env.rundir import contract as rd
from mw_env.rundir.contract import CONFIG_FILE, ENCODER_FILE, MODEL_FILE, MODELING_FILE, TOKENIZER_FILE

if TYPE_CHECKING:
    import torch

    from mw_env.trainer.data import Tokenizer
    from mw_env.trainspec.config import TrainConfig

FORMAT = "mw-env-tagger-weights/1"
# Model keys that say where training started, not what the network is: left out of config.json (a local path).
NOT_ARCHITECTURE = ("init_from",)


def describe(
    *, config: TrainConfig, tokenizer: Tokenizer, labels: list[str], step: int, source: Mapping[str, object]
) -> dict[str, object]:
    """config.json's content, but the files' sha256 (added once they are written)."""
    import torch

    import mw_env
    from mw_env.trainer.export import bundle
    from mw_env.trainer.model import net_init

    model = {k: v for k, v in dataclasses.asdict(config.model).items() if k not in NOT_ARCHITECTURE}
    return {
        "format": FORMAT,
        "architecture": "TaggerNet",
        "modeling_file": MODELING_FILE,
        "encoder_file": ENCODER_FILE,
        "weights": MODEL_FILE,
        "dtype": "float32",
        "model": model,
        "init": dict(net_init(config, vocab_size=tokenizer.vocab_size, n_labels=len(labels))),
        "labels": list(labels),
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        "label_scheme": "BIO over words; an entity is a B- label and the I- labels of its type that follow",
        "max_seq_len": config.model.max_len,
        "id_layout": bundle.id_layout(tokenizer),
        "tokenizer": bundle.tokenizer_entry(tokenizer, "", model_file=TOKENIZER_FILE),
        **bundle.io_spec(len(labels)),
        "step": step,
        "source": dict(source),
        "training_config": config.to_dict(),
        "versions": {"torch": torch.__version__, "mw_env": mw_env.__version__},
    }


def write_weights(
    folder: Path,
    *,
    state: Mapping[str, torch.Tensor],
    config: TrainConfig,
    tokenizer: Tokenizer,
    labels: list[str],
    step: int,
    source: Mapping[str, object],
) -> Path:
    """Write the folder whole (replacing an earlier one of the same name only once this one is complete)."""
    from safetensors.torch import save_file

    import mw_env.trainer.network as network
    from mw_env.trainer.data import SentencePieceTokenizer
    from mw_env.trainer.export import runtime
    from mw_env.trainer.lifecycle import hold

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_dirs(folder.parent)  # a writer killed before its commit left a hidden temporary
    with atomic_dir(folder) as tmp:
        tensors = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in state.items()}
        save_file(tensors, str(tmp / MODEL_FILE), metadata={"format": "pt", "mw_env": FORMAT})
        shutil.copyfile(network.__file__, tmp / MODELING_FILE)
        shutil.copyfile(runtime.__file__, tmp / ENCODER_FILE)
        files = [MODEL_FILE, MODELING_FILE, ENCODER_FILE]
        if isinstance(tokenizer, SentencePieceTokenizer):
            (tmp / TOKENIZER_FILE).write_bytes(bytes(tokenizer.proto))
            files.append(TOKENIZER_FILE)
        meta = describe(config=config, tokenizer=tokenizer, labels=labels, step=step, source=source)
        meta["sha256"] = {name: rd.sha256_file(tmp / name) for name in files}
        (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        hold("weights")  # the fault harness: a kill here leaves every file written but the folder uncommitted
    return folder


def source_of(run_dir: Path | None, checkpoint: Path, config: TrainConfig) -> dict[str, object]:
    """Where a folder's weights came from (config.json's `source`): the run, the checkpoint and its sha256."""
    from mw_env.trainer.ckpt.checkpoint import sidecar_path

    side = sidecar_path(checkpoint)
    digest = side.read_text(encoding="utf-8").split()[0] if side.is_file() else rd.sha256_file(checkpoint)
    return {
        "run": str(run_dir) if run_dir else None,
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": digest,
        "config_sha256": config.sha256(),
        "init_from": config.model.init_from or None,
    }


def write_run_weights(
    run_dir: Path,
    *,
    model: torch.nn.Module,
    config: TrainConfig,
    tokenizer: Tokenizer,
    labels: list[str],
    step: int,
    checkpoint: Path,
    every: bool,
) -> Path:
    """The trainer's hook beside a checkpoint: <run>/weights/step-N/. `every` (runtime.portable_weights=every)
    also removes the folders whose checkpoint the rotation removed, as the checkpoints are kept; the folders
    of the final checkpoints (`final`) stay. A failed write is a StepFailed naming the folder; the checkpoint
    is already on disk."""
    from mw_env.trainer.ckpt.checkpoint import list_checkpoints

    source = source_of(run_dir, checkpoint, config)
    folder = rd.weights_dir(run_dir) / rd.step_folder_name(step)
    try:
        write_weights(
            folder,
            state=model.state_dict(),
            config=config,
            tokenizer=tokenizer,
            labels=labels,
            step=step,
            source=source,
        )
        if every:
            kept = {p.name.removesuffix(rd.CHECKPOINT_SUFFIX) for p in list_checkpoints(checkpoint.parent)}
            for old in rd.weights_dir(run_dir).glob(rd.STEP_FOLDER_GLOB):
                if old.is_dir() and old.name not in kept:
                    shutil.rmtree(old, ignore_errors=True)
    except (OSError, RuntimeError) as exc:
        cause = os_error_in(exc)
        if cause is None:
            raise
        raise StepFailed(
            f"cannot write the portable weights {folder}: {os_words(cause)}; checkpoint {checkpoint} is written",
            hint=f"free space or fix {folder.parent}, then resume (the checkpoint is kept), or "
            f"--set runtime.portable_weights=none; `mw-env train export --format safetensors {sh(run_dir)}` writes "
            "them later",
        ) from None
    return folder
