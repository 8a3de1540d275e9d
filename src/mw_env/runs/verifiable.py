"""`train verify` only on a finished run: MANIFEST.sha256 is the last file a run writes, so checking it
against a run that is still going, or was killed, lists differences that are not."""

from __future__ import annotations

from pathlib import Path

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh
from mw_env.rundir import runstate
from mw_env.runs.anomalies import Liveness
from mw_env.runs.liveness import life_alive
from mw_env.runs.runs import is_alive, read_run


def check_verifiable(out_dir: Path) -> None:
    """InputError unless the run in `out_dir` is finished."""
    from mw_env.rundir.contract import MANIFEST

    out_dir = Path(out_dir).resolve()
    life = runstate.read_state(out_dir)
    record = read_run(out_dir)
    current = (life or {}).get("state")
    if current == "finished" or (life is None and record is None):
        return
    if life is not None and current == "exited" and "during" not in life and life.get("returncode") == 0:
        return  # written before runs had states (the supervisor's bare exit record): judge by the manifest
    alive = is_alive(record) if record is not None else life_alive(life or {}, Liveness(alive=None))
    earlier = (
        f"; the {MANIFEST} there is from an earlier finish and does not cover this attempt's files"
        if (out_dir / MANIFEST).is_file()
        else ""
    )
    if alive:
        raise InputError(
            f"the run in {out_dir} is still {current or 'running'}: {MANIFEST} is written last, when the "
            f"report is complete{earlier}",
            hint=f"wait for it: `mw-env train watch {sh(out_dir)}` ends when it has finished; then verify",
        )
    if current == "killed":
        good = (life or {}).get("last_good_checkpoint")
        raise InputError(
            f"the run in {out_dir} was killed by `mw-env train stop` while {(life or {}).get('during', 'running')}: "
            f"this attempt wrote no report or manifest{earlier}",
            hint=f"`mw-env train start` with the same config resumes from {good or 'step 0'} and writes them "
            "when it finishes; report/stop.md says what happened",
        )
    if current in ("exited", "running", "stopping", "finishing"):
        during = (life or {}).get("during") or current
        raise InputError(
            f"the run in {out_dir} ended without finishing (it was {during}){earlier}",
            hint=f"`mw-env train status {sh(out_dir)}` says why; start it again with the same config to finish",
        )
