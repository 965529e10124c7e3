"""`specdec-runtime`: the runtime image's entrypoint.

    specdec-runtime --config /etc/specdec/runtime.json                 # serve
    specdec-runtime --config /etc/specdec/runtime.json --print-config  # dry run: what would run

Exit status: 2 for a configuration that cannot be served (the message says why), the server process's
status when it fails, 0 after a graceful stop (SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import shlex
import signal
import sys
import time

from specdec.api.runtime_config import MultiNode, RuntimeConfig
from specdec.runtime import config as cfg
from specdec.runtime import event_loop, launch, multinode
from specdec.runtime.chat import Tokenizer
from specdec.runtime.front import Front
from specdec.runtime.front_server import FrontServer
from specdec.runtime.launch import LaunchPlan
from specdec.runtime.supervisor import Supervisor, exit_status

log = logging.getLogger("specdec.runtime")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="specdec-runtime",
        description="Serve a SpeculativeDeployment's models: render the TensorRT-LLM serving configuration "
        "from the runtime configuration the operator wrote, run and supervise the server "
        "(tritonserver or trtllm-serve), and serve the OpenAI-compatible front with /health "
        "and Prometheus /metrics.",
    )
    p.add_argument(
        "--config",
        required=True,
        metavar="PATH",
        help="runtime configuration (runtime.json from the deployment's ConfigMap)",
    )
    p.add_argument(
        "--print-config", action="store_true", help="dry run: print the command and every rendered file, then exit"
    )
    p.add_argument(
        "--worker",
        action="store_true",
        help="a worker pod of a multi-node group: run sshd for the leader's mpirun (specdec.runtime.multinode)",
    )
    p.add_argument(
        "--workdir", default=launch.DEFAULT_WORKDIR, help=f"where rendered files go (default {launch.DEFAULT_WORKDIR})"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=25.0,
        help="after SIGTERM: how long the front's requests in flight may take to finish, then how long "
        "the server gets to stop before SIGKILL (default 25 each)",
    )
    p.add_argument(
        "--request-timeout", type=float, default=600.0, help="seconds a backend request may take (default 600)"
    )
    # For tests and debugging: run another command as the backend, or talk to a backend elsewhere.
    p.add_argument("--backend-command", help=argparse.SUPPRESS)
    p.add_argument("--backend-url", help=argparse.SUPPRESS)
    p.add_argument("--host", default="0.0.0.0", help=argparse.SUPPRESS)
    p.add_argument("--stats-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    p.add_argument("--progress-interval", type=float, default=15.0, help=argparse.SUPPRESS)
    return p


async def _report_progress(front: Front, supervisor: Supervisor, interval: float) -> None:
    """Start-up progress in the log: engines take minutes to load."""
    started = time.monotonic()
    last = started
    while not supervisor.exited and not front.ready_announced:
        ok, detail = await front.backend_ready()
        front.metrics.backend_up.set(1 if ok else 0)
        now = time.monotonic()
        if ok:
            front.mark_ready()
            return
        if now - last >= interval:
            log.info("waiting for the backend (%.0fs so far): %s", now - started, detail)
            last = now
        await asyncio.sleep(min(0.25, interval))


async def serve(config: RuntimeConfig, plan: LaunchPlan, args: argparse.Namespace) -> int:
    backend = plan.backend
    if args.backend_url:
        backend = dataclasses.replace(backend, url=args.backend_url.rstrip("/"))
    argv = shlex.split(args.backend_command) if args.backend_command else plan.argv
    supervisor = Supervisor(argv, plan.env, grace_seconds=args.grace_seconds)
    tokenizer = Tokenizer(config.target.checkpoint) if backend.kind == "triton" else None
    front = Front(
        config,
        backend,
        supervisor=supervisor,
        tokenizer=tokenizer,
        route=plan.route,
        request_timeout=args.request_timeout,
        stats_interval=args.stats_interval,
        draft_len_file=launch.draft_len_file(args.config),
    )
    server = FrontServer(front, shutdown_timeout=args.grace_seconds)
    try:
        await server.start(args.host, config.port)
    except OSError as error:
        log.error("cannot listen on %s:%d: %s", args.host, config.port, error.strerror or error)
        return 1
    log.info(
        "front listening on %s:%d (backend %s at %s, event loop %s)",
        args.host,
        config.port,
        backend.kind,
        backend.url,
        type(asyncio.get_running_loop()).__module__.partition(".")[0],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("launching: %s", shlex.join(argv))
    try:
        await supervisor.start()
    except RuntimeError as error:
        log.error("%s", error)
        await server.stop()
        return 127
    progress = loop.create_task(_report_progress(front, supervisor, args.progress_interval))
    stop_wait = loop.create_task(stop.wait())
    exit_wait = loop.create_task(supervisor.wait())
    await asyncio.wait({stop_wait, exit_wait}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        # The front first: it stops listening and lets its requests in flight finish on the running server.
        log.info("stop requested: finishing the requests in flight, then stopping the server")
        await server.stop()
        code = await supervisor.stop()
        status = 0 if code in (0, -signal.SIGTERM, 128 + signal.SIGTERM) else exit_status(code)
    else:
        await server.stop()
        code = supervisor.returncode or 0
        status = exit_status(code) or 1  # a server that stops by itself is a failure, even with status 0
    for task in (progress, stop_wait, exit_wait):
        task.cancel()
    log.info("exiting with status %d", status)
    return status


# How long a leader waits for its workers' sshd; then it exits, and LeaderWorkerSet recreates the group.
WORKERS_DEADLINE_SECONDS = 600.0


def _await_group(multi: MultiNode, workdir: str) -> None:
    """The leader's keys in place and every worker's sshd answering, before mpirun starts the ranks."""
    multinode.prepare_keys(multi.ssh_dir, launch.ssh_key_dir(workdir))
    hosts = multinode.group_hosts(os.environ, multi)
    log.info("waiting for the workers' sshd: %s", ", ".join(hosts[1:]))
    multinode.wait_for_workers(hosts[1:], multi.ssh_port, WORKERS_DEADLINE_SECONDS)


def _serve_worker(config: RuntimeConfig, workdir: str) -> int:
    """A worker of a multi-node group: sshd in the foreground, in place of this process."""
    multi = config.multi_node
    if multi is None:
        raise cfg.ConfigError("--worker: the runtime configuration has no multiNode block")
    key_dir = launch.ssh_key_dir(workdir)
    try:
        multinode.prepare_keys(multi.ssh_dir, key_dir)
        config_path = f"{key_dir}/sshd_config"
        with open(config_path, "w") as out:
            out.write(multinode.sshd_config(multi, key_dir, os.environ))
        argv = multinode.sshd_argv(config_path)
        log.info("worker: %s", shlex.join(argv))
        os.execv(argv[0], argv)  # returns only by raising
    except OSError as error:
        print(f"specdec-runtime: cannot start sshd: {error}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s specdec-runtime: %(message)s"
    )
    try:
        config = cfg.load(args.config)
        if args.worker:
            return _serve_worker(config, args.workdir)
        group_env = None
        if args.print_config and config.multi_node and multinode.LEADER_ADDRESS not in os.environ:
            group_env = multinode.example_group_env(config.multi_node)  # a dry run outside a group: an example's
        plan = launch.plan_launch(config, args.workdir, group_env=group_env)
    except cfg.ConfigError as error:
        print(f"specdec-runtime: {error}", file=sys.stderr)
        return 2
    if args.print_config:
        sys.stdout.write(launch.describe(config, plan, args.config))
        return 0
    for note in plan.notes:
        log.info("%s", note)
    log.info(
        "runtime configuration: %s",
        json.dumps(config.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True),
    )
    if not args.backend_command:
        try:
            launch.prepare(plan)
            if config.multi_node is not None:
                _await_group(config.multi_node, args.workdir)
        except (cfg.ConfigError, OSError, multinode.MultiNodeError) as error:
            print(f"specdec-runtime: cannot prepare the server: {error}", file=sys.stderr)
            return 2
    return event_loop.run(serve(config, plan, args))


if __name__ == "__main__":
    sys.exit(main())
