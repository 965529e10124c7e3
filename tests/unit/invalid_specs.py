"""One table of invalid SpeculativeDeployment specs, shared by the unit tests (pydantic, via
`specdec.admission.validation.parse_spec`) and the cluster tests (the real API server, via the generated CRD's schema
and CEL rules).

Each entry is `(id, spec, field)`: `spec` is the `.spec` of a SpeculativeDeployment, `field` a
substring of the field path both validators must name in their error.

`CEL` lists the entries that break a CEL rule (`x-kubernetes-validations`), which the offline check
evaluates too (specdec.schema.cel):
rules relating two or more fields, and rules on map keys (structural schemas have no
propertyNames); `LIST_SET` those enforced by the API server through `x-kubernetes-list-type: set`.
All other entries are plain bound, enum, pattern or schema (required, type) violations.

`VALID_SPECS` are specs near those rules' edges that both must still accept.
"""

from __future__ import annotations

import copy
from typing import Any

from specdec.modes import MODES

TARGET = "hf://meta-llama/Llama-2-13b-hf"
DRAFT = "hf://meta-llama/Llama-2-7b-hf"


def spec(**overrides: Any) -> dict[str, Any]:
    """A valid minimal spec (mode none) with top-level blocks replaced by `overrides`."""
    base: dict[str, Any] = {"target": {"model": TARGET}}
    base.update(copy.deepcopy(overrides))
    return base


def draft_target(**fields: Any) -> dict[str, Any]:
    """A valid draftTarget speculation block; `fields` override draftTarget's fields."""
    block = {"draft": {"model": DRAFT}, "draftLen": 4, **fields}
    return {"mode": "draftTarget", "draftTarget": block}


def eagle3(**fields: Any) -> dict[str, Any]:
    block = {"draftModel": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", **fields}
    return {"mode": "eagle3", "eagle3": block}


def redrafter(**fields: Any) -> dict[str, Any]:
    block = {"drafterModel": "pvc://drafters/vicuna-7b-drafter", **fields}
    return {"mode": "redrafter", "redrafter": block}


INVALID_SPECS: list[tuple[str, dict[str, Any], str]] = [
    # --- bounds, enums, patterns --------------------------------------------------------------------
    ("zero-draft-len", spec(speculation=draft_target(draftLen=0)), "draftLen"),
    ("kv-fraction-above-one", spec(runtime={"kvCache": {"freeGpuMemoryFraction": 1.5}}), "freeGpuMemoryFraction"),
    ("unknown-mode-medusa", spec(speculation={"mode": "medusa"}), "mode"),
    ("negative-replicas", spec(runtime={"replicas": -1}), "replicas"),
    ("empty-model", spec(target={"model": ""}), "model"),
    ("model-bad-scheme", spec(target={"model": "s3://x/y"}), "model"),
    # --- cross-field rules (CEL, evaluated by the API server and offline) ---------------------------------------------
    ("devices-longer-than-tp", spec(target={"model": TARGET, "tensorParallelSize": 1, "devices": [0, 1]}), "devices"),
    (
        "pipeline-across-nodes",
        spec(
            backend="pytorch", target={"model": TARGET, "tensorParallelSize": 2, "nodes": 2, "pipelineParallelSize": 2}
        ),
        "pipelineParallelSize",
    ),
    (
        "ranks-not-a-multiple-of-nodes",
        spec(backend="pytorch", target={"model": TARGET, "tensorParallelSize": 3, "nodes": 2}),
        "nodes",
    ),
    (
        "devices-on-several-nodes",
        spec(backend="pytorch", target={"model": TARGET, "tensorParallelSize": 2, "nodes": 2, "devices": [0, 1]}),
        "devices",
    ),
    ("nodes-on-the-engine-path", spec(target={"model": TARGET, "tensorParallelSize": 2, "nodes": 2}), "target.nodes"),
    (
        "pipeline-with-drafting",
        spec(
            backend="pytorch",
            target={"model": TARGET, "pipelineParallelSize": 2},
            speculation={"mode": "ngram", "ngram": {"maxDraftLen": 3}},
        ),
        "pipelineParallelSize",
    ),
    # the block of the chosen mode, for every mode that has one (generated from the registry)
    *((f"{m.name}-without-block", spec(speculation={"mode": m.name}), m.name) for m in MODES.values() if m.block),
    (
        "draft-target-and-redrafter-blocks",
        spec(speculation={**draft_target(), "redrafter": redrafter()["redrafter"]}),
        "redrafter",
    ),
    ("draft-len-above-max-draft-len", spec(speculation=draft_target(draftLen=8, maxDraftLen=4)), "draftLen"),
    ("draft-len-word-not-auto", spec(speculation=draft_target(draftLen="max")), "draftLen"),
    ("auto-draft-len-without-max-draft-len", spec(speculation=draft_target(draftLen="auto")), "maxDraftLen"),
    ("temperature-with-greedy", spec(speculation=redrafter(greedy=True, temperature=0.7)), "temperature"),
    ("kv-cache-fp8-without-fp8-quantization", spec(target={"model": TARGET, "kvCacheDtype": "fp8"}), "kvCacheDtype"),
    (
        "draft-target-without-block-reuse",
        spec(speculation=draft_target(), runtime={"kvCache": {"enableBlockReuse": False}}),
        "enableBlockReuse",
    ),
    ("claim-name-and-storage-class", spec(cache={"claimName": "engines", "storageClassName": "fast"}), "claimName"),
    ("max-input-len-not-below-max-seq-len", spec(engine={"maxInputLen": 4096, "maxSeqLen": 4096}), "maxInputLen"),
    ("pytorch-redrafter", spec(backend="pytorch", speculation=redrafter()), "mode"),
    ("port-reserved-by-the-backend", spec(runtime={"port": 8001}), "port"),
    ("rearm-without-speculation", spec(speculation={"mode": "none", "rearm": {"enabled": True}}), "rearm"),
    (
        "rearm-with-max-concurrency",
        spec(backend="pytorch", speculation={**eagle3(maxConcurrency=8), "rearm": {"enabled": True}}),
        "rearm",
    ),
    (
        "rearm-cooldown-below-a-minute",
        spec(speculation={**draft_target(), "rearm": {"enabled": True, "cooldownSeconds": 30}}),
        "cooldownSeconds",
    ),
    (
        "low-latency-gemm-on-fp16-target",
        spec(engine={"tuning": {"lowLatencyGemmPlugin": True}}),
        "lowLatencyGemmPlugin",
    ),
    ("engine-tuning-on-pytorch", spec(backend="pytorch", engine={"tuning": {"useFusedMlp": False}}), "tuning"),
    ("gpt-attention-plugin-int32", spec(engine={"tuning": {"gptAttentionPlugin": "int32"}}), "gptAttentionPlugin"),
    # --- list-type set (API server) / pydantic validator ----------------------------------------------
    ("duplicate-devices", spec(target={"model": TARGET, "tensorParallelSize": 2, "devices": [0, 0]}), "devices"),
    # --- Pod fields passed through: what a Pod or Job would refuse later ------------------------------
    ("pod-label-value-leading-dash", spec(build={"podLabels": {"team": "-lead"}}), "podLabels"),
    ("pod-label-value-too-long", spec(build={"podLabels": {"team": "a" * 64}}), "podLabels"),
    ("pod-label-key-with-space", spec(build={"podLabels": {"my team": "ml"}}), "podLabels"),
    ("pod-label-key-name-too-long", spec(build={"podLabels": {"example.com/" + "a" * 64: "x"}}), "podLabels"),
    ("pod-label-key-prefix-too-long", spec(build={"podLabels": {"a" * 254 + "/x": "x"}}), "podLabels"),
    ("pod-annotation-key-without-name", spec(build={"podAnnotations": {"example.com/": "x"}}), "podAnnotations"),
    ("pod-annotation-value-too-long", spec(build={"podAnnotations": {"note": "x" * 3073}}), "podAnnotations"),
    ("build-node-selector-key-invalid", spec(build={"nodeSelector": {"gpu type": "h100"}}), "nodeSelector"),
    ("runtime-node-selector-value-invalid", spec(runtime={"nodeSelector": {"gpu": "h100 sxm"}}), "nodeSelector"),
    ("storage-class-name-path", spec(cache={"storageClassName": "../../etc/passwd"}), "storageClassName"),
    ("claim-name-padded", spec(cache={"claimName": "  engines  "}), "claimName"),
    ("runtime-image-padded", spec(runtime={"image": " padded "}), "image"),
    ("build-image-with-inner-space", spec(build={"image": "nvcr.io/nvidia/tritonserver: 26.07"}), "image"),
    ("build-image-uppercase-repository", spec(build={"image": "nvcr.io/NVIDIA/tritonserver:26.07"}), "image"),
    ("toleration-key-invalid", spec(runtime={"tolerations": [{"key": "bad key", "operator": "Exists"}]}), "key"),
    (
        "toleration-empty-key-with-equal",
        spec(runtime={"tolerations": [{"operator": "Equal", "value": "x", "effect": "NoSchedule"}]}),
        "operator",
    ),
    (
        "toleration-exists-with-value",
        spec(build={"tolerations": [{"key": "dedicated", "operator": "Exists", "value": "ml"}]}),
        "value",
    ),
    (
        "toleration-seconds-without-no-execute",
        spec(
            build={"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]}
        ),
        "tolerationSeconds",
    ),
    ("toleration-value-invalid", spec(runtime={"tolerations": [{"key": "k", "value": "a b"}]}), "value"),
    ("resource-quantity-with-space", spec(build={"resources": {"limits": {"memory": "1.5 Gi"}}}), "limits"),
    ("resource-quantity-bad-suffix", spec(build={"resources": {"limits": {"memory": "1ki"}}}), "limits"),
    ("resource-quantity-negative", spec(runtime={"resources": {"requests": {"cpu": -1}}}), "requests"),
    ("resource-quantity-negative-string", spec(runtime={"resources": {"requests": {"cpu": "-500m"}}}), "requests"),
    ("resource-name-not-standard", spec(runtime={"resources": {"limits": {"gpu": 1}}}), "limits"),
    (
        "resource-request-above-limit",
        spec(runtime={"resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "1025Mi"}}}),
        "requests",
    ),
    (
        "affinity-pod-term-without-topology-key",
        spec(
            runtime={
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "web"}}}
                        ]
                    }
                }
            }
        ),
        "topologyKey",
    ),
    (
        "affinity-node-selector-terms-not-a-list",
        spec(
            runtime={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": {"matchExpressions": []}
                        }
                    }
                }
            }
        ),
        "nodeSelectorTerms",
    ),
    (
        "affinity-weight-not-an-integer",
        spec(
            runtime={
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": "10", "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                        ]
                    }
                }
            }
        ),
        "weight",
    ),
    # --- speculation modes (specdec.modes) and backends -------------------------------------------------
    (
        "pytorch-draft-target-max-draft-len",
        spec(backend="pytorch", speculation=draft_target(draftLen=4, maxDraftLen=8)),
        "maxDraftLen",
    ),
    (
        "pytorch-fp8-quantization",
        spec(backend="pytorch", target={"model": TARGET, "quantization": "fp8"}),
        "quantization",
    ),
    (
        "pytorch-fp8-draft",
        spec(backend="pytorch", speculation=draft_target(draft={"model": DRAFT, "quantization": "fp8"})),
        "quantization",
    ),
    ("eagle3-on-tensorrt", spec(speculation=eagle3()), "mode"),
    ("eagle3-without-draft-model", spec(backend="pytorch", speculation={"mode": "eagle3", "eagle3": {}}), "draftModel"),
    (
        "eagle3-top-k-without-dynamic-tree",
        spec(backend="pytorch", speculation=eagle3(dynamicTreeMaxTopK=4)),
        "dynamicTreeMaxTopK",
    ),
    (
        "eagle3-dynamic-tree-without-top-k",
        spec(backend="pytorch", speculation=eagle3(useDynamicTree=True)),
        "useDynamicTree",
    ),
    ("mtp-on-tensorrt", spec(speculation={"mode": "mtp", "mtp": {}}), "mode"),
    ("ngram-on-tensorrt", spec(speculation={"mode": "ngram", "ngram": {}}), "mode"),
    (
        "ngram-window-without-threshold",
        spec(backend="pytorch", speculation={"mode": "ngram", "ngram": {"acceptanceRateWindowSize": 100}}),
        "acceptanceRateThreshold",
    ),
    (
        "ngram-max-concurrency-zero",
        spec(backend="pytorch", speculation={"mode": "ngram", "ngram": {"maxConcurrency": 0}}),
        "maxConcurrency",
    ),
    (
        "mtp-relaxed-top-k-zero",
        spec(backend="pytorch", speculation={"mode": "mtp", "mtp": {"relaxedAcceptance": {"topK": 0}}}),
        "topK",
    ),
    ("sa-on-tensorrt", spec(speculation={"mode": "sa", "sa": {}}), "mode"),
    (
        "sa-ngram-size-zero",
        spec(backend="pytorch", speculation={"mode": "sa", "sa": {"maxMatchingNgramSize": 0}}),
        "maxMatchingNgramSize",
    ),
    (
        "sa-global-pool-ngram-size-above-64",
        spec(
            backend="pytorch", speculation={"mode": "sa", "sa": {"enableGlobalPool": True, "maxMatchingNgramSize": 65}}
        ),
        "maxMatchingNgramSize",
    ),
    ("auto-on-tensorrt", spec(speculation={"mode": "auto"}), "mode"),
    (
        "pard-on-tensorrt",
        spec(speculation={"mode": "pard", "pard": {"draftModel": "hf://amd/PARD-Llama-3.2-1B"}}),
        "mode",
    ),
    ("pard-without-draft-model", spec(backend="pytorch", speculation={"mode": "pard", "pard": {}}), "draftModel"),
    (
        "dflash-on-tensorrt",
        spec(
            speculation={"mode": "dflash", "dflash": {"draftModel": "hf://z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"}}
        ),
        "mode",
    ),
    ("dflash-without-draft-model", spec(backend="pytorch", speculation={"mode": "dflash", "dflash": {}}), "draftModel"),
    (
        "dspark-on-tensorrt",
        spec(speculation={"mode": "dspark", "dspark": {"draftModel": "hf://deepseek-ai/dspark_qwen3_4b_block7"}}),
        "mode",
    ),
    ("dspark-without-draft-model", spec(backend="pytorch", speculation={"mode": "dspark", "dspark": {}}), "draftModel"),
    (
        "dspark-block-size-not-draft-len",
        spec(
            backend="pytorch",
            speculation={
                "mode": "dspark",
                "dspark": {"draftModel": "hf://deepseek-ai/dspark_qwen3_4b_block7", "maxDraftLen": 4, "blockSize": 7},
            },
        ),
        "blockSize",
    ),
    ("save-state-on-tensorrt", spec(speculation={"mode": "saveState", "saveState": {}}), "mode"),
    (
        "save-state-layer-twice",
        spec(backend="pytorch", speculation={"mode": "saveState", "saveState": {"eagle3LayersToCapture": [1, 1]}}),
        "eagle3LayersToCapture",
    ),
    (
        "schedule-with-max-concurrency",
        spec(backend="pytorch", speculation={"mode": "sa", "sa": {"maxConcurrency": 8, "draftLenSchedule": {"4": 4}}}),
        "draftLenSchedule",
    ),
    (
        "schedule-key-not-a-batch-size",
        spec(backend="pytorch", speculation={"mode": "ngram", "ngram": {"draftLenSchedule": {"four": 4}}}),
        "draftLenSchedule",
    ),
    (
        "schedule-above-max-draft-len",
        spec(backend="pytorch", speculation={"mode": "sa", "sa": {"draftLenSchedule": {"4": 4, "8": 5}}}),
        "draftLenSchedule",
    ),
    (
        "schedule-zero-tier-one-engine",
        spec(
            backend="pytorch",
            speculation={
                "mode": "pard",
                "pard": {"draftModel": "hf://amd/PARD-Llama-3.2-1B", "draftLenSchedule": {"4": 4, "32": 0}},
            },
        ),
        "draftLenSchedule",
    ),
    (
        "eagle3-total-draft-tokens-without-dynamic-tree",
        spec(
            backend="pytorch",
            speculation={
                "mode": "eagle3",
                "eagle3": {"draftModel": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "maxTotalDraftTokens": 3},
            },
        ),
        "maxTotalDraftTokens",
    ),
    (
        "eagle3-layer-twice",
        spec(
            backend="pytorch",
            speculation={
                "mode": "eagle3",
                "eagle3": {"draftModel": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3LayersToCapture": [1, 1]},
            },
        ),
        "eagle3LayersToCapture",
    ),
    (
        "mtp-dynamic-tree-without-draft-len",
        spec(backend="pytorch", speculation={"mode": "mtp", "mtp": {"useDynamicTree": True, "dynamicTreeMaxTopK": 4}}),
        "maxDraftLen",
    ),
    (
        "save-state-two-replicas",
        spec(backend="pytorch", speculation={"mode": "saveState", "saveState": {}}, runtime={"replicas": 2}),
        "runtime.replicas",
    ),
    (
        "save-state-path-escapes-the-claim",
        spec(backend="pytorch", speculation={"mode": "saveState", "saveState": {"output": {"path": "../models"}}}),
        "path",
    ),
]

CEL: frozenset[str] = frozenset(
    {
        *(f"{m.name}-without-block" for m in MODES.values() if m.block),
        "devices-longer-than-tp",
        "pipeline-across-nodes",
        "ranks-not-a-multiple-of-nodes",
        "devices-on-several-nodes",
        "nodes-on-the-engine-path",
        "pipeline-with-drafting",
        "draft-target-and-redrafter-blocks",
        "draft-len-above-max-draft-len",
        "auto-draft-len-without-max-draft-len",
        "temperature-with-greedy",
        "kv-cache-fp8-without-fp8-quantization",
        "draft-target-without-block-reuse",
        "claim-name-and-storage-class",
        "max-input-len-not-below-max-seq-len",
        "pytorch-redrafter",
        "port-reserved-by-the-backend",
        "rearm-without-speculation",
        "rearm-with-max-concurrency",
        "low-latency-gemm-on-fp16-target",
        "engine-tuning-on-pytorch",
        "pod-label-key-with-space",
        "pod-label-key-name-too-long",
        "pod-label-key-prefix-too-long",
        "pod-annotation-key-without-name",
        "build-node-selector-key-invalid",
        "toleration-key-invalid",
        "toleration-empty-key-with-equal",
        "toleration-exists-with-value",
        "toleration-seconds-without-no-execute",
        "resource-name-not-standard",
        "resource-request-above-limit",
        "pytorch-draft-target-max-draft-len",
        "pytorch-fp8-quantization",
        "pytorch-fp8-draft",
        "eagle3-on-tensorrt",
        "eagle3-top-k-without-dynamic-tree",
        "eagle3-dynamic-tree-without-top-k",
        "mtp-on-tensorrt",
        "ngram-on-tensorrt",
        "ngram-window-without-threshold",
        "sa-on-tensorrt",
        "sa-ngram-size-zero",
        "sa-global-pool-ngram-size-above-64",
        "auto-on-tensorrt",
        "pard-on-tensorrt",
        "pard-without-draft-model",
        "dflash-on-tensorrt",
        "dflash-without-draft-model",
        "dspark-on-tensorrt",
        "dspark-without-draft-model",
        "dspark-block-size-not-draft-len",
        "save-state-on-tensorrt",
        "save-state-layer-twice",
        "save-state-two-replicas",
        "schedule-with-max-concurrency",
        "schedule-key-not-a-batch-size",
        "schedule-above-max-draft-len",
        "schedule-zero-tier-one-engine",
        "eagle3-total-draft-tokens-without-dynamic-tree",
        "eagle3-layer-twice",
        "mtp-dynamic-tree-without-draft-len",
    }
)

LIST_SET: frozenset[str] = frozenset({"duplicate-devices"})

DIGEST = "sha256:" + "0123456789abcdef" * 4

VALID_SPECS: list[tuple[str, dict[str, Any]]] = [
    ("auto-draft-len", spec(speculation=draft_target(draftLen="auto", maxDraftLen=8))),
    ("rearm", spec(speculation={**draft_target(), "rearm": {"enabled": True, "cooldownSeconds": 60}})),
    ("rearm-off-without-speculation", spec(speculation={"mode": "none", "rearm": {"enabled": False}})),
    (
        "rearm-on-pytorch-with-a-threshold",
        spec(
            backend="pytorch",
            speculation={
                **eagle3(acceptanceRateWindowSize=64, acceptanceRateThreshold=0.5),
                "rearm": {"enabled": True},
            },
        ),
    ),
    (
        "labels-annotations-node-selectors",
        spec(
            build={
                "podLabels": {"example.com/team": "a-b_c.d", "tier": "", "app.kubernetes.io/name": "x"},
                "podAnnotations": {"Example.com/Note": "free text: spaces, 'quotes' and\nnewlines", "a": ""},
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            },
            runtime={
                "nodeSelector": {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "p5.48xlarge"}
            },
        ),
    ),
    (
        "images",
        spec(
            build={"image": "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"},
            runtime={"image": f"registry:5000/a/b@{DIGEST}"},
        ),
    ),
    (
        "images-short-and-tag-with-digest",
        spec(build={"image": "ubuntu"}, runtime={"image": f"localhost/my_org/run-time__x:v1.2_rc-3@{DIGEST}"}),
    ),
    (
        "tolerations",
        spec(
            build={
                "tolerations": [
                    {"operator": "Exists"},
                    {
                        "key": "node.kubernetes.io/not-ready",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    },
                ]
            },
            runtime={
                "tolerations": [
                    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "", "effect": "NoSchedule"},
                ]
            },
        ),
    ),
    (
        "resources",
        spec(
            build={
                "resources": {
                    "limits": {"memory": "64Gi", "cpu": 8, "hugepages-2Mi": "1Gi", "example.com/nic": 1},
                    "requests": {"memory": "64Gi", "cpu": "7500m", "ephemeral-storage": "1e11", "example.com/nic": "1"},
                }
            },
            runtime={
                "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi"},
                    "requests": {"cpu": "1000m", "memory": "1073741824"},
                }
            },
        ),
    ),
    (
        "affinity",
        spec(
            runtime={
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.product",
                                            "operator": "In",
                                            "values": ["NVIDIA-H100-80GB-HBM3"],
                                        },
                                        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},
                                    ]
                                }
                            ]
                        },
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 50,
                                "preference": {
                                    "matchExpressions": [
                                        {
                                            "key": "topology.kubernetes.io/zone",
                                            "operator": "In",
                                            "values": ["us-east-1a"],
                                        }
                                    ]
                                },
                            }
                        ],
                    },
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "specdec-runtime"}},
                                    "topologyKey": "kubernetes.io/hostname",
                                    "matchLabelKeys": ["pod-template-hash"],
                                },
                            }
                        ]
                    },
                }
            }
        ),
    ),
    (
        "engine-tuning-edges",
        spec(
            target={"model": TARGET, "quantization": "fp8"},
            engine={"tuning": {"lowLatencyGemmPlugin": True, "reduceFusion": {"target": True}}},
        ),
    ),
    ("low-latency-gemm-off-on-fp16-target", spec(engine={"tuning": {"lowLatencyGemmPlugin": False}})),
    ("engine-limits-on-pytorch", spec(backend="pytorch", engine={"maxBatchSize": 8})),
    (
        "ngram-schedule-with-a-zero-tier",  # the n-gram drafter runs outside the target's engine
        spec(
            backend="pytorch", speculation={"mode": "ngram", "ngram": {"draftLenSchedule": {"4": 4, "8": 2, "64": 0}}}
        ),
    ),
    (
        "sa-schedule-unordered-keys",
        spec(backend="pytorch", speculation={"mode": "sa", "sa": {"draftLenSchedule": {"32": 1, "4": 4, "8": 2}}}),
    ),
    (
        "eagle3-dynamic-tree-total-at-its-bounds",
        spec(
            backend="pytorch",
            speculation={
                "mode": "eagle3",
                "eagle3": {
                    "draftModel": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                    "maxDraftLen": 6,
                    "useDynamicTree": True,
                    "dynamicTreeMaxTopK": 10,
                    "maxTotalDraftTokens": 60,
                    "eagle3LayersToCapture": [1, 15, 28],
                    "saConfig": {"threshold": 4},
                },
            },
        ),
    ),
    (
        "mtp-every-option",
        spec(
            backend="pytorch",
            speculation={
                "mode": "mtp",
                "mtp": {
                    "maxDraftLen": 3,
                    "useDynamicTree": True,
                    "dynamicTreeMaxTopK": 4,
                    "maxTotalDraftTokens": 3,
                    "useMtpVanilla": True,
                    "saConfig": {},
                    "relaxedAcceptance": {"topK": 10, "delta": 0.6},
                },
            },
        ),
    ),
    (
        "save-state-every-option",
        spec(
            backend="pytorch",
            speculation={
                "mode": "saveState",
                "saveState": {
                    "output": {"claimName": "eagle-data", "path": "llama8b/run-1"},
                    "writeInterval": 1,
                    "filePrefix": "dp_0",
                    "eagle3LayersToCapture": [-1, 1, 15, 28],
                },
            },
        ),
    ),
]
