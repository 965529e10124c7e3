"""What a fetched checkpoint says about itself: the report the fetch Job writes to its termination message.

Runs inside the fetch pod, on the build image's python3 (`python3 -c <this module's source> <dir>`, see
builders/model_cache.py): standard library only, no specdec import. It reads, without loading a weight:
- config.json, reduced to the keys `ModelFacts.from_config` reads (CONFIG_KEYS);
- the parameter count, from the safetensors headers (8-byte little-endian length, then a JSON header of
  tensor shapes);
- the tokenizer's identity: a digest of tokenizer.json's id -> token table (vocabulary and added tokens:
  equal digests mean a token id means the same text to both models), else of tokenizer.model's bytes
  (SentencePiece). The kind before ":" says which, and only identities of one kind are compared.
The operator turns the report into ModelFacts (specdec.status.shared.fetched_status). A termination message holds
4096 bytes: the report keeps only these fields.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from typing import Any

# config.json keys ModelFacts.from_config reads (quantization_config: only its method and bits).
CONFIG_KEYS = ("architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "torch_dtype", "dtype",
               "tie_word_embeddings", "max_position_embeddings", "quantization_config", "kv_lora_rank",
               "qk_rope_head_dim")
QUANTIZATION_KEYS = ("quant_method", "bits")
MAX_SAFETENSORS_HEADER = 100_000_000  # the format's own bound: a larger length means a broken file
TOKENIZER_JSON_KIND = "vocab-sha256"
SENTENCEPIECE_KIND = "sentencepiece-sha256"


def config_excerpt(config: dict[str, Any]) -> dict[str, Any]:
    excerpt = {key: config[key] for key in CONFIG_KEYS if config.get(key) is not None}
    if "architectures" in excerpt:
        excerpt["architectures"] = excerpt["architectures"][:1]
    if isinstance(excerpt.get("quantization_config"), dict):
        excerpt["quantization_config"] = {k: v for k, v in excerpt["quantization_config"].items()
                                          if k in QUANTIZATION_KEYS}
    return excerpt


def safetensors_parameters(path: str) -> int:
    """Elements of every tensor a .safetensors file holds, from its header alone."""
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        if length > MAX_SAFETENSORS_HEADER:
            raise ValueError(f"{path}: header length {length} is not that of a safetensors file")
        header = json.loads(file.read(length))
    count = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            elements = 1
            for dimension in tensor["shape"]:
                elements *= dimension
            count += elements
    return count


def parameter_count(directory: str) -> int | None:
    shards = sorted(name for name in os.listdir(directory) if name.endswith(".safetensors"))
    if not shards:
        return None
    return sum(safetensors_parameters(os.path.join(directory, name)) for name in shards)


def tokenizer_identity(directory: str) -> str | None:
    tokenizer_json = os.path.join(directory, "tokenizer.json")
    if os.path.exists(tokenizer_json):
        with open(tokenizer_json, encoding="utf-8") as file:
            tokenizer = json.load(file)
        vocab = (tokenizer.get("model") or {}).get("vocab") or {}
        # BPE and WordPiece: {token: id}; Unigram: [[token, score], ...] in id order.
        ids = {i: entry[0] for i, entry in enumerate(vocab)} if isinstance(vocab, list) else {
            i: token for token, i in vocab.items()}
        ids.update({added["id"]: added["content"] for added in tokenizer.get("added_tokens") or []})
        table = json.dumps(sorted(ids.items()), ensure_ascii=False, separators=(",", ":"))
        return f"{TOKENIZER_JSON_KIND}:{hashlib.sha256(table.encode()).hexdigest()}"
    sentencepiece = os.path.join(directory, "tokenizer.model")
    if os.path.exists(sentencepiece):
        with open(sentencepiece, "rb") as file:
            return f"{SENTENCEPIECE_KIND}:{hashlib.sha256(file.read()).hexdigest()}"
    return None


def directory_size(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def report(directory: str) -> dict[str, Any]:
    """{"sizeBytes": N} plus, where the files have them, "config", "parameters" and "tokenizer"."""
    result: dict[str, Any] = {"sizeBytes": directory_size(directory)}
    config_path = os.path.join(directory, "config.json")
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as file:
            result["config"] = config_excerpt(json.load(file))
    parameters, tokenizer = parameter_count(directory), tokenizer_identity(directory)
    if parameters is not None:
        result["parameters"] = parameters
    if tokenizer is not None:
        result["tokenizer"] = tokenizer
    return result


if __name__ == "__main__":
    try:
        checkpoint = report(sys.argv[1])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error) as error:
        # The checkpoint is fetched; without its facts admission skips what it cannot check.
        print(f"reading the checkpoint's facts failed: {error!r}", file=sys.stderr)
        checkpoint = {"sizeBytes": directory_size(sys.argv[1])}
    print(json.dumps(checkpoint, separators=(",", ":")))
