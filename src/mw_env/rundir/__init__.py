"""The run folder's contract, imported by runs/ (the host) and trainer/ (the venv) alike; torch-free:
contract (every file name, the words one process prints and another matches, sha256_file), manifest
(MANIFEST.sha256), runstate (state.json), runlock (.lock).

To add a file to the run folder: name it in `contract`, and add it to `contract.EXCLUDED_NAMES` when it
changes after MANIFEST.sha256 is written; document it in docs/runs.md.

To add a metric: the trainer logs it as a field of an event (`MetricsWriter.log("step", ..., name=value)`,
trainer/metrics.py); docs/design.md ("Run folder") and docs/runs.md list each event's fields, the readers on
the host (runs/runstatus.py, anomalies.py, stop.py) read it by name, and tracking/values.py sends every
numeric field of a step or eval event to TensorBoard/MLflow without a change.
"""
