"""A causal LM fine-tuned on text prompts and their answers, and its answers: the decoder side of the systems whose
client sends text (privatized or not) instead of vectors.

RAPT's generation (the client sends PCT2T text) and the word-level baselines of PPFT's Table 1 (d_chi words, a
paraphrase) train and score the same way; only what the client does to the prompt differs, and that happens before
this module sees the text. So this module takes (prompt, answer) pairs:

* :class:`TextTuningConfig`: the loop's settings (:class:`~textfree.training.config.LoopConfig`), the decoder (any
  HF causal LM by name or path) and the PEFT method (:func:`textfree.lm.adapters.apply_adapter`);
* :func:`encode_pairs`: prompt + answer + EOS as one sequence, the loss on the answer's tokens only; a prompt too long
  for ``max_length`` loses its *start* (the question and the public part are at its end), or, when it carries RAPT's
  plain words (:attr:`TextPair.plain`), the start of what follows them;
* :func:`tune_text_decoder`: the project's one loop (:func:`textfree.training.loop.fit`: Accelerate, resumable),
  then ``save_pretrained`` of the adapter (or the whole model for ``full``) and the tokenizer into ``out``; with a
  ``head`` (RAPT's reconstruction head) the loss adds its reconstruction loss at the plain words, and the head is
  dropped after training (never saved);
* :func:`load_tuned_decoder` and :func:`answer_prompts`: the saved run back, greedy answers to prompts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..training.config import LoopConfig, _check_int
from .adapters import ADAPTER_METHODS, AdapterSettings

__all__ = [
    "TextPair",
    "TextTuningConfig",
    "answer_prompts",
    "encode_pairs",
    "load_tuned_decoder",
    "tune_text_decoder",
]

log = logging.getLogger("textfree.lm")

#: Where a tuned run keeps its weights: a ``peft`` adapter, or the whole model (method ``full``).
ADAPTER_DIR, MODEL_DIR, TOKENIZER_DIR = "adapter", "model", "tokenizer"


@dataclass(frozen=True)
class TextPair:
    """One training or test example: the text the server receives and the answer it should give."""

    prompt: str
    answer: str
    #: RAPT's privatized plain words in ``prompt``, in order: (first character, end character, reconstruction target)
    plain: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        for name in ("prompt", "answer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"TextPair.{name} must be a non-empty string, got {value!r}")
        object.__setattr__(self, "plain", tuple(tuple(span) for span in self.plain))
        ends = [0] + [span[1] for span in self.plain]
        for (start, end, target), before in zip(self.plain, ends, strict=False):
            if not (before <= start < end <= len(self.prompt)) or target < 0:
                raise ValueError(f"TextPair.plain: ({start}, {end}, {target}) is not an ordered span of the prompt")


@dataclass(kw_only=True)
class TextTuningConfig(LoopConfig):
    """A decoder fine-tuned on (prompt, answer) text pairs."""

    decoder: str = field(metadata={"help": "The decoder: an HF causal LM name or a local directory."})
    epochs: int = field(default=4, metadata={"help": "Passes over the training pairs."})
    batch_size: int = field(default=8, metadata={"help": "Pairs per optimizer step and process."})
    lr: float = field(default=1e-3, metadata={"help": "Peak learning rate (AdamW)."})
    method: str = field(default="lora", metadata={"help": f"One of {', '.join(ADAPTER_METHODS)}."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    virtual_tokens: int = field(default=20, metadata={"help": "Prompt / prefix tuning's virtual tokens."})
    max_length: int = field(default=256, metadata={"help": "Tokens per pair (prompt + answer + EOS)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.decoder, str) or not self.decoder:
            raise ValueError(f"decoder must be an HF name or a directory, got {self.decoder!r}")
        _check_int("max_length", self.max_length, 8)
        self.adapter()  # validates method and sizes

    def adapter(self) -> AdapterSettings:
        return AdapterSettings(
            method=self.method, r=self.lora_r, alpha=self.lora_alpha, num_virtual_tokens=self.virtual_tokens
        )


def encode_pairs(tokenizer: Any, pairs: Sequence[TextPair], *, max_length: int) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / labels (-100 on the prompt and the padding) of right-padded pairs.

    Each sequence is ``prompt`` + a space + ``answer`` + EOS; the answer always fits whole (a prompt too long loses
    its first tokens); an answer longer than ``max_length`` - 1 is an error naming it.

    When pairs carry plain words (:attr:`TextPair.plain`, RAPT), they are kept whole (a prompt too long loses the first
    tokens after them instead; an error when they alone leave no room) and the batch also holds ``plain_positions``
    and ``plain_targets`` [B, m]: each plain word's first sub-token (the first token whose characters overlap the
    word's: a byte-level BPE's leading-space token included, as WordPiece's first piece) and its target (-100 past a
    pair's own plain words)."""
    rows, targets, positions = [], [], []
    for pair in pairs:
        answer = tokenizer(" " + pair.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        if len(answer) >= max_length:
            raise ValueError(f"answer {pair.answer!r} takes {len(answer)} tokens: max_length {max_length} is too small")
        prompt, at = _fit_prompt(tokenizer, pair, max_length - len(answer), max_length)
        rows.append(prompt + answer)
        targets.append([-100] * len(prompt) + answer)
        positions.append(at)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, target) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        labels[i, : len(row)] = torch.tensor(target)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if any(pair.plain for pair in pairs):
        batch["plain_positions"], batch["plain_targets"] = _plain_batch(pairs, positions)
    return batch


def _fit_prompt(tokenizer: Any, pair: TextPair, room: int, max_length: int) -> tuple[list[int], list[int]]:
    """(the prompt's ids cut to ``room`` tokens, the token position of each plain word's first sub-token)."""
    if not pair.plain:
        return _prompt_ids(tokenizer, pair.prompt)[-room:], []
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("plain words need a fast tokenizer (character offsets) to find their tokens")
    enc = tokenizer(pair.prompt, add_special_tokens=False, return_offsets_mapping=True)
    ids, spans = list(enc.input_ids), enc.offset_mapping
    at = [next((t for t, (a, b) in enumerate(spans) if b > start and a < end), None) for start, end, _ in pair.plain]
    if None in at:
        raise ValueError(f"plain word {pair.prompt[slice(*pair.plain[at.index(None)][:2])]!r} has no token")
    kept = 1 + max(t for t, (a, _) in enumerate(spans) if a < pair.plain[-1][1])  # the plain words' tokens
    excess = len(ids) - room
    if excess > len(ids) - kept:
        raise ValueError(f"the {len(at)} plain words take {kept} tokens: max_length {max_length} leaves no room for "
                         "the rest of the prompt and the answer")  # fmt: skip
    if excess > 0:
        ids = ids[:kept] + ids[kept + excess :]
    return ids, at


def _plain_batch(pairs: Sequence[TextPair], positions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    m = max(len(pair.plain) for pair in pairs)
    at = torch.zeros((len(pairs), m), dtype=torch.long)
    targets = torch.full((len(pairs), m), -100, dtype=torch.long)
    for i, (pair, where) in enumerate(zip(pairs, positions, strict=True)):
        if where:
            at[i, : len(where)] = torch.tensor(where)
            targets[i, : len(where)] = torch.tensor([target for _, _, target in pair.plain])
    return at, targets


class _Reconstructing(torch.nn.Module):
    """The decoder and RAPT's reconstruction head, trained together; the loss is the LM loss on the answers plus
    ``weight`` x the reconstruction loss summed over the plain words (RAPT eq. 6, as :class:`textfree.rapt.model.
    RaptClassifier`), read at the decoder's last hidden states (past prompt tuning's virtual tokens)."""

    def __init__(self, decoder: torch.nn.Module, head: torch.nn.Module, weight: float) -> None:
        super().__init__()
        self.decoder, self.head, self.weight = decoder, head, float(weight)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(the loss, the head's mean cross-entropy per plain word)."""
        out = self.decoder(**_model_inputs(batch), output_hidden_states=True)
        hidden = out.hidden_states[-1]
        shift = hidden.shape[1] - batch["input_ids"].shape[1]
        targets = batch["plain_targets"]
        rec = self.head.loss(hidden.to(self.head.up.weight.dtype), batch["plain_positions"] + shift, targets)
        return out.loss + self.weight * rec * (targets != -100).sum(1).float().mean(), rec


def _model_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if not k.startswith("plain_")}


def _save(run: Path, model: torch.nn.Module, tokenizer: Any, method: str) -> None:
    """``save_pretrained`` of the whole model (``full``, with its tokenizer: a decoder directory like any other) or
    of the adapter, and the tokenizer."""
    if method == "full":
        model.save_pretrained(run / MODEL_DIR)
        tokenizer.save_pretrained(run / MODEL_DIR)
    else:
        model.save_pretrained(run / ADAPTER_DIR)
    tokenizer.save_pretrained(run / TOKENIZER_DIR)


def tune_text_decoder(
    cfg: TextTuningConfig,
    pairs: Sequence[TextPair],
    *,
    head: Callable[[int], torch.nn.Module] | None = None,
    rec_weight: float = 1.0,
    on_step: Callable[[int, float], None] | None = None,
    accelerator: Any = None,
) -> dict[str, Any]:
    """Fine-tune ``cfg.decoder`` with ``cfg.method`` on ``pairs`` (the loss on the answers) and save it into
    ``cfg.out``; returns the loop's summary with ``"model"`` (on the CPU, unwrapped), ``"tokenizer"`` and
    ``"fit_s"``. Resumes from the newest checkpoint in ``cfg.out`` (which holds the head's weights too).

    ``head``: RAPT's reconstruction head, made from the decoder's hidden width (e.g. ``lambda h:
    ReconstructionHead(h, |V_r|, 96)``), trained on the pairs' plain words with ``rec_weight`` (see
    :class:`_Reconstructing`) and dropped afterwards: ``out`` holds the decoder's weights only, as without it. The
    summary then adds ``first_rec_loss`` and ``final_rec_loss`` (the head's cross-entropy per plain word: the first
    step's, the mean of the last ``log_every`` steps', of this session; None when it ran no step)."""
    from ..accel import make_accelerator
    from ..training.loop import fit, param_groups
    from ..training.runs import check_run_dir, prepare_run_dir
    from .adapters import apply_adapter, trainable_parameters
    from .loading import load_decoder

    if not pairs:
        raise ValueError("no training pairs")
    if head is not None and not all(pair.plain for pair in pairs):
        raise ValueError("a reconstruction head needs plain words on every training pair")
    check_run_dir(cfg)
    accelerator = accelerator or make_accelerator(cpu=cfg.cpu)
    torch.manual_seed(cfg.seed)
    base, tokenizer = load_decoder(cfg.decoder)
    model = apply_adapter(base, cfg.adapter(), "CAUSAL_LM")
    trained = model if head is None else _Reconstructing(model, head(int(base.config.hidden_size)), rec_weight)
    run = prepare_run_dir(cfg)
    trainable = [p for p in trained.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(param_groups([(trainable, cfg.lr)], cfg.weight_decay))
    log.info("text tuning of %s (%s): %d pairs; %s", cfg.decoder, cfg.method, len(pairs), trainable_parameters(model))
    items, rec_losses = list(pairs), []
    t0 = time.time()
    summary = fit(cfg=cfg, model=trained, optimizer=optimizer, n_examples=len(items),
                  epoch_examples=lambda epoch: items,
                  collate=lambda batch: encode_pairs(tokenizer, batch, max_length=cfg.max_length),
                  loss_fn=lambda m, batch: _loss(m, batch, head is not None, rec_losses), on_step=on_step,
                  accelerator=accelerator)  # fmt: skip
    model = accelerator.unwrap_model(summary["model"]).cpu()
    if head is not None:
        model = model.decoder  # the head is dropped: only the decoder's weights are saved and returned
        tail = rec_losses[-cfg.log_every :]
        summary |= {"first_rec_loss": rec_losses[0] if rec_losses else None,
                    "final_rec_loss": sum(tail) / len(tail) if tail else None}  # fmt: skip
    if accelerator.is_main_process:
        _save(run, model, tokenizer, cfg.method)
    accelerator.wait_for_everyone()
    return summary | {"model": model, "tokenizer": tokenizer, "fit_s": round(time.time() - t0, 2)}


def _loss(model: torch.nn.Module, batch: dict, reconstructing: bool, rec_losses: list[float]) -> torch.Tensor:
    if not reconstructing:
        return model(**_model_inputs(batch)).loss
    loss, rec = model(batch)
    rec_losses.append(float(rec.detach()))
    return loss


def load_tuned_decoder(run: str | Path, decoder: str | None = None) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) of a run saved by :func:`tune_text_decoder`: its full model, or ``decoder`` (default: the
    one its train_config.json names) with its adapter, through ``from_pretrained``."""
    from ..atomic import read_json
    from .loading import load_decoder, load_decoder_tokenizer

    run = Path(run)
    if (run / MODEL_DIR).is_dir():
        model, _ = load_decoder(run / MODEL_DIR)
    else:
        if not (run / ADAPTER_DIR).is_dir():
            raise FileNotFoundError(f"{run} holds no {ADAPTER_DIR}/ or {MODEL_DIR}/ (not a text-tuning run)")
        from peft import PeftModel

        base_name = decoder or read_json(run / "train_config.json")["config"]["decoder"]
        base, _ = load_decoder(base_name)
        model = PeftModel.from_pretrained(base, run / ADAPTER_DIR)
    return model.eval(), load_decoder_tokenizer(run / TOKENIZER_DIR)


def _prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """A prompt's token ids as training saw them (no special tokens: a WordPiece tokenizer's [SEP] is its EOS)."""
    return tokenizer(prompt, add_special_tokens=False).input_ids


def answer_prompts(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str], *, max_new_tokens: int = 16,
                   progress: bool = False) -> list[str]:  # fmt: skip
    """The greedy answer to each prompt (:func:`textfree.lm.generate.generate_text`), its ids made as
    :func:`encode_pairs` makes them (no special tokens)."""
    from tqdm.auto import tqdm

    from .generate import generate_text

    return [
        generate_text(model, tokenizer, [p], max_new_tokens=max_new_tokens, add_special_tokens=False)[0].strip()
        for p in tqdm(prompts, desc="answer", unit="prompt", disable=not progress)
    ]
