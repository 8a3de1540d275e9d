"""Config: shipped configs, precedence and provenance, --set parsing, clear errors. No torch."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mw_env.base.errors import InputError
from mw_env.trainspec.config import (
    architecture_diff,
    config_from_dict,
    find_config,
    parse_set,
    resolve_config,
    shipped_configs,
)


def test_shipped_configs_resolve() -> None:
    assert {"smoke", "address-tagger"} <= set(shipped_configs())
    smoke = resolve_config(path=find_config("smoke")).config
    assert (smoke.model.n_layers, smoke.model.d_model, smoke.runtime.max_steps) == (2, 32, 20)
    assert smoke.data.source == "synthetic" and smoke.runtime.device == "cpu"
    tagger = resolve_config(path=find_config("address-tagger")).config
    assert tagger.model.n_layers == 6


def test_precedence_and_sources(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("optim:\n  lr: 1.0e-3\nruntime:\n  precision: fp32\n")
    r = resolve_config(
        path=cfg,
        overrides=["optim.lr=2e-3", "runtime.compile=true"],
        profile_defaults={"device": "cuda", "precision": "bf16", "sdpa_backend": "math", "compile": False},
        profile_name="gfx1103",
    )
    c = r.config
    assert c.optim.lr == 2e-3 and r.sources["optim.lr"] == "--set"  # YAML 1.1 reads 2e-3 as text
    assert c.runtime.precision == "fp32" and r.sources["runtime.precision"] == f"file:{cfg}"
    assert c.runtime.device == "cuda" and r.sources["runtime.device"] == "profile:gfx1103"
    assert c.runtime.sdpa_backend == "math"
    assert c.runtime.compile is True
    assert r.sources["optim.weight_decay"] == "default"
    assert r.to_dict()["config_sha256"] == c.sha256()


def test_toml_config(tmp_path: Path) -> None:
    if sys.version_info < (3, 11):
        pytest.importorskip("tomli")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[optim]\nlr = 1e-3\nbatch_size = 4\n[data]\ncountries = ["US", "DE"]\n')
    c = resolve_config(path=cfg).config
    assert (c.optim.lr, c.optim.batch_size, c.data.countries) == (1e-3, 4, ("US", "DE"))


def test_unknown_key_names_closest(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        resolve_config(overrides=["optim.learning_rat=1"])
    assert "optim.learning_rat" in exc.value.message
    cfg = tmp_path / "c.yaml"
    cfg.write_text("runtime:\n  max_step: 5\n")
    with pytest.raises(InputError) as exc:
        resolve_config(path=cfg)
    assert str(cfg) in exc.value.message and "runtime.max_steps" in (exc.value.hint or "")
    cfg.write_text("optimizer:\n  lr: 1\n")
    with pytest.raises(InputError, match="unknown config section 'optimizer'") as exc:
        resolve_config(path=cfg)
    assert "did you mean section 'optim'?" in (exc.value.hint or "")


@pytest.mark.parametrize(
    ("item", "expect"),
    [
        ("optim.lr=fast", "optim.lr must be a number"),
        ("runtime.max_steps=1.5", "runtime.max_steps must be an integer"),
        ("runtime.compile=maybe", "runtime.compile must be true or false"),
        ("runtime.max_steps=true", "runtime.max_steps must be an integer"),
        ("runtime.max_steps=0", "runtime.max_steps = 0 is not allowed"),
        ("optim.schedule=exp", "optim.schedule = 'exp' is not allowed"),
        ("model.n_heads=3", "model.n_heads = 3 is not allowed"),
        ("runtime.device=gpu", "runtime.device = 'gpu' is not allowed"),
        ("runtime.keep_last=1", "runtime.keep_last = 1 is not allowed"),
        ("optim.lr", "expected section.key=value"),
        ("data.countries=[US, XX]", "data.countries = ['US', 'XX'] is not allowed"),
    ],
)
def test_bad_set_values(item: str, expect: str) -> None:
    with pytest.raises(InputError) as exc:
        resolve_config(path=find_config("smoke"), overrides=[item])
    assert expect in exc.value.message
    assert exc.value.exit_code == 2


def test_parse_set_scalars() -> None:
    assert parse_set("optim.lr=1e-3") == ("optim.lr", "1e-3")  # turned into a float by the field type
    assert parse_set("runtime.compile=true") == ("runtime.compile", True)
    assert parse_set("data.spm_model=null") == ("data.spm_model", None)
    assert parse_set("data.countries=[US, GB]") == ("data.countries", ["US", "GB"])
    c = resolve_config(overrides=["optim.lr=1e-3", "data.countries=[US, GB]", "data.train_files=a.jsonl"])
    assert c.config.optim.lr == 1e-3 and c.config.data.countries == ("US", "GB")
    assert c.config.data.train_files == ("a.jsonl",)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no shipped config"):
        find_config("no-such-config")
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: [1, 2\n")
    with pytest.raises(InputError, match="invalid YAML"):
        resolve_config(path=bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="top level must be a mapping"):
        resolve_config(path=bad)
    ini = tmp_path / "c.ini"
    ini.write_text("x")
    with pytest.raises(InputError, match="unknown config format"):
        resolve_config(path=ini)
    with pytest.raises(InputError, match=r"data\.train_files is empty"):
        resolve_config(overrides=["data.source=files"])


def test_round_trip_and_architecture_diff() -> None:
    a = resolve_config(path=find_config("smoke")).config
    assert config_from_dict(a.to_dict()) == a
    b = resolve_config(path=find_config("smoke"), overrides=["model.d_model=64", "optim.lr=1e-4"]).config
    diff = architecture_diff(a, b)
    assert list(diff.values()) == [
        "model.d_model: 32 -> 64"
    ]  # lr may change on resume; the architecture may not


@pytest.mark.parametrize(
    ("name", "text", "expect"),
    [
        ("a.yaml", "optim: [1, 2\n", "invalid YAML"),
        ("b.toml", "[optim\n", "not valid TOML"),
        ("c.yaml", "- 1\n", "top level must be a mapping"),
        ("d.yaml", "optim: 3\n", "section 'optim' must be a mapping"),
    ],
)
def test_bad_files_say_what_to_do(tmp_path: Path, name: str, text: str, expect: str) -> None:
    """Every config-file error is error + hint (the CLI prints both), never a bare message."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=expect) as exc:
        resolve_config(path=path)
    assert str(path) in exc.value.message and exc.value.hint


@pytest.mark.torch
@pytest.mark.slow
def test_checkpoint_errors_have_hints(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from mw_env.trainer.ckpt.checkpoint import CheckpointError, load_checkpoint

    with pytest.raises(CheckpointError, match="does not exist") as missing:
        load_checkpoint(tmp_path / "step-000000001.pt")
    assert missing.value.hint and "--resume" in missing.value.hint
    import torch

    foreign = tmp_path / "step-000000002.pt"
    torch.save([1, 2], foreign)
    with pytest.raises(CheckpointError, match="not an mw-env checkpoint") as not_ours:
        load_checkpoint(foreign)
    assert not_ours.value.hint
    torch.save({"format_version": 1}, foreign)
    with pytest.raises(CheckpointError, match="incomplete") as incomplete:
        load_checkpoint(foreign)
    assert incomplete.value.hint
    (tmp_path / "step-000000003.pt").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="unreadable") as unreadable:
        load_checkpoint(tmp_path / "step-000000003.pt")
    assert "step-*.pt" in unreadable.value.hint


def test_a_section_typo_suggests_the_section_and_bad_choices_name_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("modle:\n  d_model: 64\n")
    with pytest.raises(InputError, match="unknown config section 'modle'") as exc:
        resolve_config(path=cfg)
    assert exc.value.hint.startswith("did you mean section 'model'?")
    cfg.write_text("optim:\n  schedule: exp\n")
    with pytest.raises(InputError) as exc:
        resolve_config(path=cfg)
    assert exc.value.message == f"{cfg}: optim.schedule = 'exp' is not allowed"
    assert exc.value.hint == "allowed: cosine, linear, noam, constant"
    cfg.write_text("runtime:\n  bogus: 1\n")
    with pytest.raises(InputError) as exc:
        resolve_config(path=cfg)
    assert exc.value.hint.startswith("keys of runtime: out_dir, max_steps")


def test_checkpoint_config_refuses_a_bad_section_and_passes_over_an_unknown_one() -> None:
    a = resolve_config(path=find_config("smoke")).config
    data = a.to_dict()
    assert config_from_dict({**data, "future": {"x": 1}}) == a
    with pytest.raises(InputError, match="section 'optim' must be a mapping"):
        config_from_dict({**data, "optim": [1]})
    with pytest.raises(InputError, match=r"checkpoint config: optim\.lr must be a number"):
        config_from_dict({**data, "optim": {"lr": "fast"}})


def test_every_number_in_the_config_has_a_range() -> None:
    """A new int or float field needs bounds in validate.py: torch takes int64 sizes, the names nine digits."""
    import typing

    from mw_env.trainspec.schema import SECTIONS
    from mw_env.trainspec.validate import FLOAT_RANGES, INT_RANGES

    for section, cls in SECTIONS.items():
        for name, tp in typing.get_type_hints(cls).items():
            key = f"{section}.{name}"
            if tp is int:
                assert key in INT_RANGES, key
            elif tp is float:
                assert key in FLOAT_RANGES, key


@pytest.mark.parametrize(
    ("item", "expect"),
    [
        ("model.max_len=9223372036854775808", "an integer from 8 to 1048576"),
        ("runtime.max_steps=1000000000", "an integer from 1 to 999999999"),
        ("runtime.seed=-1", "an integer from 0 to"),
        ("optim.lr=.inf", r"a number in \(0, 10\]"),
        ("optim.lr=.nan", "a number in"),
        ("runtime.threads=100000", "an integer from 0 to 4096"),
        ("runtime.device=cuda:\u0661", "cuda:N"),
        ("optim.lr=1" + "0" * 400, "must be a number"),
    ],
)
def test_out_of_range_values_are_refused_with_the_range(item: str, expect: str) -> None:
    with pytest.raises(InputError) as info:
        resolve_config(path=find_config("smoke"), overrides=[item])
    assert re.search(expect, f"{info.value.message} {info.value.hint}"), info.value


def test_a_checkpoint_config_with_a_retired_key_still_loads() -> None:
    from mw_env.trainspec.config import config_from_dict, find_config, resolve_config

    stored = resolve_config(path=find_config("smoke")).config.to_dict()
    stored["data"]["shuffle_window"] = 4  # written before windows were counted in rows
    assert config_from_dict(stored).data.shuffle_rows == 65536
    stored["data"]["no_such_key"] = 1
    with pytest.raises(Exception, match="no_such_key"):
        config_from_dict(stored)
