"""Case 2's class (a symbolic link loop) and case 19's (wrong words) on the venv path: `--venv` / MW_ENV_VENV
as a link loop, under one, or a link to a path that is gone. The doctor said "does not exist" and offered
`bootstrap` to create it; a bootstrap plan went ahead over a path where nothing can be made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.fuzz.test_regressions import mw


def _links(tmp_path: Path) -> dict[str, Path]:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    os.symlink(tmp_path / "gone" / "venv", tmp_path / "dangling")
    return {"loop": tmp_path / "a", "dangling": tmp_path / "dangling"}


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_the_doctor_on_a_venv_link_that_leads_nowhere(tmp_path: Path, kind: str) -> None:
    venv = _links(tmp_path)[kind]
    rc, out, _ = mw(["doctor", "--venv", str(venv), "--quick", "--json"])
    import json

    checks = {c["id"]: c for c in json.loads(out)["checks"]}
    assert rc == 1 and checks["venv.exists"]["status"] == "fail", out
    assert "symbolic link" in checks["venv.exists"]["detail"] and "does not exist" not in out, out


@pytest.mark.parametrize("under", [False, True], ids=["the-venv", "a-folder-above"])
def test_bootstrap_refuses_a_venv_path_through_a_link_loop(tmp_path: Path, under: bool) -> None:
    venv = _links(tmp_path)["loop"] / ("venv" if under else "")
    rc, _, err = mw(["bootstrap", "--dry-run", "--profile", "cpu", "--venv", str(venv)])
    assert rc == 2 and "a symbolic link loop" in err and "hint:" in err, err
