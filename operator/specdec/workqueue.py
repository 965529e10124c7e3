"""Transitional: reconcile.py's old import path; WorkQueue is in specdec.kube.workqueue."""

from specdec.kube.workqueue import WorkQueue  # noqa: F401
