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
every pod; threads watch the runtime pods, their ConfigMaps and the Job pods it runs (specdec_dev.informer).

    python -m specdec_dev.podrunner --kubeconfig PATH --cluster-dir DIR [--namespace NS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
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
from specdec_dev import pod_dns, process_pods, simulated_clients, simulation_profile
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
    backend: SimulatedTriton | SimulatedTrtllmServe | None  # None: the transformers stand-in's process
    stops: list[Callable[[], Awaitable[None]]]  # of its servers, the front's first
    clients: asyncio.Task | None  # simulated load; none before a real model (its traffic is the user's)
    pre_stop_seconds: float  # the container's preStop sleep

    async def stop(self) -> None:
        if self.clients is not None:
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
        self._commands: dict[Key, tuple[str, asyncio.Task]] = {}  # Job pods' processes (process_pods): uid, task
        self._command_waits: dict[Key, str] = {}  # Job pod -> what its process waits for (logged once)

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
        self.job_pods = Informer(list_pods, f"{process_pods.RUN_LABEL}=true", loop, self._wake.set)
        self.core = core
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        for informer in (self.pods, self.config_maps, self.job_pods):
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
            for informer in (self.pods, self.config_maps, self.job_pods):
                informer.stop()
            tasks = [*self._terminating, *(task for _, task in self._commands.values())]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
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
        await self._reconcile_commands()

    # --- Job pods whose command runs here (process_pods) ---------------------------------------------------------

    async def _reconcile_commands(self) -> None:
        for key, (uid, task) in list(self._commands.items()):
            pod = self.job_pods.objects.get(key)
            if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
                task.cancel()  # the pod is gone: so are its container and its emptyDir
                del self._commands[key]
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                shutil.rmtree(self.pods_dir / key[0] / key[1], ignore_errors=True)
        for key, pod in self.job_pods.objects.items():
            if key in self._commands or not process_pods.runs_command(pod):
                continue
            services = await self._services(key, pod)
            if services is None:
                continue  # its Service has no pod served here yet: tried again on the next change
            task = asyncio.get_running_loop().create_task(self._run_command(key, pod, services))
            self._commands[key] = (pod["metadata"]["uid"], task)

    async def _services(self, key: Key, pod: dict[str, Any]) -> dict[str, str] | None:
        """The command's Service URLs -> a pod of each served here (its front); None while one has none."""
        container = pod["spec"]["containers"][0]
        resolved: dict[str, str] = {}
        for arg in [*(container.get("command") or []), *(container.get("args") or [])]:
            named = process_pods.service_host(arg)
            if named is None:
                continue
            try:
                service = await asyncio.to_thread(self.core.read_namespaced_service, *named)
            except client.ApiException as error:
                self._command_wait(key, f"its Service {named[1]}/{named[0]} cannot be read: {error.reason}")
                return None
            selecting = {"spec": {"selector": service.spec.selector if service.spec else None}}
            ips = [
                served["status"]["podIP"]
                for served_key, served in self.pods.objects.items()
                if served_key in self.running and served_key[0] == named[1] and pod_dns.selects(selecting, served)
            ]
            if not ips:
                self._command_wait(key, f"waits for a pod of Service {named[1]}/{named[0]} to serve")
                return None
            resolved[arg] = process_pods.at_pod(arg, ips[0])
        self._command_waits.pop(key, None)
        return resolved

    def _command_wait(self, key: Key, message: str) -> None:
        if self._command_waits.get(key) != message:
            self._command_waits[key] = message
            log.info("Job pod %s/%s %s", *key, message)

    async def _run_command(self, key: Key, pod: dict[str, Any], services: dict[str, str]) -> None:
        """The Job pod's container as a process; its end written to the pod's status, as a kubelet's."""
        pod_dir = self.pods_dir / key[0] / key[1]
        pod_dir.mkdir(parents=True, exist_ok=True)
        termination_log, log_path = pod_dir / "termination-log", pod_dir / "container.log"
        termination_log.unlink(missing_ok=True)
        started_at = _container_started_at(pod)
        try:
            directories = process_pods.volume_directories(pod, self.claims_dir, pod_dir)
            for directory in directories.values():
                directory.mkdir(parents=True, exist_ok=True)
            argv = process_pods.host_command(pod, directories, termination_log, services)
        except process_pods.PodRunError as error:
            log_path.write_text(f"[pod runner] {error}\n")
            exit_code = 128  # as a container that could not start
        else:
            log.info("running pod %s/%s: %s", *key, " ".join(argv))
            with log_path.open("wb") as out:
                process = await asyncio.create_subprocess_exec(
                    *argv, stdout=out, stderr=asyncio.subprocess.STDOUT, env=process_pods.process_env()
                )
            try:
                exit_code = await process.wait()
            finally:
                if process.returncode is None:  # cancelled: the pod was deleted
                    process.kill()
                    await process.wait()
        message = process_pods.termination_message(termination_log, log_path, exit_code)
        patch = process_pods.terminated_status(pod, exit_code, message, started_at, _now())
        try:
            await asyncio.to_thread(self.core.patch_namespaced_pod_status, key[1], key[0], patch)
        except client.ApiException as error:  # deleted meanwhile: nobody is left to tell
            log.warning("pod %s/%s ended (exit code %d) but its status cannot be written: %s", *key, exit_code, error)
            return
        log.info("pod %s/%s ended: exit code %d (log %s)", *key, exit_code, log_path)

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
        model = process_pods.real_model(
            config.target.checkpoint,
            process_pods.volume_directories(pod, self.claims_dir, self.pods_dir / key[0] / key[1]),
        )
        profile = simulation_profile.resolve(self._profiles, deployment)
        seed = simulation_profile.pod_seed(profile, *key)
        backend: SimulatedTriton | SimulatedTrtllmServe | None = None
        stops: list[Callable[[], Awaitable[None]]] = []
        try:
            if model is not None and launch_plan.backend.kind != "triton":
                stops.insert(0, await self._transformers_serve(key, model, ip, config))
            else:
                backend, apps = _simulated_backend(config, launch_plan, profile, seed)
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
        except (OSError, process_pods.PodRunError) as error:
            for stop in stops:
                await stop()
            if isinstance(error, process_pods.PodRunError):
                self._problem(key, str(error))
            else:
                self._problem(
                    key,
                    f"cannot serve on {ip}: {error.strerror or error} (a pod IP off the loopback "
                    "pod networks of specdec_dev.nodes, or one still in use)",
                )
            return
        clients = None
        if backend is not None:
            simulated = backend
            url = f"http://{ip}:{config.port}/v1/completions"
            clients = asyncio.create_task(
                simulated_clients.open_loop(
                    self.session, url, lambda: simulated.profile, random.Random(None if seed is None else seed + 1)
                )
            )
        self.running[key] = RunningPod(
            pod["metadata"]["uid"], deployment, backend, stops, clients, _pre_stop_seconds(pod)
        )
        self._problems.pop(key, None)
        served = "simulated backend" if backend is not None else f"transformers stand-in of {model}"
        log.info("serving pod %s/%s on %s:%d (%s route, %s)", *key, ip, config.port, launch_plan.route, served)

    async def _transformers_serve(
        self, key: Key, model: Path, ip: str, config: RuntimeConfig
    ) -> Callable[[], Awaitable[None]]:
        """The transformers stand-in of the pod's trtllm-serve as a process on its IP, answering /health; its stop."""
        pod_dir = self.pods_dir / key[0] / key[1]
        argv = process_pods.transformers_serve_argv(
            model, ip, TRTLLM_SERVE_PORT, pod_dir / "extra-llm-api-options.yaml", config.speculative_config or {}
        )
        log_file = (pod_dir / "transformers-serve.log").open("ab")
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=log_file, stderr=asyncio.subprocess.STDOUT, env=process_pods.process_env()
        )
        log_file.close()

        async def stop() -> None:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), SHUTDOWN_SECONDS * 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()

        deadline = asyncio.get_running_loop().time() + process_pods.START_SECONDS
        while True:
            try:
                async with self.session.get(f"http://{ip}:{TRTLLM_SERVE_PORT}/health") as answer:
                    if answer.status == 200:
                        return stop
            except aiohttp.ClientError:
                pass
            if process.returncode is not None or asyncio.get_running_loop().time() > deadline:
                await stop()
                raise process_pods.PodRunError(
                    f"the transformers stand-in of trtllm-serve did not start (log: {pod_dir}/transformers-serve.log)"
                )
            await asyncio.sleep(0.5)

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
            if running.backend is not None:
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


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _container_started_at(pod: dict[str, Any]) -> str:
    """When kwok started the pod's container (its running state), else now."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (status.get("state") or {}).get("running") or {}
        if running.get("startedAt"):
            return str(running["startedAt"])
    return _now()


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
