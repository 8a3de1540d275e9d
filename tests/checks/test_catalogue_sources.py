"""The catalogue of known messages, held to its own rules: at least 80 entries from public trackers, each with
its source URL, its verbatim text (and variants), its cause, fix and what on this machine tells; each entry
claims its own examples; and `doctor --explain` and `train status` classify every line the same way."""

from __future__ import annotations

import json
import time

import pytest

from mw_env.checks.catalogue import KINDS, load_catalogue
from mw_env.cli import main
from mw_env.runs import logscan

CATALOGUE = load_catalogue()
MESSAGES = CATALOGUE.messages
EXAMPLES = [(m.id, e) for m in MESSAGES for e in m.examples]


def test_at_least_80_entries_each_fully_described():
    assert len(MESSAGES) >= 80
    for m in MESSAGES:
        assert m.examples, f"{m.id}: no verbatim example"
        assert any(u.startswith("https://") for u in m.urls), f"{m.id}: no source URL"
        assert m.cause and m.fix and m.here, f"{m.id}: cause, fix and here are required"
        assert m.kind in ("", *KINDS)
        assert m.id == m.id.strip() and " " not in m.id


def test_the_catalogue_covers_every_area_the_issue_names():
    text = " ".join(f"{m.id} {m.title} {m.cause}".lower() for m in MESSAGES)
    for needle in (
        "/dev/kfd",  # device nodes and permissions
        "render",
        "no hip gpus",  # runtime finding no GPU
        "not compiled with cuda",  # torch built for the other vendor / CPU
        "driver version is insufficient",  # driver vs runtime
        "invalid device function",  # missing kernels for the arch
        "hsa_override_gfx_version",  # wrong or missing override
        "gpu hang",  # faults and hangs
        "out of memory",  # memory
        "shared memory",  # IPC
        "nccl",  # NCCL/RCCL
        "rccl",
        "triton",  # compile
        "no space left on device",  # disk
        "name resolution",  # network
    ):
        assert needle in text, needle


@pytest.mark.parametrize(("entry", "line"), EXAMPLES, ids=[f"{i}:{n}" for n, (i, _) in enumerate(EXAMPLES)])
def test_each_entry_claims_its_own_verbatim_text(entry, line):
    msg = next(m for m in MESSAGES if m.id == entry)
    assert msg.regex.search(line), f"{entry}: its pattern misses its own example"
    hit = CATALOGUE.first_match(line)
    assert hit is not None
    if msg.family:  # a catch-all: a specific entry may explain it first, with the same kind
        assert hit.kind == msg.kind
    else:
        assert hit.id == entry, f"{line!r} is explained by {hit.id}, not {entry}"
    # The keyword-screened scan (--explain, the doctor's probe) agrees with the per-line match.
    hits = CATALOGUE.scan("step 1 loss 2.0\n" + line + "\nstep 2 loss 1.9\n")
    assert [(h.line_no, h.message.id) for h in hits] == [(2, hit.id)]


def _explain(tmp_path, capsys, lines):
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    main(["doctor", "--explain", str(log), "--json", "--root", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    return {m["line_no"]: m["id"] for m in data["messages"]}


def test_explain_and_train_status_classify_every_line_the_same_way(tmp_path, capsys):
    lines = [line for _, line in EXAMPLES]
    by_line = _explain(tmp_path, capsys, lines)
    assert len(by_line) == len(lines)  # --explain knows every one
    findings = {f.line_no: f.kind for f in logscan.scan_log(lines) if f.kind in KINDS}
    for n, line in enumerate(lines, start=1):
        kind = next(m.kind for m in MESSAGES if m.id == by_line[n])
        assert findings.get(n, "") == kind, (
            f"line {n} {line!r}: explain says {by_line[n]} ({kind or 'no kind'})"
        )
        assert logscan.classify_line(line) == (kind or None)


def test_train_status_of_a_dead_run_reports_the_catalogues_kind(tmp_path, capsys):
    line = next(e for m in MESSAGES if m.id == "nccl-watchdog-timeout" for e in m.examples)
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(f"step 1 loss 2.0\n{line}\n")
    (run / "metrics.jsonl").write_text(
        json.dumps({"event": "step", "step": 1, "loss": 2.0, "time": time.time()}) + "\n"
    )
    (run / "run.json").write_text(
        json.dumps(
            {
                "pid": 2**22 + 12345,  # no such process: the run is gone
                "start_ticks": 1,
                "argv": ["python", "-m", "mw_env.trainer"],
                "log_file": str(run / "train.log"),
                "started_at": time.time() - 60,
            }
        )
    )
    code = main(["train", "status", "--out-dir", str(run), "--json"])
    status = json.loads(capsys.readouterr().out)
    kinds = [a["kind"] for a in status["anomalies"]]
    assert "comms" in kinds, status
    assert code != 0
    assert _explain(tmp_path, capsys, [line]) == {1: "nccl-watchdog-timeout"}


def test_explain_says_what_to_check_on_this_machine(tmp_path, capsys):
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: No HIP GPUs are available\n")
    main(["doctor", "--explain", str(log), "--root", str(tmp_path)])
    out = " ".join(capsys.readouterr().out.split())
    assert "check here:" in out and "/dev/kfd" in out
    main(["doctor", "--explain", str(log), "--json", "--root", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert "/dev/kfd" in data["messages"][0]["check"] and data["messages"][0]["source"].startswith("https://")


def test_first_match_is_cheap_for_lines_no_entry_knows():
    # One combined regex call rejects an ordinary line (the screen), so watching a long log stays cheap.
    assert CATALOGUE.first_match("step 4000 loss 1.234 lr 3e-4 tokens/s 51234") is None


def test_explain_reads_dev_shm_here_for_the_nccl_shared_memory_messages(tmp_path, capsys):
    from conftest import MACHINES

    log = tmp_path / "train.log"
    line = next(e for m in MESSAGES if m.id == "nccl-shm-segment" for e in m.examples)
    log.write_text(line + "\n")
    main(["doctor", "--explain", str(log), "--json", "--root", str(MACHINES / "doctor-cpu-docker-shm64m")])
    msg = json.loads(capsys.readouterr().out)["messages"][0]
    assert msg["id"] == "nccl-shm-segment" and "64 MiB" in msg["here"] and "--ipc=host" in msg["here"]
