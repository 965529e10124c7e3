"""The source-truth tables per pinned release (specdec.versions): the facts the operator relies on, checked
against tables read from TensorRT-LLM's stored sources and API reference pages, each labelled with where it
was read (a file @ commit, a stored version described, or a release's reference page).

The repository (2.5 GB) is too large to fetch here, so these tables are transcriptions with their sources,
not extractions from the release tags; extract.py makes the tag's own tables (trtllm-<version>.json) where
a copy of the repository is at hand, and test_extracted_tables_are_clean checks any that is committed."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specdec import modes, versions
from specdec.runtime import launch, multinode
from tests.unit.helpers import command, engines, load_example, make_plan, steps
from tests.unit.invalid_specs import spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TABLE_FILES = {
    "trtllm_serve": ROOT / "tests/runtime/data/trtllm_serve.json",
    "trtllm_speculative_config": ROOT / "tests/runtime/data/trtllm_speculative_config.json",
    "trtllm_backend": ROOT / "tests/runtime/data/trtllm_backend.json",
    "trtllm_build_options": ROOT / "tests/unit/data/trtllm_build_options.json",
    "engine_scripts": HERE / "engine_scripts.json",
}
# Release -> the tables of its route: trtllm-serve on both; speculative_config on the PyTorch route; the
# engine build and Triton on the engine route.
TABLES = {
    versions.PYTORCH.trtllm: ("trtllm_serve", "trtllm_speculative_config"),
    versions.ENGINE.trtllm: ("trtllm_serve", "trtllm_build_options", "trtllm_backend", "engine_scripts"),
}
ROUTE_BACKEND = {versions.PYTORCH.trtllm: "pytorch", versions.ENGINE.trtllm: "tensorrt"}
# A source label: a file @ a commit, a stored version described, or a TensorRT-LLM release's reference page.
LABEL = re.compile(r"@ [0-9a-f]{7,40}\b|stored version|nvidia\.github\.io/TensorRT-LLM/[0-9][0-9a-z.]*/")


def table(name: str) -> dict[str, Any]:
    return json.loads(TABLE_FILES[name].read_text())


def sources(node: Any) -> Iterator[str]:
    """Every value under a "source" or "sources" key, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("source", "sources"):
                yield from (value.values() if isinstance(value, dict) else [value])
            else:
                yield from sources(value)
    elif isinstance(node, list):
        for item in node:
            yield from sources(item)


def test_every_pinned_release_has_its_tables():
    assert set(TABLES) == {release.trtllm for release in versions.RELEASES}
    assert {name for names in TABLES.values() for name in names} == set(TABLE_FILES)


def test_extracted_tables_are_pinned_and_clean():
    """extract.py's tables (trtllm-<version>.json), where committed: of a pinned release, from a commit, no errors."""
    extracted = sorted(HERE.glob("trtllm-*.json"))
    found = {p.name[len("trtllm-") : -len(".json")] for p in extracted}
    assert found <= set(TABLES), f"tables without a pin: {sorted(found - set(TABLES))}"
    for path in extracted:
        data = json.loads(path.read_text())
        assert data["source"]["repo"] == "NVIDIA/TensorRT-LLM", path.name
        assert re.fullmatch(r"[0-9a-f]{40}", data["source"]["commit"] or ""), path.name
        assert data["errors"] == [], path.name


@pytest.mark.parametrize("release", sorted(TABLES))
def test_every_table_says_where_it_was_read(release):
    for name in TABLES[release]:
        data = table(name)
        named = set(data.get("sources") or {})  # an option's "source": "build" names an entry of "sources"
        labels = [s for s in sources(data) if s not in named]
        assert labels, f"{name}: no source"
        unlabelled = [s for s in labels if not LABEL.search(s)]
        assert not unlabelled, (name, unlabelled)


@pytest.mark.parametrize("release", sorted(TABLES))
def test_trtllm_serve_options(release):
    options = table("trtllm_serve")["serve_py"]["options"]
    # The flags specdec-runtime renders for every trtllm-serve launch.
    for flag in (
        "--backend",
        "--extra_llm_api_options",
        "--host",
        "--port",
        "--tp_size",
        "--log_level",
    ):
        assert flag in options
    assert ROUTE_BACKEND[release] in options["--backend"]


@pytest.mark.parametrize("release", sorted(TABLES))
def test_llm_args_and_kv_cache_config(release):
    llm = table("trtllm_serve")["llm_args"]
    assert {"kv_cache_config", "speculative_config"} <= set(llm["base_keys"])
    assert {"free_gpu_memory_fraction", "enable_block_reuse"} <= set(llm["kv_cache_config_keys"])
    # The YAML's kv_cache_config replaces the one --kv_cache_free_gpu_memory_fraction makes: the KV fraction is
    # rendered in the YAML only (specdec.runtime.trtllm_serve).
    assert "kv_cache_config" in llm["extra_options_merge"]["replaced_keys"]


def pytorch_modes() -> dict[str, str]:
    """Mode name -> the decoding_type literal it emits (a module's DECODING_TYPE)."""
    out = {}
    for name, mode in modes.MODES.items():
        module = importlib.import_module(mode.block.__module__ if mode.block else f"specdec.modes.{name}")
        if mode.pytorch and hasattr(module, "DECODING_TYPE"):
            out[name] = module.DECODING_TYPE
    return out


def test_speculative_configs():
    data = table("trtllm_speculative_config")
    types = data["decoding_types"]
    classes = [entry["class"].split("(")[0] for entry in types.values()]
    assert len(classes) == len(set(classes)), "one class per decoding_type literal"
    for literal, entry in types.items():
        assert entry["fields"] is not None and entry["class"].endswith(("DecodingConfig", ")")), literal
    assert "max_draft_len" in data["base_fields"] and "draft_len_schedule" in data["base_fields"]
    # The classes the pinned release's reference pages were read for are labelled with that release.
    for literal in ("Eagle3", "MTP", "DFlash", "DSpark"):
        assert f"/{versions.PYTORCH.trtllm}/" in types[literal]["source"], literal
    assert "inferred" in types["SaveState"]["source"]


def test_pytorch_speculative_modes():
    types = table("trtllm_speculative_config")["decoding_types"]
    emitted = pytorch_modes()
    assert {"eagle3", "mtp", "ngram", "sa", "pard", "dflash", "dspark", "saveState", "auto"} <= set(emitted)
    for name, literal in emitted.items():
        assert literal in types, (name, literal)
        assert "pytorch" in types[literal].get("backends", ["pytorch"]), (name, literal)


def test_trtllm_build_speculative_options():
    options = table("trtllm_build_options")["options"]
    assert "--max_draft_len" in options
    # draft-target (Triton) and ReDrafter are the engine-path modes we build.
    assert {"draft_tokens_external", "explicit_draft_tokens"} <= set(options["--speculative_decoding_mode"]["choices"])
    assert {"--gemm_plugin", "--use_paged_context_fmha"} <= set(options)


SCRIPT_STEPS = {  # script -> (a spec whose engine build runs it, the step, the program)
    "convert_checkpoint_llama": (
        lambda: load_example("llama-2-13b-draft-7b-logits")["spec"],
        "convert",
        "convert_checkpoint.py",
    ),
    "convert_checkpoint_qwen": (
        lambda: spec(target={"model": "hf://Qwen/Qwen2.5-7B-Instruct"}),
        "convert",
        "convert_checkpoint.py",
    ),
    "quantize": (lambda: load_example("llama-3.1-70b-fp8-draft-1b")["spec"], "quantize", "quantize.py"),
    "convert_checkpoint_redrafter": (
        lambda: load_example("vicuna-7b-redrafter")["spec"],
        "redrafter-convert",
        "convert_checkpoint.py",
    ),
}


@pytest.mark.parametrize("script", sorted(SCRIPT_STEPS))
def test_engine_scripts_have_the_options_the_build_steps_render(script):
    make_spec, step_name, program = SCRIPT_STEPS[script]
    known = table("engine_scripts")["scripts"][script]
    assert "--output_dir" in known["flags"]
    argv = command(next(s for s in steps(engines(make_spec())["target"]) if s.name == step_name), program)
    rendered = {a for a in map(str, argv) if a.startswith("-")}
    assert rendered and rendered <= set(known["flags"]), rendered - set(known["flags"])
    for flag, choices in known.get("choices", {}).items():
        if flag in argv:
            assert argv[argv.index(flag) + 1] in choices, (flag, argv[argv.index(flag) + 1])


def test_triton_backend_parameter_keys():
    models = table("trtllm_backend")["parameter_keys"]
    assert {"tensorrt_llm", "preprocessing", "postprocessing"} <= set(models)
    assert {"gpt_model_path", "gpt_model_type", "max_beam_width", "kv_cache_free_gpu_mem_fraction"} <= set(
        models["tensorrt_llm"]["keys"]
    )


def test_multi_node_launch_uses_only_documented_flags():
    """The leader's command for the multi-node example: every mpirun flag in Open MPI's mpirun page, the launcher
    TensorRT-LLM's script, whose rank comes from a variable mpirun sets, and every trtllm-serve flag in serve.py."""
    data = table("trtllm_serve")["multi_node"]
    mpirun, launcher = data["mpirun"], data["launcher"]
    config = make_plan(load_example("deepseek-v3-mtp-2x8-h100")["spec"]).runtime
    assert config.multi_node is not None
    argv = launch.plan_launch(config, "/w", group_env=multinode.example_group_env(config.multi_node)).argv
    split = argv.index(launcher["name"])
    assert argv[0] == "mpirun" and multinode.LAUNCHER == launcher["name"]
    for flag in (a for a in argv[1:split] if a.startswith("-")):
        assert flag in mpirun["options"], flag
    assert argv[argv.index("--bind-to") + 1] in mpirun["options"]["--bind-to"]
    assert set(mpirun["rank_variables_set"]) & set(launcher["rank_variables"])
    serve = argv[split + 1 :]
    options = table("trtllm_serve")["serve_py"]["options"]
    assert serve[0] == "trtllm-serve"
    for flag in (a for a in serve[1:] if a.startswith("--")):
        assert flag in options, flag
