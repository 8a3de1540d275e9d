"""The whole config checked on the host before the doctor and before torch (issue 20 #7): globs, columns from
the Parquet footers (stdlib reader), labels, the tracker's package in the venv; error:/hint:, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.config import resolve_config
from mw_env.trainspec.formats.footer import FooterError, parquet_columns
from mw_env.trainspec.preflight import check_on_host

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _parquet(path: Path, **columns) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


@pytest.mark.parametrize(
    "columns",
    [
        {"words": [["10", "Main"]], "tags": [["B-X", "I-X"]]},
        {
            "a": [1],
            "nested": pa.array([{"x": 1, "y": [1, 2]}]),
            "words": [["a"]],
            "tags": [["O"]],
            "z": ["s"],
        },
        {
            "words": pa.array([], type=pa.list_(pa.string())),
            "labels": pa.array([], type=pa.list_(pa.string())),
        },
    ],
    ids=["two-lists", "nested-struct", "empty"],
)
def test_the_footer_reader_names_the_columns_pyarrow_wrote(tmp_path, columns):
    path = _parquet(tmp_path / "s.parquet", **columns)
    assert parquet_columns(path) == pq.ParquetFile(path).schema_arrow.names


def test_a_file_that_is_not_parquet_is_a_footer_error(tmp_path):
    for body in (b"", b"PAR1 not really", b"x" * 100 + b"\xff\xff\xff\x7fPAR1"):
        (tmp_path / "bad.parquet").write_bytes(body)
        with pytest.raises(FooterError):
            parquet_columns(tmp_path / "bad.parquet")


def _files_config(tmp_path: Path, *extra: str):
    return resolve_config(
        path=None,
        overrides=["data.source=files", f"runtime.out_dir={tmp_path / 'run'}", *extra],
    ).config


def test_each_config_problem_is_named_before_anything_heavy(tmp_path):
    _parquet(tmp_path / "a.parquet", tokens=[["10"]], tags=[["O"]])
    (tmp_path / "b.jsonl").write_text(json.dumps({"words": ["x"], "tags": ["O"]}) + "\n")
    cases = [
        (
            ["data.train_files=[nothing-*.parquet]"],
            r"data\.train_files: no file matches 'nothing-\*\.parquet'",
        ),
        (
            ["data.train_files=[a.parquet]", "data.tokens_column=words"],
            r"a\.parquet has no column 'words' \(data\.tokens_column\): the trainer reads the words from "
            r"data\.tokens_column \('words'\) and the BIO tags from data\.tags_column \('tags'\); the file's "
            r"columns: tokens \(list<string>\), tags \(list<string>\)",
        ),
        (
            ["data.train_files=[b.jsonl]"],
            r"b\.jsonl has no column 'tokens' \(data\.tokens_column\).*the file's columns: words, tags",
        ),
        (["data.train_files=[a.parquet]", "data.labels=[O, B-X, O]"], r"data\.labels lists O more than once"),
        (
            ["data.train_files=[b.jsonl]", "data.tokens_column=words", "data.labels=[B-X]"],
            r"data\.labels does not list 'O', found in .*b\.jsonl",
        ),
        (
            ["data.train_files=[a.parquet]", "data.labels=[B-X]"],
            r"data\.labels does not list 'O', found in .*a\.parquet",
        ),
    ]
    for overrides, message in cases:
        with pytest.raises(InputError, match=message) as err:
            check_on_host(_files_config(tmp_path, *overrides), venv=None, base=tmp_path)
        assert err.value.hint and err.value.exit_code == 2
    check_on_host(_files_config(tmp_path, 'data.train_files=["*.parquet"]'), venv=None, base=tmp_path)


def _bare_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    return venv


def test_a_tracker_the_venv_lacks_is_exit_2_naming_the_bootstrap_extra(tmp_path):
    venv = _bare_venv(tmp_path)
    config = resolve_config(path=None, overrides=["runtime.tracking=mlflow"]).config
    with pytest.raises(InputError, match=r"runtime\.tracking=mlflow needs mlflow-skinny") as err:
        check_on_host(config, venv=venv, base=tmp_path)
    assert f"mw-env bootstrap --venv {venv} --extras train,mlflow" in err.value.hint
    # Installed (a dist-info is what the check reads): no complaint.
    dist = venv / "lib" / "python3.11" / "site-packages" / "mlflow_skinny-3.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mlflow-skinny\nVersion: 3.1.0\n")
    check_on_host(config, venv=venv, base=tmp_path)


def test_mw_env_train_says_it_within_the_cli_before_the_doctor_and_without_torch(tmp_path):
    """Through the CLI in a fresh interpreter: exit 2, error and hint, and neither torch nor pyarrow imported
    (the doctor, which would import torch in the venv, never ran: its line would be printed first)."""
    venv = _bare_venv(tmp_path)
    (tmp_path / "cfg.yaml").write_text(
        "data:\n  source: files\n  train_files: [corpus/*.parquet]\nruntime:\n  out_dir: run\n"
    )
    code = (
        "import sys, mw_env.cli as c\n"
        f"rc = c.main(['train', '--config', 'cfg.yaml', '--venv', {str(venv)!r}, '--profile', 'cpu'])\n"
        "assert 'torch' not in sys.modules and 'pyarrow' not in sys.modules, 'heavy import'\n"
        "sys.exit(rc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MW_ENV_VENV")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "error: data.train_files: no file matches 'corpus/*.parquet'" in done.stderr
    assert (
        "hint: check the path" in done.stderr
        and "doctor" not in done.stderr
        and "Traceback" not in done.stderr
    )


def test_train_export_without_the_export_extra_is_exit_2_at_once(tmp_path, capsys):
    """Issue 20 #10: the first export failed with "No module named 'onnx'" after a torch import in the venv."""
    from mw_env.cli import main

    venv = _bare_venv(tmp_path)
    (tmp_path / "run").mkdir()
    assert main(["train", "export", "--venv", str(venv), str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "error: train export needs onnx, onnxruntime, onnxscript" in err
    assert f"mw-env bootstrap --venv {venv} --extras train,export" in err


def test_without_pyarrow_here_the_parquet_tags_are_read_in_the_venv(tmp_path, monkeypatch):
    """mw-env's own interpreter has no pyarrow (it is the `train` extra): the venv's python reads row group 0."""
    from mw_env.trainspec.labelscan import parquet_found

    path = _parquet(tmp_path / "a.parquet", tokens=[["1", "Main"]], tags=[["B-HOUSE", "B-ROAD"]])
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` fails here
    found = parquet_found([path], "tags", Path(sys.prefix))
    assert found is not None and found.tags == {"B-HOUSE", "B-ROAD"}
    assert parquet_found([path], "tags", None) is None  # neither here nor a venv: unknown, not a guess


def test_plain_corpus_tags_are_refused_on_the_host_with_the_conversion_to_paste(tmp_path):
    """Issue 37: the IOB2 refusal came 14 s into the trainer, though `train summary` found it in 2 s."""
    _parquet(tmp_path / "p.parquet", tokens=[["1", "Main", "St"]], tags=[["House", "Street", "Street"]])
    (tmp_path / "p.jsonl").write_text(json.dumps({"tokens": ["1"], "tags": ["House"]}) + "\n")
    for name, script in (("p.parquet", "pq.write_table"), ("p.jsonl", "json.loads")):
        with pytest.raises(
            InputError, match=r"the tags 'House', 'Street' have no B-/I- prefix|'House' have no"
        ) as err:
            check_on_host(_files_config(tmp_path, f"data.train_files=[{name}]"), venv=None, base=tmp_path)
        assert "convert the corpus to IOB2" in err.value.hint and script in err.value.hint
    _parquet(tmp_path / "ok.parquet", tokens=[["1", "Main"]], tags=[["B-House", "B-Street"]])
    check_on_host(_files_config(tmp_path, "data.train_files=[ok.parquet]"), venv=None, base=tmp_path)


def test_portable_weights_without_safetensors_note_or_refusal(tmp_path):
    """A venv bootstrapped before the train extra had safetensors: a run still starts (it says it writes no
    portable weights), a fine-tune from weights is refused before anything starts."""
    from mw_env.trainspec.preflight import weights_note

    venv = _bare_venv(tmp_path)
    config = resolve_config(path=None).config
    note = weights_note(config, venv)
    assert note and "lacks safetensors" in note and f"--venv {venv} --extras train" in note
    assert (
        weights_note(resolve_config(path=None, overrides=["runtime.portable_weights=none"]).config, venv)
        is None
    )
    check_on_host(config, venv=venv, base=tmp_path)  # no refusal: the default only loses the folder
    missing = resolve_config(path=None, overrides=["model.init_from=no/such/run"]).config
    with pytest.raises(InputError, match=r"model\.init_from=no/such/run: no such folder"):
        check_on_host(missing, venv=venv, base=tmp_path)
    fine_tune = resolve_config(path=None, overrides=[f"model.init_from={tmp_path}"]).config
    with pytest.raises(InputError, match=r"model\.init_from=.* needs safetensors") as err:
        check_on_host(fine_tune, venv=venv, base=tmp_path)
    assert "--extras train" in err.value.hint
    dist = venv / "lib" / "python3.11" / "site-packages" / "safetensors-0.8.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: safetensors\nVersion: 0.8.0\n")
    assert weights_note(config, venv) is None
    check_on_host(fine_tune, venv=venv, base=tmp_path)
