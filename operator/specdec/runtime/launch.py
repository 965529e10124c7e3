"""What `specdec-runtime` launches for a runtime configuration: pure planning, then preparation on disk."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specdec.api.runtime_config import DRAFT_LEN_KEY, RuntimeConfig
from specdec.runtime import config as cfg
from specdec.runtime import multinode, triton, trtllm_serve

DEFAULT_WORKDIR = "/tmp/specdec"  # /tmp is the pod's writable emptyDir


def ssh_key_dir(workdir: str) -> str:
    """Where a multi-node pod keeps its copies of the SSH keys (specdec.runtime.multinode.prepare_keys)."""
    return f"{workdir}/ssh"


@dataclass(frozen=True)
class Backend:
    kind: str  # "triton" (generate endpoint of the BLS model) or "openai" (trtllm-serve)
    url: str
    health_path: str
    draft_len: int | None = None
    use_draft_logits: bool = False
    metrics_url: str | None = None  # the server's own Prometheus metrics (Triton: compute time per model)


@dataclass
class LaunchPlan:
    route: str
    argv: list[str]
    env: dict[str, str]
    files: dict[str, str]  # absolute path -> text, written before launch
    backend: Backend
    notes: list[str] = field(default_factory=list)
    triton_repo: str | None = None
    triton_repo_config: triton.Repository | None = None

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)


def plan_launch(
    config: RuntimeConfig,
    workdir: str = DEFAULT_WORKDIR,
    *,
    read_engines: bool = True,
    group_env: Mapping[str, str] | None = None,
) -> LaunchPlan:
    """What to launch for `config`: the backend's command line and environment, and the files `prepare` writes.
    A multi-node target's leader launches mpirun over its group, read from `group_env` (LeaderWorkerSet's
    variables; the process's environment by default)."""
    route = cfg.route(config)
    if route == "triton":
        repo_dir = f"{workdir}/triton-repository"
        max_batch = triton.engine_max_batch_size(config.target.engine_dir) if read_engines else None
        repo = triton.render_repository(config, max_batch)
        argv, env = triton.command(config, repo_dir)
        dt = config.draft_target
        assert dt is not None  # the Triton route serves draftTarget
        backend = Backend(
            "triton",
            f"http://127.0.0.1:{cfg.TRITON_HTTP_PORT}",
            "/v2/health/ready",
            draft_len=dt.draft_len,
            use_draft_logits=dt.use_logits,
            metrics_url=f"http://127.0.0.1:{cfg.TRITON_METRICS_PORT}/metrics",
        )
        notes = [
            f"Triton max_batch_size and BLS instances: {repo.max_batch_size} ({repo.max_batch_size_source})",
            "streaming requests are answered as one SSE chunk: the BLS does not stream while speculating",
        ]
        return LaunchPlan(
            route,
            argv,
            env,
            {f"{repo_dir}/{p}": t for p, t in repo.files.items()},
            backend,
            notes,
            triton_repo=repo_dir,
            triton_repo_config=repo,
        )
    options_path = f"{workdir}/extra_llm_api_options.yaml"
    argv, env = trtllm_serve.command(config, options_path)
    files = {options_path: trtllm_serve.extra_options_yaml(config)}
    multi = config.multi_node
    if multi is not None:
        try:
            hosts = multinode.group_hosts(os.environ if group_env is None else group_env, multi)
        except multinode.MultiNodeError as error:
            raise cfg.ConfigError(str(error)) from None
        hostfile_path = f"{workdir}/hostfile"
        files[hostfile_path] = multinode.hostfile(hosts, multi.gpus_per_node)
        argv = multinode.mpirun_argv(multi, hostfile_path, argv)
        env = {**env, **multinode.mpirun_env(multi, ssh_key_dir(workdir))}
    backend = Backend("openai", f"http://{trtllm_serve.HOST}:{cfg.TRTLLM_SERVE_PORT}", "/health")
    return LaunchPlan(route, argv, env, files, backend, trtllm_serve.warnings(config))


def draft_len_file(config_path: str) -> Path:
    """Where the operator's live draft length is: a key of the same ConfigMap, so next to runtime.json."""
    return Path(config_path).parent / DRAFT_LEN_KEY


def prepare(launch: LaunchPlan, backend_models_dir: str | None = None) -> None:
    """Write what the launch needs: the Triton repository (with the backend's Python models) or the YAML."""
    if launch.triton_repo and launch.triton_repo_config:
        models = Path(
            backend_models_dir or os.environ.get("SPECDEC_TRITON_MODELS_DIR", triton.DEFAULT_BACKEND_MODELS_DIR)
        )
        triton.write_repository(launch.triton_repo_config, Path(launch.triton_repo), models)
        return
    for path, text in launch.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def describe(config: RuntimeConfig, launch: LaunchPlan, source: str) -> str:
    """The --print-config dry run: what would be launched and rendered."""
    lines = [
        f"# specdec-runtime dry run of {source}",
        f"route: {launch.route} (backend {config.backend}, mode {config.mode})",
        f"front: http://0.0.0.0:{config.port} serving {config.served_model_name!r} "
        "(/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)",
    ]
    b = launch.backend
    if b.kind == "triton":
        assert config.draft_target is not None  # the Triton route serves draftTarget
        lines.append(
            f"backend: {b.url}/v2/models/{triton.BLS_MODEL}/generate with num_draft_tokens={b.draft_len} "
            f"use_draft_logits={str(b.use_draft_logits).lower()} return_perf_metrics=true, "
            f"compute times from {b.metrics_url}"
        )
        lines.append(
            f"draft length: num_draft_tokens follows {draft_len_file(source)} when it holds 1.."
            f"{config.draft_target.max_draft_len}, re-read while serving ({b.draft_len} without it)"
        )
    else:
        lines.append(f"backend: {b.url} (trtllm-serve OpenAI API), speculation counters from {b.url}/metrics")
    lines.append(f"health: {b.url}{b.health_path}")
    lines.append("command:")
    lines.append(f"  {launch.shell()}")
    for note in launch.notes:
        lines.append(f"note: {note}")
    if launch.triton_repo:
        lines.append(
            f"python models: copied from $SPECDEC_TRITON_MODELS_DIR (default "
            f"{triton.DEFAULT_BACKEND_MODELS_DIR}): {', '.join(triton.PYTHON_MODELS)}"
        )
    for path, text in sorted(launch.files.items()):
        lines.append(f"--- {path}")
        lines.append(text.rstrip("\n"))
    return "\n".join(lines) + "\n"
