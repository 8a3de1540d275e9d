"""Run management on the host side, in mw-env's own torch-free interpreter: the hand-off to the venv's trainer
(launch), detached runs and their supervisor, status and anomaly detection, log scanning, torchrun's output,
and the run folder's manifest. Nothing here imports torch or `mw_env.trainer` (tests/test_layout.py).
"""

from __future__ import annotations
