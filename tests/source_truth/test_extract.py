"""The extractor against a small tree shaped like TensorRT-LLM's (both decoding_type styles seen
in its releases: `ClassVar[str] = "..."` with a from_dict dispatch dict, and pydantic `Literal`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.source_truth import extract as ex

SERVE = """
import click

@click.command("serve")
@click.argument("model", type=str)
@click.option("--backend", type=click.Choice(["pytorch", "tensorrt"]), default="pytorch")
@click.option("--max_batch_size", type=int, default=BuildConfig.max_batch_size)
@click.option("--extra_llm_api_options", "--config", "extra_llm_api_options", type=str)
@click.option("--trust_remote_code", is_flag=True, default=False)
@stability_option("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", type=float, default=0.9,
                  status="beta", help="Free GPU memory fraction for the KV cache.")
@stability_option("--enable_chunked_prefill/--disable_chunked_prefill", default=False, status="prototype",
                  help="Chunked prefill.")
@click.option("--verbose/--quiet", "-v/-q", default=False)
@shared_options
def serve(model, backend, max_batch_size, extra_llm_api_options, trust_remote_code):
    pass

def helper():
    pass
"""

LLM_ARGS = """
from typing import ClassVar, Literal, Optional
from pydantic import AliasChoices, Field

DEFAULT_FRACTION = 0.9

class StrictBaseModel(BaseModel):
    pass

class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: Optional[int] = None
    speculative_model: Optional[str] = Field(
        default=None, validation_alias=AliasChoices("speculative_model", "speculative_model_dir"))
    _private: int = 0

    @classmethod
    def from_dict(cls, data: dict):
        config_classes = {"Eagle": EagleDecodingConfig, "Draft_Target": DraftTargetDecodingConfig}
        return config_classes[data["decoding_type"]](**data)

    def supports_backend(self, backend: str) -> bool:
        return True

class EagleDecodingConfig(DecodingBaseConfig):
    decoding_type: ClassVar[str] = "Eagle"
    eagle3_one_model: Optional[bool] = True

class Eagle3DecodingConfig(EagleDecodingConfig):
    decoding_type: Literal["Eagle3"] = "Eagle3"

class DraftTargetDecodingConfig(DecodingBaseConfig):
    decoding_type: Literal["Draft_Target"] = "Draft_Target"

    def supports_backend(self, backend: str) -> bool:
        return backend == "pytorch"

class KvCacheConfig(StrictBaseModel):
    free_gpu_memory_fraction: Optional[float] = Field(default=DEFAULT_FRACTION)
    enable_block_reuse: bool = Field(True, status="beta")
    dtype: str = Field(default="auto", init=False)
    tokens_per_block: int = Field(...)

class BaseLlmArgs(StrictBaseModel):
    model: str = Field(description="no default")
    kv_cache_config: KvCacheConfig = Field(default_factory=KvCacheConfig)

class TorchLlmArgs(BaseLlmArgs):
    speculative_config: Optional[object] = None
    backend: Literal["pytorch"] = "pytorch"
"""

INTERFACE = """
class SpeculativeDecodingMode(IntEnum):
    MTP = auto()
    EAGLE3 = auto()
    NONE = auto()
"""

BUILD = """
import argparse
MODES = ["draft_tokens_external", "explicit_draft_tokens"]

def parse_arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_draft_len", type=int, default=0)
    group = parser.add_argument_group("spec")
    group.add_argument("--speculative_decoding_mode", default=None, choices=MODES)
    parser.add_argument("-o", "--output-dir", type=str)
    parser.add_argument("--strip", action="store_true", dest="strip_weights")
    add_plugin_argument(parser)
    return parser
"""

PLUGIN = """
cli_plugin_args = ["gemm_plugin", "use_paged_context_fmha"]
"""

PBTXT = """
name: "tensorrt_llm"
ensemble_scheduling { step [ { input_map { key: "not_a_parameter" value: "x" } } ] }
parameters: {
  key: "max_beam_width"
  value: { string_value: "${max_beam_width}" }
}
parameters {
  key: "gpt_model_path"
  value: { string_value: "${engine_dir}" }
}
"""


def _tree(root: Path) -> Path:
    files = {
        ex.SERVE_PY: SERVE,
        ex.LLM_ARGS_PY: LLM_ARGS,
        f"{ex.LLMAPI_DIR}/utils.py": "class KvCacheConfig:\n    shadow: int = 1\n",
        ex.TORCH_SPEC_INTERFACE: INTERFACE,
        f"{ex.TORCH_SPEC_DIR}/eagle3.py": "",
        ex.BUILD_PY: BUILD,
        ex.PLUGIN_PY: PLUGIN,
        f"{ex.TRITON_MODELS_DIR}/tensorrt_llm/config.pbtxt": PBTXT,
        ex.SPEC_DOC_CANDIDATES[0]: "# Speculative Decoding\n## EAGLE 3\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def _check(data: dict) -> None:
    serve = data["trtllm_serve"]["commands"]["serve"]
    opts = {o["name"]: o for o in serve["options"]}
    assert opts["backend"]["choices"] == ["pytorch", "tensorrt"]
    assert opts["max_batch_size"]["type"] == "int"
    assert opts["max_batch_size"]["default"] == {"expr": "BuildConfig.max_batch_size"}
    assert opts["extra_llm_api_options"]["flags"] == ["--extra_llm_api_options", "--config"]
    assert opts["trust_remote_code"]["is_flag"] is True
    # trtllm-serve's stability_option is a click option with a stability status.
    memory = opts["free_gpu_memory_fraction"]
    assert memory["flags"] == ["--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction"]
    assert (memory["type"], memory["default"], memory["status"]) == ("float", 0.9, "beta")
    # A --x/--no-x pair: both spellings are flags, the option a boolean named after the first.
    chunked = opts["enable_chunked_prefill"]
    assert chunked["flags"] == ["--enable_chunked_prefill", "--disable_chunked_prefill"]
    assert (chunked["is_flag"], chunked["off_flags"], chunked["status"]) == (
        True,
        ["--disable_chunked_prefill"],
        "prototype",
    )
    assert opts["verbose"]["flags"] == ["--verbose", "--quiet", "-v", "-q"]
    assert opts["verbose"]["off_flags"] == ["--quiet", "-q"]
    assert serve["arguments"][0]["name"] == "model"
    # A decorator bundle is reported, since its options are not in the table.
    assert serve["other_decorators"] == ["shared_options"]
    assert "helper" not in data["trtllm_serve"]["commands"]

    spec = data["speculative_configs"]
    assert set(spec) == {"EagleDecodingConfig", "Eagle3DecodingConfig", "DraftTargetDecodingConfig"}
    assert spec["EagleDecodingConfig"]["decoding_type"] == ["Eagle"]
    assert spec["EagleDecodingConfig"]["dispatch_keys"] == ["Eagle"]
    assert spec["Eagle3DecodingConfig"]["decoding_type"] == ["Eagle3"]
    assert spec["Eagle3DecodingConfig"]["fields"]["eagle3_one_model"]["default"] is True
    dt = spec["DraftTargetDecodingConfig"]
    assert dt["decoding_type"] == ["Draft_Target"]
    assert dt["supports_backend"] == ["backend == 'pytorch'"]
    assert spec["EagleDecodingConfig"]["supports_backend"] == ["True"]
    assert dt["fields"]["max_draft_len"] == {
        "type": "Optional[int]",
        "default": None,
        "defined_in": "DecodingBaseConfig",
    }
    assert dt["fields"]["speculative_model"]["validation_alias"] == ["speculative_model", "speculative_model_dir"]
    assert "_private" not in dt["fields"]
    assert data["speculative_dispatch"]["map"] == {
        "Eagle": "EagleDecodingConfig",
        "Draft_Target": "DraftTargetDecodingConfig",
    }

    kv = data["kv_cache_config"]
    assert kv["file"] == ex.LLM_ARGS_PY and "shadow" not in kv["fields"]
    assert kv["fields"]["free_gpu_memory_fraction"]["default"] == 0.9
    assert kv["fields"]["enable_block_reuse"]["default"] is True
    assert kv["fields"]["enable_block_reuse"]["status"] == "beta"
    assert kv["fields"]["dtype"]["init"] is False
    assert kv["fields"]["tokens_per_block"]["required"] is True
    torch = data["llm_args"]["TorchLlmArgs"]["fields"]
    assert torch["model"]["required"] is True and torch["model"]["defined_in"] == "BaseLlmArgs"
    assert torch["kv_cache_config"]["default_factory"] == "KvCacheConfig"
    assert torch["backend"]["literal"] == ["pytorch"]
    assert "TrtLlmArgs" not in data["llm_args"]

    ps = data["pytorch_speculative"]
    assert ps["mode_enum"]["members"] == ["MTP", "EAGLE3", "NONE"]
    assert ps["modules"] == ["eagle3.py", "interface.py"]
    assert ps["doc"]["headings"] == ["Speculative Decoding", "EAGLE 3"]

    build = {o["dest"]: o for o in data["trtllm_build"]["options"]}
    assert build["max_draft_len"]["default"] == 0
    assert build["speculative_decoding_mode"]["choices"] == ["draft_tokens_external", "explicit_draft_tokens"]
    assert build["output_dir"]["flags"] == ["-o", "--output-dir"]
    assert build["strip_weights"]["action"] == "store_true"
    assert data["trtllm_build"]["plugin_options"]["flags"] == ["--gemm_plugin", "--use_paged_context_fmha"]
    triton = data["triton_backend"]["models"]["tensorrt_llm"]
    assert triton["parameter_keys"] == ["gpt_model_path", "max_beam_width"]
    assert triton["placeholders"] == ["engine_dir", "max_beam_width"]
    # The example scripts are absent from this tree: said so, not silently empty.
    assert any(e.startswith("quantize:") for e in data["errors"])
    assert "quantize" not in data
    json.dumps(data)


def test_extract_from_directory(tmp_path):
    data = ex.extract(ex.DirTree(str(_tree(tmp_path)), "abc123"), "v1.2.1", engine_path=True)
    assert data["source"] == {"repo": "NVIDIA/TensorRT-LLM", "tag": "v1.2.1", "commit": "abc123"}
    _check(data)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_extract_from_git_tag_via_cli(tmp_path):
    work = _tree(tmp_path / "work")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    subprocess.run([*git, "tag", "v1.2.1"], check=True)
    # A later commit must not leak into the tag's tables.
    (work / ex.PLUGIN_PY).write_text('cli_plugin_args = ["later"]\n')
    subprocess.run([*git, "commit", "-qam", "later"], check=True)
    head = subprocess.run([*git, "rev-parse", "v1.2.1"], check=True, capture_output=True, text=True).stdout.strip()
    out = tmp_path / "t.json"
    assert ex.main(["--git-dir", str(work / ".git"), "--tag", "v1.2.1", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["source"]["commit"] == head
    _check(data)


def test_engine_tables_only_for_the_engine_line(tmp_path):
    out = tmp_path / "t.json"
    ex.main(["--src-dir", str(_tree(tmp_path / "src")), "--tag", "v1.4.0rc1", "-o", str(out)])
    data = json.loads(out.read_text())
    assert "trtllm_build" not in data and "triton_backend" not in data
    assert data["errors"] == []


def test_missing_anchor_is_an_error_not_an_empty_table(tmp_path):
    data = ex.extract(ex.DirTree(str(tmp_path), None), "v9", engine_path=False)
    assert "trtllm_serve" not in data and "speculative_configs" not in data
    assert any(ex.SERVE_PY in e for e in data["errors"])
    assert any(ex.LLM_ARGS_PY in e for e in data["errors"])
