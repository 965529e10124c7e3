"""Parsing JSON with orjson: watch events and the API server's answers.

The standard library's json.loads was a fifth of the operator's Python CPU in a fleet of 1000 deployments
(py-spy, `bench/run.py --profile`); orjson parses Kubernetes objects in about half the time. The client
(client.py) parses its answers here, and kopf's watch streams do too (kopf_patches.py). What orjson refuses
(NaN and Infinity, lone surrogate escapes: the API server writes neither) goes to the standard library.
Integers beyond 64 bits become floats, as they do in the API server's own decoding of a custom resource.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
