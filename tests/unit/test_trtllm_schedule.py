"""The load model's draft lengths by load as trtllm-serve's draft_len_schedule, and the autopilot's rollouts of it."""

from __future__ import annotations

from specdec.builders.serving import build_config_map, served_plan, told_schedule
from specdec.feedback.autopilot import Autopilot
from specdec.feedback.load_schedules import CHANGE_SECONDS, LoadSchedules
from specdec.speculation import load_model, payoff
from specdec.speculation.load_model import StepTime, Window
from specdec.speculation.trtllm_schedule import LAST_BATCH, clamped, draft_len_at, from_load_schedule, predicted_gain
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import draft_target, spec

ENTRIES = [(1, 4), (4, 3), (8, 2), (19, 1), (61, 0)]  # from n in flight on, length k


def test_tiers_are_keyed_by_their_largest_batch_and_never_draft_zero_on_a_one_engine_mode():
    assert from_load_schedule(ENTRIES, 4, floor=1) == {3: 4, 7: 3, 18: 2, LAST_BATCH: 1}
    assert from_load_schedule(ENTRIES, 4, floor=0) == {3: 4, 7: 3, 18: 2, 60: 1}  # above 60: nothing
    # a server at draftLen 2: the first tier is max_draft_len (TensorRT-LLM's rule), longer tiers are capped
    assert from_load_schedule(ENTRIES, 2, floor=1) == {18: 2, LAST_BATCH: 1}
    assert from_load_schedule([(1, 4)], 4, floor=1) is None  # draftLen at every load: no schedule
    # what TensorRT-LLM (and the simulated trtllm-serve) then drafts, batch by batch
    schedule = from_load_schedule(ENTRIES, 4, floor=1)
    for n in (1, 3, 4, 7, 8, 18, 19, 60, 61, 5000):
        assert draft_len_at(schedule, 4, n) == max(load_model.scheduled_draft_len(ENTRIES, n), 1)


def test_a_schedule_follows_the_draft_length_it_is_served_with():
    schedule = {3: 4, 7: 3, 18: 2, LAST_BATCH: 1}
    assert clamped(schedule, 2) == {18: 2, LAST_BATCH: 1}
    assert clamped(schedule, 6) == {3: 6, 7: 3, 18: 2, LAST_BATCH: 1}
    assert clamped({LAST_BATCH: 4}, 4) is None and clamped(None, 4) is None


def test_the_gain_of_a_schedule_is_where_the_load_is():
    step = StepTime(0.005, 0.0002)  # compute-bound from a few dozen sequences on
    alpha, cost = 0.7, 0.05
    schedule = {3: 4, 7: 3, 18: 2, LAST_BATCH: 1}
    assert abs(predicted_gain(step, alpha, cost, 1, 4, None, schedule)) < 1e-9  # one sequence: the same length
    loaded = predicted_gain(step, alpha, cost, 64, 4, None, schedule)
    assert loaded > 0.05
    assert loaded == (load_model.speedup(step, 64, 1, alpha, cost) / load_model.speedup(step, 64, 4, alpha, cost) - 1)


def fitted_schedules() -> LoadSchedules:
    """A fit of t(T) = 5 ms + 0.2 ms * T from windows at four loads, acceptance 0.7, cost 0.05, draftLen 4."""
    fits = LoadSchedules()
    step, k, cost = StepTime(0.005, 0.0002), 4, 0.05
    key = ("ns", "llama")
    for batch in (1, 4, 16, 64):
        seconds = k * cost * step(batch) + step(batch * (k + 1))
        fits.observe(
            key,
            {
                "iterations": 100,
                "batch_sequences": 100 * batch,
                "batch_draft_tokens": 100 * batch * k,
                "iteration_seconds": 100 * seconds,
            },
        )
    tokens = payoff.tokens_per_step(0.7, k)
    m = payoff.measure({"draft": 400, "accepted": (tokens - 1) * 100, "steps": 100}, k, 1, k, (cost, "Assumed"))
    assert fits.update(key, m, {"draft": 400, "steps": 100}, None, now=0.0)
    return fits


def test_a_published_schedule_changes_at_most_once_a_minute():
    fits, key = fitted_schedules(), ("ns", "llama")
    first = fits.schedule(*key)[0]
    k, cost = 4, 0.05
    step = StepTime(0.005, 0.0004)  # the target twice as slow per token: the change points move by half
    for batch in (1, 4, 16, 64):  # the model's memory is long: it takes many windows to move the fit
        for _ in range(40):
            seconds = k * cost * step(batch) + step(batch * (k + 1))
            fits.observe(
                key,
                {
                    "iterations": 100,
                    "batch_sequences": 100 * batch,
                    "batch_draft_tokens": 100 * batch * k,
                    "iteration_seconds": 100 * seconds,
                },
            )
    m = payoff.measure(
        {"draft": 400, "accepted": (payoff.tokens_per_step(0.7, k) - 1) * 100, "steps": 100},
        k,
        1,
        k,
        (cost, "Assumed"),
    )
    assert not fits.update(key, m, {"draft": 400, "steps": 100}, None, now=CHANGE_SECONDS - 1)
    assert fits.schedule(*key)[0] == first
    assert fits.update(key, m, {"draft": 400, "steps": 100}, None, now=CHANGE_SECONDS)
    moved = fits.schedule(*key)[0]
    assert moved != first and fits.break_even(*key) < first[-1][0]


def test_the_autopilot_rolls_a_schedule_out_only_for_a_gain_at_the_load_measured_and_not_too_often():
    events = []
    told = {}
    pilot = Autopilot(
        lambda obj, reason, message, warning=False: events.append((reason, message)),
        payoff.AutoPolicy(),
        payoff.ROLLOUT_POLICY,
        rollout_seconds=600,
        told_schedule=lambda ns, name: told.get((ns, name)),
    )
    fits = fitted_schedules()
    key, sd = ("ns", "llama"), {"metadata": {"name": "llama", "namespace": "ns"}}
    assert not pilot.schedule(sd, key, 4, Window(batch=1.0, draft_len=4, seconds=0.01), fits, now=0.0)
    assert events == [] and pilot.schedule_choice(*key) is None  # at one sequence a schedule gains nothing
    assert pilot.schedule(sd, key, 4, Window(batch=64.0, draft_len=4, seconds=0.1), fits, now=10.0)
    chosen = pilot.schedule_choice(*key)
    assert chosen[min(chosen)] == 4 and min(chosen.values()) >= 1 and max(chosen) == LAST_BATCH
    ((reason, message),) = events
    assert reason == "DraftLenScheduleChanged" and "tokens/s at the 64.0 sequences in flight" in message
    assert message.endswith("rolling the pods (a new pod ready before an old one goes)")
    # the same schedule again: nothing to do; another one within the interval: not yet
    assert not pilot.schedule(sd, key, 4, Window(batch=64.0, draft_len=4, seconds=0.1), fits, now=700.0)
    pilot._schedules[key] = None
    assert not pilot.schedule(sd, key, 4, Window(batch=64.0, draft_len=4, seconds=0.1), fits, now=20.0)
    # after an operator restart, what the pods were told (the ConfigMap) is the current one
    restarted = Autopilot(
        lambda *a, **k: events.append(a),
        payoff.AutoPolicy(),
        payoff.ROLLOUT_POLICY,
        rollout_seconds=600,
        told_schedule=lambda ns, name: told.get((ns, name)),
    )
    told[key] = chosen
    assert not restarted.schedule(sd, key, 4, Window(batch=64.0, draft_len=4, seconds=0.1), fits, now=0.0)


def test_the_schedule_goes_into_the_runtime_config_and_is_recorded_in_the_config_map():
    p = make_plan(spec(backend="pytorch", speculation=draft_target(draftLen="auto", maxDraftLen=8)))
    schedule = {3: 6, 7: 3, LAST_BATCH: 1}
    served = served_plan(p, 6, schedule)
    assert served.runtime.speculative_config["draft_len_schedule"] == schedule
    assert served.runtime.speculative_config["max_draft_len"] == 6
    config_map = build_config_map(served, "uid", 6)
    assert told_schedule(config_map) == schedule
    # the draft length moved to 2 later: the schedule follows it
    assert served_plan(p, 2, schedule).runtime.speculative_config["draft_len_schedule"] == {7: 2, LAST_BATCH: 1}
    assert "draft_len_schedule" not in served_plan(p, 6, None).runtime.speculative_config
    assert told_schedule(build_config_map(served_plan(p, 6, None), "uid", 6)) is None
    assert told_schedule({"data": {"draft_len_schedule": "not json"}}) is None
