"""Admission counts the drafter with the target on the GPUs they share: a draft model's weights and KV cache,
a drafter in the target's engine (an EAGLE-3 head, a PARD/DFlash/DSpark draft, ReDrafter's drafter) and the
KV cache of MTP layers, in the KV-cache budget TensorRT-LLM gives them (specdec.admission.memory).

Model facts come from the catalog (simulated fetch data) or, for a drafter, as a fetch reports them; GPU
nodes are simulated nodes built as the local cluster has them.
"""

from __future__ import annotations

import copy

import pytest

from specdec.admission.checks import Observed, served_models
from specdec.admission.memory import kv_bytes_per_token, weight_bytes_per_gpu
from specdec.admission.model_catalog import catalog_facts
from specdec.admission.model_facts import HEAD_ESTIMATE, ModelFacts, estimated_head
from specdec.admission.validation import parse_spec
from specdec.plan import Plan
from tests.unit.helpers import EXAMPLE_REDRAFTER, load_example
from tests.unit.test_admission import SIMULATED_H100, SIMULATED_H200, admitted, observed, refused, simulated_gpu_node

GIB = 1024**3
HEAD = "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
# A GPU on which Llama 3.1 8B in bfloat16 (15.0 GiB) fits with its KV cache, but not beside a 1.4 GiB head.
SMALL_GPU = simulated_gpu_node("small-0", "SIMULATED-17.5GB", "17920")


def spec_of(example: str, **runtime_kv: float) -> dict:
    spec = copy.deepcopy(load_example(example)["spec"])
    if runtime_kv:
        spec.setdefault("runtime", {}).setdefault("kvCache", {}).update(runtime_kv)
    return spec


def head_fetched(facts: ModelFacts | None, nodes: Observed = SIMULATED_H100) -> Observed:
    """The head's ModelCache is Fetched: with the facts its files gave, or None (no tokenizer, say)."""
    return Observed({(HEAD, "main"): facts}, nodes.gpu_nodes)


# --- a draft model -----------------------------------------------------------------------------------


def test_pytorch_draft_shares_the_targets_kv_budget_token_for_token():
    """One executor, one budget: 4096 tokens need 0.50 GiB of the target's and 0.12 GiB of the draft's KV
    cache; 1% of what the weights leave (0.54 GiB) holds the target's alone, not both."""
    message = refused(spec_of("llama-3.1-8b-draft-1b-pytorch", freeGpuMemoryFraction=0.01), "ModelDoesNotFitGpu")
    assert (
        "the GPU holds 17.3 GiB of weights (target meta-llama/Llama-3.1-8B-Instruct: 8.03B parameters × 2 bytes "
        "(bfloat16) / tensorParallelSize 1 = 15.0 GiB + draft meta-llama/Llama-3.2-1B-Instruct: 1.24B parameters "
        "× 2 bytes (bfloat16) / tensorParallelSize 1 = 2.3 GiB)"
    ) in message
    assert (
        "the target's and the draft's KV caches get 1% of that, 0.54 GiB, less than one sequence of 4096 tokens "
        "needs: target 0.50 GiB (131072 bytes per token: 32 layers × 2 (K, V) × 8 KV heads × 128 × 2 bytes) + "
        "draft 0.12 GiB (32768 bytes per token: 16 layers × 2 (K, V) × 8 KV heads × 64 × 2 bytes) = 0.62 GiB"
    ) in message
    assert "use a smaller draft, or use more GPUs" in message
    assert isinstance(admitted(spec_of("llama-3.1-8b-draft-1b-pytorch", freeGpuMemoryFraction=0.02)), Plan)


def test_tensorrt_draft_on_the_targets_gpu_fits_in_one_start_order():
    """Two engines, each taking 35% of the memory free when it starts: the blog's pair fits with the target
    first (0.90 GiB for its 0.62 GiB), though not with the draft first (0.59 GiB)."""
    assert isinstance(admitted(spec_of("llama-3.1-70b-fp8-draft-1b")), Plan)


# --- a drafter in the target's engine ----------------------------------------------------------------


def test_an_eagle3_head_whose_facts_are_unknown_is_sized_from_the_target():
    target = catalog_facts("meta-llama/Llama-3.1-8B-Instruct")
    head = estimated_head(HEAD.removeprefix("hf://"), target)
    assert head.parameters == 15 * 4096**2 + 4096 * 128256 and head.layers == 1
    assert head.source == HEAD_ESTIMATE
    # Its fetch gave no facts: the head is estimated, counted beside the target and named in the message.
    served = served_models(parse_spec(spec_of("llama-3.1-8b-eagle3")), head_fetched(None))
    assert [(m.role, m.name) for m in served] == [("target", "target"), ("drafter", "EAGLE-3 head")]
    assert weight_bytes_per_gpu(served[1]) / GIB == pytest.approx(1.45, abs=0.01)
    assert kv_bytes_per_token(served[1]) == 1 * 2 * 8 * 128 * 2
    message = refused(spec_of("llama-3.1-8b-eagle3"), "ModelDoesNotFitGpu", head_fetched(None, observed(SMALL_GPU)))
    assert message.startswith(
        "the GPU cannot hold the weights: target meta-llama/Llama-3.1-8B-Instruct: 8.03B parameters × 2 bytes "
        "(bfloat16) / tensorParallelSize 1 = 15.0 GiB + EAGLE-3 head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: "
        "0.777B estimated parameters × 2 bytes (bfloat16) / tensorParallelSize 1 = 1.4 GiB (= 16.4 GiB), more than "
        "one SIMULATED-17.5GB GPU (17920 MiB; 90% usable = 15.8 GiB). Use more GPUs (tensorParallelSize), a smaller "
        "draft, or nodes with larger GPUs"
    )
    assert HEAD_ESTIMATE in message  # where the head's numbers come from
    # The target alone fits there: the head made the difference.
    assert isinstance(
        admitted({"backend": "pytorch", "target": spec_of("llama-3.1-8b-eagle3")["target"]}, observed(SMALL_GPU)), Plan
    )


def test_an_eagle3_heads_fetched_facts_win_over_the_estimate():
    """A head as a fetch reads it (config.json with one layer; the parameter count here is the test's)."""
    read = ModelFacts.from_config(
        HEAD.removeprefix("hf://"),
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "vocab_size": 128256,
            "hidden_size": 4096,
            "num_hidden_layers": 1,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "torch_dtype": "float16",
        },
        parameters=400_000_000,
        tokenizer="vocab-sha256:aa",
        source="the files of the head",
    )
    result = admitted(spec_of("llama-3.1-8b-eagle3"), head_fetched(read))
    assert isinstance(result, Plan) and result.unchecked == () and result.facts_awaited == ()
    message = refused(spec_of("llama-3.1-8b-eagle3"), "ModelDoesNotFitGpu", head_fetched(read, observed(SMALL_GPU)))
    # Its 0.4B parameters (not the 0.777B estimate) fit beside the target; the two KV caches do not.
    assert message.startswith(
        "the GPU holds 15.7 GiB of weights (target meta-llama/Llama-3.1-8B-Instruct: 8.03B parameters × 2 bytes "
        "(bfloat16) / tensorParallelSize 1 = 15.0 GiB + EAGLE-3 head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: 0.4B "
        "parameters × 2 bytes (bfloat16) / tensorParallelSize 1 = 0.7 GiB), leaving 0.05 GiB"
    )
    assert (
        "the target's and the EAGLE-3 head's KV caches get 90% of that" in message
        and "needs: target 0.50 GiB" in message
        and "+ EAGLE-3 head 0.02 GiB (4096 bytes per token: 1 layer × 2 (K, V) × 8 KV heads × 128 × 2 bytes)" in message
    ), message
    assert message.endswith(
        "facts of meta-llama/Llama-3.1-8B-Instruct: the operator's model catalog (simulated fetch "
        "data); yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: the files of the head)"
    )


def test_a_drafter_awaiting_its_fetch_holds_the_deployment_back_and_says_so():
    result = admitted(spec_of("llama-3.1-8b-pard"))
    assert isinstance(result, Plan) and result.facts_awaited == ("hf://amd/PARD-Llama-3.2-1B",)
    assert result.unchecked == (
        "the vocabulary, attention heads and GPU memory of hf://amd/PARD-Llama-3.2-1B (not "
        "in the operator's catalog: read from its files when its fetch finishes; no GPU work "
        "starts before)",
    )
    for example, label in (("llama-3.1-8b-dflash", "DFlash draft"), ("qwen3-4b-dspark", "DSpark draft")):
        served = served_models(parse_spec(spec_of(example)), Observed())
        assert [(m.role, m.name, m.facts) for m in served[1:]] == [("drafter", label, None)]


def test_redrafters_drafter_adds_weights_and_no_kv_cache():
    """ReDrafter (backend tensorrt): its recurrent drafter is built into the target's engine; pvc://, so sized
    from the target; it caches nothing."""
    served = served_models(parse_spec(spec_of(EXAMPLE_REDRAFTER)), Observed())
    drafter = served[1]
    assert (drafter.role, drafter.name, drafter.engine, drafter.facts.source) == (
        "drafter",
        "ReDrafter drafter",
        "target",
        HEAD_ESTIMATE,
    )
    assert kv_bytes_per_token(drafter) == 0 and weight_bytes_per_gpu(drafter) > 0
    message = refused(spec_of(EXAMPLE_REDRAFTER, freeGpuMemoryFraction=0.001), "ModelDoesNotFitGpu")
    assert "+ ReDrafter drafter pvc://drafters/vicuna-7b-drafter: " in message  # its weights
    assert "the target's KV cache gets 0.1% of that" in message and "ReDrafter drafter 0" not in message  # no KV


# --- MTP layers: weights in the target checkpoint, KV cache beside the target's ----------------------


def test_mtp_layers_add_their_kv_cache_not_their_weights_again():
    spec = parse_spec(spec_of("deepseek-r1-mtp"))
    target, mtp = served_models(spec, Observed())
    assert (mtp.role, mtp.name, mtp.own_weights, mtp.kv_layers) == ("drafter", "MTP layers", False, 1)
    assert weight_bytes_per_gpu(mtp) == 0  # the 685B of the checkpoint hold the 14B of the MTP module
    assert kv_bytes_per_token(mtp) == 1 * (512 + 64) * 2
    vanilla = spec_of("deepseek-r1-mtp")
    vanilla["speculation"]["mtp"]["useMtpVanilla"] = True  # TensorRT-LLM caches maxDraftLen (3) MTP layers
    assert served_models(parse_spec(vanilla), Observed())[1].kv_layers == 3
    # 0.582% of the 46.4 GiB the weights leave on an H200 (0.2702 GiB) holds the target's 61 layers for 4096
    # tokens (0.2681 GiB), not with the MTP layer's (0.0044 GiB).
    message = refused(
        spec_of("deepseek-r1-mtp", freeGpuMemoryFraction=0.00582), "ModelDoesNotFitGpu", observed(SIMULATED_H200)
    )
    assert (
        "the target's and the MTP layers' KV caches get 0.582% of that, 0.27 GiB, less than one sequence of 4096 "
        "tokens needs: target 0.27 GiB (70272 bytes per token: 61 layers × 576 (latent) × 2 bytes) + MTP layers "
        "0.00 GiB (1152 bytes per token: 1 layer × 576 (latent) × 2 bytes) = 0.27 GiB"
    ) in message
    assert isinstance(
        admitted(spec_of("deepseek-r1-mtp", freeGpuMemoryFraction=0.0059), observed(SIMULATED_H200)), Plan
    )
    assert message.count("685B parameters") == 1


def test_mtp_layers_of_a_target_without_facts_add_no_second_note():
    spec = spec_of("deepseek-r1-mtp")
    spec["target"]["model"] = "pvc://models/deepseek-r1"
    result = admitted(spec)
    assert isinstance(result, Plan) and len(result.unchecked) == 1 and "pvc://models/deepseek-r1" in result.unchecked[0]


def test_modes_without_a_drafter_count_the_target_alone():
    for example in ("qwen2.5-7b-ngram", "qwen2.5-7b-auto", "llama-3.1-8b-sa", "llama-3.1-8b-save-state"):
        assert [m.role for m in served_models(parse_spec(spec_of(example)), Observed())] == ["target"], example


def test_a_dspark_draft_embedded_in_the_target_is_counted_in_its_weights():
    spec = spec_of("qwen3-4b-dspark")
    spec["speculation"]["dspark"]["draftModel"] = spec["target"]["model"]
    assert [m.role for m in served_models(parse_spec(spec), Observed())] == ["target"]
