"""The controller runtime: what client-go and controller-runtime give a Go operator, and kopf or the
Kubernetes Python client do not (each module says what it mirrors and where the dependency falls short).

client.py (requests, with retries), errors.py (what a failure means), apply.py (what a write decides before a
request), events.py (Events, posted in the background), cache.py (the watched objects), workqueue.py (keys to
reconcile, now or later), leader.py (one active replica), gc_pacing.py (the collector's full collections),
jsonio.py (orjson) and kopf_patches.py (every change made to kopf).
"""
