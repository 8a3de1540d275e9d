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


def test_hsa_api_call_failure_before_a_permission_error_is_not_the_cause():
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


def test_the_hipblaslt_failure_after_the_rocblaslt_lines_is_its_own_entry():
    # TheRock#754: the two rocblaslt lines, then the GEMM that fails (issue 40). An `AMDKFD_IOC_ACQUIRE_VM failed`
    # entry stood here before; its message has one form only (legacy-rocm-build#438), so it could not carry two.
    log = """
    rocblaslt error: Cannot read "TensileLibrary_lazy_gfx1151.dat": No such file or directory
    rocblaslt error: Could not load "TensileLibrary_lazy_gfx1151.dat"
    Error in Linear: CUDA error: HIPBLAS_STATUS_INVALID_VALUE when calling `hipblasLtMatmulAlgoGetHeuristic( ltHandle, computeDesc.descriptor(), Adesc.descriptor(), Bdesc.descriptor(), Cdesc.descriptor(), Cdesc.descriptor(), preference.descriptor(), 1, &heuristicResult, &returnedResult)`
    """
    assert _ids(log) == ["rocblaslt-lazy-library"] * 2 + ["hipblaslt-invalid-value"]
    entry = next(m for m in CAT.messages if m.id == "hipblaslt-invalid-value")
    assert "TheRock#7609" in entry.cause and "_int_mm" in entry.fix
    assert entry.fix.startswith("`export TORCH_BLAS_PREFER_HIPBLASLT=0`")
    assert all(m.id != "kfd-ioctl-mismatch" for m in CAT.messages)


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
    # which source: derived (issue 30); pytorch#179653 was closed unmerged, not a source of gfx1103 (issue 40)
    assert "closed unmerged" in entry.cause and "source table" in entry.cause
    native, override = entry.fix.index("native kernels"), entry.fix.index("HSA_OVERRIDE_GFX_VERSION=11.0.0")
    assert native < override and "hang" in entry.fix
