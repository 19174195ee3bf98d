"""Fine-tuning on privatized text with privatized-token reconstruction (RAPT, Li et al., section III, Fig. 3).

One run (:func:`train_rapt`) plays both sides for an experiment:

1. the client privatizes every training example once, locally
   (:func:`~textfree.substitution.examples.privatize_examples`: T2T or PCT2T at ``eta``; ``eta`` null: no privatization,
   the paper's eta = infinity column), with plain tokens prepended where ``plain_length`` > 0; a training set is
   uploaded once, so each example has one privatized copy;
2. the server trains the chosen PEFT method (``method``: lora, prompt_tuning, prefix_tuning, ia3 or full, through
   :func:`textfree.lm.adapters.apply_adapter`) on the privatized text with the task loss plus ``rec_weight`` x the
   reconstruction loss (``reconstruction``; off: the ablation "without the reconstruction objective");
3. the test examples are privatized the same way (fresh noise, plain tokens prepended) and classified; the head is not
   used and not saved.

The task head is the paper's (eq. 7): a linear layer over the mean of the last hidden states at the input's own
positions (not the plain tokens), so the model is loaded without a task head of its own (``AutoModel``) and wrapped
for feature extraction.

The server's half (step 2 and the saving) is :func:`fit_classifier`, which the service's fine-tuning jobs run too,
on examples a client privatized and uploaded (:mod:`textfree.rapt.finetune`). The loop is
:func:`textfree.training.loop.fit` (Accelerate, resumable checkpoints that include the head, progress bar). The run
directory holds the trained weights (``adapter/`` or ``model/``, ``save_pretrained``, and ``task_head.safetensors``),
the tokenizer, ``plain_tokens.json`` (public), ``train_config.json`` and ``summary.json`` (accuracy, losses, the mean
privatized words per example and the per-word bound).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..data.tasks import TaskData, load_task
from ..heads.reconstruction import ReconstructionHead
from ..lm.adapters import apply_adapter, trainable_parameters
from ..rng import seeded_generator
from ..substitution.examples import PrivatizedExample, privatize_examples
from ..substitution.plain import PlainTokens
from ..training.loop import fit, param_groups
from ..training.runs import check_run_dir, prepare_run_dir, total_wall_s, write_summary
from .config import RaptTrainConfig
from .model import RaptClassifier, encode_examples, save_classifier

__all__ = ["RaptTrainConfig", "Fitted", "train_rapt", "fit_classifier", "build_mechanism", "evaluate_classifier"]

log = logging.getLogger("textfree.rapt")


def build_mechanism(encoder: str, eta: float | None, pos: str | None):
    """The client's T2T (``pos`` null) or PCT2T over ``encoder``'s word table at ``eta``; None when ``eta`` is null.
    The table and its tags are built once per process and (encoder, pos)."""
    if eta is None:
        return None
    return _base_mechanism(encoder, pos).with_eta(float(eta))


@functools.lru_cache(maxsize=4)
def _base_mechanism(encoder: str, pos: str | None):
    from ..substitution.cli_support import build_t2t

    return build_t2t(table=encoder, eta=1.0, pos=pos)


def _plain_tokens(cfg: RaptTrainConfig, mechanism: Any) -> PlainTokens | None:
    if cfg.plain_length == 0:
        return None
    if mechanism is None:  # no privatization: plain tokens from the table words of the categories all the same
        mechanism = build_mechanism(cfg.encoder, 1.0, cfg.pos)
    words = mechanism.table.words
    tags = mechanism.vocabulary_tags() if mechanism.is_pct2t else None
    return PlainTokens.sample(words, tags, categories=mechanism.pos_categories, length=cfg.plain_length,
                              n_sequences=cfg.plain_sequences, vocab_size=cfg.rec_vocab_size,
                              generator=seeded_generator(cfg.data_seed, warn=False))  # fmt: skip


def _privatize(data: TaskData, cfg: RaptTrainConfig, mechanism: Any, plain: PlainTokens | None, split: str):
    texts, labels = (data.train_texts, data.train_labels) if split == "train" else (data.test_texts, data.test_labels)
    gen = seeded_generator(cfg.effective_noise_seed * 2 + (split == "test"), warn=False)
    return privatize_examples(texts, labels, mechanism, plain, generator=gen)


@torch.no_grad()
def evaluate_classifier(
    model: RaptClassifier, tokenizer: Any, examples: Sequence[PrivatizedExample], plain: PlainTokens | None,
    *, max_length: int, batch_size: int = 64,
) -> dict[str, float]:  # fmt: skip
    """Accuracy of ``model`` on privatized ``examples`` (the head unused)."""
    model.eval()
    correct = 0
    for start in range(0, len(examples), batch_size):
        chunk = list(examples[start : start + batch_size])
        batch = encode_examples(tokenizer, chunk, plain, max_length=max_length)
        correct += int((model.predict(batch) == batch["labels"]).sum())
    return {"acc": correct / max(len(examples), 1), "n_test": float(len(examples))}


@dataclass
class Fitted:
    """What :func:`fit_classifier` trained: the loop's summary, the classifier (on the CPU, no longer wrapped), its
    tokenizer, and the seconds the loop ran."""

    summary: dict[str, Any]
    classifier: RaptClassifier
    tokenizer: Any
    fit_s: float


def _build_classifier(cfg: RaptTrainConfig, n_labels: int, plain: PlainTokens | None) -> tuple[RaptClassifier, Any]:
    """(classifier, tokenizer): the encoder with ``cfg``'s method, a fresh task head and, with reconstruction, a fresh
    reconstruction head over the plain tokens' vocabulary (drawn from the global RNG, in this order)."""
    from ..lm.loading import load_encoder

    base, tokenizer = load_encoder(cfg.encoder)
    model = apply_adapter(base, cfg.adapter(), "FEATURE_EXTRACTION")
    hidden = int(base.config.hidden_size)
    head = ReconstructionHead(hidden, len(plain.vocabulary), cfg.rec_hidden) if cfg.reconstruction else None
    return RaptClassifier(model, torch.nn.Linear(hidden, n_labels), head, cfg.rec_weight), tokenizer


def fit_classifier(
    cfg: RaptTrainConfig,
    examples: Sequence[PrivatizedExample],
    plain: PlainTokens | None,
    n_labels: int,
    *,
    on_step: Callable[[int, float], None] | None,
    accelerator: Any,
) -> Fitted:
    """The server's half of RAPT: build the classifier, train it on the privatized ``examples`` (task + reconstruction
    loss, the project's one loop: it resumes from the newest checkpoint in ``cfg.out``) and save what is served
    (``save_classifier``: no reconstruction head; the tokenizer; the public plain tokens) into ``cfg.out``."""
    classifier, tokenizer = _build_classifier(cfg, n_labels, plain)
    run = prepare_run_dir(cfg)
    trainable = [p for p in classifier.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(param_groups([(trainable, cfg.lr)], cfg.weight_decay))
    log.info("RAPT %s on %s: %d training examples, eta %s, pos %s, %d plain tokens, reconstruction %s; %s",
             cfg.method, cfg.task, len(examples), cfg.eta, cfg.pos, cfg.plain_length, cfg.reconstruction,
             trainable_parameters(classifier))  # fmt: skip

    def collate(items: list[PrivatizedExample]) -> dict:
        return encode_examples(tokenizer, items, plain, max_length=cfg.max_length)

    t_fit = time.time()
    summary = fit(cfg=cfg, model=classifier, optimizer=optimizer, n_examples=len(examples),
                  epoch_examples=lambda epoch: examples, collate=collate,
                  loss_fn=lambda m, batch: m(batch)["loss"], on_step=on_step, accelerator=accelerator)  # fmt: skip
    fit_s = time.time() - t_fit
    classifier = accelerator.unwrap_model(summary["model"]).cpu()
    if accelerator.is_main_process:
        save_classifier(run, classifier)
        tokenizer.save_pretrained(run / "tokenizer")
        if plain is not None:
            plain.save(run)
    accelerator.wait_for_everyone()
    return Fitted(summary, classifier, tokenizer, fit_s)


def train_rapt(
    cfg: RaptTrainConfig, *, data: TaskData | None = None, on_step: Callable[[int, float], None] | None = None
) -> dict[str, Any]:
    """Train and evaluate one RAPT classifier (see the module docstring); returns the summary written to
    summary.json plus ``"model"``. ``data`` replaces the task's files (tests)."""
    from ..accel import make_accelerator

    if not isinstance(cfg, RaptTrainConfig):
        raise TypeError(f"cfg must be a RaptTrainConfig, got {type(cfg).__name__}")
    check_run_dir(cfg)
    accelerator = make_accelerator(cpu=cfg.cpu)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    if data is None:
        data = load_task(cfg.task, train_limit=cfg.train_limit, test_limit=cfg.test_limit,
                         generator=seeded_generator(cfg.data_seed, warn=False))  # fmt: skip
    mechanism = build_mechanism(cfg.encoder, cfg.eta, cfg.pos)
    plain = _plain_tokens(cfg, mechanism)
    train_examples = _privatize(data, cfg, mechanism, plain, "train")
    test_examples = _privatize(data, cfg, mechanism, plain, "test")
    n_labels = max(2, max(data.train_labels) + 1)
    fitted = fit_classifier(cfg, train_examples, plain, n_labels, on_step=on_step, accelerator=accelerator)
    summary, classifier = fitted.summary, fitted.classifier
    scores = evaluate_classifier(classifier, fitted.tokenizer, test_examples, plain, max_length=cfg.max_length)
    per_word = None if mechanism is None else mechanism.privacy_loss_per_word().epsilon
    words = [ex.words_privatized for ex in test_examples]
    extra = {
        "system": "rapt",
        "task": cfg.task,
        "method": cfg.method,
        "eta": cfg.eta,
        "pos": cfg.pos,
        "acc": scores["acc"],
        "num_labels": n_labels,
        "n_train": len(train_examples),
        "n_test": len(test_examples),
        "epsilon_per_word": per_word,
        "mean_privatized_words": sum(words) / max(len(words), 1),
        "trainable_parameters": trainable_parameters(classifier.model)["trainable"],
        "s_per_step": round(fitted.fit_s / max(summary["steps"] - summary["resumed_from_step"], 1), 4),
        "total_wall_s": total_wall_s(summary, t0),
    }
    log.info("RAPT %s %s eta %s: accuracy %.4f on %d privatized test examples", cfg.method, cfg.task, cfg.eta,
             scores["acc"], len(test_examples))  # fmt: skip
    return write_summary(Path(cfg.out), summary, extra) | {"model": classifier}
