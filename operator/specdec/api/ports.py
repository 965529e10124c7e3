"""Ports inside the runtime pod, shared by the API (which refuses them for the front) and the runtime."""

# The backends listen on these (loopback only), so the front cannot take them.
# Triton's BLS model asks the local gRPC endpoint for the models' configuration at "localhost:8001"
# (hard-coded in tensorrt_llm_bls/1/model.py), so Triton's gRPC port cannot move.
TRITON_GRPC_PORT = 8001
TRITON_HTTP_PORT = 18000
TRITON_METRICS_PORT = 18002
TRTLLM_SERVE_PORT = 18000
RESERVED_PORTS = sorted({TRITON_GRPC_PORT, TRITON_HTTP_PORT, TRITON_METRICS_PORT, TRTLLM_SERVE_PORT})
