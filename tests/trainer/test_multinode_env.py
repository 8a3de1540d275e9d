"""Two nodes in different environments (issue 38): two `mw-env train` agents on loopback, each in its own venv. The
venvs are views of the test venv (the same interpreter and packages through a symlinked site-packages, each its own
sys.prefix and lock); node 1's has another lock and a torch whose version says +cu126 (torch's own version.py, as a
CUDA wheel ships it; every other file is the real CPU torch's). Both nodes stop before the process group with the
sentence that names node 1, both fields and both values, and the rebuild command; with --allow-env-mismatch on node 0
the run trains and its report and data card record the difference. Equal environments start as before
(tests/trainer/test_multinode.py, both nodes in the test venv, runs through the same check).

The test waits for the processes' exits (the suite's generous timeout), never for a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from proctools import assert_none_left, free_port, kill_tagged, new_tag

from .helpers import TINY, step_losses

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TEST_VENV = Path(sys.executable).parent.parent
TIMEOUT = 240
SITE = Path(sysconfig.get_paths()["purelib"])
LOCK = "pylock.mw-env.toml"


def _view(root: Path, *, lock_suffix: str = "", torch_version: str | None = None) -> Path:
    """A venv that is the test venv's packages under another prefix, with its own lock (and torch version)."""
    venv = root
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.parent.mkdir(parents=True)
    (venv / "bin").mkdir()
    base = Path(sys._base_executable).resolve()  # type: ignore[attr-defined]
    (venv / "bin" / "python").symlink_to(base)
    (venv / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {sys.version.split()[0]}\n"
    )
    if torch_version is None:
        site.symlink_to(SITE)
    else:
        site.mkdir()
        for entry in SITE.iterdir():
            if entry.name != "torch":
                (site / entry.name).symlink_to(entry)
        (site / "torch").mkdir()
        for entry in (SITE / "torch").iterdir():
            if entry.name not in ("version.py", "__pycache__"):
                (site / "torch" / entry.name).symlink_to(entry)
        text = (SITE / "torch" / "version.py").read_text()
        import torch

        assert f"'{torch.__version__}'" in text
        (site / "torch" / "version.py").write_text(
            text.replace(f"'{torch.__version__}'", f"'{torch_version}'")
        )
    torchrun = venv / "bin" / "torchrun"
    torchrun.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n"
    )
    torchrun.chmod(0o755)
    (venv / LOCK).write_text((TEST_VENV / LOCK).read_text() + lock_suffix)
    return venv


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("venvs")
    return _view(root / "node0"), _view(
        root / "node1", lock_suffix="# node 1\n", torch_version="2.13.0+cu126"
    )


def _two_nodes(
    run: Path, venvs: tuple[Path, Path], *extra: tuple[str, ...]
) -> list[subprocess.CompletedProcess[str]]:
    tag, port = new_tag(), free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src"), "MW_ENV_TEST_TAG": tag}
    procs = []
    for rank, venv in enumerate(venvs):
        argv = [sys.executable, "-m", "mw_env", "train", "--config", "smoke", "--venv", str(venv)]
        argv += ["--skip-doctor", "--profile", "cpu", "--nnodes", "2", "--node-rank", str(rank)]
        argv += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"t{port}"]
        for item in (*TINY, f"runtime.out_dir={run}", "dist.timeout_s=60", "runtime.max_steps=2"):
            argv += ["--set", item]
        procs.append(
            subprocess.Popen(
                argv + list(extra[rank] if rank < len(extra) else ()),
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            proc.kill()
        kill_tagged(tag)
    assert_none_left(tag, within=1.0)
    return done


def test_a_node_in_another_environment_stops_every_node_and_allowed_goes_on(
    venvs: tuple[Path, Path], tmp_path: Path
) -> None:
    import socket

    import torch

    host = socket.gethostname()
    lock0 = (venvs[0] / LOCK).read_bytes()
    from mw_env.rundir.contract import sha256_file

    a, b = sha256_file(venvs[0] / LOCK)[:16], sha256_file(venvs[1] / LOCK)[:16]
    assert lock0 != (venvs[1] / LOCK).read_bytes() and torch.__version__ == "2.13.0+cpu"
    run = tmp_path / "run"
    sentence = (
        f"error: the nodes run different environments, so no node starts: node 1 ({host}) has lock sha256 {b}... "
        f"where node 0 ({host}) has {a}..., torch build +cu126 where node 0 ({host}) has +cpu; rebuild it: copy "
        f"{host}:{venvs[0] / LOCK} to node 1 and run `mw-env bootstrap --lock pylock.mw-env.toml --venv "
        f"{venvs[1]} --recreate` there"
    )
    for res in _two_nodes(run, venvs):
        assert res.returncode == 2, res.stdout[-3000:] + res.stderr[-3000:]
        assert sentence in res.stderr.splitlines(), res.stderr[-3000:]
        assert (
            "hint: every node trains in the same environment" in res.stderr and "Traceback" not in res.stderr
        )
    assert not (run / "checkpoints").exists()  # nothing trained

    # Knowingly: node 0's --allow-env-mismatch lets the run go on, and the run says so where it is read later.
    results = _two_nodes(run, venvs, ("--allow-env-mismatch",))
    for res in results:
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert sorted(step_losses(run)) == [1, 2]
    card = json.loads((run / "report" / "data_card.json").read_text())
    assert card["env_mismatch"] == sentence.removeprefix("error: ")
    assert "Node environments" in (run / "report" / "report.md").read_text()
    shutil.rmtree(run)
