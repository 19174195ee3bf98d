"""RAPT's server side for classification: a (PEFT-wrapped) encoder with the paper's task head, trained on privatized
text with the privatized-token reconstruction loss (Li et al., section III-B2, eq. 4-8).

:func:`encode_examples` turns :class:`~textfree.substitution.examples.PrivatizedExample` rows into a batch: the
privatized plain tokens prepended to the first sentence (``[CLS] k^_1 .. k^_m w^_1 .. [SEP] (second sentence [SEP])``),
the position of each plain word's first sub-token, the plain tokens' indices in the reconstruction vocabulary (the
targets), and the mask of the input's own tokens (neither special nor plain).

:class:`RaptClassifier` (eq. 7-8): the task head is a linear layer over the MEAN of the last hidden states at the
input's own positions (the paper's ``q = softmax(W_head (1/n) sum_i g_{l+m+i})``: plain tokens and special tokens
excluded); the loss is the task's cross-entropy plus ``rec_weight`` x the reconstruction loss (eq. 6: the sum over the
m plain tokens, averaged over the batch). Prompt tuning's virtual tokens come first in the hidden states: positions
shift past them. At inference the reconstruction head is not used; :func:`save_classifier` never writes it, so a
served model (:func:`load_classifier`) has none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import torch

from ..heads.reconstruction import ReconstructionHead
from ..substitution.examples import PrivatizedExample
from ..substitution.plain import PlainTokens

__all__ = [
    "TASK_HEAD_FILE",
    "BASE_ENCODER_DIR",
    "encode_examples",
    "RaptClassifier",
    "save_classifier",
    "load_classifier",
    "save_pretrained",
    "push_to_hub",
]

TASK_HEAD_FILE = "task_head.safetensors"
#: A published run's own copy of the base encoder its adapter was trained on (when that was a local directory).
BASE_ENCODER_DIR = "base_encoder"
#: What a served RAPT run is made of (the rest of a run directory, logs and checkpoints, is not published).
SERVED_FILES = ("adapter", "model", TASK_HEAD_FILE, "tokenizer", "plain_tokens.json", "train_config.json")
SERVED_FILES += ("summary.json",)


def _texts(examples: Sequence[PrivatizedExample], plain: PlainTokens | None) -> tuple[list, list, list, list]:
    """(first texts with the plain tokens prepended, second texts or None, plain word starts, prefix lengths)."""
    firsts, seconds, starts, prefixes = [], [], [], []
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
        prefixes.append(len(prefix))
    return firsts, seconds, starts, prefixes


def encode_examples(
    tokenizer: Any, examples: Sequence[PrivatizedExample], plain: PlainTokens | None, *, max_length: int
) -> dict[str, torch.Tensor]:
    """The batch of ``examples`` (see the module docstring): ``input_ids``, ``attention_mask`` (and
    ``token_type_ids`` where the tokenizer makes them), ``labels``, ``input_mask`` [B, T] (the input's own tokens)
    and, with plain tokens, ``plain_positions`` and ``plain_targets`` [B, m] (a plain word cut off by ``max_length``
    gets target -100)."""
    firsts, seconds, starts, prefixes = _texts(examples, plain)
    pair = seconds[0] is not None
    enc = tokenizer(
        firsts,
        seconds if pair else None,
        truncation="only_second" if pair else True,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
        return_offsets_mapping=True,
    )
    batch = {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}
    batch["labels"] = torch.tensor([int(ex.label) for ex in examples], dtype=torch.long)
    offsets = enc["offset_mapping"].tolist()
    input_mask = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    m = 0 if plain is None else plain.length
    positions = torch.zeros(len(examples), m, dtype=torch.long)
    targets = torch.full((len(examples), m), -100, dtype=torch.long)
    for i, ex in enumerate(examples):
        seq_ids = enc.sequence_ids(i)
        first_token: dict[int, int] = {}
        for t, (a, b) in enumerate(offsets[i]):
            if seq_ids[t] is None or b <= a:
                continue  # special or padding
            if seq_ids[t] == 1 or a >= prefixes[i]:
                input_mask[i, t] = True
            elif a not in first_token:
                first_token[a] = t
        if plain is not None:
            truth = plain.targets(ex.sequence)
            for j, start in enumerate(starts[i]):
                if start in first_token:
                    positions[i, j], targets[i, j] = first_token[start], truth[j]
    batch["input_mask"] = input_mask
    if plain is not None:
        batch["plain_positions"], batch["plain_targets"] = positions, targets
    return batch


class RaptClassifier(torch.nn.Module):
    """An encoder (HF ``AutoModel`` or its PEFT wrapper), the task head of eq. 7 and, while training, RAPT's
    reconstruction head."""

    def __init__(
        self,
        model: torch.nn.Module,
        task_head: torch.nn.Linear,
        head: ReconstructionHead | None = None,
        rec_weight: float = 1.0,
    ):
        super().__init__()
        if not (isinstance(rec_weight, (int, float)) and rec_weight >= 0):
            raise ValueError(f"RaptClassifier: rec_weight must be a number >= 0, got {rec_weight!r}")
        self.model = model
        self.task_head = task_head
        self.head = head
        self.rec_weight = float(rec_weight)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *, revision: str | None = None) -> "RaptClassifier":
        """The served classifier of a finished RAPT run, by local directory or Hugging Face hub id (``owner/name``;
        :func:`load_classifier`), with its ``tokenizer``, ``plain`` tokens (or None) and ``train_config`` attached."""
        classifier, tokenizer, plain, config = load_classifier(name_or_path, revision=revision)
        classifier.tokenizer, classifier.plain, classifier.train_config = tokenizer, plain, config
        return classifier

    def _hidden(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        hidden = self.model(**inputs).last_hidden_state
        return hidden, hidden.shape[1] - batch["input_ids"].shape[1]  # prompt tuning's virtual tokens come first

    def _logits(self, hidden: torch.Tensor, shift: int, input_mask: torch.Tensor) -> torch.Tensor:
        mask = input_mask.to(hidden.dtype).unsqueeze(-1)
        pooled = (hidden[:, shift:] * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.task_head(pooled)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``loss`` (task + rec_weight x reconstruction), ``task_loss``, ``rec_loss`` (0 without a head) and
        ``logits``."""
        hidden, shift = self._hidden(batch)
        logits = self._logits(hidden, shift, batch["input_mask"])
        task = torch.nn.functional.cross_entropy(logits, batch["labels"])
        rec = task.new_zeros(())
        if self.head is not None and "plain_positions" in batch:
            per_token = self.head.loss(hidden, batch["plain_positions"] + shift, batch["plain_targets"])
            rec = per_token * (batch["plain_targets"] != -100).sum(1).float().mean()  # eq. 6: a sum over the m tokens
        return {"loss": task + self.rec_weight * rec, "task_loss": task, "rec_loss": rec, "logits": logits}

    @torch.no_grad()
    def predict(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Class indices; the reconstruction head is not used."""
        hidden, shift = self._hidden(batch)
        return self._logits(hidden, shift, batch["input_mask"]).argmax(-1)


def save_classifier(run: str | os.PathLike, classifier: RaptClassifier) -> None:
    """The served weights: ``adapter/`` (a PEFT method) or ``model/`` (full fine-tuning) and ``task_head.safetensors``;
    never the reconstruction head."""
    from ..atomic import atomic_save_tensors

    run = Path(run)
    model = classifier.model
    model.save_pretrained(run / ("adapter" if hasattr(model, "peft_config") else "model"))
    head = {k: v.detach().cpu().contiguous() for k, v in classifier.task_head.state_dict().items()}
    atomic_save_tensors(run / TASK_HEAD_FILE, head)


def load_classifier(
    run: str | os.PathLike, *, revision: str | None = None
) -> tuple[RaptClassifier, Any, PlainTokens | None, dict[str, Any]]:
    """``(classifier without a reconstruction head, tokenizer, plain tokens or None, train config)`` of a finished
    RAPT run directory (``adapter/`` on the base encoder named in its config, or on its own ``base_encoder/`` copy,
    or ``model/`` for full fine-tuning); ``run`` may be a Hugging Face hub id (``owner/name``, at ``revision``)."""
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    from ..atomic import read_json
    from ..lm.hub import is_hub_id, resolve_pretrained
    from ..lm.loading import load_encoder
    from ..substitution.plain import PLAIN_FILE

    if is_hub_id(run):
        run = resolve_pretrained(run, revision=revision, marker=TASK_HEAD_FILE, what="RAPT run")
    run = Path(run)
    try:
        config = read_json(run / "train_config.json")["config"]
        labels = int(read_json(run / "summary.json")["num_labels"])
        head_state = load_file(str(run / TASK_HEAD_FILE))
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{str(run)!r} is not a finished RAPT run: {exc}") from exc
    tokenizer = AutoTokenizer.from_pretrained(run / "tokenizer")
    if (run / "adapter").is_dir():
        from peft import PeftModel

        bundled = run / BASE_ENCODER_DIR
        base, _ = load_encoder(str(bundled) if bundled.is_dir() else config["encoder"])
        model = PeftModel.from_pretrained(base, run / "adapter")
    elif (run / "model").is_dir():
        model = AutoModel.from_pretrained(run / "model")
    else:
        raise ValueError(f"{str(run)!r} holds neither adapter/ nor model/")
    task_head = torch.nn.Linear(int(head_state["weight"].shape[1]), labels)
    task_head.load_state_dict(head_state)
    plain = PlainTokens.load(run) if (run / PLAIN_FILE).is_file() else None
    return RaptClassifier(model.eval(), task_head.eval()), tokenizer, plain, config


def save_pretrained(
    run: str | os.PathLike, directory: str | os.PathLike, *, include_encoder: bool | None = None
) -> Path:
    """Copy the served files of the finished RAPT run ``run`` (adapter/ or model/, the task head, tokenizer/, plain
    tokens, train_config.json, summary.json; no logs or checkpoints) into ``directory``, which
    :func:`load_classifier` (and ``RaptClassifier.from_pretrained``) loads anywhere: a base encoder named by a local
    directory is copied into ``base_encoder/`` (unless ``include_encoder`` is False). Written beside ``directory``
    and renamed into place; an earlier run there is replaced."""
    import shutil

    from ..atomic import read_json
    from ..lm.hub import copy_tree, replace_dir

    source = Path(run)
    try:
        config = read_json(source / "train_config.json")["config"]
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{str(source)!r} is not a finished RAPT run: {exc}") from exc
    if not (source / TASK_HEAD_FILE).is_file():
        raise ValueError(f"{str(source)!r} is not a finished RAPT run (no {TASK_HEAD_FILE})")

    def fill(tmp: Path) -> None:
        for name in SERVED_FILES + (BASE_ENCODER_DIR,):
            item = source / name
            if item.is_dir():
                copy_tree(item, tmp / name)
            elif item.is_file():
                shutil.copy2(item, tmp / name)
        encoder = Path(str(config.get("encoder") or ""))
        if (source / "adapter").is_dir() and not (tmp / BASE_ENCODER_DIR).exists():
            if encoder.is_dir() and include_encoder is not False:
                copy_tree(encoder, tmp / BASE_ENCODER_DIR)
            elif include_encoder:
                raise ValueError(f"include_encoder: the base encoder {str(encoder)!r} is not a local directory")
        _scrub_config(tmp)

    return replace_dir(directory, fill, marker=TASK_HEAD_FILE)


def _scrub_config(run: Path) -> None:
    """A published run names no path of the publisher's machine: its run directory becomes ".", a local base encoder
    its bundled copy (or its directory's name)."""
    from ..atomic import read_json, write_json

    doc = read_json(run / "train_config.json")
    config = doc.get("config", {})
    config["out"] = "."
    encoder = str(config.get("encoder") or "")
    if Path(encoder).is_absolute() or Path(encoder).exists():
        config["encoder"] = BASE_ENCODER_DIR if (run / BASE_ENCODER_DIR).is_dir() else Path(encoder).name
    write_json(run / "train_config.json", doc)


def push_to_hub(run: str | os.PathLike, repo_id: str, *, include_encoder: bool | None = None, **push: Any) -> Any:
    """Publish the finished RAPT run ``run`` as the hub model repository ``repo_id`` (:func:`save_pretrained` into a
    temporary directory, then ``HfApi().upload_folder``); ``push``: token, private, revision, commit_message."""
    from ..lm.hub import push_saved

    return push_saved(lambda d: save_pretrained(run, d, include_encoder=include_encoder), repo_id, **push)
