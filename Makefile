# aibom-rollup: the two README commands are `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv demo demo-down test lint unit integration bench clean jsf-interop
.DEFAULT_GOAL := help

help:
	@echo "make demo   # set up and run the main job on a local default"
	@echo "make demo-down  # stop what make demo left running"
	@echo "make test   # set up and pass the tests (ruff, mypy --strict, import contracts, pytest)"

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python demo/run.py

demo-down: $(STAMP)
	$(BIN)/python demo/run.py down

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration" tests

integration: $(STAMP)
	$(BIN)/pytest -q -m integration -n 4 --dist loadfile tests

# The independent JSF verifier (docs/signing.md): one npm package. Without
# node/npm (or the registry), tests/unit/test_jsf_interop.py skips and says so.
jsf-interop:
	@if command -v npm >/dev/null 2>&1; then scripts/jsf-interop/install.sh || echo "jsf-interop: npm ci failed; its test will skip"; else echo "jsf-interop: no npm; its test will skip"; fi

# Builds, lint, unit and integration tests, timed per phase (tests/run.py).
# pytest exits 5 when it collects no tests; the runner and make fail on any
# non-zero exit.
test: $(STAMP) jsf-interop
	$(BIN)/python -m tests.run

bench: $(STAMP)
	$(BIN)/python bench/scan_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
