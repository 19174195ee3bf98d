"""A client-side paraphraser: PPFT's Paraphrase baseline (Table 1; Utpala et al. 2023; PPFT Appendix C.3, F).

The paper's client prompts google/flan-t5-base with "Paraphrase this sentence while hiding personal information."
and samples at temperature tau = 2n/B (eq. 7: the proxy rule 2n/tau = B, n the longest prompt in tokens). That model
is not available offline; the paraphraser here is a local causal decoder fine-tuned with LoRA
(:func:`textfree.lm.text_tuning.tune_text_decoder`) on duplicate question pairs of QQP's *training* part
(:func:`textfree.data.tasks.qqp_is_test` false, label 1), both directions, each pair as
``"<instruction>\\n<q1>\\n"`` -> ``"<q2>"`` (:func:`qqp_pairs`). The run is saved under a directory named by its
settings and reused when it exists (:func:`load_or_train_paraphraser`).

:func:`paraphrase` samples each text *sentence by sentence*: the paraphraser learned single questions (QQP), the
instruction says "this sentence", and a Pri-* private part is a few long sentences (a whole one would be paraphrased
as one short question, dropping most of it). Every token is drawn from softmax(logits / tau) over the whole
vocabulary (no top-k, no nucleus: the distribution the proxy rule accounts for), each sentence from its own
generator seeded from the caller's, so a sentence's paraphrase does not depend on the batch it runs in. A sentence's
paraphrase is at most its own token count + ``extra_tokens`` long.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from .text_tuning import TextPair, TextTuningConfig

__all__ = [
    "INSTRUCTION",
    "paraphrase_prompt",
    "qqp_pairs",
    "split_sentences",
    "temperature_for_budget",
    "load_or_train_paraphraser",
    "paraphrase",
]

log = logging.getLogger("textfree.lm")

#: The paper's paraphrase prompt (PPFT Appendix C.3).
INSTRUCTION = "Paraphrase this sentence while hiding personal information."
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def paraphrase_prompt(sentence: str) -> str:
    """The text the paraphraser continues (its training prompts and its sampling prompts alike)."""
    return f"{INSTRUCTION}\n{sentence.strip()}\n"


def split_sentences(text: str) -> list[str]:
    """``text``'s sentences (split after ``.``, ``!`` or ``?`` followed by white space); [] for blank text."""
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text.strip())) if s]


def temperature_for_budget(n: int | float, budget: float) -> float:
    """tau = 2n / B (PPFT eq. 7; n the longest prompt in the paraphraser's tokens): the accounting's rule."""
    from ..mechanisms.accounting import paraphrase_temperature

    return paraphrase_temperature(budget, n)


def qqp_pairs(n_pairs: int, seed: int, records: Sequence[Any] | None = None) -> list[TextPair]:
    """``n_pairs`` paraphrase training pairs: ``n_pairs // 2`` duplicate QQP pairs of the training part (a seeded
    draw), each in both directions, shuffled. ``records``: QQP PairRecords (default: ``load_qqp(split="dev")``)."""
    from ..data import load_qqp
    from ..data.tasks import qqp_is_test

    if n_pairs < 2:
        raise ValueError(f"n_pairs must be >= 2, got {n_pairs}")
    records = load_qqp(split="dev") if records is None else records
    dup = [r for r in records if r.label == 1 and not qqp_is_test(r.id) and r.text_a.strip() and r.text_b.strip()]
    if len(dup) < n_pairs // 2:
        raise ValueError(f"QQP's training part has {len(dup)} duplicate pairs, fewer than {n_pairs // 2}")
    rng = random.Random(seed)
    chosen = rng.sample(dup, n_pairs // 2)
    pairs = [TextPair(paraphrase_prompt(a), b.strip()) for r in chosen for a, b in ((r.text_a, r.text_b),
                                                                                  (r.text_b, r.text_a))]  # fmt: skip
    rng.shuffle(pairs)
    return pairs


def _run_dir(root: str | Path, settings: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
    return Path(root) / f"qqp-{settings['n_pairs']}-e{settings['epochs']}-s{settings['seed']}-{key}"


def load_or_train_paraphraser(
    decoder: str,
    root: str | Path,
    *,
    n_pairs: int = 2000,
    epochs: int = 1,
    batch_size: int = 16,
    lr: float = 1e-3,
    max_length: int = 96,
    seed: int = 0,
    progress: bool = False,
    records: Sequence[Any] | None = None,
) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """(model, tokenizer, info) of the paraphraser with these settings under ``root``: loaded when its run finished
    before, else trained (LoRA r 16 on :func:`qqp_pairs`) and saved. ``info``: the run directory, the pair count,
    the first and last logged loss and the fitting time (of the run that trained it)."""
    from ..atomic import read_json, write_json
    from .text_tuning import load_tuned_decoder, tune_text_decoder

    settings = {"decoder": str(decoder), "n_pairs": n_pairs, "epochs": epochs, "batch_size": batch_size, "lr": lr,
                "max_length": max_length, "seed": seed, "source": "qqp-train-duplicates-both-directions"}  # fmt: skip
    run = _run_dir(root, settings)
    done = run / "paraphraser.json"
    if done.is_file():
        model, tokenizer = load_tuned_decoder(run, str(decoder))
        return model, tokenizer, read_json(done) | {"reused": True}
    pairs = qqp_pairs(n_pairs, seed, records)
    cfg = TextTuningConfig(out=str(run), decoder=str(decoder), epochs=epochs, batch_size=batch_size, lr=lr,
                           max_length=max_length, seed=seed, progress=progress)  # fmt: skip
    t0 = time.time()
    fitted = tune_text_decoder(cfg, pairs)
    info = {"run": str(run), "settings": settings, "n_pairs": len(pairs), "steps": fitted.get("steps"),
            "first_loss": fitted.get("first_loss"), "final_loss": fitted.get("final_loss"),
            "fit_s": fitted.get("fit_s"), "wall_s": round(time.time() - t0, 2)}  # fmt: skip
    write_json(done, info)
    log.info("paraphraser trained: %s", info)
    return fitted["model"].eval(), fitted["tokenizer"], info | {"reused": False}


@torch.no_grad()
def paraphrase(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    temperature: float,
    generator: torch.Generator,
    batch_size: int = 32,
    extra_tokens: int = 8,
) -> list[str]:
    """Each text paraphrased sentence by sentence (module docstring), sampled at ``temperature`` (> 0) with seeds
    drawn from ``generator``; the sentences' paraphrases joined by a space. A blank text stays blank."""
    from .generate import generate_ids

    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    where = [(i, s) for i, t in enumerate(texts) for s in split_sentences(t)]
    seeds = torch.randint(0, 2**62, (len(where),), generator=generator).tolist()
    ids = [tokenizer(paraphrase_prompt(s), add_special_tokens=False).input_ids for _, s in where]
    caps = [len(tokenizer(" " + s, add_special_tokens=False).input_ids) + extra_tokens for _, s in where]
    new = generate_ids(model, tokenizer, ids, max_new_tokens=caps, batch_size=batch_size, temperature=temperature,
                       seeds=seeds)  # fmt: skip
    outs = [tokenizer.decode(row, skip_special_tokens=True).strip() for row in new]
    joined: list[list[str]] = [[] for _ in texts]
    for (i, _), out in zip(where, outs, strict=True):
        if out:
            joined[i].append(out)
    return [" ".join(parts) for parts in joined]
