from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MACHINES = FIXTURES / "machines"
REPO = Path(__file__).resolve().parent.parent

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_TORCH:
        return
    skip = pytest.mark.skip(reason="no torch in this venv (no wheelhouse held one)")
    for item in items:
        if "torch" in item.keywords:
            item.add_marker(skip)
