"""The verify step: torch reports the profile's build, read in a child while the pin and the extras run.

What the step checks is provision/verify.py's (the command and the verdict); this module runs it, overlapped
with the steps after it (table.VERIFY_TORCH's Overlap), and records the step with the venv's fingerprint.
"""

from __future__ import annotations

import subprocess
import sys
import time

from mw_env.base.errors import StepFailed
from mw_env.base.shellquote import sh
from mw_env.provision import keys, verify
from mw_env.provision.model import GiB, Step
from mw_env.provision.steps import Run
from mw_env.sources import uv as uvmod
from mw_env.venv import venvinfo


def verify_torch(run: Run, step: Step) -> str:
    res = run.command(step, step.command or (), timeout=300)
    return verify_finish(run, step, res.output)


class BackgroundVerify:
    """The verify step's build check (torch/version.py, read without importing torch) in a child process while
    the pin and the extras install. Only that part may overlap: `import torch` loads numpy and friends, which
    the extras install is writing at that moment (a half-written numpy fails the import), so an import the
    step asks for runs after the extras (`verify_after_extras`)."""

    def __init__(self, run: Run, step: Step) -> None:
        import tempfile

        self.step, self.run = step, run
        self.started = time.monotonic()
        python = (step.command or (sys.executable,))[0]
        # Open across the extras install, closed by output() or stop().
        self._out = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self.proc = subprocess.Popen(
            list(verify.verify_command(python, import_torch=False)),
            env=uvmod.uv_env(run.plan.env),
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def output(self, timeout: float = 300) -> str:
        try:
            self.proc.wait(timeout=max(1.0, timeout - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.seek(0)
        text = self._out.read()
        self._out.close()
        return text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


def verify_after_extras(run: Run, step: Step, static_output: str) -> str:
    """Judge the overlapped build check, then run the step's own command (with `import torch`) when it has one."""
    python = (step.command or (sys.executable,))[0]
    imports = bool(step.command) and tuple(step.command or ()) != verify.verify_command(
        python, import_torch=False
    )
    # The step is recorded done only by the last check it owns: with an `import torch` check to come, the
    # static check alone must not mark it (a venv whose torch does not import was later called "ready").
    detail = verify_finish(run, step, static_output, record=not imports)
    if imports:
        res = run.command(step, step.command or (), timeout=300)
        detail = verify_finish(run, step, res.output)
    return detail


# Less free space than this after an install whose verify failed: the full disk is named as the likely cause.
LOW_DISK = 1 << 30


def _damage(run: Run) -> tuple[bool, str]:
    """(torch's own packages are damaged, the packages whose files differ from their RECORD in words)."""
    from mw_env.provision import repair
    from mw_env.venv.integrity import scan_venv

    p = run.plan
    scan = scan_venv(p.build_venv)
    torch = repair.torch_damage(scan, p)
    return bool(torch), "; ".join(d.words() for d in (*torch, *repair.other_damage(scan, p)))


def verify_finish(run: Run, step: Step, output: str, *, record: bool = True) -> str:
    """Judge the verify command's output (raises StepFailed for a wrong build) and, with `record`, record
    the step done."""
    p = run.plan
    run.outputs[step.id] = output
    try:
        found = verify.parse(output)
        verify.check(found, build=p.build, local_tag=p.local_tag, adopted=bool(p.adopted))
    except StepFailed as exc:
        run.state.mark(step.id, "started")  # never "done" over a failed check, whatever came before
        torch_damage, damaged = _damage(run)
        if not p.adopted and (torch_damage or not damaged):
            # The next run reinstalls torch instead of trusting it (not where only other packages' files are
            # damaged: the repair step reinstalls exactly those).
            run.state.mark("torch", "started")
        free = venvinfo.free_bytes(p.build_venv)
        if damaged:
            # Files that differ from their RECORD explain the failure; the re-run reinstalls exactly them (a
            # verify that failed over them used to say "the torch step is redone", which could not help).
            exc.message += f"; installed files differ from their RECORD: {damaged}"
            exc.hint = (
                f"re-run `mw-env bootstrap --venv {sh(p.venv)}`: it reinstalls these packages (cleaning uv's cache "
                "entry of one whose changed file is linked from it)"
            )
            if free is not None and free < LOW_DISK:
                exc.hint = f"the disk of {p.build_venv} has only {free / GiB:.2f} GiB free: free space, then {exc.hint}"
        elif free is not None and free < LOW_DISK:
            # uv can report success over a disk that filled mid-install (a package left without a file):
            # the import then fails for a reason that only the free space explains.
            exc.hint = (
                f"the disk of {p.build_venv} has only {free / GiB:.2f} GiB free: an install that ran out of "
                "space leaves packages half-written; free space, then run bootstrap again with --recreate"
            )
        raise
    if record:
        # The key digests the installed files: a file lost later makes the next run verify again.
        run.state.mark(
            step.id, "done", keys.verify_key(p, keys.current_torch(p), fingerprint=run.fingerprint)
        )
    return f"torch {found.version} ({found.build}{', hip ' + found.hip if found.hip else ''}" + (
        f", cuda {found.cuda})" if found.cuda else ")"
    )
