"""Cell kind ``learned_inversion``: how much of a prompt a decoder regenerates from its PPFT payload (PPFT App. H-J, L).

Variants (``params.variant``):

* ``unaware``: the attacker trains an inverter on *clean* payloads of its in-domain text (the PPFT train part):
  stage 2 with the ``restore`` task (target = the private text) from ``params.init``;
* ``aware``: the same, trained on payloads noised by the evaluated mechanism (``epsilon``), fresh noise each epoch;
* ``restoration``: no training; the served PPFT model ``params.model`` is asked to restore the prompt.

``params.init`` is a run directory (a stage-1 run: the *stage-1-aligned* inverter) or a mapping ``{encoder: DIR,
decoder: DIR}``: an unaligned init (that encoder, a fresh projection, the pretrained decoder + fresh LoRA) built
once into ``<out>-init``. The encoder must be the one that made the attacked payloads (query access to it).

The attacker's text: on a Pri-* dataset the PPFT train part (in-domain text, ``training_text: in_domain``); with
``params.train_text`` (public instruction sources such as alpaca, lima, gsm8k:train) that public text instead
(``training_text: public`` suffices). A dataset other than Pri-* (PUPA, Presidio: free text with PII units) needs
``train_text`` for the trained variants: its records are only ever evaluated.

Each (point, seed): the first ``eval_limit`` distinct evaluated texts (Pri-*: the held-out split; otherwise the
dataset's records) that the client does not cut (at most the model's ``max_private_tokens`` encoder tokens, so no
reference holds text the payload never carried) are privatized at ``epsilon`` (null: clean) with the seed, the model
generates from each payload with the restore instruction, and the reconstructions are scored
(:func:`textfree.attacks.learned.score_reconstructions`): ``rouge_l`` (mean ROUGE-L F1), ``rouge_l_recall``,
``bleu``, on Pri-DDX ``symptoms_recall_text`` / ``antecedents_recall_text``, and on records with PII units
(:func:`textfree.metrics.privacy.pii_recovery`, micro shares) ``pii_exact`` / ``pii_fuzzy`` and ``n_pii_units``. The
no-input reference ``*_prior`` scores one constant guess, the medoid of 100 of the attacker's training texts (Pri-*
prompts share a template, so ROUGE-L is far from 0 without any payload). Beside them the formal guarantee
(``slot_epsilon``, ``prompt_epsilon``: mean slots x slot loss; NaN for clean payloads) and the training figures.
Trained inverters are reused when a finished run with the same training config exists (like ``ppft_stage2``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...attacks.learned import (
    LEARNED_INVERSION_REQUIRES,
    RESTORATION_REQUIRES,
    learned_inversion_attack,
    restoration_attack,
    score_reconstructions,
)
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...metrics.privacy import pii_recovery
from ...rng import seeded_generator
from ..cell import CellError
from ..inputs import record_private_text
from ..registry import RunContext, register_cell_kind
from ._grant import granted_threat, is_ppft_dataset
from .ppft import _TRAIN, stage2_model

__all__ = ["learned_inversion", "INVERSION_METRICS", "INVERSION_PARAMS"]

VARIANTS = ("unaware", "aware", "restoration")
INVERSION_METRICS = ("rouge_l", "rouge_l_recall", "bleu", "symptoms_recall_text", "antecedents_recall_text",
                     "rouge_l_prior", "symptoms_recall_text_prior", "antecedents_recall_text_prior",
                     "pii_exact", "pii_fuzzy", "pii_exact_prior", "pii_fuzzy_prior", "n_pii_units",
                     "slot_epsilon", "prompt_epsilon", "padded_slots", "n_eval", "eval_wall_s") + _TRAIN
INVERSION_PARAMS = {
    "variant": "unaware (trained on clean payloads), aware (on noisy payloads at epsilon) or restoration (no training)",
    "epsilon": "L2-Laplace epsilon of the evaluated payloads (and of aware training); null: clean payloads",
    "k": "pooling k (default: the init's / model's)",
    "init": "trained variants: a run directory (stage-1-aligned) or {encoder: DIR, decoder: DIR} (unaligned)",
    "model": "restoration: the served PPFT run directory; {epsilon} {k} are filled in",
    "out": "trained variants: run directory template; {variant} {epsilon} {k} are filled in",
    "epochs": "training epochs (default 6)",
    "max_target_tokens": "decoder tokens of the training targets (default 160)",
    "train_seed": "training seed (default 0)",
    "train_limit": "train on the first N training records only (default: all)",
    "train_text": "the attacker's text is public: these instruction sources (alpaca, lima, gsm8k:train; default: the Pri-* train part)",
    "train_text_limit": "with train_text: read at most N records of each source",
    "train_decoder": "trained variants: also train every base-decoder weight (full fine-tuning; default false: LoRA + projection)",
    "fixed_slots": "trained variants: the client pads every payload to ceil(max_private_tokens / k) slots, hiding the length (default false)",
    "max_private_tokens": "trained variants: the client cuts private text at this many encoder tokens (default: the init's)",
    "lr": "trained variants: peak learning rate (default: Stage2Config's)",
    "prior_sample": "training texts the no-input reference (their medoid) is chosen from (default 100)",
    "eval_limit": "evaluate the first N distinct held-out private texts (default 100)",
    "max_new_tokens": "generation length (default 160)",
}


def _params(cell: Any, point: dict) -> dict[str, Any]:
    p = dict(cell.resolve(point).params)
    variant = p.get("variant")
    if variant not in VARIANTS:
        raise CellError(f"variant must be one of {list(VARIANTS)}, got {variant!r}", field="params.variant")
    if variant == "restoration":
        if not isinstance(p.get("model"), str) or "init" in p or "out" in p:
            raise CellError("restoration takes `model` (a served PPFT run) and no init/out", field="params.model")
    else:
        init = p.get("init")
        ok = isinstance(init, str) or (isinstance(init, dict) and set(init) == {"encoder", "decoder"}
                                       and all(isinstance(v, str) and v for v in init.values()))
        if not ok or not isinstance(p.get("out"), str) or "model" in p:
            raise CellError("a trained variant takes `init` (a run directory or {encoder, decoder}) and `out`, not `model`", field="params.init")
    eps = p.get("epsilon")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0):
        raise CellError(f"epsilon must be a number > 0 or null, got {eps!r}", field="params.epsilon")
    if variant == "aware" and eps is None:
        raise CellError("the aware variant trains on noisy payloads: it needs an epsilon", field="params.epsilon")
    for name in ("train_limit", "train_text_limit"):
        v = p.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    if variant == "restoration" and ("train_decoder" in p or "lr" in p):
        raise CellError("restoration trains nothing: it takes no train_decoder or lr", field="params.train_decoder" if "train_decoder" in p else "params.lr")
    if not isinstance(p.setdefault("train_decoder", False), bool):
        raise CellError(f"train_decoder must be true or false, got {p['train_decoder']!r}", field="params.train_decoder")
    if not isinstance(p.setdefault("fixed_slots", False), bool):
        raise CellError(f"fixed_slots must be true or false, got {p['fixed_slots']!r}", field="params.fixed_slots")
    if variant == "restoration" and (p["fixed_slots"] or "max_private_tokens" in p):
        raise CellError("restoration uses the served model's client as it is: no fixed_slots or max_private_tokens",
                        field="params.fixed_slots" if p["fixed_slots"] else "params.max_private_tokens")
    tokens = p.get("max_private_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
        raise CellError(f"max_private_tokens must be an integer >= 1, got {tokens!r}", field="params.max_private_tokens")
    lr = p.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1):
        raise CellError(f"lr must be a number in (0, 1), got {lr!r}", field="params.lr")
    text = p.get("train_text")
    if text is not None:
        if not isinstance(text, list) or not text or not all(isinstance(s, str) and s for s in text):
            raise CellError(f"train_text must be a non-empty list of source names like [alpaca, 'gsm8k:train'], got {text!r}",
                            field="params.train_text")
        if variant == "restoration":
            raise CellError("restoration trains nothing: it takes no train_text", field="params.train_text")
    elif p.get("train_text_limit") is not None:
        raise CellError("train_text_limit applies to train_text only", field="params.train_text_limit")
    for name, default in (("epochs", 6), ("max_target_tokens", 160), ("eval_limit", 100), ("max_new_tokens", 160), ("train_seed", 0),
                          ("prior_sample", 100)):
        v = p.setdefault(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "train_seed" else 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    return p


def _threat(cell: Any, point: dict, p: dict[str, Any]) -> ThreatModel:
    variant = p["variant"]
    needs = RESTORATION_REQUIRES if variant == "restoration" else LEARNED_INVERSION_REQUIRES
    if variant != "restoration" and p.get("train_text") is None:
        needs = needs.union(ThreatModel(training_text="in_domain"))  # it trains on the Pri-* train part
    if variant == "aware":
        needs = needs.union(NOISE_AWARE_REQUIRES)
    return granted_threat(cell.resolve(point).attack, "learned_inversion", f"learned_inversion ({variant})", needs)


def _validate(cell: Any, points: list[dict]) -> None:
    if cell.dataset is None:
        raise CellError("learned_inversion needs a dataset: Pri-* (pri-ddx, pri-slja) or free text with PII units (pupa, presidio)",
                        field="dataset")
    if cell.mechanism is not None:
        raise CellError("learned_inversion takes the noise in params.epsilon (L2-Laplace, as the model), not `mechanism`", field="mechanism")
    for point in points:
        p = _params(cell, point)
        if not is_ppft_dataset(cell.dataset) and p["variant"] != "restoration" and p.get("train_text") is None:
            raise CellError(f"{cell.dataset!r} is only evaluated: a trained inverter on it needs params.train_text (the attacker's public text)",
                            field="params.train_text")
        _threat(cell, point, p)


def _unaligned_init(init: dict[str, str], out: str, k: int | None) -> str:
    """Build (once) an init run: ``init['encoder']``, a fresh projection, the pretrained decoder + fresh LoRA."""
    from ...ppft.model import TextFreeLM

    path = Path(f"{out}-init")
    if not (path / "textfree_config.json").is_file():
        TextFreeLM.build(init["decoder"], encoder=init["encoder"], k=k or 4).save(path)
    return str(path)


def _model(cell: Any, p: dict[str, Any], context: RunContext):
    from ...ppft.model import TextFreeLM
    from ...ppft.train import Stage2Config

    if p["variant"] == "restoration":
        model = str(p["model"]).format(epsilon=p.get("epsilon"), k=p.get("k"))
        return context.cached(("model", model), lambda: (TextFreeLM.load(model), {}))
    epsilon = p.get("epsilon") if p["variant"] == "aware" else None
    out = str(p["out"]).format(variant=p["variant"], epsilon=epsilon, k=p.get("k"))
    init = p["init"] if isinstance(p["init"], str) else _unaligned_init(p["init"], out, p.get("k"))
    dataset = cell.dataset if is_ppft_dataset(cell.dataset) else Stage2Config.dataset  # unused with train_text
    cfg = Stage2Config(init=init, out=out, dataset=dataset, epsilon=epsilon, k=p.get("k"), tasks=["restore"],
                       epochs=p["epochs"], max_target_tokens=p["max_target_tokens"], seed=p["train_seed"], limit=p.get("train_limit"),
                       restore_text=p.get("train_text"), restore_text_limit=p.get("train_text_limit"),
                       train_decoder=p["train_decoder"] or None, fixed_slots=p["fixed_slots"] or None,
                       max_private_tokens=p.get("max_private_tokens"), progress=False, **({"lr": p["lr"]} if p.get("lr") else {}))

    return stage2_model(cfg, cell.name, context)


def _prior_text(dataset: str, p: dict[str, Any]) -> str:
    """The no-input reference: the attacker's best constant guess, the medoid of ``params.prior_sample`` of its own
    training texts (:func:`~textfree.attacks.learned.medoid_text` over ``train_text`` or the PPFT train part)."""
    from ...attacks.learned import medoid_text
    from ...data import mcqa_prompt, ppft_split
    from ...ppft.batches import general_examples

    if p.get("train_text") is not None:
        texts = [ex.private for ex in general_examples(p["train_text"], limit_per_source=p.get("train_text_limit"))]
    else:
        texts = [mcqa_prompt(r).private for r in ppft_split(dataset)["train"]]
    return medoid_text(texts, p["prior_sample"])


def _evaluated(cell: Any, limit: int, fits) -> list[tuple[str, Any]]:
    """(text, record) of the first ``limit`` distinct evaluated texts the client does not cut: the Pri-* held-out
    split, or the dataset's records (``cell.split``)."""
    from ...data import load_dataset, ppft_split

    records = ppft_split(cell.dataset)["heldout"] if is_ppft_dataset(cell.dataset) else load_dataset(cell.dataset, split=cell.split)
    seen: dict[str, Any] = {}
    for r in records:
        text = record_private_text(r)
        if text not in seen and fits(text):
            seen[text] = r
            if len(seen) == limit:
                break
    if not seen:
        raise CellError(f"no text of {cell.dataset!r} fits the model's private-token limit", field="dataset")
    return list(seen.items())


@register_cell_kind("learned_inversion", metrics=INVERSION_METRICS, params=INVERSION_PARAMS, validate=_validate,
                    help="ROUGE-L of learned inverters (noise-unaware, noise-aware, stage-1-aligned) and of the restoration instruction on PPFT payloads.")
def learned_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    import time

    from ...ppft.batches import RESTORE_INSTRUCTION

    p = _params(cell, point)
    threat = _threat(cell, point, p)
    lm, train_metrics = _model(cell, p, context)
    rows = context.cached(("evaluated", cell.dataset, cell.split, p["eval_limit"], lm.config.max_private_tokens),
                          lambda: _evaluated(cell, p["eval_limit"], lm.sends_whole))
    texts = [t for t, _ in rows]
    epsilon = p.get("epsilon")
    privatizer = lm.privatizer(epsilon, k=p.get("k"))
    t0 = time.perf_counter()
    payload = privatizer.privatize(texts, generator=seeded_generator(seed, warn=False) if epsilon is not None else None,
                                   public=[RESTORE_INSTRUCTION] * len(texts))
    attack = restoration_attack if p["variant"] == "restoration" else learned_inversion_attack
    recon = attack(lm.server, payload, threat=threat, max_new_tokens=p["max_new_tokens"])
    wall = time.perf_counter() - t0
    for text, guess in list(zip(texts, recon))[:3]:
        context.logger.info("%s %s eps=%s seed %d\n  prompt: %s\n  recon:  %s", cell.name, p["variant"], epsilon, seed, text, guess)
    attributes = None
    if all("symptoms" in r.attributes for _, r in rows):
        attributes = {"symptoms": [r.attributes["symptoms"] for _, r in rows],
                      "antecedents": [r.attributes["antecedents"] for _, r in rows]}
    out = score_reconstructions(recon, texts, attributes)
    key = ("prior_text", cell.dataset, p["prior_sample"], tuple(p.get("train_text") or ()), p.get("train_text_limit"))
    prior = context.cached(key, lambda: _prior_text(cell.dataset, p))
    out |= {f"{k}_prior": v for k, v in score_reconstructions([prior] * len(texts), texts, attributes).items()
            if k in ("rouge_l", "symptoms_recall_text", "antecedents_recall_text")}
    units = [list(getattr(r, "pii", None) or []) for _, r in rows]
    if any(units):
        found, constant = pii_recovery(units, recon), pii_recovery(units, [prior] * len(texts))
        out |= {"pii_exact": found["exact"]["micro"], "pii_fuzzy": found["fuzzy"]["micro"],
                "pii_exact_prior": constant["exact"]["micro"], "pii_fuzzy_prior": constant["fuzzy"]["micro"],
                "n_pii_units": float(found["n_units"])}
    nan = math.nan
    slot = privatizer.privatization.slot_loss().epsilon if epsilon is not None else nan
    slots = payload.lengths if epsilon is not None else []
    pad_to = privatizer.privatization.pad_to  # a fixed_slots model's client hides the count: another mechanism
    out |= {"slot_epsilon": slot, "prompt_epsilon": slot * sum(slots) / len(slots) if slots else nan,
            "padded_slots": float(pad_to) if pad_to is not None else nan, "n_eval": float(len(texts)), "eval_wall_s": wall}
    return out | train_metrics
