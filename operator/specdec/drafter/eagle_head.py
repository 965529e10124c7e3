"""An EAGLE-3 head for a target, with NVIDIA ModelOpt (modelopt.torch.speculative): built over the target,
trained offline on captured hidden states, exported as the checkpoint TensorRT-LLM's Eagle3 mode loads
(speculative_model_dir: config.json and model.safetensors), and loaded back from such a checkpoint.

The head's layers to read are TensorRT-LLM's EAGLE-3 default for the target, (1, L//2-1, L-4): the layers a
SaveState capture and an Eagle3 deployment take when eagle3_layers_to_capture is not set. Its draft vocabulary
is the training conversations' most frequent tokens (EAGLE-3's reduced draft vocabulary, mapped to the
target's by d2t) when a size below the target's vocabulary is asked for.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

ARCHITECTURE = "LlamaForCausalLMEagle3"  # ModelOpt's export and TensorRT-LLM's Eagle3 draft model class
EagleModel = Any  # ModelOpt's HFEagleModel: the target's transformers model converted (untyped)


@dataclass(frozen=True)
class TargetShape:
    """What the head must agree with: the target's config.json."""

    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    max_position_embeddings: int

    @classmethod
    def read(cls, target_dir: Path) -> TargetShape:
        config = json.loads((target_dir / "config.json").read_text())
        config = config.get("text_config") or config
        heads = int(config["num_attention_heads"])
        return cls(
            int(config["hidden_size"]),
            int(config["vocab_size"]),
            int(config["num_hidden_layers"]),
            heads,
            int(config.get("num_key_value_heads") or heads),
            int(config["intermediate_size"]),
            int(config.get("max_position_embeddings") or 2048),
        )

    def capture_layers(self) -> list[int]:
        """TensorRT-LLM's default EAGLE-3 capture (Eagle3SpecMetadata)."""
        n = self.num_hidden_layers
        if n <= 5:
            raise ValueError(f"a target of {n} layers has too few for EAGLE-3's capture (more than 5 needed)")
        return [1, n // 2 - 1, n - 4]


def architecture(target: TargetShape, draft_vocab_size: int) -> dict[str, Any]:
    """ModelOpt's EAGLE-3 default architecture, one decoder layer, shaped for this target."""
    from modelopt.torch.speculative.config import eagle3_default_config

    config = copy.deepcopy(eagle3_default_config)
    config.update(
        num_attention_heads=target.num_attention_heads,
        num_key_value_heads=target.num_key_value_heads,
        head_dim=target.hidden_size // target.num_attention_heads,
        intermediate_size=target.intermediate_size,
        eagle_aux_hidden_state_layer_ids=target.capture_layers(),
        draft_vocab_size=draft_vocab_size,
        torch_dtype="float32",
    )
    return config


def build(target_dir: Path, offline: bool, draft_vocab_size: int) -> EagleModel:
    """The target converted by ModelOpt into an EAGLE model. offline: only its embeddings and lm_head are
    loaded (the states come from the capture); else the whole target runs, as for the evaluation."""
    import modelopt.torch.speculative as mtsp
    from modelopt.torch.speculative.utils import load_vlm_or_llm

    target = TargetShape.read(target_dir)
    model: EagleModel = load_vlm_or_llm(str(target_dir), use_offline_training=offline, dtype=torch.float32)
    config = {
        "eagle_offline": offline,
        "eagle_decoder_type": "llama",
        "eagle_architecture_config": architecture(target, draft_vocab_size),
        "eagle_use_torch_compile": False,  # compiling costs more than it saves on CPU and in short runs
        # ModelOpt writes a YaRN rope_scaling into the exported config by default (for contexts past training);
        # the head is exported with the rope it was trained and evaluated with, so the offline evaluation holds.
        "eagle_export_rope_scaling": {},
    }
    mtsp.convert(model, [("eagle", config)])
    return model


def draft_vocabulary(token_counts: dict[int, int], vocab_size: int, size: int) -> torch.Tensor:
    """d2t for a draft vocabulary of `size` tokens, the most frequent first (ties and unseen tokens by id):
    draft token i is target token i + d2t[i], the ids ascending, as ModelOpt and TensorRT-LLM keep it."""
    ranked = sorted(range(vocab_size), key=lambda t: (-token_counts.get(t, 0), t))
    chosen = sorted(ranked[:size])
    return torch.tensor([token - index for index, token in enumerate(chosen)], dtype=torch.int64)


@dataclass(frozen=True)
class Training:
    epochs: int = 12
    batch_size: int = 16
    learning_rate: float = 3e-3
    sequence_length: int = 64  # tokens per conversation the trainer reads; longer ones are cut


def seed(value: int) -> None:
    """One seed for the head's initialisation (build) and the batches' order (train), set before both: the same
    hidden states and seed make the same head, so a round's decision does not turn on the draw."""
    torch.manual_seed(value)
    random.seed(value)


def train(model: EagleModel, files: list[Path], training: Training, progress: Callable[[int, float], None]) -> None:
    """ModelOpt's offline EAGLE-3 training: its dataset, collator and loss (the head distilled from the target's
    next-token distribution over eagle_ttt_steps steps), AdamW on the head's parameters with a linear decay.
    A plain loop: transformers' Trainer would bring accelerate and a run directory for what is one optimizer."""
    from modelopt.torch.speculative.eagle.utils import EagleOfflineDataCollator, OfflineSupervisedDataset

    loader = torch.utils.data.DataLoader(
        OfflineSupervisedDataset([str(f) for f in files]),
        batch_size=training.batch_size,
        shuffle=True,
        collate_fn=EagleOfflineDataCollator(train_len=training.sequence_length),
    )
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=training.learning_rate)
    steps = max(training.epochs * math.ceil(len(files) / training.batch_size), 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(1.0 - step / steps, 0.05))
    model.train()
    for epoch in range(training.epochs):
        total, batches = 0.0, 0
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            total += float(loss.detach())
            batches += 1
        progress(epoch, total / max(batches, 1))
    model.eval()


def export(model: EagleModel, out_dir: Path) -> None:
    """ModelOpt's export of the head, in bfloat16 as TensorRT-LLM serves it: config.json, model.safetensors."""
    from modelopt.torch.export import export_speculative_decoding

    head: EagleModel = copy.deepcopy(model).to(torch.bfloat16)
    head.eagle_config.torch_dtype = torch.bfloat16
    export_speculative_decoding(head, export_dir=out_dir)


def load(model: EagleModel, head_dir: Path) -> None:
    """An exported head's weights into an EAGLE model built for it (eagle_module.*; the lm_head is the target's)."""
    weights = load_file(str(head_dir / "model.safetensors"))
    state = {f"eagle_module.{k}": v.float() for k, v in weights.items() if k != "lm_head.weight"}
    if "lm_head.weight" in weights and hasattr(model.eagle_module, "lm_head"):
        state["eagle_module.lm_head.weight"] = weights["lm_head.weight"].float()
    missing, unexpected = model.load_state_dict(state, strict=False)
    head_missing = [k for k in missing if k.startswith("eagle_module.") and not k.endswith("rotary_emb.inv_freq")]
    if head_missing or unexpected:
        raise ValueError(
            f"{head_dir}: not a head of this shape (missing {head_missing[:5]}, unexpected {list(unexpected)[:5]})"
        )


def draft_vocab_size(head_dir: Path) -> int:
    config = json.loads((head_dir / "config.json").read_text())
    return int(config.get("draft_vocab_size") or config["vocab_size"])


def check_config(head_dir: Path, target: TargetShape) -> list[str]:
    """What in the head's config.json does not fit the target, for TensorRT-LLM's Eagle3 draft model
    (tensorrt_llm/_torch/models/modeling_speculative.py reads these keys); empty when it fits."""
    try:
        config = json.loads((head_dir / "config.json").read_text())
    except (OSError, ValueError) as error:
        return [f"config.json: {error}"]
    problems = []
    for key in (
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "num_hidden_layers",
        "rms_norm_eps",
        "vocab_size",
        "torch_dtype",
        "max_position_embeddings",
    ):
        if config.get(key) is None:
            problems.append(f"{key} missing")
    if config.get("architectures") != [ARCHITECTURE]:
        problems.append(f"architectures is {config.get('architectures')}, not [{ARCHITECTURE!r}]")
    if config.get("hidden_size") != target.hidden_size:
        problems.append(f"hidden_size {config.get('hidden_size')} is not the target's {target.hidden_size}")
    if config.get("vocab_size") != target.vocab_size:
        problems.append(f"vocab_size {config.get('vocab_size')} is not the target's {target.vocab_size}")
    draft_vocab = config.get("draft_vocab_size") or config.get("vocab_size")
    if not isinstance(draft_vocab, int) or not 0 < draft_vocab <= target.vocab_size:
        problems.append(f"draft_vocab_size {draft_vocab} is not within the target's vocabulary")
    layers = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    expected = target.capture_layers()
    if layers != expected:
        problems.append(
            f"eagle_aux_hidden_state_layer_ids {layers} are not the layers TensorRT-LLM captures "
            f"for a target of {target.num_hidden_layers} layers, {expected}"
        )
    return problems
