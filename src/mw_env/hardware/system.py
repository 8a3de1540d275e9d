"""CPU, memory, OS, Python interpreters and uv, read under the machine root."""

from __future__ import annotations

import json
import os
import re
import shlex

from mw_env.hardware.facts import CpuInfo, OsInfo, PythonInfo, UvInfo
from mw_env.hardware.machine import CommandResult, Machine
from mw_env.hardware.probe import Probe

# CPU features that change what training can do fast (bf16/AMX matmuls, AVX-512 kernels in oneDNN).
CPU_FLAGS = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
    "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm",
)  # fmt: skip
PYTHON_TIMEOUT = 5.0
UV_TIMEOUT = 10.0
_PYTHON_NAME = re.compile(r"^python3(\.\d+)?$")
# The version, then the real executable: shims and symlinks of one interpreter are listed once.
_VERSION_SNIPPET = "import sys; print('.'.join(map(str, sys.version_info[:3]))); print(sys.executable)"


def cpu_info(probe: Probe) -> CpuInfo:
    """From proc/cpuinfo under the root; py-cpuinfo (slow, ~1 s) only on the real root when that fails."""
    text = probe.text("proc/cpuinfo", required=True)
    arch = probe.line("proc/sys/kernel/arch")
    if text:
        brand, count, flags = _parse_cpuinfo(text)
        if arch is None:
            arch = "aarch64" if "asimd" in flags else "x86_64" if "sse2" in flags else None
        if count:
            return CpuInfo(
                brand=brand or "unknown",
                arch=arch or _real_arch(probe),
                cores=count,
                flags=tuple(f for f in CPU_FLAGS if f in flags),
                quota_cores=_cpu_quota(probe),
            )
        probe.note("/proc/cpuinfo: no 'processor' entries")
    if probe.machine.is_real:
        return _py_cpuinfo(probe, arch)
    return CpuInfo(arch=arch or "unknown", quota_cores=_cpu_quota(probe))


def _parse_cpuinfo(text: str) -> tuple[str | None, int, set[str]]:
    brand: str | None = None
    count = 0
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            count += 1
        elif key in ("model name", "hardware", "cpu model") and brand is None and value:
            brand = value
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return brand, count, flags


def _real_arch(probe: Probe) -> str:
    if probe.machine.is_real:
        import platform

        return platform.machine() or "unknown"
    return "unknown"


def _py_cpuinfo(probe: Probe, arch: str | None) -> CpuInfo:
    try:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
    except Exception as exc:  # py-cpuinfo probes in many ways; any failure just means "unknown"
        probe.note(f"py-cpuinfo failed: {exc}")
        return CpuInfo(arch=arch or _real_arch(probe), cores=os.cpu_count() or 0)
    flags = set(info.get("flags") or ())
    return CpuInfo(
        brand=str(info.get("brand_raw") or "unknown"),
        arch=arch or str(info.get("arch_string_raw") or _real_arch(probe)),
        cores=int(info.get("count") or os.cpu_count() or 0),
        flags=tuple(f for f in CPU_FLAGS if f in flags),
        quota_cores=_cpu_quota(probe),
    )


def _cpu_quota(probe: Probe) -> float | None:
    """The cgroup v2 CPU limit (`cpu.max` = "quota period" or "max period") in CPUs."""
    line = probe.line("sys/fs/cgroup/cpu.max")
    if not line:
        return None
    parts = line.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        return round(int(parts[0]) / int(parts[1]), 2)
    except (ValueError, ZeroDivisionError):
        probe.note(f"/sys/fs/cgroup/cpu.max: {line[:40]!r} is not 'quota period'")
        return None


def memory_total(probe: Probe) -> int | None:
    """MemTotal from proc/meminfo, in bytes (inside incus, lxcfs makes this the container's limit)."""
    text = probe.text("proc/meminfo", required=True)
    if text is None:
        return None
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    if m is None:
        probe.note("/proc/meminfo: no readable 'MemTotal: N kB' line")
        return None
    return int(m.group(1)) * 1024


def memory_limit(probe: Probe) -> int | None:
    """The container's cgroup memory limit in bytes (v2 `memory.max`, v1 `limit_in_bytes`); None = none."""
    for rel in ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"):
        line = probe.line(rel)
        if line is None or line == "max":
            continue
        try:
            value = int(line)
        except ValueError:
            probe.note(f"/{rel}: {line[:40]!r} is not a number of bytes")
            continue
        # cgroup v1 reports "no limit" as a huge page-aligned number (9223372036854771712).
        return value if value < 2**60 else None
    return None


def os_info(probe: Probe) -> OsInfo:
    fields: dict[str, str] = {}
    text = probe.text("etc/os-release") or probe.text("usr/lib/os-release")
    if text is None:
        probe.note("/etc/os-release and /usr/lib/os-release: missing or unreadable; OS unknown")
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().isidentifier():
            try:
                parts = shlex.split(value, comments=False)
            except ValueError:
                parts = [value.strip().strip("\"'")]
            fields[key.strip()] = parts[0] if parts else ""
    kernel = probe.line("proc/sys/kernel/osrelease", required=True)
    if kernel is None and probe.machine.is_real:
        import platform

        kernel = platform.release()
    return OsInfo(
        id=fields.get("ID", "unknown") or "unknown",
        version=fields.get("VERSION_ID", ""),
        pretty=fields.get("PRETTY_NAME") or fields.get("NAME") or "unknown",
        kernel=kernel or "unknown",
    )


def uv_info(probe: Probe) -> UvInfo | None:
    m = probe.machine
    path = m.which("uv")
    if path is None:
        return None
    result = m.run([path, "--version"], timeout=UV_TIMEOUT)
    version = None
    if result.ok and (match := re.search(r"\buv\s+(\d+\.\d+\.\d+\S*)", result.stdout)):
        version = match.group(1)
    else:
        probe.note(f"uv --version: {result.describe()}")
    return UvInfo(path=path, version=version)


def pythons(probe: Probe, uv: UvInfo | None) -> tuple[PythonInfo, ...]:
    """python3 and python3.X on PATH (each run once, with a timeout), the Pythons pyenv installed
    (read from its versions folder: a pyenv shim is never run), plus uv's interpreters."""
    m = probe.machine
    # Listed by the machine: a fake root's own (fake) Pythons, never the host's.
    on_path = m.programs(_PYTHON_NAME)
    # A pyenv shim is a bash script that runs pyenv's own programs: ~100 processes a start, ~1,400 for the
    # python3.X shims of a host with pyenv (1.9x py-cpuinfo's time). What it would run is in versions/.
    roots = {p: _pyenv_root(m, p) for p in on_path}
    seen = {os.path.realpath(p) for p in on_path if roots[p] is None}

    def ask(p: str, timeout: float = PYTHON_TIMEOUT) -> CommandResult:
        return m.run([p, "-I", "-S", "-c", _VERSION_SNIPPET], timeout=timeout)

    found: list[PythonInfo] = []
    broken: list[str] = []
    slow: list[str] = []
    for path in on_path:
        root = roots[path]
        if root is not None:
            for version, exe in _pyenv_versions(m, root):
                if os.path.realpath(exe) not in seen:
                    seen.add(os.path.realpath(exe))
                    found.append(PythonInfo(version=version, path=exe, source="pyenv"))
            continue
        result = ask(path)
        if result.timed_out:  # slowness, not breakage: a second try, with twice the time
            result = ask(path, 2 * PYTHON_TIMEOUT)
        lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()] if result.ok else []
        at = next((i for i, ln in enumerate(lines) if re.fullmatch(r"\d+\.\d+\.\d+", ln)), None)
        if at is None:
            (slow if result.timed_out else broken).append(path)
            continue
        executable = lines[at + 1] if at + 1 < len(lines) and lines[at + 1].startswith("/") else None
        if executable:
            real = os.path.realpath(executable)
            if real in seen and real != os.path.realpath(path):
                continue  # another name (a shim) for an interpreter already listed
            seen.add(real)
        found.append(PythonInfo(version=lines[at], path=path, source="PATH"))
    if broken:
        probe.note(f"on PATH but do not run: {', '.join(broken)}")
    if slow:
        probe.note(
            f"on PATH but did not answer within {2 * PYTHON_TIMEOUT:g} s (a busy machine?), not listed: "
            f"{', '.join(slow)}"
        )
    if uv is not None:
        for version, path in _uv_pythons(probe, uv):
            real = os.path.realpath(path)
            if real not in seen:
                seen.add(real)
                found.append(PythonInfo(version=version, path=path, source="uv"))
    return tuple(found)


def _pyenv_root(m: Machine, path: str) -> str | None:
    """PYENV_ROOT (the machine's own path) for a pyenv shim, a script that hands itself to `pyenv exec`; None for
    anything else, and for a fake root's shim that names a pyenv outside it."""
    rel = m.inside(path)
    head = m.read_bytes(rel, max_bytes=4096) if rel is not None else None
    if not head or not head.startswith(b"#!") or not re.search(rb'libexec/pyenv"?\s+exec\b', head):
        return None  # pyenv's shims end in `exec "$PYENV_ROOT/libexec/pyenv" exec "$program" "$@"`
    named = re.search(rb'PYENV_ROOT="([^"\n]+)"', head)
    return m.inside(os.fsdecode(named.group(1)) if named else os.path.dirname(os.path.dirname(path)))


def _pyenv_versions(m: Machine, root: str) -> list[tuple[str, str]]:
    """(version, bin/python3.X) of each CPython 3 under pyenv's versions/, newest first, from its files alone:
    include/python3.X/patchlevel.h states the version (PY_VERSION); else the folder's name, as pyenv names it."""
    out: list[tuple[tuple[int, ...], str, str]] = []
    for name in m.listdir(f"{root}/versions"):
        folder = f"{root}/versions/{name}"
        for exe in (n for n in m.listdir(f"{folder}/bin") if re.fullmatch(r"python3\.\d+", n)):
            version = _patchlevel(m, f"{folder}/include", exe) or name
            st = m.stat(f"{folder}/bin/{exe}")
            if (
                re.fullmatch(r"\d+\.\d+\.\d+", version)
                and version.startswith(exe[len("python") :] + ".")
                and st is not None
                and st.kind == "file"
                and st.mode & 0o111
            ):
                out.append(
                    (tuple(int(x) for x in version.split(".")), version, str(m.path(f"{folder}/bin/{exe}")))
                )
    return [(version, path) for _, version, path in sorted(out, reverse=True)]


def _patchlevel(m: Machine, include: str, exe: str) -> str | None:
    """PY_VERSION from include/python3.X[m]/patchlevel.h ("3.12.1"; a release candidate's is left out)."""
    for sub in (exe, exe + "m"):
        text = m.read(f"{include}/{sub}/patchlevel.h", max_bytes=16384)
        if text is not None:
            found = re.search(r'#define\s+PY_VERSION\s+"([^"]+)"', text)
            return found.group(1) if found else None
    return None


def _uv_pythons(probe: Probe, uv: UvInfo) -> list[tuple[str, str]]:
    """(version, path) of CPython interpreters uv knows, JSON output first, else the text listing."""
    m = probe.machine
    base = [uv.path, "python", "list", "--only-installed"]
    env = {**m.env, "UV_OFFLINE": "1", "NO_COLOR": "1"}  # listing must never download anything
    result = m.run([*base, "--output-format", "json"], timeout=UV_TIMEOUT, env=env)
    if result.ok:
        try:
            entries = json.loads(result.stdout)
        except json.JSONDecodeError:
            entries = None
        if isinstance(entries, list):
            out = []
            for e in entries:
                if isinstance(e, dict) and e.get("path") and e.get("implementation", "cpython") == "cpython":
                    version = str(e.get("version", ""))
                    if re.fullmatch(r"\d+\.\d+\.\d+", version):
                        out.append((version, str(e["path"])))
            return out
    result = m.run(base, timeout=UV_TIMEOUT, env=env)
    if not result.ok:
        probe.note(f"uv python list: {result.describe()}")
        return []
    return parse_uv_python_list(result.stdout)


def parse_uv_python_list(text: str) -> list[tuple[str, str]]:
    """Lines like `cpython-3.12.3-linux-x86_64-gnu    /usr/bin/python3.12 -> python3.12`."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s*cpython-(\d+\.\d+\.\d+)[^\s]*\s+(/\S+)", line)
        if m:
            out.append((m.group(1), m.group(2)))
    return out
