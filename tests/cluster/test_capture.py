"""saveState on the local cluster: the pod runner serves the runtime pod (the production front before the simulated
trtllm-serve, which writes capture files as TensorRT-LLM does, into the directory standing for the claim), its
simulated clients send requests, and the operator's status.capture follows the files as they grow; the claim's
capacity (a statically provisioned volume bound by the controller-manager) bounds it: CaptureSpace turns False
with a Warning Event near it, and no file is removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.runtime.capture_file import captured_tokens
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from specdec_dev.simulated_clients import PROMPT
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
WRITE_INTERVAL = 5
CLAIM = "captures"
CAPACITY = 1 << 20  # 1Mi: the stand-in's files are KiBs, so the capture nears it within a minute


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


@pytest.fixture
def bound_claim(kube: Kube, namespace: str):
    """A ReadWriteMany claim bound to a volume made for it, as an administrator provisions one statically."""
    volume = f"{namespace}-captures"
    kube.core.create_persistent_volume(
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Mi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/{volume}"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        }
    )
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Mi"}},
            },
        },
    )
    wait_for(
        lambda: kube.core.read_namespaced_persistent_volume_claim(CLAIM, namespace).status.phase == "Bound",
        f"claim {CLAIM} bound",
        timeout=60,
    )
    yield CLAIM
    kube.core.delete_persistent_volume(volume)


def capture(sd: SD) -> dict:
    return (sd.get().get("status") or {}).get("capture") or {}


def test_status_capture_grows_with_the_requests_and_warns_near_the_claims_capacity(
    kube: Kube, kubeconfig: Path, namespace: str, operator, bound_claim: str, tmp_path: Path
):
    body = example("llama-3.1-8b-save-state.yaml")
    body["spec"]["speculation"]["saveState"].update(writeInterval=WRITE_INTERVAL, output={"claimName": bound_claim})
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    assert capture(sd) == {}  # no pod has counted anything yet
    simulation_profile.update(tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{sd.name}", FAST_PROFILE)
    directory = tmp_path / "claims" / namespace / bound_claim / f"hidden-states/{sd.name}"
    with pod_runner(kubeconfig, tmp_path, namespace):
        first = wait_for(lambda: (c := capture(sd)).get("files") and c, "status.capture with a file", timeout=60)
        assert first["claimName"] == bound_claim and first["path"] == f"hidden-states/{sd.name}"
        assert first["requests"] % WRITE_INTERVAL == 0 and first["tokens"] == first["requests"] * len(PROMPT.split())
        assert first["claimCapacityBytes"] == CAPACITY and first["lastWriteAt"].endswith("Z")
        assert sd.condition("CaptureSpace")["reason"] == "WithinClaim"
        later = wait_for(
            lambda: (c := capture(sd)).get("files", 0) > first["files"] and c, "status.capture growing", timeout=30
        )
        assert later["bytes"] > first["bytes"] and later["tokens"] > first["tokens"]
        assert later["lastWriteAt"] >= first["lastWriteAt"]
        space = wait_for(
            lambda: (c := sd.condition("CaptureSpace")).get("status") == "False" and c,
            "CaptureSpace False near the capacity",
            timeout=120,
        )
        assert space["reason"] == "ClaimNearlyFull" and f"claim {bound_claim}" in space["message"]
        assert "Copy the files away" in space["message"]
        warnings = [e for e in kube.events_for(namespace, sd.name) if e.reason == "ClaimNearlyFull"]
        assert len(warnings) == 1 and warnings[0].type == "Warning"
    files = sorted(directory.glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    # Every file written is still there, numbered as TensorRT-LLM numbers them, and holds what status counted.
    assert [p.name for p in files] == [f"data_{WRITE_INTERVAL * i}.pt" for i in range(1, len(files) + 1)]
    final = capture(sd)
    assert final["files"] <= len(files) and final["claimUsedPercent"] >= 90
    # A file scanned while it was being written counts in files and bytes only.
    written = sum(captured_tokens(p)[1] for p in files[: final["files"]])
    assert written - WRITE_INTERVAL * len(PROMPT.split()) <= final["tokens"] <= written
