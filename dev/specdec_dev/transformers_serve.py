"""Stand-in for trtllm-serve that serves a real (small) model with transformers on CPU: greedy answers on
OpenAI's /v1/completions, and with a SaveState speculative_config, TensorRT-LLM's hidden-state capture of each
request's prompt, with the model's real states (the simulator's stand-in, specdec_dev.standin_servers, writes
zeros of the right shapes instead).

    python -m specdec_dev.transformers_serve MODEL_DIR --port 18000 [--extra_llm_api_options YAML]

It takes trtllm-serve's options (specdec_dev.standin_servers) and reads from the YAML only speculative_config.
SaveState as SaveHiddenStatesDrafter (tensorrt_llm/_torch/speculative/save_hidden_state.py): each request is
answered with one token; its record {"id", "input_ids", "hidden_state": the final post-norm state,
"hidden_state_features": the captured layers' outputs side by side} is kept and written every write_interval
requests to `<file_prefix>_<n>.pt` (specdec_dev.hidden_state_writer numbers and writes them). The captured
layers are eagle3_layers_to_capture, by default EAGLE-3's (1, L//2-1, L-4) and the post-norm state.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_dev.hidden_state_writer import HiddenStateCapture
from specdec_dev.standin_servers import StandinError, _serve, read_extra_options, served_name, trtllm_serve_parser

if TYPE_CHECKING:
    from aiohttp import web

POST_NORM = -1  # eagle3_layers_to_capture's name for the final post-norm state
BATCH = 64  # prompts per generate() call


def capture_layers(num_layers: int, configured: Sequence[int] | None) -> tuple[list[int], bool]:
    """The decoder layers whose outputs are captured, in order, and whether the post-norm state is one of them;
    EAGLE-3's default (TensorRT-LLM's Eagle3SpecMetadata) when none are configured."""
    if configured:
        layers = sorted({int(n) for n in configured if int(n) != POST_NORM})
        return layers, POST_NORM in configured
    if num_layers <= 5:
        raise StandinError(f"a target of {num_layers} layers has too few for EAGLE-3's default capture")
    return [1, num_layers // 2 - 1, num_layers - 4], True


class TransformersTarget:
    """The model, its tokenizer and, in SaveState mode, the capture."""

    def __init__(self, model_dir: Path, speculative: dict[str, Any]) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.capture: HiddenStateCapture | None = None
        if speculative.get("decoding_type") == "SaveState":
            configured = speculative.get("eagle3_layers_to_capture")
            self.layers, self.post_norm = capture_layers(self.model.config.num_hidden_layers, configured)
            self.capture = HiddenStateCapture.from_config(speculative)

    def complete(self, prompts: list[str], max_tokens: int) -> list[tuple[str, int, int]]:
        """Each prompt's answer text, prompt tokens and answer tokens."""
        ids = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        if self.capture is not None:
            return [self._capture(i) for i in ids]
        answers: dict[int, list[int]] = {}
        by_length: dict[int, list[int]] = {}
        for index, tokens in enumerate(ids):
            by_length.setdefault(len(tokens), []).append(index)
        with self.torch.no_grad():
            for length, indices in by_length.items():  # equal lengths: batches without padding
                for start in range(0, len(indices), BATCH):
                    chunk = indices[start : start + BATCH]
                    batch = self.torch.tensor([ids[i] for i in chunk])
                    out = self.model.generate(
                        batch, max_new_tokens=max_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
                    )
                    for row, index in enumerate(chunk):
                        answers[index] = out[row, length:].tolist()
        return [(self._text(answers[i]), len(ids[i]), len(answers[i])) for i in range(len(ids))]

    def _text(self, tokens: list[int]) -> str:
        """An answer's text: its words after a space, so that prompt + answer tokenizes as prompt and answer."""
        return " " + str(self.tokenizer.decode(tokens))

    def _capture(self, tokens: list[int]) -> tuple[str, int, int]:
        assert self.capture is not None
        torch = self.torch
        input_ids = torch.tensor([tokens])
        with torch.no_grad():
            out = self.model(input_ids, output_hidden_states=True)
        states = out.hidden_states  # [0] the embeddings, [i + 1] layer i's output, [-1] after the final norm
        blocks = [states[n + 1][0] for n in self.layers]
        # hidden_state is the last captured block: the post-norm state when it is captured, else the last
        # layer's output, which the features then hold too (TensorRT-LLM's _last_hidden_in_save).
        final = states[-1][0] if self.post_norm else blocks[-1]
        record: dict[str, Any] = {"input_ids": input_ids[0].clone(), "hidden_state": final.clone()}
        if len(blocks) + self.post_norm > 1:
            record["hidden_state_features"] = torch.cat(blocks, dim=-1).clone()
        self.capture.keep(record, torch.save)
        answer = int(out.logits[0, -1].argmax())
        return self._text([answer]), len(tokens), 1


def app(target: TransformersTarget, name: str) -> web.Application:
    from aiohttp import web

    lock = asyncio.Lock()  # one request at a time: torch on this process's threads

    async def completions(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            prompt = body["prompt"]
            prompts = [prompt] if isinstance(prompt, str) else list(prompt)
            max_tokens = int(body.get("max_tokens") or 16)
            if not prompts or not all(isinstance(p, str) for p in prompts) or max_tokens < 1:
                raise ValueError("prompt: a string or a list of strings; max_tokens >= 1")
        except (ValueError, KeyError, TypeError) as error:
            return web.json_response({"error": {"message": f"bad request: {error}"}}, status=400)
        async with lock:
            answers = await asyncio.to_thread(target.complete, prompts, max_tokens)
        choices = [{"index": i, "text": text, "finish_reason": "length"} for i, (text, _, _) in enumerate(answers)]
        usage = {
            "prompt_tokens": sum(a[1] for a in answers),
            "completion_tokens": sum(a[2] for a in answers),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return web.json_response(
            {
                "id": f"cmpl-{time.monotonic_ns()}",
                "object": "text_completion",
                "model": name,
                "choices": choices,
                "usage": usage,
            }
        )

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": name, "object": "model"}]})

    application = web.Application(client_max_size=64 << 20)
    application.add_routes(
        [web.post("/v1/completions", completions), web.get("/health", health), web.get("/v1/models", models)]
    )
    return application


def main(argv: list[str] | None = None) -> int:
    args = trtllm_serve_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        options = read_extra_options(args.extra_llm_api_options)
        target = TransformersTarget(Path(args.model), options.get("speculative_config") or {})
        name = served_name(args.model)
        mode = "capturing hidden states" if target.capture else "greedy answers"
        site = (app(target, name), args.host or "localhost", args.port if args.port is not None else 8000)
        asyncio.run(_serve("transformers-serve", [site], f"serving {name!r} with transformers, {mode}"))
    except StandinError as error:
        print(f"[transformers-serve stand-in] {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
