# The two commands in the README: `make demo` and `make test`. Each sets up its own virtualenv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck unit bench bench-quick conformance clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "taskloom needs Python 3.11 or newer; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo/demo.py

lint: $(STAMP)
	$(PY) -m ruff check src tests bench examples scripts
	$(PY) -m ruff format --check src tests bench examples scripts

typecheck: $(STAMP)
	$(PY) -m mypy

# The suite's processes (ADR 0048): most slow tests wait on other processes, so more than the
# cores; each test module runs whole on one of them. TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= 4

unit: $(STAMP)
	scripts/ensure-postgres.sh
	scripts/ensure-chromium.sh
	scripts/ensure-tmux.sh
	scripts/ensure-ts-host.sh
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test: lint typecheck unit bench-quick

bench: $(STAMP)
	$(PY) bench/run.py

bench-quick: $(STAMP)
	$(PY) bench/run.py --quick

# The official MCP conformance suite's tasks-* scenarios (2026-07-28 tasks extension).
# Installs the suite and Node 22 from the npm registry into $(CONFORMANCE_TOOLS), from
# tests/conformance/package-lock.json; not part of `make test` (it needs the registry).
CONFORMANCE_TOOLS ?= .conformance

conformance: $(STAMP)
	mkdir -p $(CONFORMANCE_TOOLS)
	cp tests/conformance/package.json tests/conformance/package-lock.json $(CONFORMANCE_TOOLS)/
	cd $(CONFORMANCE_TOOLS) && npm ci --no-audit --no-fund --loglevel=error
	$(PY) -m tests.conformance.run $(CONFORMANCE_TOOLS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache $(CONFORMANCE_TOOLS) .ts-host
