"""The catalogue of known messages: every error text of the seeds maps to its cause; the YAML is validated;
profiles extend it; docs/troubleshooting.md is generated from it."""

from __future__ import annotations

import pytest

from conftest import REPO
from mw_env.base.errors import InputError
from mw_env.checks.catalogue import load_catalogue, parse_catalogue, profile_messages
from mw_env.checks.catalogue_doc import render_troubleshooting

# (log line as users see it, catalogue id). Every error text in seeds/amd-whisper-finetune.txt and
# seeds/training-environment.txt, plus the failure catalogue of doctor-anchors.md.
SEED_LINES = [
    ("Memory critical error by agent node-0 ... Reason: Memory in use.", "memory-critical-in-use"),
    (
        "Memory critical error by agent node-0 (Agent handle: 0x55d0c6a8b2a0) on address 0x7f5a40000000. Reason: Memory in use.",
        "memory-critical-in-use",
    ),
    (
        "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py:125: UserWarning: Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas (Triggered internally at ../aten/src/ATen/Context.cpp:296.)",
        "hipblaslt-unsupported-arch",
    ),
    ("/opt/amdgpu/share/libdrm/amdgpu.ids: No such file or directory", "amdgpu-ids-missing"),
    ("amdgpu.ids: No such file or directory", "amdgpu-ids-missing"),
    ("RuntimeError: HIP error: invalid device function", "invalid-device-function"),
    (
        "HIP error: invalid device function\nCompile with `TORCH_USE_HIP_DSA` to enable device-side assertions.",
        "invalid-device-function",
    ),
    ("Unable to open /dev/kfd read-write: No such file or directory", "kfd-missing"),
    ("cuda: False", "torch-no-gpu"),
    (
        "pip._vendor.urllib3.exceptions.NewConnectionError: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution",
        "dns-failure",
    ),
    ("curl: (6) Could not resolve host: download.pytorch.org", "dns-failure"),
    ("UserWarning: Flash attention kernel not used because: (Triggered internally ...)", "sdpa-no-kernel"),
    ("RuntimeError: No available kernel.  Aborting execution.", "sdpa-no-available-kernel"),
    ("Unable to open /dev/kfd read-write: Permission denied", "kfd-permission"),
    ('agent is not member of "render" group, the default DRM access group.', "kfd-permission"),
    (
        "docker: Error response from daemon: Unable to find group render: no matching entries in group file.",
        "render-group-unknown",
    ),
    (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
        "shm-bus-error",
    ),
    ("HW Exception by GPU node-1 (Agent handle: 0x5a1) reason :GPU Hang", "gpu-hang"),
    (
        "rocBLAS error: Cannot read /venv/lib/python3.12/site-packages/torch/lib/rocblas/library/TensileLibrary.dat: Illegal seek for GPU arch : gfx1035",
        "tensile-illegal-seek",
    ),
    (
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 512.00 MiB",
        "hip-oom",
    ),
    # Issue 20 #6: a CUDA OOM used to get the HIP entry's BIOS-UMA / ttm / PYTORCH_HIP_ALLOC_CONF advice.
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB",
        "cuda-oom",
    ),
    ("RuntimeError: CUDA error: out of memory", "cuda-oom"),
    ("torch.cuda.OutOfMemoryError: HIP out of memory ... (GPU 0; 512.00 MiB total capacity)", "hip-oom"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "no-kernel-image"),
    (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
        "nvidia-driver-too-old",
    ),
    (
        "MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1030_40.kdb Performance may degrade.",
        "miopen-missing-kdb",
    ),
    (
        "MIOpen Error: filesystem error: cannot create directories: Permission denied [/tmp/miopen-cache/3.5.2.]",
        "miopen-cache-permission",
    ),
    ("Failed to initialize NVML: Unknown Error", "nvml-unknown-error"),
    ("Could not initialize Tensile host: No devices found", "tensile-no-devices"),
    (
        "RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
        "no-binary-for-gpu",
    ),
    ('"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"', "no-binary-for-gpu"),
    (
        "Call returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.",
        "hsa-out-of-resources",
    ),
    ("Unable to open /dev/kfd read-write: Cannot allocate memory", "kfd-enomem"),
    ("HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid.", "invalid-device-function"),
    ("'2.12.0+cu130'          # a CUDA build", "cuda-build-version"),
    (
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
        "no-kernel-image",
    ),
    ("torch.cuda.is_available() -> False", "torch-no-gpu"),
]


@pytest.mark.parametrize(("line", "expected"), SEED_LINES)
def test_seed_messages_map_to_their_entry(line, expected):
    hits = load_catalogue().scan(line)
    assert hits, f"no catalogue entry matches {line!r}"
    assert hits[0].message.id == expected


def test_severities_of_the_seed_messages():
    cat = load_catalogue()
    sev = {m.id: m.severity for m in cat.messages}
    assert sev["hipblaslt-unsupported-arch"] == "harmless"
    assert sev["amdgpu-ids-missing"] == "harmless"
    assert sev["memory-critical-in-use"] == "fatal"
    assert sev["invalid-device-function"] == "fatal"
    mem = next(m for m in cat.messages if m.id == "memory-critical-in-use")
    # One text, several causes: the entry names all three and sends the user to the staged probe.
    assert "--ipc=host" in mem.cause and "SELinux" in mem.cause and "Strix Halo" in mem.cause


def test_unrelated_lines_match_nothing():
    text = (
        "step 100 loss 1.234 lr 3e-4\nSaved checkpoint to runs/x/checkpoints/step-000000100.pt\ncuda: True\n"
        "torch 2.9.1+rocm7.2.0, hip 7.2.26015\n2.13.0+cpu"
    )
    assert load_catalogue().scan(text) == []


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        (
            {"id": "x", "pattern": "a", "severity": "deadly", "cause": "c", "fix": "f"},
            "severity 'deadly' is not allowed",
        ),
        ({"id": "x", "pattern": "(", "severity": "fatal", "cause": "c", "fix": "f"}, "not a valid regex"),
        (
            {"id": "x", "pattern": "a", "severity": "fatal", "cause": "c", "fix": "f", "colour": "red"},
            "unknown key 'colour'",
        ),
        (
            {"id": "x", "pattern": "a", "severity": "fatal", "cause": "", "fix": "f"},
            "'cause' must be a non-empty string",
        ),
    ],
)
def test_bad_catalogue_entries_are_named(entry, needle):
    with pytest.raises(InputError) as err:
        parse_catalogue({"messages": [entry]}, source="extra.yaml")
    assert "extra.yaml: messages[0]" in str(err.value)
    assert needle in str(err.value)


def test_profiles_extend_the_catalogue():
    from dataclasses import replace

    from mw_env.profiles import load_profiles

    gfx1103 = load_profiles()["gfx1103"]
    assert any(m.severity == "harmless" and "hipBLASLt" in m.title for m in profile_messages(gfx1103))
    # Covered by a shipped harmless entry: the shipped explanation is kept.
    hit = load_catalogue(profile=gfx1103).scan("Attempting to use hipBLASLt on an unsupported architecture!")[
        0
    ]
    assert hit.message.id == "hipblaslt-unsupported-arch"
    # A profile may re-classify a shipped warning as harmless on its hardware.
    kdb = "Missing system database file: gfx1030_40.kdb"
    custom = replace(gfx1103, doctor=replace(gfx1103.doctor, harmless_messages=(kdb,)))
    hit = load_catalogue(profile=custom).scan(
        f"MIOpen(HIP): Warning [SQLiteBase] {kdb} Performance may degrade."
    )[0]
    assert hit.message.severity == "harmless" and hit.message.source == "profile gfx1103"


def test_every_fix_placeholder_is_filled_by_some_check():
    import re

    src = "".join(p.read_text() for p in (REPO / "src" / "mw_env" / "checks").glob("*.py"))
    cat = load_catalogue()
    for key, fix in cat.fixes.items():
        assert f'"{key}"' in src, f"fix {key} is never used by a check"
        for name in re.findall(r"\{(\w+)\}", fix.cause + fix.fix):
            assert f"{name}=" in src, f"placeholder {{{name}}} of {key} is never filled"


def _named_fix_ids() -> dict[str, str]:
    """Every fix id a check names: the literal first argument of `.fix(...)` / `.fix_for(...)`, or each
    literal assigned to the name passed there (`fix_id = "a" if ... else "b"`), with where it is named."""
    import ast

    found: dict[str, str] = {}
    for path in sorted((REPO / "src" / "mw_env").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            assigned: dict[str, list[ast.expr]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            assigned.setdefault(target.id, []).append(node.value)
            for node in ast.walk(fn):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("fix", "fix_for")
                    and node.args
                ):
                    continue
                arg = node.args[0]
                exprs = assigned.get(arg.id, []) if isinstance(arg, ast.Name) else [arg]
                for expr in exprs:
                    for value in _literals(expr):
                        found[value] = f"{path.relative_to(REPO)}:{node.lineno}"
    return found


def _literals(expr: object) -> list[str]:
    """The strings an expression can be: a literal, or either branch of `a if cond else b`."""
    import ast

    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value]
    if isinstance(expr, ast.IfExp):
        return _literals(expr.body) + _literals(expr.orelse)
    return []


def test_every_fix_id_a_check_names_is_in_the_catalogue():
    named = _named_fix_ids()
    assert len(named) > 30  # the scan sees the checks' calls (a scan that finds nothing proves nothing)
    missing = {fix_id: where for fix_id, where in named.items() if fix_id not in load_catalogue().fixes}
    assert not missing, f"fix ids named by a check but missing from checks/catalogue.yaml: {missing}"


def test_troubleshooting_doc_is_generated_from_the_catalogue():
    doc = (REPO / "docs" / "troubleshooting.md").read_text()
    assert doc == render_troubleshooting(), (
        "regenerate: python -m mw_env.checks.catalogue_doc > docs/troubleshooting.md"
    )


def _noisy_log() -> list[str]:
    """Every seed line, in its own case, upper case and inside other text, among training chatter."""
    lines = []
    for i, (line, _) in enumerate(SEED_LINES):
        first = line.splitlines()[0]
        lines += [
            f"step {i} loss 1.{i:03d} lr 3e-4 tokens/s 12{i}45.6",
            first,
            first.upper(),
            f"[rank0] {first} (retrying)",
            "",
            "cuda: True",
        ]
    lines += ["torch 2.9.1+rocm7.2.0", "2.13.0+cpu", "  cuda:   FALSE  ", "a\tb\x0bc", "Ω" * 40]
    return lines


@pytest.mark.parametrize("with_profile", [False, True])
def test_screened_scan_equals_the_per_line_definition(with_profile):
    from mw_env.profiles import load_profiles

    cat = load_catalogue(profile=load_profiles()["gfx1103"] if with_profile else None)
    lines = _noisy_log()
    text = "\n".join(lines)
    assert cat.scan(text) == cat.scan_lines(text.splitlines())
    assert len(cat.scan(text)) >= 3 * len(SEED_LINES)


def test_keywords_are_what_every_match_must_contain():
    from mw_env.checks.screen import keywords, literal_runs

    assert keywords(r"Memory critical error by agent node-\d+.*?(Memory in use|$)") == (
        "memory critical error by agent node-",
    )
    assert keywords(r"\b\d+\.\d+\.\d+\+cu\d{2,3}\b") == ("+cu",)
    assert keywords(r"(HIP|CUDA) out of memory") == (" out of memory",)
    # Optional characters and anything inside a group or class are never required.
    assert literal_runs(r'Cannot read "?Tensile') == ["cannot read ", "tensile"]
    assert literal_runs(r"colou?r x{0,2}yz [abc]def") == ["colo", "r ", "yz ", "def"]
    # Patterns whose literal reading would be wrong, or too short to help, take the regex sweep.
    assert keywords(r"\x41BCDEF") is None
    assert keywords(r"(?x) spaced out") is None
    assert keywords(r"abc|\d+") is None


def test_patterns_without_keywords_are_still_found(tmp_path):
    from mw_env.checks.catalogue import Catalogue, Message

    cat = Catalogue(
        messages=(
            Message(id="digits", pattern=r"^\d{4}$", severity="warning", title="t", cause="c", fix="f"),
            Message(id="hex", pattern=r"\x41BC", severity="warning", title="t", cause="c", fix="f"),
        ),
        fixes={},
    )
    text = "step\n1234\nxabcx\n12345\n"
    assert [(h.message.id, h.line_no) for h in cat.scan(text)] == [("digits", 2), ("hex", 3)]


def test_no_doctor_finding_sends_the_user_to_the_doctor():
    # Inside the doctor's report "run `mw-env doctor`" is circular: such entries carry a doctor_fix.
    for msg in load_catalogue().messages:
        if "mw-env doctor" in msg.fix:
            assert msg.doctor_fix and "mw-env doctor" not in msg.doctor_fix, msg.id


def test_the_doctors_messages_check_uses_doctor_fix():
    from doctor_helpers import GPU_780M
    from test_verdicts import ctx_for, probe_of

    from mw_env.checks.messages import check_messages

    probe = probe_of(
        {"stage": "import", "ok": True},
        stderr="Could not initialize Tensile host: No devices found\n",
        returncode=1,
    )
    found = {c.id: c for c in check_messages(ctx_for("doctor-incus-780m-nokfd", GPU_780M, probe))}
    assert found["messages.tensile-no-devices"].fix == "Fix the device-node findings above first."


def test_each_vendor_gets_its_own_out_of_memory_fix(capsys, tmp_path):
    from mw_env.cli import main

    out = {}
    for vendor in ("CUDA", "HIP"):
        log = tmp_path / f"{vendor}.log"
        log.write_text(f"torch.OutOfMemoryError: {vendor} out of memory. Tried to allocate 2.00 MiB\n")
        assert main(["doctor", "--explain", str(log)]) == 1  # a fatal message found
        out[vendor] = capsys.readouterr().out
    assert "PYTORCH_CUDA_ALLOC_CONF" in out["CUDA"] and "ttm.pages_limit" not in out["CUDA"]
    assert "PYTORCH_HIP_ALLOC_CONF" not in out["CUDA"]
    assert "PYTORCH_HIP_ALLOC_CONF" in out["HIP"] and "PYTORCH_CUDA_ALLOC_CONF" not in out["HIP"]
