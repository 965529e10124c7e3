"""`specdec-runtime --print-config` for every scenario (the three examples plus the PyTorch and
no-speculation routes), compared with reviewed golden files in tests/runtime/golden/. Regenerate after an
intended change and review the diff:

    SPECDEC_UPDATE_GOLDEN=1 python -m pytest tests/runtime/test_golden.py
"""

from __future__ import annotations

import os

import pytest

from specdec.runtime import cli
from tests.runtime.helpers import config_json, scenario_configs

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
UPDATE = os.environ.get("SPECDEC_UPDATE_GOLDEN") == "1"
CONFIGS = scenario_configs()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_print_config_matches_golden(name, tmp_path, capsys, monkeypatch):
    config_dir = tmp_path / "etc"
    config_dir.mkdir()
    (config_dir / "runtime.json").write_text(config_json(CONFIGS[name]))
    monkeypatch.chdir(config_dir)
    assert cli.main(["--config", "runtime.json", "--print-config"]) == 0
    out = capsys.readouterr().out
    golden = os.path.join(GOLDEN, f"{name}.txt")
    if UPDATE:
        with open(golden, "w") as f:
            f.write(out)
    assert os.path.isfile(golden), f"{golden} is missing: run with SPECDEC_UPDATE_GOLDEN=1 and review it"
    with open(golden) as f:
        assert out == f.read(), f"--print-config of {name} differs from {golden}"


def test_print_config_shows_what_each_route_launches():
    def shown(name):
        return open(os.path.join(GOLDEN, f"{name}.txt")).read()

    llama2 = shown("llama-2-13b-draft-7b-logits")
    assert "mpirun --allow-run-as-root -n 1 /opt/tritonserver/bin/tritonserver" in llama2
    assert "TRTLLM_ORCHESTRATOR=1" in llama2
    assert "num_draft_tokens=4 use_draft_logits=true" in llama2
    assert "num_draft_tokens follows draft_len when it holds 1..10" in llama2
    assert llama2.count("config.pbtxt") == 5
    redrafter = shown("vicuna-7b-redrafter")
    assert "trtllm-serve /cache/engines/vicuna-7b-v1-3-c630994002 --backend tensorrt" in redrafter
    pytorch = shown("pytorch-llama-3.1-8b-draft-1b")
    assert "trtllm-serve /cache/models/meta-llama--Llama-3.1-8B-Instruct/main --backend pytorch" in pytorch
    assert (
        "decoding_type: Draft_Target" in pytorch
        and "speculative_model: /cache/models/meta-llama--Llama-3.2-1B-Instruct/main" in pytorch
    )
