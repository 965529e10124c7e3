# The two set-up commands of the README. Each installs what it needs (a virtualenv in .venv and
# the control-plane binaries, built from Go modules and cached in ~/.cache/specdec; for a real node, as
# root, Debian's runc, iptables, podman and mmdebstrap, and the images built from this repository).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up down test unit install lint tools runtime-312

# The operator with its test extra, and the development tools (dev/, the specdec-dev distribution).
$(BIN)/specdec: pyproject.toml dev/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./dev
	touch $@

# The runtime images run Python 3.12 (NVIDIA's bases): the runtime's tests run on it too, where there is one.
PYTHON312 ?= $(shell for p in $(HOME)/.pyenv/versions/3.12*/bin/python3.12 $$(command -v python3.12); do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && echo "$$p" && break; done)
VENV312 ?= .venv312

$(VENV312)/bin/specdec: pyproject.toml dev/pyproject.toml
	$(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/pip install --quiet --upgrade pip
	$(VENV312)/bin/pip install --quiet -e '.[test-runtime]' -e ./dev
	touch $@

install: $(BIN)/specdec

## up: local cluster (simulated GPU nodes) + CRDs + operator + sample deployment
## (REAL_NODE=1: also a real node, a kubelet with containerd running the project's images; needs root)
up: install
	$(BIN)/specdec dev up $(if $(REAL_NODE),--real-node)

## down: stop the local cluster and the operator
down: install
	$(BIN)/specdec dev down

## test: the checkers and every test, unit and cluster (starts its own local cluster unless
## SPECDEC_TEST_KUBECONFIG is set); each phase's elapsed time is printed
test:
	@$(call timed,install,$(MAKE) --no-print-directory install)
	@$(call timed,tool builds,$(MAKE) --no-print-directory tools)
	@$(call timed,checkers,$(MAKE) --no-print-directory lint)
	@$(call timed,pytest,$(BIN)/python -m pytest)
	@$(call timed,runtime-312,$(MAKE) --no-print-directory runtime-312)

# $(call timed,PHASE,COMMAND): COMMAND, then how long it took; its exit status is kept.
timed = start=$$(date +%s); $(2); status=$$?; echo "make test: $(1) took $$(( $$(date +%s) - start )) s"; exit $$status

## lint: ruff (lint and format) over the tree, mypy over operator/specdec and dev/specdec_dev, the import
## contracts (pyproject.toml)
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

## tools: what the cluster tests need built (Prometheus, its web UI and Chromium, a real node's tools and images)
tools: install
	$(BIN)/specdec dev tools --prometheus >/dev/null
	@# Prometheus' web UI and Chromium (Debian's, as root) for the UI screenshot test, which says why where they are missing.
	$(BIN)/specdec dev tools --screenshot >/dev/null || echo "make: no Prometheus web UI or Chromium here; the screenshot test says why"
	@# A real node's tools and images (Debian packages too, as root); where none can run, its tests say why.
	$(BIN)/specdec dev tools --real-node >/dev/null || echo "make: no real node's tools here; tests/realnode says why"

## runtime-312: the runtime's tests on Python 3.12, the runtime images' Python
runtime-312:
ifeq ($(PYTHON312),)
	@echo "make: no Python 3.12 here (python3.12 on PATH, or pyenv's): the runtime's tests ran on $(PYTHON) only"
else
	$(MAKE) $(VENV312)/bin/specdec
	$(VENV312)/bin/python -m pytest tests/runtime
endif

## unit: the fast tests only (no cluster)
unit: install
	$(BIN)/python -m pytest tests/unit
