"""Admission from the models' facts: vocabulary, tensor parallelism and GPU memory, with the numbers.

Model facts come from the catalog (simulated fetch data); GPU nodes are simulated nodes as the local
cluster has them (specdec_dev.nodes: H100 80 GB), and a few others built the same way.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from specdec.admission.checks import Observed, served_models
from specdec.admission.gpu_nodes import GpuNodes, gpu_node
from specdec.admission.memory import Served, kv_bytes_per_token, weight_bytes_per_gpu
from specdec.admission.model_catalog import CATALOG_SOURCE, catalog_facts
from specdec.admission.model_facts import ModelFacts
from specdec.admission.validation import parse_spec
from specdec.plan import Plan, Problem, plan
from specdec.status.deployment import DeploymentInput, deployment_conditions
from specdec_dev import nodes as dev_nodes
from tests.unit.helpers import EXAMPLE_70B, EXAMPLES, SETTINGS, deployment, load_example

GIB = 1024**3


def simulated_gpu_node(name: str, product: str, memory_mib: str, gpus: int = 8) -> dict:
    node = dev_nodes.gpu_node(0)
    node["metadata"]["name"] = name
    node["metadata"]["labels"].update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": memory_mib})
    node["status"]["allocatable"]["nvidia.com/gpu"] = str(gpus)
    return node


def observed(*node_objects: dict) -> Observed:
    return Observed(gpu_nodes=GpuNodes(tuple(n for n in map(gpu_node, node_objects) if n is not None), ""))


SIMULATED_H100 = observed(*dev_nodes.dev_nodes(cpu_nodes=1, gpu_nodes=2))  # gpu_node() skips the CPU node
SIMULATED_A100_40GB = simulated_gpu_node("a100-0", "NVIDIA-A100-SXM4-40GB", "40960")
SIMULATED_H200 = simulated_gpu_node("h200-0", "NVIDIA-H200", "143771")


def admitted(spec: dict, seen: Observed = SIMULATED_H100) -> Plan | Problem:
    return plan(deployment(spec), SETTINGS, seen)


def refused(spec: dict, reason: str, seen: Observed = SIMULATED_H100) -> str:
    result = admitted(spec, seen)
    assert isinstance(result, Problem) and result.reason == reason, result
    return result.message


def blog_example() -> dict:
    return copy.deepcopy(load_example(EXAMPLE_70B)["spec"])


def llama70b_fp16(**target: object) -> dict:
    return {"target": {"model": "hf://meta-llama/Llama-3.1-70B-Instruct", "dtype": "float16", **target}}


# --- vocabulary ------------------------------------------------------------------------------------


def test_draft_of_another_tokenizer_is_refused_naming_both_models_and_vocab_sizes():
    spec = blog_example()
    spec["speculation"]["draftTarget"]["draft"]["model"] = "hf://Qwen/Qwen2.5-0.5B-Instruct"
    message = refused(spec, "VocabularyMismatch", Observed())  # needs no nodes
    assert message.startswith(
        "the draft and the target do not share a tokenizer (draft Qwen/Qwen2.5-0.5B-Instruct: "
        "the qwen2 tokenizer, vocab_size 151936; target meta-llama/Llama-3.1-70B-Instruct: "
        "the llama3 tokenizer, vocab_size 128256)"
    )
    # the smallest draft of the target's family, and where the facts came from
    assert message.endswith(
        "e.g. meta-llama/Llama-3.2-1B-Instruct (facts of meta-llama/Llama-3.1-70B-Instruct and "
        f"Qwen/Qwen2.5-0.5B-Instruct: {CATALOG_SOURCE})"
    )


def test_llama2_draft_for_a_llama3_target_is_refused():
    spec = blog_example()
    spec["speculation"]["draftTarget"]["draft"].update(model="hf://meta-llama/Llama-2-7b-hf", quantization="none")
    assert (
        "vocab_size 32000; target meta-llama/Llama-3.1-70B-Instruct: the llama3 tokenizer, vocab_size 128256"
        in refused(spec, "VocabularyMismatch", Observed())
    )


def qwen_pair(acceptance: str) -> dict:
    return {
        "target": {"model": "hf://Qwen/Qwen2.5-7B-Instruct", "family": "qwen", "devices": [1]},
        "speculation": {
            "mode": "draftTarget",
            "draftTarget": {
                "draft": {"model": "hf://Qwen/Qwen2.5-0.5B-Instruct", "family": "qwen", "devices": [0]},
                "draftLen": 4,
                "acceptance": acceptance,
            },
        },
    }


def test_same_tokenizer_with_padded_vocab_passes_token_acceptance_but_not_logits():
    """Qwen2.5 pads its embeddings per size (0.5B: 151936, 7B: 152064) over one tokenizer: token ids agree,
    logit vectors do not have the same length."""
    assert isinstance(admitted(qwen_pair("tokens")), Plan)
    message = refused(qwen_pair("logits"), "VocabularyMismatch")
    assert "vocab_size 151936" in message and "vocab_size 152064" in message and "acceptance: tokens" in message


# --- tensor parallelism ----------------------------------------------------------------------------


def test_tensor_parallel_size_that_does_not_divide_the_heads_is_refused():
    message = refused(llama70b_fp16(tensorParallelSize=3), "TensorParallelDoesNotDivideHeads")
    assert message == (
        "spec.target.tensorParallelSize 3 does not divide the 64 attention heads of "
        "meta-llama/Llama-3.1-70B-Instruct (64 / 3 = 21.33): each GPU computes whole heads; "
        "sizes that work for it: 1, 2, 4, 8, 16, 32, 64 (facts of "
        f"meta-llama/Llama-3.1-70B-Instruct: {CATALOG_SOURCE})"
    )
    qwen = refused(
        {"target": {"model": "hf://Qwen/Qwen2.5-7B-Instruct", "family": "qwen", "tensorParallelSize": 8}},
        "TensorParallelDoesNotDivideHeads",
    )
    assert "8 does not divide the 28 attention heads of Qwen/Qwen2.5-7B-Instruct" in qwen
    assert qwen.endswith(
        f"sizes that work for it: 1, 2, 4, 28 (facts of Qwen/Qwen2.5-7B-Instruct: {CATALOG_SOURCE})"
    )  # 4 KV heads: 2 and 4 split them, 28 copies them


def test_kv_heads_must_split_evenly_or_be_copied():
    """Llama 3.2 3B: 24 attention heads, 8 KV heads; TP 3 divides the former, not the latter."""
    message = refused(
        {"target": {"model": "hf://meta-llama/Llama-3.2-3B-Instruct", "tensorParallelSize": 3}},
        "TensorParallelDoesNotDivideHeads",
        Observed(),
    )
    assert (
        "tensorParallelSize 3 and the 8 KV heads of meta-llama/Llama-3.2-3B-Instruct do not divide one another"
    ) in message
    assert isinstance(admitted(llama70b_fp16(tensorParallelSize=16), Observed()), Plan)  # 8 KV heads, each on 2 GPUs


def test_the_pytorch_draft_is_checked_at_the_targets_tensor_parallel_size():
    spec = {
        "backend": "pytorch",
        "target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct", "tensorParallelSize": 16},
        "speculation": {
            "mode": "draftTarget",
            "draftTarget": {"draft": {"model": "hf://meta-llama/Llama-3.2-3B-Instruct"}, "draftLen": 4},
        },
    }
    assert refused(spec, "TensorParallelDoesNotDivideHeads", Observed()).startswith(
        "spec.target.tensorParallelSize (the draft's on backend pytorch) 16 does not divide the 24 attention heads "
        "of meta-llama/Llama-3.2-3B-Instruct"
    )


# --- GPU memory ------------------------------------------------------------------------------------


def test_70b_fp16_on_one_80gb_gpu_is_refused_naming_the_numbers():
    message = refused(llama70b_fp16(), "ModelDoesNotFitGpu")
    assert message == (
        "the GPU cannot hold the weights: target meta-llama/Llama-3.1-70B-Instruct: 70.6B parameters × 2 bytes "
        "(float16) / tensorParallelSize 1 = 131.5 GiB, more than one NVIDIA-H100-80GB-HBM3 GPU (81559 MiB; 90% "
        "usable = 71.7 GiB). Use more GPUs (tensorParallelSize), quantization: fp8, or nodes with larger GPUs "
        f"(facts of meta-llama/Llama-3.1-70B-Instruct: {CATALOG_SOURCE})"
    )
    assert isinstance(admitted(llama70b_fp16(tensorParallelSize=2)), Plan)  # 65.7 GiB per GPU, and room for KV


def test_the_blogs_70b_fp8_and_1b_draft_fit_one_h100_together():
    result = admitted(blog_example())
    assert isinstance(result, Plan) and result.unchecked == ()
    served = {m.role: m for m in served_models(result.spec, Observed())}
    # FP8 weights, embeddings and LM head in float16: 68.5B × 1 + 2.1B × 2 bytes; the draft's are tied.
    assert weight_bytes_per_gpu(served["target"]) / GIB == pytest.approx(67.71, abs=0.01)
    assert weight_bytes_per_gpu(served["draft"]) / GIB == pytest.approx(1.40, abs=0.01)
    assert kv_bytes_per_token(served["target"]) == 80 * 2 * 8 * 128 * 1  # FP8 KV cache


def test_a_kv_cache_share_too_small_for_one_sequence_is_refused():
    spec = blog_example()
    spec["runtime"]["kvCache"]["freeGpuMemoryFraction"] = 0.05
    message = refused(spec, "ModelDoesNotFitGpu")
    assert "the GPU holds 69.1 GiB of weights" in message and "leaving 2.57 GiB" in message
    # Two engines on the GPU: whichever starts later gets 5% of what the earlier left.
    assert (
        "the target and the draft engines each take 5% of the memory free when they start, the later one 5% of "
        "what the earlier left, in either order; with the target's first, the target's KV cache gets 0.13 GiB, "
        "less than one sequence of 4096 tokens needs: target 0.62 GiB (163840 bytes per token: 80 layers × 2 "
        "(K, V) × 8 KV heads × 128 × 1 byte)"
    ) in message


def test_draft_and_target_on_separate_gpus_are_sized_per_gpu():
    spec = load_example("llama-2-13b-draft-7b-logits")["spec"]
    result = admitted(spec, observed(SIMULATED_A100_40GB))  # 13B fp16 = 24.2 GiB on GPU 1, 7B = 12.6 GiB on GPU 0
    assert isinstance(result, Plan), result
    spec = copy.deepcopy(spec)
    spec["target"]["devices"] = [0]  # both on GPU 0 of a 40 GB A100
    message = refused(spec, "ModelDoesNotFitGpu", observed(SIMULATED_A100_40GB))
    assert message.startswith(
        "the GPU cannot hold the weights: target meta-llama/Llama-2-13b-hf: 13B parameters × 2 "
        "bytes (float16) / tensorParallelSize 1 = 24.2 GiB + draft meta-llama/Llama-2-7b-hf: "
        "6.74B parameters × 2 bytes (float16) / tensorParallelSize 1 = 12.6 GiB (= 36.8 GiB), "
        "more than one NVIDIA-A100-SXM4-40GB GPU (40960 MiB; 90% usable = 36.0 GiB)"
    )


def test_every_node_the_pod_may_land_on_must_fit_and_the_message_says_which_do():
    mixed = observed(dev_nodes.gpu_node(0), SIMULATED_A100_40GB)
    message = refused(blog_example(), "ModelDoesNotFitGpu", mixed)
    assert "more than one NVIDIA-A100-SXM4-40GB GPU (40960 MiB" in message
    assert message.endswith(
        "It fits the NVIDIA-H100-80GB-HBM3 GPUs of other nodes: select them with "
        "spec.runtime.nodeSelector (nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3) (facts of "
        "meta-llama/Llama-3.1-70B-Instruct and meta-llama/Llama-3.2-1B-Instruct: "
        f"{CATALOG_SOURCE})"
    )
    pinned = blog_example()
    pinned["runtime"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert isinstance(admitted(pinned, mixed), Plan)


def test_deepseek_r1_fp8_needs_gpus_larger_than_80gb():
    """685B FP8 parameters over 8 GPUs: 80 GiB each before any KV cache; an H200 (141 GB) holds it."""
    spec = load_example("deepseek-r1-mtp")["spec"]
    message = refused(spec, "ModelDoesNotFitGpu")
    assert (
        "target deepseek-ai/DeepSeek-R1: 685B parameters × 1 byte (fp8, embeddings bfloat16) / "
        "tensorParallelSize 8 = 80.0 GiB, more than one NVIDIA-H100-80GB-HBM3 GPU"
    ) in message
    assert "quantization: fp8" not in message  # already FP8, and backend pytorch
    assert isinstance(admitted(spec, observed(SIMULATED_H200)), Plan)
    r1 = served_models(parse_spec(spec), Observed())[0]
    assert kv_bytes_per_token(r1) == 61 * (512 + 64) * 2  # one latent per layer, bfloat16, on every GPU


def test_memory_is_not_checked_without_nodes_and_the_plan_says_why():
    offline = admitted(llama70b_fp16(), Observed())
    assert offline.unchecked == ("GPU memory, as the operator does not read Nodes here (offline plan)",)
    too_few_gpus = admitted(llama70b_fp16(tensorParallelSize=16))  # no simulated node has 16 GPUs
    assert too_few_gpus.unchecked == (
        "GPU memory, as no node with a nvidia.com/gpu.memory label matches the runtime pods' node selector "
        "(nvidia.com/gpu.present=true) and has 16 allocatable GPU(s)",
    )
    unreadable = Observed(gpu_nodes=GpuNodes(None, "the operator may not list Nodes (RBAC: list nodes)"))
    assert admitted(llama70b_fp16(), unreadable).spec_valid_message == (
        "spec accepted; not checked: GPU memory, as the operator may not list Nodes (RBAC: list nodes)"
    )


def test_a_model_without_facts_is_not_refused_and_the_status_says_what_was_skipped():
    spec = {"target": {"model": "pvc://models/my-llama", "dtype": "float16"}}
    result = admitted(spec)
    assert isinstance(result, Plan)
    assert result.unchecked == (
        "the vocabulary, attention heads and GPU memory of pvc://models/my-llama (the "
        "operator reads the files of the hf:// checkpoints it fetches, not of pvc:// ones)",
    )
    assert result.facts_awaited == ()  # nothing to wait for: it is built unchecked
    _, conditions = deployment_conditions(DeploymentInput(result, {}, None, False, None))
    valid = next(c for c in conditions if c.type == "SpecValid")
    assert (valid.status, valid.reason) == (True, "Valid")
    assert valid.message.startswith(
        "spec accepted; not checked: the vocabulary, attention heads and GPU memory of pvc://models/my-llama"
    )


def test_a_draft_without_facts_still_has_its_target_checked():
    spec = blog_example()
    spec["target"].update(quantization="none", dtype="float16")
    spec["speculation"]["draftTarget"]["draft"]["model"] = "hf://meta-llama/Llama-2-7b-chat-hf"  # not in the catalog
    message = refused(spec, "ModelDoesNotFitGpu")
    assert "target meta-llama/Llama-3.1-70B-Instruct: 70.6B parameters × 2 bytes" in message


# --- where the facts come from: a ModelCache's fetched files first, the catalog second --------------

UNKNOWN = "hf://example-org/llama-70b-finetune"  # not in the catalog


def from_files(hub_id: str, tokenizer: str, **changes) -> ModelFacts:
    """A catalog model's facts as a fetch would have read them from its files."""
    return dataclasses.replace(catalog_facts(hub_id), tokenizer=tokenizer, source=f"the files of {hub_id}", **changes)


def fetched(facts: dict[str, ModelFacts | None], nodes: Observed = SIMULATED_H100) -> Observed:
    return Observed({(uri, "main"): f for uri, f in facts.items()}, nodes.gpu_nodes)


def test_fetched_facts_come_first_and_messages_say_so():
    """A 70B checkpoint the catalog does not know: no facts (its fetch is awaited), then its fetched facts
    refuse it; a catalog model's fetched facts win over the catalog's."""
    awaiting = admitted({"target": {"model": UNKNOWN}})
    assert awaiting.facts_awaited == (UNKNOWN,)
    assert awaiting.unchecked == (
        f"the vocabulary, attention heads and GPU memory of {UNKNOWN} (not in the operator's "
        "catalog: read from its files when its fetch finishes; no GPU work starts before)",
    )
    read = from_files("meta-llama/Llama-3.1-70B-Instruct", "vocab-sha256:aa", model="example-org/llama-70b-finetune")
    message = refused({"target": {"model": UNKNOWN}}, "ModelDoesNotFitGpu", fetched({UNKNOWN: read}))
    assert "target example-org/llama-70b-finetune: 70.6B parameters × 2 bytes (float16)" in message
    assert message.endswith("(facts of example-org/llama-70b-finetune: the files of meta-llama/Llama-3.1-70B-Instruct)")
    fewer_heads = from_files("meta-llama/Llama-3.1-8B-Instruct", "vocab-sha256:bb", attention_heads=30, kv_heads=6)
    spec = {"target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct", "tensorParallelSize": 4}}
    assert isinstance(admitted(spec), Plan)  # the catalog's 32 heads divide by 4
    assert "does not divide the 30 attention heads" in refused(
        spec, "TensorParallelDoesNotDivideHeads", fetched({"hf://meta-llama/Llama-3.1-8B-Instruct": fewer_heads})
    )


def test_a_fetch_without_facts_ends_the_wait_and_the_checks_are_skipped():
    result = admitted({"target": {"model": UNKNOWN}}, fetched({UNKNOWN: None}))
    assert isinstance(result, Plan) and result.facts_awaited == ()
    assert "its fetch found no config.json, safetensors or tokenizer to read" in result.unchecked[0]


def small_pair(draft: str = "hf://meta-llama/Llama-3.2-1B-Instruct") -> dict:
    return {
        "target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct", "devices": [1]},
        "speculation": {
            "mode": "draftTarget",
            "draftTarget": {"draft": {"model": draft, "devices": [0]}, "draftLen": 4},
        },
    }


def test_tokenizers_read_from_files_are_compared_by_their_identity():
    target, draft = "hf://meta-llama/Llama-3.1-8B-Instruct", "hf://meta-llama/Llama-3.2-1B-Instruct"
    same = fetched({target: from_files(target[5:], "vocab-sha256:aa"), draft: from_files(draft[5:], "vocab-sha256:aa")})
    assert admitted(small_pair(), same).unchecked == ()
    other = fetched(
        {target: from_files(target[5:], "vocab-sha256:aa"), draft: from_files(draft[5:], "vocab-sha256:bb")}
    )
    message = refused(small_pair(), "VocabularyMismatch", other)
    assert "draft meta-llama/Llama-3.2-1B-Instruct: tokenizer vocab-sha256:bb, vocab_size 128256" in message
    kinds = fetched(
        {target: from_files(target[5:], "vocab-sha256:aa"), draft: from_files(draft[5:], "sentencepiece-sha256:aa")}
    )
    assert (
        "(identities of different kinds: sentencepiece-sha256:aa, vocab-sha256:aa)"
        in admitted(small_pair(), kinds).unchecked[0]
    )


def test_a_catalog_family_and_a_file_identity_are_not_compared_but_vocab_sizes_still_are():
    """The target's facts from its files, the draft's from the catalog: the tokenizer check is skipped and
    SpecValid says why; logits acceptance still needs equal vocab sizes."""
    target = "hf://meta-llama/Llama-3.1-8B-Instruct"
    mixed = fetched({target: from_files(target[5:], "vocab-sha256:aa")})
    note = admitted(small_pair(), mixed).unchecked
    assert note == (
        "the tokenizers of meta-llama/Llama-3.2-1B-Instruct and meta-llama/Llama-3.1-8B-Instruct (the "
        f"draft's facts come from {CATALOG_SOURCE}, the target's from the files of "
        "meta-llama/Llama-3.1-8B-Instruct: a catalog family and an identity read from files are not "
        "comparable: family:llama3, vocab-sha256:aa)",
    )
    logits = small_pair("hf://meta-llama/Llama-2-7b-hf")
    logits["speculation"]["draftTarget"]["acceptance"] = "logits"
    assert "vocab_size 32000" in refused(logits, "VocabularyMismatch", mixed)


# --- the examples ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_is_admitted_on_facts_offline_and_on_the_simulated_h100s(path):
    """Every example's target and draft are in the catalog (checked on facts, not waved through), each plans
    offline, and on the local cluster's simulated H100 nodes each but DeepSeek-R1 fits (see the test above).
    A drafter in the target's engine (an EAGLE-3 head, a PARD/DFlash/DSpark draft, ReDrafter's drafter) is
    not in the catalog: its hf:// fetch is awaited, a pvc:// one is sized by estimated_head."""
    doc = yaml.safe_load(path.read_text())
    spec = parse_spec(doc["spec"])
    served = served_models(spec, Observed())
    assert all(isinstance(m, Served) and m.facts is not None for m in served if m.role != "drafter")
    drafters = {m.source.model for m in served if m.role == "drafter" and m.source.model != spec.target.model}
    assert isinstance(admitted(doc["spec"], Observed()), Plan)
    on_h100 = admitted(doc["spec"])
    if path.stem == "deepseek-r1-mtp":
        assert isinstance(on_h100, Problem) and on_h100.reason == "ModelDoesNotFitGpu"
    else:
        assert isinstance(on_h100, Plan), on_h100
        assert set(on_h100.facts_awaited) == {d for d in drafters if d.startswith("hf://")}
        assert all(any(d in note for d in drafters) for note in on_h100.unchecked), on_h100.unchecked


def test_served_models_follow_the_device_lists_on_tensorrt_and_the_target_on_pytorch():
    trt = {
        m.role: m.devices
        for m in served_models(parse_spec(load_example("llama-2-13b-draft-7b-logits")["spec"]), Observed())
    }
    assert trt == {"target": (1,), "draft": (0,)}
    torch = served_models(parse_spec(load_example("llama-3.1-8b-draft-1b-pytorch")["spec"]), Observed())
    assert [(m.role, m.devices, m.tensor_parallel_size) for m in torch] == [("target", (0,), 1), ("draft", (0,), 1)]


def test_a_canary_that_cannot_fit_beside_the_runtime_is_refused_with_the_numbers():
    spec = load_example("llama-2-13b-draft-7b-logits")["spec"]  # 2 GPUs a pod; the A100 node has 8: room for 4 pods
    spec["rollout"] = {"canary": {"enabled": True, "replicas": 3}}
    assert isinstance(admitted(spec, observed(SIMULATED_A100_40GB)), Plan)  # 1 + 3 pods
    spec["runtime"] = {**spec.get("runtime", {}), "replicas": 2}
    message = refused(spec, "CanaryDoesNotFit", observed(SIMULATED_A100_40GB))
    assert message.startswith(
        "2 runtime and 3 canary pod(s) of 2 GPU(s) each need 10 GPUs; the 1 node(s) they may land on have room "
        "for 4 such pod(s) (8 allocatable GPUs)"
    )
    spec["rollout"]["canary"]["enabled"] = False
    assert isinstance(admitted(spec, observed(SIMULATED_A100_40GB)), Plan)  # no canary: not its check
