"""The local cluster's pod runner: for every runtime pod kwok runs (it runs no containers), what the pod
would run, as servers in this process on the pod's IP (a loopback address: specdec_dev.nodes).

- the kubelet's part: the pod's ConfigMap volume ("config") as files under <cluster dir>/pods/<namespace>/
  <pod>/config/, rewritten when the ConfigMap changes, so a key changed live (draft_len) shows up in place;
  a claim it writes (saveState's capture directory, TensorRT-LLM's output_directory) as the directory
  <cluster dir>/claims/<namespace>/<claim>/<subPath>, which outlives the pod as the claim's files do;
- the container's: the production front (specdec.runtime.front.Front, as `specdec-runtime` builds it from
  the same runtime.json) on podIP:<runtime port>, before a simulated backend (specdec_dev.simulator) on the
  ports the real one uses;
- its clients': simulated load (specdec_dev.simulated_clients);
- the kubelet's stop: a pod being deleted keeps serving for its preStop sleep (the Service has dropped it
  by then), then its front lets the requests in flight finish.

So whatever scrapes http://<podIP>:<port "http">/metrics gets the front's own metrics, from simulated
speculation. The acceptance profile (<cluster dir>/simulator.json, specdec_dev.simulation_profile) is
re-read within PROFILE_POLL_SECONDS of a change and applies to running pods at once. One asyncio loop serves
every pod; two threads watch Pods and ConfigMaps (specdec_dev.informer).

    python -m specdec_dev.podrunner --kubeconfig PATH --cluster-dir DIR [--namespace NS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import random
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from kubernetes import client, config

from specdec.api.ports import TRITON_HTTP_PORT, TRITON_METRICS_PORT, TRTLLM_SERVE_PORT
from specdec.api.runtime_config import DRAFT_LEN_KEY, RUNTIME_CONFIG_KEY, RuntimeConfig
from specdec.builders import common
from specdec.builders.serving import RUNTIME, RUNTIME_CANARY
from specdec.runtime import config as cfg
from specdec.runtime import launch
from specdec.runtime.chat import Tokenizer
from specdec.runtime.front import Front
from specdec.runtime.front_server import FrontServer
from specdec.runtime.launch import LaunchPlan
from specdec_dev import simulated_clients, simulation_profile
from specdec_dev.hidden_state_writer import capture_hook, captured_into
from specdec_dev.informer import Informer, Key
from specdec_dev.simulator import SimulatedTriton, SimulatedTrtllmServe, serve_drafts

log = logging.getLogger("specdec_dev.podrunner")

# Both arms' runtime pods: the runtime's and, while a canary runs, the canary's.
POD_SELECTOR = f"{common.LABEL_COMPONENT} in ({RUNTIME},{RUNTIME_CANARY}),{common.LABEL_MANAGED_BY}={common.MANAGED_BY}"
CONFIG_MAP_SELECTOR = f"{common.LABEL_MANAGED_BY}={common.MANAGED_BY}"
CONFIG_VOLUME = "config"
REFRESH_SECONDS = 2.0
# How often the acceptance profile's file is checked for a change: a change is to reach the pods well within
# a scrape window (a canary's collapse is judged on the window after it), not at the next refresh.
PROFILE_POLL_SECONDS = 0.2
SHUTDOWN_SECONDS = 1.0  # a stopping pod's requests in flight get this long


def write_volume(directory: Path, data: dict[str, str]) -> None:
    """A ConfigMap volume as the kubelet keeps it: one file per key, each replaced in one step, no others."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in data.items():
        path = directory / name
        if not path.is_file() or path.read_text() != text:
            partial = directory / f".{name}.partial"
            partial.write_text(text)
            os.replace(partial, path)
    for path in directory.iterdir():
        if path.name not in data:
            path.unlink()


def _front(config: RuntimeConfig, launch_plan: LaunchPlan, pod_ip: str, config_dir: Path) -> Front:
    """The front and its Backend as `specdec-runtime` builds them, the backend on the pod's IP (where the
    simulated one listens) at the ports the real one uses inside the pod: its API, and Triton's metrics
    (the draft and target compute time). The front follows the draft_len file of the pod's ConfigMap
    volume, as in the pod."""
    url = urlsplit(launch_plan.backend.url)
    metrics_url = f"http://{pod_ip}:{TRITON_METRICS_PORT}/metrics" if launch_plan.backend.metrics_url else None
    backend = dataclasses.replace(
        launch_plan.backend, url=f"{url.scheme}://{pod_ip}:{url.port}", metrics_url=metrics_url
    )
    return Front(
        config, backend, tokenizer=Tokenizer(None), route=launch_plan.route, draft_len_file=config_dir / DRAFT_LEN_KEY
    )


def _simulated_backend(
    config: RuntimeConfig, launch_plan: LaunchPlan, profile: simulation_profile.Profile, seed: int | None
) -> tuple[SimulatedTriton | SimulatedTrtllmServe, list[tuple[web.Application, int]]]:
    """The simulated server the front talks to, and its apps with the ports the real server listens on."""
    if launch_plan.backend.kind == "triton":
        triton = SimulatedTriton(profile, seed)
        return triton, [(triton.app(), TRITON_HTTP_PORT), (triton.metrics_app(), TRITON_METRICS_PORT)]
    serve = SimulatedTrtllmServe(profile, config.served_model_name, *serve_drafts(config), seed=seed)
    serve.capture = capture_hook(config.speculative_config or {})
    return serve, [(serve.app(), TRTLLM_SERVE_PORT)]


@dataclasses.dataclass
class RunningPod:
    uid: str
    deployment: str  # namespace/name of its SpeculativeDeployment: the profile's key
    backend: SimulatedTriton | SimulatedTrtllmServe
    stops: list[Callable[[], Awaitable[None]]]  # of its servers, the front's first
    clients: asyncio.Task
    pre_stop_seconds: float  # the container's preStop sleep

    async def stop(self) -> None:
        self.clients.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.clients
        for stop in self.stops:
            await stop()


class PodRunner:
    """Serves the runtime pods of a cluster (of one namespace, when given) until `stop()`."""

    def __init__(self, kubeconfig: Path, cluster_dir: Path, namespace: str | None = None):
        self.kubeconfig, self.namespace = kubeconfig, namespace
        self.pods_dir = cluster_dir / "pods"
        self.claims_dir = cluster_dir / "claims"
        self.profile_path = cluster_dir / simulation_profile.FILE_NAME
        self.running: dict[Key, RunningPod] = {}
        self._projected: dict[Key, str] = {}  # pod -> resourceVersion of the ConfigMap its files show
        self._problems: dict[Key, str] = {}  # pod -> why it is not served (logged once)
        self._profiles: dict[str, Any] = {}
        self._profiles_mtime: float | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._terminating: set[asyncio.Task] = set()  # pods deleted, still serving through their preStop sleep

    def stop(self) -> None:
        """Ask `run` to stop every pod's servers and return (call it on the runner's loop)."""
        self._stopping = True
        self._wake.set()

    async def run(self) -> None:
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        core = client.CoreV1Api(api)
        loop = asyncio.get_running_loop()
        list_pods: Callable[..., Any]
        list_config_maps: Callable[..., Any]
        if self.namespace:
            list_pods = functools.partial(core.list_namespaced_pod, self.namespace)
            list_config_maps = functools.partial(core.list_namespaced_config_map, self.namespace)
        else:
            list_pods, list_config_maps = core.list_pod_for_all_namespaces, core.list_config_map_for_all_namespaces
        self.pods = Informer(list_pods, POD_SELECTOR, loop, self._wake.set)
        self.config_maps = Informer(list_config_maps, CONFIG_MAP_SELECTOR, loop, self._wake.set)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        for informer in (self.pods, self.config_maps):
            informer.start()
        log.info("serving runtime pods of %s (profile %s)", self.namespace or "every namespace", self.profile_path)
        profiles = loop.create_task(self._follow_profiles())
        try:
            while not self._stopping:
                self._wake.clear()
                await self._reconcile()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), REFRESH_SECONDS)
        finally:
            profiles.cancel()
            for informer in (self.pods, self.config_maps):
                informer.stop()
            for task in self._terminating:
                task.cancel()
            await asyncio.gather(*self._terminating, return_exceptions=True)
            for key in list(self.running):
                await self._forget(key)
            await self.session.close()
            api.close()

    # --- what runs ----------------------------------------------------------------------------------

    async def _reconcile(self) -> None:
        self._reload_profiles()
        live = {key: pod for key, pod in self.pods.objects.items() if _serving(pod)}
        for key in {*self.running, *self._projected, *self._problems}:
            running = self.running.get(key)
            if key not in live and running and running.pre_stop_seconds > 0:
                self._terminate(key, running)
            elif key not in live or (running and running.uid != live[key]["metadata"]["uid"]):
                await self._forget(key)
        for key, pod in live.items():
            config_dir = self._project(key, pod)
            if config_dir and key not in self.running:
                await self._start(key, pod, config_dir)

    async def _forget(self, key: Key) -> None:
        running = self.running.pop(key, None)
        self._projected.pop(key, None)
        self._problems.pop(key, None)
        await self._stop(key, running)

    async def _stop(self, key: Key, running: RunningPod | None) -> None:
        try:
            if running:
                await running.stop()
                log.info("stopped pod %s/%s", *key)
        finally:
            shutil.rmtree(self.pods_dir / key[0] / key[1], ignore_errors=True)

    def _terminate(self, key: Key, running: RunningPod) -> None:
        """A deleted pod: served on through its preStop sleep, as the kubelet runs it, then stopped."""
        self.running.pop(key)
        self._projected.pop(key, None)

        async def after_pre_stop() -> None:
            try:
                await asyncio.sleep(running.pre_stop_seconds)
            finally:  # cancelled: the runner stops, so does the pod
                await self._stop(key, running)

        task = asyncio.get_running_loop().create_task(after_pre_stop())
        self._terminating.add(task)
        task.add_done_callback(self._terminating.discard)

    def _problem(self, key: Key, message: str) -> None:
        if self._problems.get(key) != message:
            self._problems[key] = message
            log.warning("pod %s/%s: %s", *key, message)

    def _project(self, key: Key, pod: dict[str, Any]) -> Path | None:
        """The kubelet's ConfigMap volume "config": its files, or None until the ConfigMap exists."""
        volume: dict[str, Any] = next((v for v in pod["spec"].get("volumes") or [] if v["name"] == CONFIG_VOLUME), {})
        name = (volume.get("configMap") or {}).get("name")
        if not name:
            self._problem(key, f"has no ConfigMap volume {CONFIG_VOLUME!r}")
            return None
        config_map = self.config_maps.objects.get((key[0], name))
        if config_map is None:
            self._problem(key, f"waits for ConfigMap {name}")
            return None
        directory = self.pods_dir / key[0] / key[1] / CONFIG_VOLUME
        version = config_map["metadata"]["resourceVersion"]
        if self._projected.get(key) != version:
            write_volume(directory, config_map.get("data") or {})
            self._projected[key] = version
        return directory

    async def _start(self, key: Key, pod: dict[str, Any], config_dir: Path) -> None:
        ip = pod["status"]["podIP"]
        deployment = profile_key(key, pod)
        try:
            config = self._claims_written(key, pod, cfg.load(config_dir / RUNTIME_CONFIG_KEY))
            launch_plan = launch.plan_launch(
                config, str(config_dir.parent / "work"), read_engines=False, group_env=container_env(pod)
            )
        except cfg.ConfigError as error:
            self._problem(key, str(error))
            return
        profile = simulation_profile.resolve(self._profiles, deployment)
        seed = simulation_profile.pod_seed(profile, *key)
        backend, apps = _simulated_backend(config, launch_plan, profile, seed)
        stops: list[Callable[[], Awaitable[None]]] = []
        try:
            for app, port in apps:
                server = web.AppRunner(
                    app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS
                )
                await server.setup()
                stops.insert(0, server.cleanup)
                await web.TCPSite(server, ip, port).start()
            front = FrontServer(_front(config, launch_plan, ip, config_dir), shutdown_timeout=SHUTDOWN_SECONDS)
            await front.start(ip, config.port)
            stops.insert(0, front.stop)
        except OSError as error:
            for stop in stops:
                await stop()
            self._problem(
                key,
                f"cannot serve on {ip}: {error.strerror or error} (a pod IP off the loopback "
                "pod networks of specdec_dev.nodes, or one still in use)",
            )
            return
        url = f"http://{ip}:{config.port}/v1/completions"
        clients = asyncio.create_task(
            simulated_clients.open_loop(
                self.session, url, lambda: backend.profile, random.Random(None if seed is None else seed + 1)
            )
        )
        self.running[key] = RunningPod(
            pod["metadata"]["uid"], deployment, backend, stops, clients, _pre_stop_seconds(pod)
        )
        self._problems.pop(key, None)
        log.info("serving pod %s/%s on %s:%d (%s route, simulated backend)", *key, ip, config.port, launch_plan.route)

    def _claims_written(self, key: Key, pod: dict[str, Any], config: RuntimeConfig) -> RuntimeConfig:
        """The configuration with the directories the pod writes to claims (saveState's output_directory,
        spec.drafter.learning's samples) at the directories standing for them here."""
        captures = self._claim_directory(key, pod, (config.speculative_config or {}).get("output_directory"))
        if captures is not None:
            config = captured_into(config, captures)
        samples = config.drafter_capture
        directory = self._claim_directory(key, pod, samples.directory if samples else None)
        if samples is not None and directory is not None:
            config = config.model_copy(
                update={"drafter_capture": samples.model_copy(update={"directory": str(directory)})}
            )
        return config

    def _claim_directory(self, key: Key, pod: dict[str, Any], mount_path: str | None) -> Path | None:
        """Where the claim's subPath mounted at `mount_path` is kept here; None when no claim is mounted there."""
        container = pod["spec"]["containers"][0]
        mount = next((m for m in container.get("volumeMounts") or [] if m["mountPath"] == mount_path), None)
        volume: dict[str, Any] = next(
            (v for v in pod["spec"].get("volumes") or [] if mount and v["name"] == mount["name"]), {}
        )
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if not claim or mount is None:  # a claim's volume is found through its mount
            return None
        return self.claims_dir / key[0] / claim / mount.get("subPath", "")

    async def _follow_profiles(self) -> None:
        while True:
            await asyncio.sleep(PROFILE_POLL_SECONDS)
            self._reload_profiles()

    def _reload_profiles(self) -> None:
        try:
            mtime = self.profile_path.stat().st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime == self._profiles_mtime:
            return
        self._profiles_mtime = mtime
        try:
            self._profiles = simulation_profile.read(self.profile_path)
        except simulation_profile.ProfileError as error:
            log.error("%s; keeping the profiles in use", error)
            return
        for running in self.running.values():
            running.backend.profile = simulation_profile.resolve(self._profiles, running.deployment)
        log.info("profiles from %s applied", self.profile_path)


def profile_key(key: Key, pod: dict[str, Any]) -> str:
    """The simulation profile a pod serves with: its deployment's, or its canary arm's (simulation_profile)."""
    labels = pod["metadata"].get("labels", {})
    deployment = f"{key[0]}/{labels.get(common.LABEL_INSTANCE, key[1])}"
    if labels.get(common.LABEL_COMPONENT) == RUNTIME_CANARY:
        return simulation_profile.canary_key(deployment)
    return deployment


def container_env(pod: dict[str, Any]) -> dict[str, str]:
    """The runtime container's variables that have a value in the pod spec: a multi-node leader's group, which
    LeaderWorkerSet's pod webhook sets there (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE), is what its launch reads."""
    containers = pod["spec"].get("containers") or [{}]
    return {e["name"]: e["value"] for e in containers[0].get("env") or [] if isinstance(e.get("value"), str)}


def _pre_stop_seconds(pod: dict[str, Any]) -> float:
    """The runtime container's preStop sleep (0 without one)."""
    for container in pod["spec"].get("containers") or []:
        sleep = ((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
        if isinstance(sleep.get("seconds"), int):
            return float(sleep["seconds"])
    return 0.0


def _serving(pod: dict[str, Any]) -> bool:
    """A running pod of a simulated node: its IP is a loopback one (a real node's pods run their containers)."""
    status = pod.get("status") or {}
    return (
        status.get("phase") == "Running"
        and status.get("podIP", "").startswith("127.")
        and not pod["metadata"].get("deletionTimestamp")
    )


async def _main(args: argparse.Namespace) -> None:
    runner = PodRunner(Path(args.kubeconfig), Path(args.cluster_dir), args.namespace)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop)
    await runner.run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_dev.podrunner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--cluster-dir", required=True, help="pods/ and simulator.json are here")
    parser.add_argument("--namespace", help="serve this namespace's pods only (default: every namespace)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
