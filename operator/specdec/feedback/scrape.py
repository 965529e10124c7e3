"""How the monitor reads a runtime pod's /metrics: which pods to ask, a few at a time on a small pool (no
reconcile waits for it), within a time and size bound, backing off from pods that do not answer with our
counters; and what a runtime front's page says (parse_sample)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3

from specdec.canary import windows
from specdec.feedback.metric_text import metric_values
from specdec.speculation import load_model, payoff
from specdec.status.pods import condition_true

log = logging.getLogger("specdec.monitor")

SCRAPE_TIMEOUT_SECONDS = 2.0
SCRAPERS = 8  # concurrent scrapes; each waits on the network, not the CPU
MAX_SKIPPED_PASSES = 16
MAX_DRAFT_LEN = 64  # the API's bound on any draft length
MAX_BODY_BYTES = 1 << 20  # a runtime pod's metrics are a few KiB; a pod is not trusted with our memory
_COUNTERS = {**payoff.COUNTERS, **load_model.COUNTERS, **windows.COUNTERS}
_WANTED = tuple(_COUNTERS.values()) + (payoff.DRAFT_LEN_GAUGE,)


def parse_sample(text: str) -> payoff.Sample | None:
    """A pod's speculation counters; None: not a runtime front's metrics (its counters are there from the
    start, at 0)."""
    values = metric_values(text, _WANTED)
    counters = {key: values[name] for key, name in _COUNTERS.items() if name in values}
    if "draft" not in counters:
        return None
    draft_len = values.get(payoff.DRAFT_LEN_GAUGE)
    plausible = draft_len is not None and 1 <= draft_len <= MAX_DRAFT_LEN  # a pod's word bounds our loops
    return payoff.Sample(counters, int(draft_len) if draft_len is not None and plausible else None)


def scrapable(pod: dict[str, Any]) -> bool:
    """A ready pod with an address, not on its way out."""
    return (
        bool((pod.get("status") or {}).get("podIP"))
        and not pod["metadata"].get("deletionTimestamp")
        and condition_true(pod, "Ready")
    )


class Scraper:
    """One pass's scrapes, concurrently; not thread-safe (the monitor's one thread calls it)."""

    def __init__(self) -> None:
        self._http = urllib3.PoolManager(
            num_pools=64, maxsize=1, retries=False, timeout=urllib3.Timeout(total=SCRAPE_TIMEOUT_SECONDS)
        )
        self._pool = ThreadPoolExecutor(SCRAPERS, thread_name_prefix="specdec-scrape")
        self._failing: dict[str, tuple[int, int]] = {}  # pod uid -> (failed scrapes in a row, next pass to try)
        self._pass = 0

    def scrape(self, pods: list[tuple[str, str, Callable[[str], Any]]]) -> dict[str, Any]:
        """(pod uid, URL, parse) each -> by uid, what `parse` made of the page, or None when not scraped. A pod
        that failed is tried again after 1, 2, 4 ... 16 passes (left out until then): pods without our
        metrics (an image of their own, a kwok pod) cost little."""
        self._pass += 1
        due = [(uid, url, parse) for uid, url, parse in pods if self._failing.get(uid, (0, 0))[1] <= self._pass]
        scraped = dict(
            zip(
                (uid for uid, _, _ in due),
                self._pool.map(self._scrape, [u for _, u, _ in due], [p for _, _, p in due]),
                strict=True,
            )
        )
        for uid, sample in scraped.items():
            if sample is None:
                failures = self._failing.get(uid, (0, 0))[0] + 1
                self._failing[uid] = (failures, self._pass + min(2 ** (failures - 1), MAX_SKIPPED_PASSES))
            else:
                self._failing.pop(uid, None)
        return scraped

    def forget_gone(self, live: Collection[str]) -> None:
        """Only the pods still scraped keep their back-off."""
        self._failing = {uid: f for uid, f in self._failing.items() if uid in live}

    def _scrape(self, url: str, parse: Callable[[str], Any]) -> Any:
        """A pod that does not answer, answers garbage or too much counts as not scraped this time."""
        response = None
        try:
            response = self._http.request("GET", url, preload_content=False)
            body = response.read(MAX_BODY_BYTES + 1)
            if response.status != 200 or len(body) > MAX_BODY_BYTES:
                return None
            return parse(body.decode("utf-8", errors="replace"))
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:
            log.debug("scraping %s: %s", url, error)
            return None
        finally:
            if response is not None:
                response.release_conn()
