"""A causal LM fine-tuned on text prompts and their answers, and its answers: the decoder side of the systems whose
client sends text (privatized or not) instead of vectors.

RAPT's generation (the client sends PCT2T text) and the word-level baselines of PPFT's Table 1 (d_chi words, a
paraphrase) train and score the same way; only what the client does to the prompt differs, and that happens before
this module sees the text. So this module takes (prompt, answer) pairs:

* :class:`TextTuningConfig`: the loop's settings (:class:`~textfree.training.config.LoopConfig`), the decoder (any
  HF causal LM by name or path) and the PEFT method (:func:`textfree.lm.adapters.apply_adapter`);
* :func:`encode_pairs`: prompt + answer + EOS as one sequence, the loss on the answer's tokens only; a prompt too long
  for ``max_length`` loses its *start* (the question and the public part are at its end);
* :func:`tune_text_decoder`: the project's one loop (:func:`textfree.training.loop.fit`: Accelerate, resumable),
  then ``save_pretrained`` of the adapter (or the whole model for ``full``) and the tokenizer into ``out``;
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

    def __post_init__(self) -> None:
        for name in ("prompt", "answer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"TextPair.{name} must be a non-empty string, got {value!r}")


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
    its first tokens); an answer longer than ``max_length`` - 1 is an error naming it."""
    rows, targets = [], []
    for pair in pairs:
        prompt = _prompt_ids(tokenizer, pair.prompt)
        answer = tokenizer(" " + pair.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        if len(answer) >= max_length:
            raise ValueError(f"answer {pair.answer!r} takes {len(answer)} tokens: max_length {max_length} is too small")
        prompt = prompt[-(max_length - len(answer)) :]
        rows.append(prompt + answer)
        targets.append([-100] * len(prompt) + answer)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, target) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        labels[i, : len(row)] = torch.tensor(target)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


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
    on_step: Callable[[int, float], None] | None = None,
    accelerator: Any = None,
) -> dict[str, Any]:
    """Fine-tune ``cfg.decoder`` with ``cfg.method`` on ``pairs`` (the loss on the answers) and save it into
    ``cfg.out``; returns the loop's summary with ``"model"`` (on the CPU, unwrapped), ``"tokenizer"`` and
    ``"fit_s"``. Resumes from the newest checkpoint in ``cfg.out``."""
    from ..accel import make_accelerator
    from ..training.loop import fit, param_groups
    from ..training.runs import check_run_dir, prepare_run_dir
    from .adapters import apply_adapter, trainable_parameters
    from .loading import load_decoder

    if not pairs:
        raise ValueError("no training pairs")
    check_run_dir(cfg)
    accelerator = accelerator or make_accelerator(cpu=cfg.cpu)
    torch.manual_seed(cfg.seed)
    base, tokenizer = load_decoder(cfg.decoder)
    model = apply_adapter(base, cfg.adapter(), "CAUSAL_LM")
    run = prepare_run_dir(cfg)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(param_groups([(trainable, cfg.lr)], cfg.weight_decay))
    log.info("text tuning of %s (%s): %d pairs; %s", cfg.decoder, cfg.method, len(pairs), trainable_parameters(model))
    items = list(pairs)
    t0 = time.time()
    summary = fit(cfg=cfg, model=model, optimizer=optimizer, n_examples=len(items),
                  epoch_examples=lambda epoch: items,
                  collate=lambda batch: encode_pairs(tokenizer, batch, max_length=cfg.max_length),
                  loss_fn=lambda m, batch: m(**batch).loss, on_step=on_step, accelerator=accelerator)  # fmt: skip
    model = accelerator.unwrap_model(summary["model"]).cpu()
    if accelerator.is_main_process:
        _save(run, model, tokenizer, cfg.method)
    accelerator.wait_for_everyone()
    return summary | {"model": model, "tokenizer": tokenizer, "fit_s": round(time.time() - t0, 2)}


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
