"""A deployment's runtime: its ConfigMap and Deployment, applied once its inputs are ready.

The Service comes after the Deployment is ours, from the Service lane (service_lane.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from kubernetes.client.rest import ApiException

from specdec.api.runtime_config import DRAFT_LEN_KEY
from specdec.builders import ssh_keys
from specdec.builders.multinode import (
    ANNOTATION_SSH_SECRET_UID,
    build_leader_worker_set,
    build_ssh_secret,
    runtime_kind,
    ssh_secret_name,
)
from specdec.builders.serving import (
    build_config_map,
    build_deployment,
    build_service,
    config_map_name,
    runtime_name,
    served_plan,
    told_schedule,
)
from specdec.kube.apply import contains
from specdec.kube.client import Kube
from specdec.plan import Plan
from specdec.reconcile.bookkeeping.failures import ServiceFailures
from specdec.reconcile.errors import ApiNotInstalled
from specdec.reconcile.ownership import Children, controlled_by
from specdec.reconcile.ssh_key_secret import owned_uid
from specdec.settings import Settings
from specdec.status.deployment import engines_built, runtime_inputs_fetched
from specdec.status.shared import BuildState
from specdec.versions import LWS

ANNOTATION_REARMED_AT = "specdec.io/rearmed-at"  # on the runtime pod template: status.rearm.lastRestartAt


def rearmed(deployment: dict[str, Any], sd: dict[str, Any]) -> dict[str, Any]:
    """The runtime Deployment with the last restart speculation.rearm asked for (specdec.feedback.rearm) on its pod
    template: a new value rolls the pods once."""
    restarted = ((sd.get("status") or {}).get("rearm") or {}).get("lastRestartAt")
    if restarted:
        deployment["spec"]["template"]["metadata"]["annotations"][ANNOTATION_REARMED_AT] = restarted
    return deployment


class Applied(NamedTuple):
    """A pass of the runtime: its Deployment (or LeaderWorkerSet), whether it runs this plan, whether its
    Service is ours and current, and whether this pass applied this plan's Deployment (created or changed it)."""

    deployment: dict[str, Any] | None
    current: bool
    service_current: bool
    written: bool = False


class RuntimeApplier:
    """`draft_len_choice(namespace, name)`: the speculation monitor's draftLen for draftLen: auto, or None;
    `schedule_choice(namespace, name)`: its draft_len_schedule for trtllm-serve, or None;
    `load_keys(namespace, name)`: its ConfigMap keys of the load model (break-even, draft lengths by load)."""

    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        children: Children,
        service_failures: ServiceFailures,
        draft_len_choice: Callable[[str, str], int | None],
        enqueue: Callable[..., None],
        load_keys: Callable[[str, str], dict[str, str]] = lambda namespace, name: {},
        schedule_choice: Callable[[str, str], dict[int, int] | None] = lambda namespace, name: None,
    ):
        self.kube = kube
        self.settings = settings
        self.children = children
        self.service_failures = service_failures
        self.draft_len_choice = draft_len_choice
        self.schedule_choice = schedule_choice
        self.load_keys = load_keys
        self.enqueue = enqueue
        # The SSH key Secrets this process created whose uid no LeaderWorkerSet records yet, by deployment uid.
        self._created_secrets: dict[str, str] = {}

    def apply(
        self, sd: dict[str, Any], p: Plan, states: dict[str, BuildState], caches: dict[str, BuildState]
    ) -> Applied:
        """Apply the runtime once every engine is built and (backend pytorch) every checkpoint it reads is
        fetched and admitted on its facts; until then, touch only the replica count. The Service lane applies
        the Service."""
        uid = sd["metadata"]["uid"]
        kind = runtime_kind(p)
        existing = self.children.get(kind, p.namespace, runtime_name(p), uid)
        if not _inputs_ready(p, states, caches):
            if existing and existing["spec"].get("replicas") != p.spec.runtime.replicas:
                existing = self.kube.patch(
                    kind, p.namespace, runtime_name(p), {"spec": {"replicas": p.spec.runtime.replicas}}
                )
            return Applied(existing, False, False)
        # The ConfigMap first: new pods must read the new configuration, and pods must never start with
        # another's ConfigMap of that name (a first create of it refused stops here). The Service after the
        # Deployment is ours, by the Service lane (kube-apiserver allocates ClusterIPs one at a time).
        config_map = self.children.get("ConfigMap", p.namespace, config_map_name(p), uid)
        chosen = self._chosen_draft_len(p, config_map)
        schedule = self.schedule_choice(p.namespace, p.name) or told_schedule(config_map)
        served = served_plan(p, chosen, schedule)
        # The load model's keys are for the Triton route's front, which re-reads them; trtllm-serve has no use.
        load_keys = self.load_keys(p.namespace, p.name) if p.spec.backend == "tensorrt" else {}
        self.children.write(build_config_map(served, uid, chosen, load_keys), config_map, uid)
        if kind == "LeaderWorkerSet":
            deployment, written = self._apply_group(sd, served, existing)
        else:
            deployment, written = self.children.write(
                rearmed(build_deployment(served, uid, self.settings), sd), existing, uid
            )
        if written:
            self.kube.event(
                sd,
                "RuntimeApplied",
                f"{'updated' if existing else 'created'} {kind} {runtime_name(p)} ({p.gpus} GPU(s) per pod)",
            )
        service = self.children.get("Service", p.namespace, runtime_name(p), uid)
        service_current = service is not None and contains(service, build_service(p, uid))
        failed = self.service_failures.get(p.namespace, p.name)
        if not service_current and not (failed and failed[0] == sd["metadata"].get("generation")):  # else its
            self.enqueue("Service", p.namespace, p.name, urgent=True)  # back-off retries: no loop with the lane
        return Applied(deployment, True, service_current, written)

    def _apply_group(self, sd: dict[str, Any], p: Plan, existing: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
        """A multi-node target's SSH key Secret, created on every pass and used only if it is the operator's
        (specdec.reconcile.ssh_key_secret: created again when deleted, refused when someone else's), then its
        LeaderWorkerSet, which records the Secret's uid. Where LeaderWorkerSet is not served, neither."""
        uid = sd["metadata"]["uid"]
        not_installed = ApiNotInstalled("LeaderWorkerSetNotInstalled", f"{LWS.api_version} {LWS.kind}", LWS.install)
        if existing is None and LWS.plural not in self.kube.served_resources(LWS.api_version):
            raise not_installed  # before the Secret: a Secret with no group would be taken for another's later
        name = ssh_secret_name(p)
        created = self.kube.create_unread(build_ssh_secret(p, uid, ssh_keys.generate(p.name)))
        recorded = ((existing or {}).get("metadata", {}).get("annotations") or {}).get(ANNOTATION_SSH_SECRET_UID)
        recorded = recorded or self._created_secrets.get(uid)
        secret_uid = owned_uid(created, recorded, name)
        if created is not None:
            self._created_secrets[uid] = created
            if recorded is not None:
                self.kube.event(
                    sd, "SshKeySecretRecreated", f"Secret {name} was deleted: created it again, with new keys"
                )
        try:
            written = self.children.write(build_leader_worker_set(p, uid, self.settings, secret_uid), existing, uid)
        except ApiException as error:
            if error.status == 404 and existing is None:
                raise not_installed from None
            raise
        self._created_secrets.pop(uid, None)  # recorded on the LeaderWorkerSet
        return written

    def apply_canary(
        self, sd: dict[str, Any], p: Plan, states: dict[str, BuildState], caches: dict[str, BuildState]
    ) -> dict[str, Any] | None:
        """The canary arm of plan `p` (the spec as written): its ConfigMap and Deployment once its engines are built
        and its checkpoints fetched (its Deployment, None until then). It starts where draftLen: auto starts."""
        uid = sd["metadata"]["uid"]
        existing = self.children.get("Deployment", p.namespace, runtime_name(p, canary=True), uid)
        if not _inputs_ready(p, states, caches):
            return existing
        config_map = self.children.get("ConfigMap", p.namespace, config_map_name(p, canary=True), uid)
        self.children.write(build_config_map(served_plan(p, None), uid, canary=True), config_map, uid)
        deployment, written = self.children.write(
            build_deployment(served_plan(p, None), uid, self.settings, canary=True), existing, uid
        )
        if written and existing is None:
            self.kube.event(
                sd, "CanaryApplied", f"created Deployment {runtime_name(p, canary=True)} ({p.gpus} GPU(s) per pod)"
            )
        return deployment

    def remove_canary(self, sd: dict[str, Any], p: Plan) -> bool:
        """Delete the canary arm's Deployment and ConfigMap where this deployment controls them (never another's);
        whether there was something to delete."""
        uid, removed = sd["metadata"]["uid"], False
        for kind, name in (
            ("Deployment", runtime_name(p, canary=True)),
            ("ConfigMap", config_map_name(p, canary=True)),
        ):
            found = self.kube.get(kind, p.namespace, name)
            if found is not None and controlled_by(found, uid) and not found["metadata"].get("deletionTimestamp"):
                self.kube.delete(kind, p.namespace, name)
                removed = True
        return removed

    def _chosen_draft_len(self, p: Plan, config_map: dict[str, Any] | None) -> int | None:
        """draftLen: auto: the monitor's choice; after a restart of the operator, what the pods were last
        told (the ConfigMap)."""
        chosen = self.draft_len_choice(p.namespace, p.name)
        told = ((config_map or {}).get("data") or {}).get(DRAFT_LEN_KEY, "")
        return chosen if chosen is not None else int(told) if told.isdigit() else None


def _inputs_ready(p: Plan, states: dict[str, BuildState], caches: dict[str, BuildState]) -> bool:
    """Every engine of the plan built and (backend pytorch) every checkpoint it reads fetched and admitted."""
    return engines_built(p, states) and runtime_inputs_fetched(p, caches) and not p.facts_awaited
