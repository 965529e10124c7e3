"""The operator's rollouts, timed from the bench's watch events: one deployment at a time (latency) and
fleets applied at once (scale), each fleet beside the probe's loaded floor."""

from __future__ import annotations

import json
import time

from bench.floor import Probe
from bench.objects import create_namespace, fleet, sd_body, target_model
from bench.observer import Observer
from bench.timing import now, summary
from kubernetes import client

from specdec.api.models import GROUP, VERSION
from specdec.builders import engine as engine_builders
from specdec.builders import model_cache as cache_builders
from specdec.plan import Plan, plan
from specdec.settings import Settings


def latency(api: client.ApiClient, observer: Observer, reps: int) -> dict[str, list[float]]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    out: dict[str, list[float]] = {"apply_to_job": [], "jobs_done_to_deployment": [], "available_to_ready": []}
    for i in range(reps):
        ns = f"bench-latency-{i}"
        create_namespace(core, ns)
        start = now()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", sd_body("lat"))
        out["apply_to_job"].append(observer.wait(ns, "job-created") - start)
        deployment = observer.wait(ns, "deployment-created")
        done = observer.jobs_done(ns)
        out["jobs_done_to_deployment"].append(deployment - done if done else float("nan"))
        available = observer.wait(ns, "deployment-available")
        out["available_to_ready"].append(observer.wait(ns, "ready:lat") - available)
        core.delete_namespace(ns)  # frees its GPUs for the scale run
    return out


def jobs_for(sd: dict) -> list[str]:
    """The Jobs a deployment waits for: its checkpoints' fetch Jobs, then its engines' build Jobs."""
    planned = plan(sd, Settings())
    fetches = [cache_builders.job_name(c.name) for c in planned.model_caches] if isinstance(planned, Plan) else []
    return fetches + [engine_builders.job_name(e) for e in (sd.get("status") or {}).get("engineBuilds") or []]


def scale(api: client.ApiClient, observer: Observer, count: int, models: int, own_every: int) -> dict:
    """N deployments applied at once; per deployment: apply -> its first new Job (a fetch Job, for those
    whose model was new), its last Job done (or its apply, if later) -> its Deployment."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"bench-scale-{count}"
    create_namespace(core, ns)
    applied: dict[str, float] = {}
    posted: dict[str, float] = {}  # seconds of each SD's create request
    sent_at: dict[str, float] = {}  # wall clock, as the API server's audit log: see apply_chain
    probe = Probe(api, f"bench-probe-{count}")
    probe.start()
    start = now()
    for body in fleet(count, models, own_every):
        sent_at[body["metadata"]["name"]] = time.time()
        sent = applied[body["metadata"]["name"]] = now()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", body)
        posted[body["metadata"]["name"]] = now() - sent
    apply_seconds = now() - start
    deadline = start + 900
    while now() < deadline and observer.count(ns, "ready:") < count:
        time.sleep(0.2)
    all_ready = now() - start
    probe.finish()
    sds = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments")["items"]
    jobs_of = {sd["metadata"]["name"]: jobs_for(sd) for sd in sds}
    creator: dict[str, str] = {}  # job -> the first deployment applied that uses it
    for name in sorted(applied, key=applied.get):
        for job in jobs_of.get(name, []):
            creator.setdefault(job, name)
    to_job, to_deployment, first_jobs = [], [], {}
    released_by: dict[str, str] = {}  # deployment -> the Job whose end released it
    by_release: dict[str, list[float]] = {"its apply": [], "a Job done": []}  # what released each deployment
    loaded = {"apply_to_job": [], "jobs_done_to_deployment": []}  # the probe's floor beside each deployment
    for name, jobs in jobs_of.items():
        new = {j: observer.at(ns, f"job:{j}") for j in jobs if creator[j] == name}  # the Jobs it was first to need
        if new and None not in new.values():
            first_jobs[name] = min(new, key=new.get)
            to_job.append(new[first_jobs[name]] - applied[name])
            loaded["apply_to_job"].append(posted[name] + probe.near("apply_to_job", applied[name]))
        done = [observer.at(ns, f"job-done:{j}") for j in jobs]
        deployment = observer.at(ns, f"deployment:{name}")
        if deployment is not None and None not in done:
            released = max([applied[name], *done])
            if released != applied[name]:
                released_by[name] = jobs[done.index(released)]
            to_deployment.append(deployment - released)
            by_release["its apply" if released == applied[name] else "a Job done"].append(deployment - released)
            # Released by its own apply (its Jobs were done before): timed from before its SD create, as apply →
            # Job is, so its floor has that create's seconds too.
            loaded["jobs_done_to_deployment"].append(
                probe.near("jobs_done_to_deployment", released) + (posted[name] if released == applied[name] else 0.0)
            )
    builds = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "enginebuilds")["items"]
    jobs = client.BatchV1Api(api).list_namespaced_job(ns).items
    recipes = {json.dumps(b["spec"]["recipe"], sort_keys=True) for b in builds}
    expected = len({target_model(i, models, own_every) for i in range(count)}) + 1  # + the shared draft
    return {
        "deployments": count,
        "ready": observer.count(ns, "ready:"),
        "apply_seconds": apply_seconds,
        "all_ready_seconds": all_ready,
        "ready_at": start + all_ready,
        "apply_to_job": summary(to_job),
        "jobs_done_to_deployment": summary(to_deployment),
        "jobs_done_to_deployment_by_release": {k: summary(v) for k, v in by_release.items()},
        "loaded_floor": {k: summary(v) for k, v in loaded.items()},
        "probes": {k: len(v) for k, v in probe.samples.items()},
        "first_jobs": first_jobs,
        "released_by": released_by,
        "sent_at": {name: sent_at[name] for name in first_jobs},
        "engine_builds": len(builds),
        "jobs": len(jobs),
        "distinct_recipes": len(recipes),
        "expected_recipes": expected,
    }
