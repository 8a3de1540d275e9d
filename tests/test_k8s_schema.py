"""Kubernetes advice valid against the Kubernetes API schema (issue 20 #13).

The schema check: every field of every generated object must exist, at its place and with its type, in the
models of the official Kubernetes Python client (`kubernetes.client`, generated from the API's OpenAPI spec:
`attribute_map` names the JSON fields, `openapi_types` their types). No cluster is needed, unlike
`kubectl apply --dry-run=client`, which asks the API server for the schema; Debian's kubectl (1.20) is older
than the Indexed Job. The single-pod advice of `host-commands --runtime kubernetes` used to put
`securityContext.supplementalGroups` in the container's spec, where the schema has no such field.
"""

from __future__ import annotations

import pytest
import yaml

from mw_env.cli import main

kclient = pytest.importorskip("kubernetes.client")

KINDS = {
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Service"): "V1Service",
    ("batch/v1", "Job"): "V1Job",
    ("v1", "Pod"): "V1Pod",
    ("v1", "ConfigMap"): "V1ConfigMap",
}
QUANTITY_MAPS = ("limits", "requests", "capacity")


def _errors(value, type_name: str, path: str) -> list[str]:
    lowered = type_name[:5].lower()
    if lowered == "list[":
        if not isinstance(value, list):
            return [f"{path}: a list expected ({type_name}), got {value!r}"]
        return [e for i, v in enumerate(value) for e in _errors(v, type_name[5:-1], f"{path}[{i}]")]
    if lowered in ("dict(", "dict["):  # `dict(str, str)` in older clients, `Dict[str, str]` in newer ones
        if not isinstance(value, dict):
            return [f"{path}: a map expected ({type_name}), got {value!r}"]
        inner = type_name[type_name.index(",") + 1 : -1].strip()
        if path.rsplit(".", 1)[-1] in QUANTITY_MAPS:
            inner = "quantity"
        return [e for k, v in value.items() for e in _errors(v, inner, f"{path}.{k}")]
    if type_name == "quantity":
        return (
            []
            if isinstance(value, (str, int, float)) and not isinstance(value, bool)
            else [f"{path}: quantity"]
        )
    if type_name in ("str", "datetime"):
        return [] if isinstance(value, str) else [f"{path}: a string expected, got {value!r}"]
    if type_name == "int":
        return [] if isinstance(value, int) and not isinstance(value, bool) else [f"{path}: an int expected"]
    if type_name == "bool":
        return [] if isinstance(value, bool) else [f"{path}: a bool expected, got {value!r}"]
    if type_name == "object":  # IntOrString and free-form
        return []
    model = getattr(kclient, type_name)
    if not isinstance(value, dict):
        return [f"{path}: a {type_name} object expected, got {value!r}"]
    fields = {json_name: py for py, json_name in model.attribute_map.items()}
    out = []
    for key, v in value.items():
        if key not in fields:
            out.append(f"{path}.{key}: {type_name} has no field {key!r}")
        else:
            out += _errors(v, model.openapi_types[fields[key]], f"{path}.{key}")
    return out


def schema_errors(doc: dict) -> list[str]:
    kind = KINDS.get((doc.get("apiVersion"), doc.get("kind")))
    if kind is None:
        return [f"unknown kind {doc.get('apiVersion')}/{doc.get('kind')}"]
    return _errors(doc, kind, doc["kind"])


def test_the_check_finds_a_misplaced_field():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "securityContext": {"supplementalGroups": [992]}}]},
    }
    assert schema_errors(pod) == [
        "Pod.spec.containers[0].securityContext.supplementalGroups: V1SecurityContext has no field 'supplementalGroups'"
    ]
    pod["spec"] = {"securityContext": {"supplementalGroups": [992]}, "containers": [{"name": "c"}]}
    assert schema_errors(pod) == []


@pytest.mark.parametrize("profile", ["cuda", "rocm"])
def test_the_multinode_manifest_is_valid_and_written_only_when_complete(tmp_path, capsys, profile):
    out = tmp_path / "job.yaml"
    args = ["host-commands", "--runtime", "kubernetes", "--nodes", "2", "--image", "ghcr.io/org/trainer:1"]
    extra = ["--render-gid", "992"] if profile == "rocm" else []
    assert main([*args, "--gpus-per-node", "8", "--profile", profile, *extra, "--out", str(out)]) == 0
    docs = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert {d["kind"] for d in docs} == {"PersistentVolumeClaim", "Service", "Job"}
    for doc in docs:
        assert schema_errors(doc) == [], doc["kind"]
    if profile == "rocm":
        pod = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]
        assert pod["securityContext"] == {"supplementalGroups": [992]}


def test_the_manifest_that_bootstraps_every_pod_from_a_lock_is_valid(tmp_path, capsys):
    from envlock.lock_support import lock_text

    lock = tmp_path / "pylock.cuda.toml"
    lock.write_text(lock_text(tmp_path, profile="cuda", build="cuda", torch="2.9.1+cu126"))
    args = ["host-commands", "--runtime", "kubernetes", "--nodes", "2", "--image", "ghcr.io/org/trainer:1"]
    assert main([*args, "--profile", "cuda", "--lock", str(lock)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert {d["kind"] for d in docs} == {"ConfigMap", "PersistentVolumeClaim", "Service", "Job"}
    for doc in docs:
        assert schema_errors(doc) == [], doc["kind"]


def test_no_gpu_and_no_profile_leaves_no_file(tmp_path, capsys, monkeypatch):
    # This machine has no GPU: the command fails (exit 2) and --out is never created, not even empty.
    out = tmp_path / "job.yaml"
    code = main(
        ["host-commands", "--runtime", "kubernetes", "--nodes", "2", "--profile", "cpu", "--out", str(out)]
    )
    assert code == 2 and not out.exists()
    assert "error:" in capsys.readouterr().err


def test_the_single_pod_advice_is_a_valid_pod_spec(tmp_path, capsys):
    assert (
        main(["host-commands", "--runtime", "kubernetes", "--profile", "rocm", "--container", "trainer-0"])
        == 0
    )
    out = capsys.readouterr().out
    lines = [line.removeprefix("# ") for line in out.splitlines() if line.startswith("# ")]
    fragment = "\n".join(lines[lines.index("spec:") :]).replace(
        "<the render group's gid ON THE NODE: getent group render>", "992"
    )
    spec = yaml.safe_load(fragment)["spec"]
    assert spec["securityContext"] == {"supplementalGroups": [992]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0"}, "spec": spec}
    assert schema_errors(pod) == []
    assert spec["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 1}
