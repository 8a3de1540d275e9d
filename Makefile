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

.PHONY: help install bootstrap doctor train test test-env lint bench clean

help:
	@echo "make bootstrap  provision ~/training-venv for this machine's hardware (the main job)"
	@echo "make test       run the test suite (builds its own venvs first)"
	@echo "make doctor     check the provisioned environment"
	@echo "make train      train the smoke config in the provisioned venv"
	@echo "make lint       ruff"
	@echo "make bench      measure the figures in docs/benchmarks.md"

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet uv

$(VENV)/.stamp: pyproject.toml $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --python $(VENV)/bin/python -e '.[dev]'
	touch $@

install: $(VENV)/.stamp

bootstrap: install
	$(VENV)/bin/mw-env bootstrap --yes

doctor: install
	$(VENV)/bin/mw-env doctor

train: install
	$(VENV)/bin/mw-env train --config smoke

# The test venv holds a real torch when a wheelhouse has one.
test-env: install
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(TEST_VENV)
	-$(UV) pip install --quiet --python $(TEST_VENV)/bin/python --find-links "$${PIP_FIND_LINKS:-/opt/wheels}" 'torch==2.13.0'
	$(UV) pip install --quiet --python $(TEST_VENV)/bin/python -e '.[train,dev]'

test: test-env
	$(TEST_VENV)/bin/python -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

bench: install
	$(VENV)/bin/python bench/run.py

clean:
	rm -rf $(VENV) .cache .tools .pytest_cache .ruff_cache
