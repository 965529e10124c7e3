"""specdec-runtime as a process, with a stand-in trtllm-serve as the server it supervises: the front
answers over HTTP, SIGTERM stops both gracefully, and a failing server takes the runtime down with its status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.runtime.helpers import ROOT, config_json, free_port, parse_prometheus, scenario_configs

CONFIG = scenario_configs()["pytorch-llama-3.1-8b-draft-1b"]


def start(tmp_path, backend_args: str, *extra: str):
    front_port, backend_port = free_port(), free_port()
    config = tmp_path / "runtime.json"
    config.write_text(config_json(CONFIG.model_copy(update={"port": front_port})))
    command = f"{sys.executable} -m tests.runtime.standins openai --port {backend_port} {backend_args}"
    # The stand-in imports specdec too: the same one as the test (a caller's PYTHONPATH stays).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specdec.runtime.cli",
            "--config",
            str(config),
            "--workdir",
            str(tmp_path / "work"),
            "--backend-command",
            command,
            "--backend-url",
            f"http://127.0.0.1:{backend_port}",
            "--host",
            "127.0.0.1",
            "--stats-interval",
            "0.1",
            "--grace-seconds",
            "5",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, f"http://127.0.0.1:{front_port}"


def stop(process: subprocess.Popen) -> None:
    """After a failed assertion: SIGTERM first (the runtime forwards it to the stand-in), then SIGKILL."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def http(url: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return 0, ""


def wait_for(predicate, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_serves_then_stops_gracefully_on_sigterm(tmp_path):
    marker = tmp_path / "server-signal"
    process, url = start(tmp_path, f"--marker {marker}")
    try:
        wait_for(lambda: http(f"{url}/health")[0] == 200, "/health to turn 200")
        status, body = http(f"{url}/v1/completions", {"prompt": "Hi", "max_tokens": 4})
        assert status == 200 and json.loads(body)["model"] == "meta-llama/Llama-3.1-8B-Instruct"
        metrics = wait_for(
            lambda: (m := parse_prometheus(http(f"{url}/metrics")[1])).get("specdec_draft_tokens_total") == 8 and m,
            "the speculation counters",
        )
        assert metrics["specdec_accepted_draft_tokens_total"] == 6 and metrics["specdec_backend_up"] == 1
        assert metrics['specdec_requests_total{endpoint="/v1/completions",status="200"}'] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        stop(process)
    stderr = process.stderr.read()
    assert marker.read_text() == "SIGTERM"  # forwarded to the server
    assert "launching:" in stderr and "backend ready after" in stderr
    assert "forwarding SIGTERM" in stderr and "exiting with status 0" in stderr


def test_sigterm_lets_the_requests_in_flight_finish_before_the_server_stops(tmp_path):
    """The front stops listening first and finishes its streams on the running server; only then does the
    server get SIGTERM (a server stopped first would cut them, and the front would answer 502 meanwhile)."""
    marker = tmp_path / "server-signal"
    process, url = start(tmp_path, f"--marker {marker} --chunk-delay 0.5")
    try:
        wait_for(lambda: http(f"{url}/health")[0] == 200, "/health to turn 200")
        request = urllib.request.Request(
            f"{url}/v1/completions",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"prompt": "hi", "max_tokens": 3, "stream": True}).encode(),
        )
        with urllib.request.urlopen(request, timeout=10) as stream:
            first = stream.readline()
            process.send_signal(signal.SIGTERM)
            rest = stream.read().decode()
            signalled_before_the_end = marker.exists()
        assert first.startswith(b"data: ") and rest.rstrip().endswith("data: [DONE]"), rest
        assert not signalled_before_the_end
        assert http(f"{url}/health")[0] == 0  # no longer listening
        assert process.wait(timeout=15) == 0
    finally:
        stop(process)
    assert marker.read_text() == "SIGTERM"


def test_a_server_that_fails_takes_the_runtime_down_with_its_status(tmp_path):
    process, url = start(tmp_path, "--exit-after 0.5 --exit-code 3")
    try:
        assert process.wait(timeout=15) == 3
    finally:
        stop(process)
    stderr = process.stderr.read()
    assert "exited on its own with status 3" in stderr and "exiting with status 3" in stderr


def test_print_config_via_the_console_script(tmp_path):
    config = tmp_path / "runtime.json"
    config.write_text(config_json(CONFIG))
    # The console script of the venv running the tests: PATH may hold another install, or none.
    script = os.path.join(os.path.dirname(sys.executable), "specdec-runtime")
    result = subprocess.run(
        [script, "--config", str(config), "--print-config"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0
    assert "trtllm-serve /cache/models/meta-llama--Llama-3.1-8B-Instruct/main --backend pytorch" in result.stdout
