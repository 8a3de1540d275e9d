"""ONNX export of the smoke model, verified by onnxruntime against PyTorch (needs the export extra); the bundle
a serving team gets (tokenizer, id layout, labels, int8/fp16 variants, the runtime helper) and the docs' example."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx", reason="the export extra (onnx) is not installed")
pytest.importorskip("onnxruntime", reason="the export extra (onnxruntime) is not installed")

from mw_env.base.errors import MwEnvError
from mw_env.cli import main
from mw_env.rundir.manifest import read_manifest, sha256_file, verify_manifest

pytestmark = [pytest.mark.torch, pytest.mark.slow]
VENV = Path(sys.executable).parent.parent
DOCS = Path(__file__).resolve().parents[2] / "docs" / "runs.md"


def _load_helper(folder: Path):
    spec = importlib.util.spec_from_file_location("mw_tagger_test", folder / "mw_tagger.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """The smoke model trained 4 steps in this process (what `python -m mw_env.trainer run` calls): the tests
    read its checkpoint; a trainer child would only add a torch import."""
    from mw_env.trainer.loop import train
    from mw_env.trainspec.config import find_config, resolve_config

    run = tmp_path_factory.mktemp("export") / "smoke"
    sets = (
        f"runtime.out_dir={run}",
        "runtime.max_steps=4",
        "runtime.eval_every=4",
        "runtime.report_figures=false",
    )
    train(resolved=resolve_config(path=find_config("smoke"), overrides=sets), echo=lambda _m: None)
    return run


def test_export_cli_writes_a_verified_onnx_with_dynamic_axes(smoke_run, capfd):
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint

    assert main(["train", "export", "--format", "onnx", "--venv", str(VENV), str(smoke_run), "--json"]) == 0
    out, err = capfd.readouterr()  # capfd: the export runs in a child process writing to fd 2
    result = json.loads(out)
    # The exporter's "torchvision is not installed" log lines are not the user's problem.
    assert "torchvision" not in err, err
    onnx_path = Path(result["onnx"])
    assert onnx_path == smoke_run / "export" / "model-step-000000004.onnx"
    assert result["exporter"] == "dynamo" and result["step"] == 4
    assert 0 <= result["max_abs_diff"] <= result["bound"] == 1e-4
    assert result["argmax_agreement"] == 1.0 and len(result["cases"]) == 4
    # Held-out batches of other sizes than the export's 2 x 16, one at the full length.
    assert [c["shape"][0] for c in result["cases"]] == [7, 1, 3, 8]
    assert result["cases"][1]["shape"] == [1, 5] and result["cases"][2]["shape"] == [3, 96]

    # sha256 recorded, and in the run's manifest with the metadata file; the run still verifies.
    assert result["sha256"] == sha256_file(onnx_path)
    entries, _ = read_manifest(smoke_run)
    assert entries["export/model-step-000000004.onnx"] == result["sha256"]
    assert "export/model-step-000000004.json" in entries
    assert verify_manifest(smoke_run).ok

    # Dynamic batch and sequence axes in the graph itself.
    model_proto = onnx.load(str(onnx_path))
    for graph_input in model_proto.graph.input:
        dims = graph_input.type.tensor_type.shape.dim
        assert [d.dim_param for d in dims] == ["batch", "seq"], graph_input

    # Independently of the exporter's own check: a shape it never saw, padding included.
    meta = json.loads(onnx_path.with_suffix(".json").read_text())
    assert meta["labels"][0] == "O" and meta["max_seq_len"] == 96 and meta["sha256"] == result["sha256"]
    assert meta["decode"] == "viterbi"  # model.decode: the runtime helper reads tags as the trainer does
    model, _, _ = model_from_checkpoint(smoke_run / "checkpoints" / "step-000000004.pt")
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(4, 260, (4, 33), generator=gen)
    mask = torch.ones(4, 33, dtype=torch.bool)
    mask[1, 20:] = False
    ids[1, 20:] = 0
    with torch.no_grad():
        expected = model(ids, mask).numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    assert got.shape == (4, 33, len(meta["labels"]))
    assert np.abs(got - expected)[mask.numpy()].max() < 1e-4


def test_predict_from_the_export_tags_as_the_checkpoint_does(smoke_run, tmp_path):
    """`train predict --export`: the ONNX model through mw_tagger (what a service runs) gives the checkpoint's tags
    (after the first test's export); evaluate scores either the same."""
    from mw_env.trainer.predict import main as predict_main

    assert (smoke_run / "export" / "model-step-000000004.json").exists()  # written by the first test
    rows = [
        ["12", "Oak", "Street", "Leeds", "LS1", "4AB"],
        ["Flat", "3", "9", "Rue", "de", "la", "Paix", "Paris"],
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"tokens": r, "tags": ["O"] * len(r)}) + "\n" for r in rows))
    tags = {}
    for how, extra in (("checkpoint", []), ("export", ["--export", str(smoke_run / "export")])):
        out, result = tmp_path / f"{how}.jsonl", tmp_path / f"{how}.json"
        argv = [
            "predict",
            str(smoke_run),
            "--input",
            str(data),
            "--output",
            str(out),
            "--result",
            str(result),
        ]
        assert predict_main([*argv, "--device", "cpu", *extra]) == 0, result.read_text()
        tags[how] = [json.loads(x)["tags"] for x in out.read_text().splitlines()]
        assert json.loads(result.read_text())["step"] == 4
    assert tags["export"] == tags["checkpoint"] and len(tags["export"][1]) == 8


def test_a_bound_that_is_not_met_keeps_nothing_and_loses_nothing(smoke_run, tmp_path, capsys):
    """Through the entry point `train export` runs in the venv (onnx_export.main), in this process: its JSON
    line is what mw-env prints as `error:`/`hint:` (the command across the process boundary: the tests above
    and test_bad_inputs_are_clear)."""
    from mw_env.trainer.export.onnx_export import main as export_main

    out = tmp_path / "model.onnx"
    out.write_bytes(b"the previous, working export")
    argv = [str(smoke_run), "--out", str(out), "--exporter", "torchscript", "--max-diff", "1e-30"]
    capsys.readouterr()
    code = export_main(argv)
    answer = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == answer["exit_code"] == 1, answer
    err = f"{answer['error']} {answer['hint']}"
    assert "disagrees with PyTorch" in err and "bound 1e-30" in err and "nothing was kept" in err
    assert out.read_bytes() == b"the previous, working export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no temporaries left


@pytest.mark.parametrize("write", ["model.json", "model.onnx"], ids=["metadata", "model"])
def test_a_full_disk_at_an_export_write_keeps_the_previous_export_whole(
    smoke_run, tmp_path, monkeypatch, write
):
    """Issue 22, a write the fault table did not list: a full disk at the metadata left the new model beside
    the old metadata (a model whose .json names another sha256) while the error said "nothing half-written is
    kept". Every file of an export is written under a temporary name before any is committed."""
    from mw_env.trainer.export.onnx_export import export_onnx

    ckpt = smoke_run / "checkpoints" / "step-000000004.pt"
    out = tmp_path / "model.onnx"
    out.write_bytes(b"the previous, working export")
    (tmp_path / "model.json").write_text('{"sha256": "of the previous export"}\n')
    monkeypatch.setenv("MW_ENV_FAULTS", f"ENOSPC:{write}")
    with pytest.raises(OSError):
        export_onnx(checkpoint=ckpt, out=out, exporter="torchscript")
    assert out.read_bytes() == b"the previous, working export"
    assert (tmp_path / "model.json").read_text() == '{"sha256": "of the previous export"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "model.onnx"]  # no temporaries left


def test_torchscript_exporter_outside_the_run_folder(smoke_run, tmp_path):
    from mw_env.trainer.export.onnx_export import export_onnx

    ckpt = smoke_run / "checkpoints" / "step-000000004.pt"
    result = export_onnx(checkpoint=ckpt, out=tmp_path / "tagger.onnx", exporter="torchscript")
    assert result.exporter == "torchscript" and result.max_abs_diff <= 1e-4
    assert result.manifest is None and "outside the run folder" in result.notes[0]
    assert result.sha256 == sha256_file(tmp_path / "tagger.onnx")


def test_bad_inputs_are_clear(tmp_path, capsys, monkeypatch):
    from mw_env.trainer.export.onnx_export import export_onnx

    # The export's own refusals, in this process; the real command carries such a refusal out of its child as
    # `error:`/`hint:` and exit 2 in tests/fuzz/test_fuzz_run_folders.py (one export child for that is enough).
    with pytest.raises(MwEnvError, match="does not exist") as missing:
        export_onnx(checkpoint=tmp_path / "nope.pt")
    assert missing.value.exit_code == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(MwEnvError, match="no valid checkpoint") as empty:
        export_onnx(checkpoint=tmp_path / "empty")
    assert empty.value.exit_code == 2
    assert main(["train", "export", "--venv", str(tmp_path / "no-venv"), str(tmp_path)]) == 2  # bad input
    assert "no training venv" in capsys.readouterr().err
    assert main(["train", "export"]) == 2
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MwEnvError, match="needs onnx and onnxruntime") as err:
        export_onnx(checkpoint=tmp_path)
    assert "--extras train,export`" in err.value.hint  # the one install form (issue 20 #9)


def test_the_bundle_has_tokenizer_layout_labels_and_verified_int8_fp16(smoke_run, tmp_path, capfd):
    out = tmp_path / "serve" / "tagger.onnx"
    argv = [
        "train",
        "export",
        "--venv",
        str(VENV),
        str(smoke_run),
        "--out",
        str(out),
        "--quantize",
        "int8",
        "--fp16",
        # The bundle is the question here, not the exporter: the dynamo exporter (~14 CPU seconds in the child)
        # is the test above; the TorchScript one writes the same graph for the bundle's files to be judged.
        "--exporter",
        "torchscript",
    ]
    assert main(argv) == 0
    printed = capfd.readouterr().out
    # The argmax agreement of each variant is printed, with its tolerance.
    assert re.search(
        r"int8: tagger\.int8\.onnx \(.* MB\), argmax agreement \d+\.\d\d% \(>= 98%\)", printed
    ), printed
    assert re.search(r"fp16: tagger\.fp16\.onnx .*argmax agreement \d+\.\d\d%", printed), printed
    folder = out.parent
    assert sorted(p.name for p in folder.iterdir()) == [
        "mw_tagger.py",
        "tagger.fp16.onnx",
        "tagger.int8.onnx",
        "tagger.json",
        "tagger.onnx",
    ]
    meta = json.loads((folder / "tagger.json").read_text())
    assert meta["id_layout"] | {} == meta["id_layout"] and {
        k: meta["id_layout"][k] for k in ("pad", "cls", "sep", "unk", "shift", "word_separator", "vocab_size")
    } == {"pad": 0, "cls": 1, "sep": 2, "unk": 3, "shift": 4, "word_separator": [36], "vocab_size": 260}
    assert meta["tokenizer"]["kind"] == "byte" and "UTF-8" in meta["tokenizer"]["scheme"]
    assert meta["max_seq_len"] == 96 and meta["labels"][:2] == ["O", "B-house_number"] and meta["opset"] == 18
    assert [i["name"] for i in meta["inputs"]] == ["input_ids", "attention_mask"]
    assert meta["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", "seq", 15]}]
    assert meta["checkpoint_sha256"] == sha256_file(smoke_run / "checkpoints" / "step-000000004.pt")
    for kind in ("fp32", "int8", "fp16"):
        assert meta["variants"][kind]["sha256"] == sha256_file(folder / meta["variants"][kind]["onnx"])
    assert meta["variants"]["int8"]["bytes"] < meta["variants"]["fp32"]["bytes"]
    for kind in ("int8", "fp16"):
        figures = meta["verification"][kind]
        assert figures["argmax_agreement"] >= figures["min_agreement"] == 0.98 and figures["max_abs_diff"] > 0

    # The shipped helper, with onnxruntime alone: tags, refuses a too-long address, or truncates it.
    helper = _load_helper(folder)
    for variant in ("fp32", "int8", "fp16"):
        tags = helper.Tagger(folder / "tagger.json", variant=variant).tag(
            ["10", "Downing", "Street", "London"]
        )
        assert [w for w, _ in tags] == ["10", "Downing", "Street", "London"]
        assert all(label in meta["labels"] for _, label in tags)
    tagger = helper.Tagger(folder / "tagger.json")
    with pytest.raises(helper.InputTooLong, match="takes at most 96"):
        tagger.tag(["Street"] * 20)
    assert len(tagger.tag(["Street"] * 20, truncate=True)) == 13  # (96 - 2 + 1) // 7 whole words
    with pytest.raises(helper.InputTooLong):
        tagger.logits([[1] * 97])


def test_the_docs_example_runs_verbatim(smoke_run, tmp_path):
    """docs/runs.md's Python example, as printed there, against a real export; it agrees with mw_tagger.py."""
    text = DOCS.read_text()
    marker = "<!-- tests/runs/test_runs_export.py runs this block verbatim -->"
    code = text.split(marker, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "tagger").symlink_to(smoke_run)
    if not (smoke_run / "export" / "mw_tagger.py").exists():
        assert main(["train", "export", "--venv", str(VENV), str(smoke_run)]) == 0
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    newest = sorted((smoke_run / "export").glob("model-step-*.json"))[-1]
    # The example reads each word's argmax; the helper, as trained, the best valid sequence (decode=viterbi).
    expected = (
        _load_helper(smoke_run / "export")
        .Tagger(newest, decode="argmax")
        .tag(["10", "Downing", "Street", "London", "SW1A", "2AA"])
    )
    assert proc.stdout.splitlines() == [f"{w} {label}" for w, label in expected]


def test_a_sentencepiece_export_ships_its_model(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    from mw_env.trainer.export.onnx_export import export_onnx

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(f"{i} Oak Street Springfield {i * 7} Main Road, NSW 2000" for i in range(300)),
        model_writer=buf,
        vocab_size=400,
        byte_fallback=True,  # like the users' tokenizer; needs 256 byte pieces
        minloglevel=2,
    )
    model_file = tmp_path / "addr.model"
    model_file.write_bytes(buf.getvalue())
    run = tmp_path / "spm-run"
    sets = [
        f"runtime.out_dir={run}",
        "runtime.max_steps=2",
        "runtime.eval_every=2",
        "data.synthetic_rows=64",
        "data.synthetic_val_rows=8",
        "data.tokenizer=sentencepiece",
        f"data.spm_model={model_file}",
        "runtime.report_figures=false",
    ]
    from mw_env.trainer.loop import train
    from mw_env.trainspec.config import find_config, resolve_config

    train(resolved=resolve_config(path=find_config("smoke"), overrides=sets), echo=lambda _m: None)
    # The TorchScript exporter: the tokenizer shipped is the question here; the dynamo exporter (11 CPU seconds
    # more) and its int8 and fp16 variants are the tests above.
    result = export_onnx(checkpoint=run, quantize="int8", min_agreement=0.5, exporter="torchscript")
    folder = result.onnx_path.parent
    meta = json.loads(result.metadata_path.read_text())
    shipped = folder / meta["tokenizer"]["model"]
    assert shipped.name == "model-step-000000002.spm.model" and shipped.read_bytes() == buf.getvalue()
    assert meta["tokenizer"]["pieces"] == 400 and meta["id_layout"]["word_separator"] == []
    assert meta["tokenizer"]["sha256"] == sha256_file(shipped)
    assert result.runtime_check["too_long_error"].startswith("the address is")
    assert 0.5 <= result.variants["int8"]["verification"]["argmax_agreement"] <= 1
    tags = _load_helper(folder).Tagger(result.metadata_path).tag(["12", "Oak", "Street"])
    assert [w for w, _ in tags] == ["12", "Oak", "Street"]
    assert verify_manifest(run).ok
    # The run's portable weights folder ships the same SentencePiece model, and both readers take it.
    import torch

    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint
    from mw_env.trainer.weights.load import build, read_weights

    weights = run / "weights" / "step-000000002"
    assert (weights / "tokenizer.model").read_bytes() == buf.getvalue()
    loaded = read_weights(weights)
    assert loaded.tokenizer.kind == "sentencepiece" and loaded.meta["tokenizer"]["model"] == "tokenizer.model"
    ids, starts = _load_helper(weights).Encoder(loaded.meta, weights).encode(["12", "Oak", "Street"])
    model, tok, _labels = model_from_checkpoint(run / "checkpoints" / "step-000000002.pt")
    assert ids[1:-1] == [i for w in ["12", "Oak", "Street"] for i in tok.encode_word(w)] and len(starts) == 3
    batch = (torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool))
    with torch.no_grad():
        assert torch.equal(build(loaded)(*batch), model(*batch))


def test_variant_tolerances_are_judged():
    from mw_env.base.errors import StepFailed
    from mw_env.trainer.export.bundle import judge_variant

    judge_variant("int8", {"argmax_agreement": 0.99, "max_abs_diff": 0.3}, min_agreement=0.98)
    with pytest.raises(StepFailed, match=r"argmax agreement 97\.00% < --min-agreement 98%") as err:
        judge_variant("int8", {"argmax_agreement": 0.97, "max_abs_diff": 0.3}, min_agreement=0.98)
    assert "nothing was kept" in err.value.hint
    with pytest.raises(StepFailed, match="fp16 model's logits differ"):
        judge_variant("fp16", {"argmax_agreement": 1.0, "max_abs_diff": 0.2}, min_agreement=0.98)
