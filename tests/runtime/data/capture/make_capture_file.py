"""Writes torch-<version>/cap_3.pt as TensorRT-LLM's SaveHiddenStatesDrafter writes a capture file
(tensorrt_llm/_torch/speculative/save_hidden_state.py, `_process_request` and `_write_to_file`), with real torch:
three requests of 5, 7 and 3 tokens, write_interval 3, three captured layers of hidden size 8 in bfloat16 (so
"hidden_state_features" too), each state a clone of a slice of the resource manager's buffer.

torch is not a dependency of this project (the runtime front reads these files without it), so the file is kept
in the repository; to add one for another torch release:

    python -m venv /tmp/torch && /tmp/torch/bin/pip install torch
    /tmp/torch/bin/python tests/runtime/data/capture/make_capture_file.py
"""

from pathlib import Path

import torch

HIDDEN, LAYERS, TOKENS = 8, 3, (5, 7, 3)

if __name__ == "__main__":
    out = Path(__file__).parent / f"torch-{torch.__version__.split('+')[0]}"
    out.mkdir(exist_ok=True)
    buffer = torch.arange(64 * HIDDEN * (LAYERS + 1), dtype=torch.bfloat16).reshape(64, HIDDEN * (LAYERS + 1))
    saved = []
    for number, tokens in enumerate(TOKENS, start=1):
        saved.append(
            {
                "id": number,
                "input_ids": torch.tensor(list(range(100, 100 + tokens)), dtype=torch.long, device="cpu"),
                "hidden_state": buffer[:tokens, -HIDDEN:].cpu().clone(),
                "hidden_state_features": buffer[:tokens, :-HIDDEN].cpu().clone(),
            }
        )
    torch.save(saved, out / f"cap_{len(TOKENS)}.pt")
    print(out / f"cap_{len(TOKENS)}.pt")
