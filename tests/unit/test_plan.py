"""plan(): engine naming and sharing, GPU counts, KV-cache defaults, checks, runtime configuration."""

from __future__ import annotations

import copy

import pydantic
import pytest

from specdec.builders.serving import build_deployment
from specdec.plan import HASHED_WHEN_NULL, engine_name
from tests.unit.helpers import (
    EXAMPLE_13B,
    EXAMPLE_70B,
    EXAMPLE_REDRAFTER,
    SETTINGS,
    load_example,
    make_plan,
    make_problem,
)
from tests.unit.invalid_specs import DRAFT, TARGET, draft_target, redrafter, spec


def base() -> dict:
    return spec(speculation=draft_target(maxDraftLen=10), engine={"maxBatchSize": 4})


def edited(path: str, value) -> dict:
    """base() with the dotted `path` set to `value`."""
    raw = base()
    node = raw
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return raw


def names(raw: dict, name: str = "sd") -> dict[str, str]:
    return {e.role: e.name for e in make_plan(raw, name).engines}


# --- engine names ---------------------------------------------------------------------------------


def test_engine_names_are_deterministic_and_readable():
    first, second = names(base()), names(copy.deepcopy(base()))
    assert first == second
    assert first["target"].startswith("llama-2-13b-hf-") and first["draft"].startswith("llama-2-7b-hf-")
    assert first["target"] != first["draft"]
    for name in first.values():
        assert len(name) <= 63 and name.replace("-", "").isalnum() and name == name.lower()


def test_deployments_with_the_same_target_recipe_share_the_engine():
    other = base()
    other["speculation"]["draftTarget"]["draft"] = {"model": "hf://meta-llama/Llama-3.2-1B"}
    other["speculation"]["draftTarget"]["draftLen"] = 6  # same maxDraftLen: same target engine
    a, b = names(base(), "one"), names(other, "two")
    assert a["target"] == b["target"]
    assert a["draft"] != b["draft"]


def test_a_tokens_draft_engine_does_not_depend_on_the_target():
    assert names(base())["draft"] == names(edited("target.model", "hf://meta-llama/Llama-2-70b-hf"))["draft"]


def test_a_tokens_draft_engine_is_the_plain_engine_of_that_model_with_the_drafts_tuning():
    """The blog builds drafts with reduce fusion pinned off (the draft-only default); a mode-none
    deployment of the draft model that pins it off too builds the very same engine."""
    plain = {"maxBatchSize": 4, "tuning": {"reduceFusion": {"target": False}}}
    assert names(base())["draft"] == names(spec(target={"model": DRAFT}, engine=plain))["target"]
    assert names(base())["draft"] != names(spec(target={"model": DRAFT}, engine={"maxBatchSize": 4}))["target"]


@pytest.mark.parametrize(
    "path,value",
    [
        ("target.dtype", "bfloat16"),
        ("target.quantization", "fp8"),
        ("target.tensorParallelSize", 2),
        ("target.revision", "v2"),
        ("speculation.draftTarget.maxDraftLen", 8),
        ("speculation.draftTarget.acceptance", "logits"),
        ("build.image", "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"),
        ("engine.maxBatchSize", 8),
        ("engine.maxSeqLen", 4096),
        ("engine.maxNumTokens", 8192),
        ("engine.tuning.gptAttentionPlugin", "float32"),
        ("engine.tuning.useFusedMlp", False),
        ("engine.tuning.multipleProfiles", False),
        ("engine.tuning.reduceFusion.target", True),
        ("cache.claimName", "other-cache"),
    ],
)
def test_target_engine_name_changes_with_the_recipe(path, value):
    assert names(edited(path, value))["target"] != names(base())["target"]


def test_a_field_added_to_the_recipe_renames_no_engine_while_unset():
    """A new mode's part of the EngineRecipe, or a new flag, is left out of the name while null; the fields
    engine names already hash as null stay in it (HASHED_WHEN_NULL)."""
    recipe = make_plan(load_example(EXAMPLE_13B)["spec"]).engines[0].spec.recipe
    grown = pydantic.create_model("Grown", __base__=type(recipe), new_part=(dict | None, None))
    same = grown(**recipe.model_dump())
    assert engine_name(same, "claim") == engine_name(recipe, "claim")
    assert engine_name(same.model_copy(update={"new_part": {"a": 1}}), "claim") != engine_name(recipe, "claim")
    assert "redrafter" in HASHED_WHEN_NULL and recipe.redrafter is None  # hashed as null: names unchanged


@pytest.mark.parametrize(
    "path,value",
    [
        ("runtime.replicas", 3),
        ("runtime.kvCache.freeGpuMemoryFraction", 0.5),
        ("runtime.port", 9000),
        ("runtime.image", "example.com/runtime:2"),
        ("speculation.draftTarget.draftLen", 7),
    ],
)
def test_engine_names_ignore_serving(path, value):
    assert names(edited(path, value)) == names(base())


@pytest.mark.parametrize(
    "path,value",
    [
        ("build.nodeSelector", {"gpu": "h100"}),
        ("build.backoffLimit", 5),
        ("build.podLabels", {"team": "ml"}),
        ("build.resources", {"limits": {"memory": "64Gi"}}),
    ],
)
def test_placement_gives_a_build_of_its_own_with_the_same_engine_directory(path, value):
    """One deployment's build settings never decide another's build (README: engine builds)."""
    plain = {e.role: e for e in make_plan(base()).engines}
    placed = {e.role: e for e in make_plan(edited(path, value)).engines}
    for role in plain:
        assert placed[role].name != plain[role].name
        assert placed[role].spec.engine_path == plain[role].spec.engine_path
        assert placed[role].spec.recipe == plain[role].spec.recipe


def test_draft_engine_name_changes_with_the_draft_recipe_only():
    assert names(edited("speculation.draftTarget.draft.dtype", "bfloat16"))["draft"] != names(base())["draft"]
    assert names(edited("speculation.draftTarget.draft.dtype", "bfloat16"))["target"] == names(base())["target"]
    assert names(edited("speculation.draftTarget.maxDraftLen", 8))["draft"] == names(base())["draft"]


def test_engine_build_spec_carries_placement_and_path():
    raw = edited("build.nodeSelector", {"gpu": "h100"})
    target = next(e for e in make_plan(raw).engines if e.role == "target")
    assert target.spec.pod.node_selector == {"gpu": "h100"}
    assert target.spec.engine_path == f"engines/{target.name.rsplit('-', 1)[0]}"
    assert target.spec.cache_claim == "specdec-engine-cache"
    assert target.spec.recipe.image == SETTINGS.build_image


# --- GPUs and KV cache ----------------------------------------------------------------------------


def test_gpus_of_the_examples():
    assert make_plan(load_example(EXAMPLE_13B)["spec"]).gpus == 2
    assert make_plan(load_example(EXAMPLE_70B)["spec"]).gpus == 1
    assert make_plan(load_example(EXAMPLE_REDRAFTER)["spec"]).gpus == 1


def test_gpus_are_the_distinct_devices_of_draft_and_target():
    raw = spec(
        target={"model": TARGET, "tensorParallelSize": 2, "devices": [0, 1]},
        speculation=draft_target(draft={"model": DRAFT, "tensorParallelSize": 2, "devices": [1, 2]}),
    )
    assert make_plan(raw).gpus == 3
    assert make_plan(spec(target={"model": TARGET, "tensorParallelSize": 4})).gpus == 4


def test_deployment_requests_the_planned_gpus():
    p = make_plan(load_example(EXAMPLE_13B)["spec"])
    container = build_deployment(p, "uid", SETTINGS)["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize(
    "draft_devices,target_devices,fraction",
    [
        ([0], [0], 0.35),
        ([0], [1], 0.9),
        (None, None, 0.35),  # both default to GPU 0
    ],
)
def test_default_kv_fraction(draft_devices, target_devices, fraction):
    draft = {"model": DRAFT, **({"devices": draft_devices} if draft_devices else {})}
    target = {"model": TARGET, **({"devices": target_devices} if target_devices else {})}
    p = make_plan(spec(target=target, speculation=draft_target(draft=draft)))
    assert p.runtime.kv_cache.free_gpu_memory_fraction == fraction


def test_default_kv_fraction_without_draft_is_alone():
    assert make_plan(spec()).runtime.kv_cache.free_gpu_memory_fraction == 0.9
    assert make_plan(spec(speculation=redrafter())).runtime.kv_cache.free_gpu_memory_fraction == 0.9


def test_explicit_kv_fraction_wins():
    raw = spec(speculation=draft_target(), runtime={"kvCache": {"freeGpuMemoryFraction": 0.6}})
    assert make_plan(raw).runtime.kv_cache.free_gpu_memory_fraction == 0.6


# --- checks ---------------------------------------------------------------------------------------


def test_devices_not_contiguous():
    problem = make_problem(
        spec(target={"model": TARGET, "devices": [2]}, speculation=draft_target(draft={"model": DRAFT, "devices": [1]}))
    )
    assert problem.reason == "DevicesNotContiguous"
    assert "[1, 2]" in problem.message and "0..1" in problem.message


@pytest.mark.parametrize("speculation", [{"mode": "none"}, redrafter()], ids=["none", "redrafter"])
def test_devices_not_contiguous_without_draft(speculation):
    problem = make_problem(spec(target={"model": TARGET, "devices": [1]}, speculation=speculation))
    assert problem.reason == "DevicesNotContiguous"


def test_revision_needs_a_hub_model():
    problem = make_problem(spec(target={"model": "pvc://weights/m", "revision": "v1"}))
    assert problem.reason == "RevisionNeedsHubModel" and "spec.target.revision" in problem.message


def test_pytorch_refuses_device_lists_with_a_draft():
    problem = make_problem(
        spec(backend="pytorch", target={"model": TARGET, "devices": [0]}, speculation=draft_target())
    )
    assert problem.reason == "DeviceListsUnsupported"


def test_invalid_spec_is_a_problem_not_an_exception():
    problem = make_problem(spec(runtime={"replicas": -1}))
    assert problem.reason == "InvalidSpec" and "replicas" in problem.message


# --- backends -------------------------------------------------------------------------------------


def test_pytorch_backend_builds_no_engines():
    p = make_plan(spec(backend="pytorch", speculation=draft_target()))
    assert p.engines == () and p.engine_names == []
    assert p.runtime.backend == "pytorch"
    assert p.runtime.target.engine_dir is None and p.runtime.draft_target.draft.engine_dir is None
    # read from the cache, fetched by a ModelCache: no runtime pod downloads from the Hub
    assert p.runtime.target.checkpoint == "/cache/models/meta-llama--Llama-2-13b-hf/main"
    assert p.runtime.kv_cache.free_gpu_memory_fraction == 0.35  # one process, one GPU set


def test_pytorch_backend_keeps_the_revision():
    p = make_plan(spec(backend="pytorch", target={"model": TARGET, "revision": "abc123"}))
    assert p.runtime.target.checkpoint == "/cache/models/meta-llama--Llama-2-13b-hf/abc123"
    assert p.runtime.target.revision is None  # in the path: nothing for trtllm-serve to resolve
    assert [(c.spec.model, c.spec.revision) for c in p.runtime_inputs] == [(TARGET, "abc123")]


def test_pytorch_runtime_gets_the_hub_token():
    p = make_plan(spec(backend="pytorch"))
    env = build_deployment(p, "uid", SETTINGS)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "HF_TOKEN" in {e["name"] for e in env}


def test_cache_claim():
    assert make_plan(spec()).cache.claim_name == "specdec-engine-cache"
    assert make_plan(spec()).cache.managed is True
    own = make_plan(spec(cache={"claimName": "mine"})).cache
    assert (own.claim_name, own.managed) == ("mine", False)
    fast = make_plan(spec(cache={"storageClassName": "fast.nfs", "size": "1Ti"})).cache
    assert (fast.claim_name, fast.managed, fast.storage_class_name, fast.size) == (
        "specdec-engine-cache-fast-nfs",
        True,
        "fast.nfs",
        "1Ti",
    )


def test_model_claims_are_the_pvc_models():
    raw = spec(
        target={"model": "pvc://weights/llama/13b"}, speculation=draft_target(draft={"model": "pvc://drafts/7b"})
    )
    assert make_plan(raw).model_claims == ("drafts", "weights")
    assert make_plan(spec()).model_claims == ()


# --- runtime configuration of the examples --------------------------------------------------------


def test_runtime_of_the_13b_example():
    p = make_plan(load_example(EXAMPLE_13B)["spec"], "llama2-13b-spec")
    rt = p.runtime
    engines = {e.role: e.name for e in p.engines}
    assert (rt.backend, rt.mode, rt.served_model_name) == ("tensorrt", "draftTarget", "meta-llama/Llama-2-13b-hf")
    assert (rt.draft_target.draft_len, rt.draft_target.max_draft_len, rt.draft_target.use_logits) == (4, 10, True)
    assert rt.target.devices == [1] and rt.draft_target.draft.devices == [0]
    assert rt.target.engine_dir == f"/cache/engines/{engines['target']}"
    assert rt.draft_target.draft.engine_dir == f"/cache/engines/{engines['draft']}"
    assert rt.target.checkpoint == "/cache/models/meta-llama--Llama-2-13b-hf/main"
    assert rt.kv_cache.free_gpu_memory_fraction == 0.4 and rt.kv_cache.enable_block_reuse is True


def test_runtime_of_the_70b_example():
    p = make_plan(load_example(EXAMPLE_70B)["spec"], "llama70b-spec")
    rt = p.runtime
    assert (rt.draft_target.draft_len, rt.draft_target.max_draft_len, rt.draft_target.use_logits) == (10, 10, False)
    assert rt.target.devices == [0] and rt.draft_target.draft.devices == [0]
    assert rt.kv_cache.free_gpu_memory_fraction == 0.35
    engines = {e.role: e for e in p.engines}
    assert engines["target"].spec.recipe.kv_cache_dtype == "fp8" and engines["draft"].spec.recipe.quantization == "fp8"
    assert rt.target.engine_dir == f"/cache/engines/{engines['target'].name}"


def test_runtime_of_the_redrafter_example():
    p = make_plan(load_example(EXAMPLE_REDRAFTER)["spec"], "vicuna7b-redrafter")
    rt = p.runtime
    assert (rt.mode, rt.draft_target) == ("redrafter", None)
    assert rt.speculation.model_dump() == {"mode": "redrafter", "temperature": None}  # the beams are the engine's
    assert rt.target.devices == [0]
    assert [e.role for e in p.engines] == ["target"]
    assert rt.target.engine_dir == f"/cache/engines/{p.engines[0].name}"
    assert p.engines[0].spec.recipe.speculative_decoding_mode == "explicit_draft_tokens"
    assert p.model_claims == ()  # the drafter is built into the engine; the runtime does not mount it


def test_redrafter_runtime_carries_the_default_temperature():
    rt = make_plan(spec(speculation=redrafter(greedy=False, temperature=0.7))).runtime
    assert rt.speculation.temperature == 0.7


def test_served_name_of_a_pvc_model_is_its_last_path_part():
    assert make_plan(spec(target={"model": "pvc://weights/llama/13b-chat/"})).runtime.served_model_name == "13b-chat"


# --- draftLen: auto -------------------------------------------------------------------------------


def test_auto_draft_len_is_a_config_map_key_outside_the_rollout_hash():
    from specdec.builders.serving import build_config_map

    p = make_plan(spec(speculation=draft_target(draftLen="auto", maxDraftLen=8)))
    assert p.runtime.draft_target.draft_len == 4 and p.runtime.draft_target.max_draft_len == 8
    assert build_config_map(p, "uid")["data"]["draft_len"] == "4"  # where auto starts
    assert build_config_map(p, "uid", 6)["data"]["draft_len"] == "6"
    assert build_config_map(p, "uid", 12)["data"]["draft_len"] == "8"  # never beyond the engine's capacity
    assert build_config_map(p, "uid", 6)["data"]["runtime.json"] == build_config_map(p, "uid")["data"]["runtime.json"]
    small = make_plan(spec(speculation=draft_target(draftLen="auto", maxDraftLen=2)))
    assert build_config_map(small, "uid")["data"]["draft_len"] == "2"
    assert "draft_len" not in build_config_map(make_plan(base()), "uid")["data"]  # a fixed draftLen
    # the chosen length is not in the pod template: changing it restarts no pod
    template = build_deployment(p, "uid", SETTINGS)["spec"]["template"]
    assert "draft_len" not in str(template)


def test_auto_draft_len_on_trtllm_serve_is_in_the_runtime_config_so_a_change_rolls_the_pods():
    from specdec.builders.common import ANNOTATION_CONFIG_HASH
    from specdec.builders.serving import build_config_map, served_plan

    p = make_plan(spec(backend="pytorch", speculation=draft_target(draftLen="auto", maxDraftLen=8)))
    assert p.runtime.speculative_config["max_draft_len"] == 4  # where auto starts
    chosen = served_plan(p, 6)
    assert chosen.runtime.speculative_config == {**p.runtime.speculative_config, "max_draft_len": 6}
    assert chosen.runtime.draft_target.draft_len == 6 and chosen.runtime.draft_target.max_draft_len == 8
    assert served_plan(p, 12).runtime.speculative_config["max_draft_len"] == 8  # within 1..maxDraftLen
    assert served_plan(p, None).runtime == p.runtime
    assert build_config_map(chosen, "uid", 6)["data"]["draft_len"] == "6"  # what the pods were told, for a restart

    def rollout_hash(plan):
        return build_deployment(plan, "uid", SETTINGS)["spec"]["template"]["metadata"]["annotations"][
            ANNOTATION_CONFIG_HASH
        ]

    assert rollout_hash(chosen) != rollout_hash(p) and rollout_hash(served_plan(p, 4)) == rollout_hash(p)
    # The Triton route and a fixed draftLen are left as they are.
    triton = make_plan(spec(speculation=draft_target(draftLen="auto", maxDraftLen=8)))
    assert served_plan(triton, 6) == triton
    fixed = make_plan(spec(backend="pytorch", speculation=draft_target(draftLen=4)))
    assert served_plan(fixed, 6) == fixed


def test_runtime_pods_serve_through_their_pre_stop_sleep():
    from specdec.builders.serving import PRE_STOP_SLEEP_SECONDS, TERMINATION_GRACE_SECONDS

    pod = build_deployment(make_plan(base()), "uid", SETTINGS)["spec"]["template"]["spec"]
    assert pod["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}}
    # preStop, then the front's requests (25 s at most), then the server's stop (25 s at most)
    assert pod["terminationGracePeriodSeconds"] == TERMINATION_GRACE_SECONDS
    assert TERMINATION_GRACE_SECONDS >= PRE_STOP_SLEEP_SECONDS + 50
