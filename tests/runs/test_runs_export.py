"""ONNX export of the smoke model, verified by onnxruntime against PyTorch (needs the export extra)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx", reason="the export extra (onnx) is not installed")
pytest.importorskip("onnxruntime", reason="the export extra (onnxruntime) is not installed")

from mw_env.cli import main
from mw_env.errors import MwEnvError
from mw_env.runs.manifest import read_manifest, sha256_file, verify_manifest

pytestmark = [pytest.mark.torch, pytest.mark.slow]
VENV = Path(sys.executable).parent.parent


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("export") / "smoke"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mw_env.trainer",
            "run",
            "--config",
            "smoke",
            "--set",
            f"runtime.out_dir={run}",
            "--set",
            "runtime.max_steps=4",
            "--set",
            "runtime.eval_every=4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run


def test_export_cli_writes_a_verified_onnx_with_dynamic_axes(smoke_run, capfd):
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    from mw_env.trainer.model import model_from_checkpoint

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


def test_a_bound_that_is_not_met_keeps_nothing_and_loses_nothing(smoke_run, tmp_path, capsys):
    out = tmp_path / "model.onnx"
    out.write_bytes(b"the previous, working export")
    code = main(
        [
            "train",
            "export",
            "--venv",
            str(VENV),
            str(smoke_run),
            "--out",
            str(out),
            "--exporter",
            "torchscript",
            "--max-diff",
            "1e-30",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "disagrees with PyTorch" in err and "bound 1e-30" in err and "nothing was kept" in err
    assert out.read_bytes() == b"the previous, working export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no temporaries left


def test_torchscript_exporter_outside_the_run_folder(smoke_run, tmp_path):
    from mw_env.trainer.export import export_onnx

    ckpt = smoke_run / "checkpoints" / "step-000000004.pt"
    result = export_onnx(checkpoint=ckpt, out=tmp_path / "tagger.onnx", exporter="torchscript")
    assert result.exporter == "torchscript" and result.max_abs_diff <= 1e-4
    assert result.manifest is None and "outside the run folder" in result.notes[0]
    assert result.sha256 == sha256_file(tmp_path / "tagger.onnx")


def test_bad_inputs_are_clear(tmp_path, capsys, monkeypatch):
    from mw_env.trainer.export import export_onnx

    assert main(["train", "export", "--venv", str(VENV), str(tmp_path / "nope.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["train", "export", "--venv", str(VENV), str(tmp_path / "empty")]) == 2
    assert "no valid checkpoint" in capsys.readouterr().err
    assert main(["train", "export", "--venv", str(tmp_path / "no-venv"), str(tmp_path)]) == 2  # bad input
    assert "no training venv" in capsys.readouterr().err
    assert main(["train", "export"]) == 2
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MwEnvError, match="needs onnx and onnxruntime") as err:
        export_onnx(checkpoint=tmp_path)
    assert "onnxruntime>=1.18" in err.value.hint
