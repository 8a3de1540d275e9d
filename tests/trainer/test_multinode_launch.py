"""The multi-node launch options: validated together, turned into torchrun's c10d arguments, per node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.cli import main
from mw_env.runs.launch import LaunchRequest, prepare
from mw_env.runs.rendezvous import check_nodes, default_rdzv_id

from .test_train_cli import _doctor, _fake_venv


def _prepare(venv: Path, **kwargs):
    return prepare(
        LaunchRequest(
            venv=venv,
            config="smoke",
            overrides=["runtime.out_dir=runs/x"],
            profile="cpu",
            **kwargs,
        )
    )


def test_each_node_gets_c10d_rendezvous_its_own_doctor_and_the_run_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _doctor(monkeypatch, "pass")
    venv = _fake_venv(tmp_path, {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    monkeypatch.chdir(tmp_path)
    node1 = _prepare(venv, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29500", nproc_per_node=4)
    assert node1.argv[:9] == [
        str(venv / "bin" / "torchrun"),
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29500",
        f"--rdzv-id={default_rdzv_id('10.0.0.1:29500')}",
        "--rdzv-conf=join_timeout=600",  # the default said by the waiting line, and settable
        "--nproc-per-node=4",
        "-m",
    ]
    assert "--standalone" not in node1.argv
    # This node's doctor, this node's profile env; its report kept under its own name in a shared folder.
    assert calls and calls[-1]["quick"] is True
    assert node1.env["HSA_OVERRIDE_GFX_VERSION"] == "11.0.0" and node1.env["MW_ENV_NODE_RANK"] == "1"
    pending = node1.argv[node1.argv.index("--doctor-json") + 1]
    assert Path(pending).name == ".doctor-pending-node1.json"
    assert json.loads(Path(pending).read_text())["ok"] is True
    assert len(node1.env["MW_ENV_RUN_ID"]) == 32 and node1.nodes.node_rank == 1
    # One process per node still goes through torchrun; the id given is passed as is.
    node0 = _prepare(
        venv, nnodes=2, rdzv_endpoint="[fd00::1]:29400", rdzv_id="job-7", rdzv_timeout=30, skip_doctor=True
    )
    assert node0.argv[1:8] == [
        "--nnodes=2",
        "--node-rank=0",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=[fd00::1]:29400",
        "--rdzv-id=job-7",
        "--rdzv-conf=join_timeout=30",
        "--nproc-per-node=1",
    ]
    assert node0.env["MW_ENV_RUN_ID"] != node1.env["MW_ENV_RUN_ID"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nnodes": 2}, "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
        ({"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}, "--node-rank 2: must be between 0 and 1"),
        ({"nnodes": 2, "rdzv_endpoint": "node0"}, "is not HOST:PORT"),
        ({"nnodes": 2, "rdzv_endpoint": "node0:99999"}, "is not HOST:PORT"),
        ({"nnodes": 2, "rdzv_endpoint": "a b:29500"}, "is not HOST:PORT"),
        ({"nnodes": 2, "rdzv_endpoint": "h:1", "rdzv_id": "../x"}, "--rdzv-id '../x'"),
        ({"rdzv_endpoint": "h:29500"}, "--rdzv-endpoint need --nnodes N with N > 1"),
        ({"node_rank": 1}, "--node-rank need --nnodes N"),
        ({"nnodes": 0}, "--nnodes 0: must be >= 1"),
    ],
)
def test_bad_node_options_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(")) as err:
        check_nodes(**kwargs)
    assert err.value.hint or "nnodes 0" in message


def test_the_cli_refuses_bad_node_options_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = _fake_venv(tmp_path, {})
    base = ["train", "--config", "smoke", "--venv", str(venv), "--skip-doctor", "--profile", "cpu"]
    assert main([*base, "--nnodes", "2", "--node-rank", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: --nnodes 2 needs --rdzv-endpoint HOST:PORT" in err and "hint:" in err
    assert "Traceback" not in err


def test_train_start_on_node_1_supervises_beside_the_shared_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mw_env.runs.runs as runs_mod

    started: list[dict] = []

    def fake_start_run(**kwargs):
        started.append(kwargs)
        raise InputError("stop here")

    monkeypatch.setattr(runs_mod, "start_run", fake_start_run)
    venv = _fake_venv(tmp_path, {})
    monkeypatch.chdir(tmp_path)
    args = ["train", "start", "--config", "smoke", "--venv", str(venv), "--skip-doctor", "--profile", "cpu"]
    args += ["--set", "runtime.out_dir=shared", "--nnodes", "2", "--rdzv-endpoint", "n0:29500"]
    assert main([*args, "--node-rank", "1"]) == 2
    assert main([*args, "--node-rank", "0"]) == 2
    assert [s["out_dir"] for s in started] == [tmp_path / "shared" / "node-1", tmp_path / "shared"]
    assert all(s["env"]["MW_ENV_RUN_ID"] for s in started)


def test_allow_env_mismatch_reaches_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _fake_venv(tmp_path, {})
    monkeypatch.chdir(tmp_path)
    nodes = {"nnodes": 2, "rdzv_endpoint": "10.0.0.1:29500", "skip_doctor": True}
    allowed = _prepare(venv, allow_env_mismatch=True, **nodes)
    assert allowed.env["MW_ENV_ALLOW_ENV_MISMATCH"] == "1"
    assert "MW_ENV_ALLOW_ENV_MISMATCH" not in _prepare(venv, **nodes).env
    # `train` and `train start` take it as an option (test_train_cli holds their options to the request's fields).
