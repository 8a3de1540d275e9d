"""A ready multi-node training manifest for Kubernetes: an Indexed Job with a headless Service, running
`mw-env train` (torchrun with c10d rendezvous) in one pod per node.

Why an Indexed Job and not Kubeflow's PyTorchJob: it is core Kubernetes (Indexed completion mode is GA since
1.24), so it needs no operator on the cluster; each pod gets its index (the node rank) and, through the
headless Service named as its `subdomain`, a stable DNS name `<job>-<index>.<job>`, so pod 0 is the rendezvous
endpoint. `backoffLimit: 0` fails the whole Job when one pod fails instead of restarting that pod into a run
whose other nodes have moved on; a resume is a re-apply, and the ranks' checkpoint agreement does the rest.
The run folder is a ReadWriteMany claim mounted by every pod (rank 0 writes it; all ranks read the checkpoint).

One environment in every pod: with `--lock FILE` the lock travels in a ConfigMap mounted into each pod, and each
pod runs `mw-env bootstrap --lock` from it before `mw-env train` (a no-op, seconds, in an image built from that
lock; otherwise it installs exactly the lock into the image's venv), and its `mw-env train` refuses a venv whose
lock has another hash (MW_ENV_LOCK_SHA256). Whatever the pods hold, the trainer compares the nodes' environments
before the process group and stops them all on a difference (trainer/envcheck.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

import yaml

from mw_env.base.errors import InputError
from mw_env.base.shellquote import sh

if TYPE_CHECKING:
    from mw_env.hardware.facts import Hardware
    from mw_env.profiles.model import Selection

# Pod hostnames are `<job>-<index>`: a DNS-1123 label of at most 63 characters, with room for the index.
_JOB_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,40}[a-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")
_CONFIG = re.compile(r"^[A-Za-z0-9_./-]{1,200}$")
PORT = 29500
RUNS_MOUNT = "/runs"
LOCK_MOUNT = "/etc/mw-env/lock"  # the ConfigMap with the lock, in every pod
LOCK_KEY = "pylock.mw-env.toml"
CONFIGMAP_MAX = 1_000_000  # a ConfigMap holds at most 1 MiB, keys and metadata included


@dataclass(frozen=True)
class Manifest:
    text: str  # YAML documents, ready for `kubectl apply -f -`
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"runtime": "kubernetes", "manifest": self.text, "notes": list(self.notes)}


# The lock's sha256 a pod's venv must have (read by runs.launch; set by a manifest made with --lock).
LOCK_ENV = "MW_ENV_LOCK_SHA256"


@dataclass(frozen=True)
class PodLock:
    """The lock every pod bootstraps from: its file name (for the notes), sha256 and text (the ConfigMap's)."""

    name: str
    sha256: str
    text: str


def multinode_manifest(
    *,
    hardware: Hardware,
    selection: Selection,
    nodes: int,
    image: str | None,
    name: str = "mw-env-train",
    gpus_per_node: int = 1,
    config: str = "address-tagger",
    render_gid: int | None = None,
    pvc: str | None = None,
    storage: str = "50Gi",
    lock: PodLock | None = None,
) -> Manifest:
    """The Service, the Job (and the run folder's claim unless `pvc` names one) for `nodes` nodes."""
    if nodes < 2:
        raise InputError(f"--nodes {nodes}: a multi-node manifest needs 2 or more", hint="e.g. --nodes 2")
    if gpus_per_node < 1:
        raise InputError(f"--gpus-per-node {gpus_per_node}: must be >= 1")
    if not image or not _IMAGE.fullmatch(image):
        raise InputError(
            f"--image {image!r}: the manifest needs the image every pod runs"
            if image
            else "--nodes needs --image",
            hint="an image holding mw-env and its bootstrapped venv, e.g. ghcr.io/org/trainer:1.0",
        )
    if not _JOB_NAME.fullmatch(name):
        raise InputError(
            f"--name {name!r} is not a valid Job name",
            hint="1-42 lower-case letters, digits and '-', starting with a letter, not ending with '-'",
        )
    if not _CONFIG.fullmatch(config):
        raise InputError(f"--config {config!r}: a shipped config name or a path inside the image")
    from mw_env.host.commands import _vendor

    vendor = _vendor(hardware, selection)
    resource = "nvidia.com/gpu" if vendor == "nvidia" else "amd.com/gpu"
    notes = [
        f"{nodes} pods of an Indexed Job, one per node, {gpus_per_node} GPU(s) each ({resource}); "
        f"pod 0 ({name}-0.{name}:{PORT}) is the rendezvous endpoint",
        "apply with: mw-env host-commands ... --out job.yaml && kubectl apply -f job.yaml; "
        f"follow with: kubectl logs -f job/{name}",
        "a failed pod fails the Job (backoffLimit 0); to resume, delete the Job and apply again: every rank "
        "resumes the newest checkpoint of the shared run folder",
    ]
    security: dict[str, object] = {}
    if vendor == "amd":
        gid = render_gid if render_gid is not None else _device_gid(hardware)
        if gid is None:
            raise InputError(
                "the render group's number on the nodes is unknown here (no GPU device node seen)",
                hint="pass --render-gid N, N from `getent group render` on a node (AMD's device plugin mounts "
                "/dev/kfd and /dev/dri/renderD* root:render 0660)",
            )
        security = {"supplementalGroups": [int(gid)]}
        notes.append(f"supplementalGroups [{gid}]: the render group's number on the nodes (a non-root user)")
    claim = pvc or f"{name}-runs"
    if pvc is None:
        notes.append(
            f"the run folder is the claim {claim} ({storage}, ReadWriteMany: NFS, CephFS, a cloud file share); "
            "set storageClassName where the default class cannot share a volume between nodes"
        )
    run_dir = f"{RUNS_MOUNT}/{name}"
    endpoint = f"{name}-0.{name}:{PORT}"
    args = ["train", "--config", config, "--nnodes", str(nodes), "--node-rank", "$(NODE_RANK)"]
    args += ["--rdzv-endpoint", endpoint, "--rdzv-id", name, "--nproc-per-node", str(gpus_per_node)]
    args += ["--set", f"runtime.out_dir={run_dir}"]
    train_env: list[dict[str, object]] = []
    job_meta: dict[str, object] = {"name": name}
    command: list[str] = ["mw-env"]
    mounts: list[dict[str, object]] = []
    volumes: list[dict[str, object]] = []
    lock_map: dict[str, object] | None = None
    if lock is not None:
        size = len(lock.text.encode("utf-8"))
        if size > CONFIGMAP_MAX:
            raise InputError(
                f"--lock {lock.name} is {size:,} bytes: more than a ConfigMap holds (1 MiB)",
                hint=f"build the image from it instead (`mw-env bootstrap --lock {lock.name}` in the Dockerfile) and "
                "leave --lock out: the run still compares the pods' environments before training",
            )
        # Every pod's `mw-env train` compares its venv's lock with this hash and refuses another environment.
        train_env.append({"name": LOCK_ENV, "value": lock.sha256})
        job_meta["annotations"] = {"mw-env/lock": lock.name, "mw-env/lock-sha256": lock.sha256}
        lock_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-lock", "annotations": {"mw-env/lock-sha256": lock.sha256}},
            "data": {LOCK_KEY: lock.text},
        }
        volumes.append({"name": "lock", "configMap": {"name": f"{name}-lock"}})
        mounts.append({"name": "lock", "mountPath": LOCK_MOUNT, "readOnly": True})
        boot = [
            "mw-env",
            "bootstrap",
            "--profile",
            selection.profile.name,
            "--lock",
            f"{LOCK_MOUNT}/{LOCK_KEY}",
        ]
        train = " ".join(a if a == "$(NODE_RANK)" else shlex.quote(a) for a in args)
        # One shell line: the bootstrap, then the training in the venv it leaves. Kubernetes expands $(NODE_RANK)
        # in a command before sh reads it, as it does in args.
        command = ["sh", "-c", f"{shlex.join([*boot, '--yes', '--no-doctor'])} && exec mw-env {train}"]
        args = []
        notes.append(
            f"every pod bootstraps from the lock {lock.name} (sha256 {lock.sha256[:16]}..., the ConfigMap {name}-lock) "
            "before training: a no-op in an image built from it (`mw-env bootstrap --profile "
            f"{sh(selection.profile.name)} --lock {sh(lock.name)}` in its Dockerfile), else the lock's wheels are installed "
            f"into the image's venv (the network or a wheelhouse in the image); a pod whose venv then has another lock "
            f"refuses to train ({LOCK_ENV})"
        )
    else:
        notes.append(
            "no --lock: each pod trains in its image's venv as built; the run compares the pods' environments (lock, "
            "torch build, NCCL/RCCL, Python) before training and stops them all on a difference. Pass --lock FILE to "
            "bootstrap every pod from one lock"
        )
    service: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        # Headless, and the pods' names resolve before they are ready: the rendezvous comes before readiness.
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"job-name": name},
            "ports": [{"name": "rendezvous", "port": PORT}],
        },
    }
    pod_spec: dict[str, object] = {
        "subdomain": name,
        "restartPolicy": "Never",
        # Pod 0's name resolves once its pod exists; torchrun would give up on a name that does not resolve yet.
        "initContainers": [
            {
                "name": "wait-for-node-0",
                "image": image,
                "command": ["sh", "-c", f"until getent hosts {sh(f'{name}-0.{name}')}; do sleep 2; done"],
            }
        ],
        "containers": [
            {
                "name": "train",
                "image": image,
                "command": command,
                **({"args": args} if args else {}),
                "env": [
                    *train_env,
                    {
                        "name": "NODE_RANK",
                        "valueFrom": {
                            "fieldRef": {
                                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                            }
                        },
                    },
                ],
                "ports": [{"containerPort": PORT, "name": "rendezvous"}],
                "resources": {"limits": {resource: gpus_per_node}},
                "volumeMounts": [
                    {"name": "runs", "mountPath": RUNS_MOUNT},
                    {"name": "shm", "mountPath": "/dev/shm"},
                    *mounts,
                ],
            }
        ],
        "volumes": [
            {"name": "runs", "persistentVolumeClaim": {"claimName": claim}},
            # The container runtime's 64 MiB /dev/shm is too small for DDP's shared-memory transport.
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            *volumes,
        ],
    }
    if security:
        pod_spec["securityContext"] = security
    job: dict[str, object] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": job_meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }
    docs: list[dict[str, object]] = [service, job] if lock_map is None else [lock_map, service, job]
    if pvc is None:
        docs.insert(
            0,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": storage}}},
            },
        )
    text = yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False, width=1000)
    return Manifest(text=text, notes=tuple(notes))


def _device_gid(hardware: Hardware) -> int | None:
    """The numeric group of the GPU's device nodes as seen here: on a node, or in a pod of one, the node's."""
    gpu = hardware.gpu
    for node in gpu.device_nodes if gpu is not None else ():
        if node.exists and node.gid not in (None, 0):
            return node.gid
    return None
