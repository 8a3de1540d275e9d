"""Portable weights (issue 38): a run's final checkpoint gets a safetensors folder, written whole or not at all; the
documented snippet loads it in an interpreter that cannot import mw_env and gives the run's logits; `train predict
--weights` and `train export --format safetensors` read and write the same folder; `model.init_from` starts a
fine-tune from it with the same or a larger label set, and refuses a smaller one, another network or tokenizer."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from mw_env.base.errors import InputError
from proctools import wait_for

from .helpers import events, step_losses, synthetic_rows, tiny_config

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
FOLDER = "weights/step-000000008"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mw_env.trainer.loop import train

    out = tmp_path_factory.mktemp("weights") / "run"
    train(resolved=tiny_config(out), echo=lambda _m: None)  # checkpoints at 4 and 8; weights at 8 (final)
    return out


def _logits(model, ids: list[int]):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.bool))


def test_the_final_checkpoint_gets_a_complete_folder(run: Path) -> None:
    folder = run / FOLDER
    assert sorted(p.name for p in (run / "weights").iterdir()) == ["step-000000008"]  # `final`: not step 4
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["config.json", "model.safetensors", "modeling_mw_tagger.py", "mw_tagger.py"]
    config = json.loads((folder / "config.json").read_text())
    from mw_env.trainer.ckpt.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run / "checkpoints" / "step-000000008.pt")
    # Derived from the config's model section, whole (but where training started), and the checkpoint's labels.
    assert set(config["model"]) == set(ckpt["config"]["model"]) - {"init_from"}
    assert config["labels"] == list(ckpt["labels"]) and config["id2label"]["0"] == ckpt["labels"][0]
    assert config["init"] == {"vocab_size": 260, "n_labels": len(ckpt["labels"]), "words": True}
    assert config["tokenizer"]["kind"] == "byte" and config["step"] == 8
    assert (
        config["source"]["checkpoint_sha256"]
        == (run / "checkpoints/step-000000008.pt.sha256").read_text().split()[0]
    )
    assert (folder / "modeling_mw_tagger.py").read_text() == (
        ROOT / "src/mw_env/trainer/network.py"
    ).read_text()
    assert [e["path"] for e in events(run, "weights")] == [str(folder)]
    manifest = (run / "MANIFEST.sha256").read_text()
    assert f"{FOLDER}/model.safetensors" in manifest and f"{FOLDER}/config.json" in manifest


SNIPPET = re.compile(
    r"<!-- tests/trainer/test_weights\.py runs this block -->\n```python\n(.*?)^```", re.M | re.S
)


@pytest.mark.slow
def test_the_documented_snippet_loads_it_without_mw_env(run: Path, tmp_path: Path) -> None:
    """docs/training.md's block as written, in this venv's python with no site processing: torch and safetensors
    are on the path, mw_env (an editable install, through a .pth file) is not; the logits are the run's."""
    import torch

    (snippet,) = SNIPPET.findall((ROOT / "docs" / "training.md").read_text(encoding="utf-8"))
    site = sysconfig.get_paths()["purelib"]
    prelude = f"import sys\nsys.path[:0] = [{site!r}]\n"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    isolated = [sys.executable, "-I", "-S"]  # no PYTHONPATH, no user site, no site-packages' .pth files
    # torch and safetensors found (not imported: the snippet's run below imports both), mw_env not found.
    found = "import importlib.util as u\nassert u.find_spec('torch') and u.find_spec('safetensors')\nimport mw_env"
    probe = subprocess.run(
        [*isolated, "-c", prelude + found],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 1 and "No module named 'mw_env'" in probe.stderr, probe.stderr[-2000:]
    script = tmp_path / "load.py"
    script.write_text(
        prelude + snippet + f"torch.save({{'ids': ids, 'logits': logits}}, {str(tmp_path / 'out.pt')!r})\n"
    )
    done = subprocess.run(
        [*isolated, str(script), str(run / FOLDER)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "('London', '" in done.stdout  # the snippet's own output: (word, label) pairs
    got = torch.load(tmp_path / "out.pt")
    from mw_env.trainer.ckpt.checkpoint import model_from_checkpoint

    model, _tok, _labels = model_from_checkpoint(run / "checkpoints" / "step-000000008.pt")
    expected = _logits(model, got["ids"])
    assert (got["logits"] - expected).abs().max().item() <= 1e-5


@pytest.mark.slow
def test_a_kill_leaves_the_folder_complete_or_absent(run: Path, tmp_path: Path) -> None:
    target = tmp_path / "weights" / "step-000000008"
    hold = tmp_path / "hold"
    code = (
        "from pathlib import Path\n"
        "from mw_env.trainer.ckpt.checkpoint import load_checkpoint, model_from_checkpoint\n"
        "from mw_env.trainer.weights.folder import write_weights\n"
        "from mw_env.trainspec.config import config_from_dict\n"
        f"ckpt = load_checkpoint(Path({str(run / 'checkpoints/step-000000008.pt')!r}))\n"
        "model, tok, labels = model_from_checkpoint(ckpt)\n"
        # A checkpoint's load in a fresh process imports no torch._dynamo and no sympy: 2-4 CPU seconds of every
        # predict/evaluate/export child, once paid by the shape check's meta-device model (ckpt/schema.py).
        "import sys; assert not {'torch._dynamo', 'sympy'} & set(sys.modules), 'the load imported dynamo/sympy'\n"
        f"write_weights(Path({str(target)!r}), state=model.state_dict(), config=config_from_dict(ckpt['config']),"
        " tokenizer=tok, labels=labels, step=8, source={})\n"
    )
    env = {**os.environ, "MW_ENV_TEST_HOLD": f"weights:{hold}", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: Path(f"{hold}.waiting").exists() or proc.poll() is not None, 120, "the write's hold")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)  # every file written, the folder not yet committed
        proc.wait()
    finally:
        proc.kill()
    assert not target.exists()
    (left,) = target.parent.iterdir()
    assert left.name.startswith(".step-000000008.tmp-") and (left / "config.json").is_file()
    # The next write commits a whole folder and sweeps the dead writer's temporary.
    from mw_env.trainer.weights.export import export_weights

    export_weights(target=run, out=target)
    assert [p.name for p in target.parent.iterdir()] == ["step-000000008"]
    import torch
    from safetensors.torch import load_file

    written, original = load_file(target / "model.safetensors"), load_file(run / FOLDER / "model.safetensors")
    assert written.keys() == original.keys() and all(torch.equal(written[k], original[k]) for k in written)


def test_export_writes_the_folder_for_an_existing_run(run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.weights.export import main

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "weights")  # a run without weights (an older mw-env's, or portable_weights=none)
    (copy / "checkpoints" / "step-000000008.pt").write_bytes(b"torn")  # the newest is damaged: step 4 is used
    for _ in range(2):  # the second replaces the first whole
        assert main([str(copy)]) == 0
    folder = copy / "weights" / "step-000000004"
    assert sorted(p.name for p in copy.joinpath("weights").iterdir()) == ["step-000000004"]
    config = json.loads((folder / "config.json").read_text())
    assert config["step"] == 4 and config["source"]["checkpoint"] == str(
        copy / "checkpoints/step-000000004.pt"
    )
    assert "weights/step-000000004/model.safetensors" in (copy / "MANIFEST.sha256").read_text()
    # A changed file is refused by its sha256, before safetensors reads it.
    from mw_env.trainer.weights.load import read_weights

    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"model\.safetensors was changed since it was written"):
        read_weights(folder)


def _predict(*argv: str, tmp: Path) -> dict:
    from mw_env.trainer.predict import main

    result = tmp / "result.json"
    assert main([*argv, "--device", "cpu", "--result", str(result)]) == 0
    return json.loads(result.read_text())


def test_predict_with_weights_tags_as_the_checkpoint_does(run: Path, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"tokens": r["tokens"]}) + "\n" for r in synthetic_rows(12, start=900))
    )
    by_ckpt = _predict(
        "predict", str(run), "--input", str(rows), "--output", str(tmp_path / "a.jsonl"), tmp=tmp_path
    )
    by_weights = _predict(
        "predict",
        "--weights",
        str(run),
        "--input",
        str(rows),
        "--output",
        str(tmp_path / "b.jsonl"),
        tmp=tmp_path,
    )
    assert by_weights["model"] == str(run / FOLDER) and by_weights["step"] == by_ckpt["step"] == 8
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()


def test_the_cli_names_rules(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mw_env.cli import main

    rows = tmp_path / "rows.txt"
    rows.write_text("10 Downing Street\n")
    assert main(["train", "predict", "--input", str(rows)]) == 2
    assert "name a RUN" in capsys.readouterr().err
    assert main(["train", "predict", "--input", str(rows), "--weights", str(run), "--export", str(run)]) == 2
    assert "--weights and --export name two models" in capsys.readouterr().err
    assert main(["train", "export", str(run), "--format", "safetensors", "--fp16"]) == 2
    assert "--fp16 make ONNX variants" in capsys.readouterr().err


# -- model.init_from --------------------------------------------------------------------------------------------


def _fresh(tmp_path: Path, *extra: str, labels: list[str] | None = None):
    """A model built as a new run builds it (seeded), with `labels`, and the config asking for init_from."""
    from mw_env.trainer.data import ByteTokenizer
    from mw_env.trainer.model import build_model

    config = tiny_config(tmp_path / "new", *extra).config
    names = labels if labels is not None else _labels_of()
    return config, build_model(config, vocab_size=260, n_labels=len(names)), ByteTokenizer(), names


def _labels_of() -> list[str]:
    from mw_env.trainer.data.labels import BUNDLED

    return list(BUNDLED.names)


def test_init_from_the_same_labels_loads_every_weight(run: Path, tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.weights.initfrom import start_from
    from mw_env.trainer.weights.load import read_weights

    config, model, tok, labels = _fresh(tmp_path, f"model.init_from={run}")
    said: list[str] = []
    fact = start_from(model, config=config, tokenizer=tok, labels=labels, say=said.append)
    source = read_weights(run).state
    assert all(torch.equal(t, source[n]) for n, t in model.state_dict().items())
    assert fact == {"path": str(run / FOLDER), "kind": "weights", "step": 8, "new_labels": []}
    assert "the same labels" in said[0]


def test_init_from_a_larger_label_set_maps_rows_by_name(run: Path, tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.weights.initfrom import start_from
    from mw_env.trainer.weights.load import read_weights

    old = _labels_of()
    # Another order, and two new labels in the middle and at the end.
    labels = [old[0], "B-po_box", *reversed(old[1:]), "I-po_box"]
    config, model, tok, _ = _fresh(tmp_path, f"model.init_from={run / FOLDER}", labels=labels)
    fresh_head = model.head.weight.detach().clone()
    fact = start_from(model, config=config, tokenizer=tok, labels=labels, say=lambda _m: None)
    source = read_weights(run).state
    for row, name in enumerate(labels):
        if name in old:
            assert torch.equal(model.head.weight[row], source["head.weight"][old.index(name)]), name
            assert torch.equal(model.head.bias[row], source["head.bias"][old.index(name)]), name
        else:
            assert torch.equal(model.head.weight[row], fresh_head[row]), name
    assert fact["new_labels"] == ["B-po_box", "I-po_box"]


def test_init_from_a_checkpoint_of_a_run_without_weights(run: Path, tmp_path: Path) -> None:
    import torch

    from mw_env.trainer.ckpt.checkpoint import load_checkpoint
    from mw_env.trainer.weights.initfrom import start_from

    copy = tmp_path / "old-run"
    shutil.copytree(run / "checkpoints", copy / "checkpoints")  # no weights/ folder
    config, model, tok, labels = _fresh(tmp_path, f"model.init_from={copy}")
    fact = start_from(model, config=config, tokenizer=tok, labels=labels, say=lambda _m: None)
    assert fact["kind"] == "checkpoint" and fact["step"] == 8
    ckpt = load_checkpoint(copy / "checkpoints" / "step-000000008.pt")
    assert all(torch.equal(t, ckpt["model"][n]) for n, t in model.state_dict().items())


def test_init_from_refuses_fewer_labels_another_network_or_tokenizer(run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.weights.initfrom import check_fits, read_source, start_from

    old = _labels_of()
    renamed = [("B-road" if n == "B-street" else n) for n in old]
    config, model, tok, _ = _fresh(tmp_path, f"model.init_from={run}", labels=renamed)
    with pytest.raises(InputError, match=r"has label\(s\) B-street that this run's label set lacks") as err:
        start_from(model, config=config, tokenizer=tok, labels=renamed, say=lambda _m: None)
    assert "add them to data.labels" in (err.value.hint or "")
    config, model, tok, labels = _fresh(tmp_path, f"model.init_from={run}", "model.d_model=48")
    with pytest.raises(
        InputError, match=r"another network than this run's \(model.d_model: 32 there, 48 here\)"
    ):
        start_from(model, config=config, tokenizer=tok, labels=labels, say=lambda _m: None)
    source = read_source(run)
    spm = SimpleNamespace(kind="sentencepiece", proto=b"a model", vocab_size=260)
    with pytest.raises(
        InputError, match="trained with the byte tokenizer; this run uses sentencepiece model"
    ):
        check_fits(source, config=tiny_config(tmp_path).config, tokenizer=spm, labels=labels)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="neither a weights folder"):
        read_source(tmp_path)


@pytest.mark.slow
def test_a_fine_tune_starts_from_the_weights_and_says_so(run: Path, tmp_path: Path) -> None:
    from mw_env.trainer.loop import train

    tuned = tmp_path / "tuned"
    said: list[str] = []
    train(resolved=tiny_config(tuned, f"model.init_from={run}", "runtime.max_steps=4"), echo=said.append)
    assert any(line.startswith(f"model.init_from: started from {run / FOLDER}") for line in said)
    card = json.loads((tuned / "report" / "data_card.json").read_text())
    assert card["init_from"]["path"] == str(run / FOLDER)
    # Trained weights start where random ones could not: its first step's loss is below the source's first.
    assert step_losses(tuned)[1] < step_losses(run)[1]
    assert "Started from" in (tuned / "report" / "report.md").read_text()
    # A resume continues from its own checkpoint, not from the source again.
    train(resolved=tiny_config(tuned, f"model.init_from={run}", "runtime.max_steps=6"), echo=said.append)
    assert [e["step"] for e in events(tuned, "resumed")] == [4]


@pytest.mark.slow
def test_the_cli_exports_in_the_training_venv(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mw_env.cli import main

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "weights")
    venv = str(Path(sys.executable).parent.parent)
    assert main(["train", "export", str(copy), "--format", "safetensors", "--venv", venv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["folder"] == str(copy / FOLDER) and result["step"] == 8 and result["max_abs_diff"] == 0.0
    assert "model.safetensors" in result["files"] and (copy / FOLDER / "config.json").is_file()
    # `train predict --weights` without a run: the folder alone.
    rows = tmp_path / "rows.txt"
    rows.write_text("Flat 2 10 Downing Street London\n")
    out = tmp_path / "tagged.jsonl"
    argv = ["train", "predict", "--weights", str(copy / FOLDER), "--input", str(rows), "--output", str(out)]
    assert main([*argv, "--venv", venv, "--device", "cpu"]) == 0
    tagged = json.loads(out.read_text())
    assert tagged["tokens"][0] == "Flat" and len(tagged["tags"]) == 6
    assert f"with {copy / FOLDER}" in capsys.readouterr().err
