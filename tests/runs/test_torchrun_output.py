"""torchrun's own failure output is filtered; the workers' errors and exit code come through."""

from __future__ import annotations

from mw_env.runs.torchrun_output import TorchrunStderr

# Recorded from `mw-env train --nproc-per-node 2` resuming a 1-process checkpoint (torch 2.13, CPU).
FAILED_RUN = """\
W1130 05:38:07.597000 4800 torch/distributed/run.py:874] *****************************************
W1130 05:38:07.597000 4800 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for each process to be 1
device cpu, precision fp32 (fp32 requested), world size 2
error: cannot resume from /r/checkpoints/step-000000310.pt: it was written by 1 process(es), this run has 2
hint: the data order depends on the world size; launch with the same --nproc-per-node
error: cannot resume from /r/checkpoints/step-000000310.pt: it was written by 1 process(es), this run has 2
hint: the data order depends on the world size; launch with the same --nproc-per-node
E1130 05:38:14.706000 4800 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0
Traceback (most recent call last):
  File "/v/bin/torchrun", line 12, in <module>
    sys.exit(main())
             ^^^^^^
  File "/v/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\x20
============================================================
mw_env.trainer FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 4808)\x20
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 4807)\x20
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""


def _run(text: str) -> tuple[list[str], TorchrunStderr]:
    filt = TorchrunStderr()
    shown = [out for line in text.splitlines() for out in filt.feed(line)]
    return shown + filt.flush(), filt


def test_bad_input_under_torchrun_is_one_error_and_exit_2() -> None:
    shown, filt = _run(FAILED_RUN)
    assert shown == [
        "device cpu, precision fp32 (fp32 requested), world size 2",
        "error: cannot resume from /r/checkpoints/step-000000310.pt: it was written by 1 process(es), "
        "this run has 2",
        "hint: the data order depends on the world size; launch with the same --nproc-per-node",
    ]
    # The root cause's code, not torchrun's 1 nor the SIGTERM torchrun sent the other rank.
    assert filt.exit_code(1) == 2
    assert filt.exit_code(0) == 0


def test_a_workers_own_traceback_is_kept() -> None:
    crash = (
        "Traceback (most recent call last):\n"
        '  File "/src/mw_env/trainer/loop.py", line 10, in run\n'
        "    boom()\n"
        "RuntimeError: a real bug\n"
        "step      1  loss 2.7"
    )
    shown, filt = _run(crash)
    assert shown == crash.splitlines()
    assert filt.exit_code(1) == 1  # no failure table read: torchrun's code stands


def test_a_traceback_cut_short_is_flushed() -> None:
    shown, _ = _run('Traceback (most recent call last):\n  File "x.py", line 1')
    assert shown == ["Traceback (most recent call last):", '  File "x.py", line 1']


def test_torchrun_stopped_by_a_signal_is_noted_and_its_traceback_dropped() -> None:
    filt = TorchrunStderr()
    shown = []
    for line in [
        "Traceback (most recent call last):",
        '  File "/venv/bin/torchrun", line 10, in <module>',
        '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 15501 got signal: 15",
        "finished at step 4 (stopped)",
    ]:
        shown += filt.feed(line)
    assert filt.signalled and shown == ["finished at step 4 (stopped)"]


def test_a_lost_store_keeps_the_workers_own_exit_code() -> None:
    # Node 1 of two, both refusing a bad input: node 0's torchrun ended first and took the rendezvous store
    # with it, so this node's torchrun died of the lost store before printing its failure table.
    lost = (
        "error: the nodes do not agree on the checkpoint to resume from, so none starts\n"
        "hint: all nodes must load the same checkpoint\n"
        "mw-env worker exit status: 2\n"
        "Traceback (most recent call last):\n"
        '  File "/v/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 9, in run\n'
        "    self._store.get(key)\n"
        "torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /torch.elastic/rdzv/t/last\n"
        "frame #0: c10::Error::Error(...)\n"
    )
    shown, filt = _run(lost)
    assert shown == [
        "error: the nodes do not agree on the checkpoint to resume from, so none starts",
        "hint: all nodes must load the same checkpoint",
    ]
    assert filt.store_lost and filt.said_error
    assert filt.exit_code(1) == 2  # the workers' bad input, not torchrun's 1
    # Without a worker's word, torchrun's code stands; a failure table, when printed, still decides.
    assert _run("mw-env worker exit status: x\n")[1].exit_code(1) == 1
    _shown, table = _run(FAILED_RUN + "\nmw-env worker exit status: 3")
    assert table.exit_code(1) == 2


def test_a_lost_peer_after_another_ranks_own_error_is_its_echo() -> None:
    """Issue 22, a full disk at a checkpoint with --nproc-per-node 2: rank 0 says the disk is full and exits;
    rank 1, left at the barrier, said `a peer of the run stopped answering` with the advice to restart every
    node: untrue for a full disk. After another error it goes to the log; as the first error it is shown."""
    disk = "error: cannot write checkpoint /r/checkpoints/step-000000004.pt: the disk is full"
    peer = "error: a peer of the run stopped answering (lost another process of this node at 127.0.0.1:1): x"
    restart = "hint: a node or process stopped (killed, crashed or unreachable): restart every node"
    filt = TorchrunStderr()
    shown = [s for line in (disk, "hint: free space", peer, restart) for s in filt.feed(line)]
    assert shown == [disk, "hint: free space"] and peer in filt.dropped and restart in filt.dropped
    alone = TorchrunStderr()
    assert [s for line in (peer, restart) for s in alone.feed(line)] == [peer, restart]  # a node lost
