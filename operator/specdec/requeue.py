"""Transitional: reconcile.py's old import path; DelayQueue and backoff are in specdec.kube.workqueue."""

from specdec.kube.workqueue import DelayQueue, backoff  # noqa: F401
