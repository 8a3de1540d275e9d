from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MACHINES = FIXTURES / "machines"
REPO = Path(__file__).resolve().parent.parent

HAVE_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without the caller's MW_ENV_* settings (profile, root, torch source, debug...).

    A developer's shell or a CI job may export them; a test that needs one sets it itself.
    """
    for var in [v for v in os.environ if v.startswith("MW_ENV_")]:
        monkeypatch.delenv(var)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_TORCH:
        return
    skip = pytest.mark.skip(reason="no torch in this venv (no wheelhouse held one)")
    for item in items:
        if "torch" in item.keywords:
            item.add_marker(skip)


def fake_machine(name: str, *, env: dict[str, str] | None = None):
    """A Machine over tests/fixtures/machines/<name>/, with that root's .mw-env-bin/ first on PATH.

    Fake commands (nvidia-smi, rocminfo, ...) live in <root>/.mw-env-bin/ and print captured output.
    """
    from mw_env.machine import Machine

    root = MACHINES / name
    assert root.is_dir(), f"no fake machine {name!r} under {MACHINES}"
    base = {"PATH": f"{root / '.mw-env-bin'}:/usr/bin:/bin", "HOME": "/home/agent", "USER": "agent"}
    base.update(env or {})
    base.setdefault("LANG", os.environ.get("LANG", "C.UTF-8"))
    return Machine(root=root, env=base)
