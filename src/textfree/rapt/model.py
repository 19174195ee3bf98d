"""RAPT's server side for classification: a (PEFT-wrapped) sequence classifier trained on privatized text with the
privatized-token reconstruction loss (Li et al., section III-B2, eq. 3-5).

:func:`encode_examples` turns :class:`~.client.PrivatizedExample` rows into a batch: the privatized plain tokens
prepended to the first sentence (``[CLS] k^_1 .. k^_m w^_1 .. [SEP] (second sentence [SEP])``), the position of each
plain word's first sub-token, and the plain tokens' indices in the reconstruction vocabulary (the targets).
:class:`RaptClassifier` adds ``rec_weight`` x the head's loss to the task loss; the head reads the last hidden states
at the plain tokens' positions (shifted past the virtual tokens of prompt tuning, which come first). At inference the
head is not used; :func:`save_classifier` never writes it, so a served model has none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch

from ..heads.reconstruction import ReconstructionHead
from .client import PrivatizedExample
from .plain import PlainTokens

__all__ = ["encode_examples", "RaptClassifier", "load_classifier"]


def encode_examples(
    tokenizer: Any, examples: Sequence[PrivatizedExample], plain: PlainTokens | None, *, max_length: int
) -> dict[str, torch.Tensor]:
    """The batch of ``examples`` (see the module docstring): ``input_ids``, ``attention_mask`` (and
    ``token_type_ids`` where the tokenizer makes them), ``labels`` and, with plain tokens, ``plain_positions`` and
    ``plain_targets`` [B, m] (a plain word cut off by ``max_length`` gets target -100)."""
    firsts, seconds, starts = [], [], []
    for ex in examples:
        if (ex.plain is None) != (plain is None):
            raise ValueError("encode_examples: the examples' plain tokens and the model's plain-token table disagree")
        prefix = "" if ex.plain is None else " ".join(ex.plain) + " "
        word_starts, at = [], 0
        for w in ex.plain or ():
            word_starts.append(at)
            at += len(w) + 1
        firsts.append(prefix + ex.parts[0])
        seconds.append(ex.parts[1] if len(ex.parts) > 1 else None)
        starts.append(word_starts)
    pair = seconds[0] is not None
    enc = tokenizer(
        firsts,
        seconds if pair else None,
        truncation="only_second" if pair else True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
        return_offsets_mapping=plain is not None,
    )
    batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
    batch["labels"] = torch.tensor([int(ex.label) for ex in examples], dtype=torch.long)
    if plain is None:
        return batch
    m = plain.length
    positions = torch.zeros(len(examples), m, dtype=torch.long)
    targets = torch.full((len(examples), m), -100, dtype=torch.long)
    for i, ex in enumerate(examples):
        seq_ids = enc.sequence_ids(i)
        first_token = {}
        for t, (a, _b) in enumerate(enc["offset_mapping"][i].tolist()):
            if seq_ids[t] == 0 and a not in first_token:
                first_token[a] = t
        truth = plain.targets(ex.sequence)
        for j, start in enumerate(starts[i]):
            if start in first_token:
                positions[i, j], targets[i, j] = first_token[start], truth[j]
    batch["plain_positions"], batch["plain_targets"] = positions, targets
    return batch


class RaptClassifier(torch.nn.Module):
    """A sequence classifier (HF or PEFT) plus, while training, RAPT's reconstruction head."""

    def __init__(self, model: torch.nn.Module, head: ReconstructionHead | None = None, rec_weight: float = 1.0):
        super().__init__()
        if not (isinstance(rec_weight, (int, float)) and rec_weight >= 0):
            raise ValueError(f"RaptClassifier: rec_weight must be a number >= 0, got {rec_weight!r}")
        self.model = model
        self.head = head
        self.rec_weight = float(rec_weight)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``loss`` (task + rec_weight x reconstruction), ``task_loss``, ``rec_loss`` (0 without a head) and
        ``logits``."""
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels") if k in batch}
        reconstruct = self.head is not None and "plain_positions" in batch
        out = self.model(**inputs, output_hidden_states=reconstruct)
        rec = out.loss.new_zeros(())
        if reconstruct:
            hidden = out.hidden_states[-1]
            shift = hidden.shape[1] - batch["input_ids"].shape[1]  # prompt tuning's virtual tokens come first
            rec = self.head.loss(hidden, batch["plain_positions"] + shift, batch["plain_targets"])
        return {"loss": out.loss + self.rec_weight * rec, "task_loss": out.loss, "rec_loss": rec, "logits": out.logits}

    @torch.no_grad()
    def predict(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Class indices; the reconstruction head is not used."""
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        return self.model(**inputs).logits.argmax(-1)


def load_classifier(run: str | os.PathLike) -> tuple[RaptClassifier, Any, PlainTokens | None, dict[str, Any]]:
    """``(classifier without a head, tokenizer, plain tokens or None, train config)`` of a finished RAPT run directory
    (``adapter/`` on the base encoder named in its config, or ``model/`` for full fine-tuning)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ..atomic import read_json
    from ..lm.loading import load_encoder
    from .plain import PLAIN_FILE

    run = Path(run)
    try:
        config = read_json(run / "train_config.json")["config"]
        labels = int(read_json(run / "summary.json")["num_labels"])
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{str(run)!r} is not a finished RAPT run: {exc}") from exc
    tokenizer = AutoTokenizer.from_pretrained(run / "tokenizer")
    if (run / "adapter").is_dir():
        from peft import PeftModel

        base, _ = load_encoder(config["encoder"], head="sequence", num_labels=labels)
        model = PeftModel.from_pretrained(base, run / "adapter")
    elif (run / "model").is_dir():
        model = AutoModelForSequenceClassification.from_pretrained(run / "model")
    else:
        raise ValueError(f"{str(run)!r} holds neither adapter/ nor model/")
    plain = PlainTokens.load(run) if (run / PLAIN_FILE).is_file() else None
    return RaptClassifier(model.eval()), tokenizer, plain, config
