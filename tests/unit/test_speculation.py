"""The speculation model (specdec.speculation.payoff): formula, inverse, optimum, estimates and the autopilot."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from specdec.speculation import payoff as s


def test_tokens_per_step_is_the_geometric_sum():
    assert s.tokens_per_step(0.8, 4) == pytest.approx(1 + 0.8 + 0.8**2 + 0.8**3 + 0.8**4)
    assert s.tokens_per_step(0.0, 5) == 1.0  # only the bonus token
    assert s.tokens_per_step(1.0, 5) == 6.0


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.62, 0.9, 0.99])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_alpha_from_tokens_per_step_inverts_the_formula(alpha, k):
    assert s.alpha_from_tokens_per_step(s.tokens_per_step(alpha, k), k) == pytest.approx(alpha, abs=1e-6)


def test_alpha_from_tokens_per_step_clips_impossible_measurements():
    assert s.alpha_from_tokens_per_step(0.5, 4) == 0.0
    assert s.alpha_from_tokens_per_step(7.0, 4) == 1.0


@pytest.mark.parametrize("alpha,cost", [(0.9, 0.05), (0.8, 0.014), (0.6, 0.1), (0.3, 0.2), (0.95, 0.0)])
def test_best_draft_len_is_the_argmax(alpha, cost):
    best = s.best_draft_len(alpha, cost, 1, 10)
    assert all(s.speedup(alpha, best, cost) >= s.speedup(alpha, k, cost) - 1e-12 for k in range(1, 11))


def test_best_draft_len_grows_with_acceptance_and_shrinks_with_cost():
    assert s.best_draft_len(0.9, 0.05, 1, 16) > s.best_draft_len(0.6, 0.05, 1, 16)
    assert s.best_draft_len(0.8, 0.01, 1, 16) > s.best_draft_len(0.8, 0.2, 1, 16)
    assert s.best_draft_len(0.2, 0.3, 1, 16) == 1
    assert s.best_draft_len(0.99, 0.0, 1, 6) == 6  # bounded by the engine's capacity


@pytest.mark.parametrize(
    "model,billions",
    [
        ("hf://meta-llama/Llama-3.1-70B-Instruct", 70),
        ("hf://meta-llama/Llama-3.2-1B-Instruct", 1),
        ("hf://lmsys/vicuna-7b-v1.3", 7),
        ("hf://Qwen/Qwen2.5-0.5B-Instruct", 0.5),
        ("pvc://models/llama-13b/", 13),
        ("hf://meta-llama/Llama-2-13b-hf", 13),
        ("hf://org/no-size-here", None),
        ("hf://org/bert-base", None),
    ],
)
def test_parameters_from_the_name(model, billions):
    assert s.parameters_billions(model) == billions


def test_estimated_cost_ratio_by_drafter():
    assert s.estimated_cost_ratio("model", "hf://m/Llama-3.1-70B-Instruct", "hf://m/Llama-3.2-1B-Instruct") == (
        pytest.approx(1 / 70),
        "ParameterCounts",
    )
    assert s.estimated_cost_ratio("model", "hf://m/target", "hf://m/draft") == (s.ASSUMED_COST_RATIO, "Assumed")
    assert s.estimated_cost_ratio("head", "hf://m/Llama-3.1-8B-Instruct", None) == (s.HEAD_COST_RATIO, "DraftHead")
    assert s.estimated_cost_ratio("lookup", "hf://m/Qwen2.5-7B-Instruct", None) == (0.0, "NoDraftModel")


def test_every_mode_says_what_drafts():
    from specdec.modes import MODES

    assert {name: m.drafting.drafter for name, m in MODES.items() if m.drafting} == {
        "draftTarget": "model",
        "redrafter": "head",
        "eagle3": "head",
        "mtp": "head",
        "ngram": "lookup",
        "sa": "lookup",
        "auto": "lookup",
        "pard": "model",
        "dflash": "model",
        "dspark": "model",
    }
    assert {name for name, m in MODES.items() if not m.drafting} == {"none", "saveState"}  # nothing drafts


def test_delta_handles_first_scrape_and_restarts():
    first = s.Sample({"draft": 100.0, "accepted": 80.0}, 4)
    assert s.delta(None, first) == {"draft": 0.0, "accepted": 0.0}
    later = s.Sample({"draft": 160.0, "accepted": 120.0}, 4)
    assert s.delta(first, later) == {"draft": 60.0, "accepted": 40.0}
    restarted = s.Sample({"draft": 12.0, "accepted": 9.0}, 4)
    assert s.delta(later, restarted) == {"draft": 12.0, "accepted": 9.0}


def test_measure_a_window():
    window = {"draft": 400.0, "accepted": 300.0, "steps": 100.0, "draft_seconds": 0.8, "target_seconds": 4.0}
    m = s.measure(window, 4, pods=2, max_draft_len=8, estimated_cost=(0.5, "Assumed"))
    assert m.acceptance_rate == 0.75
    assert m.tokens_per_step == 4.0  # (300 accepted + 100 bonus) / 100 steps
    assert m.cost_ratio == pytest.approx(0.8 / (4 * 4.0)) and m.cost_source == "Measured"
    assert m.speedup == pytest.approx(4.0 / (1 + 4 * 0.05))
    assert s.tokens_per_step(m.alpha, 4) == pytest.approx(4.0)
    assert 1 <= m.best_draft_len <= 8 and m.best_speedup >= m.speedup
    assert (m.pods, m.draft_tokens) == (2, 400)


def test_measure_without_steps_or_times_uses_the_estimates():
    m = s.measure({"draft": 40.0, "accepted": 20.0}, 4, pods=1, max_draft_len=4, estimated_cost=(0.1, "Assumed"))
    assert m.tokens_per_step == (20 + 10) / 10  # steps: 40 draft tokens / 4 per step
    assert (m.cost_ratio, m.cost_source) == (0.1, "Assumed")


def test_measure_nothing_without_speculative_traffic():
    assert s.measure({"draft": 0.0, "accepted": 0.0}, 4, 1, 4, (0.1, "Assumed")) is None


def _window(rng: random.Random, alpha: float, k: int, steps: int, noise: float) -> s.Measurement:
    """What a simulated window measures: per-step acceptance draws around `alpha`."""
    accepted = 0
    for _ in range(steps):
        a = min(max(alpha + rng.uniform(-noise, noise), 0.0), 1.0)
        n = 0
        while n < k and rng.random() < a:
            n += 1
        accepted += n
    return s.measure(
        {"draft": float(k * steps), "accepted": float(accepted), "steps": float(steps)}, k, 1, 12, (0.05, "Assumed")
    )


@pytest.mark.parametrize("alpha", [0.55, 0.8, 0.92])
def test_autopilot_converges_to_the_optimum_and_does_not_flap(alpha):
    rng = random.Random(7)
    optimum = s.best_draft_len(alpha, 0.05, 1, 12)
    state, k, changes = s.AutoState(), 4, []
    for window in range(40):
        state, choice = s.decide(state, _window(rng, alpha, k, steps=150, noise=0.1), 1, 12)
        if choice is not None:
            changes.append((window, k, choice))
            k = choice
    assert abs(k - optimum) <= 1, changes
    assert len(changes) <= 2, changes  # reaches it, then stays, under noisy windows
    assert all(b - a > s.AutoPolicy().cooldown for (a, *_), (b, *_) in pairwise(changes))


def test_autopilot_needs_confirmation_and_a_real_gain():
    m = s.measure({"draft": 400.0, "accepted": 396.0, "steps": 100.0}, 4, 1, 12, (0.05, "Assumed"))
    state, choice = s.decide(s.AutoState(), m, 1, 12)
    assert choice is None and state.candidate is not None and state.seen == 1  # once is not enough
    state, choice = s.decide(state, m, 1, 12)
    assert choice == s.best_draft_len(m.alpha, 0.05, 1, 12) and choice > 4
    flat = s.AutoPolicy(min_gain=10.0)  # no gain is that large: never change
    assert s.decide(s.decide(s.AutoState(), m, 1, 12, flat)[0], m, 1, 12, flat)[1] is None
