"""The monitor's load model: windows of the target's iterations fitted, the break-even published and written."""

from __future__ import annotations

from specdec.api.runtime_config import BREAK_EVEN_KEY, SCHEDULE_KEY
from specdec.builders.serving import build_config_map
from specdec.feedback.scrape import parse_sample
from specdec.plan import Settings, plan
from specdec.speculation import load_model, payoff
from tests.unit.test_monitor import metrics_text, pod, rig, sd  # noqa: F401 - rig is a fixture

T = load_model.StepTime(0.02, 0.0008)
ALPHA, COST, K = 0.7, 0.05, 4


def load_text(totals: dict[str, float]) -> str:
    lines = []
    for key, name in load_model.COUNTERS.items():
        lines += [f"# TYPE {name} counter", f"{name} {totals[key]}"]
    return "\n".join(lines) + "\n"


class Pod:
    """What a Triton route's front counts, window after window, at a given load (simulated figures)."""

    def __init__(self):
        self.spec = {"draft": 0.0, "accepted": 0.0, "steps": 0.0, "draft_s": 0.0, "target_s": 0.0}
        self.load = {key: 0.0 for key in load_model.COUNTERS}

    def window(self, n: int, iterations: int = 100, timed: bool = True, counted: bool = True) -> str:
        """`timed`: the front polled Triton's compute times in the window; `counted`: and counted the target's
        iterations (it does not where Triton idled)."""
        accepted = (payoff.tokens_per_step(ALPHA, K) - 1) * iterations
        for key, value in (
            ("draft", K * iterations),
            ("accepted", accepted),
            ("steps", iterations),
            ("draft_s", iterations * n * K * COST * T(n) * timed),
            ("target_s", iterations * n * T(n * (K + 1)) * timed),
        ):
            self.spec[key] += value
        for key, value in (
            ("iterations", iterations),
            ("iteration_seconds", iterations * load_model.step_seconds(T, n, K, COST)),
            ("batch_sequences", iterations * n),
            ("batch_draft_tokens", iterations * n * K),
        ):
            self.load[key] += value * counted
        s = self.spec
        return metrics_text(
            s["draft"], s["accepted"], s["steps"], draft_len=K, draft_s=s["draft_s"], target_s=s["target_s"]
        ) + load_text(self.load)


FITTED = {BREAK_EVEN_KEY: "47", SCHEDULE_KEY: "1:4 3:3 6:2 14:1 47:0"}


def windows_at(rig, loads: tuple[int, ...]) -> Pod:  # noqa: F811 - rig, the fixture
    """One deployment's pod, its baseline window, then a window at each load, 15 s apart."""
    store, (a, _), monitor, _, _, port = rig
    store.put(sd(draft_len=K, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    counted = Pod()
    for i, n in enumerate((1, *loads)):
        a.text = counted.window(n)
        monitor.run_once(now=15.0 * i)
    return counted


def test_parse_sample_reads_the_iteration_counters():
    sample = parse_sample(Pod().window(8))
    assert sample.counters["iterations"] == 100 and sample.counters["batch_sequences"] == 800


def test_the_break_even_is_fitted_from_windows_at_several_loads_and_published(rig):  # noqa: F811 - rig, the fixture
    store, (a, _), monitor, events, enqueued, port = rig
    store.put(sd(draft_len=K, port=port))
    store.put(pod("llama-a", "llama", "127.0.0.1"))
    counted = Pod()
    a.text = counted.window(1)
    monitor.run_once(now=0.0)  # the baseline
    loads = (1, 4, 2, 16)
    for i, n in enumerate(loads[:3]):
        a.text = counted.window(n)
        monitor.run_once(now=15.0 * (i + 1))
    assert monitor.load.break_even("ns", "llama") is None  # 3 windows: not enough for a fit
    assert "breakEven" not in monitor.published("ns", "llama", 1).status
    a.text = counted.window(loads[3])
    monitor.run_once(now=60.0)
    expected = load_model.break_even(T, ALPHA, COST, K, K)
    assert expected == 17  # of draft length 4; shorter ones pay longer, down to 1 until 47
    assert monitor.load.break_even("ns", "llama") == 47 == load_model.break_even(T, ALPHA, COST, 1, K)
    assert monitor.load.config_map_keys("ns", "llama") == {BREAK_EVEN_KEY: "47", SCHEDULE_KEY: "1:4 3:3 6:2 14:1 47:0"}
    expected = 47
    assert monitor.published("ns", "llama", 1).status["breakEven"] == expected
    assert enqueued[-1] == ("ns", "llama")
    store.remove("SpeculativeDeployment", "ns", "llama")
    monitor.run_once(now=75.0)
    assert monitor.load.break_even("ns", "llama") is None  # forgotten with the deployment


def test_windows_that_cannot_price_the_draft_at_their_batch_keep_the_break_even(rig):  # noqa: F811 - rig, the fixture
    """The route's times price the draft against the target at the window's batch. A window without its own times
    (the monitor falls back on the cost of an earlier window, measured at another batch) or whose batch the front
    did not count (Triton idled, as under light load) must not move the fit."""
    _, (a, _), monitor, _, _, _ = rig
    counted = windows_at(rig, (1, 4, 2, 16))
    assert monitor.load.config_map_keys("ns", "llama") == FITTED
    for i, (timed, counted_batch) in enumerate(((False, False), (True, False), (False, True))):
        a.text = counted.window(1, timed=timed, counted=counted_batch)
        monitor.run_once(now=75.0 + 15.0 * i)
        assert monitor.load.config_map_keys("ns", "llama") == FITTED, (timed, counted_batch)


def test_no_break_even_from_a_measured_cost_whose_batch_is_not_known(rig):  # noqa: F811 - rig, the fixture
    """Enough windows for a fit, but the latest without its own times: the monitor's cost is that of an earlier
    window, at its batch, before the load model could bring any to the target's batch. Nothing is written until
    a window timed at a counted batch gives the cost."""
    _, (a, _), monitor, _, _, _ = rig
    counted = windows_at(rig, (1, 4, 2))
    a.text = counted.window(16, timed=False)
    monitor.run_once(now=60.0)
    assert monitor.published("ns", "llama", 1).status["costRatioSource"] == "Measured"  # of the window at 2
    assert monitor.load.config_map_keys("ns", "llama") == {}
    a.text = counted.window(16)
    monitor.run_once(now=75.0)
    assert monitor.load.config_map_keys("ns", "llama") == FITTED


def test_the_config_map_carries_the_break_even_beside_the_draft_length():
    p = plan({"apiVersion": "specdec.io/v1alpha1", **sd(draft_len="auto")}, Settings())
    data = build_config_map(p, "uid", 5, {BREAK_EVEN_KEY: "17", SCHEDULE_KEY: "1:2 17:0"})["data"]
    assert (data[BREAK_EVEN_KEY], data[SCHEDULE_KEY], data["draft_len"]) == ("17", "1:2 17:0", "5")
    assert BREAK_EVEN_KEY not in build_config_map(p, "uid", 5)["data"]
