"""The steps of an engine build, as the TensorRT-LLM docs give them: convert or quantize, the mode's own
steps (EnginePath.build_steps: ReDrafter's drafter conversion), trtllm-build. One container per step, so a
failure names its step. hf:// checkpoints are already in the cache: a ModelCache's fetch Job
(builders/model_cache.py) put them there on a CPU node.

Flags were checked against the TensorRT-LLM sources (examples/models/core/llama/convert_checkpoint.py,
examples/quantization/quantize.py, examples/redrafter/convert_checkpoint.py,
tensorrt_llm/commands/build.py, tensorrt_llm/plugin/plugin.py); tests/unit/data/trtllm_build_options.json
holds trtllm-build's options and tests/unit/test_build_steps.py checks every flag rendered against it.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

from specdec import modes
from specdec.api import shared_objects
from specdec.api.runtime_config import CACHE_MOUNT
from specdec.modes.mode import BuildStep
from specdec.plan import model_dir

EXAMPLES = "${TRTLLM_EXAMPLES_DIR}"
RECIPE_FILE = "specdec-recipe.json"  # written last into a finished engine: what it was built from

_MODE_STEPS = [step for mode in modes.MODES.values() if mode.engine for step in mode.engine.build_steps]
# step name -> the phase while it runs and the reason prefix when it fails ("fetch": a ModelCache's Job)
STEP_PHASES = {
    "fetch": "Fetching",
    "convert": "Converting",
    "quantize": "Quantizing",
    **{step.name: step.phase for step in _MODE_STEPS},
    "build": "Building",
}
STEP_REASONS = {
    "fetch": "Fetch",
    "convert": "Convert",
    "quantize": "Quantize",
    **{step.name: step.reason for step in _MODE_STEPS},
    "build": "Build",
}


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    script: str  # bash, run with -euo pipefail
    uses_gpus: bool


def _quote(arg: str | int) -> str:
    text = str(arg)
    if text.startswith(EXAMPLES):  # expanded by bash from the container's environment
        return f'"{EXAMPLES}"' + shlex.quote(text[len(EXAMPLES) :])
    return shlex.quote(text)


def _cmd(*argv: str | int) -> str:
    return " ".join(_quote(a) for a in argv)


def _checkpoint_step(recipe: shared_objects.EngineRecipe, out: str, calib_size: int) -> Step:
    source = model_dir(recipe.model, recipe.revision)
    tp = recipe.tensor_parallel_size
    if recipe.quantization == "fp8":
        kv = ["--kv_cache_dtype", "fp8"] if recipe.kv_cache_dtype == "fp8" else []
        argv: list[str | int] = [
            "python3",
            f"{EXAMPLES}/quantization/quantize.py",
            "--model_dir",
            source,
            "--dtype",
            recipe.dtype,
            "--qformat",
            "fp8",
            *kv,
            "--calib_size",
            calib_size,
            "--tp_size",
            tp,
            "--output_dir",
            out,
        ]
        name = "quantize"
    else:
        argv = [
            "python3",
            f"{EXAMPLES}/models/core/{recipe.family}/convert_checkpoint.py",
            "--model_dir",
            source,
            "--output_dir",
            out,
            "--dtype",
            recipe.dtype,
            "--tp_size",
            tp,
            "--workers",
            tp,
        ]
        name = "convert"
    return Step(name, f"rm -rf {shlex.quote(out)}\n{_cmd(*argv)}", uses_gpus=True)


def _mode_step(step: BuildStep, recipe: shared_objects.EngineRecipe, base: str, out: str) -> Step:
    args = step.args(recipe, base, out, lambda uri: model_dir(uri, None))
    return Step(
        step.name, f"rm -rf {shlex.quote(out)}\n{_cmd('python3', f'{EXAMPLES}/{step.script}', *args)}", uses_gpus=True
    )


def trtllm_build_args(recipe: shared_objects.EngineRecipe, checkpoint: str, out: str) -> list[str | int]:
    gemm = "fp8" if recipe.quantization == "fp8" else recipe.dtype
    argv: list[str | int] = [
        "trtllm-build",
        "--checkpoint_dir",
        checkpoint,
        "--output_dir",
        out,
        "--gemm_plugin",
        gemm,
        "--use_paged_context_fmha",
        "enable",
        "--workers",
        recipe.tensor_parallel_size,
    ]
    for flag, value in (
        ("--max_batch_size", recipe.max_batch_size),
        ("--max_input_len", recipe.max_input_len),
        ("--max_seq_len", recipe.max_seq_len),
        ("--max_num_tokens", recipe.max_num_tokens),
    ):
        if value is not None:
            argv += [flag, value]
    if recipe.speculative_decoding_mode != "none":
        argv += ["--speculative_decoding_mode", recipe.speculative_decoding_mode]
    if recipe.max_draft_len:
        argv += ["--max_draft_len", recipe.max_draft_len]
    if recipe.gather_generation_logits:
        argv.append("--gather_generation_logits")
    if recipe.gpt_attention_plugin:
        argv += ["--gpt_attention_plugin", recipe.gpt_attention_plugin]
    if recipe.low_latency_gemm_plugin:
        argv += ["--low_latency_gemm_plugin", "fp8"]  # its only kernels (off is TensorRT-LLM's default)
    for flag, on in (
        ("--use_fused_mlp", recipe.use_fused_mlp),
        ("--multiple_profiles", recipe.multiple_profiles),
        ("--reduce_fusion", recipe.reduce_fusion),
    ):
        if on is not None:
            argv += [flag, "enable" if on else "disable"]
    return argv


def build_steps(name: str, spec: shared_objects.EngineBuildSpec, calib_size: int) -> list[Step]:
    """The ordered steps that turn `spec.recipe` into an engine at `spec.enginePath` in the cache."""
    recipe = spec.recipe
    work = f"{CACHE_MOUNT}/.work/{name}"
    engine = f"{CACHE_MOUNT}/{spec.engine_path}"
    checkpoint = f"{work}/checkpoint"
    steps = [_checkpoint_step(recipe, checkpoint, calib_size)]
    engine_path = modes.engine_path(recipe)
    for mode_step in engine_path.build_steps if engine_path else ():
        out = f"{work}/{mode_step.output}"
        steps.append(_mode_step(mode_step, recipe, checkpoint, out))
        checkpoint = out
    partial = f"{work}/engine"  # per EngineBuild: builds of one recipe with different placement run apart
    recipe_json = json.dumps(recipe.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=True)
    # An engine of this very recipe already in the cache (built by another EngineBuild of the same
    # recipe, or kept after its EngineBuild was collected) is reused: every step sees it and does nothing.
    built = f'[ "$(cat {shlex.quote(engine + "/" + RECIPE_FILE)} 2>/dev/null)" = {shlex.quote(recipe_json)} ]'
    done = f"if {built}; then echo 'engine already in the cache'; exit 0; fi"
    lock = shlex.quote(f"{engine}.lock")
    steps.append(
        Step(
            "build",
            "\n".join(
                [
                    f"rm -rf {shlex.quote(partial)}",
                    _cmd(*trtllm_build_args(recipe, checkpoint, partial)),
                    f"printf '%s\\n' {shlex.quote(recipe_json)} > {shlex.quote(partial + '/' + RECIPE_FILE)}",
                    # Publish under a lock: the first finished build of a recipe wins, the others keep it.
                    f"mkdir -p {shlex.quote(engine.rsplit('/', 1)[0])}",
                    f"(flock 9 && if {built}; then rm -rf {shlex.quote(partial)}; else rm -rf {shlex.quote(engine)} "
                    f"&& mv {shlex.quote(partial)} {shlex.quote(engine)}; fi) 9>{lock}",
                    f"rm -rf {shlex.quote(work)}",
                ]
            ),
            uses_gpus=True,
        )
    )
    return [dataclasses.replace(step, script=f"{done}\n{step.script}") for step in steps]
