"""Offline acceptance length of a head on held-out conversations, by ModelOpt's own measure.

ModelOpt's AcceptanceRateValidation.validate replays a conversation's answer as speculative decoding would: from
the prompt, the target (the whole model, running here) gives one token and the head drafts `draft_len` more,
the drafts are accepted while they match the answer, and so on to the answer's end; its result is tokens
produced per target step, the acceptance length. The answer is the target's own greedy answer, as captured,
so the measure is the one a deployment serving the head greedily would see. The conversations' prompts already
have the chat template applied: the validation's own tokenizing (and CUDA placement) is not used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from modelopt.torch.speculative.utils import AcceptanceRateValidation

from specdec.drafter.eagle_head import EagleModel


class _Validation(AcceptanceRateValidation):
    def __init__(self, model: EagleModel) -> None:
        # The base class reads a chat template from a tokenizer; the conversations come tokenized.
        self.model = model
        self.model.eval()


@dataclass(frozen=True)
class Conversation:
    input_ids: list[int]  # prompt and answer
    prompt_tokens: int


def acceptance_length(model: EagleModel, conversations: Sequence[Conversation], draft_len: int) -> float:
    """The mean over conversations of tokens per target step (1 with no draft accepted)."""
    if not conversations:
        raise ValueError("no conversations to evaluate on")
    validation = _Validation(model)
    lengths = []
    with torch.no_grad():
        for conversation in conversations:
            if len(conversation.input_ids) <= conversation.prompt_tokens:
                raise ValueError("a conversation without an answer")
            ids = torch.tensor([conversation.input_ids])
            _, length = validation.validate(
                osl=ids.shape[1] - conversation.prompt_tokens,
                input_ids=ids[:, : conversation.prompt_tokens],
                ground_truth=ids,
                steps=draft_len,
            )
            lengths.append(float(length))
    return sum(lengths) / len(lengths)
