"""The learning loop's round directories: a round's replay Job deletes the rounds older than keepRounds, never the
served head's nor anything the loop did not name."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specdec.builders import drafter_jobs
from specdec.drafter import replay, rounds
from specdec.drafter.samples import Sample, write_samples
from tests.unit.helpers import SETTINGS, make_plan
from tests.unit.invalid_specs import eagle3, spec


def test_the_newest_rounds_and_the_served_heads_stay():
    names = ["1", "2", "3", "4", "5", "6", "notes", "07", "-1"]
    assert rounds.to_delete(names, current=6, keep=3, served=None) == [1, 2, 3]
    assert rounds.to_delete(names, current=6, keep=3, served=2) == [1, 3]
    assert rounds.to_delete(names, current=6, keep=1, served=6) == [1, 2, 3, 4, 5]
    assert rounds.to_delete(["1", "2"], current=2, keep=3, served=None) == []
    assert rounds.to_delete(["5", "9"], current=6, keep=1, served=None) == [5]  # a later one is not judged here


class OneToken(BaseHTTPRequestHandler):
    """A capture server's answer: one token to every completion."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"choices": [{"index": 0, "text": "x"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), OneToken)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_rounds_replay_deletes_the_older_rounds_first(tmp_path: Path, server: str, capsys):
    all_rounds = tmp_path / "drafter-rounds" / "chat"
    for name in ("1", "2", "3", "4", "keep-me"):
        (all_rounds / name / "head").mkdir(parents=True)
    (all_rounds / "stray.txt").write_text("not a round")
    (tmp_path / "samples").mkdir()
    write_samples(tmp_path / "samples" / "s.jsonl", [Sample("p", "c"), Sample("q", "d")])
    argv = ["--samples", str(tmp_path / "samples"), "--server", server, "--model", "m"]
    argv += ["--rounds", str(all_rounds), "--round", "5", "--keep-rounds", "2", "--served-round", "2"]
    assert replay.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["replayed"] == 2 and summary["deletedRounds"] == [1, 3]
    assert sorted(p.name for p in all_rounds.iterdir()) == ["2", "4", "keep-me", "stray.txt"]


def test_rounds_need_a_round_number(tmp_path: Path):
    with pytest.raises(SystemExit):
        replay.main(["--samples", str(tmp_path), "--server", "s", "--model", "m", "--rounds", str(tmp_path)])


def test_the_replay_job_mounts_the_deployments_rounds_and_names_what_stays():
    plan = make_plan(
        spec(backend="pytorch", speculation=eagle3(), drafter={"learning": {"enabled": True, "keepRounds": 4}}),
        name="chat",
    )
    learning = plan.spec.drafter.learning
    head = drafter_jobs.head_uri(learning, "chat", plan.cache.claim_name, 7)
    served = drafter_jobs.head_round(head, "chat")
    assert served == 7
    assert drafter_jobs.head_round("hf://org/eagle3-head", "chat") is None
    assert drafter_jobs.head_round(drafter_jobs.head_uri(learning, "other", plan.cache.claim_name, 7), "chat") is None
    job = drafter_jobs.replay_job(plan, learning, "uid", SETTINGS, 9, served)
    pod = job["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    options = dict(zip(command[3::2], command[4::2], strict=False))
    assert (options["--rounds"], options["--round"], options["--keep-rounds"], options["--served-round"]) == (
        "/rounds",
        "9",
        "4",
        "7",
    )
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/rounds")
    assert mount["subPath"] == "drafter-rounds/chat" and not mount.get("readOnly")
    unserved = drafter_jobs.replay_job(plan, learning, "uid", SETTINGS, 1)["spec"]["template"]["spec"]
    assert "--served-round" not in unserved["containers"][0]["command"]
