"""The controller runtime: what client-go and controller-runtime give a Go operator, and kopf or the
Kubernetes Python client do not (each module says what it mirrors and where the dependency falls short).

client.py (requests, with retries), errors.py (what a failure means), apply.py (what a write decides before a
request), events.py (Events, posted in the background), cache.py (the watched objects), workqueue.py (keys to
reconcile, now or later), leader.py (one active replica), gc_pacing.py (the collector's full collections),
jsonio.py (orjson) and kopf_patches.py (every change made to kopf).
"""

from __future__ import annotations

# Transitional: reconcile.py still imports these names from here (its imports move to specdec.kube.client,
# .errors and .apply with its rewrite); looked up on first use, so that importing the package imports no module.
_MOVED = {"Kube": "client", "api_error_message": "errors", "permanent": "errors", "contains": "apply"}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"specdec.kube.{_MOVED[name]}"), name)
    raise AttributeError(f"module 'specdec.kube' has no attribute {name!r}")
