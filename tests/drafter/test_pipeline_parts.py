"""The pipeline's parts that decide things: the hold-out split, the decision, the capture records' key spellings,
the draft vocabulary and the head's config check against the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.drafter.replay import held_out, main, split
from specdec.drafter.samples import Sample, write_samples

torch = pytest.importorskip("torch", reason="the train extra")

from specdec.drafter.eagle_head import ARCHITECTURE, TargetShape, check_config, draft_vocabulary  # noqa: E402
from specdec.drafter.offline_data import CaptureError, convert, offline_record  # noqa: E402
from specdec.drafter.train import decide  # noqa: E402

HIDDEN = 8
TARGET = TargetShape(HIDDEN, 50, 8, 2, 1, 16, 128)


def test_the_hold_out_is_a_stable_share_of_the_conversations() -> None:
    samples = [Sample(f"p{i}", f"c{i}") for i in range(2000)]
    replay, holdout = split(samples, 0.1)
    assert 150 < len(holdout) < 250 and len(replay) + len(holdout) == 2000
    assert split(samples, 0.1) == (replay, holdout)
    assert split(samples[::-1], 0.1) == (replay, holdout)  # the order the front wrote them in does not matter
    assert not any(held_out(s, 0.0) for s in samples)


def test_replay_refuses_an_empty_sample_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_samples(tmp_path / "s.jsonl", [Sample("p", "c", "b")])
    assert main(["--samples", str(tmp_path), "--server", "http://127.0.0.1:9", "--model", "m", "--class", "a"]) == 2
    assert "no samples of class a" in capsys.readouterr().err


def test_replay_counts_a_server_that_does_not_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_samples(tmp_path / "s.jsonl", [Sample("p", "c"), Sample("q", "d")])
    assert main(["--samples", str(tmp_path), "--server", "http://127.0.0.1:9", "--model", "m", "--timeout", "2"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["failed"] == 2 and "127.0.0.1:9" in err


def test_the_decision_needs_the_margin() -> None:
    assert decide(2.2, 2.0, 0.10)[0] is True
    better, reason = decide(2.1, 2.0, 0.10)
    assert better is False and "2.200 needed" in reason
    assert decide(1.5, None, 0.10)[0] is True
    assert decide(1.0, None, 0.10)[0] is False


def _record(features_key: str, layers: int) -> dict[str, object]:
    return {
        "id": 1,
        "input_ids": torch.arange(5),
        "hidden_state": torch.ones(5, HIDDEN, dtype=torch.bfloat16),
        features_key: torch.zeros(5, HIDDEN * layers, dtype=torch.bfloat16),
    }


@pytest.mark.parametrize("key", ["hidden_state_features", "aux_hidden_states"])
def test_both_spellings_of_the_captured_layers_are_read(key: str) -> None:
    offline = offline_record(_record(key, 3), HIDDEN, 3)
    assert offline["aux_hidden_states"].shape == (5, 3 * HIDDEN)
    assert offline["hidden_states"].dtype == torch.float32
    # A capture that kept the last layer in the features too is cut to the head's layers.
    assert offline_record(_record(key, 4), HIDDEN, 3)["aux_hidden_states"].shape == (5, 3 * HIDDEN)


def test_a_capture_of_other_layers_or_another_target_is_refused() -> None:
    with pytest.raises(CaptureError, match="3 layers of 8 expected"):
        offline_record(_record("hidden_state_features", 2), HIDDEN, 3)
    with pytest.raises(CaptureError, match="another target"):
        offline_record(_record("hidden_state_features", 3), HIDDEN * 2, 3)


def test_convert_writes_one_record_a_file_and_skips_unreadable_files(tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    captures.mkdir()
    torch.save([_record("hidden_state_features", 3), _record("aux_hidden_states", 3)], captures / "data_2.pt")
    (captures / "data_3.pt").write_bytes(b"being written")
    converted = convert(captures, tmp_path / "offline", HIDDEN, 3)
    assert len(converted.files) == 2 and converted.unreadable == 1 and converted.tokens == 10
    assert set(torch.load(converted.files[0])) == {"input_ids", "hidden_states", "aux_hidden_states"}
    assert converted.token_counts[0] == 2


def test_the_draft_vocabulary_keeps_the_most_frequent_tokens_in_id_order() -> None:
    d2t = draft_vocabulary({7: 9, 3: 5, 9: 5, 1: 1}, 10, 3)
    assert [i + int(d) for i, d in enumerate(d2t)] == [3, 7, 9]


def test_a_head_config_is_checked_against_the_target(tmp_path: Path) -> None:
    config = {
        "architectures": [ARCHITECTURE],
        "hidden_size": HIDDEN,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 16,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "vocab_size": 50,
        "draft_vocab_size": 50,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 128,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert check_config(tmp_path, TARGET) == []
    config.update(hidden_size=16, vocab_size=60, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]})
    del config["rms_norm_eps"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    problems = " / ".join(check_config(tmp_path, TARGET))
    assert "hidden_size 16 is not the target's 8" in problems
    assert "vocab_size 60" in problems and "rms_norm_eps missing" in problems
    assert "[1, 2, 3] are not the layers TensorRT-LLM captures for a target of 8 layers, [1, 3, 4]" in problems


def test_the_same_hidden_states_and_seed_make_the_same_head(tmp_path: Path) -> None:
    from specdec.drafter import eagle_head
    from specdec_dev import tiny_target

    target = tiny_target.build(tmp_path / "target")
    shape = TargetShape.read(target)
    layers = len(shape.capture_layers())
    generator = torch.Generator().manual_seed(1)
    records = tmp_path / "records"
    records.mkdir()
    for index in range(8):
        record = {
            "input_ids": torch.randint(0, shape.vocab_size, (12,), generator=generator),
            "hidden_states": torch.randn(12, shape.hidden_size, generator=generator),
            "aux_hidden_states": torch.randn(12, layers * shape.hidden_size, generator=generator),
        }
        torch.save(record, records / f"{index:08d}.pt")
    files = sorted(records.glob("*.pt"))

    def head(seed: int) -> dict[str, torch.Tensor]:
        eagle_head.seed(seed)
        model = eagle_head.build(target, offline=True, draft_vocab_size=shape.vocab_size)
        eagle_head.train(model, files, eagle_head.Training(epochs=1, batch_size=4), lambda epoch, loss: None)
        return {k: v.detach().clone() for k, v in model.eagle_module.state_dict().items()}

    first, again, other = head(0), head(0), head(1)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)  # the seed is what decides
