"""Stand-ins for the servers specdec-runtime launches, for machines without a GPU or NVIDIA's images: the
command lines of the real `trtllm-serve`, `tritonserver` and `mpirun` (which launches tritonserver), served by
the project's simulator (specdec_dev.simulator) instead of a model.

    python -m specdec_dev.standin_servers trtllm-serve MODEL --backend pytorch --port 18000 ...
    python -m specdec_dev.standin_servers mpirun --allow-run-as-root -n 1 /opt/tritonserver/bin/tritonserver ...

The runtime test image (runtime_image/Dockerfile.test) puts them on PATH under the real names, so the
runtime's own launch plan (specdec.runtime.launch) runs unchanged. What each stand-in takes and does:

- trtllm-serve: exactly the options of trtllm-serve's `serve` command (tensorrt_llm/commands/serve.py; an
  unknown option is refused with exit status 2, as click refuses it), MODEL, and an optional leading `serve`.
  It reads the --extra_llm_api_options YAML: `speculative_config` gives the draft length (max_draft_len,
  default 4; none for SaveState) and whether drafts cost draft-model time (not for decoding_type NGram, a lookup). On
  `--backend tensorrt` there is no speculative_config: an engine's draft length is build_config.max_draft_len
  of MODEL/config.json, when there is one. Serves SimulatedTrtllmServe on --host:--port, the model named
  after MODEL's directory, as trtllm-serve names it. With decoding_type SaveState it answers one token per
  request and writes the capture files as TensorRT-LLM does (specdec_dev.hidden_state_writer).
- tritonserver: Triton's options (src/command_line_parser.cc, and launch_triton_server.py's
  --enable-peer-access). The --model-repository must hold every model of the runtime's repository
  (specdec.runtime.triton.MODELS) with its config.pbtxt and version 1, else it exits as Triton does when a
  model fails to load. Serves SimulatedTriton's HTTP endpoint on --http-address:--http-port and its metrics
  on --metrics-address:--metrics-port; the BLS model's declared inputs (its config.pbtxt) are the inputs it
  accepts. There is no gRPC endpoint: only the real BLS model uses it.
- mpirun: `--allow-run-as-root` (needed as root, as Open MPI wants it), `-n`/`-np` 1 (one rank only), then
  the program: a stand-in above when its name is one of theirs, else executed as it is.

The simulation profile is the default one (specdec_dev.simulation_profile.Profile), or the JSON object of
SPECDEC_SIMULATION_PROFILE (its keys, camelCase: acceptance, costRatio, targetStepSeconds, noise, ...).
With SPECDEC_STANDIN_PACED=1 the trtllm-serve stand-in streams as a server generates: the first piece after
its share of the request's simulated time, and each next one after another share (without it, every piece
comes out at once after the whole time); bench/front_bench.py measures the runtime's front against it.
Each stand-in stops serving and exits 0 on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where they are used, so that each stand-in loads only what it runs
    from aiohttp import web

    from specdec_dev.backend_contracts import Completion
    from specdec_dev.simulation_profile import Profile
    from specdec_dev.simulator import SimulatedTrtllmServe

PROFILE_ENV = "SPECDEC_SIMULATION_PROFILE"
PACED_ENV = "SPECDEC_STANDIN_PACED"
DEFAULT_DRAFT_LEN = 4  # the simulator's (specdec_dev.simulator.DEFAULT_DRAFT_LEN), without importing it here
# Drafts that cost no draft-model time: the modes whose drafter is a lookup (specdec.modes; AUTO becomes NGram).
LOOKUP_DECODING_TYPES = {"NGram", "SA", "AUTO"}
SAVE_STATE = "SaveState"  # captures hidden states (specdec_dev.hidden_state_writer), proposes no token
NO_DRAFT_DECODING_TYPES = {SAVE_STATE}

# trtllm-serve's `serve` options (tests/runtime/data/trtllm_serve.json keeps where they were read): name -> type;
# None for a flag without a value.
TRTLLM_SERVE_OPTIONS: dict[str, Any] = {
    "--tokenizer": str,
    "--custom_tokenizer": str,
    "--host": str,
    "--port": int,
    "--backend": ("pytorch", "tensorrt", "_autodeploy", "trt"),
    "--custom_module_dirs": str,
    "--log_level": str,
    "--max_beam_width": int,
    "--max_batch_size": int,
    "--max_num_tokens": int,
    "--max_seq_len": int,
    "--tensor_parallel_size": int,
    "--tp_size": int,
    "--pipeline_parallel_size": int,
    "--pp_size": int,
    "--context_parallel_size": int,
    "--cp_size": int,
    "--moe_expert_parallel_size": int,
    "--ep_size": int,
    "--moe_cluster_parallel_size": int,
    "--cluster_size": int,
    "--gpus_per_node": int,
    "--free_gpu_memory_fraction": float,
    "--kv_cache_free_gpu_memory_fraction": float,
    "--num_postprocess_workers": int,
    "--trust_remote_code": None,
    "--revision": str,
    "--config": str,
    "--extra_llm_api_options": str,
    "--reasoning_parser": str,
    "--tool_parser": str,
    "--metadata_server_config_file": str,
    "--server_role": str,
    "--fail_fast_on_attention_window_too_large": None,
    "--otlp_traces_endpoint": str,
    "--disagg_cluster_uri": str,
    "--enable_chunked_prefill": None,
    "--media_io_kwargs": str,
    "--chat_template": str,
}

# Triton's options (tests/runtime/data/tritonserver.json): every one takes a value but the flags below; the
# repeatable ones may be given more than once.
TRITON_OPTIONS = (
    "model-repository",
    "model-store",
    "exit-on-error",
    "disable-auto-complete-config",
    "strict-readiness",
    "model-control-mode",
    "repository-poll-secs",
    "load-model",
    "allow-http",
    "http-address",
    "http-port",
    "reuse-http-port",
    "http-header-forward-pattern",
    "http-thread-count",
    "allow-grpc",
    "grpc-address",
    "grpc-port",
    "allow-metrics",
    "allow-gpu-metrics",
    "allow-cpu-metrics",
    "metrics-address",
    "metrics-port",
    "metrics-interval-ms",
    "log-verbose",
    "log-info",
    "log-warning",
    "log-error",
    "log-format",
    "log-file",
    "pinned-memory-pool-byte-size",
    "cuda-memory-pool-byte-size",
    "exit-timeout-secs",
    "backend-config",
    "id",
    "enable-peer-access",
)
TRITON_FLAGS = {"disable-auto-complete-config"}
TRITON_REPEATABLE = {"model-repository", "model-store", "load-model", "cuda-memory-pool-byte-size", "backend-config"}
TRITON_PORTS = {"http-port": 8000, "grpc-port": 8001, "metrics-port": 8002}  # Triton's defaults


class StandinError(Exception):
    """What the real server would refuse to start with; printed, exit status 1."""


def _say(name: str, message: str) -> None:
    print(f"[{name} stand-in] {message}", file=sys.stderr, flush=True)


def _parser(prog: str, usage: str, description: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, usage=usage, description=description, allow_abbrev=False)


def profile_from_env() -> Profile:
    """The simulation profile: the default one, or SPECDEC_SIMULATION_PROFILE's JSON object over it."""
    from pydantic import ValidationError

    from specdec_dev.simulation_profile import Profile

    text = os.environ.get(PROFILE_ENV, "").strip()
    if not text:
        return Profile()
    try:
        values = json.loads(text)
        if not isinstance(values, dict):
            raise ValueError("expected a JSON object")
        return Profile.model_validate(values)
    except (ValueError, ValidationError) as error:
        raise StandinError(f"{PROFILE_ENV} is not a simulation profile: {error}") from None


async def _serve(name: str, sites: list[tuple[Any, str, int]], what: str) -> None:
    """Serve (app, host, port) each until SIGTERM or SIGINT."""
    import asyncio

    from aiohttp import web

    from specdec.runtime.front_server import LISTEN_BACKLOG  # the front's, so a burst reaches every server alike

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runners = []
    try:
        for app, host, port in sites:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            try:
                await web.TCPSite(runner, host, port, backlog=LISTEN_BACKLOG).start()
            except OSError as error:
                raise StandinError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
        _say(name, f"{what}; listening on {', '.join(f'{h}:{p}' for _, h, p in sites)}")
        await stop.wait()
        _say(name, "stopping (signal received)")
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


# --- trtllm-serve ----------------------------------------------------------------------------------------------


def trtllm_serve_parser() -> argparse.ArgumentParser:
    p = _parser(
        "trtllm-serve",
        "%(prog)s [serve] MODEL [OPTIONS]",
        "Stand-in for TensorRT-LLM's trtllm-serve: serves the simulator (no model).",
    )
    p.add_argument("model", metavar="MODEL")
    for option, kind in TRTLLM_SERVE_OPTIONS.items():
        if kind is None:
            p.add_argument(option, action="store_true")
        elif isinstance(kind, tuple):
            p.add_argument(option, choices=kind)
        else:
            p.add_argument(option, type=kind)
    return p


def read_extra_options(path: str | None) -> dict[str, Any]:
    """The --extra_llm_api_options YAML ({} without one); trtllm-serve refuses a file it cannot read."""
    if not path:
        return {}
    import yaml

    try:
        options = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise StandinError(f"cannot read --extra_llm_api_options {path}: {error}") from None
    if not isinstance(options, dict):
        raise StandinError(f"--extra_llm_api_options {path} is not a mapping")
    speculative = options.get("speculative_config")
    if speculative is not None and not (isinstance(speculative, dict) and speculative.get("decoding_type")):
        raise StandinError(f"{path}: speculative_config needs a decoding_type")
    return options


def engine_draft_len(engine_dir: str) -> int:
    """build_config.max_draft_len of an engine directory's config.json (0 when there is none to read)."""
    try:
        build = json.loads((Path(engine_dir) / "config.json").read_text()).get("build_config") or {}
        return max(int(build.get("max_draft_len") or 0), 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def trtllm_drafts(backend: str, model: str, options: dict[str, Any]) -> tuple[int, bool, dict[int, int] | None]:
    """Draft tokens per step, whether they cost draft-model time, and the draft length by batch size."""
    from specdec_dev.simulator import draft_len_schedule

    speculative = options.get("speculative_config")
    if speculative and speculative.get("decoding_type") in NO_DRAFT_DECODING_TYPES:
        return 0, False, None
    if speculative:
        costs = speculative.get("decoding_type") not in LOOKUP_DECODING_TYPES
        draft_len = int(speculative.get("max_draft_len") or DEFAULT_DRAFT_LEN)
        return draft_len, costs, draft_len_schedule(speculative, draft_len)
    if backend in ("tensorrt", "trt"):
        return engine_draft_len(model), True, None
    return 0, False, None


def served_name(model: str) -> str:
    """As trtllm-serve: an existing directory is served under its own name, anything else as given."""
    path = Path(model)
    return path.name if path.is_dir() else model


def trtllm_serve(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:  # `trtllm-serve MODEL` is short for `trtllm-serve serve MODEL`
        argv = argv[1:]
    args = trtllm_serve_parser().parse_args(argv)
    options = read_extra_options(args.extra_llm_api_options)
    backend = args.backend or "pytorch"
    draft_len, draft_costs, schedule = trtllm_drafts(backend, args.model, options)
    profile = profile_from_env()

    from specdec.runtime import event_loop  # uvloop when installed, as trtllm-serve's uvicorn picks it
    from specdec_dev.simulator import SimulatedTrtllmServe

    kind = paced_trtllm_serve() if os.environ.get(PACED_ENV) == "1" else SimulatedTrtllmServe
    server = kind(profile, served_name(args.model), draft_len, draft_costs, schedule)
    from specdec_dev.hidden_state_writer import capture_hook

    server.capture = capture_hook(options.get("speculative_config") or {})
    host = args.host or "localhost"
    port = args.port if args.port is not None else 8000
    what = (
        f"simulating {server.served_as!r} on backend {backend}, draft length {draft_len}"
        f"{'' if draft_costs or not draft_len else ' (lookup drafts)'}, acceptance {profile.acceptance}"
    )
    event_loop.run(_serve("trtllm-serve", [(server.app(), host, port)], what))
    return 0


def paced_trtllm_serve() -> type[SimulatedTrtllmServe]:
    """SimulatedTrtllmServe whose streamed answers come out piece by piece, each at its share of the request's
    simulated time from the request's arrival (the first share stands for the prefill): on a schedule, so that
    the time the server takes to write a piece does not slow its pace."""
    import asyncio
    from contextvars import ContextVar

    from specdec_dev.simulator import SimulatedTrtllmServe, speculate

    streaming: ContextVar[bool] = ContextVar("streaming", default=False)
    piece_seconds: ContextVar[float] = ContextVar("piece_seconds", default=0.0)
    next_piece: ContextVar[float] = ContextVar("next_piece", default=0.0)  # when, on the loop's clock

    async def until_next_piece() -> None:
        loop = asyncio.get_running_loop()
        next_piece.set(next_piece.get() + piece_seconds.get())
        await asyncio.sleep(max(0.0, next_piece.get() - loop.time()))

    class PacedTrtllmServe(SimulatedTrtllmServe):
        async def complete(self, body: dict[str, Any], chat: bool) -> Completion:
            streaming.set(bool(body.get("stream")))  # the request's own task: chunk_sent runs in it too
            return await super().complete(body, chat)

        async def _run(self, tokens: int, draft_len: int, draft_costs: bool = True) -> None:
            if not streaming.get():
                await super()._run(tokens, draft_len, draft_costs)
                return
            steps = speculate(tokens, draft_len, self.profile, self.rng, draft_costs=draft_costs)
            piece_seconds.set(steps.seconds / tokens)
            next_piece.set(asyncio.get_running_loop().time())
            await until_next_piece()

        async def chunk_sent(self, request: web.Request) -> bool:
            await until_next_piece()
            return True

    return PacedTrtllmServe


# --- tritonserver ----------------------------------------------------------------------------------------------


def tritonserver_parser() -> argparse.ArgumentParser:
    p = _parser(
        "tritonserver",
        "%(prog)s --model-repository=DIR [OPTIONS]",
        "Stand-in for NVIDIA Triton's tritonserver: serves the simulator (no model).",
    )
    for option in TRITON_OPTIONS:
        if option in TRITON_FLAGS:
            p.add_argument(f"--{option}", action="store_true")
        elif option in TRITON_REPEATABLE:
            p.add_argument(f"--{option}", action="append", default=[])
        elif option in TRITON_PORTS:
            p.add_argument(f"--{option}", type=int, default=TRITON_PORTS[option])
        else:
            p.add_argument(f"--{option}")
    return p


def declared_inputs(config_pbtxt: str) -> set[str]:
    """The names of a config.pbtxt's `input [...]` tensors (the BLS model's; a small reader, no protobuf)."""
    names: set[str] = set()
    depth, in_inputs = 0, False
    for raw in config_pbtxt.splitlines():
        line = raw.split("#", 1)[0].strip()
        if depth == 0 and line.replace(" ", "").startswith("input["):
            in_inputs = True
        if in_inputs and line.startswith("name:"):
            names.add(line.split(":", 1)[1].strip().strip('"'))
        depth += line.count("[") + line.count("{") - line.count("]") - line.count("}")
        if in_inputs and depth == 0:
            in_inputs = False
    return names


def check_repository(repositories: list[str]) -> Path:
    """The repository Triton would load: every model with its config.pbtxt and version 1."""
    from specdec.runtime import triton

    if len(repositories) != 1:
        raise StandinError(f"expected one --model-repository, got {len(repositories)}")
    repo = Path(repositories[0])
    if not repo.is_dir():
        raise StandinError(f"failed to stat file {repo}: the model repository does not exist")
    broken = [
        model
        for model in triton.MODELS
        if not (repo / model / "config.pbtxt").is_file() or not (repo / model / "1").is_dir()
    ]
    if broken:
        raise StandinError(
            f"failed to load all models: {', '.join(broken)} (config.pbtxt or version 1 missing in {repo})"
        )
    return repo


def tritonserver(argv: list[str]) -> int:
    args = tritonserver_parser().parse_args(argv)
    repo = check_repository(args.model_repository + args.model_store)
    profile = profile_from_env()

    from specdec.runtime import event_loop, triton
    from specdec_dev.simulator import SimulatedTriton

    server = SimulatedTriton(profile)
    server.declared_inputs = declared_inputs((repo / triton.BLS_MODEL / "config.pbtxt").read_text()) or None
    http_host = args.http_address or "0.0.0.0"
    metrics_host = args.metrics_address or http_host
    what = f"simulating {triton.BLS_MODEL} from {repo}, acceptance {profile.acceptance}"
    event_loop.run(
        _serve(
            "tritonserver",
            [(server.app(), http_host, args.http_port), (server.metrics_app(), metrics_host, args.metrics_port)],
            what,
        )
    )
    return 0


# --- mpirun ----------------------------------------------------------------------------------------------------


def mpirun(argv: list[str]) -> int:
    p = _parser(
        "mpirun",
        "%(prog)s [--allow-run-as-root] [-n 1] PROGRAM [ARGS...]",
        "Stand-in for Open MPI's mpirun: runs one rank of the program, in this process when it is a stand-in.",
    )
    p.add_argument("--allow-run-as-root", action="store_true")
    p.add_argument("-n", "-np", "--np", dest="ranks", type=int, default=1)
    p.add_argument("program")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.ranks != 1:
        raise StandinError(f"-n {args.ranks}: the stand-in runs one rank only")
    allowed = all(os.environ.get(f"OMPI_ALLOW_RUN_AS_ROOT{suffix}") == "1" for suffix in ("", "_CONFIRM"))
    if os.geteuid() == 0 and not (args.allow_run_as_root or allowed):
        raise StandinError("mpirun has detected an attempt to run as root; add --allow-run-as-root")
    standin = STANDINS.get(Path(args.program).name)
    if standin is not None and standin is not mpirun:
        return standin(args.args)
    try:
        os.execvp(args.program, [args.program, *args.args])
    except OSError as error:
        raise StandinError(f"cannot run {args.program}: {error.strerror or error}") from None


STANDINS: dict[str, Callable[[list[str]], int]] = {
    "trtllm-serve": trtllm_serve,
    "tritonserver": tritonserver,
    "mpirun": mpirun,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in STANDINS:
        print(f"usage: python -m specdec_dev.standin_servers {{{','.join(STANDINS)}}} [ARGS...]", file=sys.stderr)
        return 2
    name = argv[0]
    try:
        return STANDINS[name](argv[1:])
    except StandinError as error:
        _say(name, f"error: {error}")
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
