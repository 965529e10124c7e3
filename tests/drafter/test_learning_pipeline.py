"""The drafter's learning pipeline on CPU, once end to end (it takes minutes): a tiny Llama target serves two
traffic classes through the transformers stand-in of trtllm-serve, 2,000 conversations of each are replayed
through its SaveState mode, and ModelOpt trains heads from the capture files. On held-out class-A conversations,
the class-A head beats the running draft (a head trained on a small mixed sample) by the 10 % margin; the
class-B head is refused for class-A traffic. specdec_dev.learning_chain runs the steps; bench/drafter_learning.py
prints the same figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("modelopt.torch.speculative", reason="the train extra (torch, transformers, nvidia-modelopt)")

from safetensors import safe_open  # noqa: E402  # after the skip: the train extra brings it

from specdec.drafter.eagle_head import ARCHITECTURE  # noqa: E402
from specdec_dev import tiny_target  # noqa: E402
from specdec_dev.learning_chain import Chain  # noqa: E402

RESULT_KEYS = {"samples", "acceptanceLength", "better", "margin", "seconds", "reason"}


@pytest.mark.timeout(1500)
def test_a_head_trained_on_class_a_beats_the_running_draft_and_one_trained_on_class_b_is_refused(
    tmp_path: Path,
) -> None:
    chain = Chain(tmp_path)
    figures = chain.all()

    for traffic_class in tiny_target.CLASSES:
        replay = figures["replays"][traffic_class]
        assert replay["replayed"] == chain.conversations and replay["failed"] == 0
        assert replay["heldOut"] > 100
        assert len(list((tmp_path / "hidden-states" / traffic_class).glob("data_*.pt"))) == chain.conversations

    head_a, head_b = figures["heads"]["a"], figures["heads"]["b"]
    for result in (head_a, head_b, figures["runningDraft"]):
        assert RESULT_KEYS <= result.keys()
        assert result["samples"] == min(figures["replays"]["a"]["heldOut"], 200)  # the trainer's --eval-limit
    assert json.loads((tmp_path / "result-class-a.json").read_text()) == head_a

    running = figures["runningDraft"]["acceptanceLength"]["candidate"]
    assert head_a["acceptanceLength"]["baseline"] == running == head_b["acceptanceLength"]["baseline"]
    assert head_a["better"] is True, head_a["reason"]
    assert head_a["acceptanceLength"]["candidate"] >= running * 1.10
    assert head_b["better"] is False, head_b["reason"]
    assert head_b["acceptanceLength"]["candidate"] < running * 1.10
    assert head_a["trainingConversations"] == chain.conversations

    # The exported head is what TensorRT-LLM's Eagle3 mode loads: its config and weights fit the target.
    head = tmp_path / "heads" / "class-a"
    config = json.loads((head / "config.json").read_text())
    target = json.loads((tmp_path / "target" / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE]
    assert (config["hidden_size"], config["vocab_size"]) == (target["hidden_size"], target["vocab_size"])
    layers = target["num_hidden_layers"]
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, layers // 2 - 1, layers - 4]
    with safe_open(str(head / "model.safetensors"), "pt") as weights:
        assert tuple(weights.get_slice("fc.weight").get_shape()) == (target["hidden_size"], 3 * target["hidden_size"])
