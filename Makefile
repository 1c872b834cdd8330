# bayou: two commands set up a fresh machine.
#   make run   - create .venv, install bayou, start one broker (data in ./data)
#   make test  - install the dev dependencies and run the whole suite
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
STAMP   = $(VENV)/.installed
DEVSTAMP = $(VENV)/.installed-dev

.PHONY: run test install dev lint typecheck bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(DEVSTAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[dev]'
	touch $@ $(STAMP)

install: $(STAMP)

dev: $(DEVSTAMP)

run: $(STAMP)
	$(VENV)/bin/bayou serve --data-dir ./data

test: $(DEVSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q

lint: $(DEVSTAMP)
	$(VENV)/bin/ruff check src tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/storage_bench.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
