"""scripts/ladder_move.py's mechanics on made-up input: the mapping's prefix rules, the unmapped report, and the
rewrites of imports, dotted names, paths and prose (the script leaves this file alone when it runs)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ladder_move.py"


@pytest.fixture(scope="module")
def lm():
    spec = importlib.util.spec_from_file_location("ladder_move", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ladder_move"] = module
    spec.loader.exec_module(module)
    return module


def test_new_modules_in_moved_folders_move_too_and_a_new_top_level_module_is_reported(lm) -> None:
    plan = lm.make_plan(
        [
            "cli.py",
            "errors.py",
            "hardware.py",
            "detection/__init__.py",
            "detection/amd.py",
            "detection/amdgpu.ids",
            "envlock/brandnew.py",
            "trainer/report_extra.py",
            "trainer/loop.py",
            "checks/newcheck.py",
            "gadget.py",
            "gizmos/x.py",
        ]
    )
    assert plan.moves["envlock/brandnew.py"] == "venv/lock/brandnew.py"
    assert plan.moves["trainer/report_extra.py"] == "trainer/report/extra.py"
    assert plan.moves["detection/amdgpu.ids"] == "hardware/amdgpu.ids"  # data goes with its folder
    assert plan.moves["hardware.py"] == "hardware/facts.py"
    assert "trainer/loop.py" not in plan.moves and "checks/newcheck.py" not in plan.moves
    assert plan.unmapped == ["gadget.py", "gizmos/"]
    assert plan.modules["mw_env.detection"] == "mw_env.hardware"


@pytest.fixture(scope="module")
def plan(lm):
    return lm.make_plan(
        [
            "hardware.py",
            "errors.py",
            "detection/__init__.py",
            "detection/amd.py",
            "host.py",
            "host_oci.py",
            "trainer/report.py",
            "trainer/report_doc.py",
            "runs/runstate.py",
        ]
    )


def test_dotted_names_take_the_longest_moved_prefix_once(lm, plan) -> None:
    text = (
        'patch("mw_env.hardware.Gpu"); python -m mw_env.detection.amd; "mw_env.trainer.report_doc.DocBlock"'
    )
    assert lm.rewrite_dotted(text, plan.modules) == (
        'patch("mw_env.hardware.facts.Gpu"); python -m mw_env.hardware.amd; "mw_env.trainer.report.doc.DocBlock"'
    )


def test_from_imports_split_by_new_parent_and_keep_their_local_names(lm, plan) -> None:
    src = "from mw_env import errors, hardware, cli\n\n\ndef f():\n    from mw_env.runs import runstate, supervise\n"
    out = lm.rewrite_dotted(lm.rewrite_from_imports(src, plan.modules), plan.modules).replace(
        lm.SHIELD, "mw_env"
    )
    assert out == (
        "from mw_env.base import errors\n"
        "from mw_env.hardware import facts as hardware\n"
        "from mw_env import cli\n"
        "\n\ndef f():\n"
        "    from mw_env.rundir import runstate\n"
        "    from mw_env.runs import supervise\n"
    )


def test_paths_and_prose(lm, plan) -> None:
    regex = lm._path_regex(plan.paths)
    text = "see src/mw_env/detection/amd.py, detection/ and host.py; tests/runs/runstate.py is a test"
    assert lm.rewrite_paths(text, plan.paths, regex) == (
        "see src/mw_env/hardware/amd.py, hardware/ and host/commands.py; tests/runs/runstate.py is a test"
    )
    names = lm.short_names(plan.moves)
    code = '# report_doc.DocBlock\nx = report_doc.render()\ny = "report_doc.py"\n'
    assert (
        lm.rewrite_python_prose(code, names)
        == '# report.doc.DocBlock\nx = report_doc.render()\ny = "report_doc.py"\n'
    )


def test_a_module_moved_deeper_keeps_its_file_relative_paths(lm) -> None:
    line = 'shipped = Path(__file__).resolve().parents[1] / "trainspec"'
    assert lm.deepen_file_parents(line, 1) == 'shipped = Path(__file__).resolve().parents[2] / "trainspec"'
