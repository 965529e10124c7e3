"""Loading runtime.json: the operator's files are accepted; bad ones are refused with a clear message
and exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec.runtime import cli
from specdec.runtime import config as cfg
from tests.runtime.helpers import config_json, scenario_configs

CONFIGS = scenario_configs()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_what_the_operator_writes_is_accepted(name, tmp_path):
    path = tmp_path / "runtime.json"
    path.write_text(config_json(CONFIGS[name]))
    assert cfg.load(path) == CONFIGS[name]


def write(tmp_path, data) -> str:
    path = tmp_path / "runtime.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def base() -> dict:
    return json.loads(config_json(CONFIGS["llama-2-13b-draft-7b-logits"]))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("target"), "target: Field required"),
        (lambda d: d.update(speculation={"mode": "medusa", "speculativeConfig": {}}), "mode 'medusa' is not one of"),
        (lambda d: d["kvCache"].update(freeGpuMemoryFraction=1.5), "kvCache.freeGpuMemoryFraction"),
        (lambda d: d.update(unknown=1), "unknown: Extra inputs are not permitted"),
        (lambda d: d["speculation"].pop("draft"), "speculation.draftTarget.draft: Field required"),
        (lambda d: d["target"].pop("engineDir"), "target.engineDir is required with backend tensorrt"),
        (lambda d: d["speculation"].update(draftLen=11), "exceeds maxDraftLen"),
        (lambda d: d["target"].update(devices=[0, 1]), "target.devices has 2 entries but tensorParallelSize is 1"),
        (lambda d: d.update(port=8001), "port 8001 is used inside the pod by Triton's gRPC endpoint"),
        (
            lambda d: d.update(speculation={"mode": "ngram", "speculativeConfig": {"decoding_type": "NGram"}}),
            "ngram is served by backend pytorch only",
        ),
    ],
)
def test_bad_configurations_are_refused_with_the_reason(tmp_path, mutate, message):
    data = base()
    mutate(data)
    with pytest.raises(cfg.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg.load(write(tmp_path, data))


def test_port_8001_is_free_for_trtllm_serve_routes(tmp_path):
    data = json.loads(config_json(CONFIGS["vicuna-7b-redrafter"]))
    data["port"] = 8001
    assert cfg.load(write(tmp_path, data)).port == 8001
    data["port"] = cfg.TRTLLM_SERVE_PORT
    with pytest.raises(cfg.ConfigError, match="used inside the pod by trtllm-serve"):
        cfg.load(write(tmp_path, data))


def test_cli_exits_2_with_the_message(tmp_path, capsys):
    assert cli.main(["--config", write(tmp_path, "{not json"), "--print-config"]) == 2
    assert "is not valid JSON" in capsys.readouterr().err
    assert cli.main(["--config", str(tmp_path / "absent.json")]) == 2
    assert "cannot read the runtime configuration" in capsys.readouterr().err


def test_the_console_script_exits_2_on_a_bad_config(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "specdec.runtime.cli", "--config", write(tmp_path, {"backend": "tensorrt"})],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert (
        "is not a valid runtime configuration" in result.stderr and "servedModelName: Field required" in result.stderr
    )
    assert result.stdout == ""
