"""Issue 22's reproducers on run folders, manifests, path options, duplicate keys and shown text, run as the
real command: `mw-env ARGS` in this process under a deadline (a hang fails here), and the manifest reproducers,
a FIFO among them, in a child with a timeout. Cases 4-8, 17 and 18 of the issue; the corpus shards (1-3) are in
test_fuzz_shards.py, full disks and signals in tests/faults/."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.fuzz.fuzz_support import deadline
from tests.fuzz.test_regressions import mw

from mw_env.cli import main

Run = Callable[..., tuple[int, str, str]]

DEEP = "[" * 100_000 + "]" * 100_000
BIG = "9" * 5000


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`mw-env ARGS` in this process as test_regressions.mw runs it in a child (PATH /usr/bin:/bin, `env` on
    top): (exit code, stdout, stderr). A hang fails at fuzz_support's SIGALRM deadline, a traceback fails the
    test; a child per case cost a Python start and mw-env's imports, ~90 times in this file."""

    def run(args: list[str], *, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        for name, value in {"PATH": "/usr/bin:/bin", **(env or {})}.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        with deadline():
            rc = main(args)
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        return rc, out, err

    return run


# -- case 4: train status on a metrics.jsonl with lines Python refuses -----------------------------------


@pytest.mark.parametrize(
    "value",
    [DEEP, BIG, '1, "step": 2', "1e400", "NaN", '2, "time": -Infinity'],
    ids=["deep", "bigint", "duplicate", "overflow", "nan", "time-infinite"],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_status_on_metrics_lines_python_refuses(tmp_path: Path, value: str, as_json: bool, cli: Run) -> None:
    run = tmp_path / "st"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"event": "start", "step": 0, "max_steps": 10}\n' + '{"event": "step", "step": ' + value + "}\n"
    )
    rc, out, err = cli(["train", "status", "--out-dir", str(run), *(["--json"] if as_json else [])])
    assert rc in (0, 1, 2) and "Traceback" not in err, err
    if as_json:
        json.loads(out)


@pytest.mark.parametrize(
    "record",
    [
        '"pid": 1e400, "start_ticks": 1',
        '"pid": 1, "start_ticks": NaN',
        '"pid": 1, "start_ticks": 1, "max_steps": 1e400',
    ],
    ids=["pid-overflow", "ticks-nan", "max-steps-overflow"],
)
def test_a_run_record_with_numbers_that_are_not_counts(tmp_path: Path, record: str, cli: Run) -> None:
    """A variant of cases 4 and 8: Python's json reads NaN, Infinity and 1e400 (inf) where run.json holds a
    pid or a count; int() of them is OverflowError/ValueError. Exit 2 naming run.json, never a traceback."""
    run = tmp_path / "rr"
    run.mkdir()
    (run / "run.json").write_text("{" + record + ', "argv": ["x"], "started_at": 1}')
    for cmd in (["status"], ["stop"]):
        rc, _, err = cli(["train", *cmd, "--out-dir", str(run)])
        assert rc == 2 and "Traceback" not in err and "run.json" in err and "hint:" in err, (cmd, rc, err)


@pytest.mark.parametrize("kind", ["loop", "self", "under-a-loop"])
@pytest.mark.parametrize(
    "command",
    [
        ["status", "--out-dir"],
        ["status", "--json", "--out-dir"],
        ["watch", "--out-dir"],
        ["stop", "--out-dir"],
        ["verify"],
    ],
    ids=["status", "status-json", "watch", "stop", "verify"],
)
def test_a_run_folder_that_is_a_link_loop(tmp_path: Path, kind: str, command: list[str], cli: Run) -> None:
    """Case 2's class on the run-folder commands: pathlib's resolve() raises `RuntimeError: Symlink loop`;
    exit 2 `cannot use DIR: a symbolic link loop` with a hint, never a traceback."""
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    os.symlink("self", tmp_path / "self")
    target = {"loop": tmp_path / "a", "self": tmp_path / "self", "under-a-loop": tmp_path / "a" / "run"}[kind]
    rc, _, err = cli(["train", *command, str(target)])
    assert rc == 2 and "Traceback" not in err, (rc, err)
    assert f"error: cannot use {target}: a symbolic link loop" in err and "hint:" in err, err


# -- case 5: verify hashes only files inside the run folder -----------------------------------------------


@pytest.mark.parametrize(
    "listed",
    ["../" * 2000 + "x", "/etc/passwd", "../outside.txt", "sub/../../outside.txt", "link-out", "a" * 300],
    ids=["long", "absolute", "dotdot", "dotdot-nested", "symlink-out", "long-name"],
)
def test_verify_never_reads_outside_the_run_folder(tmp_path: Path, listed: str, cli: Run) -> None:
    run = tmp_path / "vf"
    run.mkdir()
    (tmp_path / "outside.txt").write_text("secret\n")
    os.symlink(tmp_path / "outside.txt", run / "link-out")
    (run / "MANIFEST.sha256").write_text("0" * 64 + "  " + listed + "\n")
    rc, out, err = cli(["train", "verify", str(run), "--json"])
    assert rc == 1, (rc, err)
    report = json.loads(out)
    assert not report["ok"]
    if listed.startswith("a" * 10):
        assert report["missing"] == [listed] or report["unreadable"], report
    else:
        assert listed in report["outside"], report
        assert report["mismatched"] == []  # never hashed


@pytest.mark.parametrize("kind", ["link-out", "fifo", "folder", "loop"])
def test_verify_never_reads_a_manifest_that_is_not_the_folders_file(tmp_path: Path, kind: str) -> None:
    """Case 5's class, on the manifest itself: MANIFEST.sha256 as a link to a secret outside the folder had
    verify print the secret's lines as `malformed line: …`; a FIFO or a folder was `no MANIFEST.sha256`."""
    run = tmp_path / "vf"
    run.mkdir()
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:20228:0:99999:7:::\n")
    manifest = run / "MANIFEST.sha256"
    if kind == "link-out":
        os.symlink(secret, manifest)
    elif kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "folder":
        manifest.mkdir()
    else:
        os.symlink("MANIFEST.sha256", manifest)
    rc, out, err = mw(["train", "verify", str(run)])
    assert rc == 2 and "Traceback" not in err and "SECRETHASH" not in out + err, (rc, out, err)
    words = {
        "link-out": "leads out of the run folder",
        "fifo": "not a regular file",
        "folder": "not a regular file",
    }
    assert words.get(kind, "a symbolic link loop") in err and "hint:" in err, err


def test_verify_names_what_is_wrong_with_a_listed_name(tmp_path: Path, cli: Run) -> None:
    run = tmp_path / "vf"
    run.mkdir()
    os.symlink("l2", run / "l1")
    os.symlink("l1", run / "l2")
    (run / "MANIFEST.sha256").write_text("0" * 64 + "  l1\n" + "0" * 64 + "  a\0b\n")
    rc, out, _ = cli(["train", "verify", str(run), "--json"])
    report = json.loads(out)
    assert rc == 1 and report["unreadable"] == ["l1 (a symbolic link loop)"], report
    assert report["outside"] == [] and len(report["malformed"]) == 1, (
        report
    )  # a NUL is no name, not "outside"


def test_verify_text_escapes_manifest_paths(tmp_path: Path, cli: Run) -> None:
    run = tmp_path / "vf"
    run.mkdir()
    (run / "MANIFEST.sha256").write_text("0" * 64 + "  evil\x1b]0;pwned\x07.txt\n")
    rc, out, _ = cli(["train", "verify", str(run)])
    assert rc == 1 and "\x1b" not in out and "\\x1b" in out


# -- case 6: out_dir (and every path option) with a name longer than the filesystem allows ------------------


@pytest.mark.parametrize("key", ["runtime.out_dir", "data.spm_model", "data.train_files", "data.val_files"])
@pytest.mark.parametrize("shape", ["name", "total"])
def test_path_options_too_long(tmp_path: Path, key: str, shape: str, cli: Run) -> None:
    path = f"{tmp_path}/{'b' * 300}/run" if shape == "name" else f"{tmp_path}/" + "c/" * 3000
    value = f"[{path}]" if key.endswith("_files") else path
    extra = ["--set", "data.source=files"] if key.endswith("_files") else []
    if key == "data.val_files":
        extra += ["--set", f"data.train_files=[{tmp_path}/x.jsonl]"]
    rc, _, err = cli(["train", "config", "--config", "smoke", *extra, "--set", f"{key}={value}"])
    assert rc == 2 and f"{key}: the path is too long" in err and "hint:" in err, err
    assert len(err) < 1000  # the 100 000-character value is not echoed back


def test_status_with_an_out_dir_too_long(tmp_path: Path, cli: Run) -> None:
    rc, _, err = cli(["train", "status", "--out-dir", f"{tmp_path}/{'b' * 300}"])
    assert rc == 2 and err.startswith("error:") and "hint:" in err, err


# -- case 8 and JSON: duplicate keys are an error naming the key and both lines ---------------------------


def test_duplicate_yaml_sections(tmp_path: Path, cli: Run) -> None:
    cfg = tmp_path / "dup.yaml"
    cfg.write_text("model:\n  d_model: 32\nmodel:\n  n_layers: 3\n")
    rc, _, err = cli(["train", "config", "--config", str(cfg)])
    assert rc == 2 and "'model' appears twice (lines 1 and 3)" in err and str(cfg) in err, err


def test_duplicate_yaml_keys_in_a_profile_and_a_set_value(tmp_path: Path, cli: Run) -> None:
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "p.yaml").write_text("name: p\nname: q\n")
    rc, _, err = cli(["profiles", "--profiles-dir", str(d)])
    assert rc == 2 and "'name' appears twice (lines 1 and 2)" in err, err
    rc, _, err = cli(["train", "config", "--config", "smoke", "--set", "data.labels={a: 1, a: 2}"])
    assert rc == 2 and "appears twice" in err, err


def test_a_yaml_merge_key_may_still_override(tmp_path: Path) -> None:
    cfg = tmp_path / "merge.yaml"
    cfg.write_text("base: &b {d_model: 32}\nmodel:\n  <<: *b\n  d_model: 64\n")
    from mw_env.base.userfile import load_yaml

    assert load_yaml(cfg.read_text(), source="x")["model"] == {"d_model": 64}


def test_duplicate_json_keys_in_a_run_record(tmp_path: Path, cli: Run) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text('{\n  "pid": 1,\n  "out_dir": "x",\n  "pid": 2\n}\n')
    rc, _, err = cli(["train", "status", "--out-dir", str(run)])
    assert rc == 2 and "'pid' appears twice (lines 2 and 4)" in err, err


def test_userjson_names_both_lines_and_refusals() -> None:
    from mw_env.base.errors import InputError
    from mw_env.base.userjson import load_json

    with pytest.raises(InputError, match=r"'a' appears twice \(lines 1 and 3\)"):
        load_json('{"a": 1,\n "b": {"a": 5},\n "a": 2}', source="f")
    for text, words in ((DEEP, "nested too deeply"), (BIG, "4300 digits"), ("{", "Expecting")):
        with pytest.raises(InputError, match=words):
            load_json(text, source="f")


# -- case 17: corpus text in the report is escaped ---------------------------------------------------------


def test_report_renderers_escape_control_characters(tmp_path: Path) -> None:
    from mw_env.trainer.report.doc import Bullets, Code, Heading, Para, Table, kv_table, to_html, to_markdown

    evil = "\x1b]0;pwned\x07\x1b[2J<b>"
    blocks = [
        Heading(evil),
        Para(evil),
        Bullets((Code(evil), evil)),
        Table(header=("label", evil), rows=((evil, Code(evil)),)),
        kv_table([(evil, Code(evil))]),
    ]
    md = to_markdown(evil, blocks, base=tmp_path)
    page = to_html(evil, blocks)
    for text in (md, page):
        assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;pwned\\x07" in text
    assert "<b>" not in page


# -- case 18: query-string secrets are redacted wherever a URL is shown ------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "token=S3CR3T",
        "sig=S3CR3T",
        "X-Amz-Signature=S3CR3T&X-Amz-Credential=S3CR3T",
        "api_key=S3CR3T",
        "password=S3CR3T",
        "a=1&access_token=S3CR3T",
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_dry_run_redacts_query_secrets(tmp_path: Path, query: str, as_json: bool, cli: Run) -> None:
    url = f"https://download.example.invalid/whl/cpu?{query}"
    _rc, out, err = cli(
        [
            "bootstrap",
            "--dry-run",
            "--profile",
            "cpu",
            "--venv",
            str(tmp_path / "v"),
            "--torch-index",
            url,
            *(["--json"] if as_json else []),
        ],
        env={"MW_ENV_VENV": ""},
    )
    assert "S3CR3T" not in out + err, (out, err)
    assert "download.example.invalid" in out + err


@pytest.mark.parametrize(
    ("where", "url"),
    [
        ("--torch-index", "https://download.example.invalid/whl/cpu#access_token=S3CR3T"),
        ("PIP_EXTRA_INDEX_URL", "https://download.example.invalid/simple#token=S3CR3T"),
        ("PIP_EXTRA_INDEX_URL", "https://download.example.invalid/simple?token=S3CR3T"),
        ("UV_EXTRA_INDEX_URL", "https://download.example.invalid/simple?sig=S3CR3T"),
    ],
    ids=["option-fragment", "pip-env-fragment", "pip-env-query", "uv-env-query"],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_secrets_in_other_url_surfaces(tmp_path: Path, where: str, url: str, as_json: bool, cli: Run) -> None:
    """Case 18's class beyond `?token=` of --torch-index: a secret in a URL's fragment (`#access_token=`,
    OAuth's implicit flow) or in an index variable pip and uv read; the fragment form was printed."""
    args = ["bootstrap", "--dry-run", "--profile", "cpu", "--venv", str(tmp_path / "v")]
    env = {"MW_ENV_VENV": ""}
    if where.startswith("--"):
        args += [where, url]
    else:
        env[where] = url
    _rc, out, err = cli([*args, *(["--json"] if as_json else [])], env=env)
    assert "S3CR3T" not in out + err, (out, err)


def test_redact_keeps_harmless_parameters() -> None:
    from mw_env.base.textsafe import redact

    assert redact("https://h/x?page=2&token=t") == "https://h/x?page=2&token=***"
    assert redact("--set runtime.key=1") == "--set runtime.key=1"  # not a URL query
    assert redact("https://h/x#section-2") == "https://h/x#section-2"  # a fragment without a secret
    assert redact("see #3: key=value") == "see #3: key=value"


def test_a_foreground_run_that_ended_while_writing_its_report_is_not_finished(tmp_path: Path) -> None:
    """Found with a full disk at report/environment.json (a write the fault table did not list): the run
    exits 1, its metrics end with the loop's `finished` and state.json still says `finishing`, its writer
    gone. `status` said "finished"; it says the report may be incomplete and how to complete it."""
    from mw_env.rundir.runstate import set_state
    from mw_env.runs.runstatus import run_status

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"event": "step", "step": 2, "time": 1.0}\n{"event": "finished", "step": 2, "reason": "max_steps"}\n'
    )
    set_state(run, "finishing", pid=2**22 + 12345, reason="max_steps", step=2)  # no such process
    status = run_status(out_dir=run)
    assert status.state != "finished", status
    assert any("ended while writing its report" in note for note in status.notes), status.notes
    set_state(run, "finished", pid=2**22 + 12345, reason="max_steps", step=2)
    assert run_status(out_dir=run).state == "finished"


@pytest.mark.parametrize("how", ["train.log-link", "metrics-link", "run.json-log_file"])
def test_status_never_quotes_a_file_outside_the_run_folder(tmp_path: Path, how: str, cli: Run) -> None:
    """Case 5's class on `status`/`watch`: a run folder's train.log (or metrics.jsonl) linked to a file outside
    it, or run.json naming such a file as the log, had status quote its lines (`Python traceback in the log:
    error: <the secret's line>`). Run-folder data names its own files: such a file is not read, and said so."""
    secret = tmp_path / "secret.txt"
    secret.write_text("Traceback (most recent call last):\nerror: SECRETLINE\nRuntimeError: SECRETLINE\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"event": "step", "step": 1, "time": 1.0}\n')
    if how == "train.log-link":
        os.symlink(secret, run / "train.log")
    elif how == "metrics-link":
        (run / "metrics.jsonl").unlink()
        os.symlink(secret, run / "metrics.jsonl")
    else:
        record = {
            "pid": 2**22 + 7,
            "start_ticks": 1,
            "argv": ["x"],
            "started_at": 1.0,
            "log_file": str(secret),
        }
        (run / "run.json").write_text(json.dumps(record))
    for cmd in (["status"], ["status", "--json"]):
        rc, out, err = cli(["train", *cmd, "--out-dir", str(run)])
        assert "SECRETLINE" not in out + err and "leads out of the run folder" in out + err, (rc, out, err)
