"""The speculation monitor against real HTTP endpoints: scrape, windows, publishing, the autopilot."""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec.feedback.monitor import SpeculationMonitor
from specdec.feedback.scrape import parse_sample
from specdec.kube.cache import Store

TARGET = "hf://meta-llama/Llama-3.1-70B-Instruct"
DRAFT = "hf://meta-llama/Llama-3.2-1B-Instruct"


def metrics_text(
    draft: float,
    accepted: float,
    steps: float,
    draft_len: int | None = 4,
    draft_s: float = 0.0,
    target_s: float = 0.0,
    tokens: float = 0.0,
    requests: float = 3,
) -> str:
    lines = [
        "# HELP specdec_draft_tokens_total Draft tokens proposed.",
        "# TYPE specdec_draft_tokens_total counter",
        f"specdec_draft_tokens_total {draft}",
        "# TYPE specdec_accepted_draft_tokens_total counter",
        f"specdec_accepted_draft_tokens_total {accepted}",
        "# TYPE specdec_speculative_steps_total counter",
        f"specdec_speculative_steps_total {steps}",
        "# TYPE specdec_draft_seconds_total counter",
        f"specdec_draft_seconds_total {draft_s}",
        "# TYPE specdec_target_seconds_total counter",
        f"specdec_target_seconds_total {target_s}",
        "# TYPE specdec_requests_total counter",
        f'specdec_requests_total{{endpoint="/v1/completions",status="200"}} {requests}',
        "# TYPE specdec_completion_tokens_total counter",
        f"specdec_completion_tokens_total {tokens}",
        "# TYPE specdec_request_duration_seconds histogram",
        'specdec_request_duration_seconds_bucket{endpoint="/v1/completions",le="+Inf"} 3',
        'specdec_request_duration_seconds_count{endpoint="/v1/completions"} 3',
        'specdec_request_duration_seconds_sum{endpoint="/v1/completions"} 1.5',
    ]
    if draft_len is not None:
        lines += ["# TYPE specdec_draft_len gauge", f"specdec_draft_len {draft_len}"]
    return "\n".join(lines) + "\n"


class Endpoint:
    """A pod's /metrics: a real HTTP server on a loopback address."""

    def __init__(self, host: str, port: int):
        self.text = metrics_text(0, 0, 0)
        self.hits = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server names its handlers so
                endpoint.hits += 1
                body = endpoint.text.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _free_port(hosts: list[str]) -> int:
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = probe.getsockname()[1]
        with contextlib.ExitStack() as stack:
            try:
                for host in hosts:
                    sock = stack.enter_context(socket.socket())
                    sock.bind((host, port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port on every host")


def sd(
    name: str = "llama", draft_len: int | str = "auto", generation: int = 1, port: int = 8000, backend: str = "tensorrt"
) -> dict:
    block = {"draft": {"model": DRAFT}, "draftLen": draft_len}
    if draft_len == "auto":
        block["maxDraftLen"] = 8
    return {
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": generation},
        "spec": {
            "backend": backend,
            "target": {"model": TARGET},
            "runtime": {"port": port},
            "speculation": {"mode": "draftTarget", "draftTarget": block},
        },
    }


def pod(name: str, instance: str, ip: str, ready: bool = True) -> dict:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {LABEL_INSTANCE: instance, LABEL_COMPONENT: "runtime"},
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.fixture
def rig():
    hosts = ["127.0.0.1", "127.0.0.2"]
    port = _free_port(hosts)
    endpoints = [Endpoint(h, port) for h in hosts]
    store = Store(("SpeculativeDeployment", "Pod"), indexed_labels=(LABEL_INSTANCE,))
    events, enqueued = [], []
    monitor = SpeculationMonitor(
        store,
        lambda obj, reason, message, warning=False: events.append((reason, message)),
        lambda ns, name: enqueued.append((ns, name)),
        interval=10,
        refresh_seconds=300,
    )
    yield store, endpoints, monitor, events, enqueued, port
    for e in endpoints:
        e.close()


def test_parse_sample_reads_only_what_it_needs():
    sample = parse_sample(metrics_text(100, 80, 25, draft_len=4, draft_s=0.2, target_s=1.0))
    assert sample.counters == {
        "draft": 100,
        "accepted": 80,
        "steps": 25,
        "draft_seconds": 0.2,
        "target_seconds": 1.0,
        "requests": 3,
        "completion_tokens": 0,
    }
    assert sample.draft_len == 4
    assert parse_sample(metrics_text(1, 1, 1, draft_len=None)).draft_len is None
    assert parse_sample(metrics_text(1, 1, 1, draft_len=10**9)).draft_len is None  # not believed
    assert parse_sample(metrics_text(1, 1, 1, draft_len=0)).draft_len is None
    odd = parse_sample(metrics_text(100, float("nan"), float("inf")))
    assert odd.counters == {
        "draft": 100,
        "draft_seconds": 0,
        "target_seconds": 0,
        "requests": 3,
        "completion_tokens": 0,
    }  # NaN, Inf: not counted


def test_windows_are_summed_over_pods_and_published(rig):
    store, (a, b), monitor, events, enqueued, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    store.put(pod("llama-b", "llama", "127.0.0.2"))
    monitor.run_once(now=0.0)  # baselines
    assert monitor.published("ns", "llama", 1) is None and not enqueued
    a.text = metrics_text(400, 300, 100, draft_s=0.4, target_s=2.0)
    b.text = metrics_text(400, 300, 100, draft_s=0.4, target_s=2.0)
    monitor.run_once(now=15.0)
    published = monitor.published("ns", "llama", 1)
    assert enqueued == [("ns", "llama")]
    status = published.status
    assert status["acceptanceRate"] == 0.75 and status["acceptedTokensPerStep"] == 4.0
    assert status["pods"] == 2 and status["draftTokens"] == 800 and status["windowSeconds"] == 15.0
    assert status["costRatioSource"] == "Measured" and status["costRatio"] == 0.05
    assert status["estimatedSpeedup"] == round(4.0 / 1.2, 2)
    assert published.condition.type == "SpeculationEffective" and published.condition.status is True
    assert monitor.published("ns", "llama", 2) is None  # measured on another generation of the spec
    assert not events  # a fixed draftLen: no autopilot


def test_idle_and_steady_windows_publish_nothing(rig):
    store, (a, _), monitor, events, enqueued, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    monitor.run_once(now=15.0)  # no traffic
    assert not enqueued
    a.text = metrics_text(400, 300, 100)
    monitor.run_once(now=30.0)
    a.text = metrics_text(800, 601, 200)  # the same numbers again
    monitor.run_once(now=45.0)
    assert enqueued == [("ns", "llama")]
    a.text = metrics_text(1200, 601, 300)  # nothing accepted: each step costs more than it gives
    monitor.run_once(now=60.0)
    assert len(enqueued) == 2
    assert monitor.published("ns", "llama", 1).condition.status is False
    assert monitor.published("ns", "llama", 1).condition.reason == "LowAcceptance"
    assert [reason for reason, _ in events] == ["LowAcceptance"]  # a Warning Event, once per flip
    a.text = metrics_text(1600, 601, 400)
    monitor.run_once(now=75.0)
    assert len(events) == 1


def test_pods_not_ready_or_of_others_are_not_scraped(rig):
    store, (a, b), monitor, _, _, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1", ready=False))
    store.put(pod("other-b", "other", "127.0.0.2"))
    monitor.run_once(now=0.0)
    assert a.hits == 0 and b.hits == 0


def test_a_standby_scrapes_nothing(rig):
    store, (a, _), monitor, _, _, port = rig
    monitor.active = lambda: False
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    assert a.hits == 0


def test_autopilot_chooses_and_says_why(rig):
    store, (a, _), monitor, events, _, port = rig
    store.put(sd(draft_len="auto", port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    draft = accepted = steps = 0
    for window in range(1, 4):  # 99 % acceptance at draftLen 4 and a cheap draft: a longer draft pays
        draft, accepted, steps = draft + 400, accepted + 396, steps + 100
        a.text = metrics_text(draft, accepted, steps, draft_s=0.1 * window, target_s=5.0 * window)
        monitor.run_once(now=15.0 * window)
    choice = monitor.draft_len_choice("ns", "llama")
    assert choice is not None and 4 < choice <= 8
    assert [reason for reason, _ in events] == ["DraftLenChanged"]
    assert events[0][1].startswith(f"draftLen 4 -> {choice}: ") and "estimated speedup" in events[0][1]


def test_autopilot_on_trtllm_serve_waits_longer_and_says_it_rolls_the_pods(rig):
    """Backend pytorch: a change is a rollout, so it takes a third confirming window, a gain of 5 % and the
    rollout interval since the last rollout (here 150 s: 10 windows of 15 s)."""
    store, (a, _), monitor, events, _, port = rig
    monitor.autopilot.rollout_seconds = 150.0
    store.put(sd(draft_len="auto", port=port, backend="pytorch"))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    counters = {"draft": 0, "accepted": 0, "steps": 0, "draft_s": 0.0, "target_s": 0.0}
    decided_at = []

    def window(n: int, k: int, accepted: int = 99) -> None:  # per 100 drafted; the draft is cheap
        counters.update(
            draft=counters["draft"] + 100 * k,
            accepted=counters["accepted"] + accepted * k,
            steps=counters["steps"] + 100,
            draft_s=counters["draft_s"] + 0.1 * k,
            target_s=counters["target_s"] + 5.0,
        )
        a.text = metrics_text(
            counters["draft"],
            counters["accepted"],
            counters["steps"],
            draft_len=k,
            draft_s=counters["draft_s"],
            target_s=counters["target_s"],
        )
        before = monitor.draft_len_choice("ns", "llama")
        monitor.run_once(now=15.0 * n)
        if monitor.draft_len_choice("ns", "llama") != before:
            decided_at.append(n)

    for n in range(1, 4):
        window(n, 4)
    assert decided_at == [3]  # the Triton route's policy would have decided at the second window
    choice = monitor.draft_len_choice("ns", "llama")
    assert 4 < choice <= 8
    assert [reason for reason, _ in events] == ["DraftLenChanged"]
    assert events[0][1].endswith("rolling the pods (a new pod ready before an old one goes)")
    for n in range(4, 17):  # the pods run the choice, and acceptance drops: a shorter length waits out the interval
        window(n, monitor.draft_len_choice("ns", "llama"), accepted=5)
    assert len(decided_at) == 2 and decided_at[1] - decided_at[0] >= 10, decided_at
    assert monitor.draft_len_choice("ns", "llama") < choice


def test_forgets_deleted_deployments(rig):
    store, (a, _), monitor, _, _, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    a.text = metrics_text(400, 300, 100)
    monitor.run_once(now=15.0)
    assert monitor.published("ns", "llama", 1) is not None
    store.remove("SpeculativeDeployment", "ns", "llama")
    monitor.run_once(now=30.0)
    assert monitor.published("ns", "llama", 1) is None


def test_reads_what_the_runtime_front_exposes():
    """The metric names are a contract between the front (specdec.runtime.metrics) and the monitor."""
    from specdec.runtime.metrics import RuntimeMetrics

    metrics = RuntimeMetrics(mode="draftTarget", backend="tensorrt", model="m", route="triton")
    metrics.draft_length(5)
    metrics.speculative_response(draft=5, accepted=3, steps=1, rate=0.6)
    metrics.speculative_response(draft=5, accepted=5, steps=1, rate=1.0)
    metrics.compute_time(0.25, 2.0)
    metrics.request("/v1/completions", "200", 0.5)
    metrics.request("/v1/chat/completions", "400", 0.1)
    metrics.tokens(prompt=7, completion=12)
    metrics.target_iterations(10, 0.5, 3, 5)  # 10 iterations of 3 sequences with 5 draft tokens each
    metrics.token_time(1.0, 10)  # 0.1 s per token
    metrics.token_time(1.5, 11, first_token=0.5)  # 0.1 s per token after the first
    metrics.backend_error("timeout")
    sample = parse_sample(metrics.render().decode())
    assert sample.counters == {
        "draft": 10,
        "accepted": 8,
        "steps": 2,
        "draft_seconds": 0.25,
        "target_seconds": 2.0,
        "requests": 2,
        "completion_tokens": 12,
        "iterations": 10,
        "iteration_seconds": 0.5,
        "batch_sequences": 30,
        "batch_draft_tokens": 150,
        "tpot_sum": pytest.approx(0.2),  # what a canary's arms compare (specdec.canary.windows)
        "tpot_count": 2,
        "errors": 1,
    }
    assert sample.draft_len == 5


@pytest.mark.parametrize("text", ["garbage {{{ not metrics\n", "x" * (2 << 20), ""])
def test_a_pod_answering_garbage_or_too_much_is_skipped(rig, text):
    store, (a, b), monitor, _, enqueued, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    store.put(pod("llama-b", "llama", "127.0.0.2"))
    monitor.run_once(now=0.0)
    a.text, b.text = text, metrics_text(400, 300, 100)
    monitor.run_once(now=15.0)  # a's window is lost, b's counts
    assert monitor.published("ns", "llama", 1).status["pods"] == 1


def test_a_window_without_times_keeps_the_cost_last_measured(rig):
    store, (a, _), monitor, _, _, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    a.text = metrics_text(400, 300, 100, draft_s=0.4, target_s=2.0)
    monitor.run_once(now=15.0)
    a.text = metrics_text(800, 400, 200, draft_s=0.4, target_s=2.0)  # the route's times did not move
    monitor.run_once(now=30.0)
    status = monitor.published("ns", "llama", 1).status
    assert (status["costRatio"], status["costRatioSource"], status["acceptanceRate"]) == (0.05, "Measured", 0.25)


def test_autopilot_waits_for_the_pods_and_for_the_change_to_settle(rig):
    store, (a, _), monitor, events, _, port = rig
    store.put(sd(draft_len="auto", port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    counters = {"draft": 0, "accepted": 0, "steps": 0, "draft_s": 0.0, "target_s": 0.0}

    def window(n: int, k: int, draft_s: float) -> None:
        counters.update(
            draft=counters["draft"] + 100 * k,
            accepted=counters["accepted"] + 99 * k,
            steps=counters["steps"] + 100,
            draft_s=counters["draft_s"] + draft_s,
            target_s=counters["target_s"] + 5.0,
        )
        a.text = metrics_text(
            counters["draft"],
            counters["accepted"],
            counters["steps"],
            draft_len=k,
            draft_s=counters["draft_s"],
            target_s=counters["target_s"],
        )
        monitor.run_once(now=15.0 * n)

    n = 0
    while monitor.draft_len_choice("ns", "llama") is None and n < 5:
        n += 1
        window(n, 4, draft_s=0.1 * 4)  # cost 0.02
    choice = monitor.draft_len_choice("ns", "llama")
    assert choice is not None and choice != 4
    for _ in range(4):  # the pods still run 4: nothing more is decided, whatever the windows say
        n += 1
        window(n, 4, draft_s=0.1 * 4)
    assert len(events) == 1
    n += 1
    window(n, choice, draft_s=5.0)  # the switch: this window's times mix both lengths
    status = monitor.published("ns", "llama", 1).status
    assert status["draftLen"] == choice and status["costRatio"] == 0.02  # the cost measured before, not 5/(k*5)
    assert len(events) == 1


def test_a_pod_that_does_not_answer_is_tried_less_and_less_often(rig):
    store, (a, _), monitor, _, _, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    a.text = "not metrics\n"
    for n in range(12):
        monitor.run_once(now=15.0 * n)
    assert a.hits == 4  # passes 1, 2, 4 and 8
    a.text = metrics_text(0, 0, 0)
    for n in range(12, 25):  # its next try (pass 16) succeeds
        monitor.run_once(now=15.0 * n)
    hits = a.hits
    for n in range(25, 30):
        monitor.run_once(now=15.0 * n)
    assert a.hits == hits + 5  # answered again: scraped every pass from then on


def test_speculation_active_flips_once_with_a_warning_and_recovers_with_a_normal_event(rig):
    store, (a, _), monitor, events, enqueued, port = rig
    store.put(sd(draft_len=4, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    counts = {"draft": 0, "accepted": 0, "steps": 0, "tokens": 0, "requests": 0}

    def window(now: float, draft: int, accepted: int, steps: int, tokens: int = 600) -> None:
        for key, value in (
            ("draft", draft),
            ("accepted", accepted),
            ("steps", steps),
            ("tokens", tokens),
            ("requests", 10),
        ):
            counts[key] += value
        a.text = metrics_text(
            counts["draft"], counts["accepted"], counts["steps"], tokens=counts["tokens"], requests=counts["requests"]
        )
        monitor.run_once(now=now)

    window(15.0, 400, 300, 100)
    published = monitor.published("ns", "llama", 1)
    assert (published.active.type, published.active.status, published.active.reason) == (
        "SpeculationActive",
        True,
        "Drafting",
    )
    assert enqueued == [("ns", "llama")]  # with the first measurement: one publication
    window(30.0, 0, 0, 0)  # the runtime stopped drafting: one window is not yet evidence
    assert len(enqueued) == 1 and monitor.published("ns", "llama", 1).active.status is True
    window(45.0, 0, 0, 0)
    published = monitor.published("ns", "llama", 1)
    assert (published.active.status, published.active.reason) == (False, "NotDrafting")
    assert published.status["draftTokens"] == 400  # the last measurement stays
    assert len(enqueued) == 2 and [reason for reason, _ in events] == ["NotDrafting"]
    assert "0 draft tokens for 600 generated tokens and 10 requests" in events[0][1]
    for n in range(4, 8):  # still not drafting: nothing to write, nothing to say
        window(15.0 * n, 0, 0, 0)
    assert len(enqueued) == 2 and len(events) == 1
    window(120.0, 400, 300, 100)
    window(135.0, 400, 300, 100)
    assert monitor.published("ns", "llama", 1).active.reason == "Drafting"
    assert len(enqueued) == 3 and [reason for reason, _ in events] == ["NotDrafting", "SpeculationResumed"]


def test_modes_that_do_not_speculate_are_not_watched(rig):
    store, (a, _), monitor, _, enqueued, port = rig
    store.put(
        {
            **sd(port=port),
            "spec": {"target": {"model": TARGET}, "runtime": {"port": port}, "speculation": {"mode": "none"}},
        }
    )
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    monitor.run_once(now=0.0)
    a.text = metrics_text(0, 0, 0, tokens=6000, requests=100)
    monitor.run_once(now=15.0)
    monitor.run_once(now=30.0)
    assert a.hits == 0 and not enqueued and monitor.published("ns", "llama", 1) is None
