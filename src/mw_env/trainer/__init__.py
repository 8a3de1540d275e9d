"""The bundled trainer, run INSIDE the training venv's python (torch at module level is fine here): the data
pipeline, model, loop, evaluation, checkpoints, distributed set-up, metrics, tracking, report and export.

mw-env's own interpreter never imports this package (tests/test_layout.py): it starts it as
`python -m mw_env.trainer` through `mw_env.runs.launch`.
"""

from __future__ import annotations
