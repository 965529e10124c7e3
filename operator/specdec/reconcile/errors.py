"""What a reconcile that could not finish tells: the log, and the Ready condition a person can act on."""

from __future__ import annotations

import logging

from kubernetes.client.rest import ApiException

from specdec import conditions
from specdec.kube.errors import api_error_message, permanent

log = logging.getLogger("specdec.reconcile")


class NameConflict(Exception):
    """A name the operator needs is taken by an object it does not control."""

    reason = "NameConflict"

    def __init__(self, kind: str, name: str, why: str, owner: str):
        super().__init__(
            f"{kind} {name} already exists and {why}; the operator leaves it untouched: "
            f"delete or rename it, or give this {owner} another name"
        )


class ApiNotInstalled(Exception):
    """The cluster does not serve an API the spec needs (a CustomResource of another project)."""

    def __init__(self, reason: str, kind: str, install: str):
        self.reason = reason
        super().__init__(f"the cluster does not serve {kind}: install {install}; retried with back-off")


def failure_condition(error: Exception) -> conditions.Cond:
    """Ready=False for a reconcile that could not finish, with a reason a person can act on."""
    if isinstance(error, NameConflict):
        return conditions.Cond("Ready", False, error.reason, str(error))
    if isinstance(error, ApiNotInstalled):
        return conditions.Cond("Ready", False, error.reason, str(error))
    if isinstance(error, ApiException):
        if permanent(error):
            return conditions.Cond(
                "Ready",
                False,
                "RequestRejected",
                f"the API server refused a request: {api_error_message(error)}; retried with back-off",
            )
        return conditions.Cond("Ready", False, "ApiUnavailable", f"{api_error_message(error)}; retried with back-off")
    return conditions.Cond(
        "Ready", False, "InternalError", f"{type(error).__name__}: {error} (an operator bug: please report it)"
    )


def log_failure(kind: str, namespace: str, name: str, error: Exception) -> None:
    if isinstance(error, (ApiException, NameConflict, ApiNotInstalled)):
        log.warning(
            "reconciling %s %s/%s: %s",
            kind,
            namespace,
            name,
            api_error_message(error) if isinstance(error, ApiException) else error,
        )
    else:
        log.exception("reconciling %s %s/%s failed", kind, namespace, name)
