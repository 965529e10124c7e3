"""The target model's tokenizer files, for the Triton route: chat prompts and token counts.

Triton's BLS model takes text, so the front turns chat messages into a prompt with the model's own chat
template (tokenizer_config.json, rendered with jinja2 as transformers does) and counts tokens with
tokenizer.json when the `tokenizers` package is installed (it is in the runtime image).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

log = logging.getLogger("specdec.runtime")


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def message_text(content: Any) -> str:
    """OpenAI message content: a string or a list of parts; only text parts are kept."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise ValueError("message content must be a string or a list of parts")


class Tokenizer:
    def __init__(self, directory: str | None):
        self.directory = Path(directory) if directory else None
        self.chat_template: str | None = None
        self.bos_token = ""
        self.eos_token = ""
        self._tokenizer = None
        if self.directory is None:
            return
        config_path = self.directory / "tokenizer_config.json"
        try:
            data = json.loads(config_path.read_text())
        except (OSError, ValueError):
            data = {}
        template = data.get("chat_template")
        if isinstance(template, list):  # named templates: take "default"
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        self.chat_template = template if isinstance(template, str) else None
        self.bos_token = _token_text(data.get("bos_token"))
        self.eos_token = _token_text(data.get("eos_token"))
        try:
            from tokenizers import Tokenizer as HfTokenizer  # optional: installed in the runtime image
        except ImportError:
            HfTokenizer = None  # type: ignore[assignment,misc]  # the optional package is absent
        tokenizer_json = self.directory / "tokenizer.json"
        if HfTokenizer is not None and tokenizer_json.is_file():
            try:
                self._tokenizer = HfTokenizer.from_file(str(tokenizer_json))
            except Exception as error:  # noqa: BLE001 - a broken file only costs the counts
                log.warning("cannot load %s for token counts: %s", tokenizer_json, error)

    def count(self, text: str) -> int | None:
        if self._tokenizer is None:
            return None
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        turns = [{"role": str(m.get("role", "user")), "content": message_text(m.get("content"))} for m in messages]
        if not self.chat_template:
            # No template (e.g. a base model): a plain transcript that ends where the assistant speaks.
            return "".join(f"{t['role']}: {t['content']}\n" for t in turns) + "assistant:"
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)

        def raise_exception(message: str) -> None:
            raise ValueError(message)

        env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
        try:
            prompt = env.from_string(self.chat_template).render(
                messages=turns, add_generation_prompt=True, bos_token=self.bos_token, eos_token=self.eos_token
            )
        except jinja2.TemplateError as error:
            raise ValueError(f"the model's chat template failed: {error}") from None
        # The preprocessing model adds the BOS token itself (add_special_tokens): do not send it twice.
        if self.bos_token and prompt.startswith(self.bos_token):
            prompt = prompt[len(self.bos_token) :]
        return prompt
