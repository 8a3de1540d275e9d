"""`mw-env train export --format safetensors RUN`, inside the training venv:

    python -m mw_env.trainer.weights.export TARGET [--out DIR]

TARGET is a run folder (its newest complete checkpoint, each damaged newer one warned about and skipped) or a
step-*.pt file; the folder goes to <run>/weights/step-N/ unless --out names one. The written folder is read back
the way `train predict --weights` reads it and its logits compared with the checkpoint's model on held-out inputs
(the same tensors: the difference is 0). Prints one JSON line: the result, or {"error", "hint", "exit_code"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from mw_env.base.errors import EXIT_FAILED, MwEnvError, os_error_in, os_fault
from mw_env.rundir.contract import weights_dir


def export_weights(*, target: Path, out: Path | None = None) -> dict[str, object]:
    """Write the portable weights folder of `target`'s checkpoint; return what was written and checked."""
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
        out = (weights_dir(run_dir) if run_dir else ckpt_path.parent / "weights") / wf.folder_name(step)
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
    try:
        result = export_weights(target=args.target, out=args.out)
    except MwEnvError as exc:
        print(json.dumps({"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}))
        return exc.exit_code
    except (OSError, RuntimeError) as exc:
        cause = os_error_in(exc)  # a full disk, EIO, EACCES while writing the folder
        if cause is None:
            raise
        err = os_fault(cause, "write the weights folder")
        hint = f"{err.hint}; nothing half-written is kept, the run folder is untouched"
        print(json.dumps({"error": err.message, "hint": hint, "exit_code": EXIT_FAILED}))
        return EXIT_FAILED
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
