"""`mw-env train export --format safetensors RUN`, inside the training venv:

    python -m mw_env.trainer.weights.export TARGET [--out DIR]

TARGET is a run folder (its newest complete checkpoint, each damaged newer one warned about and skipped) or a
step-*.pt file; the folder goes to <run>/weights/step-N/ unless --out names one. The written folder is read back
the way `train predict --weights` reads it and its logits compared with the checkpoint's model on held-out inputs
(the same tensors: the difference is 0). Prints one JSON line: the result, or {"error", "hint", "exit_code"}.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mw_env.base.errors import EXIT_FAILED, MwEnvError, os_error_in, os_fault
from mw_env.rundir.contract import WEIGHTS_DIR, step_folder_name, weights_dir


def export_weights(
    *, target: Path, out: Path | None = None, wrote: list[Path] | None = None
) -> dict[str, object]:
    """Write the portable weights folder of `target`'s checkpoint; return what was written and checked. The
    folder, once committed whole, is appended to `wrote` (a stop after that point leaves it, complete)."""
    import torch

    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.ckpt.newest import newest_checkpoint
    from mw_env.trainer.export.onnx_export import run_dir_of
    from mw_env.trainer.export.verify import held_out_inputs
    from mw_env.trainer.weights import folder as wf
    from mw_env.trainer.weights.load import build, read_weights
    from mw_env.trainspec.config import config_from_dict

    # Loaded once, the newest complete one: a run still training beside us may rotate or rewrite its checkpoints.
    ckpt_path, ckpt = newest_checkpoint(target, warn=lambda msg: print(msg, file=sys.stderr))
    model, tokenizer, labels = model_from_checkpoint(ckpt)
    config = config_from_dict(ckpt["config"])
    step = int(ckpt["step"])
    run_dir = run_dir_of(ckpt_path)
    if out is None:
        out = (weights_dir(run_dir) if run_dir else ckpt_path.parent / WEIGHTS_DIR) / step_folder_name(step)
    out = Path(out).expanduser().resolve()
    wf.write_weights(
        out,
        state=model.state_dict(),
        config=config,
        tokenizer=tokenizer,
        labels=labels,
        step=step,
        source=wf.source_of(run_dir, ckpt_path, config),
    )
    if wrote is not None:
        wrote.append(out)
    reread = build(read_weights(out))
    worst = 0.0
    with torch.no_grad():
        for _name, ids, mask in held_out_inputs(
            tokenizer, max_len=config.model.max_len, vocab_size=tokenizer.vocab_size
        ):
            worst = max(worst, float((model(ids, mask) - reread(ids, mask)).abs().max()))
    files = sorted(p for p in out.iterdir() if p.is_file())
    manifest = None
    if run_dir is not None and out.is_relative_to(run_dir.resolve()):
        from mw_env.rundir.manifest import add_to_manifest

        manifest = add_to_manifest(run_dir, files)
    return {
        "folder": str(out),
        "step": step,
        "checkpoint": str(ckpt_path),
        "files": [p.name for p in files],
        "max_abs_diff": worst,
        "manifest": str(manifest) if manifest else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mw_env.trainer.weights.export")
    parser.add_argument(
        "target", type=Path, help="a run folder (newest complete checkpoint) or a step-*.pt file"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="the folder to write (default <run>/weights/step-N)"
    )
    args = parser.parse_args(argv)
    from mw_env.base.stopsignals import Stopped, answer, stop_on_signals

    wrote: list[Path] = []
    try:
        # A stop before the commit: the folder is still its hidden temporary (base/atomic.atomic_dir), removed
        # on the way out. Entered before torch's import: a stop at any moment is a sentence, never a traceback.
        with stop_on_signals():
            result = export_weights(target=args.target, out=args.out, wrote=wrote)
    except Stopped as stop:
        return answer(_stopped(stop.signum, wrote))
    except MwEnvError as exc:
        return answer({"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code})
    except (OSError, RuntimeError) as exc:
        cause = os_error_in(exc)  # a full disk, EIO, EACCES while writing the folder
        if cause is None:
            raise
        err = os_fault(cause, "write the weights folder")
        hint = f"{err.hint}; nothing half-written is kept, the run folder is untouched"
        return answer({"error": err.message, "hint": hint, "exit_code": EXIT_FAILED})
    return answer(result, code=0)


def _stopped(signum: int, wrote: list[Path]) -> dict[str, object]:
    """A stop's answer: nothing kept, or (stopped in the read-back check or the manifest) the folder whole."""
    from mw_env.base.stopsignals import exit_code, signal_words

    how = f"the export was stopped by {signal_words(signum)}"
    if not wrote:
        return {
            "error": f"{how}: nothing of it was kept (the folder is written under a temporary name and renamed "
            "into place only whole)",
            "hint": "run the same command again to export",
            "exit_code": exit_code(signum),
        }
    return {
        "error": f"{how} after {wrote[0]} was written whole: its read-back check and the run's manifest entry "
        "were not done",
        "hint": "run the same command again to check it and record it in the manifest",
        "exit_code": exit_code(signum),
    }


if __name__ == "__main__":
    sys.exit(main())
