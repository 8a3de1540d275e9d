"""Operator-side commands for the host: incus, docker/podman (oci), Kubernetes (k8s), and the fallback lines the doctor quotes when no plan can be made."""
