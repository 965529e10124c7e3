"""Catalog data: the real config.json values of the models our examples and tests name.

SIMULATED FETCH DATA. Nothing here is read from a model's files at run time. Admission uses it for the
models it lists until their fetch has read their own files (then the ModelCache's facts come first), and
the local cluster's simulated fetch reports it as what it read (specdec.dev.simulated_fetch). Each entry is
an excerpt of the model's config.json (the keys admission and `tests/unit/test_model_catalog.py` use,
values unchanged), the parameter count from its model card (or the Hub's count where they differ) and its
tokenizer family. Keyed by Hub id; revision-independent (a later commit of these repositories does not
change their architecture).

Where the values were copied from (upstream Hugging Face files, or copies of them in public repositories;
the copies named are the ones found, with the commit where there is one):
- MLC: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py @79d603f0 (verbatim config.json of the
  Instruct models: eos_token_id [128001, 128008, 128009]).
- AIC: ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs/<org>--<name>_config.json @095f58a5.
- HF <repo>: a config.json on huggingface.co saved from the named model (its `_name_or_path`), same values.
"""

from __future__ import annotations

from specdec.model_facts import CATALOG_SOURCE, ModelFacts

# Tokenizer families: models of one family encode text to the same token ids.
LLAMA3 = "family:llama3"  # Llama 3.x: 128,000 BPE tokens + 256 special (bos 128000); 3.2 reuses 3.1's
LLAMA = "family:llama"  # LLaMA-1 / Llama 2 SentencePiece, 32,000 tokens (Vicuna v1.3 is a LLaMA fine-tune)
QWEN2 = "family:qwen2"  # Qwen2 / Qwen2.5 BPE (151,643 tokens + specials); embeddings padded per size
QWEN3 = "family:qwen3"  # Qwen3 BPE: Qwen2's 151,643 tokens with Qwen3's own specials (<think>), vocab_size 151936
DEEPSEEK_V3 = "family:deepseek-v3"  # DeepSeek-V3 / R1 BPE, vocab_size 129280

_LLAMA = {"architectures": ["LlamaForCausalLM"], "tie_word_embeddings": False}
_LLAMA31 = {**_LLAMA, "vocab_size": 128256, "num_key_value_heads": 8, "torch_dtype": "bfloat16",
            "max_position_embeddings": 131072}
_LLAMA2 = {**_LLAMA, "vocab_size": 32000, "torch_dtype": "float16"}
_QWEN25 = {"architectures": ["Qwen2ForCausalLM"], "torch_dtype": "bfloat16", "max_position_embeddings": 32768}

# hub id -> (config.json excerpt, parameters per the model card, tokenizer family)
_ENTRIES: dict[str, tuple[dict, int, str]] = {
    # MLC "llama3_1_8b"; AIC meta-llama--Meta-Llama-3.1-8B. Model card: 8.03B.
    "meta-llama/Llama-3.1-8B-Instruct": (
        {**_LLAMA31, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32}, 8_030_000_000, LLAMA3),
    # MLC "llama3_1_70b"; AIC meta-llama--Meta-Llama-3.1-70B. Model card: 70.6B.
    "meta-llama/Llama-3.1-70B-Instruct": (
        {**_LLAMA31, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
         "num_attention_heads": 64}, 70_600_000_000, LLAMA3),
    # AIC meta-llama--Meta-Llama-3.1-405B; HF relaxml/Llama-3.1-405B-Instruct-QTIP-2Bit-TP8 (from
    # meta-llama/Meta-Llama-3.1-405B-Instruct, head_dim 128). 406B on the Hub (the card rounds to 405B).
    "meta-llama/Llama-3.1-405B-Instruct": (
        {**_LLAMA31, "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
         "num_attention_heads": 128, "head_dim": 128}, 406_000_000_000, LLAMA3),
    # MLC "llama3_2_1b"; kevinstephano/thunder_model_blocks hf_llama/llama_config.py (the Hub config at
    # commit 4e20de36). 1.24B on the Hub (1,235,814,400; the card rounds to 1.23B).
    "meta-llama/Llama-3.2-1B-Instruct": (
        {**_LLAMA31, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
         "num_attention_heads": 32, "head_dim": 64, "tie_word_embeddings": True}, 1_240_000_000, LLAMA3),
    # MLC "llama3_2_3b". Model card: 3.21B.
    "meta-llama/Llama-3.2-3B-Instruct": (
        {**_LLAMA31, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
         "num_attention_heads": 24, "head_dim": 128, "tie_word_embeddings": True}, 3_210_000_000, LLAMA3),
    # HF garage-bAInd/Platypus2-7B, ebsmothers/test-peft-fp32 (from meta-llama/Llama-2-7b-hf). Card: 6.74B.
    "meta-llama/Llama-2-7b-hf": (
        {**_LLAMA2, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096},
        6_740_000_000, LLAMA),
    # HF LoftQ/Llama-2-13b-hf-4bit-64rank, jjaaaww/posi_13b (from meta-llama/Llama-2-13b-hf). Card: 13.0B.
    "meta-llama/Llama-2-13b-hf": (
        {**_LLAMA2, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
         "num_attention_heads": 40, "num_key_value_heads": 40, "max_position_embeddings": 4096},
        13_000_000_000, LLAMA),
    # HF TheBloke/vicuna-7B-v1.3-GPTQ and Epimachok/vicuna-7b-v1.3-sharded-bf16 (LMSYS' config: no
    # num_key_value_heads, i.e. one KV head per attention head). LLaMA-7B architecture: 6.74B.
    "lmsys/vicuna-7b-v1.3": (
        {**_LLAMA2, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
         "num_attention_heads": 32, "max_position_embeddings": 2048}, 6_740_000_000, LLAMA),
    # HF chinmaydk99/Qwen2.5-0.5B-Open-R1-Distill (from Qwen/Qwen2.5-0.5B-Instruct). Card: 0.49B.
    "Qwen/Qwen2.5-0.5B-Instruct": (
        {**_QWEN25, "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
         "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True}, 490_000_000, QWEN2),
    # HF onnx-community/Qwen2.5-1.5B-Instruct (from Qwen/Qwen2.5-1.5B-Instruct). Card: 1.54B.
    "Qwen/Qwen2.5-1.5B-Instruct": (
        {**_QWEN25, "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
         "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": True}, 1_540_000_000, QWEN2),
    # HF yongsen-teo/qwen25, tablegpt/TableGPT2-7B (from Qwen/Qwen2.5-7B-Instruct). Card: 7.61B.
    "Qwen/Qwen2.5-7B-Instruct": (
        {**_QWEN25, "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
         "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False}, 7_610_000_000, QWEN2),
    # HF copies of Qwen/Qwen3-4B's config.json: a text-encoder config with `_name_or_path` Qwen/Qwen3-4B (torch_dtype
    # float32 there, that pipeline's own), a Qwen3Config class with Qwen3-4B's values (torch_dtype bfloat16). Card
    # (Qwen3-4B-Base's, same architecture): 4.0B parameters, 36 layers, 32 Q and 8 KV heads.
    "Qwen/Qwen3-4B": (
        {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
         "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
         "torch_dtype": "bfloat16", "tie_word_embeddings": True, "max_position_embeddings": 40960},
        4_000_000_000, QWEN3),
    # AIC deepseek-ai--DeepSeek-R1 (FP8 weights, block-wise). Model card: 671B main model + 14B of the
    # multi-token-prediction module = 685B in the checkpoint (MTP speculation loads both).
    "deepseek-ai/DeepSeek-R1": (
        {"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 129280, "hidden_size": 7168,
         "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 128,
         "num_key_value_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "torch_dtype": "bfloat16",
         "tie_word_embeddings": False, "max_position_embeddings": 163840, "num_nextn_predict_layers": 1,
         "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}},
        685_000_000_000, DEEPSEEK_V3),
}

# Hub ids are case-insensitive; Meta's repositories were renamed from "Meta-Llama-3.1-*" (the old names
# still resolve).
_BY_ID = {hub_id.lower(): hub_id for hub_id in _ENTRIES}
_BY_ID.update({hub_id.lower().replace("/llama-3.1-", "/meta-llama-3.1-"): hub_id
               for hub_id in _ENTRIES if "/Llama-3.1-" in hub_id})


def config_excerpt(hub_id: str) -> dict:
    return _ENTRIES[hub_id][0]


def hub_ids() -> list[str]:
    return list(_ENTRIES)


def catalog_facts(hub_id: str) -> ModelFacts | None:
    """The catalog's facts of a Hub model (e.g. "meta-llama/Llama-3.1-8B-Instruct"), or None."""
    known = _BY_ID.get(hub_id.lower())
    if known is None:
        return None
    config, parameters, tokenizer = _ENTRIES[known]
    return ModelFacts.from_config(known, config, parameters=parameters, tokenizer=tokenizer, source=CATALOG_SOURCE)


def smallest_of_family(tokenizer: str, besides: str) -> str | None:
    """The smallest catalog model with this tokenizer other than `besides`: a draft to suggest."""
    family = [(p, hub_id) for hub_id, (_, p, t) in _ENTRIES.items() if t == tokenizer and hub_id != besides]
    return min(family)[1] if family else None
