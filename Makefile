# Thin wrappers: every target is one call of uv, mw-env or pytest.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
TEST_VENV := .cache/test-venv

# uv is a program we invoke, never reimplement: use the one on PATH, else install it from PyPI.
UV := $(shell command -v uv 2>/dev/null)
ifeq ($(UV),)
UV := .tools/bin/uv
endif

.PHONY: help install bootstrap doctor train test test-fast test-env lint bench clean

help:
	@echo "make bootstrap  provision ~/training-venv for this machine's hardware (the main job)"
	@echo "make test       run the whole test suite, as CI does (builds its own venvs first)"
	@echo "make test-fast  the suite without the tests marked slow: the inner loop (75 s on 2 idle cores, 107 s with one busy)"
	@echo "make doctor     check the provisioned environment"
	@echo "make train      train the smoke config in the provisioned venv"
	@echo "make lint       ruff and mypy"
	@echo "make bench      measure the figures in docs/benchmarks.md"

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet uv

# --compile-bytecode: uv (unlike pip) leaves the .py files to be compiled on first import, which never
# sticks under PYTHONDONTWRITEBYTECODE - click, PyYAML and packaging compiled on every run doubled `mw-env`'s start-up.
$(VENV)/.stamp: pyproject.toml $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(VENV)/bin/python -e '.[dev]'
	touch $@

# The project's own modules too (an editable install is never compiled; 60 modules from source cost 70 ms
# on every command): refreshed on each `make install`, and a stale .pyc is only ignored, never wrong.
install: $(VENV)/.stamp
	@$(VENV)/bin/python -m compileall -q src

# The main job: detect the hardware, pick the profile, build ~/training-venv (BOOTSTRAP_ARGS adds options,
# e.g. BOOTSTRAP_ARGS='--venv /data/venv --find-links /srv/wheels'). Uses the wheelhouse that pip's
# configuration names (PIP_FIND_LINKS / pip.conf find-links) before any remote torch index.
bootstrap: install
	UV=$(abspath $(UV)) $(VENV)/bin/mw-env bootstrap --yes $(BOOTSTRAP_ARGS)

doctor: install
	$(VENV)/bin/mw-env doctor

train: install
	$(VENV)/bin/mw-env train --config smoke

# The product provisions its own test venv (CPU profile, torch from the wheelhouse, torch pinned); a re-run
# over a finished venv is a no-op. Only when no wheelhouse holds a CPU torch: a torch-less venv (torch tests skip).
# MW_ENV_STATE_DIR: the test venv is not recorded as the venv bootstrap built last (that stays the user's).
TEST_BOOTSTRAP := bootstrap --profile cpu --venv $(TEST_VENV) --extras train,dev,export,tracking,mlflow,spm --yes
TEST_STATE := MW_ENV_STATE_DIR=$(abspath .cache/mw-env-state)
test-env: install
	@if $(TEST_STATE) UV=$(abspath $(UV)) $(VENV)/bin/mw-env $(TEST_BOOTSTRAP) --dry-run --json \
	    | $(VENV)/bin/python -c 'import json,sys; t=json.load(sys.stdin)["torch"] or {}; sys.exit(t.get("origin") not in ("wheelhouse", "installed"))'; then \
	  $(TEST_STATE) UV=$(abspath $(UV)) $(VENV)/bin/mw-env $(TEST_BOOTSTRAP); \
	else \
	  echo "test-env: no wheelhouse holds a CPU torch; building a torch-less test venv (torch tests will skip)"; \
	  $(UV) venv --quiet --allow-existing --python $(PYTHON) $(TEST_VENV) && \
	  $(UV) pip install --quiet --python $(TEST_VENV)/bin/python -e '.[dev]' 'numpy>=1.24' 'pyarrow>=14'; \
	fi
	@test -e $(TEST_VENV)/.compiled || { $(TEST_VENV)/bin/python -c "$$COMPILE_SITE" && touch $(TEST_VENV)/.compiled; }

# The test venv's packages compiled to bytecode once (a stamp: again only after `rm $(TEST_VENV)/.compiled`).
# uv installs without bytecode and a host that sets PYTHONDONTWRITEBYTECODE (this CI's does) never keeps
# what an import compiles, so each of the suite's few hundred trainer, torchrun and worker processes compiled
# torch from source again: 4.3 CPU seconds an `import torch` instead of 1-2, test_ddp.py 44 CPU-s instead of
# 18. A few files are for newer Pythons only (torch's py312_intrinsics.py) and never compile here, as uv's
# --compile-bytecode leaves them too: the result is not an error.
export COMPILE_SITE := import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)

# Two pytest-xdist workers (the CI machine has 2 cores); a test file stays on one worker, so its module
# fixtures (trained checkpoints, built indexes) are built once. Files are handed out in collection order,
# longest first (tests/conftest.py, tests/durations.json), not by test count (xdist's default reorder, which
# put a file of 2,900 sub-second cases first and the minute-long ones last). The files that start several
# torch processes at once are one unit, run on one worker one after another (tests/conftest.py MULTIPROCESS:
# two at once on 2 cores took 2-3x as long each). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: test-env
	$(TEST_VENV)/bin/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The inner loop: everything but the tests marked slow (real bootstraps, training runs, DDP, uv from PyPI).
test-fast: test-env
	$(TEST_VENV)/bin/python -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS)

# ruff, then mypy over src/ ([tool.mypy] in pyproject.toml: 0 errors is the bar CI holds).
lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy

bench: install
	$(VENV)/bin/python bench/run.py

clean:
	rm -rf $(VENV) .cache .tools .pytest_cache .ruff_cache
