"""Container kind, CPU, memory, OS, Python interpreters and uv, each from a small fake root."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mw_env.hardware.container import container_info
from mw_env.hardware.machine import Machine
from mw_env.hardware.probe import Probe
from mw_env.hardware.system import (
    cpu_info,
    memory_limit,
    memory_total,
    os_info,
    parse_uv_python_list,
    pythons,
    uv_info,
)


def probe_for(root: Path, files: dict[str, str | bytes], *, path: str = "", meta: str | None = None) -> Probe:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    if meta is not None:
        (root / ".mw-env-fake.yaml").write_text(meta)
    return Probe(Machine(root=root, env={"PATH": path}))


# -- container ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("files", "kind", "name"),
    [
        ({}, "none", None),
        (
            {"proc/sys/kernel/osrelease": "5.15.167.4-microsoft-standard-WSL2\n", ".dockerenv": ""},
            "wsl",
            None,
        ),
        ({"run/host/container-manager": "podman\n", ".dockerenv": ""}, "podman", None),
        ({"run/systemd/container": "lxc\n", "etc/hostname": "c1\n"}, "lxc", "c1"),
        ({"proc/1/environ": b"container=lxc\0PATH=/bin\0", "etc/hostname": "box\n"}, "lxc", "box"),
        ({"proc/1/environ": b"container=oci\0", ".dockerenv": ""}, "docker", None),
        ({"proc/1/environ": b"container=oci\0"}, "other", None),
        ({"proc/1/environ": b"container=systemd-nspawn\0"}, "other", None),
        (
            {
                "run/.containerenv": 'engine="podman-5.0"\nname="trainer"\nid="abcdef0123456789"\n',
                ".dockerenv": "",
            },
            "podman",
            "trainer",
        ),
        ({"run/.containerenv": ""}, "podman", None),
        ({".dockerenv": ""}, "docker", None),
        (
            {
                ".dockerenv": "",
                "var/run/secrets/kubernetes.io/serviceaccount/token": "t",
                "etc/hostname": "pod-1\n",
            },
            "kubernetes",
            "pod-1",
        ),
        ({"proc/1/environ": b"KUBERNETES_SERVICE_HOST=10.0.0.1\0"}, "kubernetes", None),
        ({"proc/1/cgroup": "0::/kubepods/besteffort/pod1234/abcd\n"}, "kubernetes", None),
        ({"proc/1/cgroup": "12:cpu:/docker/3f2a\n"}, "docker", None),
    ],
)
def test_container_kind_and_name(tmp_path, files, kind, name):
    info = container_info(probe_for(tmp_path, files))
    assert (info.kind, info.name) == (kind, name)
    assert (info.evidence is None) == (kind == "none")


def test_incus_is_told_apart_from_lxc_by_its_socket(tmp_path):
    meta = "devices:\n  /dev/incus/sock: {type: socket, mode: '0600'}\n"
    info = container_info(
        probe_for(tmp_path, {"run/systemd/container": "lxc\n", "etc/hostname": "dev\n"}, meta=meta)
    )
    assert (info.kind, info.name) == ("incus", "dev") and "/dev/incus/sock" in info.evidence


def test_docker_container_id_from_mountinfo(tmp_path):
    cid = "a" * 64
    line = f"1504 1500 259:2 /var/lib/docker/containers/{cid}/hostname /etc/hostname rw - ext4 /dev/sda rw\n"
    info = container_info(probe_for(tmp_path, {".dockerenv": "", "proc/self/mountinfo": line}))
    assert info.id == cid


# -- CPU, memory, OS ----------------------------------------------------------------------------------------
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp sve bf16 i8mm
CPU implementer\t: 0x41
CPU part\t: 0xd4f

processor\t: 1
Features\t: fp asimd sve bf16 i8mm
CPU implementer\t: 0x41
"""


def test_cpu_from_arm_cpuinfo(tmp_path):
    cpu = cpu_info(
        probe_for(tmp_path, {"proc/cpuinfo": ARM_CPUINFO, "sys/fs/cgroup/cpu.max": "150000 100000\n"})
    )
    assert (cpu.arch, cpu.cores, cpu.brand) == ("aarch64", 2, "unknown")
    assert {"asimd", "sve", "bf16", "i8mm"} <= set(cpu.flags) and cpu.quota_cores == 1.5


def test_cpu_quota_garbage_is_noted(tmp_path):
    probe = probe_for(
        tmp_path,
        {"proc/cpuinfo": "processor : 0\nflags : sse2 avx2\n", "sys/fs/cgroup/cpu.max": "lots 100000\n"},
    )
    cpu = cpu_info(probe)
    assert cpu.cores == 1 and cpu.arch == "x86_64" and cpu.flags == ("avx2",) and cpu.quota_cores is None
    assert any("cpu.max" in n for n in probe.notes)


def test_memory_total_and_limits(tmp_path):
    probe = probe_for(
        tmp_path,
        {"proc/meminfo": "MemTotal:       32089456 kB\n", "sys/fs/cgroup/memory.max": "17179869184\n"},
    )
    assert memory_total(probe) == 32089456 * 1024 and memory_limit(probe) == 16 * 1024**3


def test_memory_limit_v1_unlimited(tmp_path):
    probe = probe_for(tmp_path, {"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"})
    assert memory_limit(probe) is None


def test_os_release_quotes_and_garbage(tmp_path):
    text = 'NAME="Fedora Linux"\nVERSION_ID=43\nID=fedora\nPRETTY_NAME="Fedora Linux 43 (Server Edition)"\nBROKEN LINE\nX="unterminated\n'
    info = os_info(
        probe_for(
            tmp_path, {"usr/lib/os-release": text, "proc/sys/kernel/osrelease": "6.18.7-200.fc43.x86_64\n"}
        )
    )
    assert (info.id, info.version, info.pretty, info.kernel) == (
        "fedora",
        "43",
        "Fedora Linux 43 (Server Edition)",
        "6.18.7-200.fc43.x86_64",
    )


# -- Python and uv ------------------------------------------------------------------------------------------
def script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


UV_TEXT = """cpython-3.13.1-linux-x86_64-gnu     /home/agent/.local/share/uv/python/cpython-3.13.1-linux-x86_64-gnu/bin/python3.13
cpython-3.12.3-linux-x86_64-gnu     /usr/bin/python3.12 -> python3.12
pypy-3.10.14-linux-x86_64-gnu       /home/agent/.local/share/uv/python/pypy-3.10.14/bin/pypy3.10
cpython-3.11.9-linux-x86_64-gnu     <download available>
"""


def test_parse_uv_python_list_text():
    assert parse_uv_python_list(UV_TEXT) == [
        ("3.13.1", "/home/agent/.local/share/uv/python/cpython-3.13.1-linux-x86_64-gnu/bin/python3.13"),
        ("3.12.3", "/usr/bin/python3.12"),
    ]


def test_pythons_on_path_and_from_uv_json(tmp_path):
    bin_dir = tmp_path / "bin"
    script(bin_dir, "python3.12", "echo 3.12.3\n")
    os.symlink("python3.12", bin_dir / "python3")  # same interpreter: listed once
    script(bin_dir, "python3.10", "echo 'pyenv: python3.10: command not found' >&2; exit 127\n")
    script(bin_dir, "python3-config", "echo nope\n")
    entries = [
        {"implementation": "cpython", "version": "3.13.1", "path": "/opt/uv/cpython-3.13.1/bin/python3.13"},
        {"implementation": "pypy", "version": "3.10.14", "path": "/opt/uv/pypy/bin/pypy3"},
        {"implementation": "cpython", "version": "3.12.3", "path": str(bin_dir / "python3.12")},
    ]
    script(
        bin_dir,
        "uv",
        'case "$*" in\n  --version) echo "uv 0.9.5 (d5f39331a 2025-10-21)" ;;\n'
        f"  *json*) echo '{json.dumps(entries)}' ;;\n  *) exit 2 ;;\nesac\n",
    )
    probe = Probe(Machine(root=tmp_path, env={"PATH": str(bin_dir)}))
    uv = uv_info(probe)
    assert uv is not None and uv.version == "0.9.5" and uv.path == str(bin_dir / "uv")
    found = pythons(probe, uv)
    assert [(p.version, Path(p.path).name, p.source) for p in found] == [
        ("3.12.3", "python3", "PATH"),
        ("3.13.1", "python3.13", "uv"),
    ]
    assert any("python3.10" in n and "do not run" in n for n in probe.notes)


def test_pythons_from_uv_text_listing_when_json_is_unsupported(tmp_path):
    bin_dir = tmp_path / "bin"
    listing = "".join(f"echo '{line}'\n" for line in UV_TEXT.splitlines())  # no cat: PATH is only bin_dir
    script(
        bin_dir,
        "uv",
        f'case "$*" in\n  --version) echo "uv 0.4.0" ;;\n  *output-format*) exit 2 ;;\n  *)\n{listing};;\nesac\n',
    )
    probe = Probe(Machine(root=tmp_path, env={"PATH": str(bin_dir)}))
    found = pythons(probe, uv_info(probe))
    assert [p.version for p in found] == ["3.13.1", "3.12.3"] and {p.source for p in found} == {"uv"}


def test_broken_uv_is_a_note_not_an_error(tmp_path):
    bin_dir = tmp_path / "bin"
    script(bin_dir, "uv", "echo boom >&2; exit 3\n")
    probe = Probe(Machine(root=tmp_path, env={"PATH": str(bin_dir)}))
    uv = uv_info(probe)
    assert uv is not None and uv.version is None
    assert pythons(probe, uv) == ()
    assert any(n.startswith("uv --version") for n in probe.notes) and any(
        "uv python list" in n for n in probe.notes
    )


def test_real_root_falls_back_to_py_cpuinfo_when_proc_cpuinfo_fails(monkeypatch):
    import cpuinfo

    from mw_env.hardware import probe as probe_module

    real_text = probe_module.Probe.text

    def no_cpuinfo(self, rel, *, required=False):
        return None if rel == "proc/cpuinfo" else real_text(self, rel, required=required)

    monkeypatch.setattr(probe_module.Probe, "text", no_cpuinfo)
    fake = {
        "brand_raw": "Fake CPU 9000",
        "count": 6,
        "flags": ["avx2", "avx512f", "sse2"],
        "arch_string_raw": "x86_64",
    }
    monkeypatch.setattr(cpuinfo, "get_cpu_info", lambda: fake)
    cpu = cpu_info(Probe(Machine(root=Path("/"), env={"PATH": ""})))
    assert (cpu.brand, cpu.cores, cpu.flags) == ("Fake CPU 9000", 6, ("avx2", "avx512f"))


def test_fake_root_never_asks_py_cpuinfo_about_this_machine(tmp_path, monkeypatch):
    import cpuinfo

    def fail():
        raise AssertionError("py-cpuinfo must not describe the real machine for a fake root")

    monkeypatch.setattr(cpuinfo, "get_cpu_info", fail)
    cpu = cpu_info(Probe(Machine(root=tmp_path, env={"PATH": ""})))
    assert cpu.cores == 0 and cpu.brand == "unknown"


def test_detect_can_skip_running_the_interpreters(tmp_path):
    from mw_env.hardware.detect import detect

    bin_dir = tmp_path / "bin"
    marker = tmp_path / "ran"
    script(bin_dir, "python3.12", f": > {marker}; echo 3.12.3\n")  # a builtin: PATH is bin_dir only
    m = Machine(root=tmp_path, env={"PATH": str(bin_dir)})
    assert detect(m, interpreters=False).pythons == () and not marker.exists()
    assert [p.version for p in detect(m).pythons] == ["3.12.3"] and marker.exists()


def test_shims_of_one_interpreter_are_listed_once(tmp_path):
    bin_dir = tmp_path / "bin"
    real = script(tmp_path / "versions" / "bin", "python3.11", "echo 3.11.7\n")
    for shim in ("python3", "python3.11"):  # pyenv shims: separate scripts, one real interpreter
        script(bin_dir, shim, f"echo 3.11.7; echo {real}\n")
    script(bin_dir, "python3.12", f"echo 3.12.3; echo {bin_dir / 'python3.12'}\n")
    found = pythons(Probe(Machine(root=tmp_path, env={"PATH": str(bin_dir)})), None)
    assert [(p.version, Path(p.path).name) for p in found] == [
        ("3.11.7", "python3"),
        ("3.12.3", "python3.12"),
    ]


def test_a_slow_interpreter_is_asked_again_alone_and_never_called_broken(tmp_path):
    """Issue 20 #12: under load a working pyenv shim missed its budget among eight parallel starts and was
    reported as one that "does not run". A timeout is retried alone with twice the time; one that still times
    out is named as slow, not broken."""
    from mw_env.hardware.machine import CommandResult

    bin_dir = tmp_path / "bin"
    script(bin_dir, "python3.11", "echo 3.11.9\n")
    script(bin_dir, "python3.13", "echo 3.13.1\n")

    calls: list[tuple[str, float]] = []

    class Busy(Machine):
        def run(self, argv, *, timeout=None, **kwargs):
            name = Path(argv[0]).name
            calls.append((name, timeout))
            if name == "python3.13" or (
                name == "python3.11" and len([c for c in calls if c[0] == name]) == 1
            ):
                return CommandResult(tuple(argv), None, timed_out=True, duration_s=timeout or 0)
            return super().run(argv, timeout=timeout, **kwargs)

    probe = Probe(Busy(root=tmp_path, env={"PATH": str(bin_dir)}))
    found = pythons(probe, None)
    assert [(p.version, Path(p.path).name) for p in found] == [("3.11.9", "python3.11")]
    assert ("python3.11", 10.0) in calls  # the second try, alone, with twice the budget
    assert not any("do not run" in n for n in probe.notes)
    assert any("python3.13" in n and "did not answer within 10 s" in n for n in probe.notes)


def test_a_pyenv_shim_is_never_run_its_versions_are_read(tmp_path):
    """Issue 39: a pyenv shim is a bash script that runs pyenv's programs (~100 processes a start); the Pythons it
    stands for are read from pyenv's versions folder (the version from include/.../patchlevel.h, else the folder's
    name), and a real interpreter on PATH is still asked."""
    pyenv = tmp_path / ".pyenv"
    marker = tmp_path / "shim-ran"
    shims = pyenv / "shims"
    for name in ("python3", "python3.12", "python3.11"):
        script(
            shims,
            name,
            f'export PYENV_ROOT="{pyenv}"\n: > {marker}\nexec "{pyenv}/libexec/pyenv" exec "$0"\n',
        )
    script(pyenv / "versions" / "3.12.1" / "bin", "python3.12", "exit 1\n")
    script(pyenv / "versions" / "3.12.1" / "bin", "python3", "exit 1\n")  # python3 is python3.12: not listed
    include = pyenv / "versions" / "3.12.1" / "include" / "python3.12"
    include.mkdir(parents=True)
    (include / "patchlevel.h").write_text('#define PY_MINOR_VERSION 12\n#define PY_VERSION "3.12.1"\n')
    script(pyenv / "versions" / "3.11.7" / "bin", "python3.11", "exit 1\n")  # no headers: the folder's name
    script(pyenv / "versions" / "2.7.18" / "bin", "python2.7", "exit 1\n")  # not a Python 3
    script(
        pyenv / "versions" / "pypy3.10-7.3.12" / "bin", "python3.10", "exit 1\n"
    )  # a name that is no version
    system = script(
        tmp_path / "usr" / "bin", "python3.11", f"echo 3.11.2; echo {tmp_path}/usr/bin/python3.11\n"
    )
    probe = Probe(Machine(root=tmp_path, env={"PATH": f"{shims}:{system.parent}"}))
    found = pythons(probe, None)
    assert [(p.version, p.path, p.source) for p in found] == [
        ("3.12.1", str(pyenv / "versions" / "3.12.1" / "bin" / "python3.12"), "pyenv"),
        ("3.11.7", str(pyenv / "versions" / "3.11.7" / "bin" / "python3.11"), "pyenv"),
        ("3.11.2", str(system), "PATH"),
    ]
    assert not marker.exists() and probe.notes == []


def test_a_fake_roots_shim_naming_the_hosts_pyenv_is_not_read(tmp_path):
    shims = tmp_path / "shims"
    script(shims, "python3", 'export PYENV_ROOT="/root/.pyenv"\nexec /root/.pyenv/libexec/pyenv exec "$0"\n')
    assert pythons(Probe(Machine(root=tmp_path, env={"PATH": str(shims)})), None) == ()
