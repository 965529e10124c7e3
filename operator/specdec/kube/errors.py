"""What a failed API request means: a message for people, and whether retrying soon can help.

client-go's `k8s.io/apimachinery/pkg/api/errors` reads the API server's Status body (its reason and message)
and classifies the failure; the Python client's `ApiException` carries only the raw body and HTTP status,
so both are read here, once, for the client's retries (client.py) and for the conditions and Events that
report a failure.
"""

from __future__ import annotations

import json

from kubernetes.client.rest import ApiException

TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
CONNECTION_FAILED = 0  # the status of an ApiException for a request that got no HTTP answer


def body_message(error: ApiException) -> str:
    """The API server's message (its Status body's), else the raw body, else the HTTP reason."""
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        body = {}
    return (body.get("message") if isinstance(body, dict) else None) or (error.body or "").strip() or error.reason


def api_error_message(error: ApiException) -> str:
    """`HTTP 500 InternalError: <the API server's message>` from a failed request."""
    if error.status == CONNECTION_FAILED:
        return f"no answer from the API server: {error.reason}"
    try:
        reason = (json.loads(error.body or "{}") or {}).get("reason")
    except (ValueError, AttributeError):
        reason = None
    return f"HTTP {error.status} {reason or error.reason}: {body_message(error)}"


def permanent(error: ApiException) -> bool:
    """Retrying the same request soon cannot help: the request itself is refused (400, 403, 404,
    422, ...) or the server answered 500 with the same message every time (the client marks those)."""
    return getattr(error, "permanent", False) or (
        error.status not in TRANSIENT_STATUSES and error.status != CONNECTION_FAILED
    )
