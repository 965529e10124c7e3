"""Parsing JSON with orjson: watch events and the API server's answers.

In a fleet of 1000 deployments a fifth of the operator's Python CPU went to the standard library's
json.loads (py-spy, `bench/run.py --profile`), nearly all of it in kopf's watch streams; orjson parses
Kubernetes objects in about half the time. kopf has no setting for its decoder, so `install()` gives the
module of its watch stream (`kopf._cogs.clients.api`, whose only use of json is `json.loads` of each
event line) a json module whose `loads` is ours. What orjson refuses (NaN and Infinity, lone surrogate
escapes: the API server writes neither) goes to the standard library. Integers beyond 64 bits become floats,
as they do in the API server's own decoding of a custom resource.
"""

from __future__ import annotations

import json
import types
from typing import Any

import orjson


def loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def install() -> None:
    from kopf._cogs.clients import api

    module = types.ModuleType("json")
    module.__dict__.update(json.__dict__)
    module.loads = loads
    api.json = module
