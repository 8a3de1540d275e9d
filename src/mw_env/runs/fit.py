"""Settings the machine can hold: the config's memory need against what this machine or GPU has, before
anything starts (launch.prepare, after the config's own checks and before the doctor).

A model of 65536 channels with a position table of a million rows passed every range check and ended in the
allocator's traceback (256 GiB asked); a batch of a million rows grew until the kernel killed it. Here both are
an `error:` (exit 2) with the figure, what this machine has and which settings to lower.

Where the memory is: a discrete GPU's own (each process on its own GPU), else the host's (a CPU run, or an APU
whose GPU memory is the system's), shared by the node's processes. A GPU whose memory detection cannot read
is not judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mw_env.base.errors import InputError
from mw_env.hardware.capacity import Read, available_memory, gib
from mw_env.trainspec.memory import MemoryNeed, estimate
from mw_env.trainspec.summary import tokenizer_vocab_size

if TYPE_CHECKING:
    from mw_env.hardware.facts import Hardware
    from mw_env.trainspec.schema import TrainConfig


@dataclass(frozen=True)
class Fit:
    need: MemoryNeed
    processes: int  # sharing `have`
    have: int | None
    where: str  # "this machine (MemAvailable ...)" | "GPU 0 (Radeon ...)"

    @property
    def needed(self) -> int:
        return self.need.total * self.processes

    @property
    def fits(self) -> bool:
        return self.have is None or self.needed <= self.have

    def figure(self) -> str:
        n = self.need
        each = f"{self.processes} processes, each " if self.processes > 1 else ""
        return (
            f"{each}{n.parameters:,} parameters: {gib(n.state)} of weights, gradients and optimizer state, "
            f"and {gib(n.activations)} of activations for a batch of {n.batch:,} rows x {n.width:,} positions"
        )


def on_gpu(config: TrainConfig, hardware: Hardware | None, build: str) -> bool:
    device = config.runtime.device
    if device.startswith("cuda"):
        return True
    return device == "auto" and build != "cpu" and hardware is not None and hardware.gpu is not None


def judge(config: TrainConfig, *, hardware: Hardware | None, build: str, nproc: int, read: Read) -> Fit:
    gpu = on_gpu(config, hardware, build)
    try:
        vocab = tokenizer_vocab_size(config)
    except (InputError, OSError, ValueError):
        vocab = 260  # an unreadable SentencePiece model is the trainer's to report; the byte vocabulary here
    need = estimate(config, gpu=gpu, ddp=nproc > 1, vocab_size=vocab)
    card = hardware.gpu if (gpu and hardware is not None) else None
    if card is not None and not card.integrated:
        if not card.memory_bytes:
            return Fit(need, 1, None, f"GPU {card.name} (its memory could not be read)")
        return Fit(need, 1, card.memory_bytes, f"GPU {card.name} ({gib(card.memory_bytes)})")
    memory = available_memory(read)
    return Fit(need, nproc, memory.available, f"this machine ({memory.source})")


def check_fits(config: TrainConfig, *, hardware: Hardware | None, build: str, nproc: int, read: Read) -> Fit:
    """InputError (exit 2) when the run cannot fit; else the judgement (its figure goes with the run)."""
    fit = judge(config, hardware=hardware, build=build, nproc=nproc, read=read)
    if not fit.fits:
        assert fit.have is not None
        raise InputError(
            f"this run needs about {gib(fit.needed)} of memory ({fit.figure()}), more than the "
            f"{gib(fit.have)} {fit.where.split(' (')[0]} has ({fit.where.partition(' (')[2].rstrip(')')})",
            hint=f"{fit.need.what_to_lower(fit.have)}; the estimate is in docs/training.md (Memory)",
        )
    return fit


def oom_hint(need: int | None, lower: str, resume: str) -> str:
    """What an OOM-killed run needed and what to change: the same command on the same machine is killed again.
    A lower optim.batch_size may be given to the resume (the run's global batch is kept, cut into more
    micro-batches: data-order's lanes); the model's sizes and max_len cannot change on a resume
    (schema.ARCHITECTURE_KEYS), so they take --fresh."""
    needed = f"it was estimated to need about {gib(need)} at its widest batch; " if need else ""
    what = (lower or "lower optim.batch_size or the model's size").removeprefix("lower ")
    batch = "optim.batch_size" in what
    ways = [f"{needed}free memory (other processes, a larger container limit) and {resume}"]
    if batch:
        ways.append(
            "or resume with a lower --set optim.batch_size=N (a resume keeps the run's global batch, in more "
            "micro-batches: each step trains on the same rows)"
        )
    # The batch's part may name model.max_len beside optim.batch_size: max_len takes --fresh like the model's.
    model = [w.strip() for w in what.replace("; then ", ";").split(";") if "optim.batch_size" not in w]
    if not model and "model.max_len" in what:
        model = ["model.max_len"]
    if model:
        ways.append(f"or start again with --fresh and {model[0]} lowered (they cannot change on a resume)")
    elif not batch:
        ways.append(f"or start again with --fresh and {what} lowered")
    return "; ".join(ways)
