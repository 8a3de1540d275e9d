"""`mw-env host-commands --runtime kubernetes --nodes N`: a multi-node manifest that parses and says what runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mw_env.cli import main

MACHINES = Path(__file__).parent / "fixtures" / "machines"


def _run(capsys, machine: str, *args: str) -> tuple[int, str, str]:
    code = main(["host-commands", "--root", str(MACHINES / machine), "--runtime", "kubernetes", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_amd_manifest_is_an_indexed_job_with_a_headless_service_and_the_render_group(capsys):
    code, out, err = _run(
        capsys, "rx7900xtx", "--nodes", "3", "--image", "ghcr.io/org/train:1", "--gpus-per-node", "2"
    )
    assert code == 0 and err == ""
    claim, service, job = list(yaml.safe_load_all(out))
    assert claim["kind"] == "PersistentVolumeClaim" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {
        "job-name": "mw-env-train"
    }
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (
        "Indexed",
        3,
        3,
        0,
    )
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert pod["securityContext"] == {"supplementalGroups": [992]}  # the device nodes' group, as numbers
    (train,) = pod["containers"]
    assert train["resources"] == {"limits": {"amd.com/gpu": 2}}
    args = train["args"]
    flags = {args[i]: args[i + 1] for i in range(1, len(args) - 1) if args[i].startswith("--")}
    assert args[0] == "train" and flags["--nnodes"] == "3" and flags["--nproc-per-node"] == "2"
    assert (
        flags["--node-rank"] == "$(NODE_RANK)"
        and flags["--rdzv-endpoint"] == "mw-env-train-0.mw-env-train:29500"
    )
    (rank_env,) = train["env"]
    assert rank_env["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )
    mounts = {m["mountPath"] for m in train["volumeMounts"]}
    assert mounts == {"/runs", "/dev/shm"} and flags["--set"] == "runtime.out_dir=/runs/mw-env-train"
    assert out.startswith("# 3 pods of an Indexed Job")


def test_nvidia_manifest_with_an_existing_claim_as_json(capsys):
    code, out, _ = _run(
        capsys,
        "nvidia-h100x8-565",
        "--nodes",
        "2",
        "--image",
        "reg/t:2",
        "--gpus-per-node",
        "8",
        "--pvc",
        "shared-runs",
        "--name",
        "tagger",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    service, job = list(yaml.safe_load_all(data["manifest"]))
    pod = job["spec"]["template"]["spec"]
    assert "securityContext" not in pod and pod["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": 8}
    }
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "shared-runs"}
    assert service["metadata"]["name"] == "tagger" and "--rdzv-id" in pod["containers"][0]["args"]


@pytest.mark.parametrize(
    ("machine", "args", "message"),
    [
        ("rx7900xtx", ["--nodes", "2"], "--nodes needs --image"),
        ("rx7900xtx", ["--nodes", "2", "--image", "a b"], "--image 'a b'"),
        ("rx7900xtx", ["--nodes", "2", "--image", "i:1", "--name", "Bad_Name"], "--name 'Bad_Name'"),
        ("cpu-only", ["--nodes", "2", "--image", "i:1"], "nothing to pass through"),
        (
            "incus-780m-no-passthrough",
            ["--nodes", "2", "--image", "i:1", "--profile", "gfx1103"],
            "render group",
        ),
    ],
)
def test_bad_input_is_error_and_hint_exit_2(capsys, machine, args, message):
    code, out, err = _run(capsys, machine, *args)
    assert code == 2 and out == "", out
    assert err.startswith("error: ") and message in err and "\nhint: " in err


def test_nodes_needs_the_kubernetes_runtime(capsys):
    code = main(
        ["host-commands", "--root", str(MACHINES / "rx7900xtx"), "--runtime", "docker", "--nodes", "2"]
    )
    _out, err = capsys.readouterr()
    assert code == 2 and "needs --runtime kubernetes" in err and "mw-env train --nnodes N" in err
