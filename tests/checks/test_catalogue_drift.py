"""Catalogue entries held to their sources' own text (issue 17): each thread's log, line by line, is claimed by
the entry that explains it, and the advice says what the source says."""

from __future__ import annotations

from mw_env.checks.catalogue import load_catalogue

CAT = load_catalogue()


def _ids(log: str) -> list[str | None]:
    out = []
    for line in log.strip().splitlines():
        hit = CAT.first_match(line.strip())
        out.append(hit.id if hit else None)
    return out


def test_hsa_api_call_failure_before_a_permission_error_is_not_a_kfd_version_mismatch():
    # ROCm/legacy-rocm-build#2232 (KFD refused the chip) and #1088-style permission failures: the
    # `hsa api call failure at:` line comes first and is not the cause.
    log = """
    Unable to open /dev/kfd read-write: Cannot allocate memory
    hsa api call failure at: /src/rocminfo/rocminfo.cc:1142
    Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources. This error may also occur when the core runtime library needs to spawn threads or create internal OS-specific events.
    """
    assert _ids(log) == ["kfd-enomem", None, "hsa-out-of-resources"]
    perm = "Unable to open /dev/kfd read-write: Permission denied\nhsa api call failure at: /src/rocminfo/rocminfo.cc:1142"
    assert _ids(perm) == ["kfd-permission", None]


def test_the_ioctl_mismatch_is_named_by_its_own_line_and_blames_the_old_userspace():
    # ROCm/legacy-rocm-build#438: ROCm 1.8 userspace against the newer upstream KFD of Linux 4.18.
    log = """
    acquiring VM for 86f3 using 5
    AMDKFD_IOC_ACQUIRE_VM failed
    hsa api call failure at line 896, file: /home/narthorn/dev/rocm/rocminfo/rocminfo.cc. Call returned 4104
    """
    assert _ids(log) == [None, "kfd-ioctl-mismatch", "hsa-out-of-resources"]
    entry = next(m for m in CAT.messages if m.id == "kfd-ioctl-mismatch")
    assert "older KFD ioctl interface" in entry.cause and "ROCm 1.9 will be compatible" in entry.cause
    assert entry.fix.startswith("Install a torch whose ROCm is new enough")


def test_nccl_unhandled_cuda_error_is_not_a_system_call_failure():
    # NVIDIA/nccl#1410 (verbatim), and the bare form of TheAtticusProject/cuad#9.
    log = """
    [rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
    [rank7]: ncclUnhandledCudaError: Call to CUDA function failed.
    what():  NCCL Error 1: unhandled cuda error
    RuntimeError: NCCL Error 2: unhandled system error
    """
    assert _ids(log) == ["nccl-unhandled-cuda"] * 3 + ["nccl-unhandled-system"]


def test_invalid_device_function_advises_native_kernels_before_the_hang_prone_override():
    entry = next(m for m in CAT.messages if m.id == "invalid-device-function")
    # The old text claimed gfx1103 was missing from "every" pytorch.org wheel and advised the override first.
    assert "every download.pytorch.org" not in entry.cause
    assert (
        "pytorch#179653" in entry.cause and "source table" in entry.cause
    )  # which source: derived (issue 30)
    native, override = entry.fix.index("native kernels"), entry.fix.index("HSA_OVERRIDE_GFX_VERSION=11.0.0")
    assert native < override and "hang" in entry.fix
