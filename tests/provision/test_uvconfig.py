"""The user's uv configuration carried into the torch step's own file (sources/uvconfig.py, provision/torchindex.py):
found and merged as uv 0.13.9 finds and merges it, their indexes after the torch index, their other settings kept."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from mw_env.base.errors import InputError
from mw_env.provision.torchindex import config_text, step_indexes
from mw_env.sources import uvconfig

AMD = "https://repo.amd.com/rocm/whl-multi-arch/"


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "XDG_CONFIG_DIRS": f"{tmp_path / 'sys1'}:{tmp_path / 'sys2'}", **more}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_uv_toml_is_read_on_python_3_10_with_tomli(tmp_path, monkeypatch):
    """On 3.10 (no tomllib) the reader takes tomli, the same parser and a declared dependency there."""
    _write(tmp_path / "uv.toml", "native-tls = true\n")
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    monkeypatch.setitem(sys.modules, "tomli", tomllib)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` fails, as on 3.10
    assert uvconfig.load(_env(tmp_path), cwd=tmp_path).get("native-tls") is True


def test_project_user_and_first_system_file_are_read_most_specific_first(tmp_path):
    project = _write(tmp_path / "proj" / "uv.toml", 'keyring-provider = "subprocess"\n')
    work = tmp_path / "proj" / "sub" / "dir"  # uv looks in the nearest parent that has one
    work.mkdir(parents=True)
    user = _write(tmp_path / "home" / ".config" / "uv" / "uv.toml", 'keyring-provider = "disabled"\n')
    _write(tmp_path / "sys1" / "uv" / "uv.toml", "native-tls = true\n")
    _write(tmp_path / "sys2" / "uv" / "uv.toml", "offline = true\n")  # only the first system file counts
    found = uvconfig.load(_env(tmp_path), cwd=work)
    assert found.files == (str(project), str(user), str(tmp_path / "sys1" / "uv" / "uv.toml"))
    assert found.settings == {"keyring-provider": "subprocess", "native-tls": True}


def test_a_pyproject_counts_only_with_a_tool_uv_table_and_loses_to_a_uv_toml_beside_it(tmp_path):
    outer = tmp_path / "outer"
    _write(outer / "pyproject.toml", '[project]\nname = "x"\n[tool.uv]\nnative-tls = true\nmanaged = false\n')
    inner = outer / "inner"
    _write(inner / "pyproject.toml", '[project]\nname = "y"\n')  # no [tool.uv]: passed over
    found = uvconfig.load(_env(tmp_path), cwd=inner)
    # the project-only key is left out: uv refuses it in a uv.toml, which the generated file is
    assert found.files == (str(outer / "pyproject.toml"),) and found.settings == {"native-tls": True}
    _write(outer / "uv.toml", "offline = true\n")
    assert uvconfig.load(_env(tmp_path), cwd=outer).settings == {"offline": True}


def test_uv_no_config_reads_nothing_and_uv_config_file_only_that_file(tmp_path):
    _write(tmp_path / "home" / ".config" / "uv" / "uv.toml", "native-tls = true\n")
    only = _write(tmp_path / "mine.toml", "offline = true\n")
    assert uvconfig.load(_env(tmp_path, UV_NO_CONFIG="1"), cwd=tmp_path).files == ()
    assert uvconfig.load(_env(tmp_path, UV_NO_CONFIG="0"), cwd=tmp_path).settings == {"native-tls": True}
    found = uvconfig.load(_env(tmp_path, UV_CONFIG_FILE=str(only)), cwd=tmp_path)
    assert found.files == (str(only),) and found.settings == {"offline": True}


def test_arrays_join_with_the_projects_first_and_tables_merge_key_by_key(tmp_path):
    _write(
        tmp_path / "p" / "uv.toml",
        '[[index]]\nname = "proj"\nurl = "https://p/simple"\n[pip]\ncompile-bytecode = true\n',
    )
    _write(
        tmp_path / "home" / ".config" / "uv" / "uv.toml",
        '[[index]]\nname = "corp"\nurl = "https://c/simple"\n[pip]\ncompile-bytecode = false\nstrict = true\n',
    )
    found = uvconfig.load(_env(tmp_path), cwd=tmp_path / "p")
    assert [e["name"] for e in found.settings["index"]] == ["proj", "corp"]
    assert found.settings["pip"] == {"compile-bytecode": True, "strict": True}


def test_a_file_that_is_not_toml_is_named_with_the_cure(tmp_path):
    bad = _write(tmp_path / "home" / ".config" / "uv" / "uv.toml", "[[index]\nurl = \n")
    with pytest.raises(InputError) as info:
        uvconfig.load(_env(tmp_path), cwd=tmp_path)
    assert str(bad) in info.value.message and "not valid TOML" in info.value.message
    assert "UV_NO_CONFIG=1" in info.value.hint
    _write(tmp_path / "p" / "pyproject.toml", '[tool]\nuv = "text"\n')
    with pytest.raises(InputError, match=r"\[tool.uv\] is not a table"):
        uvconfig.load(_env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "none")), cwd=tmp_path / "p")


USER = """
keyring-provider = "subprocess"
allow-insecure-host = ["mirror.corp"]
index-strategy = "unsafe-best-match"
[pip]
index-url = "https://legacy.corp/simple"
link-mode = "copy"
[[index]]
name = "corp"
url = "https://mirror.corp/simple"
default = true
authenticate = "always"
cache-control = { api = "max-age=600" }
[[index]]
name = "extra"
url = "https://extra.corp/simple"
ignore-error-codes = [401]
[[index]]
name = "amd-copy"
url = "https://repo.amd.com/rocm/whl-multi-arch/"
"""


def _user(tmp_path: Path, text: str = USER) -> uvconfig.UvConfig:
    _write(tmp_path / "home" / ".config" / "uv" / "uv.toml", text)
    return uvconfig.load(_env(tmp_path), cwd=tmp_path)


def test_the_users_indexes_come_after_the_torch_index_and_their_default_is_the_default(tmp_path):
    user = _user(tmp_path)
    ixs = step_indexes(torch_index=AMD, torch_name="amd-multiarch", unserved=403, env={}, user=user)
    assert [(i.name, i.url, i.role) for i in ixs] == [
        ("amd-multiarch", AMD, "torch"),
        ("extra", "https://extra.corp/simple", "extra"),
        ("corp", "https://mirror.corp/simple", "default"),
    ]  # the user's copy of the torch index is dropped: the first entry of a URL is the one uv reads
    assert "their uv configuration" in ixs[-1].behaviour and ixs[-1].origin.endswith("uv.toml")
    data = tomllib.loads(config_text(ixs, user))
    assert data["index-strategy"] == "first-index"  # the step's own, whatever the user's says
    assert data["keyring-provider"] == "subprocess" and data["allow-insecure-host"] == ["mirror.corp"]
    assert data["pip"] == {"link-mode": "copy"}  # the [pip] index keys are the step's to set
    assert data["index"] == [
        {"name": "amd-multiarch", "url": AMD, "ignore-error-codes": [403]},
        {"name": "extra", "url": "https://extra.corp/simple", "ignore-error-codes": [401]},
        {
            "name": "corp",
            "url": "https://mirror.corp/simple",
            "default": True,
            "authenticate": "always",
            "cache-control": {"api": "max-age=600"},
        },
    ]


def test_a_default_given_on_the_command_line_side_beats_the_configurations(tmp_path):
    user = _user(tmp_path)
    env = {"UV_DEFAULT_INDEX": "https://env/simple"}
    ixs = step_indexes(torch_index=AMD, torch_name="amd", unserved=403, env=env, user=user)
    assert [(i.url, i.role) for i in ixs][-1] == ("https://env/simple", "default")
    assert all(i.url != "https://mirror.corp/simple" for i in ixs)
    # pip's index-url (the extras step's --default-index) beats it too
    ixs = step_indexes(
        torch_index=AMD, torch_name="amd", unserved=403, env={}, default_index="https://pip/", user=user
    )
    assert ixs[-1].url == "https://pip/" and ixs[-1].origin == "PIP_INDEX_URL / pip.conf"


def test_legacy_index_keys_and_a_name_the_user_already_took(tmp_path):
    user = _user(
        tmp_path,
        'extra-index-url = ["https://old/simple"]\nindex-url = "https://olddefault/simple"\n'
        '[[index]]\nname = "default"\nurl = "https://theirs/simple"\n',
    )
    ixs = step_indexes(torch_index=AMD, torch_name="default", unserved=403, env={}, user=user)
    assert [(i.name, i.url, i.role) for i in ixs] == [
        ("default-mw-env", AMD, "torch"),  # a generated name never takes one of the user's
        ("default", "https://theirs/simple", "extra"),
        ("extra-index-url-1", "https://old/simple", "extra"),
        ("index-url", "https://olddefault/simple", "default"),
    ]
    data = tomllib.loads(config_text(ixs, user))
    assert "index-url" not in data and "extra-index-url" not in data


def test_no_user_configuration_leaves_the_file_as_before(tmp_path):
    ixs = step_indexes(torch_index=AMD, torch_name="amd", unserved=403, env={})
    text = config_text(ixs, uvconfig.load({"UV_NO_CONFIG": "1"}))
    assert "merged as uv merges it" not in text
    assert tomllib.loads(text) == {
        "index-strategy": "first-index",
        "index": [
            {"name": "amd", "url": AMD, "ignore-error-codes": [403]},
            {"name": "default", "url": "https://pypi.org/simple", "default": True},
        ],
    }


def test_uv_itself_reads_the_generated_file(tmp_path):
    """The real uv parses what is written (a project-only key slipping through would stop the torch step)."""
    from .provision_support import find_uv_binary

    uv = find_uv_binary() or shutil.which("uv")
    if not uv:
        pytest.skip("no uv binary here")
    _write(
        tmp_path / "p" / "pyproject.toml",
        "[project]\nname = 'p'\nversion = '0'\n[tool.uv]\nmanaged = true\npackage = false\n"
        "dev-dependencies = []\nconflicts = []\ndefault-groups = []\nenvironments = []\n"
        "required-environments = []\n[tool.uv.sources]\nx = { path = '.' }\n[tool.uv.workspace]\nmembers = []\n",
    )
    _user(tmp_path)  # the user's file too: both merged, as uv reads them
    user = uvconfig.load(_env(tmp_path), cwd=tmp_path / "p")
    assert len(user.files) == 2
    ixs = step_indexes(torch_index=AMD, torch_name="amd", unserved=403, env={}, user=user)
    cfg = _write(tmp_path / "step.toml", config_text(ixs, user))
    res = subprocess.run(
        [uv, "pip", "compile", "--config-file", str(cfg), "--offline", "--no-header", "-"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Failed to parse" not in res.stderr, res.stderr
    assert res.returncode == 0, res.stderr
