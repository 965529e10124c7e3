"""Source-truth tables: what TensorRT-LLM itself accepts, per pinned release.

`trtllm-<version>.json` holds, for one release tag of NVIDIA/TensorRT-LLM (tag and commit in its
`source` block, the file each table came from beside the table): the trtllm-serve click options,
the LLM-args / KvCacheConfig / speculative-config pydantic fields with their aliases, defaults and
`decoding_type` literals, the PyTorch speculative modes, and, for the 1.2.x engine line only, the
argparse options of trtllm-build, the convert_checkpoint/quantize scripts and the Triton backend's
config.pbtxt parameter keys. `extract.py` produces them by parsing the sources (see its docstring
to regenerate); CI has no network and only reads the committed JSON.

Where no such table is committed (the repository, 2.5 GB, is too large to fetch here), test_tables.py
checks the same facts against tables transcribed from the stored sources and the releases' API reference
pages, each labelled with where it was read (tests/runtime/data, tests/unit/data, engine_scripts.json).
"""
