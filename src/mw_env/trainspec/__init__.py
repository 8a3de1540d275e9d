"""What a training run is, torch-free: config (with provenance), validation, the LR schedule, the label set and
synthetic data definition, and `train summary`. Both sides import it: mw-env's own interpreter (the CLI, run
management) and the trainer inside the venv.
"""

from __future__ import annotations
