"""The model catalog (simulated fetch data) and ModelFacts: the numbers hold together, and config.json parses."""

from __future__ import annotations

import dataclasses

import pytest

from specdec.admission import model_catalog
from specdec.admission.model_facts import ModelFacts, same_tokenizer


def dense_parameters(config: dict) -> int:
    """Parameters of a LLaMA / Qwen2 decoder from its config.json: embeddings (and LM head unless tied),
    per layer q/k/v/o (Qwen2 with q/k/v biases), the gated MLP and two norms, and the final norm."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim
    if config["architectures"] == ["Qwen2ForCausalLM"]:
        attention += heads * head_dim + 2 * kv * head_dim
    layer = attention + 3 * hidden * config["intermediate_size"] + 2 * hidden
    embeddings = config["vocab_size"] * hidden * (1 if config["tie_word_embeddings"] else 2)
    return embeddings + config["num_hidden_layers"] * layer + hidden


DENSE = [h for h in model_catalog.hub_ids() if "DeepSeek" not in h]


@pytest.mark.parametrize("hub_id", DENSE)
def test_model_card_parameter_count_matches_the_config(hub_id):
    """A typo in a copied config value or a parameter count shows here (the two come from different files)."""
    facts = model_catalog.catalog_facts(hub_id)
    computed = dense_parameters(model_catalog.config_excerpt(hub_id))
    assert abs(computed - facts.parameters) / facts.parameters < 0.01, (hub_id, computed, facts.parameters)


def test_known_parameter_counts_from_the_configs():
    # Exact counts of the Hub checkpoints (safetensors metadata), for the formula above.
    assert dense_parameters(model_catalog.config_excerpt("meta-llama/Llama-3.1-8B-Instruct")) == 8_030_261_248
    assert dense_parameters(model_catalog.config_excerpt("meta-llama/Llama-3.2-1B-Instruct")) == 1_235_814_400
    assert dense_parameters(model_catalog.config_excerpt("meta-llama/Llama-2-7b-hf")) == 6_738_415_616


def test_config_json_parses_into_facts():
    vicuna = model_catalog.catalog_facts("lmsys/vicuna-7b-v1.3")
    assert (vicuna.attention_heads, vicuna.kv_heads, vicuna.head_dim) == (32, 32, 128)  # no num_key_value_heads
    small = model_catalog.catalog_facts("meta-llama/Llama-3.2-1B-Instruct")
    assert (small.head_dim, small.tied_embeddings, small.embedding_parameters) == (64, True, 128256 * 2048)
    r1 = model_catalog.catalog_facts("deepseek-ai/DeepSeek-R1")
    assert (r1.architecture, r1.weight_quantization, r1.kv_latent_dim) == ("DeepseekV3ForCausalLM", "fp8", 512 + 64)
    assert r1.source == model_catalog.CATALOG_SOURCE
    config = {
        "num_attention_heads": 8,
        "hidden_size": 1024,
        "vocab_size": 1000,
        "num_hidden_layers": 2,
        "quantization_config": {"quant_method": "awq", "bits": 4},
    }
    awq = ModelFacts.from_config("x/awq", config, parameters=10, tokenizer="sha256:ab", source="config.json")
    assert (awq.weight_quantization, awq.kv_heads, awq.dtype, awq.architecture) == ("int4", 8, "float16", "unknown")


def test_lookup_by_hub_id_is_case_insensitive_and_knows_the_old_meta_names():
    assert model_catalog.catalog_facts("meta-llama/llama-3.1-70b-instruct").model == "meta-llama/Llama-3.1-70B-Instruct"
    assert model_catalog.catalog_facts("meta-llama/Meta-Llama-3.1-70B-Instruct").layers == 80
    assert model_catalog.catalog_facts("meta-llama/Llama-2-7b-chat-hf") is None


def test_tokenizers_compare_only_within_one_source_and_kind_of_identity():
    llama = model_catalog.catalog_facts("meta-llama/Llama-3.1-8B-Instruct")
    assert same_tokenizer(llama, model_catalog.catalog_facts("meta-llama/Llama-3.2-1B-Instruct")) is True
    assert same_tokenizer(llama, model_catalog.catalog_facts("Qwen/Qwen2.5-0.5B-Instruct")) is False
    read = dataclasses.replace(llama, tokenizer="vocab-sha256:0123", source="the files its fetch read")
    assert same_tokenizer(read, dataclasses.replace(read, model="other")) is True
    assert same_tokenizer(read, dataclasses.replace(read, tokenizer="vocab-sha256:4567")) is False
    assert same_tokenizer(read, dataclasses.replace(read, tokenizer="sentencepiece-sha256:0123")) is None
    assert same_tokenizer(llama, read) is None
    # a catalog family reported by files (the local cluster's simulated fetch) is still not the catalog's
    assert same_tokenizer(llama, dataclasses.replace(read, tokenizer=llama.tokenizer)) is None
