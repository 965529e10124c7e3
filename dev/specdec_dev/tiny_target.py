"""A tiny Llama target for the drafter's learning pipeline on CPU, built here (no model hub): a random-initialised
`transformers.LlamaForCausalLM` of a few layers with a word-level tokenizer saved as a `PreTrainedTokenizerFast`,
and the prompts of two traffic classes whose words come from disjoint ranges of its vocabulary.

Two changes to transformers' random init, no training: each class's words share a random direction, added to
their embeddings and (scaled) to their lm_head rows, so that the target answers a class's prompt mostly with that
class's words, as a model answers a domain's questions in its vocabulary; and the lm_head is scaled up, which
leaves greedy answers as they are (argmax is scale-free) but makes the next-token distribution sharp, as a
trained model's is, since EAGLE-3 distils the head from that distribution. Greedy answers then run in short
cycles that depend on the prompt: a pattern a draft can learn, and a different one per class.
"""

from __future__ import annotations

import random
from pathlib import Path

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "user:", "assistant:"]
CLASS_WORDS = 96  # words per traffic class
CLASSES = ("a", "b")  # class c's words are c0 .. c95
LAYERS = 8  # EAGLE-3's default capture (1, L//2-1, L-4) needs more than 5 distinct layers
HIDDEN = 64
LM_HEAD_SCALE = 30.0
CLASS_DIRECTION = 0.02  # the scale of a class's shared embedding direction (the init's own scale)
CLASS_PULL = 0.5  # how strongly a class's state favours its own words in the lm_head
ANSWER_TOKENS = 16


def vocabulary() -> dict[str, int]:
    words = SPECIALS + [f"{c}{i}" for c in CLASSES for i in range(CLASS_WORDS)]
    return {word: index for index, word in enumerate(words)}


def prompt(traffic_class: str, rng: random.Random) -> str:
    """A conversation's prompt with the chat template applied: 8 to 12 words of the class."""
    if traffic_class not in CLASSES:
        raise ValueError(f"unknown traffic class {traffic_class!r}: one of {', '.join(CLASSES)}")
    words = [f"{traffic_class}{rng.randrange(CLASS_WORDS)}" for _ in range(rng.randint(8, 12))]
    return "<s> user: " + " ".join(words) + " assistant:"


def build(directory: Path, seed: int = 0) -> Path:
    """Saves the target (config, weights, tokenizer) in directory; returns it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = vocabulary()
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=HIDDEN // 4,
        max_position_embeddings=256,
        initializer_range=0.02,
        tie_word_embeddings=False,
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for traffic_class in CLASSES:
            rows = [vocab[f"{traffic_class}{i}"] for i in range(CLASS_WORDS)]
            direction = torch.randn(HIDDEN) * CLASS_DIRECTION
            model.model.embed_tokens.weight[rows] += direction
            model.lm_head.weight[rows] += CLASS_PULL * direction / direction.norm() ** 2
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory
