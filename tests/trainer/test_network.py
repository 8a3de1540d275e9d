"""The network's one file (trainer/network.py) is the modeling file of every portable weights folder: it must
import nothing but torch and the standard library, and build from a config.json exactly the network training
builds from its config."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import mw_env.trainer

from .helpers import tiny_config

NETWORK = Path(mw_env.trainer.__file__).with_name("network.py")


def test_the_network_file_imports_only_torch_and_the_standard_library() -> None:
    tree = ast.parse(NETWORK.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):  # lazy imports inside functions count as well
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"a relative import in network.py: {ast.unparse(node)}"
            found.add((node.module or "").split(".")[0])
    foreign = {m for m in found if m != "torch" and m not in sys.stdlib_module_names}
    assert "torch" in found and not foreign, f"network.py imports {sorted(foreign)}"


@pytest.mark.torch
def test_the_special_ids_agree_with_the_tokenizer() -> None:
    from mw_env.trainer.data import tokenize
    from mw_env.trainer.network import N_SPECIAL, SPACE

    assert N_SPECIAL == tokenize.N_SPECIAL
    assert tokenize.ByteTokenizer().separator() == [SPACE]


@pytest.mark.torch
def test_from_config_builds_the_network_training_builds(tmp_path: Path) -> None:
    import dataclasses

    import torch

    from mw_env.trainer.model import build_model, net_init
    from mw_env.trainer.network import from_config

    config = tiny_config(tmp_path).config
    trained = build_model(config, vocab_size=260, n_labels=7)
    described = {
        "model": dataclasses.asdict(config.model),
        "init": net_init(config, vocab_size=260, n_labels=7),
    }
    rebuilt = from_config(described)
    rebuilt.load_state_dict(trained.state_dict())
    ids = torch.randint(4, 260, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    with torch.no_grad():
        assert torch.equal(trained.eval()(ids, mask), rebuilt.eval()(ids, mask))
    with pytest.raises(ValueError, match="needs a `model` and an `init`"):
        from_config({"model": {}})


def test_the_byte_tables_follow_the_device_a_network_is_built_under() -> None:
    """The tables are filled on the CPU (under the meta device their fills import sympy) and then moved: a
    network built inside `with torch.device(...)` has every buffer there, as a loader that builds on the GPU
    (or on meta, then `to_empty`) expects; built plainly, they are on the CPU with the weights."""
    import torch

    from mw_env.trainer.network import TaggerNet

    cfg = SimpleNamespace(
        d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=32, word_buckets=64, attend="words"
    )
    with torch.device("meta"):
        meta = TaggerNet(cfg, vocab_size=260, n_labels=3, words=True)
    assert {b.device.type for b in meta.buffers()} == {"meta"}
    plain = TaggerNet(cfg, vocab_size=260, n_labels=3, words=True)
    assert {b.device.type for b in plain.buffers()} == {"cpu"}
    assert plain.words is not None and int(plain.words.lower[ord("A") + 4]) == ord("a") + 4
