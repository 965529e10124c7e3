# The two set-up commands of the README. Each installs what it needs (a virtualenv in .venv and
# the control-plane binaries, built from Go modules and cached in ~/.cache/specdec; for a real node, as
# root, Debian's runc, iptables, podman and mmdebstrap, and the images built from this repository).
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
## (REAL_NODE=1: also a real node, a kubelet with containerd running the project's images; needs root)
up: install
	$(BIN)/specdec dev up $(if $(REAL_NODE),--real-node)

## down: stop the local cluster and the operator
down: install
	$(BIN)/specdec dev down

## test: every test, unit and cluster (starts its own local cluster unless SPECDEC_TEST_KUBECONFIG is set)
test: install
	$(BIN)/specdec dev tools --prometheus >/dev/null
	@# Prometheus' web UI and Chromium (Debian's, as root) for the UI screenshot test, which says why where they are missing.
	$(BIN)/specdec dev tools --screenshot >/dev/null || echo "make: no Prometheus web UI or Chromium here; the screenshot test says why"
	@# A real node's tools and images (Debian packages too, as root); where none can run, its tests say why.
	$(BIN)/specdec dev tools --real-node >/dev/null || echo "make: no real node's tools here; tests/realnode says why"
	$(BIN)/python -m pytest

## unit: the fast tests only (no cluster)
unit: install
	$(BIN)/python -m pytest tests/unit
