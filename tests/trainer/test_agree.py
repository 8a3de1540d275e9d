"""The resume agreement's decisions, one rank's view: what the other ranks answered is given (the real
exchange across processes is in test_multinode.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mw_env.base.errors import InputError
from mw_env.trainer import agree
from mw_env.trainer.distributed import DistInfo

from .helpers import tiny_config

pytestmark = pytest.mark.torch

RANK0 = DistInfo(enabled=True, rank=0, world=2, backend="gloo")
RANK1 = DistInfo(enabled=True, rank=1, world=2, backend="gloo")


def _exchange(monkeypatch: pytest.MonkeyPatch, others: list[dict[str, Any]]) -> None:
    """all_gather: this rank's answer first (rank 0), then the given ones."""
    monkeypatch.setattr(agree, "gather_objects", lambda mine, _dist: [mine, *others])


def _peer(config: Any, ckpt: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {
        "node": "node 1 (h1, rank 1)",
        "ckpt_dir": "/b/checkpoints",
        "ckpt": ckpt,
        "config": agree.config_fingerprint(config),
        **extra,
    }


def test_agreement_on_nothing_and_on_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(tmp_path / "a").config
    _exchange(monkeypatch, [_peer(config, None)])
    assert (
        agree.agree_on_checkpoint(tmp_path / "none", RANK0, resume=None, fresh=False, config=config) is None
    )
    # A node-local folder is a layout, not another run: out_dir and threads may differ.
    other = tiny_config(tmp_path / "b", "runtime.threads=3").config
    assert agree.config_fingerprint(other) == agree.config_fingerprint(config)


def test_a_peer_with_a_checkpoint_when_rank_0_has_none_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "a").config
    theirs = {"step": 20, "path": "/b/checkpoints/step-000000020.pt", "size": 10, "sha256": "ab" * 32}
    _exchange(monkeypatch, [_peer(config, theirs)])
    with pytest.raises(InputError) as err:
        agree.agree_on_checkpoint(tmp_path / "none", RANK0, resume=None, fresh=False, config=config)
    msg = err.value.message
    assert "do not agree on the checkpoint" in msg
    assert f"node 0 ({agree.socket.gethostname()}, rank 0): no checkpoint in {tmp_path / 'none'}" in msg
    assert "node 1 (h1, rank 1): newest checkpoint step 20 (/b/checkpoints/step-000000020.pt" in msg
    assert "copy /b/checkpoints/step-000000020.pt (step 20)" in (err.value.hint or "")


def test_a_different_config_or_an_unreadable_checkpoint_elsewhere_stops_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny_config(tmp_path / "a").config
    changed = tiny_config(tmp_path / "a", "optim.lr=0.5").config
    _exchange(monkeypatch, [_peer(changed, None)])
    with pytest.raises(InputError, match="launched with different configs") as err:
        agree.agree_on_checkpoint(tmp_path / "none", RANK0, resume=None, fresh=False, config=config)
    assert "same --config and --set" in (err.value.hint or "")
    _exchange(monkeypatch, [_peer(config, None, error="checkpoint /b/x.pt does not exist", hint="name one")])
    with pytest.raises(InputError, match=r"node 1 \(h1, rank 1\): checkpoint /b/x.pt does not exist"):
        agree.agree_on_checkpoint(tmp_path / "none", RANK0, resume=None, fresh=False, config=config)


def test_rank_0s_lock_refusal_is_every_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rank 1 takes no lock itself; it raises what rank 0 was told.
    monkeypatch.setattr(
        agree, "gather_objects", lambda _mine, _dist: [("the run folder is in use", "stop it")]
    )
    with pytest.raises(InputError, match="the run folder is in use"), agree.run_lock(tmp_path, RANK1):
        pytest.fail("the body must not run")
    assert not (tmp_path / ".lock").exists()
