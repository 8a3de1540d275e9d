"""A config of one's own builds on a shipped one (`base:`, or the profile's default), and files imply
`data.source: files`: each as a new user writes the file. No torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.config import find_config, resolve_config
from mw_env.trainspec.configfile import built_on

CPU = {
    "config": "address-tagger-cpu",
    "device": "cpu",
}  # what launch.profile_defaults gives on the cpu profile


def test_a_file_with_only_data_starts_from_the_profiles_default_config(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("data:\n  train_files: [addresses.parquet]\n")
    r = resolve_config(path=mine, profile_defaults=CPU, profile_name="cpu")
    shipped = resolve_config(path=find_config("address-tagger-cpu")).config
    assert r.config.model == shipped.model and r.config.optim == shipped.optim
    assert r.config.runtime.max_steps == shipped.runtime.max_steps
    assert r.sources["model.d_model"] == f"file:{find_config('address-tagger-cpu')}"
    line = built_on(r)
    assert line is not None and line.startswith("config mine.yaml: built on address-tagger-cpu")
    assert "cpu profile's default config" in line and "names no `base:`" in line
    assert r.to_dict()["built_on"] == [
        {"file": str(find_config("address-tagger-cpu")), "why": "profile default"}
    ]
    # A GPU profile's default is the big model.
    gpu = resolve_config(path=mine, profile_defaults={"config": "address-tagger"}, profile_name="cuda")
    assert (
        gpu.config.model.n_layers == resolve_config(path=find_config("address-tagger")).config.model.n_layers
    )


def test_base_names_a_shipped_config_or_a_file_and_the_later_file_wins(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text("base: smoke\noptim:\n  lr: 1.0e-3\nruntime:\n  max_steps: 7\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: team.yaml\nruntime:\n  max_steps: 9\n")
    r = resolve_config(path=mine, profile_defaults=CPU, overrides=["runtime.log_every=3"])
    c = r.config
    assert (c.model.d_model, c.optim.lr, c.runtime.max_steps, c.runtime.log_every) == (32, 1e-3, 9, 3)
    assert r.sources["runtime.max_steps"] == f"file:{mine}"
    assert r.sources["optim.lr"] == f"file:{tmp_path / 'team.yaml'}"
    assert [why for _, why in r.bases] == ["base", "base"]
    assert "built on smoke and team.yaml (its `base:`)" in (built_on(r) or "")
    # `base: null`: the built-in defaults alone, whatever the profile's default config.
    bare = tmp_path / "bare.yaml"
    bare.write_text("base: null\nruntime:\n  max_steps: 5\n")
    assert resolve_config(path=bare, profile_defaults=CPU).config.model.d_model == 256
    # A shipped config builds on nothing, and says nothing about it.
    smoke = resolve_config(path=find_config("smoke"), profile_defaults=CPU)
    assert smoke.bases == () and built_on(smoke) is None


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("base: nothere\n", "base 'nothere': no such file"),
        ("base: [smoke]\n", "is not a config"),
        ("base: loop.yaml\n", "its bases name each other"),
    ],
)
def test_a_bad_base_is_a_sentence_naming_the_file(tmp_path: Path, text: str, expect: str) -> None:
    cfg = tmp_path / "loop.yaml"
    cfg.write_text(text)
    with pytest.raises(InputError) as exc:
        resolve_config(path=cfg, profile_defaults=CPU)
    assert expect in exc.value.message and exc.value.hint


def test_train_files_imply_source_files_over_a_shipped_synthetic_config(tmp_path: Path) -> None:
    # The shipped config says `source: synthetic`; a user's files, named later, say what the corpus is.
    r = resolve_config(path=find_config("address-tagger-cpu"), overrides=["data.train_files=[a.parquet]"])
    assert r.config.data.source == "files"
    assert r.sources["data.source"] == "implied by data.train_files (--set)"
    mine = tmp_path / "mine.yaml"
    mine.write_text("data:\n  sources:\n    - files: [a.parquet]\n      weight: 1\n")
    assert resolve_config(path=mine, profile_defaults=CPU).config.data.source == "files"


@pytest.mark.parametrize(
    ("text", "sets"),
    [
        ("data:\n  source: synthetic\n  train_files: [a.parquet]\n", ()),
        ("data:\n  train_files: [a.parquet]\n", ("data.source=synthetic",)),
    ],
)
def test_a_synthetic_corpus_named_with_files_is_an_error_naming_both_keys(
    tmp_path: Path, text: str, sets: tuple[str, ...]
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    with pytest.raises(InputError) as exc:
        resolve_config(path=mine, profile_defaults=CPU, overrides=sets)
    assert "data.source is 'synthetic'" in exc.value.message and "data.train_files" in exc.value.message
    assert "would never be read" in exc.value.message


def test_summary_and_config_say_what_a_file_of_ones_own_builds_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from mw_env.cli import main

    mine = tmp_path / "mine.yaml"
    mine.write_text("data:\n  synthetic_rows: 1000\n")
    assert main(["train", "summary", "--config", str(mine), "--profile", "cpu"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("config mine.yaml: built on address-tagger-cpu (the cpu profile's default config")
    assert main(["train", "config", "--config", str(mine), "--profile", "cpu"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["built_on"][0]["why"] == "profile default" and shown["config"]["model"]["d_model"] == 128
    assert shown["sources"]["model.d_model"].endswith("address-tagger-cpu.yaml")
