"""A learned reader of T2T / PCT2T text: a small causal decoder trained to rewrite released text into the original.

The attacker holds in-domain text (the Pri-* PPFT train part) and knows the mechanism and its parameters (table, eta,
part-of-speech rule). It runs the mechanism over its own text, afresh every epoch, and fine-tunes a causal LM on

    BOS  <released text>  SEPARATOR  <original text>  EOS

with the loss on the original's tokens and EOS only (the released text is an ordinary prefix). At attack time it reads
each released text as the prefix and decodes greedily (:func:`textfree.lm.generate.greedy_generate`). Beyond the
word-by-word channel inverter it can use context: the words around a substituted one and the template the in-domain
texts share. Trained on clean text (no mechanism) it would learn the identity, which is why only the noise-aware
inverter is built.

The whole decoder is fine-tuned, not LoRA-adapted: the local decoder (``runs/decoder-small``) has 6.8M parameters,
so full fine-tuning costs little more than LoRA on a CPU (measured: 1.9 s against 1.7 s for LoRA r 16 on all linear
layers, per step of 8 sequences of 190 tokens, one thread; the backward pass through the activations dominates), the
attacker has no reason to keep the base model intact, and a model this small needs all its capacity for a new task.
Training (:mod:`.substitution_training`) runs the PPFT loop (:func:`textfree.training.loop.fit`, Accelerate, resumable
checkpoints); a run directory holds ``decoder/`` (model + tokenizer), ``inverter.json``, ``train_config.json``,
``metrics.jsonl`` and ``summary.json``. This module imports no transformers until an inverter is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from .threat import ThreatModel, check_grant, register_attack

__all__ = ["SUBSTITUTION_LEARNED_REQUIRES", "SEPARATOR", "SubstitutionInverter", "substitution_learned_attack"]

#: The attacker trains on its own runs of the mechanism (in-domain text, the mechanism and its parameters).
SUBSTITUTION_LEARNED_REQUIRES = ThreatModel(training_text="in_domain", knows_mechanism=True, knows_parameters=True)
#: Between the released text and the original.
SEPARATOR = "\nOriginal:"
DECODER_DIR = "decoder"
INVERTER_JSON = "inverter.json"


class SubstitutionInverter:
    """A causal LM with its tokenizer that rewrites released text into the original text."""

    def __init__(
        self, model: Any, tokenizer: Any, *, max_source_tokens: int = 120, max_target_tokens: int = 128
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_source_tokens, self.max_target_tokens = max_source_tokens, max_target_tokens
        self._bos = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
        self._sep = self._ids(SEPARATOR)
        longest = len(self._bos) + max_source_tokens + len(self._sep) + max_target_tokens + 1
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit is not None and longest > limit:
            raise ValueError(
                f"a prompt + target of up to {longest} tokens exceeds the decoder's {limit} positions; "
                "lower max_source_tokens / max_target_tokens"
            )

    @classmethod
    def from_decoder(cls, decoder: str, **kwargs: Any) -> "SubstitutionInverter":
        from ..lm.loading import load_decoder

        model, tokenizer = load_decoder(decoder)
        return cls(model, tokenizer, **kwargs)

    @classmethod
    def load(cls, run: str | Path) -> "SubstitutionInverter":
        from ..atomic import read_json
        from ..lm.loading import load_decoder

        model, tokenizer = load_decoder(Path(run) / DECODER_DIR)
        return cls(model, tokenizer, **read_json(Path(run) / INVERTER_JSON))

    def save(self, run: str | Path) -> None:
        from ..atomic import write_json

        self.model.save_pretrained(Path(run) / DECODER_DIR)
        self.tokenizer.save_pretrained(Path(run) / DECODER_DIR)
        write_json(
            Path(run) / INVERTER_JSON,
            {"max_source_tokens": self.max_source_tokens, "max_target_tokens": self.max_target_tokens},
        )

    # -- formatting
    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_ids(self, released: str) -> list[int]:
        """BOS, the released text (cut to ``max_source_tokens``), the separator."""
        return self._bos + self._ids(released)[: self.max_source_tokens] + self._sep

    def example(self, released: str, original: str) -> dict[str, list[int]]:
        """One training sequence; ``labels`` is -100 on the prompt (no loss), the original's ids and EOS after it."""
        prompt = self.prompt_ids(released)
        target = self._ids(" " + original)[: self.max_target_tokens] + [self.tokenizer.eos_token_id]
        return {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target}

    def collate(self, examples: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 on padding)."""
        width = max(len(e["input_ids"]) for e in examples)
        pad = self.tokenizer.pad_token_id

        def padded(key: str, fill: int) -> torch.Tensor:
            return torch.tensor([e[key] + [fill] * (width - len(e[key])) for e in examples])

        mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (width - len(e["input_ids"])) for e in examples])
        return {"input_ids": padded("input_ids", pad), "attention_mask": mask, "labels": padded("labels", -100)}

    @staticmethod
    def loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss

    # -- the attack
    def invert(self, released: Sequence[str], *, max_new_tokens: int = 128, batch_size: int = 16) -> list[str]:
        """The greedy rewrite of each released text."""
        from ..lm.generate import greedy_generate

        self.model.eval()
        device = next(self.model.parameters()).device
        embed = self.model.get_input_embeddings()
        out: list[str] = []
        for start in range(0, len(released), batch_size):
            prompts = [self.prompt_ids(t) for t in released[start : start + batch_size]]
            width = max(len(p) for p in prompts)
            ids = torch.tensor([[self.tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
            with torch.no_grad():
                new = greedy_generate(
                    self.model,
                    embed(ids),
                    mask,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=self.tokenizer.eos_token_id,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            out += [self.tokenizer.decode(n, skip_special_tokens=True).strip() for n in new]
        return out


@register_attack(
    "substitution_learned",
    requires=SUBSTITUTION_LEARNED_REQUIRES,
    description="a decoder trained on the attacker's own runs of the mechanism rewrites the released text",
)
def substitution_learned_attack(
    released: Sequence[str], inverter: SubstitutionInverter, *, threat: ThreatModel, **kwargs: Any
) -> list[str]:
    check_grant("substitution_learned", SUBSTITUTION_LEARNED_REQUIRES, threat)
    return inverter.invert(released, **kwargs)
