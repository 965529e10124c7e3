"""The `specdec dev` commands: a local cluster with simulated GPU nodes, its real node and Prometheus.

Apart from the `specdec` command (specdec.cli), which hands `specdec dev ...` to `main` here: the operator's
start-up path never imports development code.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specdec_dev import (
    cluster,
    images,
    learn,
    node_config,
    prometheus,
    prometheus_ui,
    real_node,
    simulated_steps,
    simulation_profile,
    toolchain,
)

NEXT_STEPS = """
Next (the first line points this shell at the cluster; every new shell needs it too):
  source {env_file}
  kubectl get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.count   # simulated GPU nodes: H100 labels, 8 GPUs
  kubectl get sd,mc,eb               # the sample, its ModelCaches and EngineBuilds: Fetching, Building, Ready
  kubectl describe sd llama70b-spec  # conditions and events, step by step
  kubectl get jobs,deploy,svc,cm     # what the operator created
  specdec dev simulate llama70b-spec --acceptance 0.9   # the simulated backends' acceptance, live
  make down                          # stop everything (the same as `specdec dev down`)
"""
REAL_NODE_NEXT_STEPS = f"""
The real node ({real_node.NODE_NAME}: a kubelet with containerd; GPUs and TensorRT-LLM stay simulated):
  kubectl get pods -o wide -l app.kubernetes.io/instance={real_node.SAMPLE_NAME}   # its runtime pod, real IP
  crictl ps                                          # its containers (env.sh sets CONTAINER_RUNTIME_ENDPOINT)
"""


# `specdec dev simulate` options -> fields of specdec_dev.simulation_profile.Profile.
SIMULATE_OPTIONS = {
    "acceptance": "acceptance",
    "cost_ratio": "cost_ratio",
    "rps": "requests_per_second",
    "max_tokens": "max_tokens",
    "noise": "noise",
    "drafting": "drafting",
    "step_seconds_per_token": "step_seconds_per_token",
}
PROFILE_FIELDS = simulation_profile.Profile.model_fields


def _simulate(local: cluster.LocalCluster, args: argparse.Namespace) -> None:
    if args.show:
        if local.simulator_profile.is_file():
            print(local.simulator_profile.read_text(), end="")
        else:
            defaults = simulation_profile.Profile().model_dump(by_alias=True)
            print(f"no {local.simulator_profile} yet: every deployment has the defaults {json.dumps(defaults)}")
        return
    if not args.deployment:
        raise simulation_profile.ProfileError("name a SpeculativeDeployment (or --show the profiles)")
    values: dict[str, Any] = {
        PROFILE_FIELDS[name].alias or name: getattr(args, option)
        for option, name in SIMULATE_OPTIONS.items()
        if getattr(args, option) is not None
    }
    if not values and args.canary_acceptance is None:
        raise simulation_profile.ProfileError(
            f"nothing to set: give {', '.join('--' + o.replace('_', '-') for o in SIMULATE_OPTIONS)} "
            "or --canary-acceptance"
        )
    if not local.exists():
        raise cluster.ClusterError(f"no cluster {local.name!r} (run `specdec dev up`)")
    deployment = f"{args.namespace}/{args.deployment}"
    updates = [(deployment, values)] if values else []
    if args.canary_acceptance is not None:
        updates.append((simulation_profile.canary_key(deployment), {"acceptance": args.canary_acceptance}))
    for key, entry in updates:
        profile = simulation_profile.update(local.simulator_profile, key, entry)
        print(f"{key}: {json.dumps(profile.model_dump(by_alias=True))} (the pod runner applies it within seconds)")


# What the Prometheus UI screenshot test looks with: {command: Debian package}.
BROWSER_PACKAGES = {"chromium": "chromium"}


def run(args: argparse.Namespace) -> int:
    local = cluster.LocalCluster(name=args.name)
    try:
        if args.dev_command == "tools":
            if args.real_node:
                real_node.install_packages()
            print(toolchain.ensure_tools(real_node=args.real_node))
            if args.real_node:
                images.build_images()
            if args.prometheus or args.screenshot:
                prometheus.ensure()
            if args.screenshot:
                prometheus_ui.ensure()
                missing = toolchain.install_packages(BROWSER_PACKAGES, "the Prometheus UI screenshot")
                if missing:
                    raise toolchain.ToolchainError(
                        f"no {', '.join(missing)}: install it (Debian: apt-get install "
                        f"{' '.join(missing)}), or run this as root"
                    )
        elif args.dev_command == "up":
            found = real_node.problems() if args.real_node else []
            if found:
                raise cluster.ClusterError("--real-node: " + "; ".join(found))
            step_seconds: dict[str, float] | None
            if args.step_seconds is not None:
                step_seconds = simulated_steps.parse(args.step_seconds)
            else:  # a cluster keeps the step seconds it was created with
                step_seconds = None if local.exists() else cluster.QUICK_START_STEP_SECONDS
            cluster.up(
                local,
                cpu_nodes=args.cpu_nodes,
                gpu_nodes=args.gpu_nodes,
                step_seconds=step_seconds,
                real_node=args.real_node,
            )
            node = real_node.up(local) if args.real_node else None
            if not args.cluster_only:
                cluster.install(
                    local,
                    sample=not args.no_sample,
                    operator_metrics_port=prometheus.DEV_OPERATOR_METRICS_PORT if args.prometheus else 0,
                )
                if args.prometheus:
                    prometheus.dev_up(local)
                if node and not args.no_sample:
                    node.apply_sample()
            env_file = local.write_env_file(*([node.exports()] if node else []))
            print(env_file.read_text(), end="")
            print(NEXT_STEPS.format(env_file=env_file) + (REAL_NODE_NEXT_STEPS if node else ""), file=sys.stderr)
        elif args.dev_command == "env":
            if not local.env_file.is_file():
                raise cluster.ClusterError(f"cluster {local.name!r} has not been brought up (`specdec dev up`)")
            print(local.env_file.read_text(), end="")
        elif args.dev_command == "down":
            real_node.down(local)
        elif args.dev_command == "status":
            print(cluster.status(local))
            node = real_node.RealNode(local)
            if node.kubelet_pid():
                print(
                    f"real node {real_node.NODE_NAME}: kubelet pid {node.kubelet_pid()}, its pods' DNS pid "
                    f"{node.pod_dns_pid()} on {node_config.GATEWAY}:53, logs in {node.directory}\n"
                    f"{node.exports()}"
                )
        elif args.dev_command == "simulate":
            _simulate(local, args)
        elif args.dev_command == "learn":
            result = learn.run(
                local, args.namespace, args.deployment, args.min_samples, args.class_a, args.class_b, args.timeout
            )
            print(learn.report(result))
    except (
        toolchain.ToolchainError,
        cluster.ClusterError,
        images.ImageBuildError,
        prometheus.PrometheusError,
        simulation_profile.ProfileError,
        simulated_steps.StepSecondsError,
        learn.LearnError,
        TimeoutError,
    ) as error:
        print(f"specdec dev {args.dev_command}: {error}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec dev", description="A local cluster with simulated GPU nodes.")
    dev_commands = parser.add_subparsers(dest="dev_command", required=True)
    up = dev_commands.add_parser("up", help="build the tools if needed, start the cluster, print exports")
    up.add_argument("--cluster-only", action="store_true", help="no CRDs, operator or sample")
    up.add_argument("--no-sample", action="store_true", help="install CRDs and operator, but no sample")
    up.add_argument("--cpu-nodes", type=int, default=cluster.DEFAULT_CPU_NODES)
    up.add_argument("--gpu-nodes", type=int, default=cluster.DEFAULT_GPU_NODES, help="simulated nodes with 8 GPUs each")
    up.add_argument(
        "--step-seconds",
        default=None,
        metavar="STEP=SECONDS,...",
        help="simulated duration of each Job step, e.g. fetch=20,convert=10,quantize=10,build=30 "
        "(when the cluster is created; default: "
        + ",".join(f"{k}={v:g}" for k, v in cluster.QUICK_START_STEP_SECONDS.items())
        + ", so each phase of the sample shows; 0 ends every step at once)",
    )
    up.add_argument(
        "--real-node",
        action="store_true",
        help=f"also a real node ({real_node.NODE_NAME}: kubelet, containerd, runc) running the project's "
        "images; needs root (installs Debian packages, changes iptables and sysctls until `down`)",
    )
    up.add_argument(
        "--prometheus",
        action="store_true",
        help="also a Prometheus (built once, pinned) scraping the operator and the runtime pods, with "
        "specdec's alert rules, at http://127.0.0.1:19090",
    )
    dev_commands.add_parser("down", help="stop the cluster (and its real node) and remove its processes and data")
    dev_commands.add_parser("status", help="show whether the cluster runs, and its nodes")
    dev_commands.add_parser("env", help='print the cluster\'s exports (also in its env.sh): eval "$(specdec dev env)"')
    tools = dev_commands.add_parser("tools", help="build (or find cached) control-plane binaries; print their dir")
    tools.add_argument(
        "--real-node",
        action="store_true",
        help="also a real node's: Debian packages (as root), kubelet, containerd, CNI, crictl, images",
    )
    tools.add_argument("--prometheus", action="store_true", help="also the pinned Prometheus and promtool")
    tools.add_argument(
        "--screenshot",
        action="store_true",
        help="also Prometheus' web UI (built with npm) and Chromium (Debian's, as root): the UI screenshot test's",
    )
    simulate = dev_commands.add_parser(
        "simulate", help="set a deployment's profile for the simulated backends (applied live), or --show them"
    )
    simulate.add_argument("deployment", nargs="?", metavar="NAME", help="the SpeculativeDeployment")
    simulate.add_argument("-n", "--namespace", default="default", help="its namespace (default: %(default)s)")
    for option, name in SIMULATE_OPTIONS.items():
        field = PROFILE_FIELDS[name]
        kind = {"action": argparse.BooleanOptionalAction} if field.annotation is bool else {"type": field.annotation}
        simulate.add_argument(
            f"--{option.replace('_', '-')}", **kind, help=f"{field.description} (default {field.default})"
        )
    simulate.add_argument(
        "--canary-acceptance",
        type=float,
        help="the acceptance of the pods of the deployment's canary arm (spec.rollout.canary); the rest of their "
        "profile is the deployment's",
    )
    simulate.add_argument("--show", action="store_true", help="print the profiles file")
    learning = dev_commands.add_parser(
        "learn",
        help="spec.drafter.learning end to end on the cluster (brought up if needed): a tiny target, two traffic "
        "classes through the front, the real replay and EAGLE-3 training on CPU, the decision",
    )
    learning.add_argument("-n", "--namespace", default="default", help="(default: %(default)s)")
    learning.add_argument("--deployment", default="learns", help="its name (replaced, with its samples and rounds)")
    learning.add_argument("--min-samples", type=int, default=2000, help="class-a samples a round waits for")
    learning.add_argument("--class-a", type=int, default=2222, help="class-a conversations driven (a tenth held out)")
    learning.add_argument("--class-b", type=int, default=400, help="class-b conversations driven (not trained on)")
    learning.add_argument("--timeout", type=float, default=900, help="seconds to wait for the decision")
    for sub in dev_commands.choices.values():
        sub.add_argument(
            "--name", metavar="CLUSTER", default=cluster.CLUSTER_NAME, help="cluster name (default: %(default)s)"
        )
    return parser


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))
