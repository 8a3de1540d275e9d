"""The lock step with real uv over the local indexes: a ROCm torch from its own index is locked from that
index (never the default index's CUDA trap of the same version line), and `--lock` rebuilds it offline."""

from __future__ import annotations

import dataclasses

import pytest

from mw_env.provision.execute import execute
from mw_env.provision.plan import installed_version, plan
from mw_env.sources.wheelhouse import discover
from mw_env.venv.lock import LOCK_FILE
from mw_env.venv.lock.lockfile import read_lock
from mw_env.venv.lock.rebuild import local_roots, torch_source_for

from .provision_support import ROCM, offline_options


@pytest.mark.slow
def test_a_rocm_venv_is_locked_from_its_index_and_rebuilt_from_the_lock(tmp_path, hermetic_env, indexes):
    source = dataclasses.replace(ROCM, index_url=indexes.rocm.as_uri())
    first = tmp_path / "first"
    result = execute(
        plan(
            profile="gfx1103",
            torch=source,
            runtime_env={},
            options=offline_options(first, indexes.project),
            env=hermetic_env,
        )
    )
    assert result.ok, result.to_dict()
    step = next(o for o in result.outcomes if o.id == "lock")
    assert step.status == "done", step
    roots = local_roots(discover(env=hermetic_env), (source.index_url,), hermetic_env)
    lock = read_lock(first / LOCK_FILE, wheelhouses=roots)
    torch = lock.package("torch")
    assert torch.version == "2.9.1+rocm6.4" and torch.wheels[0].local.is_relative_to(indexes.rocm)
    assert lock.package("demo-helper").wheels[0].local.is_relative_to(indexes.default)

    again = tmp_path / "again"
    options = dataclasses.replace(offline_options(again, indexes.project), lock=lock, offline=True)
    rebuilt = plan(
        profile="gfx1103",
        torch=torch_source_for(lock, source),
        runtime_env={},
        options=options,
        env=hermetic_env,
    )
    assert rebuilt.torch is None  # the profile's torch source is not consulted
    result = execute(rebuilt)
    assert result.ok, result.to_dict()
    assert installed_version(again, "torch") == "2.9.1+rocm6.4"
    assert installed_version(again, "demo_helper") == "1.0"
    assert read_lock(again / LOCK_FILE).sha256 == lock.sha256
