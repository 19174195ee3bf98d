"""Cell kind ``text_inversion``: the learned inverter of :mod:`textfree.attacks.text_inverter` against a text client of
PPFT's Table 1, on Pri-*: today the Paraphrase baseline's client (``privatizer: paraphrase``, the same paraphraser run
and temperature as examples/cells/ppft/ddx_baseline_paraphrase.yaml, so the held-out releases are the ones its server
answered: the same noise seed).

The attacker paraphrases the training rows' private parts itself (its own draws), fine-tunes ``decoder`` with LoRA on
(paraphrase -> original) for ``epochs``, and rewrites the held-out paraphrases. Metrics, each for the reconstruction
(no suffix), the release read as it is (``_released``) and the best constant guess (``_prior``: the medoid training
private part): ``rouge_l``, ``recall_symptoms``, ``recall_antecedents``, ``age_accuracy``, ``sex_accuracy``; and
``n_train``, ``n_test``, ``seconds``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..registry import RunContext, register_cell_kind
from .rapt import point_run
from .snd import validate_own_inputs

__all__ = ["text_inversion", "TEXT_INVERSION_METRICS"]

_SCORES = ("rouge_l", "recall_symptoms", "recall_antecedents", "age_accuracy", "sex_accuracy")
TEXT_INVERSION_METRICS = tuple(f"{m}{s}" for m in _SCORES for s in ("", "_released", "_prior")) + (
    "n_train", "n_test", "seconds")  # fmt: skip
_DEFAULT_OUT = "runs/text-inversion"
PARAMS = {
    "decoder": "the attacker's (and the paraphraser's) decoder: an HF name or a local directory (required)",
    "dataset": "Pri-* dataset (ppft_split's train part is the attacker's; default pri-ddx)",
    "privatizer": "the client attacked: 'paraphrase' (PPFT's Paraphrase baseline)",
    "temperature": "the paraphraser's sampling temperature tau (the baseline's)",
    "paraphraser_out": "where the paraphraser run is (default runs/paraphraser; trained there when absent)",
    "paraphraser_pairs": "QQP duplicate pairs the paraphraser learned (the baseline's; default 2000)",
    "paraphraser_epochs": "the paraphraser's epochs (the baseline's; default 1)",
    "epochs": "the inverter's passes over its pairs (default 4)",
    "batch_size": "pairs per step (default 8)",
    "lr": "the inverter's learning rate (default 1e-3)",
    "eval_limit": "attack the first N held-out rows (default 300)",
    "max_new_tokens": "reconstruction length in tokens (default 128)",
    "out": f"directory of the runs (default {_DEFAULT_OUT})",
}


def _check(params: dict) -> tuple[str, str] | None:
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        return unknown[0], f"unknown param {unknown[0]!r} (known: {', '.join(PARAMS)})"
    if "decoder" not in params:
        return "decoder", "params.decoder is required"
    if params.get("privatizer", "paraphrase") != "paraphrase":
        return "privatizer", f"privatizer must be 'paraphrase', got {params.get('privatizer')!r}"
    tau = params.get("temperature")
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not tau > 0:
        return "temperature", f"temperature must be a number > 0, got {tau!r}"
    for name in ("epochs", "batch_size", "eval_limit", "max_new_tokens", "paraphraser_pairs", "paraphraser_epochs"):
        value = params.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return name, f"{name} must be an integer >= 1, got {value!r}"
    return None


def _validate(cell: Any, points: list[dict]) -> None:
    validate_own_inputs(cell, points, why="reads its dataset from params.dataset and runs the client itself",
                        limit_hint="params.eval_limit", check=_check)  # fmt: skip


def _releases(p: dict, seed: int, train: list[str], test: list[str]) -> tuple[list[str], list[str]]:
    """The attacker's own paraphrases of ``train`` and the client's of ``test`` (the baseline's held-out seed)."""
    from ...lm.paraphrase import load_or_train_paraphraser, paraphrase
    from ...rng import seeded_generator

    model, tok, _ = load_or_train_paraphraser(
        p["decoder"], p.get("paraphraser_out", "runs/paraphraser"), n_pairs=p.get("paraphraser_pairs", 2000),
        epochs=p.get("paraphraser_epochs", 1), seed=seed,
    )  # fmt: skip
    tau = float(p["temperature"])
    own = paraphrase(model, tok, train, temperature=tau, generator=seeded_generator(seed * 3 + 10, warn=False))
    sent = paraphrase(model, tok, test, temperature=tau, generator=seeded_generator(seed * 3 + 1, warn=False))
    return own, sent


@register_cell_kind(
    "text_inversion",
    metrics=TEXT_INVERSION_METRICS,
    params=PARAMS,
    validate=_validate,
    help="A learned inverter (release -> original text) against PPFT's Paraphrase baseline client on Pri-*.",
    takes_attack=False,
)
def text_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Release, train the inverter (or resume a finished one), reconstruct, score."""
    from ...attacks.learned import medoid_text
    from ...attacks.text_inverter import attribute_scores, generate_batched, inversion_pairs
    from ...data import ppft_split
    from ...lm.text_qa import private_parts
    from ...lm.text_tuning import TextTuningConfig, tune_text_decoder
    from ...metrics.text import corpus_rouge_l
    from ...ppft.privacy_restore import span_vocabulary

    started = time.perf_counter()
    p, run = point_run(cell, point, seed, _check, _DEFAULT_OUT)
    split = ppft_split(p.get("dataset", "pri-ddx"))
    train, heldout = split["train"], split["heldout"][: p.get("eval_limit", 300)]
    private_train, private_test = private_parts(train), private_parts(heldout)
    own, sent = _releases(p, seed, private_train, private_test)
    cfg = TextTuningConfig(out=str(Path(run)), decoder=p["decoder"], epochs=p.get("epochs", 4), seed=seed,
                           batch_size=p.get("batch_size", 8), lr=p.get("lr", 1e-3), progress=False)  # fmt: skip
    fitted = tune_text_decoder(cfg, inversion_pairs(own, private_train))
    prompts = [pair.prompt for pair in inversion_pairs(sent, private_test)]
    recon = generate_batched(fitted["model"], fitted["tokenizer"], prompts, max_new_tokens=p.get("max_new_tokens", 128))
    names = span_vocabulary(split["train"] + split["validation"] + split["heldout"])
    prior = [medoid_text(private_train)] * len(heldout)
    out: dict[str, float] = {}
    for suffix, texts in (("", recon), ("_released", sent), ("_prior", prior)):
        out[f"rouge_l{suffix}"] = corpus_rouge_l(texts, private_test).f1
        out |= {f"{k}{suffix}": v for k, v in attribute_scores(texts, heldout, names).items()}
    return out | {"n_train": float(len(train)), "n_test": float(len(heldout)),
                  "seconds": time.perf_counter() - started}  # fmt: skip
