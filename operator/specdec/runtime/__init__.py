"""`specdec-runtime`: what runs in the runtime pods.

It reads the runtime configuration the operator wrote (the shared `RuntimeConfig` model), renders the
serving configuration (a Triton model repository, or `trtllm-serve` arguments and YAML), supervises the
server process and serves the OpenAI-compatible front with health and Prometheus metrics.
"""
