"""spec.drafter.learning in the plan and the runtime pod: the front's capture settings in the runtime config, and
the samples' directory of the claim mounted writable; nothing of either without the opt-in."""

from __future__ import annotations

import pytest

from specdec.api.drafter import duration_seconds
from specdec.builders.serving import build_deployment
from tests.unit.helpers import SETTINGS, make_plan
from tests.unit.invalid_specs import eagle3, spec


def learning(**fields) -> dict:
    return spec(backend="pytorch", speculation=eagle3(), drafter={"learning": {"enabled": True, **fields}})


def pod(result) -> dict:
    return build_deployment(result, "uid", SETTINGS)["spec"]["template"]["spec"]


@pytest.mark.parametrize(("text", "seconds"), [("168h", 604800), ("1h30m", 5400), ("45s", 45), ("2h0m1s", 7201)])
def test_durations_are_read_as_go_spells_them(text, seconds):
    assert duration_seconds(text) == seconds


def test_the_defaults_reach_the_front_and_the_cache_claims_directory_is_mounted():
    result = make_plan(learning(), name="chat")
    capture = result.runtime.drafter_capture
    assert capture is not None
    assert (capture.directory, capture.sample_rate, capture.max_bytes, capture.retention_seconds) == (
        "/drafter-samples",
        0.05,
        10 << 30,
        168 * 3600,
    )
    assert (capture.opt_out_header, capture.traffic_class_header) == ("X-Specdec-No-Capture", "X-Specdec-Traffic-Class")
    spec_ = pod(result)
    volume = next(v for v in spec_["volumes"] if v["name"] == "drafter-samples")
    mount = next(m for m in spec_["containers"][0]["volumeMounts"] if m["name"] == "drafter-samples")
    assert volume["persistentVolumeClaim"] == {"claimName": result.cache.claim_name}
    assert mount == {"name": "drafter-samples", "mountPath": "/drafter-samples", "subPath": "drafter-samples/chat"}


def test_a_named_claim_and_path_and_bounds():
    result = make_plan(
        learning(sampleRate=0.5, maxBytes="1Gi", retention="24h", output={"claimName": "data", "path": "s/chat"})
    )
    capture = result.runtime.drafter_capture
    assert capture is not None and (capture.sample_rate, capture.max_bytes, capture.retention_seconds) == (
        0.5,
        1 << 30,
        86400,
    )
    spec_ = pod(result)
    volume = next(v for v in spec_["volumes"] if v["name"] == "drafter-samples")
    mount = next(m for m in spec_["containers"][0]["volumeMounts"] if m["name"] == "drafter-samples")
    assert volume["persistentVolumeClaim"] == {"claimName": "data"} and mount["subPath"] == "s/chat"


@pytest.mark.parametrize("drafter", [None, {"learning": {}}, {"learning": {"enabled": False, "sampleRate": 1}}])
def test_nothing_is_captured_without_the_opt_in(drafter):
    body = spec(backend="pytorch", speculation=eagle3())
    if drafter is not None:
        body["drafter"] = drafter
    result = make_plan(body)
    assert result.runtime.drafter_capture is None
    assert "drafterCapture" not in result.runtime.model_dump_json(by_alias=True, exclude_none=True)
    assert all(v["name"] != "drafter-samples" for v in pod(result)["volumes"])


def test_the_local_clusters_pod_runner_keeps_the_samples_in_the_claims_directory(tmp_path):
    from specdec_dev.podrunner import PodRunner

    result = make_plan(learning(), name="chat")
    pod_ = {"spec": pod(result)}
    runner = PodRunner(tmp_path / "kubeconfig", tmp_path)
    config = runner._claims_written(("ns", "chat-runtime-x"), pod_, result.runtime)
    assert config.drafter_capture is not None
    assert config.drafter_capture.directory == str(
        tmp_path / "claims" / "ns" / result.cache.claim_name / "drafter-samples" / "chat"
    )
    assert config.drafter_capture.max_bytes == result.runtime.drafter_capture.max_bytes
