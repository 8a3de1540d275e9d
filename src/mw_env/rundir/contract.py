"""The run folder's contract in one place: the name of every file and folder a run writes, the words one
process prints and another matches, and the one file hash.

The trainer (inside the venv) and mw-env's run management (on the host) both read and write a run folder, in
different interpreters and often at the same time; this leaf module, stdlib only and torch-free, is what they
agree on, beside the manifest, the state record and the lock in rundir/.

To add a file to the run folder: name it here, say below whether MANIFEST.sha256 covers it (files that change
after the manifest is written cannot be in it: `EXCLUDED_NAMES`), and document it in docs/runs.md.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# -- files and folders ---------------------------------------------------------------------------------------
METRICS_FILE = "metrics.jsonl"  # one JSON event per line, appended by rank 0 (trainer/metrics.py)
CHECKPOINTS_DIR = "checkpoints"  # step-XXXXXXXXX.pt + .sha256 (trainer/ckpt/checkpoint.py)
CHECKPOINT_GLOB = "step-*.pt"
# Portable weights (trainer/weights/): step-XXXXXXXXX/ folders of model.safetensors + config.json + files.
WEIGHTS_DIR = "weights"
REPORT_DIR = "report"  # report.md, report.html, figures, data_card.json (trainer/report/report.py)
MANIFEST = "MANIFEST.sha256"  # `sha256sum` lines, the last file a finished run writes (manifest.py)
STATE_FILE = "state.json"  # where the run is in its life (runstate.py)
RUN_FILE = "run.json"  # a detached run: pid, start ticks, argv (runs.py)
LOG_FILE = "train.log"  # a detached run's stdout and stderr
TORCHRUN_LOG = "torchrun.log"  # torchrun's own stderr, filtered out of the terminal (torchrun_output.py)
DOCTOR_FILE = "doctor.json"  # the doctor's report at launch (launch.py)
LOCK_NAME = ".lock"  # one trainer per run folder (runlock.py); a dotfile, so the manifest skips it
ROW_TRACE_DIR = (
    "row-trace"  # rank-<r>.jsonl: the rows each step read, with MW_ENV_TRACE_ROWS=1 (trainer/data/trace.py)
)

# Written or rewritten after MANIFEST.sha256, or by processes other than the trainer: never in the manifest.
EXCLUDED_NAMES = frozenset({MANIFEST, LOG_FILE, RUN_FILE, STATE_FILE, TORCHRUN_LOG})

# -- words one process prints and another matches -----------------------------------------------------------
# A torchrun worker's last stderr line: its own exit status, which torchrun itself does not pass on.
WORKER_EXIT = "mw-env worker exit status: "
# `mw-env train --allow-env-mismatch` to the trainer (trainer/envcheck.py): "1" = the nodes may differ.
ALLOW_ENV_MISMATCH = "MW_ENV_ALLOW_ENV_MISMATCH"
# The one sentence of a lost peer (trainer/peers.py, runs/rendezvous.py); torchrun_output.py matches it.
PEER_LOST = "a peer of the run stopped answering"


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
