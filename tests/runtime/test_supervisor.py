"""Supervision of a real child process: SIGTERM forwarding (to the whole process group), SIGKILL after the
grace period, exit statuses."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap

import pytest

from specdec.runtime.supervisor import Supervisor, exit_status
from tests.runtime.helpers import eventually

GRACEFUL = textwrap.dedent("""
    import signal, sys, time, subprocess
    marker, ready = sys.argv[1], sys.argv[2]
    def stop(sig, frame):
        open(marker, "w").write(signal.Signals(sig).name)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    if len(sys.argv) > 3:  # a grandchild, as mpirun has its ranks
        subprocess.Popen([sys.executable, __file__, sys.argv[3], sys.argv[3] + ".ready"])
    open(ready, "w").write("ok")
    while True:
        time.sleep(0.05)
""")
STUBBORN = (
    "import signal, time, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open(sys.argv[1], 'w').write('ok'); time.sleep(60)"
)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.fixture
def graceful(tmp_path):
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    return script


def test_sigterm_is_forwarded_and_a_graceful_stop_returns_0(tmp_path, graceful):
    marker, ready = tmp_path / "marker", tmp_path / "ready"

    async def scenario():
        supervisor = Supervisor([sys.executable, str(graceful), str(marker), str(ready)], grace_seconds=5)
        await supervisor.start()
        await eventually(ready.exists, "the child to start")
        assert not supervisor.exited
        return await supervisor.stop()

    assert run(scenario()) == 0
    assert marker.read_text() == "SIGTERM"


def test_sigterm_reaches_the_childs_own_children(tmp_path, graceful):
    marker, ready, grandchild = tmp_path / "marker", tmp_path / "ready", tmp_path / "grandchild"

    async def scenario():
        supervisor = Supervisor([sys.executable, str(graceful), str(marker), str(ready), str(grandchild)])
        await supervisor.start()
        await eventually(lambda: ready.exists() and (tmp_path / "grandchild.ready").exists(), "both to start")
        code = await supervisor.stop()
        await eventually(grandchild.exists, "the grandchild to get SIGTERM")
        return code

    assert run(scenario()) == 0
    assert grandchild.read_text() == "SIGTERM"


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path):
    ready = tmp_path / "ready"

    async def scenario():
        supervisor = Supervisor([sys.executable, "-c", STUBBORN, str(ready)], grace_seconds=0.3)
        await supervisor.start()
        await eventually(ready.exists, "the child to start")
        loop = asyncio.get_running_loop()
        started = loop.time()
        code = await supervisor.stop()
        return code, loop.time() - started

    code, elapsed = run(scenario())
    assert code == -signal.SIGKILL and exit_status(code) == 137
    assert 0.3 <= elapsed < 5


def test_a_child_that_fails_reports_its_status():
    async def scenario():
        supervisor = Supervisor([sys.executable, "-c", "import sys; sys.exit(3)"])
        await supervisor.start()
        code = await supervisor.wait()
        return code, supervisor.exited

    assert run(scenario()) == (3, True)


def test_a_missing_program_is_a_clear_error():
    async def scenario():
        await Supervisor(["/nonexistent/tritonserver"]).start()

    with pytest.raises(RuntimeError, match="cannot start /nonexistent/tritonserver"):
        run(scenario())


def test_environment_is_passed_to_the_child(tmp_path):
    out = tmp_path / "env"

    async def scenario():
        supervisor = Supervisor(
            [sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(os.environ['TRTLLM_ORCHESTRATOR'])"],
            {"TRTLLM_ORCHESTRATOR": "1"},
        )
        await supervisor.start()
        return await supervisor.wait()

    assert run(scenario()) == 0
    assert out.read_text() == "1"


def test_exit_status_of_signals():
    assert exit_status(0) == 0 and exit_status(2) == 2
    assert exit_status(-signal.SIGTERM) == 143 and exit_status(-signal.SIGSEGV) == 139
    assert os.WEXITSTATUS(0) == 0
