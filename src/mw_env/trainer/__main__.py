"""The in-venv entry: `python -m mw_env.trainer run|config|summary|verify ...`.

`mw-env train` builds this command line (launch.py) and runs it with the venv's python, or with
torchrun for several processes. Errors print as `error:` / `hint:` lines with the documented exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mw_env.base.errors import EXIT_FAILED, EXIT_INTERRUPTED, MwEnvError, os_error_in

if TYPE_CHECKING:
    from mw_env.trainspec.config import ResolvedConfig


def _resolve(args: argparse.Namespace) -> ResolvedConfig:
    from mw_env.trainspec.config import find_config, resolve_config

    defaults = json.loads(args.profile_defaults) if args.profile_defaults else None
    path = find_config(args.config) if args.config else None
    return resolve_config(
        path=path,
        overrides=args.overrides or (),
        profile_defaults=defaults,
        profile_name=(defaults or {}).get("profile"),
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mw_env.trainer", description="mw-env's bundled trainer")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "config", "summary"):
        s = sub.add_parser(name)
        s.add_argument("--config", help="config file or shipped config name (smoke, address-tagger)")
        s.add_argument("--set", dest="overrides", action="append", metavar="KEY=VALUE")
        s.add_argument("--profile-defaults", help="JSON: the profile's trainer defaults")
        if name == "run":
            s.add_argument("--resume", type=Path, help="resume from this checkpoint")
            s.add_argument("--fresh", action="store_true", help="ignore existing checkpoints (kept, renamed)")
            s.add_argument("--doctor-json", type=Path, help="doctor report to include in the run report")
    v = sub.add_parser("verify")
    v.add_argument("run_dir", type=Path)
    return p


def _interrupt(_signum: int, _frame: object) -> None:
    """Ctrl-C: stop at once (KeyboardInterrupt, exit 130), once. `mw-env train` passes every SIGINT it gets
    on to us (a `kill -INT` of it alone must stop the run too), so a terminal's Ctrl-C, which reaches both,
    arrives twice: the second would break into the first one's clean-up."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        from mw_env.base.textsafe import tolerant_streams

        tolerant_streams()  # eval samples quote corpus words: a non-UTF-8 locale shows them escaped
        import signal

        from mw_env.base.lifeline import die_with_torchrun

        # A torchrun worker lives in its own session: without this it outlives a SIGKILLed torchrun.
        die_with_torchrun()
        # A closed terminal (SIGHUP to the foreground group, or torchrun passing its SIGHUP on) is a graceful
        # stop like SIGTERM, not a death without a checkpoint: the loop's SIGTERM handler takes it from here.
        signal.signal(signal.SIGHUP, lambda _s, _f: os.kill(os.getpid(), signal.SIGTERM))
        signal.signal(signal.SIGINT, _interrupt)
        from mw_env.trainer import lifecycle

        lifecycle.install()  # SIGTERM at start-up, during the steps and during the report: trainer/lifecycle.py
    args = _parser().parse_args(argv)
    started = os.environ.get("MW_ENV_STARTED_FILE")  # runs/rendezvous.py: the nodes met, the trainer runs
    if started and args.command == "run":
        with contextlib.suppress(OSError):
            Path(started).touch()
    try:
        if args.command == "verify":
            from mw_env.rundir.manifest import verify_manifest

            check = verify_manifest(args.run_dir)
            print(json.dumps(check.to_dict(), indent=2))
            return 0 if check.ok else 1
        resolved = _resolve(args)
        if args.command == "config":
            print(json.dumps(resolved.to_dict(), indent=2))
            return 0
        if args.command == "summary":
            from mw_env.trainspec.summary import summarize

            print(json.dumps(summarize(resolved.config), indent=2))
            return 0
        if args.resume and args.fresh:
            raise MwEnvError("--resume and --fresh exclude each other", exit_code=2)
        from mw_env.trainer.lifecycle import hold

        hold("startup")  # the fault harness's start-up phase: before torch, the process group, the corpus
        from mw_env.trainer.loop import train

        result = train(
            resolved=resolved,
            resume=args.resume,
            fresh=args.fresh,
            doctor_json=args.doctor_json,
            echo=_say,
        )
        from mw_env.trainer import lifecycle

        main_rank = os.environ.get("RANK", "0") in ("", "0")
        if result.reason == "stopped" and main_rank:
            _say(
                f"stopped at step {result.step} with checkpoint {result.last_checkpoint}: "
                "to resume, run the same command"
            )
        elif lifecycle.pending() is not None and main_rank:
            _say(
                "a stop was asked for while the report was written: the run had finished; its report is complete"
            )
        return 0
    except MwEnvError as exc:
        from mw_env.base.textsafe import safe_message  # escaped, bounded, credentials hidden (as in cli.py)

        print(f"error: {safe_message(exc.message)}", file=sys.stderr, flush=True)
        if exc.hint:
            print(f"hint: {safe_message(exc.hint)}", file=sys.stderr, flush=True)
        if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker: the code survives torchrun's own end
            from mw_env.rundir.contract import WORKER_EXIT

            print(f"{WORKER_EXIT}{exc.exit_code}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (OSError, RuntimeError) as exc:
        # A fault of the machine at any write (metrics, data card, report, manifest, export): one sentence
        # naming the fault and the file, exit 1; torch's RuntimeError that wraps an OSError counts as it.
        cause = os_error_in(exc)
        if cause is None:
            raise
        return _fault(cause)
    except BaseException as exc:
        from mw_env.trainer.lifecycle import StopRequested, stopped_before_start

        if not isinstance(exc, StopRequested):
            raise
        out = _out_dir(args)
        message = stopped_before_start(out, exc.signum)
        if os.environ.get("RANK", "0") in ("", "0"):
            _say(message)
        return 0


def _out_dir(args: argparse.Namespace) -> Path | None:
    """The run folder from the command line's config (for a stop before the config was even read)."""
    try:
        return Path(_resolve(args).config.runtime.out_dir).expanduser().resolve()
    except BaseException:
        return None


def _fault(exc: OSError) -> int:
    from mw_env.base.textsafe import safe_message
    from mw_env.trainer.lifecycle import fault_error

    err = fault_error(exc)
    print(f"error: {safe_message(err.message)}", file=sys.stderr, flush=True)
    print(f"hint: {safe_message(err.hint or '')}", file=sys.stderr, flush=True)
    return EXIT_FAILED  # a fault of the machine during a run: the run failed (exit 1), whatever the errno


def _say(msg: str) -> None:
    # Everything the trainer prints may quote the corpus (eval samples, labels, paths): terminal escapes in
    # a token are shown escaped, never executed by the terminal.
    from mw_env.base.textsafe import safe

    try:
        print(safe(msg, limit=None, newlines=True), flush=True)
    except (OSError, ValueError) as exc:
        # stdout is full (/dev/full), closed or a pipe whose reader left: say that, not "the disk is full"
        # (the checkpoints' disk is fine). fd 1 goes to /dev/null so the interpreter's last flush of what
        # stays buffered cannot print "Exception ignored" either.
        from mw_env.base.errors import os_words

        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        why = (exc.strerror or os_words(exc)) if isinstance(exc, OSError) else "it is closed"
        raise MwEnvError(
            f"cannot write to standard output: {why}",
            hint="send the output to a file or a pipe that can take it, then run the same command: it resumes "
            "from the newest checkpoint (all are kept)",
        ) from None


if __name__ == "__main__":
    sys.exit(main())
