"""Fuzzed SpeculativeDeployments (tests/faults/fuzz.py) against the real API server and operator.

Every mutant the API server accepts must end with an explained status: the operator may refuse a
spec, but it must say why (Ready=False with a cause and a message), never leave it "in progress"
forever. Long form: bench/fuzz.py.
"""

from __future__ import annotations

import os

import pytest

from tests.faults import fuzz

pytestmark = pytest.mark.cluster

SEED = int(os.environ.get("SPECDEC_FUZZ_SEED", "20240601"))
MUTANTS = 300
CREATE = 24
SETTLE_SECONDS = 120


def test_mutants_are_refused_by_the_api_server_or_settle_with_an_explained_status(kube, namespace, operator):
    result = fuzz.run(kube, namespace, MUTANTS, CREATE, SEED, SETTLE_SECONDS)
    report = result.report(refused_examples=5)
    print(report)
    # The fuzzer must exercise both sides, or it tests nothing.
    assert result.accepted and len(result.accepted) < len(result.verdicts), report
    assert len(result.outcomes) >= CREATE, report
    assert not result.violations, f"seed {SEED}\n{report}"
