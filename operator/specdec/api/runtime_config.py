"""The runtime configuration: what the operator writes into the ConfigMap and `specdec-runtime` reads.

One model shared by both sides, so a configuration the operator can write is one the runtime accepts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag

from specdec import modes
from specdec.modes.draft_target import RuntimeDraftTarget
from specdec.schema.base import ApiModel
from specdec.schema.served_model import ServedModel

RUNTIME_CONFIG_KEY = "runtime.json"
# The draft length in effect (draftLen: auto), a key of its own in the runtime ConfigMap and outside the
# rollout hash: the operator changes it without restarting pods, the front re-reads the file (the kubelet
# refreshes ConfigMap volumes in place) and sends the new length with the next requests.
DRAFT_LEN_KEY = "draft_len"
# The concurrency from which speculation at that draft length stops paying (specdec.load_model.break_even),
# beside it and as live: at and above it (with hysteresis) the Triton route's front sends no draft tokens.
BREAK_EVEN_KEY = "speculation_break_even"
# Below it, the best draft length for the requests in flight (specdec.load_model.format_schedule: "1:4 6:2 14:1
# 47:0", from n in flight on, length k), capped by draft_len; live too.
SCHEDULE_KEY = "speculation_draft_lens"
# trtllm-serve with draftLen: auto: the draft_len_schedule the pods were started with (JSON, {"largest batch
# size": draft length}), a record for the operator after a restart; the pods read it from runtime.json.
DRAFT_LEN_SCHEDULE_KEY = "draft_len_schedule"
RUNTIME_CONFIG_DIR = "/etc/specdec"
CACHE_MOUNT = "/cache"
MODELS_MOUNT = "/models"
# A multi-node group's SSH key Secret, mounted in every pod of the group, and the port of the workers' sshd
# (unprivileged: the pods run as a non-root user).
SSH_DIR = "/etc/specdec-ssh"
SSH_PORT = 2222
# The Secret's keys (specdec.builders.ssh_keys writes them, specdec.runtime.multinode reads them).
SSH_CLIENT_KEY = "id_ed25519"
SSH_AUTHORIZED_KEYS = "authorized_keys"
SSH_HOST_KEY = "ssh_host_ed25519_key"
SSH_KNOWN_HOSTS = "known_hosts"


class RuntimeKvCache(ApiModel):
    free_gpu_memory_fraction: float = Field(gt=0, le=1)
    enable_block_reuse: bool = True


class MultiNode(ApiModel):
    """A target spanning a LeaderWorkerSet group (specdec.builders.multinode): the leader's specdec-runtime starts
    the ranks with mpirun over SSH (specdec.runtime.multinode), the workers run sshd."""

    nodes: int = Field(ge=2, description="Pods in the group, one per node.")
    gpus_per_node: int = Field(ge=1, description="MPI slots (ranks) per pod: its GPUs.")
    ssh_port: int = Field(ge=1024, le=65535, description="Where the workers' sshd listens.")
    ssh_dir: str = Field(description="Where the pods mount the deployment's SSH key Secret.")


class RuntimeNone(ApiModel):
    mode: Literal["none"] = "none"


class RuntimeSpeculativeConfig(ApiModel):
    """A mode of the PyTorch path only: trtllm-serve's speculative_config is all the runtime needs."""

    mode: str = Field(description="spec.speculation.mode (specdec.modes.MODES).")
    speculative_config: dict[str, Any] = Field(description="speculative_config of the --extra_llm_api_options YAML.")


# Modes with a block of their own (Mode.runtime, in the mode's module) are tagged by name; every other
# mode (the PyTorch path's) is a RuntimeSpeculativeConfig, so adding a mode changes nothing here.
_TAGGED = {"none": RuntimeNone, **modes.runtime_blocks()}


def _tag(value: Any) -> str:
    mode = value.get("mode") if isinstance(value, dict) else getattr(value, "mode", None)
    return mode if mode in _TAGGED else "speculativeConfig"


# A union of members computed from the registry: `X | Y` has no spelling for a tuple of them.
RuntimeSpeculation = Annotated[  # type: ignore[valid-type]  # members known at run time only
    Union[  # noqa: UP007 - see above
        tuple(Annotated[cls, Tag(name)] for name, cls in _TAGGED.items())
        + (Annotated[RuntimeSpeculativeConfig, Tag("speculativeConfig")],)
    ],
    Discriminator(_tag),
]


class FrontLimits(ApiModel):
    """What the front's server lets one client hold (specdec.runtime.front_server), nginx's defaults where it
    has one. A request past a limit is refused with its status (431, 413, 408, 503) and counted by reason in
    specdec_front_refusals_total."""

    max_connections: int = Field(
        default=1024,
        ge=1,
        description="Client connections at once; more are answered 503 and closed (nginx: worker_connections).",
    )
    max_header_fields: int = Field(
        default=100, ge=1, description="Header fields in a request head; more: 431 (Apache's LimitRequestFields)."
    )
    max_head_bytes: int = Field(
        default=32 * 1024,
        ge=1024,
        description="Bytes of a request head; more: 431 (nginx: large_client_header_buffers, 4 x 8k).",
    )
    max_body_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1, description="Bytes of a request body; more: 413 (nginx: client_max_body_size)."
    )
    max_buffered_body_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=1,
        description="Bytes of request bodies being received or waiting their turn, all connections together; a "
        "request whose body would pass it: 503.",
    )
    head_timeout_seconds: float = Field(
        default=60.0, gt=0, description="Time to receive a whole request head; then 408 (nginx: client_header_timeout)."
    )
    body_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Time between two reads of a request body; then 408 (nginx: client_body_timeout).",
    )
    send_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Time a client may take no bytes of its answer while the front holds more for it; then the "
        "connection is dropped (nginx: send_timeout).",
    )
    keepalive_timeout_seconds: float = Field(
        default=75.0,
        gt=0,
        description="Time a connection may wait for its next request, from the end of the last answer (nginx: "
        "keepalive_timeout).",
    )


class RuntimeConfig(ApiModel):
    backend: Literal["tensorrt", "pytorch"]
    max_batch_size: int | None = Field(None, description="The engines' --max_batch_size, when the spec sets it.")
    served_model_name: str
    port: int = 8000
    target: ServedModel
    kv_cache: RuntimeKvCache
    speculation: RuntimeSpeculation = Field(  # type: ignore[valid-type]  # members known at run time only
        default_factory=RuntimeNone, description="The mode and what it needs."
    )
    front_limits: FrontLimits | None = Field(
        None, description="The front's limits on its clients (FrontLimits' defaults without it)."
    )
    multi_node: MultiNode | None = Field(None, description="Set when the target spans several nodes.")

    @property
    def mode(self) -> str:
        return self.speculation.mode  # type: ignore[attr-defined]  # every member has a mode

    @property
    def draft_target(self) -> RuntimeDraftTarget | None:
        return self.speculation if isinstance(self.speculation, RuntimeDraftTarget) else None

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        return getattr(self.speculation, "speculative_config", None)
