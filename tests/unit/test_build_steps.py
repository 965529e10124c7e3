"""The build steps and their exact TensorRT-LLM flags, per recipe kind (see /tmp/research/trtllm.md and
the DTM / ReDrafter READMEs and NVIDIA's blog for where each flag comes from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.builders.build_steps import STEP_PHASES, STEP_REASONS, build_steps
from specdec.builders.engine import build_engine_build, build_job
from specdec.render import render_objects
from tests.unit.helpers import EXAMPLE_70B, EXAMPLES, SETTINGS, command, engines, flag, has_pairs, load_example, steps
from tests.unit.invalid_specs import DRAFT, TARGET, draft_target, redrafter, spec

# trtllm-build's own option definitions (build.py argparse + plugin.py cli_plugin_args), with their source commits
TRTLLM_BUILD = json.loads((Path(__file__).parent / "data" / "trtllm_build_options.json").read_text())

EXAMPLES_DIR = "${TRTLLM_EXAMPLES_DIR}"
SPECULATIVE_FLAGS = {"--speculative_decoding_mode", "--max_draft_len", "--gather_generation_logits"}


def fp16_draft_target(**fields):
    return spec(speculation=draft_target(maxDraftLen=10, **fields))


def fp8_source(model, **extra):
    return {"model": model, "quantization": "fp8", **extra}


def names(engine):
    return [s.name for s in steps(engine)]


def step(engine, name):
    return next(s for s in steps(engine) if s.name == name)


def job_for(engine):
    created = build_engine_build("ns", engine)
    created["metadata"]["uid"] = "uid-1"
    return build_job(created, SETTINGS)


def containers(job):
    pod = job["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


# --- draftTarget, fp16 ----------------------------------------------------------------------------


def test_fp16_target_is_converted_then_built_with_draft_tokens_external():
    target = engines(fp16_draft_target())["target"]
    assert names(target) == ["convert", "build"]
    convert = command(step(target, "convert"), "convert_checkpoint.py")
    assert convert[:2] == ["python3", f"{EXAMPLES_DIR}/models/core/llama/convert_checkpoint.py"]
    assert has_pairs(convert, ("--dtype", "float16"), ("--tp_size", 1), ("--workers", 1))
    assert flag(convert, "--model_dir") == "/cache/models/meta-llama--Llama-2-13b-hf/main"
    build = command(step(target, "build"), "trtllm-build")
    assert has_pairs(
        build,
        ("--speculative_decoding_mode", "draft_tokens_external"),
        ("--max_draft_len", 10),
        ("--use_paged_context_fmha", "enable"),
        ("--gemm_plugin", "float16"),
    )
    assert flag(build, "--checkpoint_dir") == flag(convert, "--output_dir")
    assert "--gather_generation_logits" not in build


def test_max_draft_len_defaults_to_draft_len_in_the_target_build():
    target = engines(spec(speculation=draft_target(draftLen=6)))["target"]
    assert flag(command(step(target, "build"), "trtllm-build"), "--max_draft_len") == "6"


def test_fp16_draft_has_no_speculative_flags():
    draft = engines(fp16_draft_target())["draft"]
    assert names(draft) == ["convert", "build"]
    build = command(step(draft, "build"), "trtllm-build")
    assert not SPECULATIVE_FLAGS & set(build)
    assert has_pairs(build, ("--use_paged_context_fmha", "enable"), ("--gemm_plugin", "float16"))
    assert (
        flag(command(step(draft, "convert"), "convert_checkpoint.py"), "--model_dir")
        == "/cache/models/meta-llama--Llama-2-7b-hf/main"
    )


def test_bfloat16_and_family_select_dtype_and_script():
    source = {"model": "hf://Qwen/Qwen2.5-7B-Instruct", "dtype": "bfloat16", "family": "qwen"}
    target = engines(spec(target=source))["target"]
    convert = command(step(target, "convert"), "convert_checkpoint.py")
    assert convert[1] == f"{EXAMPLES_DIR}/models/core/qwen/convert_checkpoint.py"
    assert flag(convert, "--dtype") == "bfloat16"
    assert flag(command(step(target, "build"), "trtllm-build"), "--gemm_plugin") == "bfloat16"


def test_engine_limits_become_build_flags():
    raw = fp16_draft_target()
    raw["engine"] = {"maxBatchSize": 4, "maxInputLen": 3200, "maxSeqLen": 4800, "maxNumTokens": 8192}
    for engine in engines(raw).values():
        build = command(step(engine, "build"), "trtllm-build")
        assert has_pairs(
            build,
            ("--max_batch_size", 4),
            ("--max_input_len", 3200),
            ("--max_seq_len", 4800),
            ("--max_num_tokens", 8192),
        )


def test_unset_engine_limits_are_left_to_trtllm():
    build = command(step(engines(spec())["target"], "build"), "trtllm-build")
    assert not {"--max_batch_size", "--max_input_len", "--max_seq_len", "--max_num_tokens"} & set(build)
    assert not SPECULATIVE_FLAGS & set(build)


# --- fp8 ------------------------------------------------------------------------------------------


def test_fp8_is_quantized_with_fp8_kv_cache_and_fp8_gemm():
    raw = spec(target=fp8_source(TARGET, tensorParallelSize=2), speculation=draft_target(draft=fp8_source(DRAFT)))
    built = engines(raw)
    for role, engine in built.items():
        assert names(engine) == ["quantize", "build"], role
        quantize = command(step(engine, "quantize"), "quantize.py")
        assert quantize[1] == f"{EXAMPLES_DIR}/quantization/quantize.py"
        assert has_pairs(
            quantize, ("--qformat", "fp8"), ("--kv_cache_dtype", "fp8"), ("--calib_size", 512), ("--dtype", "float16")
        )
        assert flag(command(step(engine, "build"), "trtllm-build"), "--gemm_plugin") == "fp8"
    assert flag(command(step(built["target"], "quantize"), "quantize.py"), "--tp_size") == "2"
    assert flag(command(step(built["draft"], "quantize"), "quantize.py"), "--tp_size") == "1"


def test_fp8_with_auto_kv_cache_has_no_kv_cache_dtype():
    target = engines(spec(target=fp8_source(TARGET, kvCacheDtype="auto")))["target"]
    quantize = command(step(target, "quantize"), "quantize.py")
    assert flag(quantize, "--qformat") == "fp8"
    assert "--kv_cache_dtype" not in quantize


def test_calib_size_comes_from_settings():
    target = engines(spec(target=fp8_source(TARGET)))["target"]
    quantize_step = next(s for s in build_steps(target.name, target.spec, 1024) if s.name == "quantize")
    assert flag(command(quantize_step, "quantize.py"), "--calib_size") == "1024"


# --- logits acceptance ----------------------------------------------------------------------------


def test_logits_acceptance_gathers_generation_logits_on_both_engines():
    built = engines(fp16_draft_target(acceptance="logits"))
    assert set(built) == {"target", "draft"}
    for role, engine in built.items():
        assert "--gather_generation_logits" in command(step(engine, "build"), "trtllm-build"), role


def test_token_acceptance_gathers_no_logits():
    for engine in engines(fp16_draft_target(acceptance="tokens")).values():
        assert "--gather_generation_logits" not in command(step(engine, "build"), "trtllm-build")


# --- redrafter ------------------------------------------------------------------------------------


def redrafter_engine(**fields):
    built = engines(spec(speculation=redrafter(numBeams=4, draftLenPerBeam=5, **fields)))
    assert list(built) == ["target"]
    return built["target"]


def test_redrafter_converts_base_then_drafter_then_builds_explicit_draft_tokens():
    engine = redrafter_engine()
    assert names(engine) == ["convert", "redrafter-convert", "build"]
    base = command(step(engine, "convert"), "convert_checkpoint.py")
    assert base[1] == f"{EXAMPLES_DIR}/models/core/llama/convert_checkpoint.py"
    rd = command(step(engine, "redrafter-convert"), "convert_checkpoint.py")
    assert rd[1] == f"{EXAMPLES_DIR}/redrafter/convert_checkpoint.py"
    assert flag(rd, "--base_model_checkpoint_dir") == flag(base, "--output_dir")
    assert flag(rd, "--drafter_model_dir") == "/models/drafters/vicuna-7b-drafter"
    assert has_pairs(rd, ("--redrafter_num_beams", 4), ("--redrafter_draft_len_per_beam", 5), ("--dtype", "float16"))
    assert "--model_dir" not in rd  # the old ReDrafter API
    assert "--redrafter_no_greedy_search" not in rd
    build = command(step(engine, "build"), "trtllm-build")
    assert flag(build, "--checkpoint_dir") == flag(rd, "--output_dir")
    assert flag(build, "--speculative_decoding_mode") == "explicit_draft_tokens"
    assert "--max_draft_len" not in build and "--gather_generation_logits" not in build


def test_redrafter_no_greedy_search_only_when_greedy_is_false():
    rd = command(step(redrafter_engine(greedy=False, temperature=0.7), "redrafter-convert"), "convert_checkpoint.py")
    assert rd.count("--redrafter_no_greedy_search") == 1


def test_redrafter_on_fp8_base_quantizes_first():
    raw = spec(target=fp8_source(TARGET), speculation=redrafter())
    engine = engines(raw)["target"]
    assert names(engine) == ["quantize", "redrafter-convert", "build"]
    rd = command(step(engine, "redrafter-convert"), "convert_checkpoint.py")
    assert flag(rd, "--base_model_checkpoint_dir") == flag(
        command(step(engine, "quantize"), "quantize.py"), "--output_dir"
    )
    assert flag(command(step(engine, "build"), "trtllm-build"), "--gemm_plugin") == "fp8"


def test_hf_drafter_is_read_from_the_cache_its_model_cache_fills():
    engine = engines(spec(speculation=redrafter(drafterModel="hf://org/drafter")))["target"]
    assert [(c.spec.model, c.spec.revision) for c in engine.inputs] == [
        ("hf://meta-llama/Llama-2-13b-hf", "main"),
        ("hf://org/drafter", "main"),
    ]
    rd = command(step(engine, "redrafter-convert"), "convert_checkpoint.py")
    assert (
        flag(rd, "--drafter_model_dir") == "/cache/" + engine.inputs[1].spec.path == "/cache/models/org--drafter/main"
    )


# --- models: hf:// read from the cache (fetched by a ModelCache), pvc:// mounted --------------------


def test_build_reads_hf_model_from_the_cache_and_never_downloads():
    engine = engines(spec(target={"model": TARGET, "revision": "v1.0"}))["target"]
    assert names(engine) == ["convert", "build"]
    assert all("snapshot_download" not in s.script for s in steps(engine))
    assert [c.spec.path for c in engine.inputs] == ["models/meta-llama--Llama-2-13b-hf/v1.0"]
    assert (
        flag(command(step(engine, "convert"), "convert_checkpoint.py"), "--model_dir")
        == "/cache/models/meta-llama--Llama-2-13b-hf/v1.0"
    )


def test_pvc_model_is_not_fetched_and_is_mounted_read_only():
    engine = engines(spec(target={"model": "pvc://weights/llama/13b"}))["target"]
    assert names(engine) == ["convert", "build"] and engine.inputs == ()
    assert flag(command(step(engine, "convert"), "convert_checkpoint.py"), "--model_dir") == "/models/weights/llama/13b"
    job = job_for(engine)
    pod = job["spec"]["template"]["spec"]
    assert {"name": "model-0", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}} in pod["volumes"]
    for c in containers(job):
        assert {"name": "model-0", "mountPath": "/models/weights", "readOnly": True} in c["volumeMounts"], c["name"]


# --- the Job --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,expected",
    [
        (spec(speculation=redrafter()), ["convert", "redrafter-convert", "build"]),
        (spec(target=fp8_source(TARGET)), ["quantize", "build"]),
        (spec(target={"model": "pvc://weights/m"}), ["convert", "build"]),
    ],
    ids=["redrafter", "fp8", "pvc"],
)
def test_job_containers_are_the_steps_in_order(raw, expected):
    job = job_for(engines(raw)["target"])
    pod = job["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == expected[:-1]
    assert [c["name"] for c in pod["containers"]] == ["build"]
    assert pod["restartPolicy"] == "Never"
    for c in containers(job):
        assert c["command"][:4] == ["/bin/bash", "-euo", "pipefail", "-c"]
        assert c["command"][4] == step(engines(raw)["target"], c["name"]).script
        assert set(c["name"]) <= set("abcdefghijklmnopqrstuvwxyz-") and c["name"] in STEP_PHASES
        assert c["name"] in STEP_REASONS


def test_gpu_limit_is_tensor_parallel_size_on_every_build_step():
    raw = spec(
        target={"model": TARGET, "tensorParallelSize": 2},
        build={"resources": {"limits": {"memory": "64Gi", "nvidia.com/gpu": 8}, "requests": {"cpu": "8"}}},
    )
    job = job_for(engines(raw)["target"])
    by_name = {c["name"]: c for c in containers(job)}
    assert set(by_name) == {"convert", "build"}  # no step without GPUs: the fetch is a ModelCache's Job
    for name in ("convert", "build"):
        limits = by_name[name]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "2", name  # derived, never the user's 8
        assert limits["memory"] == "64Gi" and by_name[name]["resources"]["requests"] == {"cpu": "8"}


def test_job_passes_the_restricted_pod_security_profile():
    job = job_for(engines(spec(speculation=redrafter()))["target"])
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # The image's own numeric USER runs: with no runAsUser the kubelet refuses an image that runs as root.
    assert "runAsUser" not in pod["securityContext"] and "runAsGroup" not in pod["securityContext"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for c in containers(job):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert not sc.get("privileged") and sc.get("runAsUser", 1000) != 0, c["name"]
    allowed = {"configMap", "emptyDir", "persistentVolumeClaim", "secret", "projected", "downwardAPI"}
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= allowed, volume
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_pod_runs_as_its_image_s_non_root_user(example):
    """Fetch Jobs, build Jobs and the runtime Deployment (or a multi-node target's LeaderWorkerSet, leader and
    workers): runAsNonRoot without runAsUser/runAsGroup, so the image's numeric USER runs and the kubelet
    refuses an image that runs as root."""
    objects = render_objects(load_example(example.stem), SETTINGS)
    templates = [o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Job", "Deployment")]
    for group in (o["spec"]["leaderWorkerTemplate"] for o in objects if o["kind"] == "LeaderWorkerSet"):
        templates += [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]
    assert any(o["kind"] in ("Deployment", "LeaderWorkerSet") for o in objects)
    assert any(o["kind"] == "Job" for o in objects)
    for pod in templates:
        assert pod["securityContext"] == {
            "runAsNonRoot": True,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert "runAsUser" not in c["securityContext"] and c["securityContext"]["runAsNonRoot"] is True


def test_job_is_owned_by_its_engine_build_and_placed_on_gpus():
    raw = spec(
        build={
            "nodeSelector": {"gpu": "h100"},
            "backoffLimit": 5,
            "activeDeadlineSeconds": 7200,
            "podLabels": {"team": "ml"},
            "podAnnotations": {"a": "b"},
        }
    )
    engine = engines(raw)["target"]
    job = job_for(engine)
    assert job["metadata"]["name"] == f"{engine.name}-build"
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "specdec.io/v1alpha1",
            "kind": "EngineBuild",
            "name": engine.name,
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert job["spec"]["backoffLimit"] == 5 and job["spec"]["activeDeadlineSeconds"] == 7200
    template = job["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "ml"
    assert template["metadata"]["labels"]["specdec.io/engine-build"] == engine.name
    assert template["metadata"]["annotations"] == {"a": "b"}
    assert template["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true", "gpu": "h100"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in template["spec"]["tolerations"]
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": "specdec-engine-cache"}} in template["spec"][
        "volumes"
    ]


def test_build_publishes_the_engine_atomically():
    engine = engines(spec())["target"]
    script = step(engine, "build").script
    final = f"/cache/{engine.spec.engine_path}"
    partial = f"/cache/.work/{engine.name}/engine"
    build = command(step(engine, "build"), "trtllm-build")
    assert flag(build, "--output_dir") == partial
    assert f"{partial}/specdec-recipe.json" in script
    publish = script.rstrip().splitlines()[-2]
    assert publish.startswith("(flock 9 && if [ ") and publish.endswith(f") 9>{final}.lock")
    assert f"else rm -rf {final} && mv {partial} {final}; fi" in publish


def test_builds_of_one_recipe_with_other_placement_share_the_engine_directory():
    plain = engines(spec())["target"]
    picky = engines(spec(build={"nodeSelector": {"pool": "a100"}}))["target"]
    assert picky.name != plain.name and picky.name.startswith(plain.name + "-")
    assert picky.spec.engine_path == plain.spec.engine_path == f"engines/{plain.name}"
    # the second to finish keeps the first's engine (same recipe check under the lock)
    assert f"/cache/.work/{picky.name}/engine" in step(picky, "build").script


# --- tuning: the blog's recipe, and every flag as trtllm-build defines it ---------------------------


def build_line(engine):
    return command(step(engine, "build"), "trtllm-build")


def option_pairs(argv):
    """trtllm-build's argv as (flag, value) pairs (value None for store_true flags), checked against
    trtllm-build's own definitions: every flag exists, every value is accepted."""
    options = TRTLLM_BUILD["options"]
    assert argv[0] == "trtllm-build"
    pairs, rest = [], argv[1:]
    while rest:
        name = rest.pop(0)
        assert name in options, f"trtllm-build has no option {name}"
        option = options[name]
        if option.get("type") == "store_true":
            pairs.append((name, None))
            continue
        value = rest.pop(0)
        assert not value.startswith("--"), f"{name} without a value"
        if "choices" in option:
            assert value in option["choices"], f"{name} {value}: trtllm-build accepts {option['choices']}"
        elif option["type"] == "int":
            assert value.isdigit(), f"{name} {value}: not an int"
        pairs.append((name, value))
    names = [n for n, _ in pairs]
    assert len(names) == len(set(names)), f"a flag twice: {argv}"
    return set(pairs)


TUNING_VARIANTS = [
    spec(),
    spec(speculation=redrafter()),
    fp16_draft_target(acceptance="logits"),
    spec(
        target={"model": TARGET, "dtype": "bfloat16", "tensorParallelSize": 2},
        engine={
            "tuning": {
                "useFusedMlp": False,
                "multipleProfiles": False,
                "gptAttentionPlugin": "float32",
                "reduceFusion": {"target": True, "draft": True},
            }
        },
        speculation=draft_target(),
    ),
    spec(target=fp8_source(TARGET), engine={"tuning": {"lowLatencyGemmPlugin": False}}),
]


ENGINE_EXAMPLES = {
    p.stem: load_example(p.stem)["spec"]
    for p in EXAMPLES
    if load_example(p.stem)["spec"].get("backend", "tensorrt") == "tensorrt"
}


@pytest.mark.parametrize(
    "raw",
    [*ENGINE_EXAMPLES.values(), *TUNING_VARIANTS],
    ids=[*ENGINE_EXAMPLES, *(f"variant-{i}" for i in range(len(TUNING_VARIANTS)))],
)
def test_every_trtllm_build_flag_and_value_is_one_trtllm_build_defines(raw):
    built = engines(raw)
    assert built
    for engine in built.values():
        pairs = option_pairs(build_line(engine))
        for refused in TRTLLM_BUILD["refused_together"]:
            assert not (tuple(refused["option"]) in pairs and refused["refused_with"] in dict(pairs)), refused


# NVIDIA's blog (the seed /work/shared/seeds/003_8996979c7002a9a7.txt, lines 79-96): the two
# trtllm-build lines of "Steps to build 70B target and draft models in FP8 precision on 1 H200",
# restated verbatim minus the line continuations.
BLOG_70B_DRAFT = """trtllm-build --checkpoint_dir ./ckpt-draft --output_dir=./draft-engine
--gpt_attention_plugin float16 --workers 1 --gemm_plugin=fp8 --reduce_fusion disable --use_paged_context_fmha=enable
--use_fused_mlp enable --multiple_profiles enable --max_batch_size=32 --max_num_tokens=8192 --max_seq_len=131072"""
BLOG_70B_TARGET = """trtllm-build --checkpoint_dir=./ckpt-target-70b --output_dir=./target-engine
--gpt_attention_plugin float16 --workers 1 --gemm_plugin=fp8 --use_paged_context_fmha=enable --use_fused_mlp enable
--multiple_profiles enable --max_batch_size=32 --max_num_tokens=8192 --max_seq_len=131072
--low_latency_gemm_plugin fp8 --speculative_decoding_mode=draft_tokens_external --max_draft_len 10"""
PATHS = {"--checkpoint_dir", "--output_dir"}  # where the blog's shell and our cache claim differ


def blog_pairs(line):
    argv = [part for word in line.split() for part in word.split("=", 1)]
    return {(n, v) for n, v in option_pairs(argv) if n not in PATHS}


@pytest.mark.parametrize("role,line", [("target", BLOG_70B_TARGET), ("draft", BLOG_70B_DRAFT)])
def test_the_blog_example_renders_the_blogs_trtllm_build_lines(role, line):
    built = engines(load_example(EXAMPLE_70B)["spec"])
    ours = {(n, v) for n, v in option_pairs(build_line(built[role])) if n not in PATHS}
    assert ours == blog_pairs(line)


def test_tuning_defaults_follow_the_blog_per_role_and_dtype():
    built = engines(
        spec(target={"model": TARGET, "dtype": "bfloat16", "tensorParallelSize": 2}, speculation=draft_target())
    )
    target, draft = build_line(built["target"]), build_line(built["draft"])
    for argv in (target, draft):
        assert has_pairs(argv, ("--use_fused_mlp", "enable"), ("--multiple_profiles", "enable"))
        assert "--low_latency_gemm_plugin" not in argv  # no FP8 here
    assert flag(target, "--gpt_attention_plugin") == "bfloat16" and flag(draft, "--gpt_attention_plugin") == "float16"
    assert "--reduce_fusion" not in target  # TensorRT-LLM's default unless set
    assert flag(draft, "--reduce_fusion") == "disable"


def test_flags_left_out_mean_what_trtllm_build_defaults_to():
    """Off is rendered by leaving the flag out only where that is trtllm-build's default."""
    options = TRTLLM_BUILD["options"]
    assert options["--low_latency_gemm_plugin"]["default"] == "disable"
    assert options["--reduce_fusion"]["default"] == "disable"  # the target's, when unset


def test_low_latency_gemm_is_on_fp8_targets_only_and_can_be_turned_off():
    fp8 = engines(spec(target=fp8_source(TARGET), speculation=draft_target(draft=fp8_source(DRAFT))))
    assert flag(build_line(fp8["target"]), "--low_latency_gemm_plugin") == "fp8"
    assert "--low_latency_gemm_plugin" not in build_line(fp8["draft"])
    off = engines(spec(target=fp8_source(TARGET), engine={"tuning": {"lowLatencyGemmPlugin": False}}))
    assert "--low_latency_gemm_plugin" not in build_line(off["target"])


def test_tuning_set_explicitly_reaches_both_engines_and_names_new_engines():
    tuned = {
        "gptAttentionPlugin": "float32",
        "useFusedMlp": False,
        "multipleProfiles": False,
        "reduceFusion": {"target": True, "draft": True},
    }
    plain = engines(spec(speculation=draft_target()))
    built = engines(spec(speculation=draft_target(), engine={"tuning": tuned}))
    for role, engine in built.items():
        assert has_pairs(
            build_line(engine),
            ("--gpt_attention_plugin", "float32"),
            ("--use_fused_mlp", "disable"),
            ("--multiple_profiles", "disable"),
            ("--reduce_fusion", "enable"),
        ), role
        assert engine.name != plain[role].name, role  # engine bytes differ: so does the content hash
