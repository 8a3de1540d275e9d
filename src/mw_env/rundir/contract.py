"""The run folder's contract in one place: the name of every file and folder a run writes, the words one
process prints and another matches, and the one file hash.

The trainer (inside the venv) and mw-env's run management (on the host) both read and write a run folder, in
different interpreters and often at the same time; this leaf module, stdlib only and torch-free, is what they
agree on, beside the manifest, the state record and the lock in rundir/.

To add a file to the run folder: name it here (tests/test_layout.py refuses its name spelled elsewhere in
src), say below whether MANIFEST.sha256 covers it (files that change after the manifest is written cannot be
in it: `EXCLUDED_NAMES`), and document it in docs/runs.md.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

# -- files and folders ---------------------------------------------------------------------------------------
# Every name below is spelled here only: tests/test_layout.py refuses it as a literal anywhere else in src.
METRICS_FILE = "metrics.jsonl"  # one JSON event per line, appended by rank 0 (trainer/metrics.py)
CHECKPOINTS_DIR = "checkpoints"  # step-XXXXXXXXX.pt + .sha256 (trainer/ckpt/checkpoint.py)
CHECKPOINT_SUFFIX = ".pt"
CHECKPOINT_GLOB = "step-*.pt"
CHECKPOINT_RE = re.compile(r"step-(\d{9})\.pt")  # a complete checkpoint's name; its step
SIDECAR_SUFFIX = ".sha256"  # step-N.pt.sha256: the checkpoint's hash, written after it
# Portable weights (trainer/weights/): step-XXXXXXXXX/ folders of model.safetensors + config.json + files.
WEIGHTS_DIR = "weights"
STEP_FOLDER_GLOB = "step-*"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
MODELING_FILE = "modeling_mw_tagger.py"  # trainer/network.py, verbatim
ENCODER_FILE = "mw_tagger.py"  # trainer/export/runtime.py, verbatim (the ONNX export ships the same file)
TOKENIZER_FILE = "tokenizer.model"
# The ONNX export (trainer/export/): model-step-XXXXXXXXX.onnx + its .json (+ .int8.onnx, .fp16.onnx) + mw_tagger.py
EXPORT_DIR = "export"
ONNX_SUFFIX = ".onnx"
EXPORT_META_GLOB = "model-step-*.json"
REPORT_DIR = "report"  # the files below and the figures (trainer/report/report.py)
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
HYPERPARAMETERS_FILE = "hyperparameters.json"
DATA_CARD_FILE = "data_card.json"
PACKAGES_FILE = "packages.txt"
ENVIRONMENT_FILE = "environment.json"
STOP_NOTE = "stop.md"  # a forced stop's note (runs/stop.py), removed by the complete report
MANIFEST = "MANIFEST.sha256"  # `sha256sum` lines, the last file a finished run writes (manifest.py)
STATE_FILE = "state.json"  # where the run is in its life (runstate.py)
STATE_LOCK = ".state.lock"  # serialises state.json's read-modify-write (runstate.py)
RUN_FILE = "run.json"  # a detached run: pid, start ticks, argv (runs.py)
RUN_LOCK = ".run.lock"  # one `train start` at a time in a folder (runs/runs.py)
LOG_FILE = "train.log"  # a detached run's stdout and stderr
TORCHRUN_LOG = "torchrun.log"  # torchrun's own stderr, filtered out of the terminal (torchrun_output.py)
DOCTOR_FILE = "doctor.json"  # the doctor's report at launch (launch.py)
DOCTOR_PENDING = ".doctor-pending.json"  # ...until the run's report moves it to DOCTOR_FILE (launch.py)
LOCK_NAME = ".lock"  # one trainer per run folder (runlock.py); a dotfile, so the manifest skips it
# rank-<r>.jsonl: the rows each step read, with MW_ENV_TRACE_ROWS=1 (trainer/data/trace.py)
ROW_TRACE_DIR = "row-trace"
CORPUS_INDEX = "corpus-index.json"  # each shard's blocks and identity, cached (trainer/data/index.py)
SHARD_DIGESTS = "shard-sha256.json"  # the shards' sha256, cached (trainer/data/digest.py)
TENSORBOARD_DIR = "tensorboard"  # runtime.tracking=tensorboard (trainer/tracking/tracking.py)
MLRUNS_DIR = "mlruns"  # runtime.tracking=mlflow without a tracking URI: the run's own file store
MLFLOW_RUN_FILE = "mlflow-run.json"  # the MLflow run this run logs to (trainer/tracking/mlflow_tracker.py)
# The venv's lock copied in at launch, pylock.mw-env.toml, is named by venv/lock (below this rung).


def checkpoint_name(step: int) -> str:
    return f"step-{step:09d}{CHECKPOINT_SUFFIX}"


def step_folder_name(step: int) -> str:  # weights/step-N
    return f"step-{step:09d}"


def onnx_name(step: int) -> str:  # export/model-step-N.onnx
    return f"model-step-{step:09d}{ONNX_SUFFIX}"


def row_trace_name(rank: int) -> str:
    return f"rank-{rank}.jsonl"


def node_folder(rank: int) -> str:
    """A detached run's supervision files (run.json, train.log, state.json) of node-rank > 0, beside rank 0's."""
    return f"node-{rank}"


def node_started_file(rank: int) -> str:  # the node joined the rendezvous (runs/rendezvous.py)
    return f".node-{rank}.started"


def doctor_pending_file(node_rank: int) -> str:
    return DOCTOR_PENDING if not node_rank else f".doctor-pending-node{node_rank}.json"


def kept_aside(name: str, stamp: str) -> str:  # --fresh keeps the old checkpoints and metrics under this name
    return f"{name}.old-{stamp}"


# Written or rewritten after MANIFEST.sha256, or by processes other than the trainer: never in the manifest.
EXCLUDED_NAMES = frozenset({MANIFEST, LOG_FILE, RUN_FILE, STATE_FILE, TORCHRUN_LOG})

# -- words one process prints and another matches -----------------------------------------------------------
# A torchrun worker's last stderr line: its own exit status, which torchrun itself does not pass on.
WORKER_EXIT = "mw-env worker exit status: "
# `mw-env train --allow-env-mismatch` to the trainer (trainer/envcheck.py): "1" = the nodes may differ.
ALLOW_ENV_MISMATCH = "MW_ENV_ALLOW_ENV_MISMATCH"
# The one sentence of a lost peer (trainer/peers.py, runs/rendezvous.py); torchrun_output.py matches it.
PEER_LOST = "a peer of the run stopped answering"
# The temporary folder `train predict/evaluate` makes for its child's result (commands/train_predict.py): the
# child removes it when mw-env was killed before reading it (trainer/predict.py).
RESULT_FOLDER_PREFIX = "mw-env-predict-"


def metrics_path(run_dir: Path) -> Path:
    return Path(run_dir) / METRICS_FILE


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def weights_dir(run_dir: Path) -> Path:
    return Path(run_dir) / WEIGHTS_DIR


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks (the manifest, checkpoints' sidecars, a run's lock)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
