"""The fetch's report of a checkpoint (specdec.admission.checkpoint_facts) on a fake checkpoint directory."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from specdec.admission import checkpoint_facts
from specdec.admission.checkpoint_facts import config_excerpt, report, tokenizer_identity
from specdec.admission.model_catalog import config_excerpt as catalog_excerpt
from specdec.admission.model_catalog import hub_ids
from specdec.admission.model_facts import ModelFacts

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"},
    "quantization_config": {"quant_method": "gptq", "bits": 4, "modules_to_not_convert": ["lm_head"] * 50},
}


def write_safetensors(path: Path, shapes: dict[str, list[int]]) -> None:
    """A shard with a real header and zero bytes of weights (the reader never looks past the header)."""
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            **{name: {"dtype": "BF16", "shape": shape, "data_offsets": [0, 0]} for name, shape in shapes.items()},
        }
    ).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def write_tokenizer(path: Path, vocab: dict[str, int], added: dict[str, int]) -> None:
    path.write_text(
        json.dumps(
            {
                "model": {"type": "BPE", "vocab": vocab, "merges": []},
                "added_tokens": [{"id": i, "content": t, "special": True} for t, i in added.items()],
            }
        )
    )


def checkpoint(directory: Path, vocab: dict[str, int] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(directory / "model-00001-of-00002.safetensors", {"embed": [128256, 64], "norm": [64]})
    write_safetensors(directory / "model-00002-of-00002.safetensors", {"lm_head": [128256, 64]})
    write_tokenizer(directory / "tokenizer.json", vocab or {"a": 0, "b": 1}, {"<|begin|>": 2})
    return directory


def test_report_counts_parameters_from_headers_and_keeps_only_what_facts_need(tmp_path):
    found = report(str(checkpoint(tmp_path / "model")))
    assert found["parameters"] == 2 * 128256 * 64 + 64
    assert found["config"]["quantization_config"] == {"quant_method": "gptq", "bits": 4}
    assert "rope_scaling" not in found["config"] and "intermediate_size" not in found["config"]
    assert found["tokenizer"].startswith("vocab-sha256:") and len(found["tokenizer"]) == len("vocab-sha256:") + 64
    assert found["sizeBytes"] == sum(p.stat().st_size for p in (tmp_path / "model").iterdir())
    facts = ModelFacts.from_config(
        "x/y", found["config"], parameters=found["parameters"], tokenizer=found["tokenizer"], source="test"
    )
    assert (facts.kv_heads, facts.head_dim, facts.weight_quantization) == (2, 8, "int4")


def test_tokenizer_identity_is_the_id_to_token_table(tmp_path):
    """Same ids for the same text: equal, however the file orders them; one token moved: different."""

    def identity(directory: Path, vocab: dict[str, int], added: dict[str, int]) -> str:
        directory.mkdir()
        write_tokenizer(directory / "tokenizer.json", vocab, added)
        return tokenizer_identity(str(directory))

    base = identity(tmp_path / "a", {"a": 0, "b": 1}, {"<s>": 2})
    assert identity(tmp_path / "b", {"b": 1, "a": 0}, {"<s>": 2}) == base
    assert identity(tmp_path / "c", {"a": 1, "b": 0}, {"<s>": 2}) != base
    assert identity(tmp_path / "d", {"a": 0, "b": 1}, {"</s>": 2}) != base


def test_sentencepiece_only_checkpoints_have_an_identity_of_another_kind(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x05hello")
    assert tokenizer_identity(str(tmp_path)).startswith("sentencepiece-sha256:")


def test_a_checkpoint_without_files_to_read_reports_its_size_only(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"123")
    assert report(str(tmp_path)) == {"sizeBytes": 3}


def test_the_excerpt_keeps_every_key_the_facts_read():
    """ModelFacts.from_config gives the same facts from the excerpt as from the whole config."""
    for hub_id in hub_ids():
        config = {**catalog_excerpt(hub_id), "intermediate_size": 1, "rope_theta": 5e5}
        full = ModelFacts.from_config(hub_id, config, parameters=1, tokenizer="t", source="s")
        assert ModelFacts.from_config(hub_id, config_excerpt(config), parameters=1, tokenizer="t", source="s") == full


def test_the_shipped_program_runs_standalone_and_fits_a_termination_message(tmp_path):
    """As the fetch pod runs it: its source with `python3 -c`, no specdec on the path; a broken file costs
    the facts, not the fetch."""
    source = Path(checkpoint_facts.__file__).read_text()
    directory = checkpoint(tmp_path / "model", vocab={f"token{i}": i for i in range(5000)})
    run = subprocess.run(
        [sys.executable, "-I", "-c", source, str(directory)], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.encode()) < 4096 and json.loads(run.stdout) == report(str(directory))
    (directory / "config.json").write_text("{not json")
    broken = subprocess.run([sys.executable, "-I", "-c", source, str(directory)], capture_output=True, text=True)
    assert broken.returncode == 0 and set(json.loads(broken.stdout)) == {"sizeBytes"}
    assert "reading the checkpoint's facts failed" in broken.stderr
