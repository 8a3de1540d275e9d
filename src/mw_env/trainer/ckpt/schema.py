"""A loaded checkpoint checked in one place: every part of `ckpt.parts.PARTS` (the one table of what a
checkpoint holds) against its test, then the tensors against the model the checkpoint's own config builds,
then (`check_for_run`) against the running trainer's model, optimizer and labels. Every failure is a
CheckpointError ("unreadable ...").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mw_env.base.errors import InputError
from mw_env.rundir.contract import CHECKPOINT_RE
from mw_env.trainer.ckpt.parts import (
    CHECKS,
    FORMAT_VERSION,
    REQUIRED_KEYS,
    is_int,
    is_number,
)
from mw_env.trainspec.extras import bootstrap_hint

if TYPE_CHECKING:
    import torch


class CheckpointError(InputError):
    """A checkpoint that cannot be read, is incomplete, or does not fit the model it describes."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


def unreadable(path: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} is unreadable ({why})",
        hint="it may be truncated or not an mw-env checkpoint; name an older step-*.pt "
        "(training: --resume PATH, or --fresh to start over)",
    )


def validate_checkpoint(ckpt: Any, *, source: Path | str) -> None:
    """The whole structure of a loaded checkpoint, then its tensors against the model its config builds."""
    path = Path(source)
    if not isinstance(ckpt, dict):
        raise CheckpointError(
            f"checkpoint {path} is not an mw-env checkpoint (top level is not a dict)",
            hint="name a step-*.pt file written by mw-env train",
        )
    missing = [k for k in REQUIRED_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"checkpoint {path} is incomplete: missing {', '.join(missing)}",
            hint="name a step-*.pt file written by mw-env train, or an older one with --resume",
        )
    if ckpt["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format {ckpt['format_version']!r}, this mw-env reads {FORMAT_VERSION}",
            hint="use the mw-env version that wrote it, or start over with --fresh",
        )
    for key, (required, test, what) in CHECKS.items():
        if (required or key in ckpt) and not test(ckpt[key]):
            raise unreadable(path, f"{key} is not {what}")
    if ckpt["loop"]["step"] != ckpt["step"]:
        raise unreadable(path, f"loop.step {ckpt['loop']['step']} differs from step {ckpt['step']}")
    m = CHECKPOINT_RE.fullmatch(path.name)
    if m and int(m.group(1)) != ckpt["step"]:
        raise CheckpointError(
            f"checkpoint {path} says step {ckpt['step']}, its name says {int(m.group(1))}",
            hint="a renamed file is not resumed; give it its step-XXXXXXXXX.pt name back or use another one",
        )
    _check_shapes(ckpt, path)


def _check_shapes(ckpt: dict[str, Any], path: Path) -> None:
    import torch

    from mw_env.trainer.model import net_init
    from mw_env.trainer.network import TaggerNet
    from mw_env.trainspec.config import config_from_dict
    from mw_env.trainspec.validate import validate

    try:
        config = config_from_dict(ckpt["config"])
        validate(config)
    except InputError as exc:
        raise unreadable(path, f"its config is invalid: {exc.message}") from None
    vocab = _vocab_size(ckpt["tokenizer"])
    if vocab is None:
        raise unreadable(path, "its tokenizer state is invalid")
    # Shapes only: no memory, however large the config says the model is, and no initialisation (torch's meta
    # kernels for the random fills import torch._dynamo and sympy: 2-4 CPU seconds of every fresh process that
    # loads a checkpoint, a `train predict` child's largest cost after torch itself).
    with torch.device("meta"), _no_init():
        meta = TaggerNet(config.model, **net_init(config, vocab_size=vocab, n_labels=len(ckpt["labels"])))
    expected = meta.state_dict()
    found = ckpt["model"]
    if set(found) != set(expected):
        extra, lost = sorted(set(found) - set(expected)), sorted(set(expected) - set(found))
        raise unreadable(
            path, f"model keys differ from its config's model (missing {lost[:3]}, unexpected {extra[:3]})"
        )
    for key, tensor in expected.items():
        if tuple(found[key].shape) != tuple(tensor.shape) or not found[key].is_floating_point():
            raise unreadable(
                path,
                f"model.{key} has shape {tuple(found[key].shape)}, its config's model needs {tuple(tensor.shape)}",
            )
    _check_optimizer(ckpt, sum(1 for _ in meta.parameters()), path)


def _no_init() -> torch.overrides.TorchFunctionMode:
    """A torch function mode in which torch.nn.init's functions leave their tensor as it is (they return it)."""
    import torch

    class NoInit(torch.overrides.TorchFunctionMode):
        def __torch_function__(
            self,
            func: Callable[..., object],
            types: object,
            args: tuple[object, ...] = (),
            kwargs: dict[str, object] | None = None,
        ) -> object:
            if getattr(func, "__module__", None) == "torch.nn.init":
                return args[0] if args else (kwargs or {})["tensor"]
            return func(*args, **(kwargs or {}))

    return NoInit()


def _vocab_size(state: Mapping[str, Any]) -> int | None:
    from mw_env.trainer.data import N_SPECIAL, ByteTokenizer

    if state.get("kind") == "byte":
        return ByteTokenizer.vocab_size
    proto = state.get("model_proto")
    try:
        import sentencepiece as spm
    except ModuleNotFoundError:  # the checkpoint may be fine: say what is missing, do not fall back
        raise InputError(
            "this checkpoint uses a SentencePiece tokenizer but the sentencepiece package is not installed",
            hint=f"add the `spm` extra: {bootstrap_hint(sys.prefix, 'spm')}",
        ) from None
    try:
        sp = spm.SentencePieceProcessor()
        tensor: Any = proto  # anything: what is not a tensor of a model is refused below
        sp.LoadFromSerializedProto(tensor.numpy().tobytes())
        return sp.get_piece_size() + N_SPECIAL
    except Exception:  # not a tensor, not a model: the export or resume could not use it
        return None


def _check_optimizer(ckpt: dict[str, Any], n_params: int, path: Path) -> None:
    """Every parameter exactly once across the groups, states keyed by those ids, one base lr per group."""
    opt = ckpt["optimizer"]
    ids = [i for g in opt["param_groups"] for i in g["params"]]
    if not all(is_int(i) for i in ids) or sorted(ids) != list(range(n_params)):
        raise unreadable(path, f"optimizer names {len(ids)} parameters, the model has {n_params}")
    import torch

    for idx, entry in opt["state"].items():
        if not is_int(idx) or not 0 <= idx < n_params or not isinstance(entry, Mapping):
            raise unreadable(path, f"optimizer state {idx!r} is not a parameter's state")
        if not all(isinstance(v, torch.Tensor) or is_number(v) for v in entry.values()):
            raise unreadable(
                path, f"optimizer state {idx} holds a value that is neither a tensor nor a number"
            )
    groups = len(opt["param_groups"])
    base = ckpt["scheduler"].get("base_lrs")
    if base is not None and (
        not isinstance(base, list) or len(base) != groups or not all(map(is_number, base))
    ):
        raise unreadable(path, f"scheduler.base_lrs does not match the {groups} parameter group(s)")


def _like(live: Any, found: Any, where: str) -> str | None:
    """Where `found` differs in kind from `live` (the trainer's own state of the same object), or None.

    Same kinds for the keys both have (a key missing from an older torch's state is filled in with its default
    by load_state_dict), same length for lists, numbers finite, bools bools: what load_state_dict copies
    without a check and the first step would trip over."""
    import math

    import torch

    if isinstance(live, Mapping):
        if not isinstance(found, Mapping):
            return f"{where} is not a mapping"
        return next((p for k in live if k in found and (p := _like(live[k], found[k], f"{where}.{k}"))), None)
    if isinstance(live, (list, tuple)):
        if not isinstance(found, (list, tuple)) or len(found) != len(live):
            return f"{where} is not a list of {len(live)}"
        return next(
            (
                p
                for i, (a, b) in enumerate(zip(live, found, strict=True))
                if (p := _like(a, b, f"{where}[{i}]"))
            ),
            None,
        )
    if isinstance(live, bool):
        return None if isinstance(found, bool) else f"{where} is not true/false"
    if is_number(live):
        ok = is_number(found) and math.isfinite(found)
        return None if ok else f"{where} is not a finite number"
    if isinstance(live, torch.Tensor):
        ok = isinstance(found, torch.Tensor) and found.shape == live.shape and found.dtype == live.dtype
        return None if ok else f"{where} is not a {live.dtype} tensor of shape {tuple(live.shape)}"
    if isinstance(live, str):
        return None if isinstance(found, str) else f"{where} is not a string"
    return None  # None or an object the trainer sets itself (lr_lambdas): nothing to compare


def _adam_state(entry: Mapping[str, Any], shape: tuple[int, ...], amsgrad: bool) -> str | None:
    import math

    import torch

    for name in ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if amsgrad else ())):
        value = entry.get(name)
        if not (
            isinstance(value, torch.Tensor) and value.is_floating_point() and tuple(value.shape) == shape
        ):
            return f"{name} is not a float tensor of the parameter's shape {shape}"
    step = entry.get("step")
    value = float(step) if isinstance(step, torch.Tensor) and step.numel() == 1 else step
    if not (is_number(value) and math.isfinite(value) and value >= 1):
        return "step is not a count >= 1"  # step 0 divides by zero in Adam's bias correction
    return None


def check_for_run(
    path: Path,
    ckpt: Mapping[str, Any],
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    labels: list[str],
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> None:
    """What only the running trainer can check, against its own objects: the weights' shapes (the tokenizer
    may differ), the optimizer's groups (hyperparameters of the same kinds, betas below 1) and moments (shaped
    like the parameters; load_state_dict checks neither, the first step would fail), the scheduler's state,
    the label names, and whether every rank's RNG state restores (tried, then the current state is put back;
    every rank checks all of them, so all ranks choose the same checkpoint)."""
    from mw_env.trainer.runtime import restore_rng_states, rng_states

    if list(ckpt["labels"]) != list(labels):
        raise unreadable(path, f"its labels {ckpt['labels'][:4]}… are not this trainer's")
    for key, tensor in model.state_dict().items():
        have = ckpt["model"][key]
        if tuple(have.shape) != tuple(tensor.shape):
            raise unreadable(
                path, f"model.{key} has shape {tuple(have.shape)}, this run's model {tuple(tensor.shape)}"
            )
    opt = ckpt["optimizer"]
    sizes = [len(g["params"]) for g in opt["param_groups"]]
    if sizes != [len(g["params"]) for g in optimizer.param_groups]:
        raise unreadable(
            path,
            f"optimizer groups hold {sizes} parameters, this model's hold "
            f"{[len(g['params']) for g in optimizer.param_groups]}",
        )
    for i, (live, found) in enumerate(zip(optimizer.param_groups, opt["param_groups"], strict=True)):
        hyper = {k: v for k, v in live.items() if k != "params"}
        # Adam's step reads these without a default (newer flags such as `foreach` get one on load).
        lacking = [
            k for k in ("lr", "betas", "eps", "weight_decay", "amsgrad") if k in hyper and k not in found
        ]
        if lacking:
            raise unreadable(path, f"optimizer.param_groups[{i}] lacks {lacking[0]!r}")
        if problem := _like(hyper, found, f"optimizer.param_groups[{i}]"):
            raise unreadable(path, problem)
        if not all(0 <= b < 1 for b in found.get("betas", ())):
            raise unreadable(path, f"optimizer.param_groups[{i}].betas {found['betas']} are not in [0, 1)")
    live_params = [(p, g) for g in optimizer.param_groups for p in g["params"]]
    for idx, entry in opt["state"].items():
        param, group = live_params[idx]
        if problem := _adam_state(entry, tuple(param.shape), bool(group.get("amsgrad"))):
            raise unreadable(path, f"optimizer state {idx}: {problem}")
    if scheduler is not None:
        found = ckpt["scheduler"]
        if problem := _like(scheduler.state_dict(), found, "scheduler"):
            raise unreadable(path, problem)
        lambdas = found.get(
            "lr_lambdas", ()
        )  # LambdaLR.load_state_dict pops it and updates each lambda with it
        if "lr_lambdas" in scheduler.state_dict() and not (
            isinstance(lambdas, list) and all(f is None or isinstance(f, Mapping) for f in lambdas)
        ):
            raise unreadable(path, "scheduler.lr_lambdas is not a list of states")
    saved = rng_states()
    try:
        for rank, state in enumerate(ckpt.get("rng") or []):
            try:
                restore_rng_states(state)
            except Exception as exc:
                raise unreadable(path, f"rng[{rank}] does not restore ({first_line(exc)})") from None
    finally:
        restore_rng_states(saved)
