"""The bundled trainer: an address token tagger (config, data, model, loop, checkpoints, report).

Modules that need torch import it at module level and run only inside the training venv's python;
config, summary, manifest and launch are torch-free so the mw-env CLI can use them anywhere.
"""

from __future__ import annotations
