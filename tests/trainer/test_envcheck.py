"""One environment across nodes (issue 38): the comparison of real fingerprints (this process's, and copies of it
as another node would report them), the sentence it makes, and the exchange through a real TCPStore as torchrun's
agent store serves it (every rank stops on a difference; --allow-env-mismatch goes on with the sentence)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mw_env.base.errors import InputError

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def real() -> dict[str, str | None]:
    from mw_env.trainer.envcheck import fingerprint

    return fingerprint()


def _node(fp: dict[str, str | None], node: str, **changed: str | None) -> dict[str, str | None]:
    return {**fp, "node": node, "host": f"host{node}", "venv": f"/venvs/node{node}", **changed}


def test_the_fingerprint_is_this_environment(real: dict[str, str | None]) -> None:
    import platform
    import sys

    import torch

    from mw_env.rundir.contract import sha256_file

    lock = Path(sys.prefix) / "pylock.mw-env.toml"  # the test venv was bootstrapped: it has its lock
    assert real["lock_sha256"] == sha256_file(lock) and real["lock"] == str(lock)
    assert f"{real['torch']}{real['torch_build']}" == torch.__version__ and real["torch_build"] == "+cpu"
    assert real["cuda"] is None and real["hip"] is None and real["nccl"] is None  # the CPU wheel
    assert real["python"] == platform.python_version() and real["venv"] == sys.prefix


def test_equal_environments_pass(real: dict[str, str | None]) -> None:
    from mw_env.trainer.envcheck import mismatch_sentence

    assert mismatch_sentence([_node(real, "0"), _node(real, "0"), _node(real, "1"), _node(real, "1")]) is None


def test_another_lock_names_the_node_both_hashes_and_the_rebuild(real: dict[str, str | None]) -> None:
    from mw_env.trainer.envcheck import mismatch_sentence

    ref = _node(real, "0")
    other = "f" * 64
    # Two ranks on node 1 say one thing: the node is named once.
    sentence = mismatch_sentence(
        [ref, _node(real, "0"), _node(real, "1", lock_sha256=other), _node(real, "1", lock_sha256=other)]
    )
    assert sentence == (
        "the nodes run different environments, so no node starts: node 1 (host1) has lock sha256 "
        f"{'f' * 16}... where node 0 (host0) has {real['lock_sha256'][:16]}...; rebuild it: copy "
        f"host0:{real['lock']} to node 1 and run `mw-env bootstrap --lock pylock.mw-env.toml --venv /venvs/node1 "
        "--recreate` there"
    )


def test_node_0_is_the_reference_whichever_rank_it_got(real: dict[str, str | None]) -> None:
    """torchrun numbers ranks in the order the nodes joined: global rank 0 may be node 1."""
    from mw_env.trainer.envcheck import mismatch_sentence

    node1 = {**_node(real, "1", torch_build="+cu126"), "rank": "0"}
    node0 = {**_node(real, "0"), "rank": "1"}
    sentence = mismatch_sentence([node1, node0]) or ""
    assert sentence.startswith(
        "the nodes run different environments, so no node starts: node 1 (host1) has torch build +cu126 "
        "where node 0 (host0) has +cpu; rebuild it: copy host0:"
    )


def test_another_torch_build_and_several_nodes(real: dict[str, str | None]) -> None:
    from mw_env.trainer.envcheck import mismatch_sentence

    cu126 = _node(real, "1", torch_build="+cu126", cuda="12.6", nccl="2.21.5")
    no_lock = _node(real, "2", lock_sha256=None, python="3.12.4")
    sentence = mismatch_sentence([_node(real, "0"), cu126, no_lock]) or ""
    assert (
        "node 1 (host1) has torch build +cu126 where node 0 (host0) has +cpu, CUDA runtime 12.6 where "
        in sentence
    )
    assert "NCCL/RCCL 2.21.5 where node 0 (host0) has none" in sentence
    assert (
        f"node 2 (host2) has lock sha256 no lock where node 0 (host0) has {real['lock_sha256'][:16]}..., Python 3.12.4"
        in sentence
    )
    assert sentence.count("rebuild it:") == 2 and "--venv /venvs/node2 --recreate" in sentence
    # Node 0 without a lock: the rebuild starts by writing one there.
    unlocked = mismatch_sentence([_node(real, "0", lock=None, lock_sha256=None), _node(real, "1")]) or ""
    assert "on node 0 write its lock with `mw-env lock --venv /venvs/node0`, copy it to node 1" in unlocked


def _exchange(
    monkeypatch: pytest.MonkeyPatch, prints: dict[int, dict[str, str | None]], allow: bool
) -> dict[int, object]:
    """check_environments on ranks 0 and 1 (threads), through a TCPStore served as torchrun's agent serves it."""
    import torch.distributed as dist

    from mw_env.trainer import envcheck
    from proctools import free_port

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if allow:  # given to node 0's `mw-env train`: its fingerprint carries it, the verdict follows it
        monkeypatch.setenv("MW_ENV_ALLOW_ENV_MISMATCH", "1")
        prints = {**prints, 0: {**prints[0], "allow": "1"}}
    monkeypatch.setattr(envcheck, "fingerprint", lambda: prints[int(threading.current_thread().name)])
    results: dict[int, object] = {}

    def rank(r: int) -> None:
        try:
            results[r] = envcheck.check_environments(rank=r, world=2, timeout_s=60)
        except InputError as exc:
            results[r] = exc

    threads = [threading.Thread(target=rank, args=(r,), name=str(r)) for r in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    del server
    return results


def test_the_store_exchange_stops_every_rank_or_goes_on_when_allowed(
    real: dict[str, str | None], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prints = {0: _node(real, "0"), 1: _node(real, "1", torch_build="+rocm6.4", hip="6.4")}
    results = _exchange(monkeypatch, prints, allow=False)
    for r in (0, 1):
        err = results[r]
        assert isinstance(err, InputError) and "node 1 (host1) has torch build +rocm6.4" in err.message, r
        assert "--allow-env-mismatch" in (err.hint or "")
    results = _exchange(monkeypatch, prints, allow=True)
    assert results[0] == results[1] and "HIP runtime 6.4 where node 0 (host0) has none" in str(results[0])
    assert "warning: the nodes run different environments" in capsys.readouterr().err
    assert _exchange(monkeypatch, {0: prints[0], 1: _node(real, "1")}, allow=False) == {0: None, 1: None}


def test_without_the_agent_store_there_is_nothing_to_meet_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from mw_env.trainer.envcheck import check_environments

    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    assert check_environments(rank=0, world=2, timeout_s=1) is None
