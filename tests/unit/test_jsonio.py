"""specdec.kube.jsonio: orjson where it can, the standard library where orjson refuses, and kopf's watch
stream parsing with it (specdec.kube.kopf_patches)."""

from __future__ import annotations

import json
import math

from specdec.kube import jsonio, kopf_patches


def test_loads_reads_what_the_standard_library_reads():
    line = (
        '{"type":"MODIFIED","object":{"metadata":{"name":"x","resourceVersion":"12"},"spec":{"n":1.5,'
        '"i":9223372036854775807,"s":"\\u00e9 \xe9","l":[true,false,null],"m":{}}}}'
    )
    assert jsonio.loads(line) == jsonio.loads(line.encode()) == json.loads(line)
    assert math.isnan(jsonio.loads('{"x": NaN}')["x"])  # orjson refuses NaN: the standard library reads it


def test_kopfs_watch_stream_parses_with_it():
    from kopf._cogs.clients import api

    kopf_patches.install_json()
    assert api.json.loads is jsonio.loads
    assert api.json.dumps is json.dumps  # the rest of the module is the standard library's
