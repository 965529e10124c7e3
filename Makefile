# The two set-up commands of the README. Each installs what it needs (a virtualenv in .venv and
# the control-plane binaries, built from Go modules and cached in ~/.cache/specdec).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up down test unit install

$(BIN)/specdec: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/specdec

## up: local cluster (simulated GPU nodes) + CRDs + operator + sample deployment
up: install
	$(BIN)/specdec dev up

## down: stop the local cluster and the operator
down: install
	$(BIN)/specdec dev down

## test: every test, unit and cluster (starts its own local cluster unless SPECDEC_TEST_KUBECONFIG is set)
test: install
	$(BIN)/specdec dev tools >/dev/null
	$(BIN)/python -m pytest

## unit: the fast tests only (no cluster)
unit: install
	$(BIN)/python -m pytest tests/unit
